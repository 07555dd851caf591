//! Fault tracing for benchmarks: the time stamp counter read at each step
//! of the most recent miss, recorded by the filler that served it.
//!
//! Off unless [`Builder::trace_faults`](crate::Builder::trace_faults) turns
//! it on; then each step of a miss costs one `rdtsc` and one relaxed store.
//! Off, the fault path pays one predictable branch on a `None` per step.
//! A trace describes one fault at a time: it is meant for a benchmark that
//! faults one page at a time from one thread (`examples/fault_path.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Time stamp counter readings (cycles on x86-64; nanoseconds elsewhere)
/// at the steps of one miss, as seen by the filler that served it.
///
/// The phases of a fault are the differences: `read_begin - (access)` is
/// the trap and its delivery to the filler, `read_end - read_begin` the
/// event read, `filling - read_end` the region and page lookup,
/// `reserved - filling` the cache reservation, `store_read - reserved` the
/// store read, `installed - store_read` the `UFFDIO_COPY`, `woken -
/// installed` the page state update and `UFFDIO_WAKE`, and `(resumed) -
/// woken` the wake-up until the faulting thread runs again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultTrace {
    /// Counts traced misses: a new value means a new trace.
    pub seq: u64,
    /// The filler started the `read(2)` that returned the fault event.
    pub read_begin: u64,
    /// That `read(2)` returned.
    pub read_end: u64,
    /// The region and the page were found and the page locked: the fill
    /// begins.
    pub filling: u64,
    /// Cache space for the page was reserved.
    pub reserved: u64,
    /// The store read returned (the page's bytes are staged).
    pub store_read: u64,
    /// `UFFDIO_COPY` returned.
    pub installed: u64,
    /// The page was unlocked and `UFFDIO_WAKE` returned.
    pub woken: u64,
}

/// The counter the trace uses: `rdtsc` on x86-64, a monotonic clock in
/// nanoseconds elsewhere.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Steps of a miss, in the order stamped.
#[derive(Clone, Copy)]
pub(crate) enum Step {
    Filling = 0,
    Reserved = 1,
    StoreRead = 2,
    Installed = 3,
    Woken = 4,
}

/// Where fillers record the current trace.
#[derive(Default)]
pub(crate) struct Tracer {
    read: [AtomicU64; 2],
    steps: [AtomicU64; 5],
    seq: AtomicU64,
}

impl Tracer {
    /// The read that returned events began at `begin` and ended now.
    #[inline]
    pub fn read(&self, begin: u64) {
        self.read[0].store(begin, Ordering::Relaxed);
        self.read[1].store(now(), Ordering::Relaxed);
    }

    #[inline]
    pub fn step(&self, step: Step) {
        self.steps[step as usize].store(now(), Ordering::Relaxed);
    }

    /// The faulting thread was woken: stamps it and publishes the trace.
    #[inline]
    pub fn woken(&self) {
        self.step(Step::Woken);
        self.seq.fetch_add(1, Ordering::Release);
    }

    pub fn last(&self) -> Option<FaultTrace> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq == 0 {
            return None;
        }
        let s = |i: usize| self.steps[i].load(Ordering::Relaxed);
        Some(FaultTrace {
            seq,
            read_begin: self.read[0].load(Ordering::Relaxed),
            read_end: self.read[1].load(Ordering::Relaxed),
            filling: s(0),
            reserved: s(1),
            store_read: s(2),
            installed: s(3),
            woken: s(4),
        })
    }
}
