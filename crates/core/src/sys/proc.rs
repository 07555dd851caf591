//! What the process asks of the system about memory: the machine's
//! physical memory (`sysconf`) and a memory-pressure trigger (PSI,
//! `Documentation/accounting/psi.rst`).

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
