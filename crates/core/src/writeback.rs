//! Write-back: dirty pages to the store, in file-offset order, contiguous
//! pages coalesced into one write.
//!
//! A page is written back while held busy and write-protected, so a thread
//! writing to it meanwhile waits (on a write-protect fault) until the page
//! is clean again, then dirties it anew: no write is lost or torn.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

use umio_backends::{IoRequest, StoreError, StoreOp};
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::fill::PerRun;
use crate::region::Region;
use crate::runs::per_vma;
use crate::shared::Shared;

/// Largest single write-back write.
const MAX_WRITE: usize = 8 << 20;
/// Most bytes one batch of write-back requests holds busy.
const MAX_BATCH: usize = 32 << 20;
/// Runs of a flush's batch, in store depths.
const BATCH_DEPTHS: usize = 4;

impl Shared {
    /// Writes runs of pages held busy and dirty to the store:
    /// write-protects each, then writes them all from where they are mapped
    /// as one batch of requests. `out[k]` gets run `k`'s outcome; a run
    /// written is counted clean (its pages still busy); the caller unlocks
    /// them.
    pub(crate) fn write_runs(
        &self,
        region: &Region,
        runs: &[Range<usize>],
        out: &mut Vec<Result<(), StoreError>>,
    ) {
        out.clear();
        // On the stack for the runs of one batch; an eviction batch with
        // more dirty runs than that spills to the heap.
        let mut reqs: PerRun<IoRequest<'_>> = PerRun::new();
        let mut which: PerRun<usize> = PerRun::new();
        for (k, run) in runs.iter().enumerate() {
            let addr = region.page_addr(run.start);
            let span = run.len() * region.page_size;
            // Kernels before 6.5 refuse a range across VMAs: pieces then.
            let protect = per_vma(addr, span, |at, n| {
                self.uffd_of(region).writeprotect(at, n, true, false)
            });
            if let Err(e) = protect {
                out.push(Err(StoreError::new(
                    StoreOp::Write,
                    region.store_offset(run.start),
                    e,
                )));
                continue;
            }
            out.push(Ok(()));
            let valid = region.valid_bytes(run.start, run.len());
            // SAFETY: the pages are resident (state Dirty), held busy by
            // this thread so nothing evicts them, and write-protected so
            // nothing changes them while the store reads the slice.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, valid) };
            reqs.push(IoRequest::write(region.store_offset(run.start), bytes));
            which.push(k);
        }
        if !reqs.is_empty() {
            region.store.submit(&mut reqs);
        }
        let mut failed = None;
        let mut written = false;
        // Allocated only when a failed run was dirty on a guess alone.
        let mut scratch: Vec<u8> = Vec::new();
        for (req, k) in reqs.iter().zip(which) {
            let run = &runs[k];
            match req.result() {
                Some(Err(e)) if self.guessed_and_unchanged(region, run, &mut scratch) => {
                    // Filled dirty on a guess (`predict.rs`) and never
                    // written: the store holds its bytes already, so it is
                    // clean, and no write of the program's was lost. The
                    // store's failure is noted all the same (no more
                    // guesses, nor writes to clean pages while others wait).
                    self.count_undirty(region, run.len());
                    failed.get_or_insert(e);
                }
                Some(Ok(_)) => {
                    let valid = req.len() as u64;
                    self.counters().writeback_ops.fetch_add(1, Relaxed);
                    self.counters().bytes_written.fetch_add(valid, Relaxed);
                    region.stats.writebacks.fetch_add(1, Relaxed);
                    region.stats.bytes_written.fetch_add(valid, Relaxed);
                    self.count_undirty(region, run.len());
                    written = true;
                }
                r => {
                    self.counters().write_errors.fetch_add(1, Relaxed);
                    let e = match r {
                        Some(Err(e)) => e,
                        // A store that left the request without a result.
                        _ => StoreError::new(StoreOp::Write, req.offset(), libc::EIO),
                    };
                    failed.get_or_insert(e);
                    out[k] = Err(e);
                }
            }
        }
        self.note_write_outcome(region, written, failed);
    }

    /// Whether every page of `run` (held busy and write-protected, its
    /// write-back failed) was filled dirty on a guess
    /// (`PageTable::mark_guessed`) and still holds the store's bytes: a
    /// page the program never wrote. Reads the store; `scratch` is a
    /// buffer for it.
    fn guessed_and_unchanged(
        &self,
        region: &Region,
        run: &Range<usize>,
        scratch: &mut Vec<u8>,
    ) -> bool {
        if !run.clone().all(|p| region.pages.is_guessed(p)) {
            return false;
        }
        scratch.resize(region.page_size, 0);
        run.clone().all(|p| {
            let valid = region.valid_bytes(p, 1);
            // SAFETY: resident (Dirty), held busy by this thread and
            // write-protected: nothing changes or drops it meanwhile.
            let page =
                unsafe { std::slice::from_raw_parts(region.page_addr(p) as *const u8, valid) };
            match region
                .store
                .read_at(region.store_offset(p), &mut scratch[..valid])
            {
                // Short only at the store's end: the rest of the page
                // reads as zeros.
                Ok(n) => page[..n] == scratch[..n] && page[n..].iter().all(|&b| b == 0),
                Err(_) => false,
            }
        })
    }

    /// [`write_runs`](Shared::write_runs), then unlocks each run Clean if it
    /// was written, Dirty if not (failures are logged once per run of them
    /// by `write_runs`). Returns the pages written and the first failure.
    pub(crate) fn write_back_locked(
        &self,
        region: &Region,
        runs: &[Range<usize>],
        results: &mut Vec<Result<(), StoreError>>,
    ) -> (usize, Option<StoreError>) {
        self.write_runs(region, runs, results);
        let mut written = 0;
        let mut first = None;
        for (run, r) in runs.iter().zip(results.iter()) {
            let to = match r {
                Ok(()) => {
                    written += run.len();
                    PageState::Clean
                }
                Err(e) => {
                    first.get_or_insert(*e);
                    PageState::Dirty
                }
            };
            self.release_run(region, run.clone(), to);
        }
        (written, first)
    }

    /// Records what a batch of writes to `region`'s store did: a failure
    /// (its first) makes the region refuse new writes to clean pages until
    /// a write succeeds again (`Shared::may_dirty`); the first failure of
    /// a run of them is logged, once, with what it means, and the recovery.
    fn note_write_outcome(&self, region: &Region, written: bool, failed: Option<StoreError>) {
        match failed {
            Some(e) => {
                if region.note_write(Some(e.errno), self.now_ms()) {
                    log::error!(
                        "umio: writing back region {} to its store ({}) failed: {e}; its dirty \
                         pages stay in the cache, are written again later and reported by \
                         the next flush; until a write succeeds, a write to a {} page of \
                         the mapping fails (SIGBUS), as a write fault on a full file system \
                         does, and reads go on",
                        region.id,
                        region.store.name(),
                        if self.pagemap().is_some() {
                            "non-resident"
                        } else {
                            "clean"
                        }
                    );
                } else {
                    log::debug!("umio: write-back failed again: {e}");
                }
            }
            None if written => {
                if region.write_failure().is_some() {
                    log::warn!(
                        "umio: writes to the {} store of region {} work again",
                        region.store.name(),
                        region.id
                    );
                }
                region.note_write(None, 0);
            }
            None => {}
        }
    }

    /// Writes back every page of `pages` dirty when called, waiting for
    /// write-backs other threads have under way, then syncs the store.
    /// Reports the first failure, including one from background eviction
    /// since the last flush; failed pages stay dirty. Works inside the
    /// region (`Region::enter`), so that an unmap waits for it: a late
    /// `UFFDIO_WRITEPROTECT` must not land in a region mapped later at the
    /// same address. [`Error::NotMapped`] once the region is being
    /// unmapped.
    pub(crate) fn writeback(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let Some(_entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        self.writeback_closing(region, pages)
    }

    /// [`writeback`](Shared::writeback) of a region that is being unmapped,
    /// by its unmap (no other thread works on it any more).
    pub(crate) fn writeback_closing(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let mut first: Option<StoreError> = region.take_deferred_error();
        if let Err(e) = self.write_dirty_in(region, pages) {
            first.get_or_insert(e);
        }
        if let Err(e) = region.store.sync() {
            first.get_or_insert(e);
        }
        match first {
            Some(e) => Err(Error::Store(e)),
            None => Ok(()),
        }
    }

    /// Writes every page of `pages` dirty when called to the store, waiting
    /// for write-backs other threads have under way, without syncing: once
    /// it returns, the store's readers see the bytes. Returns the first
    /// failure; failed pages stay dirty. Inside the region, as
    /// [`writeback`](Shared::writeback).
    pub(crate) fn write_dirty(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let Some(_entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        self.write_dirty_in(region, pages).map_err(Error::Store)
    }

    /// The body of [`write_dirty`](Shared::write_dirty), for a caller
    /// inside the region (or its unmap).
    fn write_dirty_in(
        &self,
        region: &Region,
        pages: Range<usize>,
    ) -> std::result::Result<(), StoreError> {
        // Asynchronous dirty tracking: pages written behind umio's back
        // are dirty too (`dirty.rs`).
        self.harvest(region, pages.clone());
        let mut first: Option<StoreError> = None;
        let max_run = (MAX_WRITE / region.page_size).max(1);
        // Several times the store's depth per batch: the store keeps its
        // queue full as writes complete (`Store::submit`), and the queue
        // drains (waiting for the batch's slowest write) once per batch,
        // not once per queue's worth.
        let depth = self.queue_depth_of(region) * BATCH_DEPTHS;
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut results = Vec::new();
        let mut i = pages.start;
        // Asynchronous dirty tracking: a page held clean elsewhere may
        // come back dirty, whatever the count says now.
        let async_tracking = self.pagemap().is_some();
        while i < pages.end && (async_tracking || region.dirty.load(Relaxed) > 0) {
            // Lock up to `depth` runs of dirty pages (MAX_BATCH bytes).
            runs.clear();
            let mut bytes = 0;
            while i < pages.end && runs.len() < depth && bytes < MAX_BATCH {
                match region.pages.get(i) {
                    Observed::Busy(PageState::Dirty) if runs.is_empty() => {
                        // An evictor or another flush is writing it: wait.
                        // Asynchronous dirty tracking: a write made
                        // meanwhile does not fault (the page comes back
                        // Clean, its write seen only by a harvest): wait
                        // until it is not busy, then look at it again.
                        if self.pagemap().is_some() {
                            while matches!(region.pages.get(i), Observed::Busy(_)) {
                                std::thread::yield_now();
                            }
                            self.harvest(region, i..i + 1);
                        } else {
                            std::thread::yield_now();
                        }
                        continue;
                    }
                    // Write what is locked first, then wait for it.
                    Observed::Busy(PageState::Dirty) => break,
                    // Asynchronous dirty tracking: a clean page another
                    // thread holds (an eviction, say) may have been
                    // written; it may come back dirty, or clean with its
                    // write not yet seen: wait, then look at it again.
                    Observed::Busy(PageState::Clean)
                        if self.pagemap().is_some() && runs.is_empty() =>
                    {
                        while region.pages.get(i) == Observed::Busy(PageState::Clean) {
                            std::thread::yield_now();
                        }
                        self.harvest(region, i..i + 1);
                        continue;
                    }
                    Observed::Busy(PageState::Clean) if self.pagemap().is_some() => break,
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
                while i < pages.end
                    && i - start < max_run
                    && region.pages.try_lock(i, PageState::Dirty)
                {
                    i += 1;
                }
                bytes += (i - start) * region.page_size;
                runs.push(start..i);
            }
            if runs.is_empty() {
                continue;
            }
            if let (_, Some(e)) = self.write_back_locked(region, &runs, &mut results) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
