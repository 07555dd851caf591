//! The fault-latency histogram: lock-free, log2-scaled buckets of
//! nanoseconds, one per runtime ([`Stats::fault_latency`](crate::Stats::fault_latency)).
//!
//! A fault's latency is the time from the filler's `read(2)` of its event
//! to the end of its handling: the page filled or made writable and the
//! thread woken (or, for a fault coalesced with another thread's fill,
//! queued for that fill's wake-up), and the prefetch policy consulted.
//! The time the kernel took to deliver the event is not in it (the kernel
//! stamps no time on it).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::padded::CachePadded;

/// Buckets of a [`FaultLatency`]: bucket `i` counts latencies in
/// `[2^i, 2^(i+1))` nanoseconds, except the first (`[0, 2)`) and the last
/// (`2^31` ns, about 2.1 s, and more).
pub const LATENCY_BUCKETS: usize = 32;

/// The bucket of a latency of `ns` nanoseconds.
fn bucket_of(ns: u64) -> usize {
    let log2 = 63 - (ns | 1).leading_zeros() as usize;
    log2.min(LATENCY_BUCKETS - 1)
}

/// The recording side: one relaxed atomic add to a bucket and one to the
/// sum, from any number of threads at once. Each bucket has its own cache
/// line, so fillers recording different latencies do not share one.
#[derive(Debug, Default)]
pub(crate) struct LatencyHistogram {
    buckets: [CachePadded<AtomicU64>; LATENCY_BUCKETS],
    sum_ns: CachePadded<AtomicU64>,
}

impl LatencyHistogram {
    /// Counts one latency.
    pub(crate) fn record(&self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// The counts now (each bucket read once; recordings made meanwhile
    /// may be in some buckets and not in the sum, or the reverse).
    pub(crate) fn snapshot(&self) -> FaultLatency {
        FaultLatency {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Relaxed)),
            sum_ns: self.sum_ns.load(Relaxed),
        }
    }
}

/// A snapshot of a runtime's fault-latency histogram (see the module
/// [`histogram`](crate::histogram) for what a latency measures).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultLatency {
    /// `buckets[i]`: faults whose latency was in
    /// [`FaultLatency::bucket_range(i)`](FaultLatency::bucket_range).
    pub buckets: [u64; LATENCY_BUCKETS],
    /// The latencies' sum in nanoseconds.
    pub sum_ns: u64,
}

impl FaultLatency {
    /// Faults counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The nanoseconds bucket `i` covers: `[lo, hi)`, `hi` `u64::MAX` for
    /// the last bucket. Panics if `i >= LATENCY_BUCKETS`.
    pub fn bucket_range(i: usize) -> (u64, u64) {
        assert!(i < LATENCY_BUCKETS, "bucket {i} of {LATENCY_BUCKETS}");
        let lo = if i == 0 { 0 } else { 1u64 << i };
        let hi = if i == LATENCY_BUCKETS - 1 {
            u64::MAX
        } else {
            1u64 << (i + 1)
        };
        (lo, hi)
    }

    /// The mean latency, or `None` with no fault counted.
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| Duration::from_nanos(self.sum_ns / n))
    }

    /// An upper bound of the `q` quantile (`0.5`: the median, `0.99`): the
    /// upper end of the bucket holding it, so within a factor of two of the
    /// true value (the last bucket's lower end, `2^31` ns, for latencies
    /// beyond it). `None` with no fault counted; `q` is clamped to
    /// `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // The rank of the quantile, from 1.
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = Self::bucket_range(i);
                let bound = if hi == u64::MAX { lo } else { hi };
                return Some(Duration::from_nanos(bound));
            }
        }
        None
    }
}

impl std::fmt::Display for FaultLatency {
    /// `12 faults: mean 3.1µs, p50 ≤ 4.096µs, p99 ≤ 65.536µs, max ≤ 131.072µs`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.count();
        let (Some(mean), Some(p50), Some(p99), Some(max)) = (
            self.mean(),
            self.quantile(0.5),
            self.quantile(0.99),
            self.quantile(1.0),
        ) else {
            return write!(f, "no faults");
        };
        write!(
            f,
            "{n} faults: mean {mean:.1?}, p50 \u{2264} {p50:?}, p99 \u{2264} {p99:?}, max \u{2264} {max:?}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 1);
        assert_eq!(bucket_of(4), 2);
        assert_eq!(bucket_of(1023), 9);
        assert_eq!(bucket_of(1024), 10);
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
        for i in 0..LATENCY_BUCKETS {
            let (lo, hi) = FaultLatency::bucket_range(i);
            assert_eq!(bucket_of(lo), i);
            if hi != u64::MAX {
                assert_eq!(bucket_of(hi - 1), i);
                assert_eq!(bucket_of(hi), i + 1);
            }
        }
    }

    #[test]
    fn quantiles_bound_the_recorded_latencies() {
        let h = LatencyHistogram::default();
        assert_eq!(h.snapshot().quantile(0.5), None);
        assert_eq!(h.snapshot().to_string(), "no faults");
        // 90 fast faults (1 µs) and 10 slow ones (1 ms).
        for _ in 0..90 {
            h.record(Duration::from_micros(1));
        }
        for _ in 0..10 {
            h.record(Duration::from_millis(1));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.buckets[bucket_of(1_000)], 90);
        assert_eq!(s.buckets[bucket_of(1_000_000)], 10);
        assert_eq!(s.sum_ns, 90 * 1_000 + 10 * 1_000_000);
        assert_eq!(s.mean(), Some(Duration::from_nanos(100_900)));
        // 1 µs lies in [512, 1024) ns; 1 ms in [2^19, 2^20) ns.
        assert_eq!(s.quantile(0.5), Some(Duration::from_nanos(1024)));
        assert_eq!(s.quantile(0.9), Some(Duration::from_nanos(1024)));
        assert_eq!(s.quantile(0.91), Some(Duration::from_nanos(1 << 20)));
        assert_eq!(s.quantile(1.0), Some(Duration::from_nanos(1 << 20)));
        let text = s.to_string();
        assert!(
            text.starts_with("100 faults: mean 100.9µs, p50 ≤ 1.024µs"),
            "{text}"
        );
        // Beyond the last bucket's lower end: that bound.
        h.record(Duration::from_secs(100));
        assert_eq!(
            h.snapshot().quantile(1.0),
            Some(Duration::from_nanos(1 << 31))
        );
    }

    #[test]
    fn recording_is_lock_free_and_loses_nothing_across_threads() {
        let h = LatencyHistogram::default();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        h.record(Duration::from_nanos((t + 1) * 100 + i % 7));
                    }
                });
            }
        });
        assert_eq!(h.snapshot().count(), 40_000);
    }
}
