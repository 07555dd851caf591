//! Filling pages: a miss (`fill_fault`), read-ahead after a fault
//! (`prefetch_after`, here or queued on the prefetch threads) and batches of ranges (`fill_ranges`, behind
//! prefetch, pin and promotion); the cache reservation they make first,
//! with direct reclaim when the cache is full (`reserve`); installing the
//! bytes (`UFFDIO_COPY`, `install`) or, when a read fails, poisoning the
//! pages so that the faulting threads get SIGBUS; and the per-region store
//! slots that keep a hung store from taking every filler (see
//! `store_slots.rs`).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use smallvec::SmallVec;
use umio_backends::IoRequest;
use umio_cache::{Observed, PageState};

use crate::prefetch::{Fault, FaultKind, FetchList};
use crate::region::Region;
use crate::report::{self, Report};
use crate::runs::per_vma;
use crate::scratch::Scratch;
use crate::shared::{PrefetchJob, Shared, Waiting};
use crate::store_slots::Miss;
use crate::sys::mm;
use crate::trace::Step;

/// Largest run of pages filled by one store read and one copy.
const MAX_FILL_RUN: usize = 2 << 20;
/// Largest batch of prefetch reads submitted at once.
const MAX_FILL_BATCH: usize = 8 << 20;
/// Most runs in one batch of store requests, whatever the store's depth.
pub(crate) const MAX_BATCH_RUNS: usize = 64;
/// A job of the prefetch threads (a hint, merged read-ahead) fills at most
/// this fraction of the cache; see `Shared::fill_hint`.
const HINT_CACHE_FRACTION: u64 = 2;
/// Largest prefetch a filler reads itself after a fault; larger ones (a
/// read-ahead stream's grown windows) go to the prefetch threads, so that
/// the windows of several streams are read side by side while the fillers
/// serve faults. Below this a hand-off costs more than the read.
const MAX_INLINE_PREFETCH: usize = 64 << 10;
/// A wait for cache space (or for dirty pages to be written back) this
/// long is logged, once, with what holds the cache.
pub(crate) const STALL_LOGGED_AFTER: Duration = Duration::from_secs(5);
/// The first and the longest nap of a thread waiting for cache space that
/// eviction could not free at once.
const NAP_MIN: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_millis(5);

/// Bytes a waiting miss wants, counted in its pool's `wanted` while it
/// lives. Atomics only: made in signal handlers too.
struct Wanted<'a> {
    cell: &'a AtomicU64,
    bytes: u64,
}

impl<'a> Wanted<'a> {
    fn new(cell: &'a AtomicU64, bytes: u64) -> Wanted<'a> {
        cell.fetch_add(bytes, Relaxed);
        Wanted { cell, bytes }
    }
}

impl Drop for Wanted<'_> {
    fn drop(&mut self) {
        self.cell.fetch_sub(self.bytes, Relaxed);
    }
}

/// Per-run state of one batch, on the stack up to [`MAX_BATCH_RUNS`] runs:
/// a batch allocates nothing.
pub(crate) type PerRun<T> = SmallVec<[T; MAX_BATCH_RUNS]>;

/// What a write may do now ([`Shared::may_dirty`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DirtyNow {
    /// Dirty the page.
    Go,
    /// Fillers, at the dirty limit: leave the page clean and the writer
    /// asleep on its fault, parked for the evictors to wake.
    Wait,
}

/// What [`Shared::begin_fill`] made of a miss.
pub(crate) enum Begun {
    /// Read the page and install it, dirty if true.
    Go(bool),
    /// Nothing more to do (the fault was served if true).
    Done(bool),
}

impl Shared {
    /// Fills a missed page this thread holds busy, then reads ahead.
    /// Returns false if the fill failed: the page is poisoned (fillers), or
    /// left empty for the in-thread service to raise SIGBUS itself.
    pub(crate) fn fill_fault(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        page: usize,
        write: bool,
    ) -> bool {
        let write = match self.begin_fill(w, region, page, write) {
            Begun::Go(write) => write,
            Begun::Done(served) => return served,
        };
        let ps = region.page_size;
        let src = match self.direct_source(region, page, 1) {
            // The store is memory we can read: copy straight from it.
            Some(src) => {
                self.counters().bytes_read.fetch_add(ps as u64, Relaxed);
                region.stats.bytes_read.fetch_add(ps as u64, Relaxed);
                region.stats.fills.fetch_add(1, Relaxed);
                src
            }
            None => match self.read_page(w, region, page) {
                Some(src) => src,
                None => {
                    self.budget_of(region).release(ps as u64);
                    self.fail_fill(region, page..page + 1);
                    return false;
                }
            },
        };
        self.trace_step(Step::StoreRead);
        if let Err(served) = self.end_fill(region, page, write, src) {
            return served;
        }
        self.prefetch_after(w, region, page, write, FaultKind::Miss);
        true
    }

    /// The first steps of a miss's fill (the page held busy by this
    /// thread): whether it may be filled dirty ([`fill_as`](Shared::fill_as)),
    /// and its cache space, reserved with direct reclaim.
    pub(crate) fn begin_fill(
        &self,
        w: &mut Scratch,
        region: &Region,
        page: usize,
        write: bool,
    ) -> Begun {
        let write = match self.fill_as(w, region, page, write) {
            Ok(write) => write,
            Err(served) => return Begun::Done(served),
        };
        if !self.reserve(w, region.page_size as u64, true, region) {
            return Begun::Done(self.no_space_for(region, page));
        }
        self.trace_step(Step::Reserved);
        Begun::Go(write)
    }

    /// Whether a missed page this thread holds busy is filled dirty (a
    /// write that may dirty a page now: [`may_dirty`](Shared::may_dirty))
    /// or clean. `Err` if the write is refused, with what the fill returns.
    pub(crate) fn fill_as(
        &self,
        w: &mut Scratch,
        region: &Region,
        page: usize,
        write: bool,
    ) -> Result<bool, bool> {
        self.trace_step(Step::Filling);
        if !(write && region.writable) {
            return Ok(write);
        }
        // Asynchronous dirty tracking: a page filled clean takes a write
        // without a fault (the kernel resolves it), so a write miss that
        // may not dirty a page now is never filled as a read.
        let tracked_async = self.pagemap().is_some();
        match self.may_dirty(region) {
            Ok(DirtyNow::Go) => Ok(true),
            // At the dirty limit (fillers), asynchronous tracking: the miss
            // itself waits, parked (the page left empty), until an evictor
            // wakes its thread to try again. Parking full: let by.
            Ok(DirtyNow::Wait) if tracked_async && self.park_miss(region, page) => Err(true),
            Ok(DirtyNow::Wait) if tracked_async => Ok(true),
            // At the dirty limit (fillers): filled as a read; the write
            // faults again on the clean page and waits there.
            Ok(DirtyNow::Wait) => Ok(false),
            Err(_) if region.in_thread || w.thread != 0 => {
                self.refuse_write(region, page, PageState::Empty, w.thread);
                Err(false)
            }
            // A miss whose thread is not known here, under asynchronous
            // tracking: left empty; its thread faults again, and that fault
            // is refused to it.
            Err(_) if tracked_async => {
                let _ = region.pages.unlock(page, PageState::Empty);
                self.wake(region, region.page_addr(page), region.page_size);
                Err(true)
            }
            // A miss whose thread is not known here: filled as a read, its
            // write faults again, and is refused to its thread.
            Err(_) => Ok(false),
        }
    }

    /// A missed page this thread holds busy for which no cache space could
    /// be reserved (with direct reclaim): released, or failed. Returns what
    /// the fill returns (whether the fault was served).
    pub(crate) fn no_space_for(&self, region: &Region, page: usize) -> bool {
        let (addr, ps) = (region.page_addr(page), region.page_size);
        if region.is_closing()
            || region.is_taking()
            || self.reader_must_not_drop()
            || self.is_shutting_down()
        {
            // Being unmapped: unregistering will release the thread.
            // Or part of it being unmapped or dropped, which may wait
            // for this page: given back, faulted again. Or a reader that may not evict (remove events,
            // `remove.rs`): the evictors are kicked, and the thread
            // faults again.
            self.kick_evictors();
            let _ = region.pages.unlock(page, PageState::Empty);
            self.wake(region, addr, ps);
            return true;
        }
        // The page can never fit beside the pinned pages (`reserve`;
        // `umio-watch` logs why: a signal handler may not).
        self.fail_fill(region, page..page + 1);
        false
    }

    /// The last steps of a miss's fill: installs `src` (the page's bytes)
    /// at the page this thread holds busy, its space reserved, dirty if
    /// `write` ([`begin_fill`](Shared::begin_fill)'s answer), unlocks it
    /// and wakes the faulting thread. `Err` with what the fill returns
    /// (whether the fault was served) if nothing was installed.
    pub(crate) fn end_fill(
        &self,
        region: &Region,
        page: usize,
        write: bool,
        src: &[u8],
    ) -> Result<(), bool> {
        let ps = region.page_size;
        let addr = region.page_addr(page);
        // A read miss of a region whose read misses are followed by writes
        // (`predict.rs`): filled dirty, its write then costs no fault.
        let predicted = !write && self.predicts_write(region);
        let dirty = (write || predicted) && region.writable;
        let wp = region.writable && !dirty;
        // DONTWAKE: the faulting thread must not run (and, say, call
        // `flush` after a write) before the page's state is recorded.
        let copied = self.install(region, addr, src, wp, true);
        if let Err(e) = copied {
            self.budget_of(region).release(ps as u64);
            if e == libc::EEXIST && self.reader_must_not_drop() {
                // A page present that umio holds empty, handed to the
                // evictors to drop at once by `install` (a reader may
                // not). Woken now, the thread would fault again and find
                // it present again, in a loop until they came: the
                // evictors wake it once the page is dropped (`settle`),
                // and its faults meanwhile wait for that (`handle_fault`).
                let _ = region.pages.unlock(page, PageState::Empty);
                return Err(true);
            }
            if region.is_closing() {
                // Being unmapped: unregistering will release the thread.
                let _ = region.pages.unlock(page, PageState::Empty);
                self.wake(region, addr, ps);
                return Err(true);
            }
            // Woken with the page still missing, the thread would fault
            // again, and again: fail it loudly instead.
            report::error(Report::CopyFailed {
                region: region.id,
                page: page as u64,
                errno: e,
            });
            self.counters().no_progress_faults.fetch_add(1, Relaxed);
            region.stats.no_progress_faults.fetch_add(1, Relaxed);
            self.fail_fill(region, page..page + 1);
            return Err(false);
        }
        self.trace_step(Step::Installed);
        if dirty {
            self.count_dirty(region, 1);
        }
        if predicted {
            self.counters().predicted_writes.fetch_add(1, Relaxed);
            region.stats.predicted_writes.fetch_add(1, Relaxed);
            self.counters().read_misses.fetch_add(1, Relaxed);
        } else if dirty {
            self.counters().write_misses.fetch_add(1, Relaxed);
        } else {
            self.counters().read_misses.fetch_add(1, Relaxed);
            if wp && self.predicts_writes_in(region) {
                // Filled clean, write-protected: a probe of the prediction.
                region.writes.probed(page);
            }
        }
        // A miss is a use of the page (a prefetched page has had none): a
        // second-chance policy keeps it once more, time the woken thread
        // needs to get a CPU and make its access before an evictor can
        // take the page (a write miss taken first would be written back
        // without the write, then faulted in and written again).
        region.pages.mark_referenced(page);
        if predicted {
            // Dirty on a guess, perhaps never written: if its write-back
            // fails, it is compared with the store (`write_runs`).
            region.pages.mark_guessed(page);
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
        self.wake(region, addr, ps);
        self.trace_woken();
        self.policy_of(region).inserted(region.key(page));
        Ok(())
    }

    /// Whether read misses may be filled dirty on a prediction at all:
    /// synchronous dirty tracking (with asynchronous tracking a first
    /// write to a clean page costs no fault anyway) and
    /// [`Builder::write_prediction`](crate::Builder::write_prediction) on.
    pub(crate) fn predicts_writes_at_all(&self) -> bool {
        self.pagemap().is_none() && self.cfg().write_prediction
    }

    /// [`predicts_writes_at_all`](Shared::predicts_writes_at_all), for a
    /// region that may fill pages dirty on a guess: writable, and not a
    /// private copy of its store (`Region::may_predict_writes`).
    pub(crate) fn predicts_writes_in(&self, region: &Region) -> bool {
        region.may_predict_writes && self.predicts_writes_at_all()
    }

    /// Whether a read miss of `region` is to be filled dirty: its read
    /// misses are followed by writes (`predict.rs`) and a page may become
    /// dirty now without waiting ([`may_dirty_now`](Shared::may_dirty_now)).
    /// Signal-safe: atomics.
    fn predicts_write(&self, region: &Region) -> bool {
        self.predicts_writes_in(region)
            && region.writes.predicts_write()
            && self.may_dirty_now(region)
    }

    /// Whether a page of `region` may become dirty now without a wait:
    /// its store takes writes, and the pool is below its dirty limit
    /// ([`may_dirty`](Shared::may_dirty) without its waits). Atomics only.
    fn may_dirty_now(&self, region: &Region) -> bool {
        let pool = self.pool_of(region);
        region.write_failure().is_none()
            && !region.is_closing()
            && (pool.dirty.load(Relaxed) + region.page_size as u64 <= pool.dirty_limit()
                || self.cfg().evictors == 0)
    }

    /// Parks a write miss at the dirty limit (asynchronous tracking): its
    /// page (held busy) is left empty and its thread asleep on its fault
    /// until an evictor wakes it ([`wake_parked_writers`]). False if the
    /// pool keeps as many parked writers as it may (the caller fills).
    ///
    /// [`wake_parked_writers`]: Shared::wake_parked_writers
    fn park_miss(&self, region: &Region, page: usize) -> bool {
        let (addr, ps) = (region.page_addr(page), region.page_size);
        let pool = self.pool_of(region);
        let mut parked = pool.parked.lock().unwrap_or_else(|e| e.into_inner());
        if parked.len() >= crate::shared::MAX_PARKED {
            return false;
        }
        parked.push((addr, ps));
        drop(parked);
        if region.pages.unlock(page, PageState::Empty) {
            // Others waited on the busy page: woken, the writer with
            // them, which comes back.
            self.wake(region, addr, ps);
        }
        true
    }

    /// Whether a page of `region` may become dirty now: not while the
    /// region's store fails its writes (the write fails, as a write fault
    /// on a file whose file system cannot store it does: `Err` with the
    /// store's errno), and not past the dirty limit (half the pool): a
    /// filler evicts some dirty pages itself and goes on; in-thread, the
    /// writer waits, however long, while the evictors evict them.
    /// A region whose last write-back failed but has no dirty page left
    /// (dropped by `DontNeed`) is let through: only a write tells whether
    /// the store works again. Signal-safe: atomics, `clock_gettime` and
    /// `nanosleep`.
    pub(crate) fn may_dirty(&self, region: &Region) -> Result<DirtyNow, i32> {
        let pool = self.pool_of(region);
        let bytes = region.page_size as u64;
        let mut waiting: Option<Waiting<'_>> = None;
        let mut nap = NAP_MIN;
        let failed = || {
            region
                .write_failure()
                .filter(|_| region.dirty.load(Relaxed) > 0)
        };
        loop {
            if let Some(e) = failed() {
                return Err(e);
            }
            // No background mark below the limit: a cache with room for
            // every dirty page keeps them dirty (a page written again is
            // written back once) until the limit, eviction for space or a
            // flush writes them.
            let dirty = pool.dirty.load(Relaxed) + bytes;
            // Without evictors (`Builder::evictors(0)`) nobody would write
            // the dirty pages back for a waiting writer: no limit then.
            if dirty <= pool.dirty_limit()
                || self.cfg().evictors == 0
                || region.is_closing()
                || region.is_taking()
                || self.is_shutting_down()
            {
                return Ok(DirtyNow::Go);
            }
            if pool.writeback_stuck.load(Relaxed) {
                // The last pass could write nothing: past the limit, but
                // the evictors' next round tries again (no kick: at their
                // pace), so that the limit holds again once the dirty
                // pages can be written.
                pool.dirty_wanted.store(true, Relaxed);
                return Ok(DirtyNow::Go);
            }
            // At the limit: the evictors write dirty pages back (in
            // place) down to half the limit.
            pool.dirty_wanted.store(true, Relaxed);
            self.kick_evictors();
            if !region.in_thread {
                // A filler neither waits here (it would keep every other
                // fault, readers' too, waiting) nor writes to the store
                // itself (a store whose writes hang would take every
                // filler): the writer waits, asleep on its fault, while
                // the evictors write dirty pages back.
                return Ok(DirtyNow::Wait);
            }
            // In-thread, the writer's own thread waits (the kernel's
            // writers wait so, in `balance_dirty_pages`) while the
            // evictors write dirty pages back (a store that fails its writes
            // sets this region's failure, or `writeback_stuck`, and the
            // wait ends).
            if waiting.is_none() {
                waiting = Some(pool.dirty_waits.enter(self.now_ms()));
            }
            crate::in_thread::let_signals_in(|| std::thread::sleep(nap));
            nap = (nap * 2).min(NAP_MAX);
        }
    }

    /// Wakes the writers fillers left asleep at the dirty limit
    /// ([`Pool::parked`]): each retries its write. By the evictors, every
    /// round.
    ///
    /// [`Pool::parked`]: crate::shared::Pool
    pub(crate) fn wake_parked_writers(&self, pool: &crate::shared::Pool) {
        let parked = std::mem::take(&mut *pool.parked.lock().unwrap_or_else(|e| e.into_inner()));
        for (addr, len) in parked {
            self.wake_fillers(addr, len);
        }
    }

    /// A write to `page` (held busy, in state `was`: Empty for a write
    /// miss, Clean for a first write) by thread `thread` that the store
    /// cannot take: the writer gets SIGBUS, as from a kernel file mapping
    /// whose file system cannot reserve the blocks, and the page is
    /// released as it was, for readers to go on reading (nothing is
    /// dropped). In-thread the caller raises it; with fillers it is sent
    /// to the faulting thread (`si_addr` the page's address, `si_code`
    /// `SI_QUEUE`: see `sys::signal::sigbus_thread`), which takes it
    /// before it retries the write. Without the thread's id (a kernel
    /// without `UFFD_FEATURE_THREAD_ID`) a clean page is dropped (the
    /// store holds its bytes) and poisoned instead, as for a failed read.
    /// The store's failure was logged when write-back met it.
    pub(crate) fn refuse_write(&self, region: &Region, page: usize, was: PageState, thread: u32) {
        let (addr, ps) = (region.page_addr(page), region.page_size);
        if region.in_thread
            || (thread != 0 && crate::sys::signal::sigbus_thread(thread, addr).is_ok())
        {
            let _ = region.pages.unlock(page, was);
            self.wake(region, addr, ps);
            return;
        }
        if was == PageState::Clean {
            if self.reader_must_not_drop() {
                // A reader may not drop pages (`remove.rs`): the writer
                // faults again, and waits so, until the store works.
                let _ = region.pages.unlock(page, was);
                self.wake(region, addr, ps);
                return;
            }
            if let Err(e) = mm::advise(addr, ps, libc::MADV_DONTNEED) {
                log::error!("umio: MADV_DONTNEED failed: errno {e}");
                let _ = region.pages.unlock(page, was);
                self.wake(region, addr, ps);
                return;
            }
            self.budget_of(region).release(ps as u64);
        }
        self.poison_and_release(region, page..page + 1);
    }

    /// Reads one page from the store into this worker's staging buffer,
    /// zero-filled past the store's end. `None` (logged) if it failed.
    fn read_page<'w>(&self, w: &'w mut Scratch, region: &Region, page: usize) -> Option<&'w [u8]> {
        let ps = region.page_size;
        let valid = region.valid_bytes(page, 1);
        let buf = match w.buf.get(ps) {
            Ok(b) => b,
            Err(e) => {
                report::error(Report::StagingBuffer { errno: e });
                return None;
            }
        };
        self.counters().store_reads.fetch_add(1, Relaxed);
        // In the in-thread handler, other signals (and faults of a store
        // that reads umio memory) come in meanwhile.
        match crate::in_thread::let_signals_in(|| {
            region
                .store
                .read_at(region.store_offset(page), &mut buf[..valid])
        }) {
            Ok(n) => {
                self.counters().bytes_read.fetch_add(n as u64, Relaxed);
                region.stats.bytes_read.fetch_add(n as u64, Relaxed);
                region.stats.fills.fetch_add(1, Relaxed);
                buf[n..ps].fill(0);
                Some(&buf[..ps])
            }
            Err(e) => {
                report::warn(Report::StoreRead {
                    region: region.id,
                    err: e,
                });
                None
            }
        }
    }

    /// Shows a resolved fault to the region's prefetcher and fills what it
    /// asks for, after the faulting thread was woken (or, for a coalesced
    /// fault, while it waits for another thread's fill): on this filler,
    /// from free cache, when it is small ([`MAX_INLINE_PREFETCH`]), one of
    /// the region's store slots is free and the cache has room (no
    /// hand-off: the lowest latency); otherwise on the `umio-prefetch`
    /// threads, which evict older pages to make room if they must (a scan
    /// larger than the cache keeps its read-ahead) while this filler goes
    /// back to fault events. Either way the reads are in flight while the
    /// application consumes what it has.
    pub(crate) fn prefetch_after(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
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
        self.consider_promotion(region, &fault, w.in_signal);
        let mut fetch = std::mem::take(&mut w.fetch);
        fetch.clear();
        // A policy that panics (the application's own) loses its advice,
        // not the filler: the fault is already resolved.
        // In a signal handler nothing unwinds: a panic there aborts.
        if w.in_signal {
            region.prefetcher.on_fault(&fault, &mut fetch);
        } else {
            let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                region.prefetcher.on_fault(&fault, &mut fetch);
            }));
            if asked.is_err() {
                report::error(Report::PrefetchPanicked);
                fetch.clear();
            }
        }
        if w.in_signal {
            // A signal handler hands read-ahead to the prefetch thread: a
            // batch of reads goes through the store's batch path, which
            // allocates. The faulting thread's own miss is already in.
            if !fetch.is_empty() {
                let _ = self.jobs().push_without_growing(PrefetchJob {
                    region: region.clone(),
                    pages: Vec::new(),
                    fetch: fetch.clone(),
                    promote: None,
                    locked: false,
                });
            }
            fetch.clear();
            w.fetch = fetch;
            return;
        }
        let pages = region.pages.len();
        let mut ranges = std::mem::take(&mut w.fetch_pages);
        ranges.clear();
        ranges.extend(
            fetch
                .as_slice()
                .iter()
                .map(|r| r.start.min(pages as u64) as usize..r.end.min(pages as u64) as usize)
                .filter(|r| !r.is_empty()),
        );
        fetch.clear();
        w.fetch = fetch;
        // Only pages neither resident nor in flight: a window asked for
        // again costs nothing.
        ranges.retain(|r| {
            r.clone()
                .any(|p| matches!(region.pages.get(p), Observed::Stable(PageState::Empty)))
        });
        if !ranges.is_empty() {
            ranges.sort_unstable_by_key(|r| r.start);
            let bytes: usize = ranges.iter().map(|r| r.len() * region.page_size).sum();
            let budget = self.budget_of(region);
            let small = bytes <= MAX_INLINE_PREFETCH;
            let room = budget.used() + bytes as u64 <= budget.limit();
            if !(small && room && self.fill_ranges_in_slot(w, region, &ranges)) {
                self.queue_readahead(region, ranges.clone());
            }
        }
        w.fetch_pages = ranges;
    }

    /// Queues read-ahead on the prefetch threads, which evict older pages
    /// to make room for it if they must.
    fn queue_readahead(&self, region: &Arc<Region>, pages: Vec<Range<usize>>) {
        self.jobs().push(PrefetchJob {
            region: region.clone(),
            pages,
            fetch: FetchList::new(),
            promote: None,
            locked: false,
        });
    }

    /// `UFFDIO_COPY` of `src` to `dst`, discarding whatever a page of the
    /// range unexpectedly holds (EEXIST) and trying once more. A range the
    /// kernel refuses because it spans several VMAs (an `mprotect` of part
    /// of a page, or of part of a run, splits them) is copied in pieces,
    /// each within one VMA and taking its protection (see [`per_vma`]).
    pub(crate) fn install(
        &self,
        region: &Region,
        dst: usize,
        src: &[u8],
        wp: bool,
        dontwake: bool,
    ) -> Result<(), i32> {
        per_vma(dst, src.len(), |at, n| {
            // `at - dst + n <= src.len()`: within the source.
            let from = &src[at - dst..at - dst + n];
            match self.uffd_of(region).copy(at, from, wp, dontwake) {
                Err(libc::EEXIST) if self.reader_must_not_drop() => {
                    // A reader may not drop pages itself (`remove.rs`):
                    // the evictors do, once this thread unlocks them.
                    self.drop_later(at, at + n);
                    Err(libc::EEXIST)
                }
                Err(libc::EEXIST) => {
                    // We hold every page of the range busy and Empty, so a
                    // present page is stale: drop it and copy again.
                    mm::advise(at, n, libc::MADV_DONTNEED)?;
                    self.uffd_of(region).copy(at, from, wp, dontwake)
                }
                r => r,
            }
        })
    }

    /// A fill failed: poison the pages so that the faulting threads get
    /// SIGBUS, as a failed read of a kernel file mapping does, and release
    /// them. The poison stays until the pages are dropped
    /// (`Advice::DontNeed`) or the region is unmapped.
    pub(crate) fn fail_fill(&self, region: &Region, pages: Range<usize>) {
        self.counters().read_errors.fetch_add(1, Relaxed);
        if region.in_thread {
            // The faulting thread raises SIGBUS itself, now (a poisoned
            // page faults as an ordinary miss in SIGBUS mode on kernels
            // built without memory-failure support: it could not tell).
            // Threads waiting on the page retry the read.
            self.release_run(region, pages, PageState::Empty);
        } else {
            self.poison_and_release(region, pages);
        }
    }

    /// Poisons `pages` (held busy, nothing installed) so that the threads
    /// faulting on them get SIGBUS, unlocks them Empty and wakes those
    /// threads.
    pub(crate) fn poison_and_release(&self, region: &Region, pages: Range<usize>) {
        let addr = region.page_addr(pages.start);
        let len = pages.len() * region.page_size;
        if self.features().poison() {
            if let Err(e) = per_vma(addr, len, |at, n| self.uffd_of(region).poison(at, n)) {
                report::error(Report::Poison { errno: e });
            }
        } else {
            report::error(Report::NoPoison);
        }
        for p in pages {
            let _ = region.pages.unlock(p, PageState::Empty);
        }
        self.wake(region, addr, len);
    }

    /// Reserves cache space. With `may_reclaim`, evicts pages itself when
    /// the cache is full (no hand-off to the evictor on the fault path)
    /// and waits for space as long as it may come: while pages are being
    /// written back, read, or freed by other threads, however slow the
    /// store (a wait of more than [`STALL_LOGGED_AFTER`] is logged once by
    /// the `umio-watch` thread, with what holds the cache). Without it,
    /// fails at once.
    ///
    /// Fails only when the space can never come: the reservation is
    /// larger than what the pool can hold besides its pinned pages (noted
    /// in `Pool::refused` for `umio-watch` to log). Gives up at once when
    /// `region` starts being unmapped, so that unmap never waits for a
    /// fill that waits for space.
    pub(crate) fn reserve(
        &self,
        w: &mut Scratch,
        bytes: u64,
        may_reclaim: bool,
        region: &Region,
    ) -> bool {
        let pool = self.pool_of(region);
        let budget = &pool.budget;
        // A reader that must not drop pages (remove events on) leaves the
        // space to the evictors: it tells them how much it was short of.
        let must_not_drop = may_reclaim && self.reader_must_not_drop();
        let may_reclaim = may_reclaim && !must_not_drop;
        // Once a try fails: the bytes this miss waits for, told to the
        // evictors until it returns.
        let mut wanting: Option<Wanted<'_>> = None;
        let mut waiting: Option<Waiting<'_>> = None;
        let mut nap = NAP_MIN;
        loop {
            // The huge pool's reservations are 2 MiB or more: no batching.
            let got = if region.huge_pool {
                budget.try_reserve(bytes)
            } else {
                w.credit.take(budget, bytes, self.cfg().credit_batch)
            };
            if got {
                if budget.above_high() {
                    self.kick_evictors();
                }
                return true;
            }
            if !may_reclaim || self.is_shutting_down() || region.is_closing() {
                if must_not_drop {
                    pool.short.fetch_max(bytes, Relaxed);
                    self.kick_evictors();
                }
                return false;
            }
            // Pinned pages are never evicted (the regular pool holds them;
            // a promoted range's pinned pages are few): a reservation that
            // does not fit beside them never will, until they are unpinned
            // or the bound grows. Everything else the pool holds is
            // resident and evictable once its owner lets go of it, or
            // credit other threads return.
            let pinned = if region.huge_pool {
                0
            } else {
                self.pinned_bytes()
            };
            if bytes.saturating_add(pinned) > budget.limit() {
                pool.refused.store(bytes, Relaxed);
                self.kick_evictors();
                return false;
            }
            if wanting.is_none() {
                wanting = Some(Wanted::new(&pool.wanted, bytes));
            }
            self.kick_evictors();
            self.counters().direct_reclaims.fetch_add(1, Relaxed);
            // Victims of the huge pool are 2 MiB each: a few suffice.
            // Victims of the regular pool come from every region in it, of
            // any page size: the batch is counted in the runtime's default
            // page size as an estimate, and bounded (the loop evicts again
            // until the reservation succeeds).
            let pages = if region.huge_pool {
                (bytes / region.page_size as u64).clamp(1, 4) as usize
            } else {
                (bytes / self.cfg().default_page_size as u64).clamp(8, 64) as usize
            };
            // Above the bound, the bound was lowered at run time
            // (`Runtime::set_cache_bytes`): the misses' eviction is the
            // shrink's as much as the evictors' is.
            let over_bound = pool.budget.used() > pool.budget.limit();
            let freed = self.evict_batch(w, &*pool.policy, pages);
            if over_bound {
                self.counters()
                    .shrink_evicted_bytes
                    .fetch_add(freed, Relaxed);
            }
            if freed == 0 {
                if region.is_taking() {
                    // A partial unmap or a drop is locking pages of this
                    // region and may be waiting for the one this thread
                    // holds: give it back (the caller retries the fault).
                    return false;
                }
                // Nothing to take now: the pages are busy (a store read or
                // write-back in flight, however slow), dirty and waiting
                // for the evictors to write them back, or the space went
                // to other threads. Wait for them, napping longer the
                // longer it lasts.
                if waiting.is_none() {
                    waiting = Some(pool.space_waits.enter(self.now_ms()));
                }
                crate::in_thread::let_signals_in(|| std::thread::sleep(nap));
                nap = (nap * 2).min(NAP_MAX);
            } else {
                nap = NAP_MIN;
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
        w: &mut Scratch,
        region: &Region,
        ranges: &[Range<usize>],
        may_reclaim: bool,
    ) -> usize {
        self.fill_ranges_at_most(w, region, ranges, may_reclaim, usize::MAX)
    }

    /// Fills a job of the prefetch threads: hints ([`Mapping::prefetch`],
    /// [`Mapping::prefetch_ranges`], `Advice::WillNeed`, the C API's) and
    /// read-ahead queued there, evicting older pages for room. At most
    /// [`HINT_CACHE_FRACTION`] of the cache is filled: a hint larger than
    /// the cache would otherwise evict every page the application is
    /// using, then most of its own pages before they are used (Linux, too,
    /// bounds what one `MADV_WILLNEED` reads).
    /// The pages past that are left to their faults.
    ///
    /// [`Mapping::prefetch`]: crate::Mapping::prefetch
    /// [`Mapping::prefetch_ranges`]: crate::Mapping::prefetch_ranges
    pub(crate) fn fill_hint(&self, w: &mut Scratch, region: &Region, ranges: &[Range<usize>]) {
        let most = self.hint_pages(region);
        self.fill_ranges_at_most(w, region, ranges, true, most);
    }

    /// Most pages one hint fills: [`HINT_CACHE_FRACTION`] of the cache.
    fn hint_pages(&self, region: &Region) -> usize {
        let most = self.budget_of(region).limit() / HINT_CACHE_FRACTION / region.page_size as u64;
        usize::try_from(most).unwrap_or(usize::MAX).max(1)
    }

    /// Locks the missing pages of `ranges` (sorted, disjoint, within the
    /// region) busy for a hint, up to [`hint_pages`](Shared::hint_pages)
    /// of them, and returns them as runs: by the hinting thread, before it
    /// queues the hint, so that a thread touching one of these pages
    /// before its read completes waits for that read (as for a page being
    /// filled) instead of reading it a second time. The runs must reach
    /// [`fill_locked`](Shared::fill_locked), or
    /// [`release_locked`](Shared::release_locked).
    pub(crate) fn lock_hint(&self, region: &Region, ranges: &[Range<usize>]) -> Vec<Range<usize>> {
        let most = self.hint_pages(region);
        let len = region.pages.len();
        let mut locked: Vec<Range<usize>> = Vec::new();
        let mut taken = 0;
        'ranges: for r in ranges {
            for p in r.start..r.end.min(len) {
                if taken == most {
                    break 'ranges;
                }
                if !region.pages.try_lock(p, PageState::Empty) {
                    continue;
                }
                taken += 1;
                match locked.last_mut() {
                    Some(last) if last.end == p => last.end = p + 1,
                    _ => locked.push(p..p + 1),
                }
            }
        }
        locked
    }

    /// Fills the runs of a hint that [`lock_hint`](Shared::lock_hint)
    /// locked, as [`fill_hint`](Shared::fill_hint) does; the pages it
    /// cannot fill (no cache space to be had, the region being unmapped)
    /// are released Empty, their waiters woken to fault again.
    pub(crate) fn fill_locked(&self, w: &mut Scratch, region: &Region, runs: &[Range<usize>]) {
        self.fill_ranges_inner(w, region, runs, true, usize::MAX, true);
    }

    /// Releases runs [`lock_hint`](Shared::lock_hint) locked without
    /// filling them (the hint was dropped).
    pub(crate) fn release_locked(&self, region: &Region, runs: &[Range<usize>]) {
        for r in runs {
            self.release_run(region, r.clone(), PageState::Empty);
        }
    }

    /// [`fill_ranges`](Shared::fill_ranges), filling at most `most` pages.
    fn fill_ranges_at_most(
        &self,
        w: &mut Scratch,
        region: &Region,
        ranges: &[Range<usize>],
        may_reclaim: bool,
        most: usize,
    ) -> usize {
        self.fill_ranges_inner(w, region, ranges, may_reclaim, most, false)
    }

    /// The body of the fills of ranges: with `locked`, every page of
    /// `ranges` is already held busy by the caller (a hint's), and each is
    /// filled or released.
    fn fill_ranges_inner(
        &self,
        w: &mut Scratch,
        region: &Region,
        ranges: &[Range<usize>],
        may_reclaim: bool,
        most: usize,
        locked: bool,
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
        // The store keeps up to its depth of a batch in flight, submitting
        // the next request as each completes: batches longer than the
        // depth keep its queue full (a synchronous store's batches are of
        // one run, each installed before the next is read).
        let batch_runs = match (self.cfg().queue_depth, self.queue_depth_of(region)) {
            // Configured: no store is given more at once.
            (Some(_), depth) => depth,
            (None, 1) => 1,
            (None, _) => MAX_BATCH_RUNS,
        };
        let mut runs = std::mem::take(&mut w.runs);
        let mut filled = 0;
        let mut ranges = ranges
            .iter()
            .map(|r| r.start..r.end.min(region.pages.len()))
            .filter(|r| !r.is_empty());
        let mut cur = ranges.next();
        let mut stop = false;
        // Pages taken (locked) so far, filled or not.
        let mut taken = 0;
        while !stop {
            runs.clear();
            let mut bytes = 0;
            while let Some(pages) = cur.as_mut() {
                if taken >= most {
                    stop = true;
                    break;
                }
                if runs.len() == batch_runs || bytes >= max_batch {
                    break;
                }
                let i = pages.start;
                if i == pages.end {
                    cur = ranges.next();
                    continue;
                }
                if locked {
                    pages.start = pages.end.min(i + max_run);
                } else {
                    pages.start += 1;
                    if !region.pages.try_lock(i, PageState::Empty) {
                        continue;
                    }
                    while pages.start < pages.end
                        && pages.start - i < max_run.min(most - taken)
                        && region.pages.try_lock(pages.start, PageState::Empty)
                    {
                        pages.start += 1;
                    }
                }
                let run = i..pages.start;
                // Waiting for space while holding the space of runs not yet
                // installed could wait for itself (or, with other threads
                // doing the same, for each other): with runs in hand, fill
                // them first and come back for this one.
                if !self.reserve(
                    w,
                    (run.len() * ps) as u64,
                    may_reclaim && runs.is_empty(),
                    region,
                ) {
                    if runs.is_empty() {
                        self.release_run(region, run.clone(), PageState::Empty);
                        stop = true;
                    } else {
                        if !locked {
                            self.release_run(region, run.clone(), PageState::Empty);
                        }
                        pages.start = run.start;
                    }
                    break;
                }
                bytes += run.len() * ps;
                taken += run.len();
                runs.push(run);
            }
            if runs.is_empty() {
                break;
            }
            let (n, ok) = self.fill_runs(w, region, &runs);
            filled += n;
            stop |= !ok;
        }
        if locked {
            // What this fill gave up on stays the hint's to release.
            for r in cur.into_iter().chain(ranges) {
                if !r.is_empty() {
                    self.release_run(region, r, PageState::Empty);
                }
            }
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
    fn direct_source<'r>(&self, region: &'r Region, page: usize, count: usize) -> Option<&'r [u8]> {
        let mapped = region.store.as_mapped()?;
        let start = usize::try_from(region.store_offset(page)).ok()?;
        let end = start.checked_add(count * region.page_size)?;
        (end <= mapped.len()).then(|| &mapped[start..end])
    }

    /// Reads and installs `runs`, each held busy and Empty with its cache
    /// space reserved: runs the store maps are copied straight from it
    /// first, then the others' reads go to the store as one batch
    /// ([`Store::submit_each`]), which keeps up to its depth in flight, and
    /// each run is installed (one `UFFDIO_COPY`) as its read completes,
    /// in whatever order they complete, while the rest are in flight. Runs
    /// that fail are released Empty with their space. Returns the pages
    /// filled and whether every run was.
    ///
    /// [`Store::submit_each`]: umio_backends::Store::submit_each
    fn fill_runs(&self, w: &mut Scratch, region: &Region, runs: &[Range<usize>]) -> (usize, bool) {
        let ps = region.page_size;
        let mut filled = 0;
        let mut all = true;
        let mut staged = 0;
        // Each staged run's place in the staging buffer.
        let mut at: PerRun<Option<usize>> = SmallVec::new();
        for run in runs {
            match self.direct_source(region, run.start, run.len()) {
                Some(src) => {
                    at.push(None);
                    let bytes = (run.len() * ps) as u64;
                    self.counters().bytes_read.fetch_add(bytes, Relaxed);
                    region.stats.bytes_read.fetch_add(bytes, Relaxed);
                    if self.install_run(region, run, src) {
                        filled += run.len();
                    } else {
                        all = false;
                    }
                }
                None => {
                    at.push(Some(staged));
                    staged += run.len() * ps;
                }
            }
        }
        if staged == 0 {
            return (filled, all);
        }
        let buf = match w.buf.get(staged) {
            Ok(b) => &mut b[..staged],
            Err(e) => {
                log::error!("umio: staging buffer allocation failed: errno {e}");
                for (run, at) in runs.iter().zip(&at) {
                    if at.is_some() {
                        self.fail_run(region, run);
                    }
                }
                return (filled, false);
            }
        };
        // Runs whose read is shorter than the run (the region's last page):
        // installed after the batch, with the rest of the page zeroed.
        let mut short: PerRun<(usize, usize)> = SmallVec::new();
        {
            let mut reqs: PerRun<IoRequest<'_>> = SmallVec::new();
            let mut which: PerRun<usize> = SmallVec::new();
            let mut rest = &mut *buf;
            for (k, run) in runs.iter().enumerate() {
                if at[k].is_none() {
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
            let depth = self.queue_depth_of(region);
            let c = self.counters();
            c.store_reads.fetch_add(reqs.len() as u64, Relaxed);
            c.read_submissions.fetch_add(1, Relaxed);
            c.reads_submitted.fetch_add(reqs.len() as u64, Relaxed);
            let in_flight = reqs.len().min(depth) as u64;
            c.max_reads_in_flight.fetch_max(in_flight, Relaxed);
            let r = &region.stats;
            r.read_submissions.fetch_add(1, Relaxed);
            r.reads_submitted.fetch_add(reqs.len() as u64, Relaxed);
            r.max_reads_in_flight.fetch_max(in_flight, Relaxed);
            region.store.submit_each(&mut reqs, &mut |j, req| {
                let k = which[j];
                let run = &runs[k];
                let bytes = run.len() * ps;
                match req.result() {
                    Some(Ok(n)) => {
                        self.counters().bytes_read.fetch_add(n as u64, Relaxed);
                        region.stats.bytes_read.fetch_add(n as u64, Relaxed);
                        match req.read_buf() {
                            Some(b) if b.len() == bytes => {
                                b[n.min(bytes)..].fill(0);
                                if self.install_run(region, run, b) {
                                    filled += run.len();
                                } else {
                                    all = false;
                                }
                            }
                            _ => short.push((k, n)),
                        }
                    }
                    r => {
                        // A prefetch failure is not reported: the fault
                        // that needs the page retries the read and
                        // reports it.
                        log::debug!("umio: prefetch read failed: {r:?}");
                        self.fail_run(region, run);
                        all = false;
                    }
                }
            });
        }
        for (k, n) in short {
            let run = &runs[k];
            let off = at[k].unwrap_or(0);
            let mine = &mut buf[off..off + run.len() * ps];
            let n = n.min(mine.len());
            mine[n..].fill(0);
            if self.install_run(region, run, mine) {
                filled += run.len();
            } else {
                all = false;
            }
        }
        (filled, all)
    }

    /// A run held busy and Empty, its space reserved, that could not be
    /// filled: released Empty with its space.
    fn fail_run(&self, region: &Region, run: &Range<usize>) {
        self.budget_of(region)
            .release((run.len() * region.page_size) as u64);
        self.release_run(region, run.clone(), PageState::Empty);
    }

    /// Installs `src` as the run's bytes (held busy and Empty, space
    /// reserved), clean, and releases the run; on failure releases it Empty
    /// with its space. Returns whether it was installed.
    fn install_run(&self, region: &Region, run: &Range<usize>, src: &[u8]) -> bool {
        let copied = self.install(
            region,
            region.page_addr(run.start),
            src,
            region.writable,
            true,
        );
        if let Err(e) = copied {
            if e == libc::EEXIST && self.reader_must_not_drop() {
                // Handed to the evictors by `install`: not a failure.
                log::debug!("umio: prefetch found pages present that umio holds empty");
            } else {
                log::error!("umio: UFFDIO_COPY (prefetch) failed: errno {e}");
            }
            self.fail_run(region, run);
            return false;
        }
        // Counted before umio's page states show them resident
        // (`is_resident`), so that a thread that sees them resident there
        // sees them counted. The kernel's page tables (`mincore`) show
        // them from the copy above: a thread that waits on those may see
        // them before they are counted.
        let n = run.len() as u64;
        self.counters().prefetched_pages.fetch_add(n, Relaxed);
        region.stats.fills.fetch_add(n, Relaxed);
        region.stats.prefetched.fetch_add(n, Relaxed);
        self.release_run(region, run.clone(), PageState::Clean);
        // Only now: a policy that probes a page still busy and empty
        // drops its entry as stale, and the page would be resident with
        // no entry, never evicted.
        for p in run.clone() {
            self.policy_of(region).prefetched(region.key(p));
        }
        true
    }

    /// How many requests of a batch the region's store keeps in flight:
    /// the configured depth (`Builder::queue_depth`), else the store's own
    /// ([`Store::queue_depth`]), within `1..=MAX_BATCH_RUNS`.
    ///
    /// [`Store::queue_depth`]: umio_backends::Store::queue_depth
    pub(crate) fn queue_depth_of(&self, region: &Region) -> usize {
        self.cfg()
            .queue_depth
            .unwrap_or_else(|| region.store.queue_depth())
            .clamp(1, MAX_BATCH_RUNS)
    }

    /// Unlocks a run of pages this thread holds busy into `to`, waking
    /// the threads that faulted on them meanwhile.
    pub(crate) fn release_run(&self, region: &Region, run: Range<usize>, to: PageState) {
        let mut waiters = false;
        for p in run.clone() {
            waiters |= region.pages.unlock(p, to);
        }
        if waiters {
            self.wake(
                region,
                region.page_addr(run.start),
                run.len() * region.page_size,
            );
        }
    }

    /// Slots of each region: all fillers but one.
    fn store_slot_limit(&self) -> usize {
        self.cfg().fillers.saturating_sub(1).max(1)
    }

    /// Fills a missed page this thread holds busy, in one of the region's
    /// store slots; if none is free, queues the fill for a filler already
    /// in the region's store and returns at once.
    pub(crate) fn fill_fault_in_slot(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        page: usize,
        write: bool,
    ) {
        let miss = Miss {
            page,
            write,
            thread: w.thread,
        };
        self.fill_misses_in_slot(w, region, &[miss]);
    }

    /// Fills missed pages of `region` this thread holds busy, as one batch
    /// (`misses.rs`), in one of the region's store slots; if none is free,
    /// queues them for a filler already in the region's store and returns
    /// at once.
    pub(crate) fn fill_misses_in_slot(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        misses: &[Miss],
    ) {
        if w.in_store {
            self.fill_misses(w, region, misses);
            return;
        }
        if !region
            .store_slots
            .enter_or_queue(self.store_slot_limit(), misses)
        {
            self.counters()
                .queued_fills
                .fetch_add(misses.len() as u64, Relaxed);
            return;
        }
        w.in_store = true;
        self.fill_misses(w, region, misses);
        self.leave_store(w, region);
    }

    /// Runs read-ahead after a fault in one of the region's store slots,
    /// from free cache only; returns false, having done nothing, when no
    /// slot is free (the region's store is busy or hung).
    fn fill_ranges_in_slot(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        ranges: &[std::ops::Range<usize>],
    ) -> bool {
        if w.in_store {
            self.fill_ranges(w, region, ranges, false);
            return true;
        }
        if !region.store_slots.try_enter(self.store_slot_limit()) {
            return false;
        }
        w.in_store = true;
        self.fill_ranges(w, region, ranges, false);
        self.leave_store(w, region);
        true
    }

    /// Serves the fills queued on the region, then gives the slot back:
    /// the fills queued while this thread read go to the store together,
    /// as one batch.
    fn leave_store(&self, w: &mut Scratch, region: &Arc<Region>) {
        let thread = w.thread;
        let mut queued = std::mem::take(&mut w.queued);
        while region
            .store_slots
            .leave_or_take(&mut queued, MAX_BATCH_RUNS)
        {
            self.fill_misses(w, region, &queued);
        }
        queued.clear();
        w.queued = queued;
        w.thread = thread;
        w.in_store = false;
    }
}
