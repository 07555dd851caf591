//! The process's runtime: `struct umio_config`, `umio_config_get`, the
//! `umio_config_set_*` setters, `umio_set_cache_bytes`,
//! `umio_user_mode_only`.

use std::ffi::{c_char, c_int, c_uint};

use umio_core::{Builder, FaultService, UffdMode};

use super::name;
use crate::boundary::{Errno, check_ptr, ffi_boundary};
use crate::config;
use crate::config::Eviction;
use crate::policy::{CEviction, umio_eviction_ops};

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

/// Copies the runtime's configuration to `*out`: once the runtime runs,
/// what it runs with (read off the running runtime, whoever started it:
/// in a program that also uses umio from Rust, `Runtime::global` may have
/// started it from the environment alone, without the setters), or before
/// it starts those a first mapping would start it with (defaults, the
/// `UMAP_*`/`UMIO_*` environment, and the setters called so far). Returns
/// 0, or -1 with errno `EINVAL` (`out` NULL or misaligned, or a malformed
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
/// a value out of range. A first mapping whose runtime fails to start
/// (a cache of fewer than 4 pages, say) is remembered: later mappings fail
/// with the same errno, without a second start, until a setter or a
/// variable changes the settings.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_page_size(bytes: usize) -> c_int {
    ffi_boundary!(-1, {
        Builder::check_page_size(bytes)?;
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
        Builder::check_cache_share(share)?;
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

/// Threads serving page faults: 1 to 256 (default: CPUs (1 to 4) + 1;
/// `UMAP_PAGE_FILLERS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_fillers(n: c_uint) -> c_int {
    ffi_boundary!(-1, {
        Builder::check_fillers(n as usize)?;
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
        Builder::check_evictors(n as usize)?;
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
/// 2 MiB; `UMAP_READ_AHEAD` gives it in pages). A window is also at most a
/// sixteenth of the cache.
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

/// How faults are served, by name (any case): `"fillers"` (the default:
/// filler threads read fault events and resolve them), `"in-thread"` (the
/// faulting thread serves its own fault in umio's SIGBUS handler, chained
/// to the application's: no thread hand-off; a non-resident mapped buffer
/// passed to a system call then fails it with `EFAULT`: call
/// `umio_populate` first) or `"auto"` (in-thread where the userfaultfd is
/// user-mode-only anyway). Overrides `UMIO_FAULT_SERVICE`; before the
/// first mapping only (after it `EBUSY`); `EINVAL` for NULL or another
/// name. `ENOTSUP` at the first mapping if the kernel lacks
/// `UFFD_FEATURE_SIGBUS`.
///
/// # Safety
/// `name` is NULL (`EINVAL`) or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_config_set_fault_service(name: *const c_char) -> c_int {
    ffi_boundary!(-1, {
        // SAFETY: the caller promised NULL or a NUL-terminated string.
        let service = unsafe { self::name(name) }?
            .and_then(FaultService::from_name)
            .ok_or(Errno(libc::EINVAL))?;
        config::set(|o| o.fault_service = Some(service))?;
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
