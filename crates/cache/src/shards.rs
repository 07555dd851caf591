//! Per-shard state of a policy, each shard behind its own mutex, and the
//! round-robin walk that takes victims from them in batches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::PageKey;

impl PageKey {
    /// The shard of `shards` (a power of two) that holds this key.
    pub(crate) fn shard(&self, shards: usize) -> usize {
        // Fibonacci hashing spreads consecutive pages over the shards.
        let h = (self.region.rotate_left(32) ^ self.index).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as usize & (shards - 1)
    }
}

/// A policy's state split over shards by page key, so that the fault path
/// takes one short lock of one shard.
pub(crate) struct Sharded<T> {
    shards: Box<[Mutex<T>]>,
    cursor: AtomicUsize,
}

impl<T> Sharded<T> {
    /// Four shards per CPU (a power of two, at most 256), each `make()`.
    pub fn new(make: impl FnMut() -> T) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self::with_shards((cpus * 4).next_power_of_two().min(256), make)
    }

    /// `n` shards (rounded up to a power of two).
    pub fn with_shards(n: usize, mut make: impl FnMut() -> T) -> Self {
        let n = n.max(1).next_power_of_two();
        Sharded {
            shards: (0..n).map(|_| Mutex::new(make())).collect(),
            cursor: AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.shards.len()
    }

    pub fn lock(&self, i: usize) -> MutexGuard<'_, T> {
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shard holding `key`, locked.
    pub fn lock_key(&self, key: PageKey) -> MutexGuard<'_, T> {
        self.lock(key.shard(self.shards.len()))
    }

    /// Calls `f` on every shard in turn.
    pub fn for_each(&self, mut f: impl FnMut(&mut T)) {
        for i in 0..self.shards.len() {
            f(&mut self.lock(i));
        }
    }

    /// Sums `f` over the shards.
    pub fn sum(&self, f: impl Fn(&T) -> usize) -> usize {
        (0..self.shards.len()).map(|i| f(&self.lock(i))).sum()
    }

    /// Visits shards round robin; `pick` takes up to the given number of
    /// victims from one shard and returns how many it took. Stops at `max`
    /// or when a whole round finds nothing.
    pub fn select(&self, max: usize, mut pick: impl FnMut(&mut T, usize) -> usize) {
        let n = self.shards.len();
        let mut found = 0;
        let mut idle_rounds = 0;
        // Take a few victims per shard per visit, so a batch spreads over
        // shards (and regions) instead of draining one queue.
        let per_visit = (max / n).clamp(8, 64);
        while found < max && idle_rounds < n {
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
            let got = pick(&mut self.lock(i), per_visit.min(max - found));
            found += got;
            if got == 0 {
                idle_rounds += 1;
            } else {
                idle_rounds = 0;
            }
        }
    }
}
