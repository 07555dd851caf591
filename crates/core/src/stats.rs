//! Counters of what the runtime did.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::padded::CachePadded;

/// What a [`Stats`] snapshot reads from the runtime besides its counters.
pub(crate) struct Gauges {
    pub resident_bytes: u64,
    pub huge_pool_bytes: u64,
    /// The pools' bounds now.
    pub cache_bytes: u64,
    pub huge_cache_bytes: u64,
    /// Windows sleeping, polling.
    pub filler_windows: [u64; 2],
    pub regions: u64,
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Each counter on its own cache line: fillers on different CPUs
        /// bump several of them on every fault.
        #[derive(Default, Debug)]
        pub(crate) struct Counters {
            $(pub $name: CachePadded<AtomicU64>,)*
        }

        /// A snapshot of a runtime's counters, from its start.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: u64,)*
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
            /// fillers slept between events, and in which one of them
            /// polled (see [`Builder::filler_spin`](crate::Builder::filler_spin)).
            pub filler_sleep_windows: u64,
            /// See `filler_sleep_windows`.
            pub filler_poll_windows: u64,
            /// Regions mapped now.
            pub regions: u64,
        }

        impl Counters {
            pub(crate) fn snapshot(&self, now: Gauges) -> Stats {
                Stats {
                    $($name: self.$name.load(Relaxed),)*
                    resident_bytes: now.resident_bytes,
                    huge_pool_bytes: now.huge_pool_bytes,
                    cache_bytes: now.cache_bytes,
                    huge_cache_bytes: now.huge_cache_bytes,
                    filler_sleep_windows: now.filler_windows[0],
                    filler_poll_windows: now.filler_windows[1],
                    regions: now.regions,
                }
            }
        }
    };
}

counters! {
    /// Fault messages read from userfaultfd.
    faults,
    /// Misses on read: a page filled for a reading thread.
    read_misses,
    /// Misses on write: a page filled for a writing thread.
    write_misses,
    /// First writes to clean pages (write-protect faults).
    wp_faults,
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
}

macro_rules! region_counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Each counter on its own cache line, as [`Counters`].
        #[derive(Default, Debug)]
        pub(crate) struct RegionCounters {
            $(pub $name: CachePadded<AtomicU64>,)*
        }

        /// A snapshot of one region's counters, from its map.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct RegionStats {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl RegionCounters {
            pub(crate) fn snapshot(&self) -> RegionStats {
                RegionStats { $($name: self.$name.load(Relaxed),)* }
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
}
