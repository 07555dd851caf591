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
//! | the other CPU busy | 10-13 us | 19-23 us (61-64 us spinning without yielding) |
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
//! each twice) and tries the other now and then (see `choose`), so that
//! it corrects an unlucky first measurement and follows the machine as it
//! changes.
//! Windows that took longer than [`IDLE_WINDOW`] (the application was not
//! faulting much) are not counted. At most one filler polls at a time.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

/// How long a filler polls after an event when polling is chosen.
pub(crate) const ADAPTIVE_SPIN: Duration = Duration::from_micros(50);
/// Fault events per measurement window.
const WINDOW: u32 = 32;
/// Two windows in this many run the mode that is not the best (the first
/// of them is not measured: see [`SpinTuner::record`])...
const EXPLORE_EVERY: u64 = 64;
/// ... or in this many, when it measured over twice as slow.
const EXPLORE_EVERY_FAR: u64 = 256;
/// The first windows run sleeping, sleeping, polling, polling, and so on
/// again, to measure each mode twice.
const LEARNING_WINDOWS: u64 = 8;
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
    /// The mode of the last window ended.
    last_mode: AtomicU8,
    /// Windows ended.
    windows: AtomicU64,
    /// Windows run in each mode: sleeping, polling.
    pub windows_by_mode: [AtomicU64; 2],
    /// Whether a filler is polling now.
    spinner: AtomicBool,
    /// Tests: the clock, in nanoseconds, when not 0 (the real one then).
    #[cfg(test)]
    fake_now: AtomicU64,
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
            last_mode: AtomicU8::new(0),
            windows: AtomicU64::new(0),
            windows_by_mode: [AtomicU64::new(0), AtomicU64::new(0)],
            spinner: AtomicBool::new(false),
            #[cfg(test)]
            fake_now: AtomicU64::new(0),
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
        #[cfg(test)]
        if self.fake_now.load(Relaxed) != 0 {
            return self.fake_now.load(Relaxed);
        }
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
        // The first window after a switch is not measured: the switch
        // itself costs (the scheduler has yet to move a newly polling
        // filler off the faulting thread's CPU).
        let steady = self.last_mode.swap(mode as u8, Relaxed) == mode as u8;
        let elapsed = now.saturating_sub(start);
        if steady && start != 0 && elapsed < IDLE_WINDOW.as_nanos() as u64 {
            let per_event = (elapsed / u64::from(before + n)).max(1);
            let slot = self.measured[mode].fetch_add(1, Relaxed) as usize % SAMPLES;
            self.samples[mode][slot].store(per_event, Relaxed);
        }
        let windows = self.windows.fetch_add(1, Relaxed) + 1;
        let next = choose([self.cost(0), self.cost(1)], windows);
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

/// The mode of the next window (true: polling), from the two modes'
/// costs (nanoseconds per event, 0 if not measured) and the count of
/// windows ended. The first [`LEARNING_WINDOWS`] run sleeping, sleeping,
/// polling, polling, twice over (the first of each pair unmeasured: it
/// starts the clock or follows a switch); then the cheaper mode runs,
/// except two windows in [`EXPLORE_EVERY`] (in [`EXPLORE_EVERY_FAR`] if
/// the other was over twice as slow), so that a change in the machine's
/// load is seen.
fn choose(cost: [u64; 2], windows: u64) -> bool {
    let [sleeping, polling] = cost;
    if windows < LEARNING_WINDOWS || sleeping == 0 || polling == 0 {
        return (windows / 2) % 2 == 1;
    }
    let best = polling < sleeping;
    let (lo, hi) = (sleeping.min(polling), sleeping.max(polling));
    let every = if hi > 2 * lo {
        EXPLORE_EVERY_FAR
    } else {
        EXPLORE_EVERY
    };
    if windows % every < 2 { !best } else { best }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_is_measured_twice_then_the_cheaper_runs_and_the_other_is_retried() {
        let learning: Vec<bool> = (0..8).map(|w| choose([0, 0], w)).collect();
        assert_eq!(
            learning,
            [false, false, true, true, false, false, true, true],
            "windows 1 to 8: sleeping twice, polling twice, and again"
        );
        assert!(choose([40_000, 25_000], 8), "polling is cheaper here");
        assert!(!choose([10_000, 11_000], 8), "sleeping is cheaper here");
        assert!(!choose([40_000, 25_000], 64) && !choose([40_000, 25_000], 65));
        assert!(choose([40_000, 25_000], 66), "two windows in 64 retry");
        assert!(choose([10_000, 11_000], 128));
        assert!(!choose([10_000, 31_000], 128), "twice as slow: rarer");
        assert!(choose([10_000, 31_000], 256));
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
        // A clock of the test's own: a window lasts what it says, however
        // long the machine keeps this thread waiting.
        t.fake_now.store(1, Relaxed);
        let window = |pause_ms: u64| {
            t.fake_now.fetch_add(pause_ms * 1_000_000, Relaxed);
            t.record(WINDOW);
        };
        // Window 1 only starts the clock; window 2 measures sleeping.
        window(0);
        assert_eq!(t.cost(0), 0);
        window(1);
        assert!(t.cost(0) > 0, "a sleeping window was measured");
        assert!(t.polling.load(Relaxed), "polling runs next");
        assert!(
            t.start(false) && !t.start(false),
            "one filler polls at a time"
        );
        assert!(t.start(true), "the polling filler goes on");
        t.stop();
        // Window 3 follows the switch: not measured. Window 4 is.
        window(1);
        assert_eq!(t.cost(1), 0, "the first window after a switch");
        window(1);
        assert!(t.cost(1) > 0, "a polling window was measured");
        assert_eq!(t.windows_by_mode[0].load(Relaxed), 2);
        assert_eq!(t.windows_by_mode[1].load(Relaxed), 2);
        assert!(!t.polling.load(Relaxed), "sleeping is measured again");
        assert!(!t.start(false), "no filler polls while sleeping is chosen");
        // A window far longer than IDLE_WINDOW is not measured.
        window(0);
        let before = [t.cost(0), t.cost(1)];
        window(IDLE_WINDOW.as_millis() as u64 + 5);
        assert_eq!(before, [t.cost(0), t.cost(1)]);
    }
}
