//! Operations on page ranges of a region: pinning and partial unmapping.

use std::ops::Range;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::{Arc, MutexGuard};

use umio_backends::StoreError;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::fault::Worker;
use crate::region::Region;
use crate::runtime::Shared;
use crate::sys::mm;

/// How often `pin` tries to make its pages resident before it reports the
/// failure (a store whose reads fail).
const PIN_ATTEMPTS: usize = 3;

impl Shared {
    /// Pins the pages and makes them resident: eviction leaves pinned pages
    /// alone; flush and unmap write them back as any other.
    pub(crate) fn pin(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        if region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let newly: Vec<usize> = pages.clone().filter(|&p| region.pages.pin(p)).collect();
        let bytes = (newly.len() * region.page_size) as u64;
        let before = self.pinned_bytes.fetch_add(bytes, AcqRel);
        if before + bytes > self.total_limit() / 2 {
            self.pinned_bytes.fetch_sub(bytes, AcqRel);
            for &p in &newly {
                region.pages.unpin(p);
            }
            return Err(Error::PinLimit);
        }
        let mut w = Worker::new();
        for _ in 0..PIN_ATTEMPTS {
            self.fill_ranges(&mut w, region, std::slice::from_ref(&pages), true);
            // Pages another thread holds busy finish on their own: a fill
            // installs them, and eviction leaves pinned pages alone.
            let missing = pages
                .clone()
                .any(|p| region.pages.get(p) == Observed::Stable(PageState::Empty));
            if !missing {
                w.credit.release_all(&self.budget);
                return Ok(());
            }
        }
        w.credit.release_all(&self.budget);
        // The pages stay pinned: the faults that need them read them again
        // and report the failure.
        Err(Error::Store(StoreError::new(
            umio_backends::StoreOp::Read,
            region.store_offset(pages.start),
            libc::EIO,
        )))
    }

    /// Unpins the pages; resident ones become eviction candidates again.
    pub(crate) fn unpin(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        if region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let mut unpinned = 0u64;
        for p in pages {
            if region.pages.unpin(p) {
                unpinned += 1;
                if matches!(
                    region.pages.get(p),
                    Observed::Stable(PageState::Clean | PageState::Dirty)
                        | Observed::Busy(PageState::Clean | PageState::Dirty)
                ) {
                    self.policy_of(region).inserted(region.key(p));
                }
            }
        }
        self.pinned_bytes
            .fetch_sub(unpinned * region.page_size as u64, AcqRel);
        Ok(())
    }

    /// Writes back, then unmaps the pages of `pages`; the rest of the
    /// region stays mapped. The pages are retired: busy and empty for good,
    /// so that nothing fills, evicts or waits on them again. The range's
    /// write-back error, if any, is returned after it is unmapped anyway,
    /// as `unmap` does.
    pub(crate) fn unmap_range(&self, region: &Arc<Region>, pages: Range<usize>) -> Result<()> {
        let result = self.take_pages(region, pages, true);
        // The table stops sending the hole's addresses to the region (a
        // fixed mapping may be made there later).
        let w = self.lock_regions();
        self.republish(&w, region);
        result
    }

    /// Publishes `region`'s mapped ranges anew in the region table; the
    /// caller holds the table's writer lock.
    pub(crate) fn republish(&self, _writer: &MutexGuard<'_, ()>, region: &Arc<Region>) {
        self.regions
            .store(Arc::new(self.regions.load().reshaped(region)));
    }

    /// The body of [`unmap_range`](Shared::unmap_range): retires `pages`
    /// after writing them back, and unregisters them. With `release`
    /// their memory is unmapped; without, it stays mapped (and no longer
    /// served) for a `MAP_FIXED` mapping to replace at once, so that the
    /// kernel never sees a gap it could fill with another mapping. Does
    /// not update the region table.
    pub(crate) fn take_pages(
        &self,
        region: &Region,
        pages: Range<usize>,
        release: bool,
    ) -> Result<()> {
        let _serial = region.unmap_lock.lock().unwrap_or_else(|e| e.into_inner());
        if pages.is_empty() || region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let Some(_guard) = region.enter() else {
            return Err(Error::NotMapped);
        };
        // The ranges lose pages: no longer promoted (their charge, if in
        // the huge-page pool, comes back to the region's pool first).
        self.demote_range(region, &pages);
        let mut dirty = Vec::new();
        let mut resident = 0usize;
        for p in pages.clone() {
            let s = loop {
                match region.pages.get(p) {
                    Observed::Stable(s) if region.pages.try_lock(p, s) => break s,
                    Observed::Stable(_) => {}
                    Observed::Busy(_) => std::thread::yield_now(),
                }
            };
            match s {
                PageState::Empty => {}
                PageState::Clean => resident += 1,
                PageState::Dirty => {
                    resident += 1;
                    dirty.push(p);
                }
            }
        }
        let mut first: Option<StoreError> = None;
        let runs: Vec<Range<usize>> = crate::evict::runs(&dirty).collect();
        let mut results = Vec::new();
        self.write_runs(region, &runs, &mut results);
        for (run, r) in runs.iter().zip(results) {
            if let Err(e) = r {
                // The pages are unmapped all the same: their changes are lost
                // and reported.
                region.dirty.fetch_sub(run.len(), Relaxed);
                first.get_or_insert(e);
            }
        }
        let pinned = pages.clone().filter(|&p| region.pages.is_pinned(p)).count();
        let (addr, len) = (
            region.page_addr(pages.start),
            pages.len() * region.page_size,
        );
        let unreg = self.uffd.unregister(addr, len);
        if release {
            let unmapped = mm::unmap(addr, len);
            assert!(
                unmapped.is_ok(),
                "munmap of part of a region failed: {unmapped:?}"
            );
        }
        for p in pages.clone() {
            region.pages.retire(p);
        }
        region.add_hole(pages);
        self.budget_of(region)
            .release((resident * region.page_size) as u64);
        self.pinned_bytes
            .fetch_sub((pinned * region.page_size) as u64, AcqRel);
        if let Err(e) = region.store.sync() {
            first.get_or_insert(e);
        }
        if let Some(e) = first {
            return Err(Error::Store(e));
        }
        unreg.map_err(|e| Error::os("UFFDIO_UNREGISTER", e))
    }
}
