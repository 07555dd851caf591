//! Operations on a range of a mapping: flush, `umio_pwrite`, write-back,
//! invalidation, prefetch, advice (`UMIO_ADVICE_*`), pinning.

use std::ffi::{c_int, c_void};

use std::ops::Range;

use umio_core::{Advice, Mapping, UncheckedAdvice};

use crate::boundary::{Errno, ffi_boundary};
use crate::registry;

/// No special treatment (the same value as `MADV_NORMAL`).
pub const UMIO_ADVICE_NORMAL: c_int = 0;
/// Expect random access: no read-ahead (`MADV_RANDOM`).
pub const UMIO_ADVICE_RANDOM: c_int = 1;
/// Expect sequential access: read ahead with the largest window
/// (`MADV_SEQUENTIAL`).
pub const UMIO_ADVICE_SEQUENTIAL: c_int = 2;
/// Expect access soon: fetch the range in the background now
/// (`MADV_WILLNEED`).
pub const UMIO_ADVICE_WILLNEED: c_int = 3;
/// Drop the range's pages without writing them back; the next access reads
/// the store again (`MADV_DONTNEED`). The range must start on a page
/// boundary and end on one or at the end of the mapping.
pub const UMIO_ADVICE_DONTNEED: c_int = 4;
/// Promote the range's aligned 2 MiB ranges to huge pages on their next
/// miss (`MADV_HUGEPAGE`); needs a page size that divides 2 MiB.
pub const UMIO_ADVICE_HUGE: c_int = 14;
/// Never promote the range to huge pages (`MADV_NOHUGEPAGE`).
pub const UMIO_ADVICE_NOHUGE: c_int = 15;
/// Free the range as `MADV_REMOVE` does: dirty pages written back, the
/// file's bytes in the range punched out, the pages dropped; the range
/// reads zeros afterwards, in the mapping and in the file (a writable
/// mapping; whole 4 KiB pages; `EOPNOTSUPP` where the file system cannot
/// punch holes). A C store's bytes are punched by its
/// `umio_map_options.store_punch_hole`; without one, `EOPNOTSUPP`.
pub const UMIO_ADVICE_REMOVE: c_int = 9;
/// Evict the range's pages now (`MADV_COLD`), dirty ones written back
/// first.
pub const UMIO_ADVICE_COLD: c_int = 20;
/// As `UMIO_ADVICE_COLD` (`MADV_PAGEOUT`).
pub const UMIO_ADVICE_PAGEOUT: c_int = 21;

/// Writes back the dirty pages of `[addr, addr + len)` and makes them
/// durable; `len` 0: from `addr` to the end of its mapping. Returns 0, or
/// -1 with errno `EINVAL` (not a range of one umio mapping) or the store's
/// errno (the failed pages stay dirty).
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_flush(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, { on_range(addr, len, |m, range| m.flush_range(range)) })
}

/// Writes `len` bytes from `buf` to the store behind `[addr, addr + len)`
/// of a umio mapping, as `pwrite(2)` of a kernel-mapped file does: the
/// mapping's dirty pages in the range are written back first (nothing
/// written through the mapping is lost), then `buf` goes to the store, then
/// the mapping's pages in the range are dropped, so that its next access
/// shows the new bytes. Use it, not `pwrite` on the file, to write a file
/// you also map (or call `umio_write_back` before and `umio_invalidate`
/// after your own write). The store is not synced: `umio_flush` does.
/// The mapping itself need not be writable; the file must be open for
/// writing. Returns 0, or -1 with errno `EINVAL` (`buf` null, `len` 0, or
/// the range not within one umio mapping), `EACCES` (a read-only store),
/// or the store's errno.
///
/// # Safety
/// `buf` points to `len` readable bytes that do not overlap the mapping.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_pwrite(addr: *mut c_void, buf: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, {
        if buf.is_null() || len == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        if range.len() != len {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: the caller's `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
        // SAFETY: no Rust slice of a C API mapping is ever made; C reaches
        // the bytes through pointers, which see the new bytes, as after a
        // pwrite of a file under a shared mmap.
        unsafe { m.write_at_shared(range.start, bytes) }?;
        Ok(0)
    })
}

/// `read(2)` from `fd` into `[addr, addr + len)` of a writable umio
/// mapping, correct whatever serves the mapping's faults: under the
/// in-thread service (and a user-mode-only userfaultfd) a plain `read(2)`
/// into a non-resident page fails with `EFAULT`; this faults the range in
/// first, writable, and again should a page be evicted before the call.
/// `file_offset` -1 reads at the descriptor's position (`read(2)`), else
/// at that offset (`pread(2)`). One call: it returns the bytes read, which
/// may be fewer than `len` (0 at the end of the file; a range larger than
/// an eighth of the cache is read in part): call again for the rest. -1
/// with errno `EINVAL` (the range not within one umio mapping, `len` 0, a
/// read-only mapping, `file_offset` below -1), the store's errno (a page
/// could not be read), or `read(2)`'s own (`EBADF`, ...).
///
/// # Safety
/// None: the range is looked up among umio's mappings and written by the
/// kernel only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_read_into(
    addr: *mut c_void,
    len: usize,
    fd: c_int,
    file_offset: i64,
) -> isize {
    ffi_boundary!(-1, {
        let (m, range, at, fd) = syscall_args(addr, len, fd, file_offset)?;
        // SAFETY: no Rust slice of a C API mapping is ever made.
        let n = unsafe { m.read_into_shared(fd, at, range) }?;
        Ok(n as isize)
    })
}

/// `write(2)` to `fd` of `[addr, addr + len)` of a umio mapping, correct
/// whatever serves the mapping's faults (as `umio_read_into`: the range is
/// faulted in first where the kernel's own access would fail). `file_offset`
/// -1 writes at the descriptor's position, else at that offset
/// (`pwrite(2)`). Returns the bytes written (maybe fewer than `len`), or
/// -1 with errno as `umio_read_into`'s.
///
/// # Safety
/// None: the range is looked up among umio's mappings and read by the
/// kernel only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_write_from(
    addr: *const c_void,
    len: usize,
    fd: c_int,
    file_offset: i64,
) -> isize {
    ffi_boundary!(-1, {
        let (m, range, at, fd) = syscall_args(addr, len, fd, file_offset)?;
        let n = m.write_from(fd, at, range)?;
        Ok(n as isize)
    })
}

/// The checked arguments of `umio_read_into` and `umio_write_from`: the
/// mapping, the range in it, the file offset (`None`: the position) and
/// the descriptor.
type SyscallArgs = (
    std::sync::Arc<Mapping>,
    Range<usize>,
    Option<u64>,
    std::os::fd::BorrowedFd<'static>,
);

/// Checks the arguments of `umio_read_into` and `umio_write_from`.
fn syscall_args(
    addr: *const c_void,
    len: usize,
    fd: c_int,
    file_offset: i64,
) -> Result<SyscallArgs, Errno> {
    if len == 0 || fd < 0 || file_offset < -1 {
        return Err(Errno(if fd < 0 { libc::EBADF } else { libc::EINVAL }));
    }
    let m = registry::get(addr)?;
    let range = registry::relative(&m, addr, len)?;
    if range.len() != len {
        return Err(Errno(libc::EINVAL));
    }
    let at = u64::try_from(file_offset).ok();
    // SAFETY: the descriptor is the caller's, open for the call (a closed
    // one fails the system call with EBADF); umio keeps no copy of it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    Ok((m, range, at, fd))
}

/// Writes the dirty pages of `[addr, addr + len)` to the store without
/// syncing it, so that `read(2)` of the mapped file sees them; `len` 0:
/// from `addr` to the end of its mapping. Returns 0, or -1 with errno
/// `EINVAL` (not a range of one umio mapping) or the store's errno (the
/// failed pages stay dirty).
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_write_back(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, {
        on_range(addr, len, |m, range| m.write_back_range(range))
    })
}

/// The file behind `[addr, addr + len)` changed by other means (a
/// `pwrite` of your own): writes the range's dirty pages back (without
/// syncing), then drops the pages overlapping it, so that the next access
/// reads the file again; `len` 0: to the end of the mapping. Returns 0, or
/// -1 with errno `EINVAL` (not a range of one umio mapping) or the store's
/// errno (nothing was dropped).
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_invalidate(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, {
        // SAFETY: no Rust slice of a C API mapping is ever made.
        on_range(addr, len, |m, range| unsafe {
            m.invalidate_range_shared(range)
        })
    })
}

/// Starts filling the pages of `[addr, addr + len)` in the background and
/// returns at once; `len` 0: to the end of the mapping. Returns 0, or -1
/// with errno `EINVAL`.
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_prefetch(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, { on_range(addr, len, |m, range| m.prefetch(range)) })
}

/// Advice for `[addr, addr + len)`, as `madvise(2)`: one of the
/// `UMIO_ADVICE_*` values (equal to Linux's `MADV_*`). `len` 0: to the end
/// of the mapping. Returns 0, or -1 with errno `EINVAL`.
///
/// # Safety
/// After `UMIO_ADVICE_DONTNEED`, changes not yet written back are lost.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_advise(addr: *const c_void, len: usize, advice: c_int) -> c_int {
    ffi_boundary!(-1, {
        let advice = match advice {
            UMIO_ADVICE_NORMAL => Advice::Normal,
            UMIO_ADVICE_RANDOM => Advice::Random,
            UMIO_ADVICE_SEQUENTIAL => Advice::Sequential,
            UMIO_ADVICE_WILLNEED => Advice::WillNeed,
            UMIO_ADVICE_HUGE => Advice::Huge,
            UMIO_ADVICE_NOHUGE => Advice::NoHuge,
            _ => {
                let advice = match advice {
                    UMIO_ADVICE_DONTNEED => UncheckedAdvice::DontNeed,
                    UMIO_ADVICE_REMOVE => UncheckedAdvice::Remove,
                    UMIO_ADVICE_COLD | UMIO_ADVICE_PAGEOUT => UncheckedAdvice::PageOut,
                    _ => return Err(Errno(libc::EINVAL)),
                };
                // SAFETY: no Rust slice of a C API mapping is ever made.
                return on_range(addr, len, |m, range| unsafe {
                    m.advise_shared(range, advice)
                });
            }
        };
        on_range(addr, len, |m, range| m.advise(range, advice))
    })
}

/// Reads the pages of `[addr, addr + len)` now and pins them: they are not
/// evicted until `umio_unpin`, and flush and unmap write them back like
/// any page. Returns 0, or -1 with errno `EINVAL`, `ENOMEM` (pinned pages
/// would hold more than half of the cache) or the store's errno.
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_pin(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, { on_range(addr, len, |m, range| m.pin(range)) })
}

/// Faults the pages of `[addr, addr + len)` in now, on the calling thread
/// (`MADV_POPULATE_READ`); with `write` nonzero (a writable mapping) also
/// takes each page's first-write fault without changing a byte
/// (`MADV_POPULATE_WRITE`). Call it before passing mapped memory to a
/// system call when the kernel's own accesses are not served (the
/// in-thread fault service, or a user-mode-only userfaultfd): a
/// non-resident page, or a clean page the call writes into, fails it with
/// `EFAULT`. Returns 0, or -1 with errno `EINVAL` (not umio's, or `write`
/// on a read-only mapping) or the store's errno.
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced by the caller's promise (umio touches its own pages).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_populate(addr: *const c_void, len: usize, write: c_int) -> c_int {
    ffi_boundary!(-1, {
        on_range(addr, len, |m, range| m.populate(range, write != 0))
    })
}

/// Unpins the pages of `[addr, addr + len)`. Returns 0, or -1 with errno
/// `EINVAL`.
///
/// # Safety
/// None: the address is looked up among umio's mappings, never
/// dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_unpin(addr: *const c_void, len: usize) -> c_int {
    ffi_boundary!(-1, { on_range(addr, len, |m, range| m.unpin(range)) })
}

/// Runs `op` on the range `[addr, addr + len)` names in its mapping (`len`
/// 0: to the end of the mapping); 0, or the errno of the lookup or of `op`.
fn on_range(
    addr: *const c_void,
    len: usize,
    op: impl FnOnce(&Mapping, Range<usize>) -> umio_core::Result<()>,
) -> Result<c_int, Errno> {
    let m = registry::get(addr)?;
    let range = registry::relative(&m, addr, len)?;
    op(&m, range)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_values_are_linuxs() {
        assert_eq!(UMIO_ADVICE_NORMAL, libc::MADV_NORMAL);
        assert_eq!(UMIO_ADVICE_RANDOM, libc::MADV_RANDOM);
        assert_eq!(UMIO_ADVICE_SEQUENTIAL, libc::MADV_SEQUENTIAL);
        assert_eq!(UMIO_ADVICE_WILLNEED, libc::MADV_WILLNEED);
        assert_eq!(UMIO_ADVICE_DONTNEED, libc::MADV_DONTNEED);
        assert_eq!(UMIO_ADVICE_HUGE, libc::MADV_HUGEPAGE);
        assert_eq!(UMIO_ADVICE_NOHUGE, libc::MADV_NOHUGEPAGE);
    }
}
