//! Asynchronous dirty tracking ([`DirtyTracking::Async`]): with
//! `UFFD_FEATURE_WP_ASYNC` the kernel resolves a write to a
//! write-protected page itself (it clears the page's uffd-wp bit, as a
//! first write under `mmap` costs), so a page umio holds Clean may have
//! been written without umio hearing of it. umio reads the bits back with
//! `PAGEMAP_SCAN` (`sys/pagemap.rs`) wherever it relies on a page being
//! clean:
//!
//! - before a flush or write-back ([`harvest`](Shared::harvest)): written
//!   pages become Dirty, then are written as any dirty page;
//! - when it evicts pages ([`learn_locked`](Shared::learn_locked)), once
//!   before the write-back, for the victims written since they were clean,
//!   and once more just before the pages are dropped, for writes made
//!   while the dirty ones were being written (those pages are kept, dirty);
//! - before a partial unmap writes its range back (`unmap.rs`);
//! - on each evictor round, at most every [`HARVEST_EVERY_MS`], over
//!   every writable region, so that the dirty count, and with it the
//!   dirty limit, follows the writes ([`harvest_all`](Shared::harvest_all)).
//!
//! The invariant: a page umio holds Clean is write-protected from the
//! moment it was filled (`UFFDIO_COPY_MODE_WP`) or written back
//! (`UFFDIO_WRITEPROTECT` before the store reads it), so a clear uffd-wp
//! bit on a Clean page means a write since. A page umio holds Dirty is
//! left unprotected until written back: writes to it cost nothing more.
//! A scan reports only pages that hold data (present or swapped): the
//! kernel calls a page without any (never filled, dropped, moved away: a
//! none PTE, which has no uffd-wp bit) written. Taken for a written page,
//! such a page was kept Dirty while absent; its write-back then
//! write-protected it (with `WP_ASYNC` the kernel turns `WP_UNPOPULATED`
//! on: an absent page gets a uffd-wp marker) and read it from the mapping,
//! a missing fault on a page the writing thread held busy, which never
//! ended.
//!
//! The scans only read the bits (no `PM_SCAN_WP_MATCHING`): the
//! re-protection is the write-back's `UFFDIO_WRITEPROTECT`, made by the
//! thread holding the page busy, so no scan can take a bit another thread
//! needed.
//!
//! What the sync path gives and this one does not: a write is not held
//! while its page is being evicted. A write that lands between the last
//! scan of an eviction and its `MADV_DONTNEED` (a window of one system
//! call, on a page the policy chose as cold) is lost; and a write to a
//! resident clean page is never refused (no fault reaches umio): while a
//! region's store fails its writes, such a write stays in the cache,
//! dirty, and the next flush reports the failure. Write misses are
//! refused (SIGBUS) and held at the dirty limit as with sync tracking.
//!
//! [`DirtyTracking::Async`]: crate::DirtyTracking::Async

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

use umio_cache::PageState;

use crate::move_scratch::{MoveScratch, SCRATCH_BYTES};
use crate::region::Region;
use crate::shared::Shared;

/// Evictor rounds look for written pages at most this often.
pub(crate) const HARVEST_EVERY_MS: u64 = 50;

/// Locked pages further apart than this are scanned separately.
const SCAN_GAP: usize = 64;

impl Shared {
    /// With asynchronous dirty tracking, calls `f` on each entry of
    /// `locked` (pages of `region` held busy by the caller, sorted by
    /// page, each with its state) whose page was written since it was last
    /// write-protected. Nothing without it, or for a read-only region.
    /// A failed scan reports every page (written back rather than lost).
    /// Signal-safe: no allocation, system calls only.
    pub(crate) fn scan_locked(
        &self,
        region: &Region,
        locked: &mut [(usize, PageState)],
        mut f: impl FnMut(&mut (usize, PageState)),
    ) {
        let Some(pm) = self.pagemap() else { return };
        if !region.writable {
            return;
        }
        let mut i = 0;
        while i < locked.len() {
            // A group of entries close together: one scan over their span.
            let mut j = i + 1;
            while j < locked.len() && locked[j].0 <= locked[j - 1].0 + SCAN_GAP {
                j += 1;
            }
            let group = &mut locked[i..j];
            let (first, last) = (group[0].0, group[group.len() - 1].0);
            let r = pm.scan(
                region.page_addr(first),
                region.page_addr(last + 1),
                false,
                |s, e| {
                    let from = region.page_of(s);
                    let to = region.page_of(e - 1);
                    for p in from..=to {
                        if let Ok(k) = group.binary_search_by_key(&p, |x| x.0) {
                            f(&mut group[k]);
                        }
                    }
                },
            );
            match r {
                Ok(calls) => {
                    self.counters().dirty_scans.fetch_add(calls, Relaxed);
                }
                Err(_) => group.iter_mut().for_each(&mut f),
            }
            i = j;
        }
    }

    /// [`scan_locked`](Shared::scan_locked) for pages held Clean: those
    /// written become Dirty (counted). Returns how many.
    pub(crate) fn learn_locked(&self, region: &Region, locked: &mut [(usize, PageState)]) -> usize {
        let mut n = 0;
        self.scan_locked(region, locked, |e| {
            if e.1 == PageState::Clean {
                e.1 = PageState::Dirty;
                n += 1;
            }
        });
        if n > 0 {
            self.count_dirty(region, n);
            self.counters()
                .scan_dirtied_pages
                .fetch_add(n as u64, Relaxed);
        }
        n
    }

    /// With asynchronous dirty tracking, makes Dirty (counted) the pages
    /// of `pages` umio holds Clean that were written since; pages other
    /// threads hold are theirs to look at. The caller is inside the region
    /// (or its unmap).
    pub(crate) fn harvest(&self, region: &Region, pages: Range<usize>) {
        let Some(pm) = self.pagemap() else { return };
        if !region.writable || pages.is_empty() {
            return;
        }
        let mut n = 0u64;
        let r = pm.scan(
            region.page_addr(pages.start),
            region.page_addr(pages.end),
            false,
            |s, e| {
                let from = region.page_of(s).max(pages.start);
                let to = (region.page_of(e - 1) + 1).min(pages.end);
                for p in from..to {
                    if region.pages.try_lock(p, PageState::Clean) {
                        self.count_dirty(region, 1);
                        n += 1;
                        if region.pages.unlock(p, PageState::Dirty) {
                            self.wake(region, region.page_addr(p), region.page_size);
                        }
                    }
                }
            },
        );
        match r {
            Ok(calls) => {
                self.counters().dirty_scans.fetch_add(calls, Relaxed);
            }
            Err(e) => log::error!(
                "umio: PAGEMAP_SCAN of region {} failed (errno {e}): pages written since the \
                 last scan are found by the next one",
                region.id
            ),
        }
        self.counters().scan_dirtied_pages.fetch_add(n, Relaxed);
    }

    /// [`harvest`](Shared::harvest) of every writable region, at most
    /// every [`HARVEST_EVERY_MS`]; then a pool past its dirty limit sets
    /// its evictors to write back. By the evictors, each round.
    pub(crate) fn harvest_all(&self) {
        if self.pagemap().is_none() {
            return;
        }
        let now = self.now_ms();
        let last = self.harvested_at.load(Relaxed);
        if now.saturating_sub(last) < HARVEST_EVERY_MS
            || self
                .harvested_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let table = self.regions();
        for region in table.all() {
            if !region.writable {
                continue;
            }
            let Some(_g) = region.enter() else { continue };
            self.harvest(region, 0..region.pages.len());
        }
        for pool in std::iter::once(self.pool()).chain(self.huge_pool()) {
            if pool.dirty.load(Relaxed) > pool.dirty_limit() && self.cfg().evictors > 0 {
                pool.dirty_wanted.store(true, Relaxed);
            }
        }
    }
}

impl Shared {
    /// Asynchronous dirty tracking, just before an eviction drops the
    /// pages of `locked` (held busy, all clean now: written back or never
    /// written): takes them out of the region atomically, so that a write
    /// made up to the last moment is either seen or faults (and waits for
    /// the eviction like any access to a busy page). For each run of
    /// victims: one scan (pages written since they were write-protected
    /// stay); a copy of the others; `UFFDIO_MOVE` of them to the scratch
    /// (from then on an access faults as missing); a comparison of what
    /// moved with the copy: a page that differs was written between the
    /// scan and the move and is put back, dirty. The pages to keep, dirty,
    /// are marked `Empty` in `locked`; the caller unlocks them. Returns
    /// how many. What moved is learned by looking at the scratch, not
    /// from the count `UFFDIO_MOVE` gives back (a move the kernel retried
    /// may have taken pages it did not count): a page found there in part
    /// is put back and kept, dirty. Pages the kernel refuses to move for now (`EAGAIN`,
    /// `EBUSY`) are given back as they are, their entries marked
    /// `usize::MAX` (the caller forgets them); those it cannot move are
    /// scanned once more and dropped unless written. Where the
    /// scratch cannot be used (a promoted 2 MiB range, a hugetlb region,
    /// remove events on, a kernel without `UFFDIO_MOVE`) the victims are
    /// only scanned: a write between that scan and the caller's
    /// `MADV_DONTNEED` is lost there. `None`: a signal handler found the
    /// scratch busy, and nothing may be dropped (the caller gives the
    /// pages back as they are).
    pub(crate) fn snatch_locked(
        &self,
        region: &Region,
        locked: &mut [(usize, PageState)],
        in_signal: bool,
        whole_pages: bool,
    ) -> Option<usize> {
        if self.pagemap().is_none() || !region.writable {
            return Some(0);
        }
        let guard = match (self.move_scratch(), region.hugetlb || !whole_pages) {
            (Some(m), false) if in_signal => Some(m.try_lock().ok()?),
            (Some(m), false) => Some(m.lock().unwrap_or_else(|e| e.into_inner())),
            _ => None,
        };
        let Some(mut scratch) = guard else {
            let mut kept = 0;
            self.scan_locked(region, locked, |e| {
                e.1 = PageState::Empty;
                kept += 1;
            });
            return Some(kept);
        };
        let ps = region.page_size;
        let per = (SCRATCH_BYTES / ps).max(1);
        let mut kept = 0;
        let mut i = 0;
        while i < locked.len() {
            // A chunk: consecutive pages, at most the scratch's size.
            let mut j = i + 1;
            while j < locked.len() && locked[j].0 == locked[j - 1].0 + 1 && j - i < per {
                j += 1;
            }
            kept += self.snatch_run(region, &mut locked[i..j], &mut scratch);
            i = j;
        }
        Some(kept)
    }

    /// [`snatch_locked`](Shared::snatch_locked) of one run of consecutive
    /// pages that fits the scratch.
    fn snatch_run(
        &self,
        region: &Region,
        run: &mut [(usize, PageState)],
        s: &mut MoveScratch,
    ) -> usize {
        let ps = region.page_size;
        let first = run[0].0;
        let base = region.page_addr(first);
        let len = run.len() * ps;
        if ps * run.len() > SCRATCH_BYTES {
            return 0;
        }
        // 0: absent, in part or whole (left to the caller's drop); 1:
        // present, unwritten; 2: written (kept).
        let mut what = [0u8; 512];
        let what = &mut what[..run.len().min(512)];
        // Kernel pages present per region page.
        let mut present = [0u16; 512];
        let sub = (ps / crate::MIN_PAGE_SIZE) as u16;
        let pm = self.pagemap().expect("async tracking");
        let scanned = pm.scan_present(base, base + len, |a, e, written| {
            let mut at = a;
            while at < e {
                let k = region.page_of(at) - first;
                if k < what.len() {
                    present[k] += 1;
                    if written {
                        what[k] = 2;
                    }
                }
                at += crate::MIN_PAGE_SIZE;
            }
        });
        match scanned {
            Ok(n) => {
                self.counters().dirty_scans.fetch_add(n, Relaxed);
                for (w, &n) in what.iter_mut().zip(present.iter()) {
                    if *w == 0 && n == sub {
                        *w = 1;
                    }
                }
            }
            // Nothing known: keep them all (their writes are found later).
            Err(_) => what.iter_mut().for_each(|w| *w = 2),
        }
        // The copy of what is to move, before the scan that says it was
        // not written: a write after the copy shows in the scan (if before
        // it) or in the comparison (if after it).
        for (k, _) in what.iter().enumerate().filter(|(_, w)| **w == 1) {
            let at = k * ps;
            // SAFETY: the page is present (just scanned), held busy by this
            // thread (nothing fills, evicts or unmaps it) and private to
            // this process; `copy` has room for the run.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base + at) as *const u8,
                    s.copy[at..at + ps].as_mut_ptr(),
                    ps,
                );
            }
        }
        let rescanned = pm.scan(base, base + len, false, |a, e| {
            for p in region.page_of(a)..=region.page_of(e - 1) {
                if let Some(k) = p.checked_sub(first).filter(|&k| k < what.len()) {
                    what[k] = 2;
                }
            }
        });
        match rescanned {
            Ok(n) => {
                self.counters().dirty_scans.fetch_add(n, Relaxed);
            }
            Err(_) => what.iter_mut().for_each(|w| *w = 2),
        }
        let mut kept = 0;
        let mut k = 0;
        while k < what.len() {
            if what[k] != 1 {
                if what[k] == 2 {
                    run[k].1 = PageState::Empty;
                    kept += 1;
                }
                k += 1;
                continue;
            }
            let mut m = k + 1;
            while m < what.len() && what[m] == 1 {
                m += 1;
            }
            let (from, n) = (base + k * ps, (m - k) * ps);
            let off = k * ps;
            let refused = self
                .scratch_uffd()
                .expect("the scratch is registered")
                .move_pages(s.area + off, from, n)
                .err();
            // Which kernel pages are in the scratch now. After a refusal
            // the count the kernel gives back is not trusted (a move it
            // retried may have taken pages it did not count): the scratch
            // is looked at; only if that fails is the count taken.
            let mut moved = [false; SCRATCH_BYTES / crate::MIN_PAGE_SIZE];
            let kps = crate::MIN_PAGE_SIZE;
            let looked = match refused {
                None => {
                    moved[off / kps..(off + n) / kps].fill(true);
                    Ok(0)
                }
                Some(_) => pm.scan_present(s.area + off, s.area + off + n, |a, e, _| {
                    moved[(a - s.area) / kps..(e - s.area) / kps].fill(true);
                }),
            };
            match looked {
                Ok(calls) => {
                    self.counters().dirty_scans.fetch_add(calls, Relaxed);
                }
                Err(_) => {
                    let counted = refused.map_or(n, |(c, _)| c);
                    moved[off / kps..(off + counted) / kps].fill(true);
                }
            }
            let refused = refused.map(|(_, e)| e);
            // Per page of the segment: kernel pages of it in the scratch.
            let in_scratch = |q: usize| {
                moved[q * ps / kps..(q + 1) * ps / kps]
                    .iter()
                    .filter(|&&b| b)
                    .count()
            };
            let mut unmoved_any = false;
            for (q, entry) in run.iter_mut().enumerate().take(m).skip(k) {
                let c = in_scratch(q);
                let at = q * ps;
                if c == 0 {
                    unmoved_any = true;
                    self.counters().unmoved_victims.fetch_add(1, Relaxed);
                    continue;
                }
                // What moved of the page (`len` bytes at `at` in the
                // scratch). SAFETY: those scratch pages just received moved
                // pages; nothing else touches the scratch while its lock is
                // held. (An absent scratch page is never read: that would
                // be a missing fault on the runtime's own descriptor.)
                let moved_bytes = |at: usize, len: usize| unsafe {
                    std::slice::from_raw_parts((s.area + at) as *const u8, len)
                };
                let back = if c == sub as usize {
                    self.counters().moved_victims.fetch_add(1, Relaxed);
                    let now = moved_bytes(at, ps);
                    if now == &s.copy[at..at + ps] {
                        continue;
                    }
                    // Written between the scan and the move: back, dirty.
                    self.uffd_of(region).copy(base + at, now, false, true)
                } else {
                    // Moved in part: what moved goes back (the rest never
                    // left), and the page stays, dirty.
                    self.counters().unmoved_victims.fetch_add(1, Relaxed);
                    let mut r = Ok(());
                    for i in (0..ps / kps).filter(|i| moved[at / kps + i]) {
                        let b = self.uffd_of(region).copy(
                            base + at + i * kps,
                            moved_bytes(at + i * kps, kps),
                            false,
                            true,
                        );
                        r = r.and(b);
                    }
                    r
                };
                if let Err(e) = back {
                    crate::report::error(crate::report::Report::CopyFailed {
                        region: region.id,
                        page: (first + q) as u64,
                        errno: e,
                    });
                }
                entry.1 = PageState::Empty;
                kept += 1;
            }
            // What did not move: for a passing refusal (a page the kernel
            // is busy with), given back as it is (not evicted now, nothing
            // lost: a write shows in a later scan), its entry marked
            // `usize::MAX` for the caller to forget. For another (the
            // kernel cannot move such memory), looked at once more and
            // left to the caller's drop unless written.
            if unmoved_any && matches!(refused, Some(libc::EAGAIN | libc::EBUSY)) {
                for q in (k..m).filter(|&q| in_scratch(q) == 0) {
                    let entry = &mut run[q];
                    if region.pages.unlock(entry.0, PageState::Clean) {
                        self.wake(region, region.page_addr(entry.0), ps);
                    }
                    self.policy_of(region).restore(region.key(entry.0));
                    entry.0 = usize::MAX;
                }
            } else if unmoved_any {
                let r = pm.scan(base + k * ps, base + m * ps, false, |a, e| {
                    for p in region.page_of(a)..=region.page_of(e - 1) {
                        if let Some(q) = p.checked_sub(first).filter(|&q| q < what.len()) {
                            what[q] = 2;
                        }
                    }
                });
                for q in (k..m).filter(|&q| in_scratch(q) == 0) {
                    if r.is_err() || what[q] == 2 {
                        run[q].1 = PageState::Empty;
                        kept += 1;
                    }
                }
            }
            k = m;
        }
        let _ = crate::sys::mm::advise(s.area, len, libc::MADV_DONTNEED);
        kept
    }
}
