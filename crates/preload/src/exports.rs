//! The interposed symbols. Each runs its body inside [`boundary`]: a panic
//! never crosses into C (it becomes the call's failure value with errno
//! `ENOTRECOVERABLE`), and a call made from inside the shim or from one of
//! umio's threads goes straight to the kernel or to glibc.

use std::panic::{AssertUnwindSafe, catch_unwind};

use libc::{c_int, c_void, off_t, size_t, ssize_t};

use crate::buffers::{self, Access};
use crate::coherence::{self, At};
use crate::runtime::Errno;
use crate::{heap, maps, sys};

/// Runs `body` (shim path) unless this thread may not enter the shim, in
/// which case `direct` (the kernel's or glibc's path) runs. `Err(errno)`
/// sets errno and returns `failed`.
fn boundary<T: Copy>(
    failed: T,
    direct: impl FnOnce() -> T,
    body: impl FnOnce() -> Result<T, Errno>,
) -> T {
    let Some(_guard) = sys::enter() else {
        return direct();
    };
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(Errno(e))) => {
            sys::set_errno(if e > 0 { e } else { libc::EIO });
            failed
        }
        Err(_) => {
            sys::set_errno(libc::ENOTRECOVERABLE);
            failed
        }
    }
}

/// `mmap(2)`: selected file mappings are umio's; all others, anonymous
/// ones included (umio's own among them), are the kernel's.
///
/// # Safety
/// As `mmap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { sys::mmap(addr, len, prot, flags, fd, off) };
    if flags & libc::MAP_ANONYMOUS != 0 || fd < 0 {
        if flags & libc::MAP_FIXED != 0 && maps::any() && !sys::inside() {
            // MAP_FIXED over a umio mapping replaces it: let umio go first.
            let r = boundary(
                -1,
                || 0,
                || maps::release_for_fixed(addr as usize, len).map(|()| 0),
            );
            if r != 0 {
                return libc::MAP_FAILED;
            }
        }
        return kernel();
    }
    boundary(libc::MAP_FAILED, kernel, || {
        match maps::map(addr as usize, len, prot, flags, fd, off)? {
            Some(p) => Ok(p as *mut c_void),
            None => {
                if flags & libc::MAP_FIXED != 0 && maps::any() {
                    maps::release_for_fixed(addr as usize, len)?;
                }
                // SAFETY: as the caller gave it.
                let p = unsafe { sys::mmap(addr, len, prot, flags, fd, off) };
                if p == libc::MAP_FAILED {
                    return Err(Errno(sys::errno()));
                }
                if flags & 0x0f != libc::MAP_PRIVATE {
                    maps::kernel_mapped_shared(fd);
                }
                Ok(p)
            }
        }
    })
}

/// `mmap64(2)`: `mmap` (`off_t` is 64 bits here).
///
/// # Safety
/// As `mmap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: umio mappings are written back and unmapped.
///
/// # Safety
/// As `munmap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { sys::munmap(addr as usize, len) };
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || maps::unmap(addr as usize, len).map(|()| 0))
}

/// `msync(2)`: a umio mapping's dirty pages are written back and synced.
///
/// # Safety
/// As `msync(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let kernel = || sys::msync(addr as usize, len, flags);
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || {
        maps::sync(addr as usize, len, flags).map(|()| 0)
    })
}

/// `madvise(2)`: advice on umio mappings goes to umio's policies.
///
/// # Safety
/// As `madvise(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { sys::madvise(addr as usize, len, advice) };
    if heap::owns(addr as usize) {
        // The heap's pages are umio's: the application's advice there is
        // ignored (the kernel must not drop pages behind umio's back);
        // umio's own (eviction, free) goes to the kernel.
        return match sys::enter() {
            None => kernel(),
            Some(_guard) => 0,
        };
    }
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || {
        maps::advise(addr as usize, len, advice, false).map(|()| 0)
    })
}

/// `posix_madvise(3)`: as `madvise`, but returns the error number, and
/// `POSIX_MADV_DONTNEED` does nothing (as in glibc).
///
/// # Safety
/// As `posix_madvise(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let kernel = || {
        if advice == libc::POSIX_MADV_DONTNEED {
            return 0;
        }
        // SAFETY: forwarded as the caller gave it.
        if unsafe { sys::madvise(addr as usize, len, advice) } == 0 {
            0
        } else {
            sys::errno()
        }
    };
    if heap::owns(addr as usize) {
        return match sys::enter() {
            None => kernel(),
            Some(_guard) => 0,
        };
    }
    if !maps::any() {
        return kernel();
    }
    let saved = sys::errno();
    let r = boundary(-1, kernel, || {
        maps::advise(addr as usize, len, advice, true).map(|()| 0)
    });
    if r == -1 {
        let e = sys::errno();
        sys::set_errno(saved);
        return e;
    }
    r
}

/// `mprotect(2)`: see `maps::protect` for what umio mappings allow.
///
/// # Safety
/// As `mprotect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { sys::mprotect(addr as usize, len, prot) };
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || {
        maps::protect(addr as usize, len, prot).map(|()| 0)
    })
}

/// `mremap(2)`: see `maps::remap` for what umio mappings allow. C declares
/// it variadic; on x86-64 and aarch64 the optional fifth argument arrives
/// where a fixed one would, and is read only with `MREMAP_FIXED`.
///
/// # Safety
/// As `mremap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let fixed = flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0;
    let target = if fixed { new_addr as usize } else { 0 };
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { sys::mremap(old as usize, old_len, new_len, flags, target) };
    if !maps::any() {
        return kernel();
    }
    boundary(libc::MAP_FAILED, kernel, || {
        match maps::remap(old as usize, old_len, new_len, flags, target)? {
            Some(p) => Ok(p as *mut c_void),
            None => {
                // SAFETY: as the caller gave it.
                let p = unsafe { sys::mremap(old as usize, old_len, new_len, flags, target) };
                if p == libc::MAP_FAILED {
                    return Err(Errno(sys::errno()));
                }
                Ok(p)
            }
        }
    })
}

// ---- The read and write families: coherent with umio's mappings of the
// same file (`coherence.rs`). Each goes straight to the kernel while the
// process has no umio mapping. ----

/// Most entries of an `iovec` array (`UIO_MAXIOV`).
const IOV_MAX: c_int = 1024;

/// Total bytes of an `iovec` array, as far as the caller's count is sane
/// (the kernel rejects the rest with `EINVAL`).
///
/// # Safety
/// With `0 < cnt <= IOV_MAX`, `iov` points to `cnt` `iovec`s.
unsafe fn iov_len(iov: *const libc::iovec, cnt: c_int) -> usize {
    if iov.is_null() || cnt <= 0 || cnt > IOV_MAX {
        return 0;
    }
    // SAFETY: the caller's array of `cnt` entries, as the kernel reads it.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    v.iter().fold(0usize, |a, e| a.saturating_add(e.iov_len))
}

/// `write(2)`.
///
/// # Safety
/// As `write(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_write, fd, buf, n) as ssize_t };
    if !maps::any() && !crate::runtime::needed() {
        return raw();
    }
    let kernel = || {
        buffers::around_one(fd, buf as usize, n, Access::Reads, |done| {
            // SAFETY: the rest of the caller's buffer.
            unsafe { libc::syscall(libc::SYS_write, fd, buf.byte_add(done), n - done) as ssize_t }
        })
    };
    boundary(-1, raw, || {
        coherence::write_from(fd, At::Position, n, Some(&[(buf as usize, n)]), kernel)
    })
}

/// `_exit(2)`: as `exit` for umio, without the program's `atexit`
/// handlers: shared mappings still mapped are written back (their writes
/// outlive the process, as in the kernel's page cache) and `UMIO_STATS`
/// printed; then the process ends.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::before_exit();
    loop {
        // SAFETY: ends the process; no pointer is passed.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_Exit(3)`: [`_exit`].
#[unsafe(no_mangle)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

/// `pwrite(2)`.
///
/// # Safety
/// As `pwrite(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_pwrite64, fd, buf, n, off) as ssize_t };
    if (!maps::any() && !crate::runtime::needed()) || off < 0 {
        return raw();
    }
    let kernel = || {
        buffers::around_one(fd, buf as usize, n, Access::Reads, |done| {
            // SAFETY: the rest of the caller's buffer, at the offset as far on.
            unsafe {
                libc::syscall(
                    libc::SYS_pwrite64,
                    fd,
                    buf.byte_add(done),
                    n - done,
                    off + done as off_t,
                ) as ssize_t
            }
        })
    };
    boundary(-1, raw, || {
        coherence::write_from(
            fd,
            At::Offset(off as u64),
            n,
            Some(&[(buf as usize, n)]),
            kernel,
        )
    })
}

/// `pwrite64(2)`: `pwrite` (`off_t` is 64 bits here).
///
/// # Safety
/// As `pwrite(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwrite(fd, buf, n, off) }
}

/// `writev(2)`.
///
/// # Safety
/// As `writev(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_writev, fd, iov, cnt) as ssize_t };
    if !maps::any() && !crate::runtime::needed() {
        return raw();
    }
    boundary(-1, raw, || {
        // SAFETY: the caller's iovec array.
        let (n, bufs) = unsafe { (iov_len(iov, cnt), buffers::of_iovecs(iov, cnt)) };
        let kernel = || buffers::around(&bufs, Access::Reads, raw);
        coherence::write_from(fd, At::Position, n, Some(&bufs), kernel)
    })
}

/// `pwritev2(2)`; `pwritev` and the `64` names are the same call. An
/// offset of -1 writes at the descriptor's position; `RWF_APPEND` at the
/// end of the file.
///
/// # Safety
/// As `pwritev2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it (the offset's high half is
    // 0 on a 64-bit kernel).
    let raw =
        || unsafe { libc::syscall(libc::SYS_pwritev2, fd, iov, cnt, off, 0, flags) as ssize_t };
    if (!maps::any() && !crate::runtime::needed()) || off < -1 {
        return raw();
    }
    let at = if flags & libc::RWF_APPEND != 0 {
        At::End
    } else {
        At::or_position(off)
    };
    boundary(-1, raw, || {
        // SAFETY: the caller's iovec array.
        let (n, bufs) = unsafe { (iov_len(iov, cnt), buffers::of_iovecs(iov, cnt)) };
        let kernel = || buffers::around(&bufs, Access::Reads, raw);
        coherence::write_from(fd, at, n, Some(&bufs), kernel)
    })
}

/// `pwritev64v2(2)`: [`pwritev2`].
///
/// # Safety
/// As `pwritev2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwritev2(fd, iov, cnt, off, flags) }
}

/// `pwritev(2)`: [`pwritev2`] without flags (an offset below 0 is
/// `EINVAL`, not the position).
///
/// # Safety
/// As `pwritev(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    if off < 0 {
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: same contract.
    unsafe { pwritev2(fd, iov, cnt, off, 0) }
}

/// `pwritev64(2)`: [`pwritev`].
///
/// # Safety
/// As `pwritev(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwritev(fd, iov, cnt, off) }
}

/// `read(2)`.
///
/// # Safety
/// As `read(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_read, fd, buf, n) as ssize_t };
    if !maps::any() && !crate::runtime::needed() {
        return raw();
    }
    let kernel = || {
        buffers::around_one(fd, buf as usize, n, Access::Writes, |done| {
            // SAFETY: the rest of the caller's buffer.
            unsafe { libc::syscall(libc::SYS_read, fd, buf.byte_add(done), n - done) as ssize_t }
        })
    };
    boundary(-1, raw, || coherence::read(fd, At::Position, n, kernel))
}

/// `pread(2)`.
///
/// # Safety
/// As `pread(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_pread64, fd, buf, n, off) as ssize_t };
    if (!maps::any() && !crate::runtime::needed()) || off < 0 {
        return raw();
    }
    let kernel = || {
        buffers::around_one(fd, buf as usize, n, Access::Writes, |done| {
            // SAFETY: the rest of the caller's buffer, at the offset as far on.
            unsafe {
                libc::syscall(
                    libc::SYS_pread64,
                    fd,
                    buf.byte_add(done),
                    n - done,
                    off + done as off_t,
                ) as ssize_t
            }
        })
    };
    boundary(-1, raw, || {
        coherence::read(fd, At::Offset(off as u64), n, kernel)
    })
}

/// `pread64(2)`: `pread`.
///
/// # Safety
/// As `pread(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pread(fd, buf, n, off) }
}

/// `readv(2)`.
///
/// # Safety
/// As `readv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_readv, fd, iov, cnt) as ssize_t };
    if !maps::any() && !crate::runtime::needed() {
        return raw();
    }
    boundary(-1, raw, || {
        // SAFETY: the caller's iovec array.
        let (n, bufs) = unsafe { (iov_len(iov, cnt), buffers::of_iovecs(iov, cnt)) };
        let kernel = || buffers::around(&bufs, Access::Writes, raw);
        coherence::read(fd, At::Position, n, kernel)
    })
}

/// `preadv2(2)`; `preadv` and the `64` names are the same call. An offset
/// of -1 reads at the descriptor's position.
///
/// # Safety
/// As `preadv2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw =
        || unsafe { libc::syscall(libc::SYS_preadv2, fd, iov, cnt, off, 0, flags) as ssize_t };
    if (!maps::any() && !crate::runtime::needed()) || off < -1 {
        return raw();
    }
    boundary(-1, raw, || {
        // SAFETY: the caller's iovec array.
        let (n, bufs) = unsafe { (iov_len(iov, cnt), buffers::of_iovecs(iov, cnt)) };
        let kernel = || buffers::around(&bufs, Access::Writes, raw);
        coherence::read(fd, At::or_position(off), n, kernel)
    })
}

/// `preadv64v2(2)`: [`preadv2`].
///
/// # Safety
/// As `preadv2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { preadv2(fd, iov, cnt, off, flags) }
}

/// `preadv(2)`: [`preadv2`] without flags.
///
/// # Safety
/// As `preadv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    if off < 0 {
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: same contract.
    unsafe { preadv2(fd, iov, cnt, off, 0) }
}

/// `preadv64(2)`: [`preadv`].
///
/// # Safety
/// As `preadv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { preadv(fd, iov, cnt, off) }
}

/// `recv(2)`: `recvfrom` without an address.
///
/// # Safety
/// As `recv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the same call.
    unsafe {
        recvfrom(
            fd,
            buf,
            n,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
}

/// A socket call, interposed only for its buffers (`buffers.rs`): `raw`
/// goes to the kernel, after `bufs` (the call's buffers, worked out only
/// when they must be faulted in) are faulted in for `access`. With the
/// kernel's accesses to umio memory served, straight to it.
fn socket_call(
    access: Access,
    bufs: impl FnOnce() -> Vec<(usize, usize)>,
    raw: impl Fn() -> isize,
) -> isize {
    if !crate::runtime::needed() {
        return raw();
    }
    boundary(-1, &raw, || Ok(buffers::around(&bufs(), access, &raw)))
}

/// `recvfrom(2)`.
///
/// # Safety
/// As `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe {
        libc::syscall(libc::SYS_recvfrom, fd, buf, n, flags, addr, addrlen) as ssize_t
    };
    let bufs = || {
        let mut bufs = vec![(buf as usize, n)];
        if !addr.is_null() && !addrlen.is_null() {
            // SAFETY: the caller's address length, as the kernel reads it.
            bufs.push((addr as usize, unsafe { addrlen.read() } as usize));
        }
        bufs
    };
    socket_call(Access::Writes, bufs, raw)
}

/// `recvmsg(2)`.
///
/// # Safety
/// As `recvmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_recvmsg, fd, msg, flags) as ssize_t };
    // SAFETY: the caller's message header.
    socket_call(Access::Writes, || unsafe { buffers::of_msghdr(msg) }, raw)
}

/// `recvmmsg(2)`.
///
/// # Safety
/// As `recvmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    vlen: libc::c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let raw =
        || unsafe { libc::syscall(libc::SYS_recvmmsg, fd, msgs, vlen, flags, timeout) as ssize_t };
    // SAFETY: the caller's message headers.
    socket_call(
        Access::Writes,
        || unsafe { buffers::of_mmsghdrs(msgs, vlen) },
        raw,
    ) as c_int
}

/// `send(2)`: `sendto` without an address.
///
/// # Safety
/// As `send(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the same call.
    unsafe { sendto(fd, buf, n, flags, std::ptr::null(), 0) }
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw =
        || unsafe { libc::syscall(libc::SYS_sendto, fd, buf, n, flags, addr, addrlen) as ssize_t };
    let bufs = || vec![(buf as usize, n), (addr as usize, addrlen as usize)];
    socket_call(Access::Reads, bufs, raw)
}

/// `sendmsg(2)`.
///
/// # Safety
/// As `sendmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) as ssize_t };
    // SAFETY: the caller's message header.
    socket_call(Access::Reads, || unsafe { buffers::of_msghdr(msg) }, raw)
}

/// `sendmmsg(2)`.
///
/// # Safety
/// As `sendmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    vlen: libc::c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let raw = || unsafe { libc::syscall(libc::SYS_sendmmsg, fd, msgs, vlen, flags) as ssize_t };
    // SAFETY: the caller's message headers.
    socket_call(
        Access::Reads,
        || unsafe { buffers::of_mmsghdrs(msgs, vlen) },
        raw,
    ) as c_int
}

/// Where a call that takes an optional offset pointer reads or writes.
///
/// # Safety
/// `off` is null or points to an offset.
unsafe fn at_ptr(off: *const libc::loff_t) -> At {
    if off.is_null() {
        At::Position
    } else {
        // SAFETY: the caller's offset, as the kernel reads it.
        At::or_position(unsafe { off.read() })
    }
}

/// `copy_file_range(2)`: the source is read, the destination written.
///
/// # Safety
/// As `copy_file_range(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe {
        libc::syscall(
            libc::SYS_copy_file_range,
            fd_in,
            off_in,
            fd_out,
            off_out,
            len,
            flags,
        ) as ssize_t
    };
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || {
        // SAFETY: the caller's offsets, null or valid.
        let (at_in, at_out) = unsafe { (at_ptr(off_in), at_ptr(off_out)) };
        coherence::before_read(fd_in, at_in, len)?;
        coherence::write(fd_out, at_out, len, kernel)
    })
}

/// `sendfile(2)`: the source is read; a file as the destination is
/// written at its position.
///
/// # Safety
/// As `sendfile(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded as the caller gave it.
    let kernel =
        || unsafe { libc::syscall(libc::SYS_sendfile, out_fd, in_fd, offset, count) as ssize_t };
    if !maps::any() {
        return kernel();
    }
    boundary(-1, kernel, || {
        // SAFETY: the caller's offset, null or valid.
        let at_in = unsafe { at_ptr(offset) };
        coherence::before_read(in_fd, at_in, count)?;
        coherence::write(out_fd, At::Position, count, kernel)
    })
}

/// `sendfile64(2)`: [`sendfile`].
///
/// # Safety
/// As `sendfile(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}

/// `ftruncate(2)`.
///
/// # Safety
/// As `ftruncate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { libc::syscall(libc::SYS_ftruncate, fd, len) as c_int };
    if !maps::any() || len < 0 {
        return kernel();
    }
    boundary(-1, kernel, || {
        coherence::truncate_fd(fd, len as u64, kernel)
    })
}

/// `ftruncate64(2)`: [`ftruncate`].
///
/// # Safety
/// As `ftruncate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { ftruncate(fd, len) }
}

/// `truncate(2)`.
///
/// # Safety
/// As `truncate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate(path: *const libc::c_char, len: off_t) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { libc::syscall(libc::SYS_truncate, path, len) as c_int };
    if !maps::any() || len < 0 || path.is_null() {
        return kernel();
    }
    boundary(-1, kernel, || {
        coherence::truncate_path(path, len as u64, kernel)
    })
}

/// `truncate64(2)`: [`truncate`].
///
/// # Safety
/// As `truncate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate64(path: *const libc::c_char, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { truncate(path, len) }
}

/// `fallocate(2)`: punching a hole, zeroing, collapsing or inserting a
/// range changes the file's bytes; allocating alone does not.
///
/// # Safety
/// As `fallocate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: forwarded as the caller gave it.
    let kernel = || unsafe { libc::syscall(libc::SYS_fallocate, fd, mode, off, len) as c_int };
    let changes = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
    let shifts = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
    if !maps::any() || off < 0 || len <= 0 || mode & (changes | shifts) == 0 {
        return kernel();
    }
    // Collapsing or inserting moves every byte after the offset.
    let span = if mode & shifts != 0 {
        u64::MAX
    } else {
        len as u64
    };
    boundary(-1, kernel, || {
        coherence::change(fd, off as u64, span, kernel)
    })
}

/// `fallocate64(2)`: [`fallocate`].
///
/// # Safety
/// As `fallocate(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { fallocate(fd, mode, off, len) }
}
