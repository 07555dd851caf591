//! Calls on a store's file descriptor that `std::fs` does not make: its
//! status flags, direct I/O alignment, punching holes and page-cache
//! advice.

use std::fs::File;
use std::os::fd::AsRawFd;

/// The descriptor's status flags (`fcntl(F_GETFL)`): access mode and
/// `O_*` flags.
pub(crate) fn status_flags(file: &File) -> std::io::Result<i32> {
    // SAFETY: F_GETFL on a descriptor we own reads its flags and touches
    // no memory.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(flags)
    }
}

/// The direct I/O alignments `statx` reports for `file` (`STATX_DIOALIGN`):
/// (memory, offset), or `None` where the call fails or the file system
/// does not say.
pub(crate) fn dio_align(file: &File) -> Option<(u32, u32)> {
    // SAFETY: statx is plain old data; all zeros is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor itself;
    // the kernel writes only into `stx`, which outlives the call.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// Whether `file` lives on a file system whose page cache is the file
/// itself (tmpfs, ramfs): nothing is read from or dropped to a device
/// there, and `POSIX_FADV_DONTNEED` does nothing (the kernel ignores
/// advice on a file system without a backing device).
pub(crate) fn in_memory_fs(file: &File) -> bool {
    const TMPFS_MAGIC: u32 = 0x0102_1994;
    const RAMFS_MAGIC: u32 = 0x8584_58f6;
    // SAFETY: statfs is plain old data; all zeros is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor we own writes only into `st`, which
    // outlives the call.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // The magic is 32 bits; `f_type` is wider on some targets (and signed
    // on 32-bit ones): compared in its low 32 bits.
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as u32;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// Deallocates `len` bytes at `offset`, keeping the file's size
/// (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`): they read
/// as zeros.
pub(crate) fn punch_hole(file: &File, offset: i64, len: i64) -> std::io::Result<()> {
    // SAFETY: fallocate on a descriptor we own; no memory is passed.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if r != 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)`; a failure is ignored (the advice
/// is only advice).
pub(crate) fn drop_cached(file: &File, offset: libc::off_t, len: libc::off_t) {
    // SAFETY: advice on a descriptor we own; no memory is touched.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
}
