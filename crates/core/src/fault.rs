//! The fault path's entry: a fault event read by a filler becomes a fill
//! (a miss, in `fill.rs`), a coalesced wait on another thread's fill, a
//! stale event, or a first write to a clean page (a write-protect fault,
//! handled here). See `docs/ARCHITECTURE.md`, "The fault path".
//!
//! The thread that reads an event resolves it, store read included, so a
//! miss costs one hand-off (faulting thread to filler and back), never two.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use umio_cache::{Observed, PageState, Touch};

use crate::in_thread::IN_THREAD_WAIT;
use crate::prefetch::FaultKind;
use crate::region::Region;
use crate::report::{self, Report};
use crate::runs::per_vma;
use crate::scratch::Scratch;
use crate::shared::Shared;
use crate::sys::mm;
use crate::sys::uffd::{PAGEFAULT_FLAG_WP, PAGEFAULT_FLAG_WRITE};

impl crate::in_thread::Runtime for Shared {
    fn count_in_thread_fault_while_unmapping(&self) {
        Shared::count_in_thread_fault_while_unmapping(self)
    }

    fn serve_in_thread(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        addr: usize,
        write: Option<bool>,
        thread: u32,
    ) -> bool {
        Shared::serve_in_thread(self, w, region, addr, write, thread)
    }
}

impl Shared {
    /// Resolves one fault event.
    pub(crate) fn handle_fault(&self, w: &mut Scratch, addr: usize, flags: u64) {
        self.counters().faults.fetch_add(1, Relaxed);
        let table = self.regions();
        let Some(region) = table.find(addr) else {
            // No region here: the range was taken out of the table, maybe
            // before its memory was unmapped (`unmap.rs`). Woken, the thread
            // retries: it faults again until the memory is gone, then gets
            // what an access to unmapped memory gets. Dropping the event
            // would leave it asleep for good.
            self.counters().stale.fetch_add(1, Relaxed);
            self.wake_fillers(addr & !(crate::MIN_PAGE_SIZE - 1), crate::MIN_PAGE_SIZE);
            return;
        };
        let Some(_guard) = region.enter() else {
            return;
        };
        region.stats.faults.fetch_add(1, Relaxed);
        if region.hugetlb {
            self.counters().huge_faults.fetch_add(1, Relaxed);
        }
        let page = region.page_of(addr);
        let write = flags & (PAGEFAULT_FLAG_WRITE | PAGEFAULT_FLAG_WP) != 0;
        let missing = flags & PAGEFAULT_FLAG_WP == 0;
        loop {
            match region.pages.get(page) {
                Observed::Busy(_) => {
                    // Another thread owns the page and wakes its waiters
                    // when done: the miss coalesces with its fill.
                    if region.pages.add_waiter(page) {
                        self.progress().made(w.thread);
                        region.pages.mark_referenced(page);
                        self.policy_of(region)
                            .touched(region.key(page), Touch::Coalesced);
                        self.counters().coalesced.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        self.prefetch_after(w, region, page, write, FaultKind::Coalesced);
                        return;
                    }
                }
                Observed::Stable(PageState::Empty) => {
                    if self.stale_removal_pending(region, page) {
                        // Present in part where umio holds it empty, and
                        // this reader may not drop it (`remove.rs`,
                        // `drop_later`): a fill would find it present
                        // again. The evictors drop it now and wake the
                        // thread.
                        self.counters().stale.fetch_add(1, Relaxed);
                        return;
                    }
                    if region.pages.try_lock(page, PageState::Empty) {
                        self.progress().made(w.thread);
                        if w.defer_misses
                            && let Some(entered) = region.enter_owned()
                        {
                            // Filled with the other misses of this read
                            // of events, as one batch (`misses.rs`).
                            self.defer_miss(w, entered, page, write);
                            return;
                        }
                        self.fill_fault_in_slot(w, region, page, write);
                        return;
                    }
                }
                Observed::Stable(s @ (PageState::Clean | PageState::Dirty)) => {
                    // A missing-page fault on a page umio holds resident:
                    // raised before a fill that beat this filler to it (the
                    // thread retries and finds the page, or write-protect
                    // faults), or, when the same thread keeps coming back,
                    // the kernel dropped the page's mapping behind umio's
                    // back.
                    if missing || !region.writable {
                        if missing && self.cfg().remove_events && self.removal_pending(region, page)
                        {
                            // Dropped by the program's own `madvise`, not
                            // yet settled (`remove.rs`): settling wakes the
                            // thread.
                            self.counters().stale.fetch_add(1, Relaxed);
                            return;
                        }
                        if missing && self.progress().stalled(w.thread, region.page_addr(page)) {
                            let _ = self.unstick(region, page, s);
                            return;
                        }
                        self.counters().stale.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        self.wake(region, region.page_addr(page), region.page_size);
                        self.prefetch_after(w, region, page, write, FaultKind::Resolved);
                        return;
                    }
                    if region.pages.try_lock(page, s) {
                        self.progress().made(w.thread);
                        if self.make_writable(w, region, page, s) {
                            self.prefetch_after(w, region, page, write, FaultKind::FirstWrite);
                        }
                        return;
                    }
                }
            }
        }
    }

    /// Serves, in the faulting thread (a SIGBUS handler, on a service
    /// slot: see `in_thread.rs`), a fault at `addr` of `region`, which the
    /// caller has entered ([`Region::enter`]). `write`: whether the access
    /// was a write, where the CPU says. `thread`: the caller's thread id
    /// (`gettid`, taken once per fault by the handler). Returns with the
    /// page installed, or once a wait for another thread's fill has lasted
    /// [`IN_THREAD_WAIT`] (the access is retried: it finds the page, or
    /// faults again and waits again): true. False if the fill failed: the
    /// caller delivers the SIGBUS a failed read of a kernel mapping would.
    ///
    /// The same steps as [`handle_fault`](Shared::handle_fault), but a
    /// busy page is waited for here (the thread has nowhere else to wait),
    /// and no store slot is taken: a hung store holds only the threads that
    /// touch its pages, as with `mmap`.
    pub(crate) fn serve_in_thread(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        addr: usize,
        write: Option<bool>,
        thread: u32,
    ) -> bool {
        let begin = std::time::Instant::now();
        // Traced as a filler's miss whose event read takes no time: the
        // trap's delivery ends where the handler starts.
        let read = self.trace_read_begin();
        self.trace_read(read);
        self.counters().faults.fetch_add(1, Relaxed);
        self.counters().in_thread_faults.fetch_add(1, Relaxed);
        region.stats.faults.fetch_add(1, Relaxed);
        if region.hugetlb {
            self.counters().huge_faults.fetch_add(1, Relaxed);
        }
        w.thread = thread;
        w.in_store = true;
        let served = self.serve_page_in_thread(w, region, region.page_of(addr), write);
        // A thread that may never fault again keeps no credit.
        w.credit.release_all(self.budget_of(region));
        self.counters().fault_latency.record(begin.elapsed());
        served
    }

    /// Counts, in the faulting thread, a fault on a region being unmapped
    /// (it could not be entered); the handler then waits a moment for the
    /// unmap to unregister the range and lets the access retry.
    pub(crate) fn count_in_thread_fault_while_unmapping(&self) {
        self.counters().faults.fetch_add(1, Relaxed);
        self.counters().in_thread_faults.fetch_add(1, Relaxed);
        self.counters().stale.fetch_add(1, Relaxed);
    }

    fn serve_page_in_thread(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        page: usize,
        write: Option<bool>,
    ) -> bool {
        loop {
            match region.pages.get(page) {
                Observed::Busy(_) => {
                    if region.pages.add_waiter(page) {
                        self.progress().made(w.thread);
                        self.counters().coalesced.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        self.wait_unlocked(
                            || matches!(region.pages.get(page), Observed::Busy(_)),
                            IN_THREAD_WAIT,
                        );
                        return true;
                    }
                }
                Observed::Stable(PageState::Empty) => {
                    if region.pages.try_lock(page, PageState::Empty) {
                        self.progress().made(w.thread);
                        return self.fill_fault(w, region, page, write.unwrap_or(false));
                    }
                }
                Observed::Stable(s @ (PageState::Clean | PageState::Dirty)) => {
                    // Resident: a write to a write-protected page (the CPU
                    // says so, or cannot say and a read could not have
                    // faulted), or a fault that raced with a fill (the
                    // retry finds the page), or, when the thread keeps
                    // coming back, a page the kernel dropped behind umio's
                    // back.
                    let wp = region.writable && write != Some(false);
                    if !wp {
                        if self.cfg().remove_events && self.removal_pending(region, page) {
                            // Dropped by the program's own `madvise`, not
                            // yet settled (`remove.rs`): wait, then retry.
                            self.counters().stale.fetch_add(1, Relaxed);
                            self.wait_unlocked(
                                || self.removal_pending(region, page),
                                IN_THREAD_WAIT,
                            );
                            return true;
                        }
                        if self.progress().stalled(w.thread, region.page_addr(page)) {
                            return self.unstick(region, page, s);
                        }
                        self.counters().stale.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        return true;
                    }
                    if region.pages.try_lock(page, s) {
                        self.progress().made(w.thread);
                        if !self.make_writable(w, region, page, s) {
                            return false;
                        }
                        self.prefetch_after(w, region, page, true, FaultKind::FirstWrite);
                        return true;
                    }
                }
            }
        }
    }

    /// A thread faulted [`STUCK_AFTER`] times in a row on `page`, which
    /// umio holds resident in state `was`, with nothing to install: the
    /// kernel dropped the page's mapping (an `madvise(MADV_DONTNEED)` or
    /// `MADV_FREE` umio did not make). A clean page is dropped, so that the
    /// next fault fills it again; a dirty page's changes are lost, so it is
    /// poisoned: the thread gets SIGBUS rather than the file's old bytes
    /// (with remove events on, dropped and filled again too: see
    /// `remove.rs`). Logged and counted (`no_progress_faults`).
    ///
    /// [`STUCK_AFTER`]: crate::progress::STUCK_AFTER
    ///
    /// Returns false if the thread must get SIGBUS: the in-thread service
    /// raises it itself (the page is left empty, not poisoned).
    fn unstick(&self, region: &Region, page: usize, was: PageState) -> bool {
        let (addr, ps) = (region.page_addr(page), region.page_size);
        self.demote_range(region, &(page..page + 1));
        if !region.pages.try_lock(page, was) {
            // Changed meanwhile: the thread's next fault sees what it is.
            self.wake(region, addr, ps);
            return true;
        }
        self.counters().no_progress_faults.fetch_add(1, Relaxed);
        region.stats.no_progress_faults.fetch_add(1, Relaxed);
        // With remove events on, only the program's own `madvise` drops
        // umio pages behind umio's back (a page it freed with `MADV_FREE`,
        // taken by the kernel later): its changes were given up, not lost.
        let dirty = was == PageState::Dirty && !self.cfg().remove_events;
        report::error(Report::Stuck {
            region: region.id,
            page: page as u64,
            dirty,
        });
        // A reader may not drop pages itself while remove events are on
        // (its `madvise` would wait for a reader: `remove.rs`); the page's
        // mapping is gone anyway, which is why the thread is stuck.
        if !self.reader_must_not_drop()
            && let Err(e) = mm::advise(addr, ps, libc::MADV_DONTNEED)
        {
            report::error(Report::Madvise { errno: e });
            let _ = region.pages.unlock(page, was);
            self.wake(region, addr, ps);
            return true;
        }
        if was == PageState::Dirty {
            self.count_undirty(region, 1);
        }
        self.budget_of(region).release(ps as u64);
        if dirty && !region.in_thread {
            self.poison_and_release(region, page..page + 1);
        } else {
            // The faulting thread waits for this wake, waiters registered
            // or not (fillers); in-thread, it is the caller.
            let _ = region.pages.unlock(page, PageState::Empty);
            self.wake(region, addr, ps);
        }
        !dirty
    }

    /// First write to a clean page (or a write-protected dirty one whose
    /// write-back failed): mark it dirty, then let the write through.
    /// Returns false if the write is refused (a clean page, and the store
    /// fails its writes: [`may_dirty`](Shared::may_dirty)): the writer
    /// gets SIGBUS ([`refuse_write`](Shared::refuse_write)).
    fn make_writable(&self, w: &mut Scratch, region: &Region, page: usize, was: PageState) -> bool {
        // A dirty page takes the write without more to store.
        if was == PageState::Clean {
            match self.may_dirty(region) {
                Ok(crate::fill::DirtyNow::Go) => {}
                Ok(crate::fill::DirtyNow::Wait) => {
                    // Fillers at the dirty limit: the page stays clean and
                    // the writer asleep on its fault until an evictor wakes
                    // it to try again. Full (thousands parked): let it by.
                    let addr = region.page_addr(page);
                    let pool = self.pool_of(region);
                    let mut parked = pool.parked.lock().unwrap_or_else(|e| e.into_inner());
                    if parked.len() < crate::shared::MAX_PARKED {
                        parked.push((addr, region.page_size));
                        drop(parked);
                        if region.pages.unlock(page, was) {
                            // Others waited on the busy page: woken, the
                            // writer with them, which comes back here.
                            self.wake(region, addr, region.page_size);
                        }
                        return false;
                    }
                }
                Err(_) => {
                    self.refuse_write(region, page, was, w.thread);
                    return false;
                }
            }
        }
        if let Some(h) = &region.huge
            && let Some(c) = h.chunk_of(page)
            && h.is_promoted(c)
            && self.make_range_writable(&mut w.locked, region, h, c, page, was)
        {
            region.pages.mark_referenced(page);
            self.policy_of(region)
                .touched(region.key(page), Touch::FirstWrite);
            return true;
        }
        let addr = region.page_addr(page);
        region.pages.mark_referenced(page);
        self.policy_of(region)
            .touched(region.key(page), Touch::FirstWrite);
        // DONTWAKE: the writer must not run (and, say, call `flush`) before
        // the page is counted dirty and unlocked.
        let to = match per_vma(addr, region.page_size, |at, n| {
            self.uffd_of(region).writeprotect(at, n, false, true)
        }) {
            Ok(()) => PageState::Dirty,
            Err(e) => {
                report::error(Report::WriteProtect { errno: e });
                was
            }
        };
        if was == PageState::Clean && to == PageState::Dirty {
            self.count_dirty(region, 1);
            self.counters().wp_faults.fetch_add(1, Relaxed);
            region.stats.hits.fetch_add(1, Relaxed);
            if self.predicts_writes_in(region) {
                // Evidence for the write prediction (`predict.rs`).
                region.writes.first_write(page);
            }
        }
        if was == PageState::Dirty && to == PageState::Dirty {
            // Written after all (a page filled dirty on a guess whose
            // write-back failed, write-protected since).
            region.pages.clear_guessed(page);
        }
        // The faulting thread waits for this wake, waiters registered or not.
        let _ = region.pages.unlock(page, to);
        self.wake(region, addr, region.page_size);
        true
    }
}
