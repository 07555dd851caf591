//! Write-back: dirty pages to the store, in file-offset order, contiguous
//! pages coalesced into one write.
//!
//! A page is written back while held busy and write-protected, so a thread
//! writing to it meanwhile waits (on a write-protect fault) until the page
//! is clean again, then dirties it anew: no write is lost or torn.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

use umio_backends::StoreError;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::region::Region;
use crate::runtime::Shared;

/// Largest single write-back write.
const MAX_WRITE: usize = 8 << 20;

impl Shared {
    /// Writes one run of pages held busy and dirty to the store:
    /// write-protects them, then writes them from where they are mapped.
    /// On success the pages are counted clean (still busy); the caller
    /// unlocks them.
    pub(crate) fn write_run(&self, region: &Region, run: Range<usize>) -> Result<(), StoreError> {
        let addr = region.page_addr(run.start);
        let span = run.len() * region.page_size;
        if let Err(e) = self.uffd.writeprotect(addr, span, true, false) {
            return Err(StoreError::new(
                umio_backends::StoreOp::Write,
                region.store_offset(run.start),
                e,
            ));
        }
        let valid = region.valid_bytes(run.start, run.len());
        // SAFETY: the pages are resident (state Dirty), held busy by this
        // thread so nothing evicts them, and write-protected so nothing
        // changes them while the store reads the slice.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, valid) };
        let r = region.store.write_at(region.store_offset(run.start), bytes);
        match r {
            Ok(()) => {
                self.stats.writeback_ops.fetch_add(1, Relaxed);
                self.stats.bytes_written.fetch_add(valid as u64, Relaxed);
                region.stats.writebacks.fetch_add(1, Relaxed);
                region.stats.bytes_written.fetch_add(valid as u64, Relaxed);
                region.dirty.fetch_sub(run.len(), Relaxed);
            }
            Err(_) => {
                self.stats.write_errors.fetch_add(1, Relaxed);
            }
        }
        r
    }

    /// Writes back every page of `pages` dirty when called, waiting for
    /// write-backs other threads have under way, then syncs the store.
    /// Reports the first failure, including one from background eviction
    /// since the last flush; failed pages stay dirty.
    pub(crate) fn writeback(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let mut first: Option<StoreError> = region
            .deferred_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let max_run = (MAX_WRITE / region.page_size).max(1);
        let mut i = pages.start;
        while i < pages.end && region.dirty.load(Relaxed) > 0 {
            match region.pages.get(i) {
                Observed::Busy(PageState::Dirty) => {
                    // An evictor or another flush is writing it: wait.
                    std::thread::yield_now();
                    continue;
                }
                Observed::Stable(PageState::Dirty)
                    if region.pages.try_lock(i, PageState::Dirty) => {}
                Observed::Stable(PageState::Dirty) => continue,
                _ => {
                    i += 1;
                    continue;
                }
            }
            let start = i;
            i += 1;
            while i < pages.end && i - start < max_run && region.pages.try_lock(i, PageState::Dirty)
            {
                i += 1;
            }
            let run = start..i;
            match self.write_run(region, run.clone()) {
                Ok(()) => self.release_run(region, run, PageState::Clean),
                Err(e) => {
                    log::warn!("umio: write-back failed: {e}");
                    first.get_or_insert(e);
                    self.release_run(region, run, PageState::Dirty);
                }
            }
        }
        if let Err(e) = region.store.sync() {
            first.get_or_insert(e);
        }
        match first {
            Some(e) => Err(Error::Store(e)),
            None => Ok(()),
        }
    }
}
