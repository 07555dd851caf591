//! 2Q: a scan-resistant policy that works on miss history alone.

use crate::lists::{Lists, Then};
use crate::shards::Sharded;
use crate::{EvictionPolicy, PageKey, PageOracle, Touch};

/// Pages filled once: a FIFO queue.
const A1IN: u8 = 0;
/// Pages missed again while remembered in A1out: LRU by observed use.
const AM: u8 = 1;
/// Keys of pages evicted from A1in (ghosts: no data, just the key).
const A1OUT: u8 = 2;

/// The sizes of [`TwoQ`]'s queues, as percentages of the resident pages
/// the policy tracks (per shard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwoQConfig {
    /// A1in's share of the resident pages: victims come from A1in while it
    /// holds more than this, from Am otherwise. The 2Q paper's Kin: 25.
    pub in_percent: u32,
    /// How many evicted keys A1out remembers, in percent of the resident
    /// pages. A page that misses again while remembered goes to Am. The
    /// 2Q paper's Kout is 50; umio's default is 200, because a miss is the
    /// only sign of reuse it sees (no hits): the longer A1out, the sooner a
    /// hot page that a running scan keeps evicting is caught missing again.
    /// A1out much longer than the scan's period would promote the scan's
    /// pages too. It costs about 40 bytes per remembered key.
    pub ghost_percent: u32,
}

impl Default for TwoQConfig {
    fn default() -> Self {
        TwoQConfig {
            in_percent: 25,
            ghost_percent: 200,
        }
    }
}

/// 2Q (Johnson and Shasha, VLDB 1994), fed with the signals umio has.
///
/// - A page filled on a miss goes to **A1in**, a FIFO queue. A page filled
///   by prefetch goes there too, whatever its history.
/// - A page evicted from A1in leaves its key in **A1out**, a bounded FIFO
///   of ghosts.
/// - A page that misses while its key is in A1out was needed again soon
///   after it was evicted: it goes to **Am**, ordered by the last use umio
///   observed (fill, first write, coalesced fault).
/// - Victims come from the front of A1in while A1in holds more than its
///   share of the resident pages ([`TwoQConfig::in_percent`]), from the
///   front of Am only once no shard's A1in does. Among the first entries
///   looked at, clean pages go before dirty ones.
///
/// A scan's pages each miss once: they pass through A1in and A1out and
/// never reach Am, so a scan evicts other scan pages and pages used once,
/// not the working set in Am. A page of the working set reaches Am on its
/// first miss after an eviction, if that comes before A1out forgets it
/// ([`TwoQConfig::ghost_percent`]).
///
/// What no policy fed with misses alone can do: tell a hot page that is
/// evicted and missed once per scan apart from a scan page. If the working
/// set is used only between scans (never while one runs), each hot page
/// misses once per scan, exactly as each scan page does, and 2Q behaves
/// like FIFO (no worse). The scan that 2Q resists is one that runs while
/// the working set is in use: then hot pages miss again within A1out's
/// memory and scan pages do not.
///
/// State is per shard (four shards per CPU), each shard its own small 2Q
/// behind its own mutex.
///
/// ```
/// use umio_cache::{EvictionPolicy, PolicyKind, TwoQ, TwoQConfig};
/// let q = TwoQ::with_config(TwoQConfig { in_percent: 25, ghost_percent: 400 });
/// assert_eq!(q.name(), "2q");
/// assert_eq!(PolicyKind::from_name("2q").unwrap().build().name(), "2q");
/// ```
pub struct TwoQ {
    cfg: TwoQConfig,
    shards: Sharded<Lists<3>>,
}

impl TwoQ {
    /// 2Q with the default queue sizes.
    pub fn new() -> Self {
        Self::with_config(TwoQConfig::default())
    }

    /// 2Q with the given queue sizes.
    pub fn with_config(cfg: TwoQConfig) -> Self {
        TwoQ {
            cfg,
            shards: Sharded::new(Lists::new),
        }
    }

    /// 2Q with the given queue sizes over `n` shards (a power of two).
    pub(crate) fn with_shards(cfg: TwoQConfig, n: usize) -> Self {
        TwoQ {
            cfg,
            shards: Sharded::with_shards(n, Lists::new),
        }
    }

    /// Pages in A1in, Am and A1out now (A1out holds keys only).
    pub fn queue_lengths(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        self.shards.for_each(|s| {
            t.0 += s.len(A1IN);
            t.1 += s.len(AM);
            t.2 += s.len(A1OUT);
        });
        t
    }

    /// Each shard's share of A1in and of A1out, in keys, from the resident
    /// pages of all shards: shares computed per shard would let a shard
    /// that happens to hold more of Am keep a longer A1in and A1out, until
    /// its A1out covers a whole scan and promotes the scan's pages.
    fn shares(&self) -> Shares {
        let n = self.shards.len();
        let resident = self.tracked();
        Shares {
            a1in: (resident * self.cfg.in_percent as usize / 100 / n).max(1),
            ghosts: (resident * self.cfg.ghost_percent as usize / 100 / n).max(16),
        }
    }

    /// Takes up to `want` victims from one shard's A1in beyond its share
    /// (or from A1in at all if Am is empty).
    fn take_from_a1in(
        &self,
        s: &mut Lists<3>,
        shares: Shares,
        want: usize,
        oracle: &dyn PageOracle,
        out: &mut Vec<PageKey>,
    ) -> usize {
        let excess = if s.len(AM) == 0 {
            s.len(A1IN)
        } else {
            s.len(A1IN).saturating_sub(shares.a1in)
        };
        let n = s.take(A1IN, want.min(excess), Then::MoveTo(A1OUT), oracle, out);
        s.trim(A1OUT, shares.ghosts);
        n
    }

    /// Takes up to `want` victims from one shard, from Am first.
    fn take_any(
        &self,
        s: &mut Lists<3>,
        shares: Shares,
        want: usize,
        oracle: &dyn PageOracle,
        out: &mut Vec<PageKey>,
    ) -> usize {
        let mut n = s.take(AM, want, Then::Forget, oracle, out);
        if n < want {
            n += s.take(A1IN, want - n, Then::MoveTo(A1OUT), oracle, out);
        }
        s.trim(A1OUT, shares.ghosts);
        n
    }
}

#[derive(Clone, Copy)]
struct Shares {
    a1in: usize,
    ghosts: usize,
}

impl Default for TwoQ {
    fn default() -> Self {
        Self::new()
    }
}

impl EvictionPolicy for TwoQ {
    fn name(&self) -> &'static str {
        "2q"
    }
    fn inserted(&self, key: PageKey) {
        let mut s = self.shards.lock_key(key);
        match s.list_of(key) {
            // Missed again soon after its eviction: part of the working set.
            Some(A1OUT) => s.push_back(AM, key),
            // Already tracked (filled again after a DontNeed, or unpinned).
            Some(_) => {}
            None => s.push_back(A1IN, key),
        }
    }
    fn prefetched(&self, key: PageKey) {
        let mut s = self.shards.lock_key(key);
        match s.list_of(key) {
            // Nobody asked for it: no sign of reuse, and a repeated scan's
            // read-ahead must not promote its pages.
            Some(A1OUT) | None => s.push_back(A1IN, key),
            Some(_) => {}
        }
    }
    fn touched(&self, key: PageKey, _touch: Touch) {
        let mut s = self.shards.lock_key(key);
        // A use while in A1in is correlated with the fill (read, then
        // write the same record): 2Q ignores it.
        if s.list_of(key) == Some(AM) {
            s.push_back(AM, key);
        }
    }
    fn restore(&self, key: PageKey) {
        let mut s = self.shards.lock_key(key);
        match s.list_of(key) {
            Some(A1IN | AM) => {}
            _ => s.push_back(A1IN, key),
        }
    }
    fn reserve(&self, pages: usize) {
        // Resident pages and the remembered keys of evicted ones (A1out),
        // twice over for stale entries, spread over the shards.
        let per = (2 * pages).div_ceil(self.shards.len()) * 5 / 4 + 64;
        self.shards.for_each(|s| s.reserve(per));
    }
    fn forget_region(&self, region: u64) {
        self.shards.for_each(|s| s.forget_region(region));
    }
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        // Am pages go only once no shard's A1in holds more than its share:
        // a batch that drains one shard's A1in takes from the others' next.
        let shares = self.shares();
        let before = out.len();
        self.shards.select(max, |s, want| {
            self.take_from_a1in(s, shares, want, oracle, out)
        });
        let got = out.len() - before;
        if got < max {
            self.shards.select(max - got, |s, want| {
                self.take_any(s, shares, want, oracle, out)
            });
        }
    }
    fn tracked(&self) -> usize {
        self.shards.sum(|s| s.len(A1IN) + s.len(AM))
    }
    fn purge(&self, oracle: &dyn PageOracle) {
        self.shards.for_each(|s| {
            s.purge(A1IN, oracle);
            s.purge(AM, oracle);
        });
    }
}
