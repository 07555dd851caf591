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
/// store read, `installed - store_read` the `UFFDIO_COPY`, `waking -
/// installed` the page state update, and `(resumed) - waking` the
/// `UFFDIO_WAKE` and the wake-up until the faulting thread runs again.
///
/// `woken` (when `UFFDIO_WAKE` returned to the filler) is not a phase
/// boundary: the woken thread may run, even fault again, before the filler
/// gets the CPU back (on a machine with few CPUs the filler is often
/// preempted right there), so `(resumed) - woken` can be negative and
/// `woken - installed` includes time the faulting thread was already
/// running. Every stamp of one trace is taken by the one filler thread
/// that served the miss (staged per thread, published together), so
/// stamps of two fillers are never mixed; stamps of the filler and of the
/// faulting thread are taken on different CPUs, whose counters agree here
/// to within a few hundred cycles (`constant_tsc`).
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
    /// The page was unlocked; `UFFDIO_WAKE` is called next.
    pub waking: u64,
    /// `UFFDIO_WAKE` returned (possibly after the woken thread ran).
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
    Waking = 4,
    Woken = 5,
}

/// Stamps per trace: the event read's two, then one per [`Step`].
const STAMPS: usize = 8;

std::thread_local! {
    /// This filler's stamps of the miss it is serving: published together
    /// once it is served, so that a trace never mixes two fillers' stamps.
    static STAGED: std::cell::Cell<[u64; STAMPS]> = const { std::cell::Cell::new([0; STAMPS]) };
}

fn stage(i: usize, v: u64) {
    STAGED.with(|c| {
        let mut a = c.get();
        a[i] = v;
        c.set(a);
    });
}

/// Where fillers publish the most recent trace (a sequence lock: `generation` is
/// odd while a filler writes).
#[derive(Default)]
pub(crate) struct Tracer {
    stamps: [AtomicU64; STAMPS],
    generation: AtomicU64,
    seq: AtomicU64,
}

impl Tracer {
    /// The read that returned events began at `begin` and ended now.
    #[inline]
    pub fn read(&self, begin: u64) {
        stage(0, begin);
        stage(1, now());
    }

    #[inline]
    pub fn step(&self, step: Step) {
        stage(2 + step as usize, now());
    }

    /// `UFFDIO_WAKE` returned: stamps it and publishes this filler's trace.
    #[inline]
    pub fn woken(&self) {
        self.step(Step::Woken);
        let staged = STAGED.with(std::cell::Cell::get);
        // Two fillers may finish misses at once: the first to make `generation`
        // odd writes, the other's trace is dropped (a trace is the most
        // recent miss, not every one).
        let g = self.generation.load(Ordering::Relaxed);
        if g % 2 == 1
            || self
                .generation
                .compare_exchange(g, g + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        for (slot, v) in self.stamps.iter().zip(staged) {
            slot.store(v, Ordering::Relaxed);
        }
        self.seq.fetch_add(1, Ordering::Relaxed);
        self.generation.store(g + 2, Ordering::Release);
    }

    pub fn last(&self) -> Option<FaultTrace> {
        loop {
            let g = self.generation.load(Ordering::Acquire);
            if g % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let seq = self.seq.load(Ordering::Relaxed);
            let s: [u64; STAMPS] = std::array::from_fn(|i| self.stamps[i].load(Ordering::Relaxed));
            std::sync::atomic::fence(Ordering::Acquire);
            if self.generation.load(Ordering::Relaxed) != g {
                continue;
            }
            if seq == 0 {
                return None;
            }
            return Some(FaultTrace {
                seq,
                read_begin: s[0],
                read_end: s[1],
                filling: s[2],
                reserved: s[3],
                store_read: s[4],
                installed: s[5],
                waking: s[6],
                woken: s[7],
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Two fillers serving misses at once: the published trace holds the
    /// stamps of the one that published it, none of the other's (before,
    /// the stamps lived in one shared set, and the other filler's event
    /// read overwrote the first's).
    #[test]
    fn a_trace_holds_one_fillers_stamps() {
        let t = Arc::new(Tracer::default());
        let (a_read, b_read) = (now(), now() + (1 << 40));
        let step = Arc::new(Barrier::new(2));
        let b = {
            let (t, step) = (t.clone(), step.clone());
            std::thread::spawn(move || {
                step.wait(); // A has read its event.
                t.read(b_read);
                t.step(Step::Filling);
                step.wait(); // A may publish.
                step.wait(); // A published.
            })
        };
        t.read(a_read);
        step.wait();
        step.wait();
        for s in [
            Step::Filling,
            Step::Reserved,
            Step::StoreRead,
            Step::Installed,
            Step::Waking,
        ] {
            t.step(s);
        }
        t.woken();
        step.wait();
        b.join().unwrap();
        let tr = t.last().expect("a trace");
        assert_eq!(tr.seq, 1);
        assert_eq!(tr.read_begin, a_read, "another filler's read in the trace");
        let stamps = [
            tr.read_begin,
            tr.read_end,
            tr.filling,
            tr.reserved,
            tr.store_read,
            tr.installed,
            tr.waking,
            tr.woken,
        ];
        assert!(
            stamps.windows(2).all(|w| w[0] <= w[1]),
            "stamps of one thread out of order: {tr:?}"
        );
    }
}
