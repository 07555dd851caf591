//! The keeper's system calls (`crate::keeper` says what it is for): the
//! `clone(CLONE_VM)` that starts it, the socket messages (`SCM_RIGHTS`)
//! that tell it what to keep and forget, and the keeper's own code, raw
//! system calls only (see below), which writes the kept pages once the
//! program is gone.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::fork_lock::ForkMutex;

/// Ranges the keeper can hold at once: its table is memory of its own,
/// mapped beside its stack and touched only as far as it is used.
const CAPACITY: usize = 1 << 16;
/// The keeper's stack.
const STACK_BYTES: usize = 256 << 10;
/// The keeper's table.
const TABLE_BYTES: usize = CAPACITY * size_of::<Entry>();
const PAGE: usize = 4096;

const OP_KEEP: u64 = 1;
const OP_FORGET: u64 = 2;
const OP_QUIT: u64 = 3;

/// One message to the keeper.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Msg {
    op: u64,
    start: u64,
    len: u64,
    file_off: u64,
}

/// A range the keeper holds: `[start, start+len)` of the address space is
/// the file's bytes from `file_off`.
#[derive(Clone)]
pub(crate) struct Kept {
    start: usize,
    len: usize,
    file_off: u64,
    fd: Arc<OwnedFd>,
}

/// The program's side: the socket to its keeper and what it keeps.
pub(crate) struct Keeper {
    /// The process that started it (a fork child inherits the state).
    owner: i32,
    sock: OwnedFd,
    /// The socket's device and inode: a program that closed the
    /// descriptor behind umio's back (a loop closing every descriptor) may
    /// have another file at its number, not ours to close.
    sock_id: (u64, u64),
    pid: i32,
    /// A pidfd of the keeper (none where `pidfd_open` fails): what the
    /// watch waits on, and what reaps it without naming a pid that could
    /// have been reused.
    pidfd: Option<Arc<OwnedFd>>,
    /// Its stack and table, unmapped once it is reaped.
    stack: usize,
    /// Told to quit ([`all_written`]): its exit is no death.
    quit: bool,
    kept: Vec<Kept>,
    /// Keepers before this one, dead but not reaped yet.
    dead: Vec<Dead>,
}

impl Keeper {
    /// Takes over from `old`, the keeper this one replaces (dead, or told
    /// to quit): `old` and the dead keepers it had not reaped are this
    /// one's to reap, and its socket is closed.
    fn succeed(&mut self, old: Keeper) {
        self.dead = old.dead;
        self.dead.push(Dead {
            pid: old.pid,
            pidfd: old.pidfd,
            stack: old.stack,
        });
        close_sock(old.sock, old.sock_id);
    }
}

/// A keeper that died, to reap.
struct Dead {
    pid: i32,
    pidfd: Option<Arc<OwnedFd>>,
    stack: usize,
}

pub(crate) static KEEPER: ForkMutex<Option<Keeper>> = ForkMutex::new(None);
/// The socket's descriptor, for the fork child handler to close.
static SOCK: AtomicI32 = AtomicI32::new(-1);
/// The process whose watch thread runs (0: none; a fork child's differs
/// from its parent's): read and written under [`KEEPER`]'s lock.
static WATCHER: AtomicI32 = AtomicI32::new(0);
/// Keepers started because the one before died on its own.
static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// In a fork child (async-signal-safe): the parent's keeper is not ours;
/// the socket is closed so that the keeper sees the parent go.
pub(crate) fn after_fork() {
    let fd = SOCK.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's socket, ours to close.
        unsafe { libc::close(fd) };
    }
}

/// Keeps `[start, start+len)` (the memory of a shared, writable region
/// over `file` from `file_off`) for the file if the process dies. Starts
/// the keeper on the first call.
pub(crate) fn keep(start: usize, len: usize, file_off: u64, file: &File) -> Result<(), i32> {
    let fd = file
        .try_clone()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let kept = Kept {
        start,
        len,
        file_off,
        fd: Arc::new(OwnedFd::from(fd)),
    };
    let mut g = KEEPER.lock();
    let me = std::process::id() as i32;
    if g.as_ref().is_some_and(|k| k.owner != me) {
        // Inherited from the parent: its socket is closed already, and
        // its keeper is not ours to reap or watch.
        if let Some(k) = g.take() {
            std::mem::forget(k.sock);
        }
    }
    if g.as_ref().is_some_and(|k| k.quit) {
        // Told to quit (a mapping made after the exit hooks ran): a new
        // one keeps this mapping, and the old one, exiting, is reaped
        // once it has.
        let new = start_keeper(me)?;
        if let Some(old) = g.replace(new) {
            g.as_mut().expect("replaced above").succeed(old);
        }
    }
    if g.is_none() {
        *g = Some(start_keeper(me)?);
    }
    let k = g.as_mut().expect("started above");
    reap_dead(k);
    if k.kept.len() >= CAPACITY / 2 {
        return Err(libc::ENOSPC);
    }
    send_or_restart(k, &kept)?;
    k.kept.push(kept);
    let watch = k.pidfd.is_some() && WATCHER.load(Ordering::SeqCst) != me;
    if watch {
        WATCHER.store(me, Ordering::SeqCst);
    }
    drop(g);
    if watch {
        spawn_watch(me);
    }
    Ok(())
}

/// Starts the thread that waits for the keeper's death and starts another
/// ([`watch`]), `WATCHER` set to `me` already.
fn spawn_watch(me: i32) {
    let spawned = std::thread::Builder::new()
        .name("umio-keeper-watch".into())
        .stack_size(64 << 10)
        .spawn(move || watch(me));
    if let Err(e) = spawned {
        let _g = KEEPER.lock();
        if WATCHER.load(Ordering::SeqCst) == me {
            WATCHER.store(0, Ordering::SeqCst);
        }
        log::warn!(
            "umio: no thread to watch the keeper ({e}): if it is killed, a new one starts \
             only at the next map or unmap of a kept mapping"
        );
    }
}

/// The watch: waits for the keeper to exit and, unless it was told to
/// quit, starts another that keeps what it kept, so that a keeper killed
/// on its own (a signal to it) does not leave the program unkept until its
/// next map or unmap. Returns when there is nothing to watch.
fn watch(me: i32) {
    // No signal of the program's is handled here. Every signal, the C
    // library's own included (`block_all`): a thread that blocked only
    // what `sigfillset` gives would look like the program's own thread
    // blocking SIGBUS, and the in-thread service would refuse every map.
    crate::sys::signal::block_all();
    loop {
        let (pid, pidfd) = {
            let g = KEEPER.lock();
            let current = g
                .as_ref()
                .filter(|k| k.owner == me && !k.quit)
                .and_then(|k| Some((k.pid, k.pidfd.clone()?)));
            match current {
                Some(c) if WATCHER.load(Ordering::SeqCst) == me => c,
                _ => {
                    if WATCHER.load(Ordering::SeqCst) == me {
                        WATCHER.store(0, Ordering::SeqCst);
                    }
                    return;
                }
            }
        };
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; readable once the keeper has exited.
        while unsafe { libc::poll(&mut p, 1, -1) } != 1 {}
        let mut g = KEEPER.lock();
        let Some(k) = g.as_mut().filter(|k| k.owner == me) else {
            continue;
        };
        // It exited: reaped here if a map or unmap that found it gone
        // replaced it already.
        reap_dead(k);
        if k.pid != pid || k.quit {
            continue;
        }
        if let Err(e) = restart(k) {
            log::error!(
                "umio: no new keeper (errno {e}): what the mappings that survive process death \
                 have not written back is lost if the process is killed; another is tried at \
                 the next map or unmap"
            );
            // Not tried again in a loop here: the next map or unmap tries
            // and starts another watch.
            WATCHER.store(0, Ordering::SeqCst);
            return;
        }
    }
}

/// What [`forget`] took out of the keeper, for [`restore`] if the memory
/// stays after all.
#[must_use]
pub(crate) struct Forgotten(Vec<Kept>);

/// Before umio unmaps or replaces `[start, start+len)`: the keeper no
/// longer writes it. Nothing if it keeps none of it.
pub(crate) fn forget(start: usize, len: usize) -> Forgotten {
    let mut g = KEEPER.lock();
    let me = std::process::id() as i32;
    let Some(k) = g.as_mut().filter(|k| k.owner == me) else {
        return Forgotten(Vec::new());
    };
    let end = start + len;
    if !k
        .kept
        .iter()
        .any(|e| e.start < end && start < e.start + e.len)
    {
        return Forgotten(Vec::new());
    }
    let mut gone = Vec::new();
    let mut left = Vec::with_capacity(k.kept.len() + 1);
    for e in k.kept.drain(..) {
        let e_end = e.start + e.len;
        if e_end <= start || end <= e.start {
            left.push(e);
            continue;
        }
        let (cut_start, cut_end) = (e.start.max(start), e_end.min(end));
        gone.push(Kept {
            start: cut_start,
            len: cut_end - cut_start,
            file_off: e.file_off + (cut_start - e.start) as u64,
            fd: e.fd.clone(),
        });
        if e.start < cut_start {
            left.push(Kept {
                len: cut_start - e.start,
                ..e.clone()
            });
        }
        if cut_end < e_end {
            left.push(Kept {
                start: cut_end,
                len: e_end - cut_end,
                file_off: e.file_off + (cut_end - e.start) as u64,
                fd: e.fd.clone(),
            });
        }
    }
    k.kept = left;
    let msg = Msg {
        op: OP_FORGET,
        start: start as u64,
        len: len as u64,
        file_off: 0,
    };
    if send(&k.sock, &msg, None).is_err() {
        // The keeper is gone: a new one keeps what is left.
        let _ = restart(k);
    }
    Forgotten(gone)
}

/// The memory [`forget`] was called for stays the region's after all (its
/// `munmap` failed): keeps it again.
pub(crate) fn restore(f: Forgotten) {
    if f.0.is_empty() {
        return;
    }
    let mut g = KEEPER.lock();
    let me = std::process::id() as i32;
    let Some(k) = g.as_mut().filter(|k| k.owner == me) else {
        return;
    };
    for e in f.0 {
        if send_or_restart(k, &e).is_ok() {
            k.kept.push(e);
        }
    }
}

/// Every kept range was written back and the process is exiting: the
/// keeper quits without writing (nothing left to write, and a file that
/// another program changes after this one exited must not be overwritten).
pub fn all_written() {
    let mut g = KEEPER.lock();
    let me = std::process::id() as i32;
    if let Some(k) = g.as_mut().filter(|k| k.owner == me) {
        let _ = send(
            &k.sock,
            &Msg {
                op: OP_QUIT,
                ..Msg::default()
            },
            None,
        );
        k.kept.clear();
        k.quit = true;
    }
}

/// The keeper's process id, if this process has one running.
pub fn keeper_pid() -> Option<i32> {
    let g = KEEPER.lock();
    let me = std::process::id() as i32;
    g.as_ref().filter(|k| k.owner == me).map(|k| k.pid)
}

fn send_or_restart(k: &mut Keeper, e: &Kept) -> Result<(), i32> {
    let msg = Msg {
        op: OP_KEEP,
        start: e.start as u64,
        len: e.len as u64,
        file_off: e.file_off,
    };
    match send(&k.sock, &msg, Some(e.fd.as_raw_fd())) {
        Ok(()) => Ok(()),
        Err(libc::ENOSPC) => Err(libc::ENOSPC),
        Err(_) => {
            restart(k)?;
            send(&k.sock, &msg, Some(e.fd.as_raw_fd()))
        }
    }
}

/// The keeper died (killed on its own): a new one keeps what the old one
/// kept.
fn restart(k: &mut Keeper) -> Result<(), i32> {
    log::warn!(
        "umio: the keeper process {} is gone; starting another",
        k.pid
    );
    let new = start_keeper(k.owner)?;
    RESTARTS.fetch_add(1, Ordering::Relaxed);
    let mut old = std::mem::replace(k, new);
    k.kept = std::mem::take(&mut old.kept);
    k.succeed(old);
    reap_dead(k);
    for e in k.kept.clone() {
        let msg = Msg {
            op: OP_KEEP,
            start: e.start as u64,
            len: e.len as u64,
            file_off: e.file_off,
        };
        send(&k.sock, &msg, Some(e.fd.as_raw_fd()))?;
    }
    Ok(())
}

/// Keepers started because the one before died on its own (killed by a
/// signal to it), since the process started: each was logged too.
pub fn keeper_restarts() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

/// The device and inode of `fd` (zeros if `fstat` fails).
fn file_id(fd: RawFd) -> (u64, u64) {
    // SAFETY: a zeroed stat is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return (0, 0);
    }
    (st.st_dev as u64, st.st_ino as u64)
}

/// Closes a dead keeper's socket, if its descriptor is still that socket.
fn close_sock(sock: OwnedFd, id: (u64, u64)) {
    if file_id(sock.as_raw_fd()) == id {
        drop(sock);
    } else {
        // Closed behind our back: the number is someone else's now.
        std::mem::forget(sock);
    }
}

/// Reaps the dead keepers of `k` that have exited.
fn reap_dead(k: &mut Keeper) {
    k.dead.retain(|d| !reap(d));
}

/// Reaps `old`, a keeper that died, if it has exited, and unmaps its
/// stack once it is reaped. Whether it was.
fn reap(old: &Dead) -> bool {
    let reaped = match &old.pidfd {
        Some(fd) => {
            let flags = libc::WEXITED | libc::__WCLONE | libc::WNOHANG;
            // SAFETY: a zeroed siginfo_t is valid.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            loop {
                // SAFETY: waits for our own clone child (no exit signal:
                // __WCLONE) named by its pidfd.
                let r = unsafe {
                    libc::waitid(
                        libc::P_PIDFD,
                        fd.as_raw_fd() as libc::id_t,
                        &mut info,
                        flags,
                    )
                };
                if r == 0 || crate::sys::errno() != libc::EINTR {
                    // SAFETY: the pid field of a waitid result.
                    break r == 0 && unsafe { info.si_pid() } == old.pid;
                }
            }
        }
        None => {
            let mut status = 0;
            // SAFETY: waits for our own clone child (no exit signal: __WCLONE).
            let r = unsafe { libc::waitpid(old.pid, &mut status, libc::__WCLONE | libc::WNOHANG) };
            r == old.pid
        }
    };
    if reaped {
        // Nothing runs on it any more.
        let _ = crate::sys::mm::unmap(old.stack, STACK_BYTES + TABLE_BYTES);
    }
    reaped
}

fn send(sock: &OwnedFd, msg: &Msg, fd: Option<RawFd>) -> Result<(), i32> {
    let mut iov = libc::iovec {
        iov_base: msg as *const Msg as *mut libc::c_void,
        iov_len: size_of::<Msg>(),
    };
    // Room for one descriptor (CMSG_SPACE(4) is 24 on 64-bit Linux).
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; its pointers are set below.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        hdr.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE computes a size.
        hdr.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
        // SAFETY: the control buffer holds one header and one descriptor.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: `hdr` names live buffers.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            break;
        }
        let e = crate::sys::errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
    if msg.op != OP_KEEP {
        return Ok(());
    }
    // A range to keep is acknowledged once the keeper holds it (1), or
    // refused (0: its table is full), so that when the mapping call
    // returns, the keeper has the file.
    let mut ack = 0u8;
    loop {
        // SAFETY: one byte into `ack`.
        let r = unsafe { libc::recv(sock.as_raw_fd(), (&mut ack as *mut u8).cast(), 1, 0) };
        match r {
            1 if ack == 1 => return Ok(()),
            1 => return Err(libc::ENOSPC),
            0 => return Err(libc::EPIPE),
            _ => {
                let e = crate::sys::errno();
                if e != libc::EINTR {
                    return Err(e);
                }
            }
        }
    }
}

/// What the keeper starts with, at the top of its stack.
#[repr(C)]
struct Args {
    sock: i32,
    parent: i32,
    /// `CAPACITY` entries (zeros).
    table: *mut Entry,
}

/// Starts a keeper for process `owner` (this one).
fn start_keeper(owner: i32) -> Result<Keeper, i32> {
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = owner;
        return Err(libc::ENOSYS);
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(crate::sys::errno());
        }
        // SAFETY: fresh descriptors, ours.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The stack: unmapped only once the keeper is reaped (it may
        // outlive every runtime), not inherited by fork children.
        let stack = crate::sys::mm::map_anonymous(STACK_BYTES + TABLE_BYTES, PAGE, true)?;
        let top = stack + STACK_BYTES - 64;
        let args = top as *mut Args;
        // SAFETY: the top of the fresh stack, ours.
        unsafe {
            args.write(Args {
                sock: theirs.as_raw_fd(),
                parent: owner,
                table: (stack + STACK_BYTES) as *mut Entry,
            })
        };
        // The child starts with every signal blocked (it inherits this
        // thread's mask): no handler of the program ever runs on it.
        // SAFETY: a zeroed sigset_t is valid.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: sigset_t values and this thread's mask, put back below.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child shares the address space (CLONE_VM) and runs
        // `keeper_main` on its own stack, which makes raw system calls
        // only and touches nothing of ours but its arguments and, once we
        // are gone, the kept regions. No exit signal: the program's
        // `wait` does not see it (`__WCLONE`).
        let pid = unsafe {
            libc::clone(
                keeper_main,
                (top - 64) as *mut libc::c_void,
                libc::CLONE_VM,
                args.cast(),
            )
        };
        let clone_errno = crate::sys::errno();
        // SAFETY: puts back the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        if pid < 0 {
            let e = clone_errno;
            let _ = crate::sys::mm::unmap(stack, STACK_BYTES + TABLE_BYTES);
            return Err(e);
        }
        drop(theirs);
        // Not reaped by anyone but us: the pid is still the keeper's.
        // SAFETY: pidfd_open takes no pointer.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = (pidfd >= 0).then(|| {
            // SAFETY: a fresh descriptor (close-on-exec), ours.
            Arc::new(unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) })
        });
        SOCK.store(ours.as_raw_fd(), Ordering::SeqCst);
        log::info!("umio: keeper process {pid} started");
        Ok(Keeper {
            owner,
            sock_id: file_id(ours.as_raw_fd()),
            sock: ours,
            pid,
            pidfd,
            stack,
            quit: false,
            kept: Vec::new(),
            dead: Vec::new(),
        })
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod raw {
    //! System calls without the C library: no `errno` (thread-local
    //! storage the keeper must not touch). Returns the kernel's value
    //! (`-errno` on failure).
    #[inline(always)]
    pub(super) unsafe fn sc(n: libc::c_long, a: [usize; 6]) -> isize {
        let r: isize;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller passes a valid system call.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => r,
                in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
                in("r10") a[3], in("r8") a[4], in("r9") a[5],
                lateout("rcx") _, lateout("r11") _,
                options(nostack)
            );
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the caller passes a valid system call.
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") n,
                inlateout("x0") a[0] as isize => r,
                in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
                options(nostack)
            );
        }
        r
    }
}

/// One range the keeper holds.
#[derive(Clone, Copy)]
struct Entry {
    start: usize,
    len: usize,
    file_off: u64,
    fd: i32,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" fn keeper_main(arg: *mut libc::c_void) -> libc::c_int {
    use raw::sc;
    // SAFETY: raw system calls with valid arguments throughout; `arg`
    // points at the `Args` the parent wrote before the clone.
    unsafe {
        let args = &*(arg as *const Args);
        let (sock, parent) = (args.sock, args.parent);
        let all: u64 = !0;
        sc(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &all as *const u64 as usize,
                0,
                8,
                0,
                0,
            ],
        );
        sc(libc::SYS_setsid, [0; 6]);
        let name = b"umio-keeper\0";
        sc(
            libc::SYS_prctl,
            [
                libc::PR_SET_NAME as usize,
                name.as_ptr() as usize,
                0,
                0,
                0,
                0,
            ],
        );
        // Every descriptor inherited but the socket: the program's pipes
        // and sockets must not stay open for its peers.
        let sock_u = sock as usize;
        let mut closed = true;
        if sock_u > 0 {
            closed &= sc(libc::SYS_close_range, [0, sock_u - 1, 0, 0, 0, 0]) == 0;
        }
        closed &= sc(
            libc::SYS_close_range,
            [sock_u + 1, u32::MAX as usize, 0, 0, 0, 0],
        ) == 0;
        if !closed {
            for fd in 0..65536usize {
                if fd != sock_u {
                    sc(libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
                }
            }
        }
        // No pidfd (Linux < 5.3), or the parent gone already: the socket
        // alone tells.
        let pidfd = sc(libc::SYS_pidfd_open, [parent as usize, 0, 0, 0, 0, 0]);
        let table = std::slice::from_raw_parts_mut(args.table, CAPACITY);
        let mut n = 0usize;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: sock,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if pidfd >= 0 { pidfd as i32 } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let r = sc(libc::SYS_ppoll, [fds.as_mut_ptr() as usize, 2, 0, 0, 0, 0]);
            if r < 0 {
                continue;
            }
            if fds[1].revents != 0 {
                // The program is gone; read what it sent before.
                while let Some(go) = receive(sock, table, &mut n, true) {
                    if !go {
                        break;
                    }
                }
                break;
            }
            if fds[0].revents != 0 {
                match receive(sock, table, &mut n, false) {
                    Some(true) => {}
                    Some(false) => break,
                    None => {
                        if still_here(parent, pidfd) {
                            // The program closed its end and lives on in
                            // this address space (a loop that closes
                            // every descriptor): writing now would race
                            // with its own write-back. It starts another
                            // keeper (its watch, or its next map or unmap).
                            for e in table.iter().take(n) {
                                close(e.fd);
                            }
                            n = 0;
                        }
                        break;
                    }
                }
            }
        }
        write_back(&table[..n]);
        sc(libc::SYS_exit_group, [0; 6]);
        0
    }
}

/// Whether the program (`parent`, its pidfd) still runs in this address
/// space: not exited, and not `exec`ed (`kcmp`). False where unsure (no
/// pidfd, no `kcmp`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn still_here(parent: i32, pidfd: isize) -> bool {
    use raw::sc;
    const KCMP_VM: usize = 1;
    if pidfd < 0 {
        return false;
    }
    let mut p = libc::pollfd {
        fd: pidfd as i32,
        events: libc::POLLIN,
        revents: 0,
    };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one pollfd and a timeout of the keeper's; getpid and kcmp
    // take no pointer.
    unsafe {
        let r = sc(
            libc::SYS_ppoll,
            [
                &mut p as *mut libc::pollfd as usize,
                1,
                &zero as *const libc::timespec as usize,
                0,
                0,
                0,
            ],
        );
        if r != 0 {
            return false;
        }
        let me = sc(libc::SYS_getpid, [0; 6]);
        sc(
            libc::SYS_kcmp,
            [me as usize, parent as usize, KCMP_VM, 0, 0, 0],
        ) == 0
    }
}

/// Receives one message. `Some(true)`: go on; `Some(false)`: quit (the
/// table is emptied); `None`: the socket is at its end or empty.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn receive(sock: i32, table: &mut [Entry], n: &mut usize, nowait: bool) -> Option<bool> {
    use raw::sc;
    let mut msg = Msg::default();
    let mut iov = libc::iovec {
        iov_base: (&mut msg as *mut Msg).cast(),
        iov_len: size_of::<Msg>(),
    };
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = size_of::<[u64; 4]>();
    let flags = libc::MSG_CMSG_CLOEXEC | if nowait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: `hdr` names live buffers.
    let r = unsafe {
        sc(
            libc::SYS_recvmsg,
            [
                sock as usize,
                &mut hdr as *mut libc::msghdr as usize,
                flags as usize,
                0,
                0,
                0,
            ],
        )
    };
    if r == -(libc::EINTR as isize) {
        return Some(true);
    }
    if r <= 0 {
        return None;
    }
    // The descriptor, if one came: control[0] is cmsg_len, control[1]
    // level and type, the descriptor follows.
    let fd = if hdr.msg_controllen >= 20
        && control[1] == (libc::SOL_SOCKET as u32 as u64 | (libc::SCM_RIGHTS as u64) << 32)
    {
        (control[2] & 0xffff_ffff) as i32
    } else {
        -1
    };
    if r as usize != size_of::<Msg>() {
        close(fd);
        return Some(true);
    }
    match msg.op {
        OP_KEEP => {
            let ack: u8 = if fd < 0 || *n >= table.len() {
                close(fd);
                0
            } else {
                table[*n] = Entry {
                    start: msg.start as usize,
                    len: msg.len as usize,
                    file_off: msg.file_off,
                    fd,
                };
                *n += 1;
                1
            };
            // SAFETY: one byte from `ack`; the program may be gone.
            unsafe {
                sc(
                    libc::SYS_sendto,
                    [
                        sock as usize,
                        &ack as *const u8 as usize,
                        1,
                        libc::MSG_NOSIGNAL as usize,
                        0,
                        0,
                    ],
                )
            };
        }
        OP_FORGET => {
            close(fd);
            forget_in(table, n, msg.start as usize, (msg.start + msg.len) as usize);
        }
        OP_QUIT => {
            close(fd);
            for e in table.iter().take(*n) {
                close(e.fd);
            }
            *n = 0;
            return Some(false);
        }
        _ => close(fd),
    }
    Some(true)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn close(fd: i32) {
    if fd >= 0 {
        // SAFETY: closes a descriptor of the keeper's.
        unsafe { raw::sc(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
    }
}

/// Takes `[start, end)` out of the table's ranges, splitting one that
/// covers it (the second part gets a duplicate of the descriptor).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn forget_in(table: &mut [Entry], n: &mut usize, start: usize, end: usize) {
    let mut i = 0;
    while i < *n {
        let e = table[i];
        let e_end = e.start + e.len;
        if e_end <= start || end <= e.start {
            i += 1;
            continue;
        }
        let before = e.start < start;
        let after = end < e_end;
        if before {
            table[i].len = start - e.start;
        }
        if after {
            let rest = Entry {
                start: end,
                len: e_end - end,
                file_off: e.file_off + (end - e.start) as u64,
                fd: e.fd,
            };
            if before {
                // SAFETY: duplicates a descriptor of the keeper's.
                let dup = unsafe {
                    raw::sc(
                        libc::SYS_fcntl,
                        [e.fd as usize, libc::F_DUPFD_CLOEXEC as usize, 0, 0, 0, 0],
                    )
                };
                if dup >= 0 && *n < table.len() {
                    table[*n] = Entry {
                        fd: dup as i32,
                        ..rest
                    };
                    *n += 1;
                } else {
                    close(dup as i32);
                }
            } else {
                table[i] = rest;
            }
        }
        if !before && !after {
            close(e.fd);
            table[i] = table[*n - 1];
            *n -= 1;
            continue;
        }
        i += 1;
    }
}

/// The program is gone: every kept page still in memory whose bytes
/// differ from the file's is written to the file.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn write_back(table: &[Entry]) {
    use raw::sc;
    let path = b"/proc/self/pagemap\0";
    // SAFETY: raw system calls on the keeper's own descriptors and
    // buffers; the kept ranges are the dead program's regions, whose
    // pages are read only where the page map says they are in memory.
    unsafe {
        let pagemap = sc(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                0,
                0,
                0,
            ],
        );
        let mut entries = [0u64; 512];
        let mut vec = [0u8; 512];
        let mut file_page = [0u8; PAGE];
        for e in table {
            // The keeper writes through the page cache: no alignment.
            let fl = sc(
                libc::SYS_fcntl,
                [e.fd as usize, libc::F_GETFL as usize, 0, 0, 0, 0],
            );
            if fl >= 0 && fl as i32 & libc::O_DIRECT != 0 {
                sc(
                    libc::SYS_fcntl,
                    [
                        e.fd as usize,
                        libc::F_SETFL as usize,
                        (fl as i32 & !libc::O_DIRECT) as usize,
                        0,
                        0,
                        0,
                    ],
                );
            }
            let size = sc(
                libc::SYS_lseek,
                [e.fd as usize, 0, libc::SEEK_END as usize, 0, 0, 0],
            );
            if size <= 0 {
                continue;
            }
            let size = size as u64;
            let pages = e.len / PAGE;
            let mut p = 0;
            while p < pages {
                let chunk = (pages - p).min(512);
                let addr = e.start + p * PAGE;
                // In memory: present or swapped (page map bits 63, 62);
                // without the page map, resident (mincore).
                let mut in_memory = [false; 512];
                let got = if pagemap >= 0 {
                    let want = chunk * 8;
                    let r = sc(
                        libc::SYS_pread64,
                        [
                            pagemap as usize,
                            entries.as_mut_ptr() as usize,
                            want,
                            (addr / PAGE * 8),
                            0,
                            0,
                        ],
                    );
                    if r == want as isize {
                        for k in 0..chunk {
                            in_memory[k] = entries[k] & (3 << 62) != 0;
                        }
                        true
                    } else {
                        false
                    }
                } else {
                    false
                };
                if !got {
                    let r = sc(
                        libc::SYS_mincore,
                        [addr, chunk * PAGE, vec.as_mut_ptr() as usize, 0, 0, 0],
                    );
                    for k in 0..chunk {
                        in_memory[k] = r == 0 && vec[k] & 1 != 0;
                    }
                }
                for (k, &there) in in_memory.iter().enumerate().take(chunk) {
                    if !there {
                        continue;
                    }
                    let off = e.file_off + ((p + k) * PAGE) as u64;
                    if off >= size {
                        break;
                    }
                    let bytes = (size - off).min(PAGE as u64) as usize;
                    let mem = std::slice::from_raw_parts((addr + k * PAGE) as *const u8, bytes);
                    let r = sc(
                        libc::SYS_pread64,
                        [
                            e.fd as usize,
                            file_page.as_mut_ptr() as usize,
                            bytes,
                            off as usize,
                            0,
                            0,
                        ],
                    );
                    if r == bytes as isize && file_page[..bytes] == *mem {
                        continue;
                    }
                    let mut done = 0;
                    while done < bytes {
                        let w = sc(
                            libc::SYS_pwrite64,
                            [
                                e.fd as usize,
                                mem.as_ptr() as usize + done,
                                bytes - done,
                                off as usize + done,
                                0,
                                0,
                            ],
                        );
                        if w == -(libc::EINTR as isize) {
                            continue;
                        }
                        if w <= 0 {
                            break;
                        }
                        done += w as usize;
                    }
                }
                p += chunk;
            }
            close(e.fd);
        }
    }
}
