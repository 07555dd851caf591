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
//!
//! Where the fillers may be pinned one to each CPU (`threads.rs`,
//! `Pinning`), pinned is a third mode, measured the same way: every
//! filler sleeps pinned to its CPU and is woken by every fault, so that
//! the one on the faulting thread's CPU serves it and no wake-up crosses
//! CPUs. It wins where the hand-off is most of a miss (fast storage: a
//! cold miss in 8 us rather than 28 on this machine) and can lose where
//! the device's time is (the disk, whose completions come on either CPU).

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
/// Samples kept per mode.
const SAMPLES: usize = 4;
/// Modes, by index: fillers sleep between events...
pub(crate) const SLEEPING: usize = 0;
/// ... one polls for a while after each...
pub(crate) const POLLING: usize = 1;
/// ... or they sleep pinned, one per CPU, each woken by every event.
pub(crate) const PINNED: usize = 2;
const MODES: usize = 3;
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
    /// The current mode ([`SLEEPING`], [`POLLING`], [`PINNED`]).
    mode: AtomicU8,
    /// Whether [`PINNED`] is one of the modes (`set_pinnable`).
    pinnable: AtomicBool,
    /// Nanoseconds per event of the last [`SAMPLES`] measured windows of
    /// each mode (0: none yet).
    samples: [[AtomicU64; SAMPLES]; MODES],
    /// Windows measured in each mode (the next sample's slot).
    measured: [AtomicU64; MODES],
    /// The mode of the last window ended.
    last_mode: AtomicU8,
    /// Windows ended.
    windows: AtomicU64,
    /// Windows run in each mode: sleeping, polling, pinned.
    pub windows_by_mode: [AtomicU64; MODES],
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
            mode: AtomicU8::new(SLEEPING as u8),
            pinnable: AtomicBool::new(false),
            samples: Default::default(),
            measured: Default::default(),
            last_mode: AtomicU8::new(0),
            windows: AtomicU64::new(0),
            windows_by_mode: Default::default(),
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

    /// Makes [`PINNED`] one of the modes measured (the fillers can be
    /// pinned one per CPU), from the next window on.
    pub fn set_pinnable(&self) {
        self.pinnable.store(true, Relaxed);
    }

    /// Whether the fillers run pinned now.
    pub fn pinned(&self) -> bool {
        usize::from(self.mode.load(Relaxed)) == PINNED
    }

    fn modes(&self) -> usize {
        if self.pinnable.load(Relaxed) { 3 } else { 2 }
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
        let mode = usize::from(self.mode.load(Relaxed));
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
        let mut costs = [0; MODES];
        for (m, c) in costs.iter_mut().enumerate() {
            *c = self.cost(m);
        }
        let next = choose(&costs[..self.modes()], windows);
        self.mode.store(next as u8, Relaxed);
    }

    /// Whether the calling filler, which has just handled events, should
    /// poll for the next one: polling is the chosen mode and no other
    /// filler polls. A true answer must be followed by [`stop`](Self::stop)
    /// when the filler stops polling.
    pub fn start(&self, already: bool) -> bool {
        if usize::from(self.mode.load(Relaxed)) != POLLING {
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

/// The mode of the next window, from each mode's cost (nanoseconds per
/// event, 0 if not measured) and the count of windows ended. The first
/// `4 * modes` windows run each mode twice in a row (sleeping, sleeping,
/// polling, polling, ...), twice over (the first of each pair unmeasured:
/// it starts the clock or follows a switch); then the cheapest mode runs,
/// except two windows in [`EXPLORE_EVERY`], which run the other modes in
/// turn (a mode over twice as slow as the best, one turn in
/// `EXPLORE_EVERY_FAR / EXPLORE_EVERY` of its own), so that a change in the
/// machine's load is seen.
fn choose(cost: &[u64], windows: u64) -> usize {
    let n = cost.len() as u64;
    if windows < 4 * n || cost.contains(&0) {
        return ((windows / 2) % n) as usize;
    }
    let best = (0..cost.len()).min_by_key(|&m| cost[m]).unwrap_or(0);
    if windows % EXPLORE_EVERY >= 2 {
        return best;
    }
    let turn = windows / EXPLORE_EVERY;
    // The k-th of the modes other than the best, k taking turns.
    let k = (turn % (n - 1)) as usize;
    let other = (0..cost.len())
        .filter(|&m| m != best)
        .nth(k)
        .unwrap_or(best);
    let far = cost[other] > 2 * cost[best];
    let rounds = turn / (n - 1);
    if far && !rounds.is_multiple_of(EXPLORE_EVERY_FAR / EXPLORE_EVERY) {
        best
    } else {
        other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_is_measured_twice_then_the_cheaper_runs_and_the_other_is_retried() {
        let learning: Vec<usize> = (0..8).map(|w| choose(&[0, 0], w)).collect();
        assert_eq!(
            learning,
            [0, 0, 1, 1, 0, 0, 1, 1],
            "windows 1 to 8: sleeping twice, polling twice, and again"
        );
        assert_eq!(
            choose(&[40_000, 25_000], 8),
            POLLING,
            "polling is cheaper here"
        );
        assert_eq!(
            choose(&[10_000, 11_000], 8),
            SLEEPING,
            "sleeping is cheaper here"
        );
        assert_eq!(
            choose(&[40_000, 25_000], 64),
            SLEEPING,
            "two windows in 64 retry"
        );
        assert_eq!(choose(&[40_000, 25_000], 65), SLEEPING);
        assert_eq!(choose(&[40_000, 25_000], 66), POLLING);
        assert_eq!(choose(&[10_000, 11_000], 128), POLLING);
        assert_eq!(
            choose(&[10_000, 31_000], 128),
            SLEEPING,
            "twice as slow: rarer"
        );
        assert_eq!(choose(&[10_000, 31_000], 256), POLLING);
    }

    #[test]
    fn with_pinning_each_of_three_modes_is_measured_and_the_others_take_turns() {
        let learning: Vec<usize> = (0..12).map(|w| choose(&[0, 0, 0], w)).collect();
        assert_eq!(learning, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        // Pinned is cheapest: it runs.
        let cost = [30_000, 28_000, 9_000];
        assert_eq!(choose(&cost, 12), PINNED);
        assert_eq!(choose(&cost, 63), PINNED);
        // Both others are over twice as slow: each retried one turn in
        // four of its own (turns of 64 windows, the two taking turns).
        assert_eq!(choose(&cost, 256), PINNED, "not their turn");
        assert_eq!(choose(&cost, 512), SLEEPING);
        assert_eq!(choose(&cost, 576), POLLING);
        assert_eq!(choose(&cost, 640), PINNED);
        let near = [10_000, 30_000, 9_000];
        assert_eq!(choose(&near, 128), SLEEPING, "within twice: every turn");
        assert_eq!(choose(&near, 192), PINNED, "polling is far: rarer");
        assert_eq!(choose(&near, 576), POLLING);
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
        assert!(!t.pinned(), "not a mode without set_pinnable");
        assert_eq!(
            usize::from(t.mode.load(Relaxed)),
            POLLING,
            "polling runs next"
        );
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
        assert_eq!(
            usize::from(t.mode.load(Relaxed)),
            SLEEPING,
            "sleeping is measured again"
        );
        assert!(!t.start(false), "no filler polls while sleeping is chosen");
        // A window far longer than IDLE_WINDOW is not measured.
        window(0);
        let before = [t.cost(0), t.cost(1)];
        window(IDLE_WINDOW.as_millis() as u64 + 5);
        assert_eq!(before, [t.cost(0), t.cost(1)]);
    }
}
