//! Per-thread scratch state: the buffers and lists a filler, evictor,
//! the prefetch thread or a `pin` call reuses from one fault or batch to
//! the next, so that the fault path does not allocate in steady state.

use std::ops::Range;

use umio_backends::StoreError;
use umio_cache::{FrameCredit, PageKey, PageState};

use crate::prefetch::FetchList;
use crate::region::EnteredRegion;
use crate::store_slots::Miss;
use crate::sys::mm::StagingBuffer;

/// A miss set aside by a filler (`misses.rs`): its page held busy, its
/// region entered.
pub(crate) struct Deferred {
    pub region: EnteredRegion,
    pub miss: Miss,
}

/// Per-thread scratch state of fillers, evictors, the prefetch thread
/// and `pin`.
pub(crate) struct Scratch {
    pub buf: StagingBuffer,
    pub credit: FrameCredit,
    pub victims: Vec<PageKey>,
    /// Dirty victims of an eviction batch, written back after its clean
    /// victims are evicted.
    pub dirty_victims: Vec<PageKey>,
    pub locked: Vec<(usize, PageState)>,
    /// Page indices of one region, reused so that eviction on the fault
    /// path does not allocate in steady state.
    pub pages: Vec<usize>,
    /// What the prefetcher asked for after a fault.
    pub fetch: FetchList,
    /// Runs of one batch of store requests.
    pub runs: Vec<Range<usize>>,
    /// Page ranges the prefetcher asked for, sorted.
    pub fetch_pages: Vec<Range<usize>>,
    /// The outcome of each dirty run written back by an eviction batch.
    pub write_results: Vec<Result<(), StoreError>>,
    /// The address ranges an eviction batch discards at once.
    pub discard: Vec<libc::iovec>,
    /// The thread of the fault being handled (0: unknown).
    pub thread: u32,
    /// Holds one of the current region's store slots (`store_slots`).
    pub in_store: bool,
    /// Runs in a signal handler (the in-thread service's slots): reads
    /// only what is safe to read there.
    pub in_signal: bool,
    /// Fills queued on a region's store slots, taken to be filled as one
    /// batch (`store_slots.rs`).
    pub queued: Vec<Miss>,
    /// A filler's misses of the fault events of one read, set aside while
    /// it resolves the others, then filled together (`misses.rs`).
    pub deferred: Vec<Deferred>,
    /// Whether a miss that this thread locks goes to `deferred`.
    pub defer_misses: bool,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            buf: StagingBuffer::new(),
            credit: FrameCredit::default(),
            victims: Vec::new(),
            dirty_victims: Vec::new(),
            locked: Vec::new(),
            pages: Vec::new(),
            fetch: FetchList::new(),
            runs: Vec::new(),
            fetch_pages: Vec::new(),
            write_results: Vec::new(),
            discard: Vec::new(),
            thread: 0,
            in_store: false,
            in_signal: false,
            queued: Vec::new(),
            deferred: Vec::new(),
            defer_misses: false,
        }
    }

    /// Reserves room for `n` entries in each list, so that a thread that
    /// may not allocate (the in-thread service, in a signal handler) finds
    /// them large enough.
    pub fn reserve(&mut self, n: usize) {
        self.victims.reserve(n);
        self.dirty_victims.reserve(n);
        self.locked.reserve(n);
        self.pages.reserve(n);
        self.runs.reserve(n);
        self.fetch_pages.reserve(n);
        self.write_results.reserve(n);
        self.discard.reserve(n);
    }
}
