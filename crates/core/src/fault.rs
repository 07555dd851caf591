//! The fault path: filler threads read fault events and resolve them.
//!
//! The thread that reads an event resolves it, store read included, so a
//! miss costs one hand-off (faulting thread to filler and back), never two.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use umio_backends::{IoRequest, StoreError};
use umio_cache::{FrameCredit, Observed, PageKey, PageState, Touch};

use crate::prefetch::{Fault, FaultKind, FetchList};
use crate::region::Region;
use crate::runtime::Shared;
use crate::spin::{ADAPTIVE_SPIN, FillerWait};
use crate::sys::mm::{self, StagingBuffer};
use crate::sys::poller::{Poller, Wake};
use crate::sys::uffd::{PAGEFAULT_FLAG_WP, PAGEFAULT_FLAG_WRITE, UffdMsg};
use crate::trace::Step;

/// Largest run of pages filled by one store read and one copy.
const MAX_FILL_RUN: usize = 2 << 20;
/// Largest batch of prefetch reads submitted at once.
const MAX_FILL_BATCH: usize = 8 << 20;
/// Most runs in one batch of store requests, whatever the store's depth.
pub(crate) const MAX_BATCH_RUNS: usize = 64;
/// How long a miss waits for cache space before it fails with SIGBUS.
const RECLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// Per-thread scratch state of fillers, evictors and flushers.
pub(crate) struct Worker {
    pub buf: StagingBuffer,
    pub credit: FrameCredit,
    pub victims: Vec<PageKey>,
    pub locked: Vec<(usize, PageState)>,
    /// Page indices of one region, reused so that eviction on the fault
    /// path does not allocate in steady state.
    pub pages: Vec<usize>,
    /// What the prefetcher asked for after a fault.
    pub fetch: FetchList,
    /// Runs of one batch of store requests.
    pub runs: Vec<Range<usize>>,
    /// Page ranges the prefetcher asked for, sorted.
    pub fetch_pages: Vec<Range<usize>>,
    /// The thread of the fault being handled (0: unknown).
    pub thread: u32,
    /// Holds one of the current region's store slots (`store_slots`).
    pub in_store: bool,
}

impl Worker {
    pub fn new() -> Worker {
        Worker {
            buf: StagingBuffer::new(),
            credit: FrameCredit::default(),
            victims: Vec::new(),
            locked: Vec::new(),
            pages: Vec::new(),
            fetch: FetchList::new(),
            runs: Vec::new(),
            fetch_pages: Vec::new(),
            thread: 0,
            in_store: false,
        }
    }
}

pub(crate) fn filler_main(shared: Arc<Shared>) {
    let poller = match Poller::new(
        std::os::fd::AsRawFd::as_raw_fd(&shared.uffd),
        &shared.shutdown_fd,
    ) {
        Ok(p) => p,
        Err(e) => {
            log::error!("umio filler cannot poll: errno {e}");
            return;
        }
    };
    let mut w = Worker::new();
    let mut msgs = vec![UffdMsg::default(); shared.cfg.max_fault_events];
    // After handling what one read returned, a filler either goes back to
    // `epoll_wait` (which returns at once if more events are pending: a
    // second, empty `read` per fault would be one system call more) or
    // polls for the next event for a while (`Builder::filler_spin`; by
    // default the runtime measures which is faster, see `spin.rs`).
    let mut polling = false;
    while poller.wait() == Wake::Faults {
        let mut idle_since: Option<Instant> = None;
        loop {
            let read_begin = shared.trace_read_begin();
            let n = match shared.uffd.read_messages(&mut msgs) {
                Ok(n) => n,
                Err(e) => {
                    log::error!("umio: reading fault events failed: errno {e}");
                    0
                }
            };
            if n == 0 {
                let t = *idle_since.get_or_insert_with(Instant::now);
                let spin = match shared.cfg.filler_wait {
                    FillerWait::Fixed(d) => d,
                    FillerWait::Adaptive if polling => ADAPTIVE_SPIN,
                    FillerWait::Adaptive => Duration::ZERO,
                };
                if t.elapsed() >= spin || shared.is_shutting_down() {
                    break;
                }
                // Yield rather than spin: a polling filler that shares a
                // CPU with the faulting thread (the scheduler has not
                // moved it away) must not keep that thread from running.
                std::thread::yield_now();
                continue;
            }
            idle_since = None;
            shared.trace_read(read_begin);
            let read_done = Instant::now();
            for m in &msgs[..n] {
                if let Some((addr, flags)) = m.pagefault() {
                    w.thread = m.thread_id();
                    shared.handle_fault(&mut w, addr, flags);
                    shared.stats.fault_latency.record(read_done.elapsed());
                }
            }
            let poll_next = match shared.cfg.filler_wait {
                FillerWait::Fixed(d) => !d.is_zero(),
                FillerWait::Adaptive => {
                    shared.spin.record(n as u32);
                    polling = shared.spin.start(polling);
                    polling
                }
            };
            if !poll_next && n < msgs.len() {
                break;
            }
        }
        if polling {
            shared.spin.stop();
            polling = false;
        }
    }
    // Credit (at most `credit_batch` bytes) is kept across wake-ups so that
    // most misses touch no shared counter; it goes back at exit.
    w.credit.release_all(&shared.budget);
}

pub(crate) fn prefetch_main(shared: Arc<Shared>) {
    let mut w = Worker::new();
    loop {
        let job = {
            let mut q = shared
                .prefetch_jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            loop {
                if shared.is_shutting_down() {
                    return;
                }
                if let Some(j) = q.pop_front() {
                    break j;
                }
                q = shared
                    .prefetch_signal
                    .wait(q)
                    .unwrap_or_else(|e| e.into_inner());
            }
        };
        if let Some(_g) = job.region.enter() {
            match job.promote {
                Some(chunk) => shared.promote(&mut w, &job.region, chunk),
                None => {
                    shared.fill_ranges(&mut w, &job.region, &job.pages, true);
                }
            }
        } else if let (Some(chunk), Some(h)) = (job.promote, &job.region.huge) {
            // Being unmapped: give the claim back.
            h.abandon(chunk);
        }
        w.credit.release_all(&shared.budget);
    }
}

impl Shared {
    /// Resolves one fault event.
    pub(crate) fn handle_fault(&self, w: &mut Worker, addr: usize, flags: u64) {
        self.stats.faults.fetch_add(1, Relaxed);
        let table = self.regions.load();
        let Some(region) = table.find(addr) else {
            // Unmapped meanwhile: unregistering woke the thread.
            self.stats.stale.fetch_add(1, Relaxed);
            return;
        };
        let Some(_guard) = region.enter() else {
            return;
        };
        region.stats.faults.fetch_add(1, Relaxed);
        if region.hugetlb {
            self.stats.huge_faults.fetch_add(1, Relaxed);
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
                        self.progress.made(w.thread);
                        region.pages.mark_referenced(page);
                        self.policy_of(region)
                            .touched(region.key(page), Touch::Coalesced);
                        self.stats.coalesced.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        self.prefetch_after(w, region, page, write, FaultKind::Coalesced);
                        return;
                    }
                }
                Observed::Stable(PageState::Empty) => {
                    if region.pages.try_lock(page, PageState::Empty) {
                        self.progress.made(w.thread);
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
                        if missing && self.progress.stalled(w.thread, region.page_addr(page)) {
                            self.unstick(region, page, s);
                            return;
                        }
                        self.stats.stale.fetch_add(1, Relaxed);
                        region.stats.hits.fetch_add(1, Relaxed);
                        self.uffd.wake(region.page_addr(page), region.page_size);
                        self.prefetch_after(w, region, page, write, FaultKind::Resolved);
                        return;
                    }
                    if region.pages.try_lock(page, s) {
                        self.progress.made(w.thread);
                        self.make_writable(region, page, s);
                        self.prefetch_after(w, region, page, write, FaultKind::FirstWrite);
                        return;
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
    /// poisoned: the thread gets SIGBUS rather than the file's old bytes.
    /// Logged and counted (`no_progress_faults`).
    ///
    /// [`STUCK_AFTER`]: crate::progress::STUCK_AFTER
    fn unstick(&self, region: &Region, page: usize, was: PageState) {
        let (addr, ps) = (region.page_addr(page), region.page_size);
        self.demote_range(region, &(page..page + 1));
        if !region.pages.try_lock(page, was) {
            // Changed meanwhile: the thread's next fault sees what it is.
            self.uffd.wake(addr, ps);
            return;
        }
        self.stats.no_progress_faults.fetch_add(1, Relaxed);
        region.stats.no_progress_faults.fetch_add(1, Relaxed);
        let dirty = was == PageState::Dirty;
        log::error!(
            "umio: a thread faulted {} times in a row on page {page} of region {} \
             ({ps} bytes at {addr:#x}), which umio holds resident ({}): its mapping \
             was dropped behind umio's back (madvise MADV_DONTNEED or MADV_FREE on \
             umio memory?); {}",
            crate::progress::STUCK_AFTER,
            region.id,
            if dirty { "dirty" } else { "clean" },
            if dirty {
                "its unwritten changes are lost: the page is poisoned and the thread gets SIGBUS"
            } else {
                "the page is dropped and filled again"
            }
        );
        if let Err(e) = mm::advise(addr, ps, libc::MADV_DONTNEED) {
            log::error!("umio: MADV_DONTNEED failed: errno {e}");
            let _ = region.pages.unlock(page, was);
            self.uffd.wake(addr, ps);
            return;
        }
        if dirty {
            region.dirty.fetch_sub(1, Relaxed);
        }
        self.budget_of(region).release(ps as u64);
        if dirty {
            self.poison_and_release(region, page..page + 1);
        } else {
            let _ = region.pages.unlock(page, PageState::Empty);
            self.uffd.wake(addr, ps);
        }
    }

    /// First write to a clean page (or a write-protected dirty one whose
    /// write-back failed): mark it dirty, then let the write through.
    fn make_writable(&self, region: &Region, page: usize, was: PageState) {
        if let Some(h) = &region.huge
            && let Some(c) = h.chunk_of(page)
            && h.is_promoted(c)
            && self.make_range_writable(region, h, c, page, was)
        {
            region.pages.mark_referenced(page);
            self.policy_of(region)
                .touched(region.key(page), Touch::FirstWrite);
            return;
        }
        let addr = region.page_addr(page);
        region.pages.mark_referenced(page);
        self.policy_of(region)
            .touched(region.key(page), Touch::FirstWrite);
        // DONTWAKE: the writer must not run (and, say, call `flush`) before
        // the page is counted dirty and unlocked.
        let to = match per_vma(addr, region.page_size, |at, n| {
            self.uffd.writeprotect(at, n, false, true)
        }) {
            Ok(()) => PageState::Dirty,
            Err(e) => {
                log::error!("umio: UFFDIO_WRITEPROTECT (clear) failed: errno {e}");
                was
            }
        };
        if was == PageState::Clean && to == PageState::Dirty {
            region.dirty.fetch_add(1, Relaxed);
            self.stats.wp_faults.fetch_add(1, Relaxed);
            region.stats.hits.fetch_add(1, Relaxed);
        }
        // The faulting thread waits for this wake, waiters registered or not.
        let _ = region.pages.unlock(page, to);
        self.uffd.wake(addr, region.page_size);
    }

    /// Fills a missed page this thread holds busy, then reads ahead.
    pub(crate) fn fill_fault(&self, w: &mut Worker, region: &Region, page: usize, write: bool) {
        self.trace_step(Step::Filling);
        let ps = region.page_size;
        let addr = region.page_addr(page);
        if !self.reserve(w, ps as u64, true, region) {
            if region.is_closing() {
                // Being unmapped: unregistering will release the thread.
                let _ = region.pages.unlock(page, PageState::Empty);
                self.uffd.wake(addr, ps);
                return;
            }
            log::error!(
                "umio: no cache space for a miss after {RECLAIM_TIMEOUT:?}: {}",
                self.describe_cache()
            );
            self.fail_fill(region, page..page + 1);
            return;
        }
        self.trace_step(Step::Reserved);
        let src = match self.direct_source(region, page, 1) {
            // The store is memory we can read: copy straight from it.
            Some(src) => {
                self.stats.bytes_read.fetch_add(ps as u64, Relaxed);
                region.stats.bytes_read.fetch_add(ps as u64, Relaxed);
                region.stats.fills.fetch_add(1, Relaxed);
                src
            }
            None => match self.read_page(w, region, page) {
                Some(src) => src,
                None => {
                    self.budget_of(region).release(ps as u64);
                    self.fail_fill(region, page..page + 1);
                    return;
                }
            },
        };
        self.trace_step(Step::StoreRead);
        let dirty = write && region.writable;
        let wp = region.writable && !dirty;
        // SAFETY: src is ps readable bytes: our staging buffer, or the
        // store's mapping, which lives as long as the store.
        // DONTWAKE: the faulting thread must not run (and, say, call
        // `flush` after a write) before the page's state is recorded.
        let copied = unsafe { self.install(addr, src, ps, wp, true) };
        if let Err(e) = copied {
            self.budget_of(region).release(ps as u64);
            if region.is_closing() {
                // Being unmapped: unregistering will release the thread.
                let _ = region.pages.unlock(page, PageState::Empty);
                self.uffd.wake(addr, ps);
                return;
            }
            // Woken with the page still missing, the thread would fault
            // again, and again: fail it loudly instead.
            log::error!(
                "umio: UFFDIO_COPY of page {page} of region {} ({ps} bytes at {addr:#x}) \
                 failed: errno {e}; the faulting thread gets SIGBUS",
                region.id
            );
            self.stats.no_progress_faults.fetch_add(1, Relaxed);
            region.stats.no_progress_faults.fetch_add(1, Relaxed);
            self.fail_fill(region, page..page + 1);
            return;
        }
        self.trace_step(Step::Installed);
        if dirty {
            region.dirty.fetch_add(1, Relaxed);
            self.stats.write_misses.fetch_add(1, Relaxed);
        } else {
            self.stats.read_misses.fetch_add(1, Relaxed);
        }
        // The faulting thread waits for this wake, waiters registered or not.
        let _ = region.pages.unlock(
            page,
            if dirty {
                PageState::Dirty
            } else {
                PageState::Clean
            },
        );
        self.trace_step(Step::Waking);
        self.uffd.wake(addr, ps);
        self.trace_woken();
        self.policy_of(region).inserted(region.key(page));
        self.prefetch_after(w, region, page, write, FaultKind::Miss);
    }

    /// Reads one page from the store into this worker's staging buffer,
    /// zero-filled past the store's end. `None` (logged) if it failed.
    fn read_page(&self, w: &mut Worker, region: &Region, page: usize) -> Option<*const u8> {
        let ps = region.page_size;
        let valid = region.valid_bytes(page, 1);
        let buf = match w.buf.get(ps) {
            Ok(b) => b,
            Err(e) => {
                log::error!("umio: staging buffer allocation failed: errno {e}");
                return None;
            }
        };
        self.stats.store_reads.fetch_add(1, Relaxed);
        match region
            .store
            .read_at(region.store_offset(page), &mut buf[..valid])
        {
            Ok(n) => {
                self.stats.bytes_read.fetch_add(n as u64, Relaxed);
                region.stats.bytes_read.fetch_add(n as u64, Relaxed);
                region.stats.fills.fetch_add(1, Relaxed);
                buf[n..ps].fill(0);
                Some(buf.as_ptr())
            }
            Err(e) => {
                log::warn!("umio: {} store: {e}", region.store.name());
                None
            }
        }
    }

    /// Shows a resolved fault to the region's prefetcher and fills what it
    /// asks for, on this filler, after the faulting thread was woken (or,
    /// for a coalesced fault, while it waits for another thread's fill).
    /// Uses free cache only.
    fn prefetch_after(
        &self,
        w: &mut Worker,
        region: &Region,
        page: usize,
        write: bool,
        kind: FaultKind,
    ) {
        let fault = Fault {
            page: page as u64,
            pages: region.pages.len() as u64,
            offset: page * region.page_size,
            write,
            kind,
            advice: region.advice_for(page as u64),
            thread: w.thread,
        };
        self.consider_promotion(region, &fault);
        let mut fetch = std::mem::take(&mut w.fetch);
        fetch.clear();
        // A policy that panics (the application's own) loses its advice,
        // not the filler: the fault is already resolved.
        let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            region.prefetcher.on_fault(&fault, &mut fetch);
        }));
        if asked.is_err() {
            log::error!("umio: the prefetch policy panicked; nothing prefetched");
            fetch.clear();
        }
        let mut ranges = std::mem::take(&mut w.fetch_pages);
        ranges.clear();
        ranges.extend(
            fetch
                .as_slice()
                .iter()
                .map(|r| r.start as usize..r.end as usize),
        );
        ranges.sort_unstable_by_key(|r| r.start);
        if !ranges.is_empty() {
            self.fill_ranges_in_slot(w, region, &ranges);
        }
        w.fetch_pages = ranges;
        fetch.clear();
        w.fetch = fetch;
    }

    /// `UFFDIO_COPY`, discarding whatever a page of the range unexpectedly
    /// holds (EEXIST) and trying once more. A range the kernel refuses
    /// because it spans several VMAs (an `mprotect` of part of a page, or
    /// of part of a run, splits them) is copied in pieces, each within one
    /// VMA and taking its protection (see [`per_vma`]).
    ///
    /// # Safety
    /// `src..src+len` must be readable.
    unsafe fn install(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        wp: bool,
        dontwake: bool,
    ) -> Result<(), i32> {
        per_vma(dst, len, |at, n| {
            // SAFETY: `at - dst + n <= len`: within the caller's source.
            let from = unsafe { src.add(at - dst) };
            // SAFETY: forwarded from the caller, for this piece.
            match unsafe { self.uffd.copy(at, from, n, wp, dontwake) } {
                Err(libc::EEXIST) => {
                    // We hold every page of the range busy and Empty, so a
                    // present page is stale: drop it and copy again.
                    mm::advise(at, n, libc::MADV_DONTNEED)?;
                    // SAFETY: as above.
                    unsafe { self.uffd.copy(at, from, n, wp, dontwake) }
                }
                r => r,
            }
        })
    }

    /// A fill failed: poison the pages so that the faulting threads get
    /// SIGBUS, as a failed read of a kernel file mapping does, and release
    /// them. The poison stays until the pages are dropped
    /// (`Advice::DontNeed`) or the region is unmapped.
    fn fail_fill(&self, region: &Region, pages: Range<usize>) {
        self.stats.read_errors.fetch_add(1, Relaxed);
        self.poison_and_release(region, pages);
    }

    /// Poisons `pages` (held busy, nothing installed) so that the threads
    /// faulting on them get SIGBUS, unlocks them Empty and wakes those
    /// threads.
    fn poison_and_release(&self, region: &Region, pages: Range<usize>) {
        let addr = region.page_addr(pages.start);
        let len = pages.len() * region.page_size;
        if self.features.poison() {
            if let Err(e) = per_vma(addr, len, |at, n| self.uffd.poison(at, n)) {
                log::error!("umio: UFFDIO_POISON failed: errno {e}");
            }
        } else {
            log::error!(
                "umio: this kernel has no UFFDIO_POISON; a failed read is retried on the next fault"
            );
        }
        for p in pages {
            let _ = region.pages.unlock(p, PageState::Empty);
        }
        self.uffd.wake(addr, len);
    }

    /// What holds the cache, for the log when a miss cannot get space.
    fn describe_cache(&self) -> String {
        let table = self.regions.load();
        let mut out = format!(
            "{} of {} bytes used, {} pinned; policy {} tracks {} entries;",
            self.budget.used(),
            self.budget.limit(),
            self.pinned_bytes.load(Relaxed),
            self.policy.name(),
            self.policy.tracked()
        );
        if let Some(h) = &self.huge {
            out.push_str(&format!(
                " huge-page pool: {} of {} bytes used, policy {} tracks {} entries;",
                h.budget.used(),
                h.budget.limit(),
                h.policy.name(),
                h.policy.tracked()
            ));
        }
        for r in table.all() {
            let (mut clean, mut dirty, mut busy) = (0, 0, 0);
            for p in 0..r.pages.len() {
                match r.pages.get(p) {
                    Observed::Stable(PageState::Clean) => clean += 1,
                    Observed::Stable(PageState::Dirty) => dirty += 1,
                    Observed::Busy(PageState::Clean | PageState::Dirty) => busy += 1,
                    _ => {}
                }
            }
            out.push_str(&format!(
                " region {} ({} KiB pages): {clean} clean, {dirty} dirty, {busy} busy;",
                r.id,
                r.page_size >> 10
            ));
        }
        out
    }

    /// Reserves cache space. With `may_reclaim`, evicts pages itself when
    /// the cache is full (no hand-off to the evictor on the fault path)
    /// and waits up to [`RECLAIM_TIMEOUT`]; without it, fails at once.
    ///
    /// Gives up at once when `region` starts being unmapped, so that unmap
    /// never waits for a fill that waits for space.
    pub(crate) fn reserve(
        &self,
        w: &mut Worker,
        bytes: u64,
        may_reclaim: bool,
        region: &Region,
    ) -> bool {
        let mut deadline = None;
        let budget = self.budget_of(region);
        loop {
            // The huge pool's reservations are 2 MiB or more: no batching.
            let got = if region.huge_pool {
                budget.try_reserve(bytes)
            } else {
                w.credit.take(budget, bytes, self.cfg.credit_batch)
            };
            if got {
                if budget.above_high() {
                    self.evict_signal.kick();
                }
                return true;
            }
            if !may_reclaim || self.is_shutting_down() || region.is_closing() {
                return false;
            }
            self.evict_signal.kick();
            self.stats.direct_reclaims.fetch_add(1, Relaxed);
            // Victims of the huge pool are 2 MiB each: a few suffice.
            let pages = if region.huge_pool {
                (bytes / region.page_size as u64).clamp(1, 4) as usize
            } else {
                (bytes / self.cfg.page_size as u64).clamp(8, 64) as usize
            };
            if self.evict_batch(w, self.policy_of(region), pages) == 0 {
                let d = *deadline.get_or_insert_with(|| Instant::now() + RECLAIM_TIMEOUT);
                if Instant::now() > d {
                    return false;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Fills the missing pages of `ranges` (sorted, disjoint) in runs: one
    /// store request and one copy per run of pages this thread could lock,
    /// the requests of up to [`Store::queue_depth`] runs, across ranges,
    /// submitted as one batch. Pages resident or busy are skipped. Returns
    /// the number of pages filled.
    ///
    /// [`Store::queue_depth`]: umio_backends::Store::queue_depth
    pub(crate) fn fill_ranges(
        &self,
        w: &mut Worker,
        region: &Region,
        ranges: &[Range<usize>],
        may_reclaim: bool,
    ) -> usize {
        let ps = region.page_size;
        // A run's cache space is reserved whole: keep runs to a quarter of
        // the cache (at least one page: regions' pages are at most that), or
        // a run larger than the cache could never be reserved and a
        // prefetch larger than the cache would fill nothing. A batch holds
        // its runs' space until they are installed: keep it to a quarter
        // of the cache too, or reserving its last run could wait on space
        // its first runs hold.
        let quarter = usize::try_from(self.budget_of(region).limit() / 4).unwrap_or(usize::MAX);
        let max_run = (MAX_FILL_RUN.min(quarter) / ps).max(1);
        let max_batch = MAX_FILL_BATCH.min(quarter).max(ps);
        let depth = region.store.queue_depth().clamp(1, MAX_BATCH_RUNS);
        let mut runs = std::mem::take(&mut w.runs);
        let mut filled = 0;
        let mut ranges = ranges
            .iter()
            .map(|r| r.start..r.end.min(region.pages.len()))
            .filter(|r| !r.is_empty());
        let mut cur = ranges.next();
        let mut stop = false;
        while !stop {
            runs.clear();
            let mut bytes = 0;
            while let Some(pages) = cur.as_mut() {
                if runs.len() == depth || bytes >= max_batch {
                    break;
                }
                let i = pages.start;
                if i == pages.end {
                    cur = ranges.next();
                    continue;
                }
                pages.start += 1;
                if !region.pages.try_lock(i, PageState::Empty) {
                    continue;
                }
                while pages.start < pages.end
                    && pages.start - i < max_run
                    && region.pages.try_lock(pages.start, PageState::Empty)
                {
                    pages.start += 1;
                }
                let run = i..pages.start;
                if !self.reserve(w, (run.len() * ps) as u64, may_reclaim, region) {
                    self.release_run(region, run, PageState::Empty);
                    stop = true;
                    break;
                }
                bytes += run.len() * ps;
                runs.push(run);
            }
            if runs.is_empty() {
                break;
            }
            let (n, ok) = self.fill_runs(w, region, &runs);
            filled += n;
            stop |= !ok;
        }
        runs.clear();
        w.runs = runs;
        filled
    }

    /// Where a fill of `count` pages from `page` can copy from without a
    /// staging copy: the store's own mapping ([`Store::as_mapped`]), when
    /// it holds all of those pages' bytes.
    ///
    /// [`Store::as_mapped`]: umio_backends::Store::as_mapped
    fn direct_source(&self, region: &Region, page: usize, count: usize) -> Option<*const u8> {
        let mapped = region.store.as_mapped()?;
        let start = usize::try_from(region.store_offset(page)).ok()?;
        let end = start.checked_add(count * region.page_size)?;
        (end <= mapped.len()).then(|| mapped[start..end].as_ptr())
    }

    /// Reads and installs `runs`, each held busy and Empty with its cache
    /// space reserved: one batch of store requests (runs the store maps
    /// are copied straight from it), then one `UFFDIO_COPY` per run. Runs
    /// that fail are released Empty with their space. Returns the pages
    /// filled and whether every run was.
    fn fill_runs(&self, w: &mut Worker, region: &Region, runs: &[Range<usize>]) -> (usize, bool) {
        let ps = region.page_size;
        let direct: Vec<Option<*const u8>> = runs
            .iter()
            .map(|r| self.direct_source(region, r.start, r.len()))
            .collect();
        let staged: usize = runs
            .iter()
            .zip(&direct)
            .filter(|(_, d)| d.is_none())
            .map(|(r, _)| r.len() * ps)
            .sum();
        let fail = |run: &Range<usize>| {
            self.budget_of(region).release((run.len() * ps) as u64);
            self.release_run(region, run.clone(), PageState::Empty);
        };
        let buf = match w.buf.get(staged) {
            Ok(b) => &mut b[..staged],
            Err(e) => {
                log::error!("umio: staging buffer allocation failed: errno {e}");
                runs.iter().for_each(fail);
                return (0, false);
            }
        };
        // Staged runs: one request each, in one batch.
        let mut results: Vec<Option<Result<usize, StoreError>>> = vec![Some(Ok(0)); runs.len()];
        {
            let mut reqs = Vec::with_capacity(runs.len());
            let mut which = Vec::with_capacity(runs.len());
            let mut rest = &mut *buf;
            for (k, run) in runs.iter().enumerate() {
                if direct[k].is_some() {
                    continue;
                }
                let (mine, tail) = rest.split_at_mut(run.len() * ps);
                rest = tail;
                let valid = region.valid_bytes(run.start, run.len());
                reqs.push(IoRequest::read(
                    region.store_offset(run.start),
                    &mut mine[..valid],
                ));
                which.push(k);
            }
            self.stats.store_reads.fetch_add(reqs.len() as u64, Relaxed);
            if !reqs.is_empty() {
                region.store.submit(&mut reqs);
            }
            for (req, k) in reqs.iter().zip(which) {
                results[k] = req.result();
            }
        }
        let mut filled = 0;
        let mut all = true;
        let mut offset = 0;
        for (k, run) in runs.iter().enumerate() {
            let bytes = run.len() * ps;
            let src = match direct[k] {
                Some(src) => {
                    self.stats.bytes_read.fetch_add(bytes as u64, Relaxed);
                    region.stats.bytes_read.fetch_add(bytes as u64, Relaxed);
                    src
                }
                None => {
                    let mine = &mut buf[offset..offset + bytes];
                    offset += bytes;
                    match results[k] {
                        Some(Ok(n)) => {
                            self.stats.bytes_read.fetch_add(n as u64, Relaxed);
                            region.stats.bytes_read.fetch_add(n as u64, Relaxed);
                            mine[n..].fill(0);
                            mine.as_ptr()
                        }
                        r => {
                            // A prefetch failure is not reported: the fault
                            // that needs the page retries the read and
                            // reports it.
                            log::debug!("umio: prefetch read failed: {r:?}");
                            fail(run);
                            all = false;
                            continue;
                        }
                    }
                }
            };
            // SAFETY: src is `bytes` readable bytes: our staging buffer, or
            // the store's mapping, which lives as long as the store.
            let copied = unsafe {
                self.install(
                    region.page_addr(run.start),
                    src,
                    bytes,
                    region.writable,
                    true,
                )
            };
            if let Err(e) = copied {
                log::error!("umio: UFFDIO_COPY (prefetch) failed: errno {e}");
                fail(run);
                all = false;
                continue;
            }
            filled += run.len();
            // Counted before the pages show resident, so that a thread that
            // sees them resident sees them counted.
            let n = run.len() as u64;
            self.stats.prefetched_pages.fetch_add(n, Relaxed);
            region.stats.fills.fetch_add(n, Relaxed);
            region.stats.prefetched.fetch_add(n, Relaxed);
            self.release_run(region, run.clone(), PageState::Clean);
            // Only now: a policy that probes a page still busy and empty
            // drops its entry as stale, and the page would be resident with
            // no entry, never evicted.
            for p in run.clone() {
                self.policy_of(region).prefetched(region.key(p));
            }
        }
        (filled, all)
    }

    /// Unlocks a run of pages this thread holds busy into `to`, waking
    /// the threads that faulted on them meanwhile.
    pub(crate) fn release_run(&self, region: &Region, run: Range<usize>, to: PageState) {
        let mut waiters = false;
        for p in run.clone() {
            waiters |= region.pages.unlock(p, to);
        }
        if waiters {
            self.uffd
                .wake(region.page_addr(run.start), run.len() * region.page_size);
        }
    }
}

/// Runs `op` (a userfaultfd operation on a range) on `[dst, dst+len)`. The
/// kernel refuses with ENOENT a range that is not within one VMA: a
/// range of pages of one region is split into several when the
/// application changed the protection of part of it, or unmapped part of
/// it. Then `op` runs on pieces of the range, each as large as fits within
/// one VMA (found by halving, down to 4 KiB), and 4 KiB pieces in no VMA
/// of ours (unmapped: nothing can fault there) are skipped. `Err(ENOENT)`
/// if no piece was done.
pub(crate) fn per_vma(
    dst: usize,
    len: usize,
    mut op: impl FnMut(usize, usize) -> Result<(), i32>,
) -> Result<(), i32> {
    const PIECE: usize = 4096;
    match op(dst, len) {
        Err(libc::ENOENT) if len > PIECE => {}
        r => return r,
    }
    let end = dst + len;
    let mut at = dst;
    let mut n = (len / 2).next_multiple_of(PIECE);
    let mut done = false;
    while at < end {
        let piece = n.min(end - at);
        match op(at, piece) {
            Ok(()) => {
                at += piece;
                done = true;
                n = end - at;
            }
            Err(libc::ENOENT) if piece > PIECE => n = (piece / 2).next_multiple_of(PIECE),
            Err(libc::ENOENT) => {
                at += piece;
                n = end - at;
            }
            Err(e) => return Err(e),
        }
    }
    if done { Ok(()) } else { Err(libc::ENOENT) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `per_vma` over fake VMAs: `op` fails with ENOENT unless its range
    /// is within one of `vmas`; returns the pieces done.
    fn pieces(
        vmas: &[Range<usize>],
        dst: usize,
        len: usize,
    ) -> (Result<(), i32>, Vec<Range<usize>>) {
        let mut done = Vec::new();
        let r = per_vma(dst, len, |at, n| {
            if vmas.iter().any(|v| v.start <= at && at + n <= v.end) {
                done.push(at..at + n);
                Ok(())
            } else {
                Err(libc::ENOENT)
            }
        });
        (r, done)
    }

    #[test]
    fn per_vma_splits_at_vma_boundaries_and_skips_holes() {
        let k = 4096;
        // One VMA: one call.
        let whole = vec![0..32 * k, 32 * k..64 * k];
        let (r, done) = pieces(&whole, 0, 16 * k);
        assert_eq!((r, done.len(), &done[0]), (Ok(()), 1, &(0..16 * k)));
        // Split at 9 pages (an mprotect of 9 of 16 pages): every byte
        // copied, each piece within one VMA.
        let (r, done) = pieces(&[0..9 * k, 9 * k..64 * k], 0, 16 * k);
        assert_eq!(r, Ok(()));
        let mut at = 0;
        for d in &done {
            assert_eq!(d.start, at);
            assert!(d.end <= 9 * k || d.start >= 9 * k, "{d:?} crosses");
            at = d.end;
        }
        assert_eq!(at, 16 * k);
        // A hole of one page (munmap'd) is skipped; the rest is done.
        let (r, done) = pieces(&[0..5 * k, 6 * k..16 * k], 0, 16 * k);
        assert_eq!(r, Ok(()));
        let total: usize = done.iter().map(|d| d.len()).sum();
        assert_eq!(total, 15 * k);
        // Nothing mapped: ENOENT.
        assert_eq!(pieces(&[], 0, 16 * k).0, Err(libc::ENOENT));
        // Other errors are returned as they are.
        assert_eq!(
            per_vma(0, 16 * k, |_, _| Err(libc::EINVAL)),
            Err(libc::EINVAL)
        );
    }
}
