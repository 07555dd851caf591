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
///   share of the resident pages ([`TwoQConfig::in_percent`]), otherwise
///   from the front of Am. Among the first entries looked at, clean pages
///   go before dirty ones.
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

    #[cfg(test)]
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

    /// Takes up to `want` victims from one shard: from A1in while it holds
    /// more than its share, then from Am.
    fn take(
        &self,
        s: &mut Lists<3>,
        want: usize,
        oracle: &dyn PageOracle,
        out: &mut Vec<PageKey>,
    ) -> usize {
        let mut got = 0;
        while got < want {
            let resident = s.len(A1IN) + s.len(AM);
            let kin = (resident * self.cfg.in_percent as usize / 100).max(1);
            let n = if s.len(A1IN) > kin || s.len(AM) == 0 {
                let n = (want - got).min(s.len(A1IN).saturating_sub(kin).max(1));
                let n = s.take(A1IN, n, Then::MoveTo(A1OUT), oracle, out);
                if n == 0 {
                    s.take(AM, want - got, Then::Forget, oracle, out)
                } else {
                    n
                }
            } else {
                let n = s.take(AM, want - got, Then::Forget, oracle, out);
                if n == 0 {
                    s.take(A1IN, want - got, Then::MoveTo(A1OUT), oracle, out)
                } else {
                    n
                }
            };
            if n == 0 {
                break;
            }
            got += n;
        }
        let ghosts = (s.len(A1IN) + s.len(AM)) * self.cfg.ghost_percent as usize / 100;
        s.trim(A1OUT, ghosts.max(16));
        got
    }
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
    fn forget_region(&self, region: u64) {
        self.shards.for_each(|s| s.forget_region(region));
    }
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        self.shards
            .select(max, |s, want| self.take(s, want, oracle, out));
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
