//! The interposed symbols. Each runs its body inside [`boundary`]: a panic
//! never crosses into C (it becomes the call's failure value with errno
//! `ENOTRECOVERABLE`), and a call made from inside the shim or from one of
//! umio's threads goes straight to the kernel or to glibc.

use std::panic::{AssertUnwindSafe, catch_unwind};

use libc::{c_int, c_void, off_t, size_t};

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
