use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::{IoRequest, Store, StoreError, StoreOp};

/// When a [`FaultyStore`] fails an operation.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum FaultTrigger {
    /// Never: the operation goes through.
    #[default]
    Never,
    /// Always.
    Always,
    /// Every `n`th call of this kind (the `n`th, `2n`th, ...), counted from
    /// when the trigger was set.
    EveryNth(u64),
    /// Calls whose byte range overlaps this range of store offsets.
    Offsets(Range<u64>),
    /// Each call with this probability, from a seeded generator, so that a
    /// run can be repeated exactly.
    Probability {
        /// Chance of failure, 0.0 to 1.0.
        p: f64,
        /// Seed of the generator.
        seed: u64,
    },
}

#[derive(Debug)]
struct Rule {
    trigger: FaultTrigger,
    errno: i32,
    calls: u64,
    rng: u64,
}

impl Rule {
    fn new(trigger: FaultTrigger, errno: i32) -> Rule {
        let rng = match &trigger {
            FaultTrigger::Probability { seed, .. } => seed | 1,
            _ => 1,
        };
        Rule {
            trigger,
            errno,
            calls: 0,
            rng,
        }
    }

    fn fires(&mut self, offset: u64, len: u64) -> bool {
        self.calls += 1;
        match &self.trigger {
            FaultTrigger::Never => false,
            FaultTrigger::Always => true,
            FaultTrigger::EveryNth(n) => *n > 0 && self.calls.is_multiple_of(*n),
            FaultTrigger::Offsets(r) => {
                offset < r.end && r.start < offset.saturating_add(len.max(1))
            }
            FaultTrigger::Probability { p, .. } => {
                // xorshift64*: small, seeded, good enough for a schedule.
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
                (x as f64 / (1u64 << 53) as f64) < *p
            }
        }
    }
}

/// Wraps a store and fails its reads, writes or syncs on a schedule, for
/// reliability tests: every Nth call, by offset, or at random with a seed.
/// The schedule can be changed while the store is in use (a failing device
/// that recovers).
///
/// ```
/// use umio_backends::{FaultTrigger, FaultyStore, MemoryStore, Store, StoreOp};
/// let s = FaultyStore::new(MemoryStore::new(vec![0; 8192]));
/// s.fail_reads(FaultTrigger::Offsets(4096..8192), libc::EIO);
/// let mut b = [0u8; 16];
/// assert!(s.read_at(0, &mut b).is_ok());
/// let e = s.read_at(4096, &mut b).unwrap_err();
/// assert_eq!((e.op, e.offset, e.errno), (StoreOp::Read, 4096, libc::EIO));
/// s.fail_reads(FaultTrigger::Never, 0);
/// assert!(s.read_at(4096, &mut b).is_ok());
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    reads: Mutex<Rule>,
    writes: Mutex<Rule>,
    syncs: Mutex<Rule>,
    injected: AtomicU64,
}

impl<S: Store> FaultyStore<S> {
    /// Fails the open requests of `batch` that their rule picks.
    fn fail_picked(&self, batch: &mut [IoRequest<'_>]) {
        for req in batch.iter_mut().filter(|r| r.result().is_none()) {
            let (rule, op) = if req.is_write() {
                (&self.writes, StoreOp::Write)
            } else {
                (&self.reads, StoreOp::Read)
            };
            if let Err(e) = self.check(rule, op, req.offset(), req.len() as u64) {
                req.complete(Err(e));
            }
        }
    }

    /// Wraps `inner`; nothing fails until a trigger is set.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            reads: Mutex::new(Rule::new(FaultTrigger::Never, libc::EIO)),
            writes: Mutex::new(Rule::new(FaultTrigger::Never, libc::EIO)),
            syncs: Mutex::new(Rule::new(FaultTrigger::Never, libc::EIO)),
            injected: AtomicU64::new(0),
        }
    }

    /// Fails reads on `trigger` with `errno`.
    pub fn fail_reads(&self, trigger: FaultTrigger, errno: i32) {
        *lock(&self.reads) = Rule::new(trigger, errno);
    }

    /// Fails writes on `trigger` with `errno`.
    pub fn fail_writes(&self, trigger: FaultTrigger, errno: i32) {
        *lock(&self.writes) = Rule::new(trigger, errno);
    }

    /// Fails syncs on `trigger` with `errno`.
    pub fn fail_syncs(&self, trigger: FaultTrigger, errno: i32) {
        *lock(&self.syncs) = Rule::new(trigger, errno);
    }

    /// Failures injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Relaxed)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn check(
        &self,
        rule: &Mutex<Rule>,
        op: StoreOp,
        offset: u64,
        len: u64,
    ) -> Result<(), StoreError> {
        let mut r = lock(rule);
        if r.fires(offset, len) {
            self.injected.fetch_add(1, Relaxed);
            return Err(StoreError::new(op, offset, r.errno));
        }
        Ok(())
    }
}

fn lock(m: &Mutex<Rule>) -> std::sync::MutexGuard<'_, Rule> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: Store> Store for FaultyStore<S> {
    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        self.check(&self.reads, StoreOp::Read, offset, buf.len() as u64)?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        self.check(&self.writes, StoreOp::Write, offset, buf.len() as u64)?;
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.check(&self.syncs, StoreOp::Sync, 0, 0)?;
        self.inner.sync()
    }
    fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    /// Fails the requests their rule picks, then gives the others to the
    /// wrapped store as one batch.
    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        self.fail_picked(batch);
        self.inner.submit(batch);
    }
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        self.fail_picked(batch);
        self.inner.submit_each(batch, done);
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        self.inner.punch_hole(offset, len)
    }
    fn is_private_copy(&self) -> bool {
        self.inner.is_private_copy()
    }
    // `as_mapped` stays `None`: every read passes through the rules.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn every_nth_counts_from_when_it_is_set() {
        let s = FaultyStore::new(MemoryStore::new(vec![0; 100]));
        s.fail_writes(FaultTrigger::EveryNth(3), libc::ENOSPC);
        let results: Vec<bool> = (0..7).map(|i| s.write_at(i, b"x").is_ok()).collect();
        assert_eq!(results, [true, true, false, true, true, false, true]);
        assert_eq!(s.injected(), 2);
        let e = s.write_at(0, b"x");
        assert!(e.is_ok());
        assert_eq!(s.write_at(9, b"x").unwrap_err().errno, libc::ENOSPC);
    }

    #[test]
    fn probability_is_repeatable_and_roughly_right() {
        let run = || {
            let s = FaultyStore::new(MemoryStore::new(vec![0; 10]));
            s.fail_syncs(FaultTrigger::Probability { p: 0.25, seed: 42 }, libc::EIO);
            (0..4000).map(|_| s.sync().is_err()).collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run(), "same seed, same schedule");
        let failed = a.iter().filter(|&&f| f).count();
        assert!(
            (800..1200).contains(&failed),
            "{failed} of 4000 at p = 0.25"
        );
    }

    #[test]
    fn failed_writes_leave_the_store_unchanged() {
        let s = FaultyStore::new(MemoryStore::new(vec![1; 10]));
        s.fail_writes(FaultTrigger::Always, libc::EIO);
        let e = s.write_at(2, &[9; 3]).unwrap_err();
        assert_eq!((e.op, e.offset), (StoreOp::Write, 2));
        assert_eq!(s.inner().snapshot(), vec![1; 10]);
    }
}
