//! Coherence of umio mappings with the system calls that read and write
//! the same files.
//!
//! A kernel mapping of a file is coherent with `read(2)` and `write(2)`
//! because both go through one page cache. umio caches the pages of its
//! mappings itself, so the shim keeps them coherent within the process:
//! - A call that changes a file's bytes (the `write` family,
//!   `copy_file_range` and `sendfile` into it, `fallocate` that punches,
//!   zeroes, collapses or inserts) first writes the dirty pages of every
//!   umio mapping over those bytes back (nothing written through a mapping
//!   is lost), then goes to the kernel, then drops those mappings' pages
//!   over the bytes it changed, so that their next access reads the new
//!   bytes. `ftruncate` and `truncate` drop the pages past the new end (or
//!   past the old end, when the file grows): they read zeros again.
//! - A call that reads a file's bytes (the `read` family, `copy_file_range`
//!   and `sendfile` from it) first writes back the dirty pages of every
//!   shared umio mapping over those bytes.
//!
//! Files are matched by device and inode, so every descriptor of a file
//! (`dup`, a second `open`, `O_APPEND`) is the same file. What this cannot
//! cover is in the README: other processes writing the file, and writes
//! glibc makes internally (stdio's `fwrite` flushes).

use std::ops::Range;
use std::sync::Arc;

use libc::{c_int, c_long};

use crate::maps::{self, Entry, FileId, file_of};
use crate::runtime::Errno;

/// The current position of `fd` (`None` for a descriptor without one).
fn position(fd: c_int) -> Option<u64> {
    // SAFETY: lseek of any descriptor; it fails on a bad or unseekable one.
    let r = unsafe { libc::syscall(libc::SYS_lseek, fd, 0 as c_long, libc::SEEK_CUR) };
    u64::try_from(r).ok()
}

fn appends(fd: c_int) -> bool {
    // SAFETY: F_GETFL reads the descriptor's flags.
    let fl = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    fl >= 0 && (fl as c_int) & libc::O_APPEND != 0
}

/// The mappings of `id` over the file's bytes `[from, to)`.
fn mapped(id: FileId, from: u64, to: u64) -> Vec<(Arc<Entry>, Range<usize>)> {
    if from >= to {
        return Vec::new();
    }
    maps::lock().mapping_file(id, from, to)
}

/// A mapping unmapped meanwhile has nothing left to keep coherent.
fn gone(e: &umio_core::Error) -> bool {
    matches!(e, umio_core::Error::NotMapped)
}

/// Writes back the dirty pages of the mappings of `id` over `[from, to)`
/// (shared ones only with `shared_only`).
fn write_back(id: FileId, from: u64, to: u64, shared_only: bool) -> Result<(), Errno> {
    for (e, r) in mapped(id, from, to) {
        if (shared_only && !e.shared) || e.mapping.dirty_pages() == 0 {
            continue;
        }
        match e.mapping.write_back_range(r) {
            Err(err) if !gone(&err) => {
                log::error!("umio-preload: writing a mapping back before a file access: {err}");
                return Err(err.into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// The file's bytes `[from, to)` changed: every mapping over them reads
/// them again. A private mapping keeps its own changes (written to its
/// scratch file by the write-back), and its pages it never wrote show the
/// file's new bytes, as with the kernel.
fn invalidate(id: FileId, from: u64, to: u64) -> Result<(), Errno> {
    for (e, r) in mapped(id, from, to) {
        invalidate_entry(&e, r)?;
    }
    Ok(())
}

/// [`invalidate`] of one mapping's bytes `r`.
fn invalidate_entry(e: &Entry, r: Range<usize>) -> Result<(), Errno> {
    // SAFETY: the application reaches the mapping through pointers
    // only, and sees the file's new bytes as under a kernel mmap; the
    // shim makes no slice of it.
    match unsafe { e.mapping.invalidate_range_shared(r) } {
        Err(err) if !gone(&err) => {
            log::error!("umio-preload: a mapping could not take a write to its file: {err}");
            Err(err.into())
        }
        _ => Ok(()),
    }
}

/// Where a call writes or reads: at an offset, at the descriptor's
/// position (the end of the file under `O_APPEND` for writes), or at the
/// end of the file (`RWF_APPEND`).
#[derive(Clone, Copy)]
pub(crate) enum At {
    Offset(u64),
    Position,
    End,
}

impl At {
    /// From an `off_t` where -1 means the position (`preadv2`).
    pub(crate) fn or_position(off: i64) -> At {
        u64::try_from(off).map_or(At::Position, At::Offset)
    }
}

/// The file's bytes `[from, from + n)` were just written from `src` (the
/// caller's buffers, `(address, length)`, in order): every mapping over
/// them takes the new bytes into the pages it holds (no drop, no refault;
/// `Mapping::update_resident_shared`); a mapping that cannot is
/// invalidated there instead.
fn update(id: FileId, from: u64, n: usize, src: &[(usize, usize)]) -> Result<(), Errno> {
    let to = from + n as u64;
    let maps = mapped(id, from, to);
    if maps.is_empty() {
        return Ok(());
    }
    // The written bytes, gathered once: the buffers may lie in umio memory
    // (whose pages the update holds busy), and the shim makes no slice of
    // memory it does not own.
    let mut bytes: Vec<u8> = Vec::with_capacity(n);
    for &(addr, len) in src {
        let take = len.min(n - bytes.len());
        if take == 0 {
            break;
        }
        let at = bytes.len();
        // SAFETY: the kernel just read these `take` bytes of the caller's
        // buffer for the write; `bytes` has room for `n >= at + take`.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, bytes.as_mut_ptr().add(at), take);
            bytes.set_len(at + take);
        }
    }
    if bytes.len() != n {
        return invalidate(id, from, to);
    }
    for (e, r) in maps {
        if !e.shared {
            // A private mapping's pages may hold its own changes (written
            // back to its scratch file, clean again): they keep them, and
            // its other pages read the file again.
            invalidate_entry(&e, r)?;
            continue;
        }
        // The mapping's bytes `r` are the file's `e.offset + r`.
        let file_at = e.offset + r.start as u64;
        let piece = &bytes[(file_at - from) as usize..(file_at - from) as usize + r.len()];
        // SAFETY: the shim makes no slice of its mappings (see `Entry`).
        match unsafe { e.mapping.update_resident_shared(r.start, piece) } {
            Ok(_) => {}
            Err(err) if gone(&err) => {}
            Err(err) => {
                log::debug!("umio-preload: updating a mapping in place: {err}; dropping its pages");
                invalidate_entry(&e, r)?;
            }
        }
    }
    Ok(())
}

/// Runs `call`, which writes up to `len` bytes to `fd` at `at` and returns
/// the bytes written (or -1 with errno set), keeping umio's mappings of
/// the file coherent with it.
pub(crate) fn write(
    fd: c_int,
    at: At,
    len: usize,
    call: impl FnOnce() -> isize,
) -> Result<isize, Errno> {
    write_from(fd, at, len, None, call)
}

/// [`write`] of the bytes in `src` (the caller's buffers, in order):
/// mappings over the bytes written take them in place rather than drop
/// their pages. `None` (the bytes are not at hand: `sendfile`, say):
/// the pages are dropped.
pub(crate) fn write_from(
    fd: c_int,
    at: At,
    len: usize,
    src: Option<&[(usize, usize)]>,
    call: impl FnOnce() -> isize,
) -> Result<isize, Errno> {
    if !maps::any() {
        return Ok(call());
    }
    let Some((id, size)) = file_of(fd) else {
        return Ok(call());
    };
    let start = match at {
        At::Offset(o) => Some(o),
        At::Position if appends(fd) => Some(size),
        At::Position => position(fd),
        At::End => Some(size),
    };
    let Some(start) = start else {
        return Ok(call());
    };
    write_back(id, start, start.saturating_add(len as u64), false)?;
    let n = call();
    if n <= 0 {
        return Ok(n);
    }
    let end = match at {
        At::Offset(o) => o + n as u64,
        // Where the write ended (O_APPEND: wherever the end was then).
        At::Position => position(fd).unwrap_or(start + n as u64),
        At::End => start + n as u64,
    };
    match src {
        Some(src) => update(id, end - n as u64, n as usize, src)?,
        None => invalidate(id, end - n as u64, end)?,
    }
    Ok(n)
}

/// Runs `call`, which reads up to `len` bytes of `fd` at `at`, after
/// [`before_read`].
pub(crate) fn read(
    fd: c_int,
    at: At,
    len: usize,
    call: impl FnOnce() -> isize,
) -> Result<isize, Errno> {
    before_read(fd, at, len)?;
    Ok(call())
}

/// Before `len` bytes of `fd` at `at` are read: writes back what umio's
/// shared mappings of the file hold dirty there.
pub(crate) fn before_read(fd: c_int, at: At, len: usize) -> Result<(), Errno> {
    if !maps::any() {
        return Ok(());
    }
    if let Some((id, size)) = file_of(fd) {
        let start = match at {
            At::Offset(o) => Some(o),
            At::Position => position(fd),
            At::End => Some(size),
        };
        if let Some(start) = start {
            write_back(id, start, start.saturating_add(len as u64), true)?;
        }
    }
    Ok(())
}

/// Runs `call`, which changes the bytes `[off, off + len)` of `fd` in
/// place (`fallocate` punching or zeroing; `len` `u64::MAX`: to the end).
pub(crate) fn change(
    fd: c_int,
    off: u64,
    len: u64,
    call: impl FnOnce() -> c_int,
) -> Result<c_int, Errno> {
    let Some((id, _)) = file_of(fd) else {
        return Ok(call());
    };
    let end = off.saturating_add(len);
    write_back(id, off, end, false)?;
    let r = call();
    if r == 0 {
        invalidate(id, off, end)?;
    }
    Ok(r)
}

/// Runs `call`, which sets the size of the file `id` (of size `old` now)
/// to `new`: the pages past the smaller of the two read the file again
/// (zeros past its end). Dirty pages there are written back first
/// (bytes past the new end are then dropped by the truncation).
pub(crate) fn resize(
    id: FileId,
    old: u64,
    new: u64,
    call: impl FnOnce() -> c_int,
) -> Result<c_int, Errno> {
    let from = old.min(new);
    write_back(id, from, u64::MAX, false)?;
    let r = call();
    if r == 0 {
        invalidate(id, from, u64::MAX)?;
    }
    Ok(r)
}

/// `ftruncate`'s [`resize`].
pub(crate) fn truncate_fd(
    fd: c_int,
    new: u64,
    call: impl FnOnce() -> c_int,
) -> Result<c_int, Errno> {
    match file_of(fd) {
        Some((id, old)) => resize(id, old, new, call),
        None => Ok(call()),
    }
}

/// `truncate`'s [`resize`].
pub(crate) fn truncate_path(
    path: *const libc::c_char,
    new: u64,
    call: impl FnOnce() -> c_int,
) -> Result<c_int, Errno> {
    // SAFETY: stat reads the caller's path (as truncate would) and writes
    // the struct we pass; a bad path fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_stat, path, &mut st) };
    if r != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(call());
    }
    resize(FileId::of(&st), st.st_size as u64, new, call)
}
