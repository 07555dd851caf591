//! LRU by the last use umio observes.

use crate::lists::{Lists, Then};
use crate::shards::Sharded;
use crate::{EvictionPolicy, PageKey, PageOracle, Touch};

const RESIDENT: u8 = 0;

/// Least recently used, approximated by what umio can see: a page moves to
/// the most-recent end of its shard's list when it is filled, written for
/// the first time (write-protect fault) or faulted on while busy
/// (coalesced fault). Reads of a resident page are invisible (see the
/// [crate docs](crate#what-recency-umio-can-observe)), so for a read-only working set
/// this is FIFO; a page rewritten after each write-back, or wanted by
/// several threads at once, is kept longer than under FIFO.
///
/// Victims come from the least-recent end, clean pages before dirty ones
/// among the first entries looked at (a dirty victim costs a store write).
/// Each page has one entry: no stale or duplicate entries to purge.
///
/// ```
/// use umio_cache::{EvictionPolicy, Lru, PageKey, Touch};
/// let lru = Lru::new();
/// lru.inserted(PageKey { region: 1, index: 0 });
/// lru.touched(PageKey { region: 1, index: 0 }, Touch::FirstWrite);
/// assert_eq!(lru.tracked(), 1);
/// ```
pub struct Lru {
    shards: Sharded<Lists<1>>,
}

impl Lru {
    /// An empty policy.
    pub fn new() -> Self {
        Lru {
            shards: Sharded::new(Lists::new),
        }
    }

    /// An empty policy over `n` shards (a power of two).
    pub(crate) fn with_shards(n: usize) -> Self {
        Lru {
            shards: Sharded::with_shards(n, Lists::new),
        }
    }
}

impl Default for Lru {
    fn default() -> Self {
        Self::new()
    }
}

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn inserted(&self, key: PageKey) {
        self.shards.lock_key(key).push_back(RESIDENT, key);
    }
    fn touched(&self, key: PageKey, _touch: Touch) {
        let mut s = self.shards.lock_key(key);
        if s.list_of(key).is_some() {
            s.push_back(RESIDENT, key);
        }
    }
    fn forget_region(&self, region: u64) {
        self.shards.for_each(|s| s.forget_region(region));
    }
    fn reserve(&self, pages: usize) {
        let per = (2 * pages).div_ceil(self.shards.len()) * 5 / 4 + 64;
        self.shards.for_each(|s| s.reserve(per));
    }
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        self.shards.select(max, |s, want| {
            s.take(RESIDENT, want, Then::Forget, oracle, out)
        });
    }
    fn tracked(&self) -> usize {
        self.shards.sum(|s| s.len(RESIDENT))
    }
    fn purge(&self, oracle: &dyn PageOracle) {
        self.shards.for_each(|s| s.purge(RESIDENT, oracle));
    }
}
