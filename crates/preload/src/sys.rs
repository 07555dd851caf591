//! The kernel and glibc underneath the shim: raw system calls (which no
//! interposed symbol can catch), glibc's own allocator entry points, errno,
//! and the per-thread reentrancy guard.

use std::cell::Cell;

use libc::{c_int, c_void, off_t, size_t};

unsafe extern "C" {
    // glibc's allocator under its internal names: exported by libc.so.6 for
    // exactly this use (a malloc replacement that forwards). Calling them
    // never reaches the shim's own `malloc`.
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
}

/// glibc `malloc`.
pub(crate) fn libc_malloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator is thread-safe and takes any size.
    unsafe { __libc_malloc(size) }
}

/// glibc `calloc`.
pub(crate) fn libc_calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: as libc_malloc; glibc checks n * size for overflow.
    unsafe { __libc_calloc(n, size) }
}

/// glibc `memalign`.
pub(crate) fn libc_memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: as libc_malloc; a bad alignment makes glibc fail with EINVAL.
    unsafe { __libc_memalign(align, size) }
}

/// glibc `realloc`.
///
/// # Safety
/// `p` is null or a live block from glibc's allocator.
pub(crate) unsafe fn libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller passes a block of glibc's.
    unsafe { __libc_realloc(p, size) }
}

/// glibc `free`.
///
/// # Safety
/// `p` is null or a live block from glibc's allocator.
pub(crate) unsafe fn libc_free(p: *mut c_void) {
    // SAFETY: the caller passes a block of glibc's.
    unsafe { __libc_free(p) }
}

/// glibc's `malloc_usable_size`, found with `dlsym(RTLD_NEXT)` (glibc
/// exports no internal name for it).
///
/// # Safety
/// `p` is null or a live block from glibc's allocator.
pub(crate) unsafe fn libc_usable_size(p: *mut c_void) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut f = NEXT.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT skips this library.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) } as usize;
        NEXT.store(f, Ordering::Release);
    }
    if f == 0 {
        return 0;
    }
    // SAFETY: `f` is glibc's malloc_usable_size, whose C signature this is.
    let f: unsafe extern "C" fn(*mut c_void) -> size_t = unsafe { std::mem::transmute(f) };
    // SAFETY: the caller passes a block of glibc's.
    unsafe { f(p) }
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// `mmap(2)` itself.
///
/// # Safety
/// As `mmap(2)`: with `MAP_FIXED` the caller gives up what was mapped there.
pub(crate) unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded as given; the kernel checks the arguments.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

/// `munmap(2)` itself.
///
/// # Safety
/// The caller no longer uses the range.
pub(crate) unsafe fn munmap(addr: usize, len: usize) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `mprotect(2)` itself.
///
/// # Safety
/// As `mprotect(2)`.
pub(crate) unsafe fn mprotect(addr: usize, len: usize, prot: c_int) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as c_int }
}

/// `madvise(2)` itself.
///
/// # Safety
/// As `madvise(2)`: destructive advice discards the range's contents.
pub(crate) unsafe fn madvise(addr: usize, len: usize, advice: c_int) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}

/// `msync(2)` itself.
pub(crate) fn msync(addr: usize, len: usize, flags: c_int) -> c_int {
    // SAFETY: msync reads page tables and writes files; it changes no
    // memory of the process.
    unsafe { libc::syscall(libc::SYS_msync, addr, len, flags) as c_int }
}

/// `mremap(2)` itself.
///
/// # Safety
/// As `mremap(2)`.
pub(crate) unsafe fn mremap(
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: usize,
) -> *mut c_void {
    // SAFETY: forwarded as given.
    unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    }
}

thread_local! {
    /// Set while this thread runs shim code that calls into umio: every
    /// interposed call it makes meanwhile goes straight to the kernel or
    /// to glibc.
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
    /// 0 not yet known, 1 an application thread, 2 one of umio's threads.
    static THREAD_KIND: Cell<u8> = const { Cell::new(0) };
}

/// Proof that this thread is inside the shim; dropping it leaves.
pub(crate) struct ShimGuard(());

impl Drop for ShimGuard {
    fn drop(&mut self) {
        IN_SHIM.with(|c| c.set(false));
    }
}

/// Enters the shim, unless this thread is already inside it or is one of
/// umio's own threads (fillers, evictors, prefetch): then `None`, and the
/// caller must take the kernel's or glibc's path. umio's threads call
/// `madvise` and `munmap` on region memory themselves; those calls must
/// reach the kernel, not the shim's region table.
pub(crate) fn enter() -> Option<ShimGuard> {
    if IN_SHIM.with(|c| c.replace(true)) {
        return None;
    }
    // umio's own threads, and umio's in-thread fault handler on an
    // application thread (its store reads call `pread`), never take the
    // shim's path: they would wait on its locks, which a thread holding
    // them may be waiting on umio to release (an unmap waits for every
    // handler under way).
    if is_umio_thread() || umio_core::in_fault_handler() {
        IN_SHIM.with(|c| c.set(false));
        return None;
    }
    Some(ShimGuard(()))
}

/// Whether this thread is one of umio's (named `umio-*` by the runtime).
fn is_umio_thread() -> bool {
    THREAD_KIND.with(|k| {
        if k.get() == 0 {
            let mut name = [0u8; 17];
            // SAFETY: PR_GET_NAME writes at most 16 bytes and a NUL.
            let r = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            k.set(if r == 0 && name.starts_with(b"umio-") {
                2
            } else {
                1
            });
        }
        k.get() == 2
    })
}

/// Whether the calling thread is inside the shim now.
pub(crate) fn inside() -> bool {
    IN_SHIM.with(|c| c.get())
}

/// Writes `msg` to stderr with one `write(2)` (no allocation, no stdio
/// lock: usable anywhere, also at exit and in a fork child).
pub(crate) fn eprint(msg: &str) {
    // SAFETY: writes bytes of a live string.
    let _ = unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// A duplicate of stderr taken at load time, for the exit report:
/// programs may close stderr in their own exit handlers (gnulib's
/// `close_stdout` does), which run before the shim's.
static REPORT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

/// Keeps a duplicate of stderr for [`report`].
pub(crate) fn keep_stderr() {
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor the shim owns.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
    if fd >= 0 {
        REPORT_FD.store(fd, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Writes `msg` to the stderr kept by [`keep_stderr`] (or stderr).
pub(crate) fn report(msg: &str) {
    let fd = REPORT_FD.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: writes bytes of a live string.
    let _ = unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
}

/// The process id.
pub(crate) fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}
