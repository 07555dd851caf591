//! Unmapping: a whole region (`unmap`), or a page range of one
//! (`unmap_range`, and `take_pages`, which a `MAP_FIXED` mapping over
//! older regions uses too). Dirty pages are written back first; the pages
//! are retired, unregistered and their cache space released.

use std::ops::Range;
use std::sync::Arc;

use umio_backends::StoreError;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::region::Region;
use crate::runs::runs;
use crate::shared::Shared;
use crate::sys::mm;

impl Shared {
    /// Writes back, then removes the region. The region is gone whatever
    /// the write-back's outcome; its error is returned.
    pub(crate) fn unmap(&self, region: &Arc<Region>) -> Result<()> {
        region.close();
        let result = self.writeback(region, 0..region.pages.len());
        // Held until the memory is unmapped, so that a fixed mapping
        // replacing part of the region cannot be made in between and then
        // unmapped here.
        let w = self.lock_regions();
        self.withdraw(&w, region.id);
        // Ranges charged to the huge-page pool come back to the region's
        // pool, which then releases every resident page.
        self.demote_range(region, &(0..region.pages.len()));
        let resident = region.pages.count_resident();
        let pinned = region.pages.count_pinned();
        // Unregistering wakes any thread still blocked on the range. Pages
        // that `unmap_range` took out are no longer ours: leave them.
        let mut unreg = Ok(());
        for pages in region.mapped_ranges() {
            let (addr, len) = (
                region.page_addr(pages.start),
                pages.len() * region.page_size,
            );
            unreg = unreg.and(self.uffd().unregister(addr, len));
            let unmapped = mm::unmap(addr, len);
            assert!(unmapped.is_ok(), "munmap of a region failed: {unmapped:?}");
        }
        drop(w);
        self.forget_unmapped(region);
        self.budget_of(region)
            .release((resident * region.page_size) as u64);
        self.unpin_bytes((pinned * region.page_size) as u64);
        self.policy_of(region).forget_region(region.id);
        if let Some(pool) = self.huge_pool() {
            pool.policy.forget_region(region.id);
        }
        result?;
        unreg.map_err(|e| Error::os("UFFDIO_UNREGISTER", e))
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
        let _serial = region.serialize_unmaps();
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
        let runs: Vec<Range<usize>> = runs(&dirty).collect();
        let mut results = Vec::new();
        self.write_runs(region, &runs, &mut results);
        for (run, r) in runs.iter().zip(results) {
            if let Err(e) = r {
                // The pages are unmapped all the same: their changes are lost
                // and reported.
                self.count_undirty(region, run.len());
                first.get_or_insert(e);
            }
        }
        let pinned = pages.clone().filter(|&p| region.pages.is_pinned(p)).count();
        let (addr, len) = (
            region.page_addr(pages.start),
            pages.len() * region.page_size,
        );
        let unreg = self.uffd().unregister(addr, len);
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
        self.unpin_bytes((pinned * region.page_size) as u64);
        if let Err(e) = region.store.sync() {
            first.get_or_insert(e);
        }
        if let Some(e) = first {
            return Err(Error::Store(e));
        }
        unreg.map_err(|e| Error::os("UFFDIO_UNREGISTER", e))
    }
}
