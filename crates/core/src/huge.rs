//! Huge pages: asynchronous promotion of 2 MiB ranges (xmap's design, on
//! an unmodified kernel), and what hugetlbfs regions need.
//!
//! Linux maps file pages 4 KiB at a time; umio's regions are anonymous
//! memory, which the kernel can back with transparent huge pages. A region
//! whose page size divides 2 MiB is laid out 2 MiB-aligned, and a
//! [`Promoter`] decides, per fault, whether to promote the aligned 2 MiB
//! range around it. Promotion runs on the background prefetch thread, never
//! on the fault's critical path: it fills the range's missing pages in one
//! batch of store reads, locks every page, clears write protection over the
//! whole range (its pages become dirty: dirty tracking is per 2 MiB from
//! then on), and asks the kernel to collapse the range into one huge page
//! (`madvise(MADV_COLLAPSE)`, which refuses ranges with a missing or
//! write-protected page).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64};
use std::time::{Duration, Instant};

use umio_cache::{Observed, PageState};

use crate::fault::Worker;
use crate::prefetch::{Fault, FaultKind};
use crate::region::Region;
use crate::runtime::Shared;
use crate::sys::mm;

/// The huge page size umio promotes to and hugetlbfs regions use.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// `MADV_COLLAPSE` (Linux 6.1).
const MADV_COLLAPSE: i32 = 25;

/// How long a promotion waits for a page another thread holds.
const LOCK_WAIT: Duration = Duration::from_millis(200);
/// How long a promoted range waits for room in the huge-page pool before
/// it stays in its region's pool.
const POOL_WAIT: Duration = Duration::from_millis(200);

/// Decides which 2 MiB ranges of a region to promote to huge pages.
///
/// Shown every fault umio serves on the region (after it is resolved, on
/// the filler): return `true` to schedule, in the background, the
/// promotion of the aligned 2 MiB range holding `fault.page`. Promotions of
/// one range are coalesced, and a range already promoted is not offered
/// again until it is evicted. Runs on umio's threads: keep it quick.
pub trait Promoter: Send + Sync + 'static {
    /// Whether to promote the 2 MiB range around this fault.
    fn should_promote(&self, fault: &Fault) -> bool;
}

/// Built-in promotion policies (xmap's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PromoteKind {
    /// Never promote (ranges advised [`Advice::Huge`] still are).
    ///
    /// [`Advice::Huge`]: crate::Advice::Huge
    #[default]
    Never,
    /// Promote the range of every miss (xmap's promote-always).
    Always,
    /// Promote when one thread faults on two consecutive pages (xmap's
    /// promote-seqfault): sequential access is worth a whole range.
    Sequential,
}

impl PromoteKind {
    /// Every built-in policy.
    pub const ALL: [PromoteKind; 3] = [
        PromoteKind::Never,
        PromoteKind::Always,
        PromoteKind::Sequential,
    ];

    /// The policy named `never`, `always` or `sequential` (any case).
    pub fn from_name(name: &str) -> Option<PromoteKind> {
        PromoteKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            PromoteKind::Never => "never",
            PromoteKind::Always => "always",
            PromoteKind::Sequential => "sequential",
        }
    }

    pub(crate) fn build(self) -> Option<Arc<dyn Promoter>> {
        match self {
            PromoteKind::Never => None,
            PromoteKind::Always => Some(Arc::new(PromoteAlways)),
            PromoteKind::Sequential => Some(Arc::new(PromoteSequential::new())),
        }
    }
}

/// Promotes the range of every miss.
#[derive(Debug, Default)]
pub struct PromoteAlways;

impl Promoter for PromoteAlways {
    fn should_promote(&self, fault: &Fault) -> bool {
        fault.kind == FaultKind::Miss
    }
}

/// Promotes when a thread faults on the page after the one it last
/// faulted on. Remembers the last fault of up to 64 threads (by thread id
/// modulo 64).
#[derive(Debug)]
pub struct PromoteSequential {
    last: [AtomicU64; 64],
}

impl PromoteSequential {
    /// A policy that has seen no fault.
    pub fn new() -> Self {
        PromoteSequential {
            last: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Default for PromoteSequential {
    fn default() -> Self {
        Self::new()
    }
}

impl Promoter for PromoteSequential {
    fn should_promote(&self, fault: &Fault) -> bool {
        // Thread id in the high half, page + 1 in the low (0: none).
        let me = u64::from(fault.thread) << 32;
        let now = me | (fault.page.wrapping_add(1) & 0xFFFF_FFFF);
        let prev = self.last[fault.thread as usize % 64].swap(now, Relaxed);
        prev & !0xFFFF_FFFF == me && (prev & 0xFFFF_FFFF) + 1 == (now & 0xFFFF_FFFF)
    }
}

const NORMAL: u8 = 0;
const PROMOTING: u8 = 1;
const PROMOTED: u8 = 2;
/// Promoted, and its 2 MiB charged to the runtime's huge-page pool
/// instead of its region's pool (`Builder::huge_cache_bytes`).
const POOLED: u8 = 3;

/// Why a promotion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PromoteFailure {
    /// A page of the range could not be filled or stayed busy: the cache is
    /// too small, a store read failed, or the range is being unmapped.
    NotResident,
    /// The kernel refused the collapse (errno kept in the stats).
    Collapse(i32),
}

/// Promotion state of a region: one byte per aligned 2 MiB range.
pub(crate) struct HugeState {
    pub promoter: Option<Arc<dyn Promoter>>,
    /// Region pages per 2 MiB range.
    pub chunk_pages: usize,
    chunks: Box<[AtomicU8]>,
    /// Promote-worthy ranges by advice: `(pages, huge)`, last entry wins.
    advice: arc_swap::ArcSwap<Vec<(Range<usize>, bool)>>,
}

impl HugeState {
    /// State for a region of `pages` pages of `page_size` bytes, which must
    /// divide 2 MiB, with its base 2 MiB-aligned.
    pub fn new(pages: usize, page_size: usize, promoter: Option<Arc<dyn Promoter>>) -> Self {
        let chunk_pages = HUGE_PAGE_SIZE / page_size;
        // Only whole ranges inside the region can be promoted.
        let chunks = (0..pages / chunk_pages)
            .map(|_| AtomicU8::new(NORMAL))
            .collect();
        HugeState {
            promoter,
            chunk_pages,
            chunks,
            advice: arc_swap::ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// The promotable range holding `page`, if any.
    pub fn chunk_of(&self, page: usize) -> Option<usize> {
        let c = page / self.chunk_pages;
        (c < self.chunks.len()).then_some(c)
    }

    pub fn pages_of(&self, chunk: usize) -> Range<usize> {
        chunk * self.chunk_pages..(chunk + 1) * self.chunk_pages
    }

    pub fn is_promoted(&self, chunk: usize) -> bool {
        matches!(self.chunks[chunk].load(Acquire), PROMOTED | POOLED)
    }

    /// Whether the range is promoted and charged to the huge-page pool.
    pub fn is_pooled(&self, chunk: usize) -> bool {
        self.chunks[chunk].load(Acquire) == POOLED
    }

    /// Marks a promoted range ordinary again (a page of it was evicted, or
    /// dirtied alone): `None` if it was not promoted, else whether it was
    /// charged to the huge-page pool. Use [`Shared::demote`], which moves
    /// the charge back.
    pub(crate) fn take_promoted(&self, chunk: usize) -> Option<bool> {
        let c = &self.chunks[chunk];
        let mut now = c.load(Acquire);
        while matches!(now, PROMOTED | POOLED) {
            match c.compare_exchange(now, NORMAL, AcqRel, Acquire) {
                Ok(was) => return Some(was == POOLED),
                Err(x) => now = x,
            }
        }
        None
    }

    /// Gives back a claim of a range never promoted.
    pub fn abandon(&self, chunk: usize) {
        let _ = self.chunks[chunk].compare_exchange(PROMOTING, NORMAL, AcqRel, Relaxed);
    }

    /// Claims a range for promotion; false if one is under way or done.
    fn begin(&self, chunk: usize) -> bool {
        self.chunks[chunk]
            .compare_exchange(NORMAL, PROMOTING, AcqRel, Relaxed)
            .is_ok()
    }

    fn end(&self, chunk: usize, state: u8) {
        self.chunks[chunk].store(state, Release);
    }

    /// Ranges promoted now.
    pub fn promoted(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| matches!(c.load(Relaxed), PROMOTED | POOLED))
            .count()
    }

    /// The promotable ranges holding any of `pages`.
    fn chunks_of(&self, pages: &Range<usize>) -> Range<usize> {
        if pages.is_empty() {
            return 0..0;
        }
        let cp = self.chunk_pages;
        pages.start / cp..((pages.end - 1) / cp + 1).min(self.chunks.len())
    }

    /// Records `Advice::Huge` (true) or `Advice::NoHuge` over `pages`.
    pub fn set_advice(&self, pages: Range<usize>, huge: bool) {
        self.advice.rcu(|list| {
            let mut l = Vec::clone(list);
            l.retain(|(r, _)| !(pages.start <= r.start && r.end <= pages.end));
            l.push((pages.clone(), huge));
            l
        });
    }

    fn advice_for(&self, page: usize) -> Option<bool> {
        let list = self.advice.load();
        list.iter()
            .rev()
            .find(|(r, _)| r.contains(&page))
            .map(|&(_, h)| h)
    }
}

impl Shared {
    /// Shows a resolved fault to the region's promotion policy and queues
    /// the promotion it asks for on the background thread.
    pub(crate) fn consider_promotion(&self, region: &Region, fault: &Fault) {
        let Some(h) = &region.huge else { return };
        let page = fault.page as usize;
        let Some(chunk) = h.chunk_of(page) else {
            return;
        };
        if h.chunks[chunk].load(Relaxed) != NORMAL {
            return;
        }
        let want = match h.advice_for(page) {
            Some(huge) => huge && fault.kind == FaultKind::Miss,
            // A panicking policy (the application's own) promotes nothing.
            None => h.promoter.as_ref().is_some_and(|p| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.should_promote(fault)))
                    .unwrap_or(false)
            }),
        };
        if !want {
            return;
        }
        if !h.begin(chunk) {
            self.stats.promotions_coalesced.fetch_add(1, Relaxed);
            return;
        }
        let Some(region) = self.regions.load().get(region.id).cloned() else {
            h.end(chunk, NORMAL);
            return;
        };
        self.queue_promotion(region, chunk);
    }

    /// Queues the promotion of a claimed range on the background thread.
    pub(crate) fn queue_promotion(&self, region: Arc<Region>, chunk: usize) {
        let mut q = self.prefetch_jobs.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(crate::runtime::PrefetchJob {
            region,
            pages: Vec::new(),
            promote: Some(chunk),
        });
        self.prefetch_signal.notify_one();
    }

    /// Promotes one claimed 2 MiB range: fill, lock, un-protect, collapse.
    pub(crate) fn promote(&self, w: &mut Worker, region: &Region, chunk: usize) {
        let Some(h) = &region.huge else { return };
        self.stats.promotions.fetch_add(1, Relaxed);
        let result = self.promote_locked(w, region, h, chunk);
        match result {
            // Marked promoted by `promote_locked`, pages still locked.
            Ok(()) => {
                self.stats.promotions_done.fetch_add(1, Relaxed);
            }
            Err(f) => {
                match f {
                    PromoteFailure::NotResident => {
                        self.stats.promotions_not_resident.fetch_add(1, Relaxed)
                    }
                    PromoteFailure::Collapse(e) => {
                        self.stats.last_promotion_errno.store(e as u64, Relaxed);
                        self.stats.promotions_refused.fetch_add(1, Relaxed)
                    }
                };
                log::debug!("umio: promotion of range {chunk} failed: {f:?}");
                h.end(chunk, NORMAL);
            }
        }
    }

    fn promote_locked(
        &self,
        w: &mut Worker,
        region: &Region,
        h: &HugeState,
        chunk: usize,
    ) -> Result<(), PromoteFailure> {
        let pages = h.pages_of(chunk);
        if region.intersects_hole(&pages) {
            return Err(PromoteFailure::NotResident);
        }
        // 1. Every missing page, in one batch of store reads.
        self.fill_ranges(w, region, std::slice::from_ref(&pages), true);
        // 2. Every page locked, so nothing evicts, fills or dirties one
        // while the range changes hands.
        let mut locked: Vec<(usize, PageState)> = Vec::with_capacity(pages.len());
        let deadline = Instant::now() + LOCK_WAIT;
        let unlock_all = |locked: &[(usize, PageState)], to: Option<PageState>| {
            let mut waiters = false;
            for &(p, s) in locked {
                waiters |= region.pages.unlock(p, to.unwrap_or(s));
            }
            if waiters {
                self.uffd.wake(
                    region.page_addr(pages.start),
                    pages.len() * region.page_size,
                );
            }
        };
        for p in pages.clone() {
            loop {
                match region.pages.get(p) {
                    Observed::Stable(PageState::Empty) => {
                        unlock_all(&locked, None);
                        return Err(PromoteFailure::NotResident);
                    }
                    Observed::Stable(s) if region.pages.try_lock(p, s) => {
                        locked.push((p, s));
                        break;
                    }
                    Observed::Stable(_) => {}
                    Observed::Busy(_) => {
                        if Instant::now() > deadline || region.is_closing() {
                            unlock_all(&locked, None);
                            return Err(PromoteFailure::NotResident);
                        }
                        std::thread::yield_now();
                    }
                }
            }
        }
        let addr = region.page_addr(pages.start);
        // 3. No write-protected page may remain: the whole range is dirty
        // from now on, and is written back whole.
        let mut to = None;
        if region.writable {
            if let Err(e) = self.uffd.writeprotect(addr, HUGE_PAGE_SIZE, false, true) {
                unlock_all(&locked, None);
                return Err(PromoteFailure::Collapse(e));
            }
            let clean = locked
                .iter()
                .filter(|(_, s)| *s == PageState::Clean)
                .count();
            region.dirty.fetch_add(clean, Relaxed);
            to = Some(PageState::Dirty);
        }
        // 4. The collapse: the kernel copies the 512 small pages into one
        // huge page and maps it with one PMD.
        let r = mm::advise(addr, HUGE_PAGE_SIZE, MADV_COLLAPSE);
        // 5. Marked promoted while every page is still locked, so nothing
        // can evict a page of it before it counts as promoted: whatever
        // takes a page out of a promoted range demotes it first.
        if r.is_ok() {
            let pooled = self.charge_to_huge_pool(w, region, pages.start);
            h.end(chunk, if pooled { POOLED } else { PROMOTED });
            if pooled {
                self.budget_of(region).release(HUGE_PAGE_SIZE as u64);
            }
        }
        unlock_all(&locked, to);
        r.map_err(PromoteFailure::Collapse)
    }

    /// Moves a just-promoted range (its pages locked) into the huge-page
    /// pool, if the runtime has one and the region is not in it already:
    /// reserves 2 MiB there (evicting other huge pages if needed) and hands
    /// the range to the pool's policy under the key of its first page. The
    /// caller then marks the range pooled and releases the 2 MiB from the
    /// region's pool. False if there is no pool or no room in it.
    fn charge_to_huge_pool(&self, w: &mut Worker, region: &Region, first: usize) -> bool {
        let Some(pool) = self.huge.as_ref().filter(|_| !region.huge_pool) else {
            return false;
        };
        // This is the background thread: it may wait a little for room,
        // for instance while the evictor holds the pool's victims.
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            if pool.budget.try_reserve(HUGE_PAGE_SIZE as u64) {
                pool.policy.inserted(region.key(first));
                return true;
            }
            if Instant::now() > deadline || region.is_closing() || self.is_shutting_down() {
                return false;
            }
            if self.evict_batch(w, &*pool.policy, 4) == 0 {
                self.evict_signal.kick();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Demotes every promoted range holding any of `pages` (which are
    /// about to leave), as [`demote`](Self::demote) does.
    pub(crate) fn demote_range(&self, region: &Region, pages: &Range<usize>) {
        if let Some(h) = &region.huge {
            for c in h.chunks_of(pages) {
                self.demote(region, h, c);
            }
        }
    }

    /// Marks a promoted range ordinary again; true if it was promoted. A
    /// range charged to the huge-page pool moves its 2 MiB back to its
    /// region's pool (all its pages are resident: every path that takes a
    /// page out of a promoted range demotes it first) and its pages back
    /// to that pool's policy.
    pub(crate) fn demote(&self, region: &Region, h: &HugeState, chunk: usize) -> bool {
        match h.take_promoted(chunk) {
            None => false,
            Some(false) => true,
            Some(true) => {
                self.budget_of(region).charge(HUGE_PAGE_SIZE as u64);
                if let Some(pool) = &self.huge {
                    pool.budget.release(HUGE_PAGE_SIZE as u64);
                }
                let policy = self.policy_of(region);
                for p in h.pages_of(chunk) {
                    policy.inserted(region.key(p));
                }
                true
            }
        }
    }

    /// A first write to a page of a promoted range: un-protects and dirties
    /// the whole range at once, keeping the huge page whole. The caller
    /// holds `page` busy in state `was`. Returns false (nothing done, the
    /// range demoted) if another page of the range is busy or gone: the
    /// caller then dirties the page alone.
    pub(crate) fn make_range_writable(
        &self,
        region: &Region,
        h: &HugeState,
        chunk: usize,
        page: usize,
        was: PageState,
    ) -> bool {
        let pages = h.pages_of(chunk);
        let mut locked: Vec<(usize, PageState)> = Vec::with_capacity(pages.len());
        locked.push((page, was));
        for p in pages.clone().filter(|&p| p != page) {
            let ok = match region.pages.get(p) {
                Observed::Stable(s @ (PageState::Clean | PageState::Dirty)) => {
                    region.pages.try_lock(p, s).then_some(s)
                }
                _ => None,
            };
            match ok {
                Some(s) => locked.push((p, s)),
                None => {
                    for &(q, s) in &locked[1..] {
                        if region.pages.unlock(q, s) {
                            self.uffd.wake(region.page_addr(q), region.page_size);
                        }
                    }
                    self.demote(region, h, chunk);
                    return false;
                }
            }
        }
        let addr = region.page_addr(pages.start);
        if self
            .uffd
            .writeprotect(addr, HUGE_PAGE_SIZE, false, true)
            .is_err()
        {
            for &(q, s) in &locked[1..] {
                if region.pages.unlock(q, s) {
                    self.uffd.wake(region.page_addr(q), region.page_size);
                }
            }
            self.demote(region, h, chunk);
            return false;
        }
        let clean = locked
            .iter()
            .filter(|(_, s)| *s == PageState::Clean)
            .count();
        region.dirty.fetch_add(clean, Relaxed);
        self.stats.wp_faults.fetch_add(1, Relaxed);
        region.stats.hits.fetch_add(1, Relaxed);
        for &(q, _) in &locked {
            let _ = region.pages.unlock(q, PageState::Dirty);
        }
        // The writer and any waiter on the range.
        self.uffd.wake(addr, HUGE_PAGE_SIZE);
        true
    }
}

/// Free 2 MiB hugetlbfs pages in the system pool now.
pub(crate) fn free_huge_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefetch::Advice;

    fn fault(thread: u32, page: u64, kind: FaultKind) -> Fault {
        Fault {
            page,
            pages: 10_000,
            offset: page as usize * 4096,
            write: false,
            kind,
            advice: Advice::Normal,
            thread,
        }
    }

    #[test]
    fn sequential_needs_two_consecutive_faults_by_one_thread() {
        let p = PromoteSequential::new();
        assert!(!p.should_promote(&fault(7, 10, FaultKind::Miss)));
        // Another thread's next page is not sequential for thread 7.
        assert!(!p.should_promote(&fault(8, 11, FaultKind::Miss)));
        assert!(p.should_promote(&fault(7, 11, FaultKind::Miss)));
        assert!(!p.should_promote(&fault(7, 13, FaultKind::Miss)));
        assert!(p.should_promote(&fault(8, 12, FaultKind::Miss)));
    }

    #[test]
    fn always_promotes_misses_only() {
        assert!(PromoteAlways.should_promote(&fault(1, 3, FaultKind::Miss)));
        assert!(!PromoteAlways.should_promote(&fault(1, 3, FaultKind::Resolved)));
    }

    #[test]
    fn ranges_are_claimed_once_and_advice_wins_by_recency() {
        let h = HugeState::new(2000, 4096, None);
        assert_eq!(h.chunk_of(511), Some(0));
        assert_eq!(
            h.chunk_of(1536),
            None,
            "a partial last range is not promotable"
        );
        assert!(h.begin(1));
        assert!(!h.begin(1), "a second promotion of one range coalesces");
        h.end(1, PROMOTED);
        assert!(h.is_promoted(1) && !h.begin(1));
        assert_eq!(h.take_promoted(1), Some(false));
        assert_eq!(h.take_promoted(1), None);
        h.end(1, POOLED);
        assert!(h.is_promoted(1) && h.is_pooled(1));
        assert_eq!(h.take_promoted(1), Some(true));
        assert!(!h.is_promoted(1) && h.begin(1));
        h.abandon(1);
        assert!(h.begin(1), "an abandoned claim can be taken again");
        assert_eq!(h.chunks_of(&(600..1100)), 1..3);
        assert_eq!(h.chunks_of(&(1500..1600)), 2..3);
        assert!(
            h.chunks_of(&(1540..1600)).is_empty(),
            "past the last whole range"
        );
        assert_eq!(h.chunks_of(&(5..5)), 0..0);
        h.set_advice(0..1024, true);
        h.set_advice(512..600, false);
        assert_eq!(h.advice_for(10), Some(true));
        assert_eq!(h.advice_for(550), Some(false));
        assert_eq!(h.advice_for(1500), None);
        assert_eq!(
            PromoteKind::from_name(" Sequential"),
            Some(PromoteKind::Sequential)
        );
    }
}
