//! Unmapping: a whole region (`unmap`), or a page range of one
//! (`unmap_range`, and `take_pages`, which a `MAP_FIXED` mapping over
//! older regions uses too). Dirty pages are written back first; the pages
//! are retired, unregistered and their cache space released.

use std::ops::Range;
use std::sync::{Arc, MutexGuard};

use umio_backends::StoreError;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::region::Region;
use crate::runs::runs;
use crate::shared::Shared;
use crate::sys::mm;

/// What [`Shared::take_pages`] does with the memory of the pages it takes.
pub(crate) enum Take<'a> {
    /// `munmap` it.
    Unmap,
    /// Unregister it and leave it mapped, for a `MAP_FIXED` mapping to
    /// replace at once.
    Unregister,
    /// Call this with its address and length: it maps something else
    /// there (`MAP_FIXED`), atomically replacing the registered memory, so
    /// that a thread that faults on it meanwhile (waiting on a busy page,
    /// or faulting again for want of a region) meets the new mapping.
    Replace(&'a mut dyn FnMut(usize, usize) -> std::result::Result<(), i32>),
}

impl Shared {
    /// Writes back, then removes the region. The region is gone whatever
    /// the write-back's outcome; its error is returned.
    pub(crate) fn unmap(&self, region: &Arc<Region>) -> Result<()> {
        region.close();
        let result = self.writeback_closing(region, 0..region.pages.len());
        // What could not be written is lost with the region: no longer
        // counted dirty in its pool (closed: nothing dirties it now).
        self.count_undirty(
            region,
            region.dirty.load(std::sync::atomic::Ordering::Acquire),
        );
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
            // Written back: the keeper no longer reads this memory, which
            // may be something else's after the munmap.
            drop(crate::keeper::forget(addr, len));
            unreg = unreg.and(self.uffd_of(region).unregister(addr, len));
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
    /// as `unmap` does. A failed `munmap` (`ENOMEM` when splitting the
    /// region's memory would pass `vm.max_map_count`) is returned with the
    /// range still mapped and served, as before the call.
    pub(crate) fn unmap_range(&self, region: &Arc<Region>, pages: Range<usize>) -> Result<()> {
        // Most of the write-back before the table's writer lock, which a
        // slow store would otherwise keep from every map of the runtime.
        // Pages it fails to write stay dirty: `take_pages` writes them
        // again and reports what fails then.
        if let Err(Error::NotMapped) = self.write_dirty(region, pages.clone()) {
            return Err(Error::NotMapped);
        }
        let w = self.lock_regions();
        let taken = self.take_pages(&w, region, pages, Take::Unmap);
        drop(w);
        let lost = taken?;
        let synced = region.store.sync();
        match lost {
            Some(e) => Err(Error::Store(e)),
            None => synced.map_err(Error::Store),
        }
    }

    /// The body of [`unmap_range`](Shared::unmap_range): retires `pages`
    /// after writing back those still dirty, with the region table updated
    /// to match. Their memory is unmapped, or unregistered and left mapped
    /// (and no longer served) for a `MAP_FIXED` mapping to replace at once,
    /// so that the kernel never sees a gap it could fill with another
    /// mapping, or replaced by the caller's mapping ([`Take`]). The caller holds the
    /// table's writer lock (`w`), so that no fixed mapping of this runtime
    /// lands in the range before its memory is gone; it syncs the store.
    ///
    /// An `Err` changed nothing (the range has a hole already, the region
    /// is being unmapped, or the `munmap` or `UFFDIO_UNREGISTER` failed).
    /// `Ok(Some(e))`: the range is taken, and changes to it that could not
    /// be written are lost.
    pub(crate) fn take_pages(
        &self,
        w: &MutexGuard<'_, ()>,
        region: &Arc<Region>,
        pages: Range<usize>,
        mut how: Take<'_>,
    ) -> Result<Option<StoreError>> {
        let release = !matches!(how, Take::Unregister);
        let _serial = region.serialize_unmaps();
        if pages.is_empty() || region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let Some(_guard) = region.enter() else {
            return Err(Error::NotMapped);
        };
        let _taking = region.taking();
        // The ranges lose pages: no longer promoted (their charge, if in
        // the huge-page pool, comes back to the region's pool first).
        self.demote_range(region, &pages);
        let mut states = Vec::with_capacity(pages.len());
        for p in pages.clone() {
            states.push(loop {
                match region.pages.get(p) {
                    Observed::Stable(s) if region.pages.try_lock(p, s) => break s,
                    Observed::Stable(_) => {}
                    Observed::Busy(_) => std::thread::yield_now(),
                }
            });
        }
        // Asynchronous dirty tracking: clean pages written since are
        // dirty (`dirty.rs`).
        if self.pagemap().is_some() {
            let mut held: Vec<(usize, PageState)> =
                pages.clone().zip(states.iter().copied()).collect();
            if self.learn_locked(region, &mut held) > 0 {
                states = held.into_iter().map(|(_, s)| s).collect();
            }
        }
        let dirty: Vec<usize> = pages
            .clone()
            .zip(&states)
            .filter(|&(_, &s)| s == PageState::Dirty)
            .map(|(p, _)| p)
            .collect();
        let runs: Vec<Range<usize>> = runs(&dirty).collect();
        let mut results = Vec::new();
        self.write_runs(region, &runs, &mut results);
        let (addr, len) = (
            region.page_addr(pages.start),
            pages.len() * region.page_size,
        );
        // Out of the runtime's table before the memory goes: from the
        // `munmap` on, another mapping of this runtime may be made in the
        // range, and a fault there must not be taken for this region's
        // (nor a fault on the rest of the region for nobody's). A fault in
        // the range meanwhile finds no region; a filler wakes its thread,
        // which faults again until the memory is gone. The in-thread
        // service's table follows the `munmap` (`republish_in_thread`).
        region.add_hole(pages.clone());
        self.republish(w, region);
        // Written back: the keeper no longer reads this memory.
        let forgotten = crate::keeper::forget(addr, len);
        let gone = match &mut how {
            Take::Unmap => mm::unmap(addr, len),
            Take::Unregister => self.uffd_of(region).unregister(addr, len),
            Take::Replace(replace) => replace(addr, len),
        };
        if let Err(e) = gone {
            // Nothing changed in the kernel: the pages are the region's
            // again, as they were (less the dirty ones written back).
            crate::keeper::restore(forgotten);
            region.remove_hole(&pages);
            self.republish(w, region);
            for (p, &s) in pages.clone().zip(&states) {
                let to = match runs.iter().position(|run| run.contains(&p)) {
                    Some(k) if results[k].is_ok() => PageState::Clean,
                    _ => s,
                };
                if region.pages.unlock(p, to) {
                    self.wake(region, region.page_addr(p), region.page_size);
                }
            }
            log::warn!(
                "umio: {} of pages {}..{} of a region failed (errno {e}); the range stays mapped",
                match how {
                    Take::Unmap => "munmap",
                    Take::Unregister => "UFFDIO_UNREGISTER",
                    Take::Replace(_) => "the replacing mmap",
                },
                pages.start,
                pages.end
            );
            return Err(Error::os(
                match how {
                    Take::Unmap => "munmap of part of a region",
                    Take::Unregister => "UFFDIO_UNREGISTER of part of a region",
                    Take::Replace(_) => "mmap over part of a region",
                },
                e,
            ));
        }
        if !matches!(how, Take::Replace(_)) {
            self.republish_in_thread(region);
        }
        // Replaced: the in-thread service's entry stays (a tombstone, until
        // the region is unmapped), so that a thread whose fault on the old
        // memory reaches the handler only now finds the region, its pages
        // busy for good, and retries, meeting the new mapping; without it,
        // the fault would be taken for someone else's and kill the thread.
        if release {
            // Unlike unregistering, `munmap` wakes no thread asleep on a
            // fault in the range (one that found a page busy here): woken,
            // it meets the unmapped memory.
            self.wake(region, addr, len);
        }
        let mut lost: Option<StoreError> = None;
        for (run, r) in runs.iter().zip(results) {
            if let Err(e) = r {
                // The pages are unmapped all the same: their changes are lost
                // and reported.
                self.count_undirty(region, run.len());
                lost.get_or_insert(e);
            }
        }
        let resident = states.iter().filter(|&&s| s != PageState::Empty).count();
        let pinned = pages.clone().filter(|&p| region.pages.is_pinned(p)).count();
        for p in pages {
            region.pages.retire(p);
        }
        self.budget_of(region)
            .release((resident * region.page_size) as u64);
        self.unpin_bytes((pinned * region.page_size) as u64);
        Ok(lost)
    }
}
