//! Eviction: background evictor threads keep the cache between its
//! watermarks; fillers evict for themselves only when it is full.
//!
//! Victims come from the eviction policy in batches, are grouped by region
//! and sorted by page, so that dirty ones are written back in large ordered
//! writes and every contiguous run is dropped with one `madvise`.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use umio_cache::{EvictionPolicy, FrameBudget, Observed, PageOracle, PageProbe, PageState};

use crate::fill::STALL_LOGGED_AFTER;
use crate::huge::{HUGE_PAGE_SIZE, HugeState};
use crate::region::{Region, RegionLookup};
use crate::runs::runs;
use crate::scratch::Scratch;
use crate::shared::{Pool, Shared};
use crate::sys::mm;

/// Most victims taken per batch (Aquila evicts 512 at a time).
const MAX_BATCH: usize = 512;

/// Most bytes of a region the eviction for waiting writers writes back
/// at once, before it looks whether the pool is under its dirty limit.
const WRITE_BACK_CHUNK: usize = 4 << 20;

/// How long dirty pages of a store whose last write failed are left alone
/// by eviction and write-back before they are tried again, in ms.
const WRITE_RETRY_MS: u64 = 1000;

/// Answers a pool's policy about its pages. A page that belongs to the
/// other pool (a range promoted into the huge-page pool, or demoted out of
/// it) reads as gone, so each policy drops what is not its pool's.
struct Oracle<'a> {
    table: &'a dyn RegionLookup,
    /// Whether the asking policy is the huge-page pool's.
    huge_pool: bool,
}

impl PageOracle for Oracle<'_> {
    fn probe(&self, key: umio_cache::PageKey, clear_referenced: bool) -> Option<PageProbe> {
        let r = self.table.region(key.region)?;
        let i = usize::try_from(key.index)
            .ok()
            .filter(|&i| i < r.pages.len())?;
        let pooled = r
            .huge
            .as_ref()
            .and_then(|h| h.chunk_of(i).filter(|&c| h.is_pooled(c)))
            .is_some();
        if (r.huge_pool || pooled) != self.huge_pool {
            return None;
        }
        // A page another thread is evicting is on its way to Empty (that
        // thread gives it back to the policy if it stays): the entry is
        // stale, and kept it would outlive the page and, once the page is
        // filled again, evict it long before its turn.
        if r.pages.is_evicting(i) {
            return Some(PageProbe {
                state: Observed::Busy(PageState::Empty),
                referenced: false,
                pinned: false,
            });
        }
        let referenced = clear_referenced && r.pages.take_referenced(i);
        Some(PageProbe {
            state: r.pages.get(i),
            referenced,
            pinned: r.pages.is_pinned(i),
        })
    }
}

impl Shared {
    /// One round of an evictor: each pool above its high watermark is
    /// brought down to its low one, and a policy that tracks far more
    /// pages than its pool holds drops its stale entries.
    pub(crate) fn evict_round(&self, w: &mut Scratch) {
        // Asynchronous dirty tracking: the dirty count follows the writes.
        self.harvest_all();
        let pool = self.pool();
        self.purge_policy_if_bloated(&pool.budget, &*pool.policy, false);
        self.write_back_over_dirty_limit(w, pool, false, false);
        self.wake_parked_writers(pool);
        self.evict_to_low_water(w, pool, false);
        if let Some(h) = self.huge_pool() {
            self.purge_policy_if_bloated(&h.budget, &*h.policy, true);
            self.write_back_over_dirty_limit(w, h, true, false);
            self.wake_parked_writers(h);
            self.evict_to_low_water(w, h, true);
        }
    }

    /// Logs the waits of both pools that have lasted long (see
    /// [`report_stalls`](Self::report_stalls)); run by the `umio-watch`
    /// thread, which waits on nothing else (an evictor may be held by the
    /// very store that stalls).
    pub(crate) fn report_all_stalls(&self) {
        self.report_stalls(self.pool(), false);
        if let Some(h) = self.huge_pool() {
            self.report_stalls(h, true);
        }
    }

    /// Once a pool's dirty pages pass half its dirty limit, or a writer
    /// waits for the limit (`Shared::may_dirty`):
    /// writes dirty pages of its regions back in place (they stay in the
    /// cache, clean, as a flush leaves them: eviction drops them cheaply
    /// when it needs their space, and a later read of one is a hit), in
    /// address order, in batches up to the store's depth, until the pool
    /// is at half its limit. Pages of a store whose writes
    /// failed within [`WRITE_RETRY_MS`] are left for later; if nothing
    /// could be written, writers stop waiting for the limit until a pass
    /// writes again (`Pool::writeback_stuck`).
    ///
    /// `one_piece`: write one batch and leave the rest of the pass for the
    /// next call (`dirty_wanted` set again): the eviction for space calls
    /// it between its batches, and a pass frees no space.
    pub(crate) fn write_back_over_dirty_limit(
        &self,
        w: &mut Scratch,
        pool: &Pool,
        huge_pool: bool,
        one_piece: bool,
    ) {
        if !pool.dirty_wanted.swap(false, Relaxed) {
            return;
        }
        let under = || pool.dirty.load(Relaxed) <= pool.dirty_limit() / 2;
        if under() {
            // Asked for while a pass was under way, which has brought the
            // pool down since: nothing to write, and nothing is stuck.
            // (Taken for stuck, it let every writer past the limit, for
            // good: writers past it ask for no pass.)
            pool.writeback_stuck.store(false, Relaxed);
            return;
        }
        let table = self.regions();
        let mut written = false;
        let mut pieces = 0usize;
        'regions: for region in table.all() {
            if region.huge_pool != huge_pool || region.dirty.load(Relaxed) == 0 {
                continue;
            }
            if region
                .write_failed_at()
                .is_some_and(|t| self.now_ms().saturating_sub(t) < WRITE_RETRY_MS)
            {
                continue;
            }
            let Some(_g) = region.enter() else { continue };
            let chunk = (WRITE_BACK_CHUNK / region.page_size).max(1);
            let depth = self.queue_depth_of(region);
            // A run cut inside a promoted range would write-protect part of
            // its huge page, and split it: runs of a region that promotes
            // are cut at 2 MiB boundaries only (a promoted range is
            // dirtied whole).
            let align = match region.huge {
                Some(_) => (HUGE_PAGE_SIZE / region.page_size).max(1),
                None => 1,
            };
            let mut p = 0;
            while p < region.pages.len() && !under() && !self.is_shutting_down() {
                if one_piece && pieces > 0 {
                    // The rest at the next call.
                    pool.dirty_wanted.store(true, Relaxed);
                    break 'regions;
                }
                // Lock up to `depth` runs of dirty pages, about `chunk`
                // pages in all (pinned pages too: they stay resident
                // either way).
                w.runs.clear();
                let mut locked = 0;
                while p < region.pages.len() && w.runs.len() < depth && locked < chunk {
                    if !region.pages.try_lock(p, PageState::Dirty) {
                        p += 1;
                        continue;
                    }
                    let start = p;
                    p += 1;
                    while p < region.pages.len()
                        && (locked + (p - start) < chunk || !p.is_multiple_of(align))
                        && region.pages.try_lock(p, PageState::Dirty)
                    {
                        p += 1;
                    }
                    locked += p - start;
                    w.runs.push(start..p);
                }
                if w.runs.is_empty() {
                    continue;
                }
                // Written back in place: the pages stay in the cache,
                // clean, for eviction to drop when it needs their space.
                let (pages, failed) = self.write_back_locked(region, &w.runs, &mut w.write_results);
                pieces += 1;
                let wrote = pages > 0;
                self.counters()
                    .limit_written_pages
                    .fetch_add(pages as u64, Relaxed);
                if let Some(e) = failed {
                    // Returned by the next flush.
                    region.defer_error(e);
                }
                written |= wrote;
                // Below the limit again: the writers parked at it go on
                // now, while the rest of the pass is written, rather than
                // after it.
                if wrote && pool.dirty.load(Relaxed) < pool.dirty_limit() {
                    self.wake_parked_writers(pool);
                }
                if !wrote && region.write_failure().is_some() {
                    break;
                }
            }
            if under() {
                break;
            }
        }
        // Nothing written (the dirty pages' store fails, or they are
        // pinned or busy) and still over: writers stop waiting for this
        // pass.
        pool.writeback_stuck.store(!written && !under(), Relaxed);
    }

    /// Logs, once per wait, a wait for cache space or for dirty pages to
    /// be written back that has lasted [`STALL_LOGGED_AFTER`], with what
    /// holds the cache; and a reservation refused for good. The waiting
    /// threads may be signal handlers, which may not log.
    fn report_stalls(&self, pool: &Pool, huge_pool: bool) {
        let name = if huge_pool { "huge-page pool" } else { "cache" };
        let refused = pool.refused.swap(0, Relaxed);
        if refused > 0 {
            log::error!(
                "umio: a fill needs {refused} bytes of {name} space, more than it can ever \
                 have beside its pinned pages ({} bytes pinned, bound {}): it fails (a \
                 faulting thread gets SIGBUS)",
                self.pinned_bytes(),
                pool.budget.limit()
            );
        }
        let after = STALL_LOGGED_AFTER.as_millis() as u64;
        let now = self.now_ms();
        for (waits, what) in [
            (&pool.space_waits, "cache space"),
            (&pool.dirty_waits, "dirty pages to be written back"),
        ] {
            let Some(since) = waits.unlogged_since() else {
                continue;
            };
            if now.saturating_sub(since) < after {
                continue;
            }
            waits.mark_logged();
            log::warn!(
                "umio: faults have waited {} s for {what} ({name}), and wait on: {}; {}",
                now.saturating_sub(since) / 1000,
                self.stall_reason(huge_pool),
                self.describe_cache()
            );
        }
    }

    /// Why the pages of a pool cannot be evicted now, in words.
    fn stall_reason(&self, huge_pool: bool) -> String {
        let table = self.regions();
        let mut failing = Vec::new();
        let mut busy = 0usize;
        for r in table.all().iter().filter(|r| r.huge_pool == huge_pool) {
            if let Some(e) = r.write_failure()
                && r.dirty.load(Relaxed) > 0
            {
                failing.push(format!(
                    "region {} holds {} dirty pages its store fails to write (errno {e})",
                    r.id,
                    r.dirty.load(Relaxed)
                ));
            }
            busy += (0..r.pages.len())
                .filter(|&p| matches!(r.pages.get(p), Observed::Busy(_)))
                .count();
        }
        let mut out = failing.join("; ");
        if busy > 0 {
            if !out.is_empty() {
                out.push_str("; ");
            }
            out.push_str(&format!(
                "{busy} pages held busy by store reads or write-backs in flight \
                 (a slow or frozen store)"
            ));
        }
        if out.is_empty() {
            out.push_str("other threads taking the space freed");
        }
        out
    }

    /// Once one pool is above its high watermark, or a miss waits for
    /// space in it, evicts within it down to its low one (and further, to
    /// make room for what waiting misses want). Batches are sized by the
    /// pool's largest page (the runtime's default page size is only the
    /// least of them): sized by a smaller page, a batch of large pages
    /// would evict far below the low watermark.
    fn evict_to_low_water(&self, w: &mut Scratch, pool: &Pool, huge_pool: bool) {
        let (budget, policy) = (&pool.budget, &*pool.policy);
        // What a reader that may not reclaim was short of (taken once).
        let short = pool.short.swap(0, Relaxed);
        if !budget.above_high() && short == 0 && pool.wanted.load(Relaxed) == 0 {
            return;
        }
        // Read again at every batch: once the waiting misses have their
        // space, the round stops at the low watermark. Capped at a quarter
        // of the bound (no reservation is larger), so that many waiters
        // at once never empty the pool.
        let target = || {
            let wanted = (pool.wanted.load(Relaxed) + short).min(budget.limit() / 4);
            budget
                .low_water()
                .min(budget.limit().saturating_sub(wanted))
        };
        let page_size = self.largest_page(huge_pool);
        while budget.used() > target() && !self.is_shutting_down() {
            // A writer waiting for the dirty limit is not kept waiting for
            // a long round of eviction under readers' misses, nor the
            // misses waiting for space for a whole pass (which frees no
            // space): a piece of the pass between batches.
            self.write_back_over_dirty_limit(w, pool, huge_pool, true);
            // The huge-page pool's victims are whole 2 MiB ranges, a few
            // to a pool: a batch of 16 would empty it to make room for
            // one. Its batches take what the excess needs, at least one.
            let excess = budget.excess_over_low() / page_size as u64;
            let least = if huge_pool { 1 } else { 16 };
            let batch = (excess as usize).clamp(least, MAX_BATCH);
            let over_bound = budget.used() > budget.limit();
            let freed = self.evict_batch(w, policy, batch);
            if over_bound {
                // The bound was lowered (`Runtime::set_cache_bytes`).
                self.counters()
                    .shrink_evicted_bytes
                    .fetch_add(freed, Relaxed);
            }
            if freed == 0 {
                // Everything is busy or gone: let the owners finish.
                std::thread::sleep(Duration::from_millis(1));
                break;
            }
        }
    }

    /// Lets a pool's policy drop stale entries once it tracks more than
    /// twice the pages the pool can hold.
    fn purge_policy_if_bloated(
        &self,
        budget: &FrameBudget,
        policy: &dyn EvictionPolicy,
        huge_pool: bool,
    ) {
        let most_pages = budget.limit() / crate::config::MIN_PAGE_SIZE as u64;
        if policy.tracked() as u64 > 2 * most_pages.min(budget.used() / 4096 + 1024) {
            let table = self.regions();
            policy.purge(&Oracle {
                table: &**table,
                huge_pool,
            });
        }
    }

    /// Evicts up to `max` pages chosen by `policy` (one pool's: its
    /// victims are all of that pool's regions). Returns bytes freed.
    pub(crate) fn evict_batch(
        &self,
        w: &mut Scratch,
        policy: &dyn EvictionPolicy,
        max: usize,
    ) -> u64 {
        self.evicting().fetch_add(1, Relaxed);
        let freed = if w.in_signal {
            // A signal handler may not load the runtime's table (`arc-swap`
            // allocates and initialises a thread-local on a thread's first
            // load, and is not reentrant).
            crate::in_thread::with_regions(|t| self.evict_batch_in(w, policy, max, t))
        } else {
            let table = self.regions();
            self.evict_batch_in(w, policy, max, &**table)
        };
        self.evicting().fetch_sub(1, Relaxed);
        freed
    }

    /// Checks that the regular pool's policy tracks every resident page
    /// that is not pinned (a page it lost track of would never be evicted,
    /// and a full cache of them would starve every miss). Entries and
    /// pages change while threads work, so it looks when no eviction batch
    /// holds victims and no page is busy, dropping stale and duplicate
    /// entries first; a lost entry stays lost, so it looks a few times
    /// before it reports one. For tests (`Runtime::check_policy`).
    pub(crate) fn check_policy_tracks_resident(&self) -> Result<(), String> {
        let mut last = String::from("never quiet: eviction batches or busy pages every time");
        // A minute: a filler tells the policy of a page only after its
        // thread is woken, so a filler kept off the CPU a while (a loaded
        // machine) leaves a page resident and not yet tracked.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let pool = self.pool();
            let table = self.regions();
            if self.evicting().load(Relaxed) == 0 {
                pool.policy.purge(&Oracle {
                    table: &**table,
                    huge_pool: false,
                });
                let tracked = pool.policy.tracked();
                let (mut resident, mut busy) = (0usize, 0usize);
                for r in table.all().iter().filter(|r| !r.huge_pool) {
                    for p in 0..r.pages.len() {
                        match r.pages.get(p) {
                            Observed::Stable(PageState::Clean | PageState::Dirty)
                                if !r.pages.is_pinned(p) =>
                            {
                                resident += 1
                            }
                            Observed::Busy(_) => busy += 1,
                            _ => {}
                        }
                    }
                }
                if busy == 0 && self.evicting().load(Relaxed) == 0 {
                    if tracked >= resident {
                        return Ok(());
                    }
                    last = format!(
                        "policy {} tracks {tracked} pages, {resident} resident and not pinned: {}",
                        pool.policy.name(),
                        self.describe_cache()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(last)
    }

    /// Evicts a batch of `policy`'s victims in two passes. First the
    /// clean ones, of every region: dropped at once. Then the dirty ones
    /// of one region, written back and dropped; the dirty victims of the
    /// other regions go back to the policy. A victim is out of the policy
    /// while a thread holds it, so a batch must not hold clean pages, or
    /// other regions' pages, through a write-back that a slow or frozen
    /// store makes last (every miss would find nothing to evict).
    fn evict_batch_in(
        &self,
        w: &mut Scratch,
        policy: &dyn EvictionPolicy,
        max: usize,
        table: &dyn RegionLookup,
    ) -> u64 {
        w.victims.clear();
        w.dirty_victims.clear();
        let huge_pool = self
            .huge_pool()
            .is_some_and(|h| std::ptr::addr_eq(&*h.policy, policy));
        let oracle = Oracle { table, huge_pool };
        policy.select_victims(&oracle, max, &mut w.victims);
        w.victims.sort_unstable();
        let mut freed = 0;
        let mut victims = std::mem::take(&mut w.victims);
        let mut dirty = std::mem::take(&mut w.dirty_victims);
        for group in victims.chunk_by(|a, b| a.region == b.region) {
            freed += self.evict_group(w, policy, table, group, false, &mut dirty);
        }
        // The dirty victims: one region's written back now, the others'
        // given back (a later batch takes them).
        let first = dirty.first().map(|k| k.region);
        for group in dirty.chunk_by(|a, b| a.region == b.region) {
            if Some(group[0].region) == first {
                freed += self.evict_group(w, policy, table, group, true, &mut Vec::new());
            } else {
                group.iter().for_each(|&k| policy.restore(k));
            }
        }
        victims.clear();
        w.victims = victims;
        dirty.clear();
        w.dirty_victims = dirty;
        freed
    }

    /// Evicts the victims of one region (`group`, sorted): the clean ones;
    /// the dirty ones too if `dirty`, else they are added to `later`
    /// (still out of the policy). Returns the bytes freed.
    fn evict_group(
        &self,
        w: &mut Scratch,
        policy: &dyn EvictionPolicy,
        table: &dyn RegionLookup,
        group: &[umio_cache::PageKey],
        dirty: bool,
        later: &mut Vec<umio_cache::PageKey>,
    ) -> u64 {
        let Some(region) = table.region(group[0].region) else {
            return 0;
        };
        let Some(_g) = region.enter() else { return 0 };
        w.locked.clear();
        // A signal handler evicts clean pages only: writing back goes
        // through the store's batch path (allocations, io_uring rings
        // shared with other threads), which the evictors take instead.
        // Nor are dirty pages of a store whose writes fail tried again
        // by every eviction: once per `WRITE_RETRY_MS` (the eviction for
        // the dirty limit retries them too).
        let failing = region
            .write_failed_at()
            .is_some_and(|t| self.now_ms().saturating_sub(t) < WRITE_RETRY_MS);
        let may_write = !w.in_signal && !failing;
        let states: &[PageState] = if dirty {
            &[PageState::Dirty, PageState::Clean]
        } else {
            &[PageState::Clean]
        };
        for key in group {
            let p = key.index as usize;
            let locked = states
                .iter()
                .copied()
                .find(|&s| region.pages.try_lock_evicting(p, s));
            match locked {
                // Pinned after the policy picked it: leave it be (unpin
                // hands it back to the policy).
                Some(s) if region.pages.is_pinned(p) => {
                    if region.pages.unlock(p, s) {
                        self.wake(region, region.page_addr(p), region.page_size);
                    }
                }
                Some(s) => w.locked.push((p, s)),
                // Dirty, for the second pass.
                None if !dirty
                    && may_write
                    && region.pages.get(p) == Observed::Stable(PageState::Dirty) =>
                {
                    later.push(*key);
                }
                // Changed state since the policy probed it (a write
                // un-protecting it, a flush): if still resident it
                // must stay tracked, or its space is lost to eviction.
                // Not if another thread is evicting it: that thread
                // gives it back if it stays, and a second entry would
                // outlive the page.
                None => {
                    if !region.pages.is_pinned(p)
                        && !region.pages.is_evicting(p)
                        && !matches!(
                            region.pages.get(p),
                            Observed::Stable(PageState::Empty) | Observed::Busy(PageState::Empty)
                        )
                    {
                        policy.restore(*key);
                    }
                }
            }
        }
        let pooled = match &region.huge {
            // A signal handler leaves pages of promoted (or promoting)
            // 2 MiB ranges to the evictors: evicting one takes the
            // whole range, dirty pages and all, and grows the lists
            // (neither is allowed in a handler).
            Some(h) if w.in_signal => {
                w.locked.retain(|&(p, s)| {
                    if h.chunk_of(p).is_none_or(|c| h.is_normal(c)) {
                        return true;
                    }
                    if region.pages.unlock(p, s) {
                        self.wake(region, region.page_addr(p), region.page_size);
                    }
                    policy.restore(region.key(p));
                    false
                });
                Vec::new()
            }
            Some(h) => self.widen_to_promoted(w, region, h),
            None => Vec::new(),
        };
        self.evict_locked(w, region, &pooled)
    }

    /// A victim in a promoted 2 MiB range takes the whole range with it:
    /// evicted together, the range frees its huge page with one
    /// `MADV_DONTNEED` instead of splitting it (its dirty pages are one
    /// write-back run). Pages of the range another thread holds stay; the
    /// range is then split back to small pages (counted as a demotion).
    /// Keeps `w.locked` sorted. Returns the page ranges of the ranges that
    /// were charged to the huge-page pool: their charge is settled by
    /// [`evict_locked`](Self::evict_locked), not moved back first (which
    /// would swell the region's pool, and make its evictor take other
    /// pages, for as long as the eviction takes).
    fn widen_to_promoted(
        &self,
        w: &mut Scratch,
        region: &Region,
        h: &HugeState,
    ) -> Vec<Range<usize>> {
        let mut added: Vec<(usize, PageState)> = Vec::new();
        let mut pooled = Vec::new();
        let n = w.locked.len();
        for i in 0..n {
            let Some(c) = h.chunk_of(w.locked[i].0) else {
                continue;
            };
            match h.take_promoted(c) {
                None => continue,
                Some(true) => pooled.push(h.pages_of(c)),
                Some(false) => {}
            }
            let mut whole = true;
            for q in h.pages_of(c) {
                if w.locked[..n].binary_search_by_key(&q, |x| x.0).is_ok() {
                    continue;
                }
                let s = [PageState::Clean, PageState::Dirty]
                    .into_iter()
                    .find(|&s| region.pages.try_lock_evicting(q, s));
                match s {
                    Some(s) if region.pages.is_pinned(q) => {
                        whole = false;
                        if region.pages.unlock(q, s) {
                            self.wake(region, region.page_addr(q), region.page_size);
                        }
                    }
                    Some(s) => added.push((q, s)),
                    None => whole = false,
                }
            }
            if !whole {
                self.counters().demotions.fetch_add(1, Relaxed);
            }
        }
        if !added.is_empty() {
            w.locked.extend(added);
            w.locked.sort_unstable_by_key(|x| x.0);
        }
        pooled
    }

    /// Evicts the pages in `w.locked` (sorted, held busy): writes back the
    /// dirty ones, drops them all. Pages whose write-back fails stay dirty.
    /// `pooled`: page ranges, just demoted, whose 2 MiB each are charged to
    /// the huge-page pool: that charge is released, and what of them stays
    /// resident is charged to the region's pool instead.
    fn evict_locked(&self, w: &mut Scratch, region: &Region, pooled: &[Range<usize>]) -> u64 {
        // Asynchronous dirty tracking: victims held Clean may have been
        // written since (`dirty.rs`); those are dirty victims.
        if self.learn_locked(region, &mut w.locked) > 0 && w.in_signal {
            // A signal handler writes nothing back: they stay, dirty.
            w.locked.retain(|&(p, s)| {
                if s != PageState::Dirty {
                    return true;
                }
                if region.pages.unlock(p, s) {
                    self.wake(region, region.page_addr(p), region.page_size);
                }
                self.policy_of(region).restore(region.key(p));
                false
            });
        }
        w.pages.clear();
        w.pages.extend(
            w.locked
                .iter()
                .filter(|(_, s)| *s == PageState::Dirty)
                .map(|&(p, _)| p),
        );
        // Allocates only when a write-back fails.
        let mut failed: Vec<usize> = Vec::new();
        let mut dirty_runs = std::mem::take(&mut w.runs);
        dirty_runs.clear();
        dirty_runs.extend(runs(&w.pages));
        let mut results = std::mem::take(&mut w.write_results);
        results.clear();
        if !dirty_runs.is_empty() {
            self.write_runs(region, &dirty_runs, &mut results);
        }
        for (run, r) in dirty_runs.iter().zip(results.drain(..)) {
            match r {
                Ok(()) => {
                    self.counters()
                        .evicted_dirty_pages
                        .fetch_add(run.len() as u64, Relaxed);
                }
                Err(e) => {
                    // Logged once per run of failures (`write_runs`).
                    region.defer_error(e);
                    failed.extend(run.clone());
                }
            }
        }
        dirty_runs.clear();
        w.runs = dirty_runs;
        w.write_results = results;
        if !failed.is_empty() {
            // Write-protected and dirty: the next write un-protects them.
            // Still resident, so still eviction candidates.
            for &p in &failed {
                if region.pages.unlock(p, PageState::Dirty) {
                    self.wake(region, region.page_addr(p), region.page_size);
                }
                self.policy_of(region).restore(region.key(p));
            }
            w.locked.retain(|(p, _)| failed.binary_search(p).is_err());
        }
        // Asynchronous dirty tracking: a page written while the others
        // were written back (nothing held the write) stays, dirty; the
        // rest are taken out of the region at once (`dirty.rs`). Those to
        // keep are marked Empty (no held page is).
        if self.pagemap().is_some() {
            let Some(kept) =
                self.snatch_locked(region, &mut w.locked, w.in_signal, pooled.is_empty())
            else {
                // A signal handler found the scratch busy: every page back
                // as it is (clean: a signal handler evicts no dirty page),
                // to the policy; the evictors evict.
                for &(p, _) in &w.locked {
                    if region.pages.unlock(p, PageState::Clean) {
                        self.wake(region, region.page_addr(p), region.page_size);
                    }
                    self.policy_of(region).restore(region.key(p));
                }
                w.locked.clear();
                return 0;
            };
            // Victims given back as they were (`snatch_locked`).
            w.locked.retain(|&(p, _)| p != usize::MAX);
            if kept > 0 {
                self.count_dirty(region, kept);
                self.counters()
                    .scan_dirtied_pages
                    .fetch_add(kept as u64, Relaxed);
                w.locked.retain(|&(p, s)| {
                    if s != PageState::Empty {
                        return true;
                    }
                    if region.pages.unlock(p, PageState::Dirty) {
                        self.wake(region, region.page_addr(p), region.page_size);
                    }
                    self.policy_of(region).restore(region.key(p));
                    false
                });
            }
        }
        w.pages.clear();
        w.pages.extend(w.locked.iter().map(|&(p, _)| p));
        // One system call (and one TLB flush) for the whole batch where the
        // kernel can; what it did not discard goes one run at a time.
        w.discard.clear();
        w.discard.extend(runs(&w.pages).map(|run| libc::iovec {
            iov_base: region.page_addr(run.start) as *mut libc::c_void,
            iov_len: run.len() * region.page_size,
        }));
        let discarded = mm::discard_many(&w.discard);
        w.discard.clear();
        let mut offset = 0;
        let mut freed = 0u64;
        let mut freed_pooled = 0u64;
        for run in runs(&w.pages) {
            let (addr, len) = (region.page_addr(run.start), run.len() * region.page_size);
            offset += len;
            let result = if offset <= discarded {
                Ok(())
            } else {
                mm::advise(addr, len, libc::MADV_DONTNEED)
            };
            if let Err(e) = result {
                crate::report::error(crate::report::Report::Madvise { errno: e });
                // Still resident: give the pages back as they were.
                for p in run {
                    let was = w
                        .locked
                        .iter()
                        .find(|&&(q, _)| q == p)
                        .map_or(PageState::Clean, |x| x.1);
                    let to = if was == PageState::Dirty && !failed.contains(&p) {
                        PageState::Clean
                    } else {
                        was
                    };
                    if region.pages.unlock(p, to) {
                        self.wake(region, region.page_addr(p), region.page_size);
                    }
                    self.policy_of(region).restore(region.key(p));
                }
                continue;
            }
            self.release_run(region, run.clone(), PageState::Empty);
            freed += len as u64;
            for r in pooled {
                let both = run.start.max(r.start)..run.end.min(r.end);
                freed_pooled += (both.len() * region.page_size) as u64;
            }
            self.counters()
                .evicted_pages
                .fetch_add(run.len() as u64, Relaxed);
            region.stats.evictions.fetch_add(run.len() as u64, Relaxed);
        }
        let budget = self.budget_of(region);
        budget.release(freed - freed_pooled);
        if let (false, Some(pool)) = (pooled.is_empty(), self.huge_pool()) {
            let charged: u64 = pooled
                .iter()
                .map(|r| (r.len() * region.page_size) as u64)
                .sum();
            // Pages of those ranges still resident (held by another
            // thread, or their write-back failed) are the region's pool's
            // now, and its policy's.
            budget.charge(charged - freed_pooled);
            pool.budget.release(charged);
            let policy = self.policy_of(region);
            for p in pooled.iter().flat_map(|r| r.clone()) {
                if matches!(
                    region.pages.get(p),
                    Observed::Stable(PageState::Clean | PageState::Dirty)
                        | Observed::Busy(PageState::Clean | PageState::Dirty)
                ) {
                    policy.inserted(region.key(p));
                }
            }
        }
        freed
    }

    /// Discards pages without writing them back (`Advice::DontNeed`),
    /// waiting for pages other threads are changing. Also clears poison.
    /// Inside the region, so that an unmap waits for it: a late
    /// `MADV_DONTNEED` must not discard a region mapped later at the same
    /// address. `ENOMEM` (as `madvise` says of unmapped memory) if the
    /// region, or a page of the range, is being unmapped.
    pub(crate) fn drop_pages(&self, region: &Region, pages: Range<usize>) -> Result<(), i32> {
        let Some(_entered) = region.enter() else {
            return Err(libc::ENOMEM);
        };
        let _taking = region.taking();
        // The ranges lose pages: no longer promoted.
        self.demote_range(region, &pages);
        let mut freed = 0u64;
        let mut locked = Vec::with_capacity(pages.len());
        for p in pages.clone() {
            let s = loop {
                match region.pages.get(p) {
                    Observed::Stable(s) if region.pages.try_lock(p, s) => break s,
                    Observed::Stable(_) => {}
                    Observed::Busy(_) if region.intersects_hole(&(p..p + 1)) => {
                        // Taken out by a partial unmap (busy for good): the
                        // pages locked go back as they were.
                        for (q, &s) in (pages.start..p).zip(&locked) {
                            if region.pages.unlock(q, s) {
                                self.wake(region, region.page_addr(q), region.page_size);
                            }
                        }
                        return Err(libc::ENOMEM);
                    }
                    Observed::Busy(_) => std::thread::yield_now(),
                }
            };
            locked.push(s);
        }
        for &s in &locked {
            if s == PageState::Dirty {
                self.count_undirty(region, 1);
            }
            if s != PageState::Empty {
                freed += region.page_size as u64;
            }
        }
        let (addr, len) = (
            region.page_addr(pages.start),
            pages.len() * region.page_size,
        );
        let r = mm::advise(addr, len, libc::MADV_DONTNEED);
        self.release_run(region, pages, PageState::Empty);
        self.budget_of(region).release(freed);
        r
    }
}
