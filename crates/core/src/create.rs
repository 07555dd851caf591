//! Making a mapping: [`Runtime::map`] and [`Runtime::map_file`] check the
//! options and create the region (`Region::create`): its page size and
//! pool, its memory (placed by the kernel, at a hugetlbfs mapping, or at a
//! fixed address that may replace older umio regions there), its
//! registration with the userfaultfd, and its entry in the region table.

use std::fs::File;
use std::ops::Range;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use umio_backends::{FileStore, Store, UncachedFileStore};

use crate::config::{Builder, MIN_PAGE_SIZE};
use crate::error::{Error, Result};
use crate::huge::{HUGE_PAGE_SIZE, HugeState, free_huge_pages};
use crate::kernel::FaultService;
use crate::mapping::{Fixed, MapOptions, Mapping};
use crate::region::Region;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::sys::mm;
use crate::sys::uffd::feature;

impl Runtime {
    /// Maps a file. The runtime keeps its own duplicate of the descriptor.
    /// `opts` must not name a store. By default the file is read and
    /// written without the kernel's page cache
    /// ([`umio_backends::UncachedFileStore`]); [`MapOptions::page_cache`]
    /// or [`Builder::page_cache`](crate::Builder::page_cache) opts back in.
    ///
    /// ```no_run
    /// # fn main() -> umio_core::Result<()> {
    /// let rt = umio_core::Runtime::builder().build()?;
    /// let file = std::fs::File::open("data.bin").unwrap();
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
    /// let dots = map.iter().filter(|&&b| b == b'.').count();
    /// # let _ = dots;
    /// # Ok(()) }
    /// ```
    ///
    /// It is `unsafe`, as memmap2's `Mmap::map` is: a mapped file's bytes
    /// can change under a slice of the mapping, which Rust forbids:
    ///
    /// ```compile_fail,E0133
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let file = std::fs::File::open("data.bin").unwrap();
    /// let map = rt.map_file(&file, umio_core::MapOptions::new())?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// While a slice of the mapping is alive ([`Mapping::as_slice`],
    /// deref, a [`MappingMut`](crate::MappingMut)'s), nothing but this
    /// mapping may change the file's bytes in the mapped range: no other
    /// process, no `write(2)`, `pwrite(2)` or `ftruncate(2)` of the file,
    /// no other mapping of the same file (umio's or the kernel's, in this
    /// process too). umio reads a page again after evicting it, and would
    /// show the changed bytes under the slice; its own changes take
    /// `&mut self` (see [aliasing](Mapping#aliasing)). Changes made while
    /// no slice lives are allowed; [`Mapping::invalidate_range`] shows
    /// them. A program that reaches the bytes through raw pointers only
    /// ([`Mapping::as_ptr`]), as the C API and the `LD_PRELOAD` shim do,
    /// may let the file change at any time, as under a kernel `MAP_SHARED`
    /// mapping.
    pub unsafe fn map_file(&self, file: &File, opts: MapOptions) -> Result<Mapping> {
        if opts.store.is_some() {
            return Err(Error::InvalidArgument(
                "map_file takes no store option; use map",
            ));
        }
        let page_cache = opts.page_cache.unwrap_or(self.shared().cfg().page_cache);
        let store: Arc<dyn Store> = if page_cache {
            FileStore::new(file).map(|s| Arc::new(s) as Arc<dyn Store>)
        } else {
            UncachedFileStore::new(file).map(|s| {
                let s = match self.shared().cfg().queue_depth {
                    Some(d) => s.with_queue_depth(u32::try_from(d).unwrap_or(u32::MAX)),
                    None => s,
                };
                Arc::new(s) as Arc<dyn Store>
            })
        }
        .map_err(|e| {
            Error::os(
                "opening the file store",
                e.raw_os_error().unwrap_or(libc::EBADF),
            )
        })?;
        let opts = if opts.survive_death && opts.keep_file.is_none() {
            match file.try_clone() {
                Ok(f) => opts.survive_process_death_file(Arc::new(f)),
                Err(e) => {
                    log::warn!("umio: no keeper for a mapping: dup of its file failed ({e})");
                    opts
                }
            }
        } else {
            opts
        };
        // SAFETY: the caller keeps the same contract for the file.
        unsafe { self.map(opts.store(store)) }
    }

    /// Maps the store named by [`MapOptions::store`].
    ///
    /// # Safety
    /// As for [`map_file`](Runtime::map_file), for the store: while a slice
    /// of the mapping is alive, nothing but this mapping may change the
    /// store's bytes in the mapped range (another handle to the same
    /// store, another mapping of it, whatever is behind it), and reading
    /// a range it has not changed must give the same bytes each time.
    pub unsafe fn map(&self, opts: MapOptions) -> Result<Mapping> {
        let store = opts.store.clone().ok_or(Error::InvalidArgument(
            "no store given: use MapOptions::store or map_file",
        ))?;
        let (mut opts, skew) = opts.split_offset()?;
        let store = self.region_store(store, &mut opts)?;
        let region = Region::create(self.shared(), store, &opts)?;
        if let Some(file) = opts
            .keep_file
            .as_ref()
            .filter(|_| opts.survive_death && opts.writable && !opts.copy_on_write)
        {
            let (start, len) = (region.page_addr(0), region.pages.len() * region.page_size);
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if let Err(e) = crate::keeper::keep(start, len, opts.offset, file)
                && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                log::warn!(
                    "umio: no keeper for a mapping (errno {e}): its writes not yet written \
                     back are lost if the process is killed (logged once)"
                );
            }
        }
        Ok(Mapping::new(self.clone(), region).with_skew(skew))
    }
}

impl Region {
    /// Checks `opts`, places and maps the region's memory (at a fixed
    /// address, replacing older regions there, if asked), registers it with
    /// the userfaultfd and publishes it in `shared`'s region table.
    pub(crate) fn create(
        shared: &Arc<Shared>,
        store: Arc<dyn Store>,
        opts: &MapOptions,
    ) -> Result<Arc<Region>> {
        if shared.is_closed() {
            return Err(Error::ShutDown);
        }
        let in_thread = shared.region_service(opts)? == FaultService::InThread;
        if in_thread && opts.writable && shared.cfg().evictors == 0 {
            // The handler reclaims clean pages only: dirty ones would
            // wait for an evictor forever.
            return Err(Error::InvalidArgument(
                "a writable mapping under the in-thread fault service needs an evictor \
                 (evictors(0) leaves dirty pages nobody can write back)",
            ));
        }
        if in_thread && crate::in_thread::a_thread_blocks_sigbus() {
            // The kernel would kill the thread on its first miss rather
            // than deliver a blocked SIGBUS.
            return Err(Error::InvalidArgument(
                "a thread of the process blocks SIGBUS, which the in-thread fault service needs \
                 (unblock it in every thread that may touch the mapping, or use \
                 FaultService::Fillers)",
            ));
        }
        // The service's descriptor (opened, its threads started, with its
        // first region).
        let uffd = shared.service_uffd(if in_thread {
            FaultService::InThread
        } else {
            FaultService::Fillers
        })?;
        crate::report::drain();
        let mut page_size = opts.page_size.unwrap_or(shared.cfg().default_page_size);
        let mut hugetlb = false;
        if let Some(fallback) = opts.hugetlb {
            if opts.page_size.is_some_and(|p| p != HUGE_PAGE_SIZE) {
                return Err(Error::InvalidArgument(
                    "a hugetlbfs region's page size is 2 MiB",
                ));
            }
            if opts.fixed_address.is_some() {
                return Err(Error::InvalidArgument(
                    "a hugetlbfs region cannot be mapped at a fixed address",
                ));
            }
            page_size = HUGE_PAGE_SIZE;
            if free_huge_pages() > 0 {
                hugetlb = true;
            } else if !fallback {
                return Err(Error::HugePagesUnavailable);
            } else {
                log::info!("umio: no free huge page; mapping ordinary memory with 2 MiB pages");
            }
        }
        Builder::check_page_size(page_size)?;
        let huge_pool = shared.huge_pool().is_some() && page_size >= HUGE_PAGE_SIZE;
        let pool_limit = match shared.huge_pool() {
            Some(h) if huge_pool => h.budget.limit(),
            _ => shared.pool().budget.limit(),
        };
        if 4 * page_size as u64 > pool_limit {
            return Err(Error::InvalidArgument(
                "page size larger than a quarter of the cache",
            ));
        }
        if !opts.offset.is_multiple_of(MIN_PAGE_SIZE as u64) {
            return Err(Error::InvalidArgument("offset must be a multiple of 4096"));
        }
        let len = match opts.len {
            Some(len) => len,
            None => {
                let store_len = store.len()?;
                let rest = store_len
                    .checked_sub(opts.offset)
                    .ok_or(Error::InvalidArgument(
                        "offset is past the end of the store",
                    ))?;
                usize::try_from(rest).map_err(|_| Error::InvalidArgument("length too large"))?
            }
        };
        if len == 0 {
            return Err(Error::InvalidArgument("length must be greater than zero"));
        }
        let end = opts
            .offset
            .checked_add(len as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(Error::InvalidArgument("offset + length overflows"))?;
        let span = len
            .checked_next_multiple_of(page_size)
            .filter(|&s| s <= isize::MAX as usize / 2)
            .ok_or(Error::InvalidArgument("length too large"))?;
        if opts.writable {
            if !store.is_writable() {
                return Err(Error::ReadOnlyStore);
            }
            if !shared.features().write_protect() {
                return Err(Error::Unsupported(
                    "write-protect faults (UFFD_FEATURE_PAGEFAULT_FLAG_WP, Linux 5.7+): map read-only",
                ));
            }
            if store.len()? < end {
                store.set_len(end)?;
            }
        }
        let prefetch = match &opts.prefetcher {
            Some(p) => p.clone(),
            None => opts
                .prefetch
                .unwrap_or(shared.cfg().prefetch)
                .build(page_size, pool_limit),
        };
        // Regions whose pages tile 2 MiB ranges can be promoted.
        let promotable = !hugetlb && HUGE_PAGE_SIZE.is_multiple_of(page_size);
        let promoter = match &opts.promoter {
            Some(p) => Some(p.clone()),
            None => opts.promote.unwrap_or(shared.cfg().promote).build(),
        };
        if promoter.is_some() && !promotable {
            return Err(Error::InvalidArgument(
                "huge-page promotion needs a page size that divides 2 MiB",
            ));
        }
        // Held from choosing the address to publishing the region, so that
        // fixed mappings cannot race each other into one range.
        let mut w = shared.lock_regions();
        let base = match opts.fixed_address {
            Some(Fixed { addr, replace }) => {
                if !addr.is_multiple_of(MIN_PAGE_SIZE) || addr == 0 {
                    return Err(Error::InvalidArgument(
                        "fixed address must be a non-zero multiple of 4096",
                    ));
                }
                let end = addr
                    .checked_add(span)
                    .ok_or(Error::InvalidArgument("fixed address + length overflows"))?;
                // Pages of older regions taken out, their memory still
                // mapped until the new region replaces it.
                let mut released = Vec::new();
                loop {
                    match shared.clear_for_fixed(&w, addr..end, replace, &mut released) {
                        Ok(()) => break,
                        Err(ClearError::Retry) => {
                            // Another thread is unmapping a region there:
                            // let it finish.
                            drop(w);
                            std::thread::sleep(Duration::from_micros(200));
                            w = shared.lock_regions();
                        }
                        Err(ClearError::Fail(e)) => {
                            release_outside(&released, 0..0);
                            return Err(e);
                        }
                    }
                }
                let mapped = if replace {
                    // SAFETY: the caller of `MapOptions::fixed_address`
                    // promised the range is theirs to replace; the umio
                    // pages in it are taken out of their regions.
                    unsafe { mm::map_anonymous_fixed(addr, span, opts.writable) }
                } else {
                    mm::map_anonymous_noreplace(addr, span, opts.writable)
                };
                match mapped {
                    Ok(base) => {
                        // What the new region does not cover: the rest of
                        // older regions' last pages, past their lengths.
                        release_outside(&released, addr..end);
                        base
                    }
                    Err(e) => {
                        release_outside(&released, 0..0);
                        return Err(if e == libc::EEXIST && !replace {
                            Error::Overlap
                        } else {
                            Error::os("mmap of the region at a fixed address", e)
                        });
                    }
                }
            }
            None if hugetlb => mm::map_hugetlb(span, opts.writable)
                .map_err(|e| Error::os("mmap of the hugetlbfs region", e))?,
            None => {
                let align = if promotable {
                    HUGE_PAGE_SIZE
                } else if page_size.is_power_of_two() {
                    page_size.min(HUGE_PAGE_SIZE)
                } else {
                    MIN_PAGE_SIZE
                };
                mm::map_anonymous(span, align, opts.writable)
                    .map_err(|e| Error::os("mmap of the region", e))?
            }
        };
        if promoter.is_some() {
            // Collapsed ranges may be backed by huge pages. Not fatal: a
            // kernel without THP refuses each collapse, counted in stats.
            if let Err(e) = mm::advise(base, span, libc::MADV_HUGEPAGE) {
                log::warn!("umio: madvise(MADV_HUGEPAGE) failed: errno {e}");
            }
        }
        if let Err(e) = uffd.register(base, span, opts.writable) {
            let r = mm::unmap(base, span);
            debug_assert!(r.is_ok());
            return Err(Error::os("UFFDIO_REGISTER", e));
        }
        let id = shared.next_region_id();
        let huge = (promotable && base.is_multiple_of(HUGE_PAGE_SIZE))
            .then(|| HugeState::new(len.div_ceil(page_size), page_size, promoter));
        let Some(region) = Region::new(
            id,
            base,
            len,
            page_size,
            opts.offset,
            store,
            opts.writable,
            prefetch,
        ) else {
            let _ = uffd.unregister(base, span);
            let r = mm::unmap(base, span);
            debug_assert!(r.is_ok());
            return Err(Error::os("allocating the page table", libc::ENOMEM));
        };
        let region = region
            .with_huge(hugetlb, huge_pool, huge)
            .with_in_thread(in_thread);
        let region = Arc::new(region);
        shared.publish(&w, region.clone());
        drop(w);
        Ok(region)
    }
}

impl Shared {
    /// The service a region mapped with `opts` gets: its own choice, else
    /// the runtime's; `Auto` serves it in-thread where nothing is lost by
    /// it (see [`FaultService::Auto`]), else by the fillers.
    pub(crate) fn region_service(&self, opts: &MapOptions) -> Result<FaultService> {
        let sigbus = self.features().bits() & feature::SIGBUS != 0;
        match opts.fault_service.unwrap_or(self.cfg().fault_service) {
            FaultService::Fillers => Ok(FaultService::Fillers),
            FaultService::InThread if !sigbus => Err(Error::Unsupported(
                "the in-thread fault service needs UFFD_FEATURE_SIGBUS (Linux 4.14)",
            )),
            FaultService::InThread => Ok(FaultService::InThread),
            FaultService::Auto => {
                let private = self.features().user_mode_only() || opts.user_access_only;
                Ok(
                    if private
                        && sigbus
                        && self.cfg().evictors > 0
                        && !crate::in_thread::a_thread_blocks_sigbus()
                    {
                        FaultService::InThread
                    } else {
                        FaultService::Fillers
                    },
                )
            }
        }
    }

    /// Before a fixed mapping of `range`: with `replace`, takes the pages
    /// of older regions in the range out of them, after writing them back
    /// (see [`MapOptions::fixed_address`]), and adds their address ranges
    /// to `released`, still mapped; without, refuses any overlap.
    pub(crate) fn clear_for_fixed(
        &self,
        w: &MutexGuard<'_, ()>,
        range: Range<usize>,
        replace: bool,
        released: &mut Vec<Range<usize>>,
    ) -> Result<(), ClearError> {
        let table = self.regions();
        let parts = table.overlapping(&range);
        if parts.is_empty() {
            return Ok(());
        }
        if !replace {
            return Err(ClearError::Fail(Error::Overlap));
        }
        // Check everything before changing anything.
        let mut victims: Vec<(Arc<Region>, Range<usize>)> = Vec::new();
        for (part, region) in parts {
            if region.is_closing() {
                return Err(ClearError::Retry);
            }
            let first = region.page_of(part.start.max(range.start));
            let last = region.page_of(part.end.min(range.end) - 1) + 1;
            let in_use_end = region.base + region.len.next_multiple_of(MIN_PAGE_SIZE);
            if region.page_addr(first) < range.start
                || (region.page_addr(last) > range.end && range.end < in_use_end)
            {
                log::warn!(
                    "umio: a fixed mapping of {:#x}..{:#x} would split a {}-byte page of the \
                     umio mapping at {:#x} (length {}) whose bytes outside the range are in \
                     use; refused (EINVAL)",
                    range.start,
                    range.end,
                    region.page_size,
                    region.base,
                    region.len
                );
                return Err(ClearError::Fail(Error::InvalidArgument(
                    "a fixed mapping may not split a page of an older umio mapping \
                     whose bytes outside the range are in use",
                )));
            }
            victims.push((region, first..last));
        }
        // Dirty data reaches the store before anything is replaced: a
        // failure leaves the older mappings whole.
        for (region, pages) in &victims {
            self.writeback(region, pages.clone()).map_err(|e| match e {
                // Its unmap began since the check above.
                Error::NotMapped => ClearError::Retry,
                e => ClearError::Fail(e),
            })?;
        }
        let mut result = Ok(());
        for (region, pages) in &victims {
            match self.take_pages(w, region, pages.clone(), crate::unmap::Take::Unregister) {
                // A concurrent unmap took some of these pages first
                // (nothing of this part was taken): look again.
                Err(Error::NotMapped) => result = Err(ClearError::Retry),
                // Nothing of this part was taken.
                Err(e) => {
                    if result.is_ok() {
                        result = Err(ClearError::Fail(e));
                    }
                }
                Ok(lost) => {
                    released.push(region.page_addr(pages.start)..region.page_addr(pages.end));
                    let synced = region.store.sync();
                    if let (Ok(()), Some(e)) = (&result, lost.or(synced.err())) {
                        result = Err(ClearError::Fail(Error::Store(e)));
                    }
                }
            }
        }
        result
    }
}

/// Why [`Shared::clear_for_fixed`] did not clear the range.
pub(crate) enum ClearError {
    /// A region in the range is being unmapped by another thread: release
    /// the table's lock and look again.
    Retry,
    Fail(Error),
}

/// Unmaps the parts of `released` (memory of pages taken out of older
/// regions) outside `keep` (the new region's range).
fn release_outside(released: &[Range<usize>], keep: Range<usize>) {
    for r in released {
        for part in [r.start..r.end.min(keep.start), r.start.max(keep.end)..r.end] {
            if part.start < part.end {
                let unmapped = mm::unmap(part.start, part.len());
                assert!(
                    unmapped.is_ok(),
                    "munmap of replaced pages failed: {unmapped:?}"
                );
            }
        }
    }
}
