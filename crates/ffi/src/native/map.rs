//! A mapping made and unmade: `struct umio_map_options`, `umio_map`,
//! `umio_unmap`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use umio_core::{FaultService, PrefetchKind, PromoteKind};

use super::name;
use crate::boundary::{Errno, check_ptr, ffi_boundary};
use crate::config;
use crate::config::Eviction;
use crate::extensible::{self, Extensible};
use crate::map::{self, Backend, Request, Source};
use crate::prefetcher::{CPrefetcher, umio_prefetch_ops};
use crate::promoter::{CPromoter, umio_promote_ops};
use crate::store::{CStore, umio_store_ops};

// SAFETY: repr(C), `size` first, integers, raw pointers and nullable
// function pointers (`Option<fn>`: all zeros is `None`) only.
unsafe impl Extensible for umio_map_options {}

/// Read-ahead window of a region whose options name a policy but no window.
const DEFAULT_WINDOW: usize = 2 << 20;

/// Options of `umio_map`. A NULL pointer, or a structure all zeros but
/// `size`, means the runtime's defaults:
/// `struct umio_map_options o = { .size = sizeof o };`. The structure may
/// grow in later versions (see "Extensible structures" above).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umio_map_options {
    /// `sizeof(struct umio_map_options)` as the caller was compiled: umio
    /// reads no byte past it, and fields past it are 0 (their default).
    pub size: usize,
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
    /// `prefetcher`. A window is also at most a sixteenth of the cache.
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
    /// Optional with `store` (must be NULL without it): sets `len` bytes
    /// of the store at `offset` to zeros, freeing their space if the store
    /// can (a file's `fallocate(FALLOC_FL_PUNCH_HOLE)`), without changing
    /// its length; returns 0 or a negative errno. Called with
    /// `store->user`, from any thread, by `umio_advise(...,
    /// UMIO_ADVICE_REMOVE)`. NULL (or a program built against a header
    /// without this member): `UMIO_ADVICE_REMOVE` fails with `EOPNOTSUPP`.
    /// A member here rather than in `struct umio_store_ops`, which has no
    /// `size` member to grow by.
    pub store_punch_hole:
        Option<unsafe extern "C" fn(user: *mut c_void, offset: u64, len: u64) -> c_int>,
    /// How this mapping's faults are served, by name: `"fillers"` (filler
    /// threads; the kernel's own accesses to the mapping, a `read(2)` into
    /// it, are served too where the userfaultfd is in full mode),
    /// `"in-thread"` (the faulting thread, in a SIGBUS handler: faster, but
    /// a system call given a non-resident part of the mapping fails with
    /// `EFAULT`: use `umio_read_into` and `umio_write_from`) or `"auto"`.
    /// NULL or `""`: the runtime's (`umio_config_set_fault_service`,
    /// `UMIO_FAULT_SERVICE`; `"auto"` by default). `umio_stats` says
    /// which the mapping got (`in_thread`).
    pub fault_service: *const c_char,
    /// Non-zero: the program declares the mapping private to user code, i.e.
    /// the kernel never reads or writes it on the program's behalf (no
    /// `read(2)`/`write(2)`, io_uring, AIO or `O_DIRECT` into or out of it
    /// but through `umio_read_into`/`umio_write_from`); `"auto"` then serves
    /// it in the faulting thread. 0: no such promise.
    pub user_access_only: c_int,
    /// Non-zero, for a writable mapping of a file (`fd`, no `store`): its
    /// writes reach the file even if the process is killed before they
    /// were written back, as a kernel `MAP_SHARED` mapping's do: a keeper
    /// process writes what is still in umio's cache once the process is
    /// gone (`MapOptions::survive_process_death`). 0: they are lost.
    pub survive_process_death: c_int,
}

/// `umio_map_options.hugetlb`: hugetlbfs pages or fail with `ENOMEM`.
pub const UMIO_HUGETLB_REQUIRE: c_int = 1;
/// `umio_map_options.hugetlb`: hugetlbfs pages, or ordinary memory with
/// 2 MiB pages when none is free.
pub const UMIO_HUGETLB_FALLBACK: c_int = 2;

/// Maps `len` bytes of the file open as `fd` (or of `options->store`) from
/// `offset`, as `mmap` does, with page faults served by umio.
///
/// `prot` is `PROT_READ`, optionally with `PROT_WRITE` (which needs a
/// descriptor open read-write, else `EACCES`); `flags` is `MAP_SHARED` or
/// `MAP_PRIVATE` (the same here: writes reach the file at the latest on
/// flush or unmap), optionally with `MAP_FIXED` or `MAP_FIXED_NOREPLACE`
/// (then `addr` is a non-NULL multiple of 4096). `MAP_FIXED` replaces
/// what is mapped in the range, as `mmap` does, umio mappings included:
/// their dirty pages there are written back first, the rest of them stays
/// mapped; a range that would split one of their pages holding bytes in
/// use outside it fails with `EINVAL` and changes nothing (a page is
/// umio's fill unit). `offset` is a multiple of
/// 4096. `len` 0 maps from `offset` to the end of the store. Bytes past
/// the end of the store read as zeros; a `PROT_WRITE` mapping reaching
/// past the end extends the store when it is mapped.
///
/// Other flags, as `mmap` users pass them (checked beside `mmap` by
/// `tests/c/flags.c`; `umap` takes the same):
///
/// | flag | meaning |
/// |---|---|
/// | `MAP_NORESERVE` | accepted: umio reserves no swap |
/// | `MAP_POPULATE` | every page read in before the call returns |
/// | `MAP_LOCKED` | every page read in and pinned (`ENOMEM` beyond half of the cache) |
/// | `MAP_HUGETLB` (`MAP_HUGE_2MB` or no size) | hugetlbfs 2 MiB pages (`ENOMEM` without free ones) |
/// | `MAP_ANONYMOUS` (`fd` -1, `offset` 0) | zero-filled memory over a nameless scratch file |
/// | anything else | `EINVAL`, the reason logged |
///
/// Returns the address, or `UMIO_FAILED` with errno: `EINVAL` (bad
/// `prot`, `flags`, `offset`, `len`, options or fixed address, or
/// `options->size` not set), `E2BIG` (`options->size` larger than this
/// library's structure, with fields it does not know set), `EBADF`
/// (`fd` not open), `EACCES` (file not open for reading, or `PROT_WRITE`
/// on a read-only descriptor or store), `ENODEV` (not a regular file or
/// block device), `EEXIST` (`MAP_FIXED_NOREPLACE` over a mapping),
/// `EOPNOTSUPP`, `ENOMEM`, or the errno of the store or the system call
/// that failed.
///
/// # Safety
/// `options` is NULL or points to a valid `struct umio_map_options` (its
/// first `size` bytes readable) whose strings are NUL-terminated and
/// whose store (if any) follows the contract of `struct umio_store_ops`.
/// With `MAP_FIXED`, whatever the process had mapped at `[addr, addr +
/// len)` is replaced.
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
        // SAFETY: non-null; the caller promised `size` readable bytes.
        let o = &unsafe { extensible::read(options) }?;
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
            CStore::new(unsafe { &*o.store }, o.store_punch_hole)
        });
        let prefetcher = (!o.prefetcher.is_null()).then(|| {
            // SAFETY: non-null, aligned, valid by the caller's promise.
            CPrefetcher::new(unsafe { &*o.prefetcher })
        });
        let promoter = (!o.promoter.is_null()).then(|| {
            // SAFETY: non-null, aligned, valid by the caller's promise.
            CPromoter::new(unsafe { &*o.promoter })
        });
        if store.is_none() && o.store_punch_hole.is_some() {
            return Err(Errno(libc::EINVAL));
        }
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
        // SAFETY: the caller promised a NUL-terminated string or NULL.
        req.fault_service = match unsafe { name(o.fault_service) }? {
            None => None,
            Some(n) => Some(FaultService::from_name(n).ok_or(Errno(libc::EINVAL))?),
        };
        req.user_access_only = o.user_access_only != 0;
        req.survive_process_death = o.survive_process_death != 0;
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
