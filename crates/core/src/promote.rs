//! Promotion of a 2 MiB range to a transparent huge page, on the prefetch
//! thread (see `huge.rs` for the design and the policies), and its undoing:
//! demotion when a page of the range leaves, and the first write to a
//! promoted range, which dirties it whole.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use umio_cache::{Observed, PageState};

use crate::huge::{HUGE_PAGE_SIZE, HugeState, NORMAL, POOLED, PROMOTED};
use crate::prefetch::{Fault, FaultKind, FetchList};
use crate::region::Region;
use crate::scratch::Scratch;
use crate::shared::{PrefetchJob, Shared};
use crate::sys::mm;

/// `MADV_COLLAPSE` (Linux 6.1).
const MADV_COLLAPSE: i32 = 25;

/// How long a promotion waits for a page another thread holds.
const LOCK_WAIT: Duration = Duration::from_millis(200);
/// Collapses tried again after `EAGAIN`.
const COLLAPSE_RETRIES: usize = 3;
/// How long a promoted range waits for room in the huge-page pool before
/// it stays in its region's pool.
const POOL_WAIT: Duration = Duration::from_millis(200);

/// Why a promotion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PromoteFailure {
    /// A page of the range could not be filled or stayed busy: the cache is
    /// too small, a store read failed, or the range is being unmapped.
    NotResident,
    /// The kernel refused the collapse (errno kept in the stats).
    Collapse(i32),
}

impl Shared {
    /// Shows a resolved fault to the region's promotion policy and queues
    /// the promotion it asks for on the background thread.
    /// `in_signal`: called from a signal handler, which must not
    /// allocate (the job is dropped if the queue is full).
    pub(crate) fn consider_promotion(&self, region: &Arc<Region>, fault: &Fault, in_signal: bool) {
        let Some(h) = &region.huge else { return };
        let page = fault.page as usize;
        let Some(chunk) = h.chunk_of(page) else {
            return;
        };
        if !h.is_normal(chunk) {
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
            self.counters().promotions_coalesced.fetch_add(1, Relaxed);
            return;
        }
        let job = PrefetchJob {
            region: region.clone(),
            pages: Vec::new(),
            fetch: FetchList::new(),
            promote: Some(chunk),
            locked: false,
        };
        if in_signal {
            if !self.jobs().push_without_growing(job) {
                h.end(chunk, NORMAL);
            }
        } else {
            self.jobs().push(job);
        }
    }

    /// Promotes one claimed 2 MiB range: fill, lock, un-protect, collapse.
    pub(crate) fn promote(&self, w: &mut Scratch, region: &Region, chunk: usize) {
        let Some(h) = &region.huge else { return };
        self.counters().promotions.fetch_add(1, Relaxed);
        let result = self.promote_locked(w, region, h, chunk);
        match result {
            // Marked promoted by `promote_locked`, pages still locked.
            Ok(()) => {
                self.counters().promotions_done.fetch_add(1, Relaxed);
            }
            Err(f) => {
                match f {
                    PromoteFailure::NotResident => self
                        .counters()
                        .promotions_not_resident
                        .fetch_add(1, Relaxed),
                    PromoteFailure::Collapse(e) => {
                        self.counters()
                            .last_promotion_errno
                            .store(e as u64, Relaxed);
                        self.counters().promotions_refused.fetch_add(1, Relaxed)
                    }
                };
                log::debug!("umio: promotion of range {chunk} failed: {f:?}");
                h.end(chunk, NORMAL);
            }
        }
    }

    fn promote_locked(
        &self,
        w: &mut Scratch,
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
                self.wake(
                    region,
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
            if let Err(e) = self
                .uffd_of(region)
                .writeprotect(addr, HUGE_PAGE_SIZE, false, true)
            {
                unlock_all(&locked, None);
                return Err(PromoteFailure::Collapse(e));
            }
            let clean = locked
                .iter()
                .filter(|(_, s)| *s == PageState::Clean)
                .count();
            self.count_dirty(region, clean);
            to = Some(PageState::Dirty);
        }
        // 4. The collapse: the kernel copies the 512 small pages into one
        // huge page and maps it with one PMD.
        // EAGAIN is a passing state (a page the kernel could not isolate
        // or lock just now, a busy LRU): tried again a few times.
        let mut r = mm::advise(addr, HUGE_PAGE_SIZE, MADV_COLLAPSE);
        for _ in 0..COLLAPSE_RETRIES {
            if r != Err(libc::EAGAIN) {
                break;
            }
            std::thread::yield_now();
            r = mm::advise(addr, HUGE_PAGE_SIZE, MADV_COLLAPSE);
        }
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
    fn charge_to_huge_pool(&self, w: &mut Scratch, region: &Region, first: usize) -> bool {
        let Some(pool) = self.huge_pool().filter(|_| !region.huge_pool) else {
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
            // One range makes room for one range: a larger batch would
            // evict more of the pool than this promotion needs.
            if self.evict_batch(w, &*pool.policy, 1) == 0 {
                self.kick_evictors();
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
                if let Some(pool) = self.huge_pool() {
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
    /// caller then dirties the page alone. `locked`: the caller's scratch
    /// list (reserved in advance: this runs in signal handlers too).
    pub(crate) fn make_range_writable(
        &self,
        locked: &mut Vec<(usize, PageState)>,
        region: &Region,
        h: &HugeState,
        chunk: usize,
        page: usize,
        was: PageState,
    ) -> bool {
        let pages = h.pages_of(chunk);
        locked.clear();
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
                            self.wake(region, region.page_addr(q), region.page_size);
                        }
                    }
                    self.demote(region, h, chunk);
                    return false;
                }
            }
        }
        let addr = region.page_addr(pages.start);
        if self
            .uffd_of(region)
            .writeprotect(addr, HUGE_PAGE_SIZE, false, true)
            .is_err()
        {
            for &(q, s) in &locked[1..] {
                if region.pages.unlock(q, s) {
                    self.wake(region, region.page_addr(q), region.page_size);
                }
            }
            self.demote(region, h, chunk);
            return false;
        }
        let clean = locked
            .iter()
            .filter(|(_, s)| *s == PageState::Clean)
            .count();
        self.count_dirty(region, clean);
        self.counters().wp_faults.fetch_add(1, Relaxed);
        region.stats.hits.fetch_add(1, Relaxed);
        for &(q, _) in locked.iter() {
            let _ = region.pages.unlock(q, PageState::Dirty);
        }
        locked.clear();
        // The writer and any waiter on the range.
        self.wake(region, addr, HUGE_PAGE_SIZE);
        true
    }
}
