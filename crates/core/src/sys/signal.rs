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
/// SA_RESTART`, every catchable signal blocked while it runs (so that no
/// application handler runs on top of a fill in progress), and returns the
/// action it replaced.
pub(crate) fn install_sigbus(handler: SigAction) -> Result<Action, i32> {
    // SAFETY: zeroed sigaction structs are valid (no handler, empty
    // mask); every field the kernel reads is set below.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    // SAFETY: sa_mask is a valid sigset_t owned by `new`.
    unsafe { libc::sigfillset(&mut new.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to valid sigaction structs.
    if unsafe { libc::sigaction(libc::SIGBUS, &new, &mut old) } != 0 {
        return Err(errno());
    }
    Ok(Action(old))
}

/// Registers `child` to run in the child of every later `fork`
/// (`pthread_atfork`), on the forking thread, before `fork` returns there.
pub(crate) fn at_fork_child(child: extern "C" fn()) -> Result<(), i32> {
    // SAFETY: registers a handler that lives as long as the process (a
    // function, not a closure); no prepare or parent handler.
    match unsafe { libc::pthread_atfork(None, None, Some(child)) } {
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

    /// Puts the action back as SIGBUS's action.
    pub(crate) fn restore_sigbus(&self) {
        // SAFETY: a valid sigaction struct, as returned by the kernel.
        unsafe { libc::sigaction(libc::SIGBUS, &self.0, std::ptr::null_mut()) };
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
            for s in 1..libc::SIGRTMAX() {
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

/// Sets the calling thread's signal mask to `set`.
pub(crate) fn set_mask(set: &libc::sigset_t) {
    // SAFETY: `set` is a valid sigset_t.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, set, std::ptr::null_mut()) };
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
pub(crate) fn sigbus_thread(tid: u32, addr: usize) -> Result<(), i32> {
    // SAFETY: a zeroed siginfo is valid; getpid cannot fail.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = libc::SIGBUS;
    info.si_code = libc::SI_QUEUE;
    // The union of a siginfo follows its three ints, aligned to a
    // pointer; a fault's address is its first field.
    let union_at =
        (3 * std::mem::size_of::<libc::c_int>()).next_multiple_of(std::mem::align_of::<usize>());
    // SAFETY: within the siginfo (128 bytes), aligned for a pointer.
    unsafe {
        (&mut info as *mut libc::siginfo_t)
            .cast::<u8>()
            .add(union_at)
            .cast::<usize>()
            .write(addr)
    };
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

/// A stack for the service to run on: anonymous memory with a guard page
/// below it, committed by the kernel as it is touched.
pub(crate) struct ServiceStack {
    base: usize,
    len: usize,
}

impl ServiceStack {
    /// A stack of `len` bytes (a multiple of 4 KiB) above a guard page.
    pub(crate) fn new(len: usize) -> Result<ServiceStack, i32> {
        let total = len + 4096;
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
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(p, 4096, libc::PROT_NONE) } != 0 {
            let e = errno();
            // SAFETY: the mapping just made.
            unsafe { libc::munmap(p, total) };
            return Err(e);
        }
        Ok(ServiceStack {
            base: p as usize,
            len: total,
        })
    }

    /// Whether `addr` lies in the stack (or its guard page).
    pub(crate) fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }

    /// The stack's top, 16-byte aligned.
    fn top(&self) -> usize {
        (self.base + self.len) & !15
    }
}

impl Drop for ServiceStack {
    fn drop(&mut self) {
        // SAFETY: the mapping this stack made; nothing runs on it now.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Calls `f(arg)` on `stack`, then switches back.
///
/// # Safety
/// No other thread runs on `stack` meanwhile; `f` must not unwind (it is
/// `extern "C"`: a panic aborts) and must not longjmp out.
pub(crate) unsafe fn call_on_stack(
    stack: &ServiceStack,
    f: unsafe extern "C" fn(*mut u8),
    arg: *mut u8,
) {
    let top = stack.top();
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
        let _ = stack;
        f(arg)
    }
}
