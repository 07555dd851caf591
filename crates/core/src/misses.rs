//! Misses of several threads filled as one batch of store reads.
//!
//! Threads that miss at the same time each wait for their page, and a
//! store with a queue (io_uring) serves their reads side by side, as the
//! kernel serves the faults of several threads on an `mmap`ed file. The
//! fillers gather those misses two ways:
//!
//! - A filler reads every pending fault event in one `read(2)`: with more
//!   than one, it resolves each (coalesced waits, write-protect faults)
//!   but sets the misses aside, each page held busy and its region
//!   entered ([`Deferred`]); then it fills them, region by region, as one
//!   batch ([`Shared::fill_deferred`]).
//! - A miss that finds its region's store slots taken is queued on the
//!   region (`store_slots.rs`); the filler in the store takes every fill
//!   queued meanwhile as one batch when its read is done.
//!
//! A batch ([`Shared::fill_misses`]) reserves its cache space at once
//! (evicting for it when the cache is full), then goes to the store through
//! [`Store::submit_each`], which keeps up to the store's depth in flight:
//! each page is installed and its thread woken as its read completes, in
//! whatever order they complete. A single miss, a store of depth 1 and a
//! store that maps its bytes keep the one-miss path (`fill.rs`).
//!
//! [`Store::submit_each`]: umio_backends::Store::submit_each

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use umio_backends::{IoRequest, StoreError, StoreOp};

use crate::fill::{MAX_BATCH_RUNS, PerRun};
use crate::prefetch::FaultKind;
use crate::region::{EnteredRegion, Region};
use crate::report::{self, Report};
use crate::scratch::{Deferred, Scratch};
use crate::shared::Shared;
use crate::store_slots::Miss;

impl Shared {
    /// Sets aside a miss of `region` (entered) whose page this filler
    /// holds busy, to be filled by [`fill_deferred`](Shared::fill_deferred).
    pub(crate) fn defer_miss(
        &self,
        w: &mut Scratch,
        region: EnteredRegion,
        page: usize,
        write: bool,
    ) {
        let miss = Miss {
            page,
            write,
            thread: w.thread,
        };
        w.deferred.push(Deferred { region, miss });
    }

    /// Fills the misses set aside ([`defer_miss`](Shared::defer_miss)):
    /// those of each region as one batch, in one of its store slots (or
    /// queued for the filler in its store).
    pub(crate) fn fill_deferred(&self, w: &mut Scratch) {
        if w.deferred.is_empty() {
            return;
        }
        let mut deferred = std::mem::take(&mut w.deferred);
        // Region by region, pages in order.
        deferred.sort_unstable_by_key(|d| (d.region.id, d.miss.page));
        let mut misses: PerRun<Miss> = PerRun::new();
        let mut i = 0;
        while i < deferred.len() {
            let region: &Arc<Region> = &deferred[i].region;
            misses.clear();
            let mut j = i;
            while j < deferred.len() && deferred[j].region.id == region.id {
                misses.push(deferred[j].miss);
                j += 1;
            }
            self.fill_misses_in_slot(w, region, &misses);
            i = j;
        }
        // Leaves the regions.
        deferred.clear();
        w.deferred = deferred;
    }

    /// Fills missed pages of `region` that this thread holds busy: their
    /// reads go to the store as batches of up to its depth, each page
    /// installed and its thread woken as its read completes; read-ahead
    /// follows, once the batch is in.
    pub(crate) fn fill_misses(&self, w: &mut Scratch, region: &Arc<Region>, misses: &[Miss]) {
        let thread = w.thread;
        let depth = self.queue_depth_of(region);
        if misses.len() == 1 || depth == 1 || region.store.as_mapped().is_some() {
            // Nothing to overlap.
            for m in misses {
                w.thread = m.thread;
                let _ = self.fill_fault(w, region, m.page, m.write);
            }
            w.thread = thread;
            return;
        }
        let ps = region.page_size;
        let mut batch: PerRun<Miss> = PerRun::new();
        let mut installed: PerRun<Miss> = PerRun::new();
        let mut i = 0;
        while i < misses.len() {
            batch.clear();
            while i < misses.len() && batch.len() < depth.min(MAX_BATCH_RUNS) {
                let m = misses[i];
                w.thread = m.thread;
                if region.valid_bytes(m.page, 1) < ps {
                    // The region's last, partial page: a read of its own.
                    if !batch.is_empty() {
                        break;
                    }
                    let _ = self.fill_fault(w, region, m.page, m.write);
                    i += 1;
                    continue;
                }
                if let Ok(write) = self.fill_as(w, region, m.page, m.write) {
                    batch.push(Miss { write, ..m });
                }
                i += 1;
            }
            if batch.is_empty() {
                continue;
            }
            // The batch's space at once, with direct reclaim when the
            // cache is full (reserved page by page, a later page could
            // wait for space the batch's earlier pages hold).
            if !self.reserve(w, (batch.len() * ps) as u64, true, region) {
                for m in &batch {
                    w.thread = m.thread;
                    self.no_space_for(region, m.page);
                }
                continue;
            }
            installed.clear();
            self.read_misses(w, region, &batch, &mut installed);
            for m in &installed {
                w.thread = m.thread;
                self.prefetch_after(w, region, m.page, m.write, FaultKind::Miss);
            }
        }
        w.thread = thread;
    }

    /// Reads the pages of `batch` (each held busy, its space reserved) as
    /// one submission and installs each as its read completes; the misses
    /// installed go to `installed`. A page whose read fails is poisoned.
    fn read_misses(
        &self,
        w: &mut Scratch,
        region: &Region,
        batch: &[Miss],
        installed: &mut PerRun<Miss>,
    ) {
        let ps = region.page_size;
        let staged = batch.len() * ps;
        let buf = match w.buf.get(staged) {
            Ok(b) => &mut b[..staged],
            Err(e) => {
                report::error(Report::StagingBuffer { errno: e });
                for m in batch {
                    self.budget_of(region).release(ps as u64);
                    self.fail_fill(region, m.page..m.page + 1);
                }
                return;
            }
        };
        let mut reqs: PerRun<IoRequest<'_>> = PerRun::new();
        for (m, mine) in batch.iter().zip(buf.chunks_mut(ps)) {
            reqs.push(IoRequest::read(region.store_offset(m.page), mine));
        }
        let depth = self.queue_depth_of(region);
        let c = self.counters();
        let n = reqs.len() as u64;
        c.store_reads.fetch_add(n, Relaxed);
        c.read_submissions.fetch_add(1, Relaxed);
        c.reads_submitted.fetch_add(n, Relaxed);
        let in_flight = n.min(depth as u64);
        c.max_reads_in_flight.fetch_max(in_flight, Relaxed);
        let r = &region.stats;
        r.read_submissions.fetch_add(1, Relaxed);
        r.reads_submitted.fetch_add(n, Relaxed);
        r.max_reads_in_flight.fetch_max(in_flight, Relaxed);
        region.store.submit_each(&mut reqs, &mut |j, req| {
            let m = batch[j];
            let offset = req.offset();
            match req.result() {
                Some(Ok(got)) => {
                    self.counters().bytes_read.fetch_add(got as u64, Relaxed);
                    region.stats.bytes_read.fetch_add(got as u64, Relaxed);
                    region.stats.fills.fetch_add(1, Relaxed);
                    if let Some(b) = req.read_buf() {
                        b[got.min(ps)..].fill(0);
                        if self.end_fill(region, m.page, m.write, b).is_ok() {
                            installed.push(m);
                        }
                    }
                }
                r => {
                    let err = match r {
                        Some(Err(e)) => e,
                        _ => StoreError::new(StoreOp::Read, offset, libc::EIO),
                    };
                    report::warn(Report::StoreRead {
                        region: region.id,
                        err,
                    });
                    self.budget_of(region).release(ps as u64);
                    self.fail_fill(region, m.page..m.page + 1);
                }
            }
        });
    }
}
