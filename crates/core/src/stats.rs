//! Counters of what the runtime did.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::histogram::{FaultLatency, LatencyHistogram};
use crate::padded::CachePadded;

/// What a [`Stats`] snapshot reads from the runtime besides its counters.
pub(crate) struct Gauges {
    pub resident_bytes: u64,
    pub huge_pool_bytes: u64,
    /// The pools' bounds now.
    pub cache_bytes: u64,
    pub huge_cache_bytes: u64,
    /// Windows sleeping, polling.
    pub filler_windows: [u64; 3],
    pub regions: u64,
    pub in_thread_regions: u64,
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Each counter on its own cache line: fillers on different CPUs
        /// bump several of them on every fault.
        #[derive(Default, Debug)]
        pub(crate) struct Counters {
            $(pub $name: CachePadded<AtomicU64>,)*
            /// Recorded once per fault event, by the filler that served it.
            pub fault_latency: LatencyHistogram,
        }

        /// A snapshot of a runtime's counters, from its start. New fields
        /// may be added in any release (`#[non_exhaustive]`); its
        /// [`Display`](std::fmt::Display) is a compact multi-line summary.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// How long faults took to serve: a log2-scaled histogram of
            /// nanoseconds (see [`FaultLatency`]).
            pub fault_latency: FaultLatency,
            /// Bytes of cache reserved now: resident pages, pages being
            /// filled, and the small reserve (at most 1/256 of the cache,
            /// up to 1 MiB) each filler keeps so that most misses touch no
            /// shared counter.
            pub resident_bytes: u64,
            /// Of `resident_bytes`, those of the huge-page pool
            /// ([`Builder::huge_cache_bytes`](crate::Builder::huge_cache_bytes));
            /// 0 without one.
            pub huge_pool_bytes: u64,
            /// The cache's bound now (of the regular pool, when there is a
            /// huge-page pool): [`Runtime::set_cache_bytes`](crate::Runtime::set_cache_bytes)
            /// and the automatic policy change it.
            pub cache_bytes: u64,
            /// The huge-page pool's bound now; 0 without one.
            pub huge_cache_bytes: u64,
            /// Measurement windows (32 fault events each) in which the
            /// fillers slept between events, in which one of them polled
            /// (see [`Builder::filler_spin`](crate::Builder::filler_spin)),
            /// and in which they slept pinned one per CPU (see
            /// [`Builder::pin_fillers`](crate::Builder::pin_fillers)).
            pub filler_sleep_windows: u64,
            /// See `filler_sleep_windows`.
            pub filler_poll_windows: u64,
            /// See `filler_sleep_windows`.
            pub filler_pinned_windows: u64,
            /// Regions mapped now.
            pub regions: u64,
            /// Of those, regions whose faults the faulting thread serves
            /// (`FaultService::InThread`); the fillers serve the others.
            /// Each mapping's own: `Mapping::fault_service`.
            pub in_thread_regions: u64,
        }

        impl Counters {
            pub(crate) fn snapshot(&self, now: Gauges) -> Stats {
                Stats {
                    $($name: self.$name.load(Relaxed),)*
                    fault_latency: self.fault_latency.snapshot(),
                    resident_bytes: now.resident_bytes,
                    huge_pool_bytes: now.huge_pool_bytes,
                    cache_bytes: now.cache_bytes,
                    huge_cache_bytes: now.huge_cache_bytes,
                    filler_sleep_windows: now.filler_windows[0],
                    filler_poll_windows: now.filler_windows[1],
                    filler_pinned_windows: now.filler_windows[2],
                    regions: now.regions,
                    in_thread_regions: now.in_thread_regions,
                }
            }
        }
    };
}

counters! {
    /// Faults served: fault messages read from userfaultfd by fillers,
    /// and SIGBUS faults served in the faulting thread.
    faults,
    /// Of `faults`, those served in the faulting thread
    /// ([`FaultService::InThread`](crate::FaultService::InThread)); the
    /// rest were served by filler threads.
    in_thread_faults,
    /// Misses on read: a page filled for a reading thread.
    read_misses,
    /// Misses on write: a page filled for a writing thread.
    write_misses,
    /// First writes to clean pages served as write-protect faults (sync
    /// dirty tracking; near 0 with [`DirtyTracking::Async`](crate::DirtyTracking::Async)).
    wp_faults,
    /// Read misses filled dirty, without write protection, because the
    /// region's read misses are nearly all followed by a write (sync
    /// dirty tracking, [`Builder::write_prediction`](crate::Builder::write_prediction)):
    /// the write that follows costs no write-protect fault. Counted in
    /// `read_misses` too.
    predicted_writes,
    /// With asynchronous dirty tracking: `PAGEMAP_SCAN` calls made to find
    /// pages written since umio last saw them clean.
    dirty_scans,
    /// With asynchronous dirty tracking: clean pages those scans found
    /// written (the first writes the kernel resolved without umio).
    scan_dirtied_pages,
    /// With asynchronous dirty tracking: eviction victims taken out of
    /// their region with `UFFDIO_MOVE` (so that no write is lost while
    /// they are dropped); the others were only scanned.
    moved_victims,
    /// Of the victims to move, those the kernel refused to move (only
    /// scanned, then dropped).
    unmoved_victims,
    /// Faults on a page another thread was already filling or changing:
    /// coalesced, no second read.
    coalesced,
    /// Faults found already resolved when handled.
    stale,
    /// Store reads made to fill pages (faults and prefetch).
    store_reads,
    /// Bytes read from stores.
    bytes_read,
    /// Pages filled by prefetch rather than by a fault.
    prefetched_pages,
    /// Batches of store reads submitted at once
    /// ([`Store::submit`](umio_backends::Store::submit)): the reads of
    /// hints, read-ahead, pinning and promotion, up to the store's
    /// [`queue_depth`](umio_backends::Store::queue_depth) each. A miss's
    /// own read is not one of them.
    read_submissions,
    /// Store reads in those batches: `reads_submitted / read_submissions`
    /// ([`Stats::mean_reads_in_flight`]) is how full the store's queue was
    /// kept on average.
    reads_submitted,
    /// The most store reads one batch put in flight at once: the store's
    /// depth once a batch filled its queue.
    max_reads_in_flight,
    /// Failed fills (the faulting thread got SIGBUS).
    read_errors,
    /// Misses a filler did not read itself because all but one filler were
    /// already in the region's store: queued for one of those (a slow or
    /// hung store; see `docs/ARCHITECTURE.md`).
    queued_fills,
    /// Pages evicted.
    evicted_pages,
    /// Of those, pages that were dirty and written back first.
    evicted_dirty_pages,
    /// Dirty pages written back in place (left in the cache, clean) by the
    /// dirty limit's write-back: with `evicted_dirty_pages`, the dirty
    /// pages written back before any flush asked.
    limit_written_pages,
    /// Bytes of pages evicted while a pool held more than its bound: after
    /// the bound was lowered at run time.
    shrink_evicted_bytes,
    /// Times a pool's bound was changed at run time (by
    /// [`Runtime::set_cache_bytes`](crate::Runtime::set_cache_bytes),
    /// [`Runtime::set_huge_cache_bytes`](crate::Runtime::set_huge_cache_bytes)
    /// or the automatic policy).
    cache_resizes,
    /// Store writes made by write-back (each covers a run of pages).
    writeback_ops,
    /// Bytes written back.
    bytes_written,
    /// Failed write-backs (the pages stayed dirty).
    write_errors,
    /// Times a filler evicted pages itself because the cache was full.
    direct_reclaims,
    /// Faults on hugetlbfs regions (each fills or dirties a 2 MiB page).
    huge_faults,
    /// Promotions of a 2 MiB range to a huge page attempted.
    promotions,
    /// Of those, ranges now mapped by one huge page.
    promotions_done,
    /// Failed: a page of the range could not be filled or stayed busy
    /// (cache too small, read failed, range being unmapped).
    promotions_not_resident,
    /// Failed: the kernel refused the collapse (see
    /// `last_promotion_errno`).
    promotions_refused,
    /// Requests to promote a range whose promotion was already under way
    /// (coalesced).
    promotions_coalesced,
    /// The errno of the last collapse the kernel refused (0: none).
    last_promotion_errno,
    /// Promoted ranges split back to small pages (a page evicted alone).
    demotions,
    /// Faults that made no progress and that umio ended instead of letting
    /// the thread fault forever: a fill the kernel refused to install
    /// (the thread got SIGBUS), or a thread faulting again and again on a
    /// page umio holds resident, whose mapping the kernel dropped behind
    /// umio's back (say, the application's own `madvise(MADV_DONTNEED)`):
    /// a clean page is dropped and filled again, a dirty one is poisoned
    /// (SIGBUS: its changes are lost). Each is logged; 0 in a correct
    /// program.
    no_progress_faults,
    /// `UFFD_EVENT_REMOVE` messages read (`Builder::remove_events`): the
    /// application's own `madvise` on umio memory, and umio's own drops.
    remove_events,
    /// Pages dropped from the cache because the application's own
    /// `madvise(MADV_DONTNEED)` or `MADV_FREE` removed them (remove
    /// events): their next access reads the store.
    removed_pages,
}

macro_rules! region_counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Each counter on its own cache line, as [`Counters`].
        #[derive(Default, Debug)]
        pub(crate) struct RegionCounters {
            $(pub $name: CachePadded<AtomicU64>,)*
        }

        /// A snapshot of one region's counters, from its map. New fields
        /// may be added in any release (`#[non_exhaustive]`).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct RegionStats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// How the region's faults are served (`Fillers` or
            /// `InThread`): [`Mapping::fault_service`](crate::Mapping::fault_service).
            pub fault_service: crate::kernel::FaultService,
        }

        impl RegionCounters {
            pub(crate) fn snapshot(&self) -> RegionStats {
                RegionStats {
                    $($name: self.$name.load(Relaxed),)*
                    fault_service: crate::kernel::FaultService::Fillers,
                }
            }
        }
    };
}

region_counters! {
    /// Fault events served for this region.
    faults,
    /// Of those, faults served without a store read: the page was being
    /// filled by another thread, already resident, or clean and written
    /// for the first time.
    hits,
    /// Pages read from the store (misses and prefetch).
    fills,
    /// Of those, pages read by prefetch or read-ahead.
    prefetched,
    /// Pages evicted.
    evictions,
    /// Store writes made by write-back.
    writebacks,
    /// Bytes read from the store.
    bytes_read,
    /// Bytes written back to the store.
    bytes_written,
    /// Faults that made no progress (see [`Stats::no_progress_faults`]).
    no_progress_faults,
    /// Batches of store reads submitted for this region (see
    /// [`Stats::read_submissions`]).
    read_submissions,
    /// Store reads in those batches.
    reads_submitted,
    /// The most store reads one of those batches put in flight at once.
    max_reads_in_flight,
    /// Read misses filled dirty because the region's read misses are
    /// nearly all followed by a write (see [`Stats::predicted_writes`]).
    predicted_writes,
}

impl RegionStats {
    /// Store reads per batch submitted, on average
    /// (`reads_submitted / read_submissions`); 0 before the first batch.
    pub fn mean_reads_in_flight(&self) -> f64 {
        if self.read_submissions == 0 {
            0.0
        } else {
            self.reads_submitted as f64 / self.read_submissions as f64
        }
    }
}

/// `n` bytes for people: `512 B`, `12.0 MiB` (binary units, one decimal).
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

impl Stats {
    /// First writes to clean pages, however umio learned of them:
    /// write-protect faults (`wp_faults`, sync dirty tracking) plus pages
    /// found written by scans (`scan_dirtied_pages`, async).
    pub fn first_writes(&self) -> u64 {
        self.wp_faults + self.scan_dirtied_pages
    }

    /// Store reads in flight per batch submitted, on average
    /// (`reads_submitted / read_submissions`); 0 before the first batch.
    pub fn mean_reads_in_flight(&self) -> f64 {
        if self.read_submissions == 0 {
            0.0
        } else {
            self.reads_submitted as f64 / self.read_submissions as f64
        }
    }
}

impl std::fmt::Display for Stats {
    /// A compact summary, one topic a line:
    ///
    /// ```text
    /// faults: 5120 (read misses 4096, write misses 0, first writes 1024, coalesced 0, resolved 0)
    /// latency: 5120 faults: mean 21.3µs, p50 ≤ 32.768µs, p99 ≤ 131.072µs, max ≤ 1.048576ms
    /// reads: 4096 store reads, 16.0 MiB, 0 prefetched pages, 0 errors
    /// cache: 3.9 MiB resident of 4.0 MiB, 3072 evicted pages (1024 dirty), 2 regions
    /// write-back: 40 writes, 4.0 MiB, 0 errors
    /// ```
    ///
    /// with a `write prediction:` line when read misses were filled dirty
    /// ([`predicted_writes`](Stats::predicted_writes)), a `batches:` line
    /// (store reads in flight per batch
    /// submitted, mean and max) when reads were submitted in batches, a
    /// `huge pages:` line when there were huge-page faults,
    /// promotions or a huge-page pool, and a `no progress:` line when a
    /// fault made none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "faults: {} (read misses {}, write misses {}, first writes {}, coalesced {}, resolved {})",
            self.faults,
            self.read_misses,
            self.write_misses,
            self.wp_faults,
            self.coalesced,
            self.stale
        )?;
        if self.predicted_writes != 0 {
            writeln!(
                f,
                "write prediction: {} read misses filled dirty",
                self.predicted_writes
            )?;
        }
        if self.in_thread_faults != 0 {
            writeln!(
                f,
                "in the faulting thread: {} of the faults",
                self.in_thread_faults
            )?;
        }
        if self.dirty_scans != 0 {
            writeln!(
                f,
                "dirty tracking: {} pages found written by {} scans (asynchronous)",
                self.scan_dirtied_pages, self.dirty_scans
            )?;
        }
        writeln!(f, "latency: {}", self.fault_latency)?;
        writeln!(
            f,
            "reads: {} store reads, {}, {} prefetched pages, {} errors",
            self.store_reads,
            format_bytes(self.bytes_read),
            self.prefetched_pages,
            self.read_errors
        )?;
        if self.read_submissions != 0 {
            writeln!(
                f,
                "batches: {} submitted, {:.1} reads in flight per batch (max {})",
                self.read_submissions,
                self.mean_reads_in_flight(),
                self.max_reads_in_flight
            )?;
        }
        writeln!(
            f,
            "cache: {} resident of {}, {} evicted pages ({} dirty), {} regions",
            format_bytes(self.resident_bytes),
            format_bytes(self.cache_bytes),
            self.evicted_pages,
            self.evicted_dirty_pages,
            self.regions
        )?;
        write!(
            f,
            "write-back: {} writes, {}, {} errors",
            self.writeback_ops,
            format_bytes(self.bytes_written),
            self.write_errors
        )?;
        if self.huge_faults + self.promotions + self.huge_cache_bytes > 0 {
            write!(
                f,
                "\nhuge pages: {} faults, {} promotions ({} done), {} of {} in the pool",
                self.huge_faults,
                self.promotions,
                self.promotions_done,
                format_bytes(self.huge_pool_bytes),
                format_bytes(self.huge_cache_bytes)
            )?;
        }
        if self.no_progress_faults > 0 {
            write!(
                f,
                "\nno progress: {} faults ended by umio (see the log)",
                self.no_progress_faults
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn display_is_a_compact_summary() {
        let c = Counters::default();
        c.faults.store(5, Relaxed);
        c.read_misses.store(4, Relaxed);
        c.wp_faults.store(1, Relaxed);
        c.bytes_read.store(3 << 20, Relaxed);
        c.evicted_pages.store(2, Relaxed);
        for _ in 0..5 {
            c.fault_latency.record(Duration::from_micros(3));
        }
        let s = c.snapshot(Gauges {
            resident_bytes: 1 << 20,
            huge_pool_bytes: 0,
            cache_bytes: 4 << 20,
            huge_cache_bytes: 0,
            filler_windows: [0, 0, 0],
            regions: 1,
            in_thread_regions: 0,
        });
        let text = s.to_string();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert_eq!(
            lines[0],
            "faults: 5 (read misses 4, write misses 0, first writes 1, coalesced 0, resolved 0)"
        );
        assert!(
            lines[1].starts_with("latency: 5 faults: mean 3.0µs, p50 ≤ 4.096µs"),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "reads: 0 store reads, 3.0 MiB, 0 prefetched pages, 0 errors"
        );
        assert_eq!(
            lines[3],
            "cache: 1.0 MiB resident of 4.0 MiB, 2 evicted pages (0 dirty), 1 regions"
        );
        assert_eq!(lines[4], "write-back: 0 writes, 0 B, 0 errors");
        c.no_progress_faults.store(1, Relaxed);
        let more = c.snapshot(Gauges {
            resident_bytes: 0,
            huge_pool_bytes: 0,
            cache_bytes: 0,
            huge_cache_bytes: 0,
            filler_windows: [0, 0, 0],
            regions: 0,
            in_thread_regions: 0,
        });
        assert!(
            more.to_string()
                .ends_with("no progress: 1 faults ended by umio (see the log)")
        );
    }
}
