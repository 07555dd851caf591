use crate::sync::{AtomicU64, Ordering};

/// The bound on the bytes the cache holds, shared by every region of a
/// runtime, with the watermarks that drive background eviction.
///
/// Accounting is one atomic counter; [`FrameCredit`] lets a thread reserve
/// in batches so that most fills touch only thread-local state.
#[derive(Debug)]
pub struct FrameBudget {
    limit: AtomicU64,
    high: AtomicU64,
    low: AtomicU64,
    high_percent: u8,
    low_percent: u8,
    used: AtomicU64,
}

impl FrameBudget {
    /// A budget of `limit` bytes. Background eviction starts above
    /// `high_percent` of it and stops below `low_percent`.
    ///
    /// # Panics
    /// If `low_percent > high_percent` or `high_percent > 100`; callers
    /// validate user input before.
    pub fn new(limit: u64, high_percent: u8, low_percent: u8) -> FrameBudget {
        assert!(low_percent <= high_percent && high_percent <= 100);
        FrameBudget {
            limit: AtomicU64::new(limit),
            high: AtomicU64::new(percent_of(limit, high_percent)),
            low: AtomicU64::new(percent_of(limit, low_percent)),
            high_percent,
            low_percent,
            used: AtomicU64::new(0),
        }
    }

    /// Changes the limit (and the watermarks with it) at run time. Growing
    /// makes room at once; after shrinking, the bytes used may exceed the
    /// new limit until eviction brings them down: reservations fail until
    /// then, and [`above_high`](FrameBudget::above_high) says so.
    pub fn set_limit(&self, limit: u64) {
        // Watermarks first when shrinking, limit first when growing, so
        // that a reader never sees a watermark above the limit.
        let (high, low) = (
            percent_of(limit, self.high_percent),
            percent_of(limit, self.low_percent),
        );
        if limit < self.limit() {
            self.low.store(low, Ordering::Release);
            self.high.store(high, Ordering::Release);
            self.limit.store(limit, Ordering::Release);
        } else {
            self.limit.store(limit, Ordering::Release);
            self.high.store(high, Ordering::Release);
            self.low.store(low, Ordering::Release);
        }
    }

    /// Reserves `bytes` if that keeps the total within the limit.
    #[inline]
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let limit = self.limit.load(Ordering::Acquire);
            let Some(new) = used.checked_add(bytes).filter(|&n| n <= limit) else {
                return false;
            };
            match self
                .used
                .compare_exchange_weak(used, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// Counts `bytes` as reserved even past the limit: for bytes already
    /// resident that move into this budget from another one (the caller
    /// evicts down to the limit afterwards).
    #[inline]
    pub fn charge(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Returns `bytes` to the budget.
    #[inline]
    pub fn release(&self, bytes: u64) {
        let prev = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "released more than reserved");
    }

    /// Bytes reserved now (resident pages, pages being filled, and credit
    /// held by threads).
    #[inline]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Use above which background eviction should run.
    pub fn high_water(&self) -> u64 {
        self.high.load(Ordering::Acquire)
    }

    /// Use at which background eviction may stop.
    pub fn low_water(&self) -> u64 {
        self.low.load(Ordering::Acquire)
    }

    /// Whether background eviction should run.
    #[inline]
    pub fn above_high(&self) -> bool {
        self.used() > self.high_water()
    }

    /// How many bytes eviction must free to reach the low watermark.
    pub fn excess_over_low(&self) -> u64 {
        self.used().saturating_sub(self.low_water())
    }
}

/// `percent` % of `limit`, rounded down.
fn percent_of(limit: u64, percent: u8) -> u64 {
    (limit as u128 * percent as u128 / 100) as u64
}

/// Budget a thread has reserved ahead and not yet spent: fills take from it
/// without touching the shared counter, and it is refilled in batches.
///
/// Return unspent credit with [`release_all`](FrameCredit::release_all)
/// before the thread exits or blocks for long.
#[derive(Debug, Default)]
pub struct FrameCredit {
    held: u64,
}

impl FrameCredit {
    /// Takes `bytes` from the thread's credit, refilling it from `budget`
    /// with up to `batch` bytes at once. Returns false when the budget is
    /// exhausted (eviction must free something first).
    #[inline]
    pub fn take(&mut self, budget: &FrameBudget, bytes: u64, batch: u64) -> bool {
        if self.held >= bytes {
            self.held -= bytes;
            return true;
        }
        let want = bytes.max(batch) - self.held;
        if budget.try_reserve(want) {
            self.held += want;
            self.held -= bytes;
            return true;
        }
        // Near the limit: reserve exactly what is missing, no batch.
        if budget.try_reserve(bytes - self.held) {
            self.held = 0;
            return true;
        }
        false
    }

    /// Gives back all unspent credit.
    pub fn release_all(&mut self, budget: &FrameBudget) {
        if self.held > 0 {
            budget.release(self.held);
            self.held = 0;
        }
    }

    /// Unspent credit in bytes.
    pub fn held(&self) -> u64 {
        self.held
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn never_exceeds_limit() {
        let b = FrameBudget::new(10_000, 90, 70);
        assert!(b.try_reserve(6000));
        assert!(!b.try_reserve(6000));
        assert!(b.try_reserve(4000));
        assert_eq!(b.used(), 10_000);
        assert!(b.above_high());
        b.release(6000);
        assert_eq!(b.excess_over_low(), 0);
        assert!(!b.try_reserve(u64::MAX), "overflow is refused, not wrapped");
    }

    #[test]
    fn set_limit_moves_the_bound_and_the_watermarks() {
        let b = FrameBudget::new(10_000, 90, 70);
        assert!(b.try_reserve(8000));
        b.set_limit(4000);
        assert_eq!(
            (b.limit(), b.high_water(), b.low_water()),
            (4000, 3600, 2800)
        );
        assert!(b.above_high(), "over the new bound until eviction");
        assert!(!b.try_reserve(1), "no reservation while over the bound");
        assert_eq!(b.excess_over_low(), 8000 - 2800);
        b.release(5000);
        assert!(b.try_reserve(1000));
        assert!(!b.try_reserve(1));
        b.set_limit(20_000);
        assert_eq!((b.high_water(), b.low_water()), (18_000, 14_000));
        assert!(b.try_reserve(16_000));
        assert_eq!(b.used(), 20_000);
    }

    #[test]
    fn credit_batches_and_falls_back_to_exact() {
        let b = FrameBudget::new(20_000, 90, 70);
        let mut c = FrameCredit::default();
        assert!(c.take(&b, 4096, 16384));
        assert_eq!(b.used(), 16384);
        assert_eq!(c.held(), 16384 - 4096);
        for _ in 0..3 {
            assert!(c.take(&b, 4096, 16384));
        }
        assert_eq!(c.held(), 0);
        // 3616 bytes left in the budget: a batch does not fit, one page does not either.
        assert!(!c.take(&b, 4096, 16384));
        assert!(c.take(&b, 3616, 16384));
        assert_eq!(b.used(), 20_000);
        c.release_all(&b);
        assert_eq!(b.used(), 20_000);
    }

    #[test]
    fn concurrent_reservations_stay_within_limit() {
        let b = std::sync::Arc::new(FrameBudget::new(4096 * 100, 90, 70));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut got = 0;
                    for _ in 0..10_000 {
                        if b.try_reserve(4096) {
                            got += 1;
                            assert!(b.used() <= b.limit());
                            b.release(4096);
                        }
                    }
                    got
                })
            })
            .collect();
        let total: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(total > 0);
        assert_eq!(b.used(), 0);
    }
}
