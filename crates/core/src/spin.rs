//! Whether a filler polls for the next fault event or sleeps until it
//! comes: measured per runtime, not guessed.
//!
//! Which is cheaper depends on what else the machine runs, and the two
//! answers differ several times over. Measured on a 2-vCPU virtual
//! machine (`examples/fault_path.rs`, one thread faulting in a loop):
//!
//! | machine | fillers sleep | one filler polls 50 us |
//! |---|---:|---:|
//! | otherwise idle | 38-52 us | 22-29 us |
//! | the other CPU busy | 10-13 us | 61-64 us |
//!
//! On an idle machine the kernel wakes a sleeping filler on the idle CPU
//! and the filler wakes the faulting thread back across CPUs: two wake-ups
//! of a halted virtual CPU per fault. A polling filler saves one of them.
//! With the other CPU busy, the kernel wakes the filler on the faulting
//! thread's own CPU (that thread is going to sleep): fault, fill and
//! resume stay on one CPU and polling only gets in the way.
//!
//! So the runtime measures: it counts fault events in windows of
//! [`WINDOW`] and keeps, for each mode, the time per event of its last
//! [`SAMPLES`] windows (the faulting threads' work between faults plus
//! the faults themselves: the lower, the faster the application runs),
//! of which the least counts. It runs the cheaper mode (after measuring
//! each twice) and tries the
//! other one window in [`EXPLORE_EVERY`] (or [`EXPLORE_EVERY_FAR`], when
//! it was over twice as slow), so that it follows the machine as it
//! changes.
//! Windows that took longer than [`IDLE_WINDOW`] (the application was not
//! faulting much) are not counted. At most one filler polls at a time.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

/// How long a filler polls after an event when polling is chosen.
pub(crate) const ADAPTIVE_SPIN: Duration = Duration::from_micros(50);
/// Fault events per measurement window.
const WINDOW: u32 = 32;
/// One window in this many runs the mode that is not the best...
const EXPLORE_EVERY: u64 = 32;
/// ... or in this many, when it measured over twice as slow.
const EXPLORE_EVERY_FAR: u64 = 128;
/// The first windows alternate between the modes, to measure each twice.
const LEARNING_WINDOWS: u64 = 5;
/// Samples kept per mode.
const SAMPLES: usize = 4;
/// Windows longer than this are not measured.
const IDLE_WINDOW: Duration = Duration::from_millis(20);

/// How fillers wait for fault events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FillerWait {
    /// Every filler polls this long after an event (zero: never polls).
    Fixed(Duration),
    /// Polls or sleeps, whichever the runtime measures to be faster.
    Adaptive,
}

/// The measurements behind [`FillerWait::Adaptive`].
pub(crate) struct SpinTuner {
    origin: Instant,
    /// Events in the current window.
    events: AtomicU32,
    /// Start of the current window, in nanoseconds since `origin`.
    window_start: AtomicU64,
    /// The current mode.
    polling: AtomicBool,
    /// Nanoseconds per event of the last [`SAMPLES`] measured windows of
    /// each mode, sleeping then polling (0: none yet).
    samples: [[AtomicU64; SAMPLES]; 2],
    /// Windows measured in each mode (the next sample's slot).
    measured: [AtomicU64; 2],
    /// Windows ended.
    windows: AtomicU64,
    /// Windows run in each mode: sleeping, polling.
    pub windows_by_mode: [AtomicU64; 2],
    /// Whether a filler is polling now.
    spinner: AtomicBool,
}

impl SpinTuner {
    pub fn new() -> SpinTuner {
        SpinTuner {
            origin: Instant::now(),
            events: AtomicU32::new(0),
            window_start: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            samples: Default::default(),
            measured: Default::default(),
            windows: AtomicU64::new(0),
            windows_by_mode: [AtomicU64::new(0), AtomicU64::new(0)],
            spinner: AtomicBool::new(false),
        }
    }

    /// A mode's cost: the least of its last samples (0: none). Noise on
    /// this machine only ever adds time (a preempted filler, a stalled
    /// virtual CPU): the least is the truest, and one bad window does
    /// not condemn a mode.
    fn cost(&self, mode: usize) -> u64 {
        self.samples[mode]
            .iter()
            .map(|s| s.load(Relaxed))
            .filter(|&s| s != 0)
            .min()
            .unwrap_or(0)
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Counts `n` fault events handled; ends the window when it is full.
    pub fn record(&self, n: u32) {
        let before = self.events.fetch_add(n, Relaxed);
        if before >= WINDOW || before + n < WINDOW {
            // Not full, or another filler is ending it.
            return;
        }
        let now = self.now();
        let start = self.window_start.swap(now, Relaxed);
        self.events.store(0, Relaxed);
        let mode = usize::from(self.polling.load(Relaxed));
        self.windows_by_mode[mode].fetch_add(1, Relaxed);
        let elapsed = now.saturating_sub(start);
        if start != 0 && elapsed < IDLE_WINDOW.as_nanos() as u64 {
            let per_event = (elapsed / u64::from(before + n)).max(1);
            let slot = self.measured[mode].fetch_add(1, Relaxed) as usize % SAMPLES;
            self.samples[mode][slot].store(per_event, Relaxed);
        }
        let windows = self.windows.fetch_add(1, Relaxed) + 1;
        let next = choose(self.cost(0), self.cost(1), windows);
        self.polling.store(next, Relaxed);
    }

    /// Whether the calling filler, which has just handled events, should
    /// poll for the next one: polling is the chosen mode and no other
    /// filler polls. A true answer must be followed by [`stop`](Self::stop)
    /// when the filler stops polling.
    pub fn start(&self, already: bool) -> bool {
        if !self.polling.load(Relaxed) {
            if already {
                self.stop();
            }
            return false;
        }
        already
            || self
                .spinner
                .compare_exchange(false, true, Relaxed, Relaxed)
                .is_ok()
    }

    /// The polling filler stops polling.
    pub fn stop(&self) {
        self.spinner.store(false, Relaxed);
    }
}

/// The mode of the next window (true: polling), from the two modes' costs
/// (nanoseconds per event, 0 if not measured) and the count of windows
/// so far. The first window only starts the clock; the next four
/// alternate sleeping and polling; then the cheaper mode runs, except one
/// window in [`EXPLORE_EVERY`] (in [`EXPLORE_EVERY_FAR`] when the other
/// was over twice as slow), so that a change in the machine's load is
/// seen.
fn choose(sleeping: u64, polling: u64, windows: u64) -> bool {
    if windows < LEARNING_WINDOWS || sleeping == 0 || polling == 0 {
        return windows.is_multiple_of(2) && sleeping != 0;
    }
    let best = polling < sleeping;
    let (lo, hi) = (sleeping.min(polling), sleeping.max(polling));
    let every = if hi > 2 * lo {
        EXPLORE_EVERY_FAR
    } else {
        EXPLORE_EVERY
    };
    if windows.is_multiple_of(every) {
        !best
    } else {
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_is_measured_twice_then_the_cheaper_runs_and_the_other_is_retried() {
        assert!(!choose(0, 0, 1), "sleeping is measured first");
        assert!(choose(40_000, 0, 2), "then polling");
        assert!(!choose(40_000, 25_000, 3), "then sleeping again");
        assert!(choose(40_000, 25_000, 4), "and polling again");
        assert!(choose(40_000, 25_000, 5), "polling is cheaper here");
        assert!(!choose(10_000, 11_000, 5), "sleeping is cheaper here");
        assert!(!choose(40_000, 25_000, 32), "one window in 32 retries");
        assert!(choose(10_000, 11_000, 64));
        assert!(!choose(10_000, 31_000, 64), "over twice as slow: rarer");
        assert!(choose(10_000, 31_000, 128));
    }

    #[test]
    fn one_slow_window_does_not_condemn_a_mode() {
        let t = SpinTuner::new();
        assert_eq!(t.cost(1), 0, "nothing measured");
        for (slot, ns) in [22_000, 151_000, 23_000].into_iter().enumerate() {
            t.samples[1][slot].store(ns, Relaxed);
        }
        assert_eq!(t.cost(1), 22_000);
    }

    #[test]
    fn windows_feed_the_mode_they_ran_in() {
        let t = SpinTuner::new();
        // The first window only starts the clock.
        t.record(WINDOW);
        assert_eq!(t.cost(0), 0);
        std::thread::sleep(Duration::from_millis(1));
        t.record(WINDOW);
        let sleeping = t.cost(0);
        assert!(sleeping > 0, "a sleeping window was measured");
        assert!(t.polling.load(Relaxed), "polling is measured next");
        assert!(
            t.start(false) && !t.start(false),
            "one filler polls at a time"
        );
        assert!(t.start(true), "the polling filler goes on");
        t.stop();
        t.record(WINDOW);
        assert!(t.cost(1) > 0, "a polling window was measured");
        assert_eq!(t.windows_by_mode[0].load(Relaxed), 2);
        assert_eq!(t.windows_by_mode[1].load(Relaxed), 1);
        assert!(!t.polling.load(Relaxed), "sleeping is measured again");
        assert!(!t.start(false), "no filler polls while sleeping is chosen");
        // A window far longer than IDLE_WINDOW is not measured.
        let before = [t.cost(0), t.cost(1)];
        std::thread::sleep(IDLE_WINDOW + Duration::from_millis(5));
        t.record(WINDOW);
        assert_eq!(before, [t.cost(0), t.cost(1)]);
    }
}
