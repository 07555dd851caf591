//! Eviction policies.
//!
//! See the [crate docs](crate#what-recency-umio-can-observe) for the
//! signals a policy gets.

use std::collections::VecDeque;

use crate::shards::Sharded;
use crate::{Lru, Observed, PageState, TwoQ, TwoQConfig};

/// Names one page of one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageKey {
    /// The region's id (never reused within a runtime).
    pub region: u64,
    /// The page's index within the region.
    pub index: u64,
}

/// What a policy may learn about a page it tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageProbe {
    /// The page's state now.
    pub state: Observed,
    /// Whether the page was referenced since the last probe that cleared it.
    pub referenced: bool,
    /// Whether the page is pinned: never a victim. A policy may drop its
    /// entry; core inserts the page again when it is unpinned.
    pub pinned: bool,
}

/// Core's view of the pages, given to a policy while it picks victims.
pub trait PageOracle {
    /// The page's state, clearing its referenced bit if `clear_referenced`.
    /// `None` if the page's region is gone.
    fn probe(&self, key: PageKey, clear_referenced: bool) -> Option<PageProbe>;
}

/// A use of a resident page that core observed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Touch {
    /// The first write to a clean page: a write-protect fault.
    FirstWrite = 0,
    /// A fault on a page another thread was filling or changing.
    Coalesced = 1,
}

/// Decides which resident pages to evict.
///
/// Called from fillers (on every fill) and evictors; implementations take at
/// most a short per-shard lock. A policy may track a page more than once or
/// keep entries for pages no longer resident:
/// [`select_victims`](EvictionPolicy::select_victims) skips such entries by
/// probing.
///
/// Only [`name`](EvictionPolicy::name), [`inserted`](EvictionPolicy::inserted),
/// [`forget_region`](EvictionPolicy::forget_region),
/// [`select_victims`](EvictionPolicy::select_victims) and
/// [`tracked`](EvictionPolicy::tracked) are required; the other calls
/// have defaults that reduce them to these.
///
/// Core reports a page ([`inserted`](EvictionPolicy::inserted),
/// [`prefetched`](EvictionPolicy::prefetched),
/// [`restore`](EvictionPolicy::restore)) only once it is resident and no
/// longer busy, so a policy may drop, as stale, an entry whose page it
/// finds empty, busy or not.
///
/// **[`inserted`](EvictionPolicy::inserted),
/// [`touched`](EvictionPolicy::touched),
/// [`restore`](EvictionPolicy::restore) and
/// [`select_victims`](EvictionPolicy::select_victims) may run in a signal
/// handler**: under umio-core's in-thread fault service
/// (`FaultService::InThread`) the faulting thread serves its own miss in
/// its SIGBUS handler, reclaiming space itself when the cache is full.
/// There a policy must not allocate beyond what
/// [`reserve`](EvictionPolicy::reserve) made room for, log, panic (a panic
/// in the handler aborts the process), or take a lock that the
/// application may hold while it touches mapped memory; its own short
/// locks are fine (no code holds them while touching mapped memory).
pub trait EvictionPolicy: Send + Sync + 'static {
    /// A short name for logs and stats.
    fn name(&self) -> &'static str;

    /// A page became resident because a thread missed on it (or became an
    /// eviction candidate again: unpinned, or a victim core could not
    /// evict; see [`restore`](EvictionPolicy::restore)).
    fn inserted(&self, key: PageKey);

    /// A page became resident by prefetch or read-ahead: no thread has
    /// asked for it yet. The default treats it as [`inserted`](EvictionPolicy::inserted).
    fn prefetched(&self, key: PageKey) {
        self.inserted(key);
    }

    /// Core observed a use of a resident page (see the module docs for
    /// what it can observe). Called on the fault path. The default ignores
    /// it.
    fn touched(&self, key: PageKey, touch: Touch) {
        let _ = (key, touch);
    }

    /// A page this policy returned as a victim was not evicted (it was
    /// busy when core locked it, or its write-back failed): it is resident
    /// and must be tracked again. The default calls
    /// [`inserted`](EvictionPolicy::inserted).
    fn restore(&self, key: PageKey) {
        self.inserted(key);
    }

    /// A region is gone: forget its pages.
    fn forget_region(&self, region: u64);

    /// Removes up to `max` victims and appends them to `out`. Victims must
    /// be resident and not busy when probed; the caller still checks, as
    /// the page can change right after. Core asks for batches (up to 512
    /// pages) and evicts each contiguous run of a batch with one `madvise`.
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>);

    /// Makes room for `pages` tracked pages (as many again for stale
    /// entries and remembered keys, where the policy keeps them), so that
    /// calls for that many pages allocate nothing: the in-thread fault
    /// service calls the policy from a signal handler, where allocating
    /// could deadlock. Called when the runtime starts and when its cache
    /// grows. The default does nothing (a policy that allocates on the
    /// fault path then does so in the handler).
    fn reserve(&self, pages: usize) {
        let _ = pages;
    }

    /// Number of entries tracked (resident pages plus stale entries; not
    /// the keys a policy remembers of pages it has evicted).
    fn tracked(&self) -> usize;

    /// Drops stale entries: pages no longer resident, regions gone, and
    /// duplicates. Core calls it from the evictor when
    /// [`tracked`](EvictionPolicy::tracked) exceeds twice the resident
    /// pages, which bounds the policy's memory when pages are dropped and filled again
    /// without eviction (a heap freeing and reusing memory). The default
    /// does nothing.
    fn purge(&self, oracle: &dyn PageOracle) {
        let _ = oracle;
    }
}

/// The built-in policies, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PolicyKind {
    /// First in, first out: the oldest fill is evicted first.
    Fifo,
    /// Second chance: a page referenced since the hand last passed is kept
    /// once more.
    #[default]
    Clock,
    /// Least recently used, by the last use umio observed: a fill, a first
    /// write or a coalesced fault ([`Lru`]).
    Lru,
    /// 2Q, scan-resistant: a page missed again soon after its eviction is
    /// protected from pages that miss once ([`TwoQ`]).
    TwoQ,
}

impl PolicyKind {
    /// Every built-in policy.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Lru,
        PolicyKind::TwoQ,
    ];

    /// Builds the policy.
    pub fn build(self) -> Box<dyn EvictionPolicy> {
        match self {
            PolicyKind::Fifo => Box::new(Fifo::new()),
            PolicyKind::Clock => Box::new(Clock::new()),
            PolicyKind::Lru => Box::new(Lru::new()),
            PolicyKind::TwoQ => Box::new(TwoQ::new()),
        }
    }

    /// Builds the policy with one shard, so that its order is exact: a
    /// sharded policy keeps its order within each shard and takes victims
    /// from the shards in turn, which with a few entries a shard is close
    /// to no order at all. One shard means one lock for every insert and
    /// touch: for a pool of few entries and rare inserts, such as the
    /// huge-page pool's 2 MiB ranges (one insert a promotion).
    pub fn build_unsharded(self) -> Box<dyn EvictionPolicy> {
        match self {
            PolicyKind::Fifo => Box::new(Fifo::with_shards(1)),
            PolicyKind::Clock => Box::new(Clock::with_shards(1)),
            PolicyKind::Lru => Box::new(Lru::with_shards(1)),
            PolicyKind::TwoQ => Box::new(TwoQ::with_shards(TwoQConfig::default(), 1)),
        }
    }

    /// The policy's name: `fifo`, `clock`, `lru` or `2q` (as
    /// [`EvictionPolicy::name`] and `UMIO_EVICTION` spell it).
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Fifo => "fifo",
            PolicyKind::Clock => "clock",
            PolicyKind::Lru => "lru",
            PolicyKind::TwoQ => "2q",
        }
    }

    /// The policy named `name` (any case; `twoq` is accepted for `2q`).
    ///
    /// ```
    /// use umio_cache::PolicyKind;
    /// assert_eq!(PolicyKind::from_name("2Q"), Some(PolicyKind::TwoQ));
    /// assert_eq!(PolicyKind::from_name("arc"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        let name = name.trim().to_ascii_lowercase();
        if name == "twoq" {
            return Some(PolicyKind::TwoQ);
        }
        PolicyKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A name [`FromStr`](std::str::FromStr) does not know: the error of
/// parsing a policy's name (here and in umio-core's `PrefetchKind` and
/// `PromoteKind`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being named (`"eviction policy"`).
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names known, for the message (`"fifo, clock, lru or 2q"`).
    pub expected: &'static str,
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown {} {:?} (expected {})",
            self.what, self.name, self.expected
        )
    }
}

impl std::error::Error for UnknownName {}

impl std::str::FromStr for PolicyKind {
    type Err = UnknownName;

    /// As [`PolicyKind::from_name`]:
    /// `"lru".parse::<PolicyKind>()` is `Ok(PolicyKind::Lru)`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::from_name(s).ok_or_else(|| UnknownName {
            what: "eviction policy",
            name: s.to_string(),
            expected: "fifo, clock, lru or 2q",
        })
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Queues of page keys, one per shard.
struct ShardedQueues {
    shards: Sharded<VecDeque<PageKey>>,
}

impl ShardedQueues {
    fn new() -> Self {
        ShardedQueues {
            shards: Sharded::new(VecDeque::new),
        }
    }

    fn with_shards(n: usize) -> Self {
        ShardedQueues {
            shards: Sharded::with_shards(n, VecDeque::new),
        }
    }

    fn push(&self, key: PageKey) {
        self.shards.lock_key(key).push_back(key);
    }

    /// Room for `pages` keys in all, twice over (stale entries stay until
    /// a purge, which comes at twice the pages the cache holds), spread
    /// over the shards with slack for their unevenness.
    fn reserve(&self, pages: usize) {
        let per = (2 * pages).div_ceil(self.shards.len()) * 5 / 4 + 64;
        self.shards
            .for_each(|q| q.reserve(per.saturating_sub(q.len())));
    }

    fn forget_region(&self, region: u64) {
        self.shards.for_each(|q| q.retain(|k| k.region != region));
    }

    fn len(&self) -> usize {
        self.shards.sum(|q| q.len())
    }

    fn purge(&self, oracle: &dyn PageOracle) {
        let mut seen = std::collections::HashSet::new();
        self.shards.for_each(|q| {
            seen.clear();
            q.retain(|&k| {
                let live = matches!(
                    oracle.probe(k, false),
                    Some(PageProbe {
                        state: Observed::Stable(s) | Observed::Busy(s),
                        pinned: false,
                        ..
                    }) if s != PageState::Empty
                );
                live && seen.insert(k)
            });
        });
    }

    fn select(&self, max: usize, pick: impl FnMut(&mut VecDeque<PageKey>, usize) -> usize) {
        self.shards.select(max, pick);
    }
}

/// Whether a probed page can be evicted now, should be kept in the queue,
/// or dropped from it.
enum Verdict {
    Victim,
    Keep,
    Drop,
}

fn judge(probe: Option<PageProbe>, second_chance: bool) -> Verdict {
    match probe {
        None => Verdict::Drop,
        Some(p) if p.pinned => Verdict::Drop,
        Some(p) => match p.state {
            Observed::Stable(PageState::Empty) => Verdict::Drop,
            Observed::Busy(PageState::Empty) => Verdict::Drop,
            Observed::Busy(_) => Verdict::Keep,
            Observed::Stable(_) if second_chance && p.referenced => Verdict::Keep,
            Observed::Stable(_) => Verdict::Victim,
        },
    }
}

/// A queue-ordered policy: pages in fill order, sharded; without second
/// chance it is FIFO ([`Fifo`]), with it CLOCK ([`Clock`]).
pub struct QueuePolicy<const SECOND_CHANCE: bool> {
    queues: ShardedQueues,
}

/// First in, first out: the oldest fill is evicted first.
pub type Fifo = QueuePolicy<false>;

/// CLOCK (second chance): the hand passes over pages in fill order; a page
/// referenced since the last pass has its bit cleared and is kept.
pub type Clock = QueuePolicy<true>;

impl<const SECOND_CHANCE: bool> QueuePolicy<SECOND_CHANCE> {
    /// An empty policy.
    pub fn new() -> Self {
        QueuePolicy {
            queues: ShardedQueues::new(),
        }
    }

    /// An empty policy over `n` shards (a power of two).
    pub(crate) fn with_shards(n: usize) -> Self {
        QueuePolicy {
            queues: ShardedQueues::with_shards(n),
        }
    }

    /// One visit of a shard: takes up to `want` victims from the front.
    ///
    /// The sweep looks at no more entries than the queue holds. FIFO puts
    /// busy pages back at the front, keeping their place; CLOCK puts kept
    /// pages at the back, so a page whose bit this sweep clears is taken
    /// only after the hand has passed over the other shards.
    fn sweep(
        q: &mut VecDeque<PageKey>,
        want: usize,
        oracle: &dyn PageOracle,
        out: &mut Vec<PageKey>,
    ) -> usize {
        let mut got = 0;
        let mut kept = Vec::new();
        let mut budget = q.len();
        while got < want && budget > 0 {
            budget -= 1;
            let Some(key) = q.pop_front() else { break };
            match judge(oracle.probe(key, SECOND_CHANCE), SECOND_CHANCE) {
                Verdict::Victim => {
                    out.push(key);
                    got += 1;
                }
                Verdict::Keep if SECOND_CHANCE => q.push_back(key),
                Verdict::Keep => kept.push(key),
                Verdict::Drop => {}
            }
        }
        for key in kept.into_iter().rev() {
            q.push_front(key);
        }
        got
    }
}

impl<const SECOND_CHANCE: bool> Default for QueuePolicy<SECOND_CHANCE> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const SECOND_CHANCE: bool> EvictionPolicy for QueuePolicy<SECOND_CHANCE> {
    fn name(&self) -> &'static str {
        if SECOND_CHANCE { "clock" } else { "fifo" }
    }
    fn inserted(&self, key: PageKey) {
        self.queues.push(key);
    }
    fn forget_region(&self, region: u64) {
        self.queues.forget_region(region);
    }
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        self.queues
            .select(max, |q, want| Self::sweep(q, want, oracle, out));
    }
    fn tracked(&self) -> usize {
        self.queues.len()
    }
    fn reserve(&self, pages: usize) {
        self.queues.reserve(pages);
    }
    fn purge(&self, oracle: &dyn PageOracle) {
        self.queues.purge(oracle);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn policy_kinds_parse_from_their_names() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.to_string().parse::<PolicyKind>(), Ok(kind));
        }
        assert_eq!(" LRU ".parse::<PolicyKind>(), Ok(PolicyKind::Lru));
        let e = "arc".parse::<PolicyKind>().unwrap_err();
        assert_eq!(e.name, "arc");
        assert_eq!(
            e.to_string(),
            "unknown eviction policy \"arc\" (expected fifo, clock, lru or 2q)"
        );
    }
    use crate::PageTable;

    struct OneRegion(PageTable);

    impl PageOracle for OneRegion {
        fn probe(&self, key: PageKey, clear: bool) -> Option<PageProbe> {
            if key.region != 1 {
                return None;
            }
            let i = key.index as usize;
            let referenced = if clear {
                self.0.take_referenced(i)
            } else {
                false
            };
            Some(PageProbe {
                state: self.0.get(i),
                referenced,
                pinned: self.0.is_pinned(i),
            })
        }
    }

    fn resident(n: usize) -> OneRegion {
        let t = PageTable::new(n);
        for i in 0..n {
            assert!(t.try_lock(i, PageState::Empty));
            assert!(!t.unlock(i, PageState::Clean));
        }
        OneRegion(t)
    }

    fn key(i: u64) -> PageKey {
        PageKey {
            region: 1,
            index: i,
        }
    }

    #[test]
    fn fifo_evicts_all_each_once_and_skips_busy_and_gone() {
        let o = resident(100);
        let p = Fifo::new();
        for i in 0..100 {
            p.inserted(key(i));
        }
        p.inserted(PageKey {
            region: 9,
            index: 0,
        }); // region gone
        assert!(o.0.try_lock(5, PageState::Clean)); // busy
        let mut out = Vec::new();
        p.select_victims(&o, 1000, &mut out);
        out.sort();
        let want: Vec<_> = (0..100).filter(|&i| i != 5).map(key).collect();
        assert_eq!(out, want);
        assert_eq!(p.tracked(), 1, "only the busy page stays tracked");
    }

    #[test]
    fn fifo_order_within_a_shard() {
        let o = resident(4096);
        let p = Fifo::new();
        for i in 0..4096 {
            p.inserted(key(i));
        }
        let mut first = Vec::new();
        p.select_victims(&o, 64, &mut first);
        assert_eq!(first.len(), 64);
        // Within each shard the victims are the oldest insertions.
        for w in first.windows(2) {
            if w[0].shard(p.queues.shards.len()) == w[1].shard(p.queues.shards.len()) {
                assert!(w[0].index < w[1].index);
            }
        }
    }

    #[test]
    fn clock_spares_referenced_pages_once() {
        let o = resident(64);
        let p = Clock::new();
        for i in 0..64 {
            p.inserted(key(i));
        }
        for i in 0..32 {
            o.0.mark_referenced(i);
        }
        let mut out = Vec::new();
        p.select_victims(&o, 32, &mut out);
        assert_eq!(out.len(), 32);
        assert!(
            out.iter().all(|k| k.index >= 32),
            "referenced pages were spared: {out:?}"
        );
        // Their bits are now clear: they go next.
        let mut more = Vec::new();
        p.select_victims(&o, 64, &mut more);
        assert_eq!(more.len(), 32);
        assert!(more.iter().all(|k| k.index < 32));
    }

    #[test]
    fn purge_drops_gone_empty_and_duplicate_entries() {
        let o = resident(10);
        let p = Fifo::new();
        for i in 0..10 {
            p.inserted(key(i));
            p.inserted(key(i));
        }
        p.inserted(PageKey {
            region: 7,
            index: 0,
        });
        assert!(o.0.try_lock(3, PageState::Clean));
        assert!(!o.0.unlock(3, PageState::Empty));
        p.purge(&o);
        assert_eq!(p.tracked(), 9);
        let mut out = Vec::new();
        p.select_victims(&o, 100, &mut out);
        out.sort();
        assert_eq!(
            out,
            (0..10).filter(|&i| i != 3).map(key).collect::<Vec<_>>()
        );
    }

    #[test]
    fn pinned_pages_are_never_victims() {
        let o = resident(16);
        let p = Clock::new();
        for i in 0..16 {
            p.inserted(key(i));
        }
        for i in 0..8 {
            o.0.pin(i);
        }
        let mut out = Vec::new();
        p.select_victims(&o, 100, &mut out);
        out.sort();
        assert_eq!(out, (8..16).map(key).collect::<Vec<_>>());
        assert_eq!(
            p.tracked(),
            0,
            "pinned entries are dropped; unpin re-inserts"
        );
    }

    #[test]
    fn forget_region_empties_queues() {
        let p = Clock::new();
        for i in 0..100 {
            p.inserted(key(i));
            p.inserted(PageKey {
                region: 2,
                index: i,
            });
        }
        p.forget_region(1);
        assert_eq!(p.tracked(), 100);
    }

    /// A pool of a few large entries (the huge-page pool's 2 MiB ranges)
    /// gives up victims in its policy's order, one at a time: a sharded
    /// policy, one or two entries a shard, gives them in the order its
    /// walk meets the shards.
    #[test]
    fn unsharded_policies_give_victims_in_their_exact_order() {
        let order = [5u64, 2, 7, 0, 3];
        for kind in PolicyKind::ALL {
            let o = resident(8);
            let p = kind.build_unsharded();
            for i in order {
                p.inserted(key(i));
            }
            for want in order {
                let mut out = Vec::new();
                p.select_victims(&o, 1, &mut out);
                assert_eq!(out, [key(want)], "{kind}");
            }
        }
    }
}
