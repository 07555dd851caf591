//! UMap's C API (`umap/umap.h`), source-compatible with LLNL UMap 2.x,
//! without its bugs: the offset is honoured, errors are reported through
//! the return value and a positive errno (nothing throws or aborts),
//! `uunmap` of less than a whole region unmaps that part only, and pages
//! past the end of the file read as zeros. As with `mmap`'s `MAP_SHARED`
//! (and unlike UMap), what was written reaches the file at the latest
//! when the process exits normally (`exit.rs`).
//!
//! The header is written by hand (it keeps UMap's spelling of every
//! declaration); `tests/headers.rs` checks it against these exports.

use std::ffi::{c_char, c_int, c_long, c_void};

use std::ops::Range;
use std::sync::Arc;

use umio_core::Mapping;

use crate::boundary::{Errno, check_ptr, ffi_boundary};
use crate::map::{self, Backend, Request, Source};
use crate::{config, registry};

/// One page to prefetch with [`umap_prefetch`].
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct umap_prefetch_item {
    /// An address in the page.
    pub page_base_addr: *mut c_void,
}

/// Maps `length` bytes of the file open as `fd`, from `offset`, as `mmap`
/// does, with page faults served by umio.
///
/// # Safety
/// With `UMAP_FIXED`, whatever the process had mapped at
/// `[addr, addr + length)` is replaced, as with `mmap`'s `MAP_FIXED`,
/// umio regions included (see `umio_map`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap(
    addr: *mut c_void,
    length: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    ffi_boundary!(libc::MAP_FAILED, {
        if length == 0 {
            return Err(Errno(libc::EINVAL));
        }
        map::map(
            Request::new(addr, Some(length), prot, flags, offset),
            Source::Fd(fd, Backend::Pread),
        )
    })
}

/// Writes back and unmaps a umap'ed region, as UMap does, when `addr` is
/// its first byte and `length` is 0 or covers it; otherwise
/// `[addr, addr + length)` of it: `addr` on one of its page boundaries,
/// `length` rounded up to whole pages, the rest of the region staying
/// mapped.
///
/// # Safety
/// Nothing may use the unmapped memory afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn uunmap(addr: *mut c_void, length: usize) -> c_int {
    ffi_boundary!(-1, {
        map::unmap_region_or_range(addr, length)?;
        Ok(0)
    })
}

/// Writes back the dirty pages of every region and makes them durable.
///
/// # Safety
/// None: any thread may call it at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap_flush() -> c_int {
    ffi_boundary!(-1, {
        let mut first_error = Ok(());
        for m in registry::all() {
            if m.mapped_bytes() == 0 {
                continue;
            }
            if let Err(e) = m.flush() {
                log::warn!("umio: umap_flush: {e}");
                first_error = first_error.and(Err(Errno::from(e)));
            }
        }
        first_error?;
        Ok(0)
    })
}

/// 1 if regions may be mapped with `PROT_WRITE` (the kernel has
/// userfaultfd write-protection), else 0.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap_has_write_support() -> c_int {
    ffi_boundary!(0, {
        Ok(umio_core::kernel_features().is_ok_and(|f| f.write_protect()) as c_int)
    })
}

/// Starts filling the pages holding `page_array[0..npages]`'s addresses in
/// the background: one hint per region, its pages sorted, merged and read
/// in batches of up to the store's queue depth, all in flight at once (at
/// most half of the cache per call). If any address is outside every
/// region, or `npages` is negative, or `page_array` is NULL with a
/// positive `npages`, nothing is prefetched and errno is set to `EINVAL`;
/// errno is left alone on success.
///
/// # Safety
/// `page_array` points to `npages` items.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap_prefetch(npages: c_int, page_array: *mut umap_prefetch_item) {
    ffi_boundary!((), {
        let n = usize::try_from(npages).map_err(|_| Errno(libc::EINVAL))?;
        if n == 0 {
            return Ok(());
        }
        check_ptr(page_array)?;
        // SAFETY: checked non-null and aligned; the caller promised
        // `npages` items.
        let items = unsafe { std::slice::from_raw_parts(page_array, n) };
        // One hint per region: its pages sorted, merged and read in
        // batches of up to the store's depth, all in flight at once.
        let mut hints: Vec<(Arc<Mapping>, Vec<Range<usize>>)> = Vec::new();
        for item in items {
            let m = registry::get(item.page_base_addr)?;
            let ps = m.page_size();
            let page = registry::relative(&m, item.page_base_addr, 1)?.start / ps * ps;
            let page = page..(page + ps).min(m.len());
            match hints.iter_mut().find(|(h, _)| Arc::ptr_eq(h, &m)) {
                Some((_, ranges)) => ranges.push(page),
                None => hints.push((m, vec![page])),
            }
        }
        for (m, ranges) in hints {
            m.prefetch_ranges(&ranges)?;
        }
        Ok(())
    })
}

/// Reads the pages of `[paddr, paddr + size)` now and pins them: they are
/// not evicted, and their writes are written back by flush and unmap like
/// any page's. Pinned pages may hold at most half of the cache (`ENOMEM`).
/// Reports failure through errno only (UMap's signature returns nothing);
/// errno is left alone on success.
///
/// # Safety
/// None beyond passing an address umap returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap_fetch_and_pin(paddr: *mut c_char, size: u64) {
    ffi_boundary!((), {
        let len = usize::try_from(size).map_err(|_| Errno(libc::EINVAL))?;
        if len == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let m = registry::get(paddr.cast())?;
        let range = registry::relative(&m, paddr.cast(), len)?;
        m.pin(range)?;
        Ok(())
    })
}

/// The system page size.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_system_page_size() -> c_long {
    ffi_boundary!(-1, {
        // SAFETY: sysconf reads a system constant.
        Ok(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
    })
}

/// Runs `f` on the settings the running runtime runs with, whoever
/// started it (or, before it starts, those a mapping would start it
/// with); on a malformed `UMAP_*` variable returns 0 with errno `EINVAL`.
fn setting<T: Default>(f: impl FnOnce(&config::Settings) -> T) -> T {
    ffi_boundary!(T::default(), { Ok(f(&config::current()?.0)) })
}

/// The default page size of regions in bytes (`UMAP_PAGESIZE`; umio's
/// default is 4 KiB, as UMap's, the system page size).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_umap_page_size() -> u64 {
    setting(|s| s.page_size as u64)
}

/// `UMAP_MAX_FAULT_EVENTS` (default 256, 1 to 4096): fault events a filler
/// reads with one `read(2)`.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_max_fault_events() -> u64 {
    setting(|s| s.max_fault_events)
}

/// Filler threads (`UMAP_PAGE_FILLERS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_num_fillers() -> u64 {
    setting(|s| s.fillers as u64)
}

/// Evictor threads (`UMAP_PAGE_EVICTORS`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_num_evictors() -> u64 {
    setting(|s| s.evictors as u64)
}

/// The cache bound in pages of [`umapcfg_get_umap_page_size`]
/// (`UMAP_BUFSIZE`).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_max_pages_in_buffer() -> u64 {
    setting(|s| s.cache_bytes / s.page_size as u64)
}

/// Largest read-ahead window in pages (`UMAP_READ_AHEAD`; 0: none).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_read_ahead() -> u64 {
    setting(|s| (s.read_ahead / s.page_size) as u64)
}

/// Percent of the cache at which background eviction stops
/// (`UMAP_EVICT_LOW_WATER_THRESHOLD`, default 70).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_evict_low_water_threshold() -> c_int {
    setting(|s| s.low_water.into())
}

/// Percent of the cache at which background eviction starts
/// (`UMAP_EVICT_HIGH_WATER_THRESHOLD`, default 90).
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umapcfg_get_evict_high_water_threshold() -> c_int {
    setting(|s| s.high_water.into())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use umio_backends::{IoRequest, MemoryStore, Store, StoreError};
    use umio_core::{MapOptions, PrefetchKind};

    use super::*;

    /// A store of depth 32 that records the size of each batch submitted.
    struct Batches {
        inner: MemoryStore,
        sizes: Mutex<Vec<usize>>,
    }

    impl Batches {
        fn reads(&self) -> usize {
            self.sizes.lock().unwrap().iter().sum()
        }
    }

    impl Store for Batches {
        fn len(&self) -> Result<u64, StoreError> {
            self.inner.len()
        }
        fn set_len(&self, len: u64) -> Result<(), StoreError> {
            self.inner.set_len(len)
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
            self.sizes.lock().unwrap().push(1);
            self.inner.read_at(offset, buf)
        }
        fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
            self.inner.write_at(offset, buf)
        }
        fn sync(&self) -> Result<(), StoreError> {
            self.inner.sync()
        }
        fn is_writable(&self) -> bool {
            false
        }
        fn name(&self) -> &str {
            "batches"
        }
        fn submit(&self, batch: &mut [IoRequest<'_>]) {
            self.sizes.lock().unwrap().push(batch.len());
            for req in batch.iter_mut() {
                req.perform(&self.inner);
            }
        }
        fn queue_depth(&self) -> usize {
            32
        }
    }

    #[test]
    fn umap_prefetch_of_32_scattered_pages_is_one_batch_of_32_reads() {
        const PAGES: usize = 4096;
        let rt = config::runtime().unwrap();
        let ps = rt.config().page_size;
        let bytes: Vec<u8> = (0..PAGES * ps).map(|i| (i / ps) as u8 ^ i as u8).collect();
        let store = Arc::new(Batches {
            inner: MemoryStore::new(bytes.clone()),
            sizes: Mutex::new(Vec::new()),
        });
        // SAFETY: nothing else reaches the store.
        let m = unsafe {
            rt.map(
                MapOptions::new()
                    .store(store.clone())
                    .prefetch(PrefetchKind::None),
            )
        }
        .unwrap();
        let base = registry::insert(m);
        // 32 scattered pages, out of order, one of them twice.
        let mut pages: Vec<usize> = (0..32).map(|k| (k * 2654435761usize) % PAGES).collect();
        pages.push(pages[3]);
        let mut items: Vec<umap_prefetch_item> = pages
            .iter()
            .map(|p| umap_prefetch_item {
                page_base_addr: (base + p * ps + 17) as *mut c_void,
            })
            .collect();
        // SAFETY: `items` holds that many items.
        unsafe { umap_prefetch(items.len() as c_int, items.as_mut_ptr()) };
        let deadline = Instant::now() + Duration::from_secs(120);
        while store.reads() < 32 {
            assert!(Instant::now() < deadline, "hung: {:?}", store.sizes);
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            *store.sizes.lock().unwrap(),
            [32],
            "the hint's reads reach the store as one batch at its depth"
        );
        for p in pages {
            // SAFETY: inside the mapping, read-only.
            let got = unsafe { std::ptr::read_volatile((base + p * ps + 5) as *const u8) };
            assert_eq!(got, bytes[p * ps + 5], "page {p}");
        }
        let st = rt.stats();
        assert!(st.max_reads_in_flight >= 32, "{st:?}");
        // SAFETY: nothing uses the mapping afterwards.
        assert_eq!(unsafe { uunmap(base as *mut c_void, 0) }, 0);
    }
}
