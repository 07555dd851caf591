//! What the process asks of the system about memory and CPUs: the
//! machine's physical memory (`sysconf`), a memory-pressure trigger (PSI,
//! `Documentation/accounting/psi.rst`), and the CPUs a thread may run on
//! (`sched_getaffinity`, `sched_setaffinity`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The machine's physical memory in 4 KiB pages (`_SC_PHYS_PAGES`), if
/// the C library knows it.
pub(crate) fn phys_pages() -> Option<u64> {
    // SAFETY: sysconf reads a system constant.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    (pages > 0).then_some(pages as u64)
}

/// Opens `/proc/pressure/memory` and writes `trigger` (a NUL-terminated
/// `some|full <stall us> <window us>` line) to it: the descriptor becomes
/// readable (`POLLPRI`) each time the trigger fires. `None` where PSI is
/// absent or the process may not create triggers.
pub(crate) fn memory_pressure_trigger(trigger: &[u8]) -> Option<OwnedFd> {
    let path = c"/proc/pressure/memory";
    // SAFETY: opens a path from a C string literal.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: writes the bytes of a live slice.
    let n = unsafe { libc::write(fd.as_raw_fd(), trigger.as_ptr().cast(), trigger.len()) };
    (n > 0).then_some(fd)
}

/// The CPUs the calling thread may run on, in increasing order; empty if
/// the kernel will not say (more CPUs than a `cpu_set_t` holds).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is writable for its own size; 0 is the caller.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reads a bit of a set within its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Lets the calling thread run on `cpus` only; the error is the `errno`.
pub(crate) fn set_affinity(cpus: &[usize]) -> Result<(), i32> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: sets a bit within the set's size (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the set is readable for its own size; 0 is the caller.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 { Err(super::errno()) } else { Ok(()) }
}
