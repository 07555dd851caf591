//! umio's own C API (`umio.h`, generated from this file by cbindgen).

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use umio_core::{Advice, PrefetchKind, PromoteKind, UffdMode};

use crate::boundary::{Errno, check_ptr, ffi_boundary};
use crate::config::Eviction;
use crate::map::{self, Backend, Request, Source};
use crate::policy::{CEviction, umio_eviction_ops};
use crate::prefetcher::{CPrefetcher, umio_prefetch_ops};
use crate::promoter::{CPromoter, umio_promote_ops};
use crate::store::{CStore, umio_store_ops};
use crate::{config, registry};

/// Read-ahead window of a region whose options name a policy but no window.
const DEFAULT_WINDOW: usize = 2 << 20;

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

/// Options of `umio_map`. All zeros (or a NULL pointer) means the
/// runtime's defaults.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct umio_map_options {
    /// Fill unit of this region in bytes: a multiple of 4096 up to 1 GiB
    /// and at most a quarter of the cache. 0: the runtime's page size.
    pub page_size: usize,
    /// Prefetch policy by name: `"none"`, `"sequential"` (adaptive
    /// read-ahead) or `"stride"` (fetches ahead along a detected stride,
    /// forward or backward). NULL or `""`: the runtime's, or
    /// `"sequential"` if `read_ahead` is set. Must be NULL or `""` with
    /// `prefetcher`.
    pub prefetch: *const c_char,
    /// Largest read-ahead window in bytes for `"sequential"` and
    /// `"stride"`; 0: 2 MiB. Must be 0 with `"none"` and with
    /// `prefetcher`.
    pub read_ahead: usize,
    /// Eviction policy by name: `"fifo"`, `"clock"`, `"lru"` or `"2q"`.
    /// Eviction is runtime-wide (see `umio_config_set_eviction`): a name
    /// other than the runtime's (or any name when the runtime's policy is
    /// written in C) fails with `EOPNOTSUPP`. NULL or `""`: the runtime's.
    pub eviction: *const c_char,
    /// A store written in C to map instead of a file; `fd` must then be -1.
    /// NULL: map `fd`.
    pub store: *const umio_store_ops,
    /// A prefetch policy written in C for this mapping (see `struct
    /// umio_prefetch_ops`; the struct is copied, `user` is umio's from the
    /// call on). NULL: `prefetch` and `read_ahead` choose.
    pub prefetcher: *const umio_prefetch_ops,
    /// How umio reads and writes the file `fd`: `"pread"` (`pread` and
    /// `pwrite`), `"io_uring"` (io_uring, many requests in flight per
    /// batch), `"io_uring_direct"` (the same with `O_DIRECT`: the file's
    /// pages are cached once, by umio; `EINVAL` where the filesystem
    /// refuses it) or `"dax"` (the file is mapped shared, as persistent
    /// memory is, and pages are copied straight from it; its length is
    /// fixed). NULL or `""`: `"pread"`. Must be NULL or `""` with `store`.
    /// `"rados:<settings>"` maps a Ceph RADOS object set instead of a file
    /// (`fd` must be -1; libumio built with the `rados` feature, else
    /// `EOPNOTSUPP`): the settings are `key=value` pairs separated by
    /// commas, `pool` and `prefix` required, and `conf` (a ceph.conf path),
    /// `client` (id), `object_size` (bytes, for a new set), `queue_depth`,
    /// `op_timeout` (seconds; 0 waits forever; default 30) and `create=1`
    /// (create the set `len` bytes long if absent); a bad one is `EINVAL`.
    pub backend: *const c_char,
    /// Huge-page promotion policy by name: `"never"`, `"always"` (the 2 MiB
    /// range of every miss) or `"sequential"` (when a thread faults on two
    /// consecutive pages). Ranges are promoted in the background. Needs a
    /// page size that divides 2 MiB. NULL or `""`: `"never"`. Must be NULL
    /// or `""` with `promoter`.
    pub promote: *const c_char,
    /// A promotion policy written in C for this mapping (see `struct
    /// umio_promote_ops`; copied, `user` is umio's from the call on).
    pub promoter: *const umio_promote_ops,
    /// `UMIO_HUGETLB_REQUIRE`: back the mapping with hugetlbfs 2 MiB pages
    /// (the page size is then 2 MiB; `ENOMEM` when the pool has no free
    /// page: raise `vm.nr_hugepages`). `UMIO_HUGETLB_FALLBACK`: the same,
    /// or ordinary memory with 2 MiB pages when the pool is empty. 0: no.
    pub hugetlb: c_int,
}

/// `umio_map_options.hugetlb`: hugetlbfs pages or fail with `ENOMEM`.
pub const UMIO_HUGETLB_REQUIRE: c_int = 1;
/// `umio_map_options.hugetlb`: hugetlbfs pages, or ordinary memory with
/// 2 MiB pages when none is free.
pub const UMIO_HUGETLB_FALLBACK: c_int = 2;

/// Counters of one mapping since it was mapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_stats {
    /// Page faults served.
    pub faults: u64,
    /// Of those, faults served without a store read (the page was being
    /// filled already, or was resident, or was clean and written first).
    pub hits: u64,
    /// Pages read from the store (misses and prefetch).
    pub fills: u64,
    /// Of those, pages read by prefetch or read-ahead.
    pub prefetched: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Store writes made by write-back (each covers a run of pages).
    pub writebacks: u64,
    /// Bytes read from the store.
    pub bytes_read: u64,
    /// Bytes written to the store.
    pub bytes_written: u64,
    /// Faults that made no progress, which umio ended instead of letting
    /// the thread fault forever (the kernel refused a fill: SIGBUS; or the
    /// page's mapping was dropped behind umio's back, say by the
    /// application's own `madvise(MADV_DONTNEED)`: a clean page is filled
    /// again, a dirty one gives SIGBUS). Each is logged (`UMAP_LOG_LEVEL`);
    /// 0 in a correct program.
    pub no_progress_faults: u64,
}

/// The runtime's configuration: see `umio_config_get`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct umio_config {
    /// Default page size of regions in bytes.
    pub page_size: u64,
    /// Bound on the bytes of all resident pages together.
    pub cache_bytes: u64,
    /// Threads serving page faults.
    pub fillers: u32,
    /// Background eviction threads.
    pub evictors: u32,
    /// Percent of the cache at which background eviction starts.
    pub high_water: u32,
    /// Percent of the cache at which it stops.
    pub low_water: u32,
    /// Default largest read-ahead window in bytes; 0: no read-ahead.
    pub read_ahead: u64,
    /// The eviction policy's name: `"fifo"`, `"clock"`, `"lru"`, `"2q"` or,
    /// for one installed with `umio_config_set_eviction_ops`, `"custom"` (a
    /// static string).
    pub eviction: *const c_char,
    /// 1 once the runtime runs (the settings are then fixed), else 0.
    pub running: c_int,
    /// Fault events a filler reads with one `read(2)`.
    pub max_fault_events: u32,
    /// Bound on the bytes of huge pages, kept apart from `cache_bytes`
    /// (`umio_config_set_huge_cache_bytes`); 0: no separate pool.
    pub huge_cache_bytes: u64,
}

/// A NUL-terminated name, or `None` for NULL or `""`.
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
unsafe fn name<'a>(name: *const c_char) -> Result<Option<&'a str>, Errno> {
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller promised a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Errno(libc::EINVAL))?;
    Ok(Some(s).filter(|s| !s.is_empty()))
}

/// Maps `len` bytes of the file open as `fd` (or of `options->store`) from
/// `offset`, as `mmap` does, with page faults served by umio.
///
/// `prot` is `PROT_READ`, optionally with `PROT_WRITE` (which needs a
/// descriptor open read-write, else `EACCES`); `flags` is `MAP_SHARED` or
/// `MAP_PRIVATE` (the same here: writes reach the file at the latest on
/// flush or unmap), optionally with `MAP_FIXED`. `offset` is a multiple of
/// 4096. `len` 0 maps from `offset` to the end of the store. Bytes past
/// the end of the store read as zeros; a `PROT_WRITE` mapping reaching
/// past the end extends the store when it is mapped.
///
/// Returns the address, or `UMIO_FAILED` with errno: `EINVAL` (bad
/// `prot`, `flags`, `offset`, `len`, options or fixed address), `EBADF`
/// (`fd` not open), `EACCES` (file not open for reading, or `PROT_WRITE`
/// on a read-only descriptor or store), `ENODEV` (not a regular file or
/// block device), `EEXIST` (`MAP_FIXED` over another umio mapping),
/// `EOPNOTSUPP`, `ENOMEM`, or the errno of the store or the system call
/// that failed.
///
/// # Safety
/// `options` is NULL or points to a valid `struct umio_map_options` whose
/// strings are NUL-terminated and whose store (if any) follows the
/// contract of `struct umio_store_ops`. With `MAP_FIXED`, whatever the
/// process had mapped at `[addr, addr + len)` is replaced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_map(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
    options: *const umio_map_options,
) -> *mut c_void {
    ffi_boundary!(libc::MAP_FAILED, {
        let mut req = Request::new(addr, (len != 0).then_some(len), prot, flags, offset);
        if options.is_null() {
            return map::map(req, Source::Fd(fd, Backend::Pread));
        }
        check_ptr(options)?;
        // SAFETY: non-null, aligned, and the caller promised a valid struct.
        let o = unsafe { &*options };
        if !o.store.is_null() {
            check_ptr(o.store)?;
        }
        if !o.prefetcher.is_null() {
            check_ptr(o.prefetcher)?;
        }
        if !o.promoter.is_null() {
            check_ptr(o.promoter)?;
        }
        // From here on the store and the prefetcher are umio's: dropped
        // (and released) on every early return.
        let store = (!o.store.is_null()).then(|| {
            // SAFETY: non-null, aligned, valid by the caller's promise.
            CStore::new(unsafe { &*o.store })
        });
        let prefetcher = (!o.prefetcher.is_null()).then(|| {
            // SAFETY: non-null, aligned, valid by the caller's promise.
            CPrefetcher::new(unsafe { &*o.prefetcher })
        });
        let promoter = (!o.promoter.is_null()).then(|| {
            // SAFETY: non-null, aligned, valid by the caller's promise.
            CPromoter::new(unsafe { &*o.promoter })
        });
        // SAFETY: the caller promised a NUL-terminated string or NULL.
        let backend_name = unsafe { name(o.backend) }?;
        let rados = backend_name.and_then(|b| b.strip_prefix("rados:"));
        let backend = match backend_name {
            _ if rados.is_some() => Backend::Pread,
            None | Some("pread") => Backend::Pread,
            Some("io_uring") => Backend::Uring { direct: false },
            Some("io_uring_direct") => Backend::Uring { direct: true },
            Some("dax") => Backend::Dax,
            Some(_) => return Err(Errno(libc::EINVAL)),
        };
        let source = match store {
            None if rados.is_some() && fd != -1 => return Err(Errno(libc::EINVAL)),
            None if rados.is_some() => {
                Source::Rados(crate::rados::RadosSpec::parse(rados.unwrap_or_default())?)
            }
            None => Source::Fd(fd, backend),
            Some(_) if rados.is_some() => return Err(Errno(libc::EINVAL)),
            Some(_) if fd != -1 || backend != Backend::Pread => {
                return Err(Errno(libc::EINVAL));
            }
            Some(store) => Source::Store(store),
        };
        if let Some(p) = prefetcher {
            p.check()?;
            // SAFETY: the caller promised a NUL-terminated string or NULL.
            if unsafe { name(o.prefetch) }?.is_some() || o.read_ahead != 0 {
                return Err(Errno(libc::EINVAL));
            }
            req.prefetcher = Some(Arc::new(p));
        }
        // SAFETY: the caller promised a NUL-terminated string or NULL.
        let promote = unsafe { name(o.promote) }?;
        match promoter {
            Some(p) => {
                p.check()?;
                if promote.is_some() {
                    return Err(Errno(libc::EINVAL));
                }
                req.promoter = Some(Arc::new(p));
            }
            None => {
                req.promote = match promote {
                    None => None,
                    Some(n) => Some(PromoteKind::from_name(n).ok_or(Errno(libc::EINVAL))?),
                };
            }
        }
        req.hugetlb = match o.hugetlb {
            0 => None,
            UMIO_HUGETLB_REQUIRE => Some(false),
            UMIO_HUGETLB_FALLBACK => Some(true),
            _ => return Err(Errno(libc::EINVAL)),
        };
        req.page_size = (o.page_size != 0).then_some(o.page_size);
        let window = if o.read_ahead == 0 {
            DEFAULT_WINDOW
        } else {
            o.read_ahead
        };
        // SAFETY: the caller promised NUL-terminated strings or NULL.
        req.prefetch = match (unsafe { name(o.prefetch) }?, o.read_ahead) {
            (None, 0) => None,
            (None, _) | (Some("sequential"), _) => {
                Some(PrefetchKind::Sequential { max_window: window })
            }
            (Some("stride"), _) => Some(PrefetchKind::Stride { max_window: window }),
            (Some("none"), 0) => Some(PrefetchKind::None),
            _ => return Err(Errno(libc::EINVAL)),
        };
        // SAFETY: as above.
        if let Some(wanted) = unsafe { name(o.eviction) }? {
            let wanted = config::parse_policy(wanted).ok_or(Errno(libc::EINVAL))?;
            config::runtime()?;
            if config::current()?.0.eviction != Eviction::Builtin(wanted) {
                return Err(Errno(libc::EOPNOTSUPP));
            }
        }
        map::map(req, source)
    })
}

/// Writes back and unmaps `[addr, addr + len)` of a mapping: `addr` on one
/// of its page boundaries, `len` rounded up to whole pages; the rest stays
/// mapped. Returns 0, or -1 with errno `EINVAL` (a range umio does not
/// map, or no longer maps) or the write-back's errno (the range is unmapped
/// anyway).
///
/// # Safety
/// Nothing may use the unmapped memory afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_unmap(addr: *mut c_void, len: usize) -> c_int {
    ffi_boundary!(-1, {
        map::unmap(addr, len)?;
        Ok(0)
    })
}

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
    ffi_boundary!(-1, {
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.flush_range(range)?;
        Ok(0)
    })
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
        m.write_at(range.start, bytes)?;
        Ok(0)
    })
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
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.write_back_range(range)?;
        Ok(0)
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
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.invalidate_range(range)?;
        Ok(0)
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
    ffi_boundary!(-1, {
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.prefetch(range)?;
        Ok(0)
    })
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
            UMIO_ADVICE_DONTNEED => Advice::DontNeed,
            UMIO_ADVICE_HUGE => Advice::Huge,
            UMIO_ADVICE_NOHUGE => Advice::NoHuge,
            _ => return Err(Errno(libc::EINVAL)),
        };
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.advise(range, advice)?;
        Ok(0)
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
    ffi_boundary!(-1, {
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.pin(range)?;
        Ok(0)
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
    ffi_boundary!(-1, {
        let m = registry::get(addr)?;
        let range = registry::relative(&m, addr, len)?;
        m.unpin(range)?;
        Ok(0)
    })
}

/// Copies the counters of the mapping holding `addr` to `*out`. Returns 0,
/// or -1 with errno `EINVAL` (`out` NULL or misaligned, or `addr` in no
/// umio mapping).
///
/// # Safety
/// `out` points to writable memory for a `struct umio_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_stats(addr: *const c_void, out: *mut umio_stats) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(out)?;
        let s = registry::get(addr)?.stats();
        let stats = umio_stats {
            faults: s.faults,
            hits: s.hits,
            fills: s.fills,
            prefetched: s.prefetched,
            evictions: s.evictions,
            writebacks: s.writebacks,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            no_progress_faults: s.no_progress_faults,
        };
        // SAFETY: checked non-null and aligned; the caller promised it is
        // writable.
        unsafe { out.write(stats) };
        Ok(0)
    })
}

/// Copies the runtime's configuration to `*out`: the settings in force,
/// or before the first mapping those it would start with (defaults, the
/// `UMAP_*` environment, and the setters called so far). Returns 0, or -1
/// with errno `EINVAL` (`out` NULL or misaligned, or a malformed `UMAP_*`
/// variable).
///
/// # Safety
/// `out` points to writable memory for a `struct umio_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_get(out: *mut umio_config) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(out)?;
        let (s, running) = config::current()?;
        let eviction = s.eviction.c_name();
        let c = umio_config {
            page_size: s.page_size as u64,
            cache_bytes: s.cache_bytes,
            fillers: s.fillers.try_into().unwrap_or(u32::MAX),
            evictors: s.evictors.try_into().unwrap_or(u32::MAX),
            high_water: s.high_water.into(),
            low_water: s.low_water.into(),
            read_ahead: s.read_ahead as u64,
            eviction: eviction.as_ptr(),
            running: running.into(),
            max_fault_events: s.max_fault_events.try_into().unwrap_or(u32::MAX),
            huge_cache_bytes: s.huge_cache_bytes,
        };
        // SAFETY: checked non-null and aligned; the caller promised it is
        // writable.
        unsafe { out.write(c) };
        Ok(0)
    })
}

/// Default page size of regions in bytes: a multiple of 4096 up to 1 GiB
/// (default 4 KiB; `UMAP_PAGESIZE`). Like every `umio_config_set_*`
/// call, it overrides the environment, works only before the first
/// mapping (after it: -1 with errno `EBUSY`), and fails with `EINVAL` for
/// a value out of range.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_page_size(bytes: usize) -> c_int {
    ffi_boundary!(-1, {
        config::check_page_size(bytes)?;
        config::set(|o| o.page_size = Some(bytes))?;
        Ok(0)
    })
}

/// Bound on the bytes of all resident pages together: at least 4 pages
/// (checked at the first mapping). Default: a quarter of physical memory,
/// 64 MiB to 4 GiB; `UMAP_BUFSIZE` gives it in pages.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_cache_bytes(bytes: u64) -> c_int {
    ffi_boundary!(-1, {
        if bytes == 0 {
            return Err(Errno(libc::EINVAL));
        }
        config::set(|o| o.cache_bytes = Some(bytes))?;
        Ok(0)
    })
}

/// Changes the cache bound while the runtime runs (before the first
/// mapping: as `umio_config_set_cache_bytes`). Growing takes effect at
/// once; shrinking returns at once and the evictors bring the cache down
/// to the new bound in the background, writing dirty pages back first and
/// leaving pinned pages alone. Stops an automatic bound
/// (`umio_config_set_cache_auto`). Returns 0, or -1 with errno `EINVAL`
/// (fewer than 4 pages of the page size or of a mapped region's) or
/// `EBUSY` (pinned pages would hold more than half of the cache); nothing
/// changes then.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_set_cache_bytes(bytes: u64) -> c_int {
    ffi_boundary!(-1, {
        if bytes == 0 {
            return Err(Errno(libc::EINVAL));
        }
        config::set_cache_bytes(bytes)?;
        Ok(0)
    })
}

/// An automatic cache bound: `share` (more than 0, at most 1; kept to a
/// thousandth) of the memory left for umio, following the process's memory
/// cgroup limit and the machine's memory pressure while it runs (see the
/// README, "A cache that follows memory"). Before the first mapping only;
/// replaces `umio_config_set_cache_bytes`. Returns 0, or -1 with errno
/// `EINVAL` (a share out of range) or `EBUSY` (the runtime runs).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_cache_auto(share: f64) -> c_int {
    ffi_boundary!(-1, {
        if !(share > 0.0 && share <= 1.0) {
            return Err(Errno(libc::EINVAL));
        }
        let thousandths = ((share * 1000.0).round() as u16).max(1);
        config::set(|o| {
            o.cache_auto = Some(thousandths);
            o.cache_bytes = None;
        })?;
        Ok(0)
    })
}

/// A separate pool of `bytes` for huge pages (xmap's two pools): regions
/// of 2 MiB pages (hugetlbfs ones among them) and 2 MiB ranges promoted
/// to transparent huge pages are cached and evicted within it, so scans
/// through huge pages never evict small pages, nor the reverse;
/// `cache_bytes` then bounds the small pages. At least 8 MiB (four huge
/// pages), or 0 for no separate pool (the default;
/// `UMIO_HUGE_CACHE_BYTES`, in bytes).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_huge_cache_bytes(bytes: u64) -> c_int {
    ffi_boundary!(-1, {
        let bytes = config::check_huge_cache_bytes(bytes)?;
        config::set(|o| o.huge_cache_bytes = Some(bytes))?;
        Ok(0)
    })
}

/// Threads serving page faults: 1 to 256 (default: CPUs, 1 to 4;
/// `UMAP_PAGE_FILLERS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_fillers(n: c_uint) -> c_int {
    ffi_boundary!(-1, {
        if !(1..=256).contains(&n) {
            return Err(Errno(libc::EINVAL));
        }
        config::set(|o| o.fillers = Some(n as usize))?;
        Ok(0)
    })
}

/// Background eviction threads: 0 to 64 (default 1; `UMAP_PAGE_EVICTORS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_evictors(n: c_uint) -> c_int {
    ffi_boundary!(-1, {
        if n > 64 {
            return Err(Errno(libc::EINVAL));
        }
        config::set(|o| o.evictors = Some(n as usize))?;
        Ok(0)
    })
}

/// Background eviction starts when the cache is `high` percent full and
/// stops at `low`: 0 <= low <= high <= 100, high > 0 (default 90 and 70;
/// `UMAP_EVICT_HIGH_WATER_THRESHOLD`, `UMAP_EVICT_LOW_WATER_THRESHOLD`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_watermarks(high: c_uint, low: c_uint) -> c_int {
    ffi_boundary!(-1, {
        let w = config::check_watermarks(high, low)?;
        config::set(|o| o.watermarks = Some(w))?;
        Ok(0)
    })
}

/// Eviction policy of the runtime by name: `"fifo"`, `"clock"`, `"lru"`
/// or `"2q"`, any case (default `"clock"`; `UMIO_EVICTION`).
///
/// # Safety
/// `name` is NULL (`EINVAL`) or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_eviction(name: *const c_char) -> c_int {
    ffi_boundary!(-1, {
        // SAFETY: the caller promised NULL or a NUL-terminated string.
        let policy = unsafe { self::name(name) }?
            .and_then(config::parse_policy)
            .ok_or(Errno(libc::EINVAL))?;
        // The policy replaced, if any, is dropped (released) unlocked.
        let _old = config::set(|o| o.eviction.replace(Eviction::Builtin(policy)))?;
        Ok(0)
    })
}

/// Installs an eviction policy written in C as the runtime's (see `struct
/// umio_eviction_ops`; the struct is copied and `user` is umio's from the
/// call on, released at once if the call fails). Replaces any policy
/// chosen before by `umio_config_set_eviction`, `UMIO_EVICTION` or an
/// earlier call (whose `release` is then called). Before the first mapping
/// only (after it: -1 with errno `EBUSY`); `EINVAL` if `ops` is NULL or
/// misaligned or `select_victims` is NULL.
///
/// # Safety
/// `ops` is NULL or points to a valid `struct umio_eviction_ops` whose
/// callbacks follow its contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_eviction_ops(ops: *const umio_eviction_ops) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(ops)?;
        // SAFETY: non-null, aligned, valid by the caller's promise. From
        // here on `user` is umio's: released on every early return.
        let policy = CEviction::new(unsafe { &*ops })?;
        let _old = config::set(|o| o.eviction.replace(Eviction::Custom(policy)))?;
        Ok(0)
    })
}

/// Most fault events a filler reads with one `read(2)`: 1 to 4096
/// (default 256; `UMAP_MAX_FAULT_EVENTS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_max_fault_events(n: c_uint) -> c_int {
    ffi_boundary!(-1, {
        let n = config::check_max_fault_events(n.into())?;
        config::set(|o| o.max_fault_events = Some(n))?;
        Ok(0)
    })
}

/// Default largest read-ahead window in bytes; 0: no read-ahead (default
/// 2 MiB; `UMAP_READ_AHEAD` gives it in pages).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_read_ahead(bytes: usize) -> c_int {
    ffi_boundary!(-1, {
        config::set(|o| o.read_ahead = Some(bytes))?;
        Ok(0)
    })
}

/// Which page faults the runtime's userfaultfd receives, by name (any
/// case): `"auto"` (the default: full mode where the process may use it,
/// else user-mode-only), `"full"` (full mode or the first mapping fails
/// with `EPERM`: run as root, grant read-write access to
/// `/dev/userfaultfd`, or set `vm.unprivileged_userfaultfd=1`) or
/// `"user"` (user-mode-only even where full mode is allowed). Overrides
/// `UMIO_UFFD_MODE`; before the first mapping only (after it `EBUSY`);
/// `EINVAL` for NULL or another name. See `umio_user_mode_only`.
///
/// # Safety
/// `name` is NULL (`EINVAL`) or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_uffd_mode(name: *const c_char) -> c_int {
    ffi_boundary!(-1, {
        // SAFETY: the caller promised NULL or a NUL-terminated string.
        let mode = unsafe { self::name(name) }?
            .and_then(UffdMode::from_name)
            .ok_or(Errno(libc::EINVAL))?;
        config::set(|o| o.uffd_mode = Some(mode))?;
        Ok(0)
    })
}

/// Whether files mapped with the `pread` backend (the default) are read
/// and written through the kernel's page cache too: `on` nonzero keeps
/// the kernel's copy (buffered `pread`/`pwrite`), 0 (the default) makes
/// umio's cache the only one (`O_DIRECT` where the file system supports
/// it, else the pages read and written are dropped from the kernel's
/// cache). Durability is the same either way. Overrides
/// `UMIO_PAGE_CACHE`; before the first mapping only (after it `EBUSY`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_page_cache(on: c_int) -> c_int {
    ffi_boundary!(-1, {
        config::set(|o| o.page_cache = Some(on != 0))?;
        Ok(0)
    })
}

/// 1 if the runtime serves user-mode page faults only, 0 if it runs in
/// full mode; before the first mapping, what a mapping made now would get.
/// -1 with errno if no userfaultfd can be opened at all (`EPERM`, `EINVAL`
/// before Linux 5.11), if full mode is required and not permitted
/// (`EPERM`), or if the `UMAP_*`/`UMIO_*` environment is malformed
/// (`EINVAL`).
///
/// In user-mode-only mode a system call given a mapped buffer fails with
/// `EFAULT` (or moves fewer bytes) where a page of it is not resident, or
/// where it writes into a page that is resident but clean in a writable
/// mapping: pin the range first (`umap_fetch_and_pin`, `umio_pin`) and, if
/// the kernel is to write into it, store one byte to each page of it.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_user_mode_only() -> c_int {
    ffi_boundary!(-1, { Ok(config::user_mode_only()?.into()) })
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
