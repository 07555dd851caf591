//! What the in-thread fault service (`in_thread.rs`) needs from the
//! kernel and the CPU: the SIGBUS handler's installation, the faulting
//! access's kind from the signal context, futexes, the thread id, stacks
//! to run the service on, and the switch onto one.
//!
//! Everything here may run in a signal handler: system calls and plain
//! memory only; no allocation, no lock, no lazily initialised
//! thread-local.

use std::sync::atomic::AtomicU32;

use super::errno;

/// The signature of a `SA_SIGINFO` handler.
pub(crate) type SigAction = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Installs `handler` for SIGBUS with `SA_SIGINFO | SA_ONSTACK |
/// SA_RESTART`, every signal blocked while it runs (the C library's own
/// included: see [`full_set`]) but where it lets some in itself (while it
/// waits: see `in_thread.rs`), and returns the action it replaced.
pub(crate) fn install_sigbus(handler: SigAction) -> Result<Action, i32> {
    // SAFETY: zeroed sigaction structs are valid (no handler, empty
    // mask); every field the kernel reads is set below.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    new.sa_mask = full_set();
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to valid sigaction structs.
    if unsafe { libc::sigaction(libc::SIGBUS, &new, &mut old) } != 0 {
        return Err(errno());
    }
    Ok(Action(old))
}

/// Registers `prepare` to run in the forking thread before every later
/// `fork`, and `child` in the child after it (`pthread_atfork`).
pub(crate) fn at_fork(prepare: extern "C" fn(), child: extern "C" fn()) -> Result<(), i32> {
    // SAFETY: registers handlers that live as long as the process
    // (functions, not closures); no parent handler.
    match unsafe { libc::pthread_atfork(Some(prepare), None, Some(child)) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// A signal action as the kernel returned it: the one umio's SIGBUS
/// handler replaced, which it passes foreign signals on to.
pub(crate) struct Action(libc::sigaction);

// SAFETY: plain data (a handler's address, a mask, flags), only read.
unsafe impl Send for Action {}
// SAFETY: as above.
unsafe impl Sync for Action {}

impl Action {
    /// Whether the action is a function of the application's, rather than
    /// the default action (`SIG_DFL`) or `SIG_IGN`.
    pub(crate) fn is_handler(&self) -> bool {
        let h = self.0.sa_sigaction;
        !(h == libc::SIG_DFL || h == libc::SIG_IGN)
    }

    /// Whether the action is `SIG_IGN`.
    pub(crate) fn is_ignore(&self) -> bool {
        self.0.sa_sigaction == libc::SIG_IGN
    }

    /// Whether the action is a one-shot handler (`SA_RESETHAND`): the
    /// kernel restores the default action as it delivers the signal.
    pub(crate) fn resets(&self) -> bool {
        self.0.sa_flags & libc::SA_RESETHAND != 0
    }

    /// Runs the action's function as the kernel would have: with the mask
    /// it asked for added to the interrupted code's (and `sig` unless
    /// `SA_NODEFER`), with the arguments its flags ask for.
    ///
    /// # Safety
    /// [`is_handler`](Action::is_handler) holds; `sig`, `info` and `ctx`
    /// are the arguments of a `SA_SIGINFO` handler running now (`ctx` may
    /// be null: the mask is then left as it is).
    pub(crate) unsafe fn call(
        &self,
        sig: libc::c_int,
        info: *mut libc::siginfo_t,
        ctx: *mut libc::c_void,
    ) {
        let prev = &self.0;
        let h = prev.sa_sigaction;
        if !ctx.is_null() {
            // SAFETY: a SA_SIGINFO handler's third argument is its ucontext_t.
            let mut mask = unsafe { (*(ctx as *const libc::ucontext_t)).uc_sigmask };
            for s in 1..=libc::SIGRTMAX() {
                // SAFETY: valid sigset_t values.
                if unsafe { libc::sigismember(&prev.sa_mask, s) } == 1 {
                    // SAFETY: as above.
                    unsafe { libc::sigaddset(&mut mask, s) };
                }
            }
            if prev.sa_flags & libc::SA_NODEFER == 0 {
                // SAFETY: as above.
                unsafe { libc::sigaddset(&mut mask, sig) };
            }
            set_mask(&mask);
        }
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the application installed this SA_SIGINFO handler
            // (the caller checked it is a function).
            let f: SigAction = unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: the application installed this plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}

/// Makes the default action SIGBUS's action.
pub(crate) fn set_sigbus_default() {
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a valid sigaction struct.
    unsafe { libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut()) };
}

/// Whether SIGBUS's action is now the default action.
pub(crate) fn sigbus_is_default() -> bool {
    sigbus_action() == Some(libc::SIG_DFL)
}

/// SIGBUS's action now (`SIG_DFL`, `SIG_IGN` or a handler), if it can be
/// read.
fn sigbus_action() -> Option<libc::sighandler_t> {
    // SAFETY: a zeroed struct, filled by the kernel.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: queries the action into `cur`.
    let r = unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur) };
    (r == 0).then_some(cur.sa_sigaction)
}

/// Sends SIGBUS with `info` to the calling thread again
/// (`rt_tgsigqueueinfo`, or `tgkill` if refused): it is pending while the
/// handler blocks it and delivered, under the action then installed, when
/// the handler returns.
///
/// # Safety
/// `info` is the `siginfo_t` of a SIGBUS handler running now.
pub(crate) unsafe fn redeliver_sigbus(info: *const libc::siginfo_t) {
    // SAFETY: plain system calls on this process and thread; `info` is
    // valid (the caller's contract) and only read by the kernel.
    unsafe {
        let pid = libc::getpid();
        let tid = gettid() as libc::pid_t;
        if libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, libc::SIGBUS, info) != 0 {
            libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGBUS);
        }
    }
}

/// Writes `msg` to standard error with one `write(2)`: what a signal
/// handler may do to explain a death it cannot prevent.
pub(crate) fn write_stderr(msg: &[u8]) {
    // SAFETY: writes bytes we own to descriptor 2; a failure is ignored.
    unsafe { libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len()) };
}

/// The thread's alternate signal stack as the kernel saved it in a
/// handler's context, if one is set up and in use (`SS_AUTODISARM` off).
///
/// # Safety
/// `ctx` is null or the context of a `SA_SIGINFO` handler running now.
pub(crate) unsafe fn alt_stack_of(ctx: *const libc::c_void) -> Option<libc::stack_t> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a SA_SIGINFO handler's third argument is its ucontext_t.
    let st = unsafe { (*(ctx as *const libc::ucontext_t)).uc_stack };
    (st.ss_flags & (libc::SS_DISABLE | SS_AUTODISARM) == 0 && st.ss_size > 0).then_some(st)
}

/// `SS_AUTODISARM` (Linux 4.7), which `libc` does not define.
const SS_AUTODISARM: i32 = 1 << 31;

/// Sets the thread's alternate signal stack (`SS_DISABLE` in `st` turns
/// it off). Refused (and ignored) while the thread runs on it.
pub(crate) fn set_alt_stack(st: &libc::stack_t) {
    // SAFETY: a valid stack_t; the kernel checks it.
    unsafe { libc::sigaltstack(st, std::ptr::null_mut()) };
}

/// Puts the alternate signal stack `st` back, with `SS_AUTODISARM` (the
/// kernel turns it off while a handler runs on it, Linux 4.7), or as it
/// was where that is refused. With it, the handler's context is changed
/// too, since the kernel puts the stack back from there when the handler
/// returns.
///
/// # Safety
/// `ctx` is null or the context of a `SA_SIGINFO` handler running now,
/// and `st` the alternate stack saved there.
pub(crate) unsafe fn rearm_alt_stack(ctx: *mut libc::c_void, mut st: libc::stack_t) {
    st.ss_flags = SS_AUTODISARM;
    // SAFETY: a valid stack_t; the kernel checks it.
    if unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) } != 0 {
        st.ss_flags = 0;
        set_alt_stack(&st);
        return;
    }
    if !ctx.is_null() {
        // SAFETY: the caller's contract; the kernel accepts the flag (it
        // just did), so `rt_sigreturn` takes it.
        unsafe { (*(ctx as *mut libc::ucontext_t)).uc_stack.ss_flags = SS_AUTODISARM };
    }
}

/// A `stack_t` that turns the alternate signal stack off.
pub(crate) fn no_alt_stack() -> libc::stack_t {
    libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: libc::SS_DISABLE,
        ss_size: 0,
    }
}

/// The signal mask of the code a handler interrupted.
///
/// # Safety
/// `ctx` is the (non-null) context of a `SA_SIGINFO` handler running now.
pub(crate) unsafe fn interrupted_mask(ctx: *const libc::c_void) -> libc::sigset_t {
    // SAFETY: a SA_SIGINFO handler's third argument is its ucontext_t.
    unsafe { (*(ctx as *const libc::ucontext_t)).uc_sigmask }
}

/// The set of every signal, the C library's own (32 and 33) included,
/// which its `sigfillset` leaves out: so that a thread in umio's handler
/// has the mask of a thread the C library is starting or ending, which
/// the map-time check of other threads' masks passes over (`in_thread.rs`).
pub(crate) fn full_set() -> libc::sigset_t {
    // SAFETY: an empty set, its first 64 bits (the kernel's whole
    // `sigset_t`) set below.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `sigset_t` is at least 8 bytes, and any bits are valid.
    unsafe { (&mut all as *mut libc::sigset_t as *mut u64).write_unaligned(!0) };
    all
}

/// Blocks every signal in the calling thread.
pub(crate) fn block_all() {
    set_mask(&full_set());
}

/// The calling thread's `errno`, which a signal handler saves on entry.
pub(crate) fn errno_value() -> i32 {
    // SAFETY: the calling thread's errno, a live thread-local int.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`, as a signal handler restores it on
/// return so that the interrupted code does not see its own.
pub(crate) fn set_errno(value: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value };
}

/// Whether SIGBUS is blocked in the calling thread.
pub(crate) fn sigbus_blocked() -> bool {
    // SAFETY: an empty set, filled by the kernel.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: queries the calling thread's mask into `set`.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) };
    // SAFETY: `set` is a valid sigset_t.
    r == 0 && unsafe { libc::sigismember(&set, libc::SIGBUS) } == 1
}

/// Sets the calling thread's signal mask to `set`, exactly: with the
/// system call, not the C library's `pthread_sigmask`, which leaves its
/// own signals (32 and 33) out. The handler's mask then stays what the
/// kernel made it (every signal), which the map-time check of other
/// threads' masks tells from an application's (`in_thread.rs`).
pub(crate) fn set_mask(set: &libc::sigset_t) {
    // SAFETY: `set` is a valid sigset_t, of which the kernel reads its
    // 8-byte `sigset_t`.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            set as *const libc::sigset_t,
            std::ptr::null_mut::<libc::sigset_t>(),
            8usize,
        )
    };
}

/// What the kernel says of a SIGBUS.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BusFault {
    /// The faulting address.
    pub addr: usize,
    /// `si_code`: `BUS_ADRERR` for a userfaultfd fault in SIGBUS mode.
    pub code: i32,
    /// Whether the access was a write, where the architecture says.
    pub write: Option<bool>,
}

/// Reads the fault from a handler's arguments.
///
/// # Safety
/// `info` and `ctx` must be the arguments of a `SA_SIGINFO` handler
/// running now.
pub(crate) unsafe fn bus_fault(info: *const libc::siginfo_t, ctx: *const libc::c_void) -> BusFault {
    // SAFETY: the kernel's siginfo for this signal, valid during the handler.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    BusFault {
        addr,
        code,
        // SAFETY: forwarded from the caller.
        write: unsafe { fault_was_write(ctx) },
    }
}

/// The page-fault error code's write bit, which x86-64 saves in the
/// signal context (`REG_ERR`, bit 1: `X86_PF_WRITE`).
#[cfg(target_arch = "x86_64")]
unsafe fn fault_was_write(ctx: *const libc::c_void) -> Option<bool> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a SA_SIGINFO handler's third argument is its ucontext_t.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    Some(uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0)
}

/// Other architectures: unknown; the service fills the page clean and a
/// write faults once more (a write-protect fault).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn fault_was_write(_ctx: *const libc::c_void) -> Option<bool> {
    None
}

/// The calling thread's id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Sends SIGBUS to thread `tid` of this process, for its access at `addr`
/// that umio refuses (a write its store cannot take): `si_addr` is the
/// address, as in a fault's SIGBUS; `si_code` is `SI_QUEUE`, since only a
/// thread itself may send a fault's codes. A thread blocked on the fault
/// in the kernel takes it before it retries the access.
///
/// The kernel forces a fault's SIGBUS: ignored or blocked, it is
/// delivered under the default action all the same, which ends the
/// process. A sent one would be dropped (ignored) or left pending
/// (blocked), and the refused write would fault again for ever. So where
/// SIGBUS is ignored, the default action is put back first; where the
/// thread blocks it, it is sent to the process (a thread that does not
/// block it takes it, under the default action, and the process ends, as
/// it would have under the kernel). Not from a signal handler.
pub(crate) fn sigbus_thread(tid: u32, addr: usize) -> Result<(), i32> {
    if sigbus_action() == Some(libc::SIG_IGN) {
        set_sigbus_default();
    }
    if thread_blocks_sigbus(tid) {
        set_sigbus_default();
        // SAFETY: kill takes no pointer.
        let r = unsafe { libc::kill(libc::getpid(), libc::SIGBUS) };
        return if r == 0 { Ok(()) } else { Err(errno()) };
    }
    // SAFETY: a zeroed siginfo is valid; getpid cannot fail.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = libc::SIGBUS;
    info.si_code = libc::SI_QUEUE;
    // The union of a siginfo follows its three ints, aligned to a
    // pointer; a fault's address is its first field.
    let union_at =
        (3 * std::mem::size_of::<libc::c_int>()).next_multiple_of(std::mem::align_of::<usize>());
    // SAFETY: within the siginfo (128 bytes), aligned for a pointer; the
    // mark is the word after the address (`sigqueue`'s value).
    unsafe {
        let at = (&mut info as *mut libc::siginfo_t)
            .cast::<u8>()
            .add(union_at);
        at.cast::<usize>().write(addr);
        at.add(std::mem::size_of::<usize>())
            .cast::<usize>()
            .write(REFUSAL_MARK);
    }
    // SAFETY: a valid siginfo for a signal to a thread of this process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid as libc::pid_t,
            libc::SIGBUS,
            &info as *const libc::siginfo_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// The word that marks a SIGBUS [`sigbus_thread`] sent (after `si_addr`):
/// umio's own SIGBUS handler, where a process has one (the in-thread
/// service), takes it for the fault it stands for, not for a `kill`.
const REFUSAL_MARK: usize = 0x7573_6d69_6f5f_7772;

/// Whether `info` is a SIGBUS [`sigbus_thread`] sent: a refused write's,
/// to be treated as that write's fault (the kernel forces a fault's
/// SIGBUS: ignoring it does not let the write through).
///
/// # Safety
/// `info` is the `siginfo_t` of a SIGBUS handler running now.
pub(crate) unsafe fn is_refused_write(info: *const libc::siginfo_t) -> bool {
    let union_at =
        (3 * std::mem::size_of::<libc::c_int>()).next_multiple_of(std::mem::align_of::<usize>());
    // SAFETY: the handler's siginfo (128 bytes); the word read lies within
    // its union, aligned for a pointer.
    unsafe {
        (*info).si_code == libc::SI_QUEUE
            && info
                .cast::<u8>()
                .add(union_at + std::mem::size_of::<usize>())
                .cast::<usize>()
                .read()
                == REFUSAL_MARK
    }
}

/// Whether thread `tid` of this process blocks SIGBUS.
fn thread_blocks_sigbus(tid: u32) -> bool {
    let bus = 1u64 << (libc::SIGBUS - 1);
    blocked_mask(std::path::Path::new(&format!("/proc/self/task/{tid}")))
        .is_some_and(|m| m & bus != 0)
}

/// The blocked-signal mask of the thread whose `/proc` directory is `task`
/// (`SigBlk` of its `status`; bit `n - 1` for signal `n`), if it can be
/// read. Allocates: not from a signal handler.
pub(crate) fn blocked_mask(task: &std::path::Path) -> Option<u64> {
    let status = std::fs::read_to_string(task.join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
}

/// Sleeps while `word` holds `expected`, at most `timeout_ns`.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word; `ts` a valid timespec.
    // A spurious return (EINTR, EAGAIN, the timeout) is the caller's to
    // handle: it looks again.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes every thread sleeping on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// Stacks for the service to run on: one anonymous mapping holding
/// `count` stacks, each above a guard page, committed by the kernel as
/// they are touched. One mapping, so that the stack an address lies in is
/// a subtraction and a division away (a handler's first question: is it
/// nested in another's service?).
pub(crate) struct ServiceStacks {
    base: usize,
    /// Bytes per stack, with its guard page.
    stride: usize,
    count: usize,
}

const GUARD: usize = 4096;

impl ServiceStacks {
    /// `count` stacks of `len` bytes (a multiple of 4 KiB) each.
    pub(crate) fn new(count: usize, len: usize) -> Result<ServiceStacks, i32> {
        let stride = len + GUARD;
        let total = stride * count;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        let stacks = ServiceStacks {
            base: p as usize,
            stride,
            count,
        };
        for i in 0..count {
            // SAFETY: the lowest page of stack `i`, in the mapping just made.
            if unsafe {
                libc::mprotect(
                    (p as usize + i * stride) as *mut libc::c_void,
                    GUARD,
                    libc::PROT_NONE,
                )
            } != 0
            {
                return Err(errno());
            }
        }
        Ok(stacks)
    }

    /// The stack `addr` lies in (or in whose guard page), if any.
    pub(crate) fn index_of(&self, addr: usize) -> Option<usize> {
        let off = addr.wrapping_sub(self.base);
        (off < self.stride * self.count).then_some(off / self.stride)
    }

    /// Stack `i`'s top, 16-byte aligned.
    pub(crate) fn top(&self, i: usize) -> usize {
        (self.base + (i + 1) * self.stride) & !15
    }
}

impl Drop for ServiceStacks {
    fn drop(&mut self) {
        // SAFETY: the mapping these stacks made; nothing runs on it now.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.stride * self.count) };
    }
}

/// The caller's stack pointer, near enough: the address of a local.
#[inline(always)]
pub(crate) fn stack_pointer() -> usize {
    let here = 0u8;
    std::hint::black_box(&here) as *const u8 as usize
}

/// Calls `f(arg)` on the stack whose top is `top` (see
/// [`ServiceStacks::top`]), then switches back.
///
/// # Safety
/// `top` is the top of a stack no other code runs on meanwhile; `f` must
/// not unwind (it is `extern "C"`: a panic aborts) and must not longjmp
/// out.
pub(crate) unsafe fn call_on_stack(top: usize, f: unsafe extern "C" fn(*mut u8), arg: *mut u8) {
    // SAFETY: the new stack pointer is the 16-byte aligned top of a
    // mapping of our own that no one else uses; `call` pushes the return
    // address, giving `f` the alignment the ABI expects. The old stack
    // pointer is kept in a callee-saved register, which `f` preserves.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    // SAFETY: as above; `blr` keeps the return address in the link
    // register, and the stack stays 16-byte aligned.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "mov x20, sp",
            "mov sp, {top}",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) f,
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: forwarded from the caller; runs on the current stack.
    unsafe {
        let _ = top;
        f(arg)
    }
}
