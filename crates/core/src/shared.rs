//! The state every part of a runtime shares: its configuration, the
//! userfaultfd, the region table, the cache pools (bound and eviction
//! policy each), the queue of background jobs, counters, and the shutdown
//! flag. Only this file touches the fields; everything else goes through
//! the methods below, and keeps its own state (a region's pages in
//! `region.rs`, a promotion's in `huge.rs`, a thread's scratch in
//! `scratch.rs`).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, Guard};
use umio_cache::{EvictionPolicy, FrameBudget, Observed, PageState};

use crate::config::{Config, Settings};
use crate::error::{Error, Result};
use crate::huge::HUGE_PAGE_SIZE;
use crate::in_thread;
use crate::kernel::FaultService;
use crate::kernel::{KernelFeatures, configure, open_configured, service_features};
use crate::padded::CachePadded;
use crate::prefetch::FetchList;
use crate::progress::Progress;
use crate::region::{Region, RegionTable};
use crate::spin::SpinTuner;
use crate::stats::{Counters, Gauges, Stats};
use crate::sys::poller::EventFd;
use crate::sys::signal;
use crate::sys::uffd::Uffd;
use crate::trace::{FaultTrace, Step, Tracer, now};

/// Serialises changes of any runtime's cache bound; freed in a fork child
/// if another thread held it (`fork.rs`).
pub(crate) static RESIZING: crate::fork_lock::ForkMutex<()> = crate::fork_lock::ForkMutex::new(());

/// Starts the threads that read a service's userfaultfd, just opened
/// (`threads::spawn_service`): registered by the runtime's start
/// (`runtime.rs`), so that this file, below the threads, names none of
/// their loops.
pub(crate) type SpawnService =
    fn(&Arc<Shared>, FaultService, &mut Vec<JoinHandle<()>>) -> Result<()>;

/// The [`SpawnService`] of every runtime.
pub(crate) static SPAWN_SERVICE: OnceLock<SpawnService> = OnceLock::new();

/// State shared by the runtime's handles, its mappings and its threads.
pub(crate) struct Shared {
    cfg: Config,
    features: KernelFeatures,
    /// One userfaultfd per fault service, opened (and its threads started)
    /// with the service's first region ([`service_uffd`](Shared::service_uffd)):
    /// the fillers' (index 0) without `UFFD_FEATURE_SIGBUS`, the in-thread
    /// service's (index 1) with it. A region is registered with its
    /// service's.
    uffds: [OnceLock<Uffd>; 2],
    /// Held while a service's userfaultfd is opened and its threads start.
    opening: Mutex<()>,
    /// Threads started with a service (fillers, `umio-events`), joined at
    /// shutdown.
    service_threads: Mutex<Vec<JoinHandle<()>>>,
    /// The CPU each filler is pinned to (`None`: unpinned), set when they
    /// start (`threads::spawn_service`).
    filler_cpus: Mutex<Vec<Option<usize>>>,
    /// The service of regions that choose none and declare nothing
    /// (`Auto` resolved when the runtime started).
    default_service: FaultService,
    regions: ArcSwap<RegionTable>,
    regions_writer: Mutex<()>,
    /// The regular pool (every region's, without a huge-page pool).
    pool: Pool,
    /// The huge-page pool (`Builder::huge_cache_bytes`).
    huge: Option<Pool>,
    /// Whether fillers poll or sleep (`FillerWait::Adaptive`).
    spin: SpinTuner,
    evict_signal: Signal,
    jobs: JobQueue,
    stats: Counters,
    /// Faults resolved without progress, per thread.
    progress: Progress,
    /// Bytes of pinned pages, bounded by half the cache.
    pinned_bytes: AtomicU64,
    shutdown: AtomicBool,
    shutdown_fd: EventFd,
    /// No more maps (`Runtime::shutdown`).
    closed: AtomicBool,
    /// Fault tracing (`Builder::trace_faults`); `None` when off.
    trace: Option<Box<Tracer>>,
    /// The in-thread service is open: some region's faults are served in
    /// the faulting thread (`in_thread.rs`), and every region of the
    /// runtime is in that service's table by id (a handler evicting from
    /// the shared pool finds the victims of fillers' regions too).
    in_thread: AtomicBool,
    /// Where faulting threads of an in-thread runtime wait for a page
    /// another thread holds busy.
    page_waits: PageWaits,
    /// Pages remove events handed to the evictors (`remove.rs`).
    removals: crate::removals::Removals,
    /// The epoch of [`now_ms`](Shared::now_ms).
    started: Instant,
    /// Eviction batches under way: their victims are out of the policy
    /// until each is evicted or given back.
    evicting: AtomicU32,
    /// `/proc/self/pagemap` with asynchronous dirty tracking
    /// ([`DirtyTracking::Async`](crate::DirtyTracking::Async)): the kernel
    /// resolves first writes, and `dirty.rs` reads which pages were
    /// written. `None`: write-protect faults tell umio (sync).
    pagemap: Option<crate::sys::pagemap::Pagemap>,
    /// Where evictions take victims under asynchronous dirty tracking
    /// (`dirty.rs`); `None` without it, or without `UFFDIO_MOVE`, or with
    /// remove events (a drop of the scratch would queue one).
    move_scratch: OnceLock<(usize, Mutex<crate::move_scratch::MoveScratch>)>,
    /// When the evictors last looked for pages written behind umio's back
    /// (`now_ms`), with asynchronous dirty tracking.
    pub(crate) harvested_at: AtomicU64,
}

/// Threads of an in-thread runtime waiting for busy pages to be unlocked:
/// one futex for the runtime, its value bumped by every unlock that found
/// waiters. A waiter may wake for another page's unlock and look again;
/// misses rarely coalesce, so one word costs less than one per page.
#[derive(Default)]
struct PageWaits {
    seq: CachePadded<AtomicU32>,
    sleepers: CachePadded<AtomicU32>,
}

/// Writers a pool keeps asleep at the dirty limit, at most (`Pool::parked`).
pub(crate) const MAX_PARKED: usize = 4096;

/// A cache pool: a bound on bytes and the policy that evicts within it.
pub(crate) struct Pool {
    pub budget: FrameBudget,
    pub policy: Box<dyn EvictionPolicy>,
    /// Bytes that misses waiting in `reserve` want now: the evictors free
    /// them even below the high watermark (a reservation larger than the
    /// space above it fails there, and a miss served in a signal handler
    /// cannot write dirty pages back itself).
    pub wanted: AtomicU64,
    /// The largest reservation refused to a reader that may not reclaim
    /// (remove events on): taken by the next eviction round, which frees
    /// it too.
    pub short: AtomicU64,
    /// Bytes of the pool's pages in state Dirty (busy or not). At most
    /// half the bound may be dirty ([`Shared::may_dirty`]): the other half
    /// stays clean, so readers always find pages to evict, even when the
    /// dirty ones cannot be written back.
    pub dirty: AtomicU64,
    /// A writer waits for the dirty bytes to fall: the evictors write
    /// dirty pages back in place until they have.
    pub dirty_wanted: AtomicBool,
    /// The last write-back for the dirty limit wrote nothing (the dirty
    /// pages' stores fail their writes, or they are pinned or busy):
    /// writers then pass the limit rather than wait for them (a writer of
    /// a failing store is refused first).
    pub writeback_stuck: AtomicBool,
    /// Faults waiting for cache space.
    pub space_waits: Waits,
    /// Writers waiting for dirty pages to be written back.
    pub dirty_waits: Waits,
    /// Fillers: the addresses of first writes held at the dirty limit, the
    /// writing thread left asleep on its fault (not woken), as the
    /// kernel's writers sleep in `balance_dirty_pages`, while the fillers
    /// go on serving other faults. The evictors wake them every round
    /// ([`Shared::wake_parked_writers`]); each retries its write, and waits
    /// again if the limit still holds.
    pub parked: Mutex<Vec<(usize, usize)>>,
    /// A reservation that can never succeed was refused (its size), for
    /// `umio-watch` to log (the in-thread service may not).
    pub refused: AtomicU64,
}

impl Pool {
    fn new(budget: FrameBudget, policy: Box<dyn EvictionPolicy>) -> Pool {
        Pool {
            budget,
            policy,
            wanted: AtomicU64::new(0),
            short: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            dirty_wanted: AtomicBool::new(false),
            writeback_stuck: AtomicBool::new(false),
            space_waits: Waits::default(),
            dirty_waits: Waits::default(),
            parked: Mutex::new(Vec::new()),
            refused: AtomicU64::new(0),
        }
    }

    /// The most bytes that may be dirty: half the bound.
    pub fn dirty_limit(&self) -> u64 {
        self.budget.limit() / 2
    }
}

/// Threads waiting for something the evictors provide (cache space, dirty
/// pages written back), so that a long wait is logged once, with its
/// reason, by the `umio-watch` thread: the waiters may be signal handlers,
/// which may not log. Atomics only.
#[derive(Default)]
pub(crate) struct Waits {
    count: AtomicU32,
    /// When the first of the current waiters began ([`Shared::now_ms`]).
    since: AtomicU64,
    /// The current wait was logged.
    logged: AtomicBool,
}

/// One thread's wait, counted in its [`Waits`] while it lives.
pub(crate) struct Waiting<'a>(&'a Waits);

impl Waits {
    /// Counts a waiter in, from `now_ms`.
    pub fn enter(&self, now_ms: u64) -> Waiting<'_> {
        if self.count.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since.store(now_ms, Ordering::Release);
        }
        Waiting(self)
    }

    /// Since when threads have been waiting, if any are and their wait was
    /// not logged yet.
    pub fn unlogged_since(&self) -> Option<u64> {
        if self.count.load(Ordering::Acquire) == 0 || self.logged.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.since.load(Ordering::Acquire))
    }

    /// The current wait has been logged.
    pub fn mark_logged(&self) {
        self.logged.store(true, Ordering::Relaxed);
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The wait is over: the next one is logged anew.
            self.0.logged.store(false, Ordering::Relaxed);
        }
    }
}

impl Shared {
    /// The shared state of a runtime about to start, from its checked
    /// settings; no userfaultfd is open yet (see
    /// [`adopt_uffd`](Shared::adopt_uffd)).
    pub fn new(
        s: Settings,
        features: KernelFeatures,
        default_service: FaultService,
    ) -> Result<Shared> {
        let shutdown_fd = EventFd::new().map_err(|e| Error::os("eventfd", e))?;
        let pagemap = if s.cfg.dirty_tracking == crate::DirtyTracking::Async {
            Some(
                crate::sys::pagemap::Pagemap::open()
                    .map_err(|e| Error::os("PAGEMAP_SCAN on /proc/self/pagemap", e))?,
            )
        } else {
            None
        };
        Ok(Shared {
            cfg: s.cfg,
            features,
            uffds: [OnceLock::new(), OnceLock::new()],
            opening: Mutex::new(()),
            service_threads: Mutex::new(Vec::new()),
            filler_cpus: Mutex::new(Vec::new()),
            default_service,
            regions: ArcSwap::from_pointee(RegionTable::default()),
            regions_writer: Mutex::new(()),
            pool: Pool::new(
                FrameBudget::new(s.cache_bytes, s.high_water, s.low_water),
                s.policy,
            ),
            huge: s.huge_cache_bytes.map(|bytes| {
                // Few entries (2 MiB ranges), inserted once a promotion:
                // one shard keeps the policy's order exact.
                let policy = s.huge_policy.build_unsharded();
                Pool::new(FrameBudget::new(bytes, s.high_water, s.low_water), policy)
            }),
            spin: SpinTuner::new(),
            evict_signal: Signal::default(),
            jobs: JobQueue::default(),
            stats: Counters::default(),
            progress: Progress::new(),
            pinned_bytes: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            shutdown_fd,
            closed: AtomicBool::new(false),
            trace: s.trace_faults.then(Box::default),
            in_thread: AtomicBool::new(false),
            page_waits: PageWaits::default(),
            removals: crate::removals::Removals::default(),
            started: Instant::now(),
            evicting: AtomicU32::new(0),
            pagemap,
            move_scratch: OnceLock::new(),
            harvested_at: AtomicU64::new(0),
        })
    }

    /// Milliseconds since the runtime started, plus one (0 means never).
    /// Signal-safe: `clock_gettime` only.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Eviction batches under way, counted by [`evict_batch`](Shared::evict_batch).
    #[inline]
    pub fn evicting(&self) -> &AtomicU32 {
        &self.evicting
    }

    /// Counts `pages` of `region` newly dirty (its count and its pool's).
    #[inline]
    pub fn count_dirty(&self, region: &Region, pages: usize) {
        region.dirty.fetch_add(pages, Ordering::Relaxed);
        self.pool_of(region)
            .dirty
            .fetch_add((pages * region.page_size) as u64, Ordering::Relaxed);
    }

    /// Counts `pages` of `region` dirty no more (written back or dropped).
    #[inline]
    pub fn count_undirty(&self, region: &Region, pages: usize) {
        region.dirty.fetch_sub(pages, Ordering::Relaxed);
        self.pool_of(region)
            .dirty
            .fetch_sub((pages * region.page_size) as u64, Ordering::Relaxed);
    }

    #[inline]
    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// Pages remove events handed to the evictors.
    pub fn removals(&self) -> &crate::removals::Removals {
        &self.removals
    }

    #[inline]
    pub fn features(&self) -> KernelFeatures {
        self.features
    }

    /// The userfaultfd `region` is registered with (its service's).
    #[inline]
    pub fn uffd_of(&self, region: &Region) -> &Uffd {
        self.uffds[region.in_thread as usize]
            .get()
            .expect("a region's userfaultfd is open before it is mapped")
    }

    /// The fillers' userfaultfd, if a region of theirs was ever mapped.
    #[inline]
    pub fn fillers_uffd(&self) -> Option<&Uffd> {
        self.uffds[0].get()
    }

    /// See `dirty.rs`: the scratch evictions move victims to (made with
    /// the first userfaultfd the runtime opens).
    #[inline]
    pub fn move_scratch(&self) -> Option<&Mutex<crate::move_scratch::MoveScratch>> {
        self.move_scratch.get().map(|(_, m)| m)
    }

    /// The userfaultfd the eviction scratch is registered with: the one
    /// `UFFDIO_MOVE` into it goes through.
    #[inline]
    pub fn scratch_uffd(&self) -> Option<&Uffd> {
        self.move_scratch
            .get()
            .and_then(|(i, _)| self.uffds[*i].get())
    }

    /// `/proc/self/pagemap` if dirty tracking is asynchronous: the kernel
    /// resolves first writes to clean pages itself (see `dirty.rs`).
    #[inline]
    pub fn pagemap(&self) -> Option<&crate::sys::pagemap::Pagemap> {
        self.pagemap.as_ref()
    }

    /// The in-thread service's userfaultfd, if open.
    #[inline]
    pub fn in_thread_uffd(&self) -> Option<&Uffd> {
        self.uffds[1].get()
    }

    /// Whether some region of this runtime is (or was) served in-thread.
    #[inline]
    pub fn in_thread_on(&self) -> bool {
        self.in_thread.load(Ordering::Acquire)
    }

    /// The service of regions that choose none and declare nothing.
    pub fn default_service(&self) -> FaultService {
        self.default_service
    }

    /// The userfaultfd of `service` (`Fillers` or `InThread`), opened with
    /// that service's features and its threads started, on first use.
    pub fn service_uffd(self: &Arc<Self>, service: FaultService) -> Result<&Uffd> {
        let i = (service == FaultService::InThread) as usize;
        if let Some(u) = self.uffds[i].get() {
            return Ok(u);
        }
        let _one = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = self.uffds[i].get() {
            return Ok(u);
        }
        let uffd = open_configured(
            self.features.user_mode_only(),
            service_features(
                service,
                self.features.bits(),
                self.cfg.remove_events,
                self.cfg.dirty_tracking == crate::DirtyTracking::Async,
            ),
        )?;
        self.adopt(service, uffd)
    }

    /// Makes `uffd`, just opened in this runtime's mode, the descriptor of
    /// `service` (at start, the default service's): configures it and
    /// starts the service's threads.
    pub fn adopt_uffd(self: &Arc<Self>, service: FaultService, uffd: Uffd) -> Result<()> {
        let _one = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        configure(
            &uffd,
            service_features(
                service,
                self.features.bits(),
                self.cfg.remove_events,
                self.cfg.dirty_tracking == crate::DirtyTracking::Async,
            ),
        )?;
        self.adopt(service, uffd).map(|_| ())
    }

    /// The body of [`service_uffd`](Shared::service_uffd); the caller holds
    /// `opening`.
    fn adopt(self: &Arc<Self>, service: FaultService, uffd: Uffd) -> Result<&Uffd> {
        let i = (service == FaultService::InThread) as usize;
        if service == FaultService::InThread {
            in_thread::ensure_installed()?;
            {
                // The in-thread service calls the policies from a signal
                // handler: room for every page the pools can hold, now
                // (`set_pool_limit` makes more as they grow).
                let _no_resize = RESIZING.lock();
                let pages = |b: u64| (b / crate::config::MIN_PAGE_SIZE as u64) as usize;
                self.pool.policy.reserve(pages(self.pool.budget.limit()));
                if let Some(h) = &self.huge {
                    h.policy.reserve(pages(h.budget.limit()));
                }
                self.in_thread.store(true, Ordering::Release);
            }
            // Every region mapped so far (the fillers') into the service's
            // table by id: a handler's eviction may pick their pages.
            let w = self.lock_regions();
            for r in self.regions.load().all() {
                in_thread::set_ranges(&**self, r, true);
            }
            drop(w);
        }
        let _ = self.uffds[i].set(uffd);
        if self.pagemap.is_some()
            && self.features.bits() & crate::sys::uffd::feature::MOVE != 0
            && !self.cfg.remove_events
            && self.move_scratch.get().is_none()
            && let Some(scratch) =
                crate::move_scratch::MoveScratch::new(self.uffds[i].get().expect("set above"))
        {
            // Registered with the first descriptor opened; `UFFDIO_MOVE`
            // into it is an ioctl on that one, whichever region's page moves.
            let _ = self.move_scratch.set((i, Mutex::new(scratch)));
        }
        let mut threads = self
            .service_threads
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let spawn = SPAWN_SERVICE
            .get()
            .expect("registered at the runtime's start");
        spawn(self, service, &mut threads)?;
        drop(threads);
        Ok(self.uffds[i].get().expect("set above"))
    }

    /// The threads started with the services, for the runtime's stop.
    pub fn take_service_threads(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(
            &mut *self
                .service_threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Wakes the threads waiting for pages of `addr..addr+len` of
    /// `region` that were just unlocked: blocked on the userfaultfd
    /// (fillers), or sleeping in the in-thread service.
    #[inline]
    pub fn wake(&self, region: &Region, addr: usize, len: usize) {
        if !region.in_thread {
            self.wake_fillers(addr, len);
            return;
        }
        // Orders the unlock before the load: a waiter counts itself, then
        // looks at the page (see `wait_unlocked`).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.page_waits.sleepers.load(Ordering::SeqCst) != 0 {
            self.page_waits.seq.fetch_add(1, Ordering::SeqCst);
            signal::futex_wake_all(&self.page_waits.seq);
        }
    }

    /// Wakes the threads blocked on the fillers' userfaultfd on faults in
    /// `addr..addr+len`.
    #[inline]
    pub fn wake_fillers(&self, addr: usize, len: usize) {
        if let Some(u) = self.fillers_uffd() {
            u.wake(addr, len);
        }
    }

    /// In-thread service: waits, at most `timeout`, while `busy()` holds
    /// (another thread holds the page busy and will [`wake`](Shared::wake)
    /// when it unlocks it).
    pub fn wait_unlocked(&self, busy: impl Fn() -> bool, timeout: Duration) {
        let w = &self.page_waits;
        w.sleepers.fetch_add(1, Ordering::SeqCst);
        let seq = w.seq.load(Ordering::SeqCst);
        if busy() {
            in_thread::let_signals_in(|| {
                signal::futex_wait(&w.seq, seq, timeout.as_nanos() as u64)
            });
        }
        w.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    #[inline]
    pub fn counters(&self) -> &Counters {
        &self.stats
    }

    #[inline]
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    #[inline]
    pub fn spin(&self) -> &SpinTuner {
        &self.spin
    }

    /// The background prefetch and promotion jobs.
    #[inline]
    pub fn jobs(&self) -> &JobQueue {
        &self.jobs
    }

    /// The region table now, read without a lock.
    #[inline]
    pub fn regions(&self) -> Guard<Arc<RegionTable>> {
        self.regions.load()
    }

    /// The region table's writer lock: held to change the table, and from
    /// choosing a mapping's address to publishing it.
    pub fn lock_regions(&self) -> MutexGuard<'_, ()> {
        self.regions_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a new region; the caller holds the writer lock.
    pub fn publish(&self, _writer: &MutexGuard<'_, ()>, region: Arc<Region>) {
        if self.in_thread_on() {
            in_thread::set_ranges(self, &region, true);
        }
        self.regions
            .store(Arc::new(self.regions.load().with(region)));
    }

    /// Takes a region out of the table; the caller holds the writer lock.
    pub fn withdraw(&self, _writer: &MutexGuard<'_, ()>, id: u64) {
        self.regions
            .store(Arc::new(self.regions.load().without(id)));
    }

    /// Publishes `region`'s mapped ranges anew in the region table (it
    /// gained a hole, or lost one again); the caller holds the writer
    /// lock. The in-thread service's table is left as it was: see
    /// [`republish_in_thread`](Shared::republish_in_thread).
    pub fn republish(&self, _writer: &MutexGuard<'_, ()>, region: &Arc<Region>) {
        self.regions
            .store(Arc::new(self.regions.load().reshaped(region)));
    }

    /// Publishes `region`'s mapped ranges anew in the in-thread service's
    /// table, once the memory of its new hole is unmapped or unregistered.
    /// Until then, a fault there must still find the region (its pages are
    /// held busy: the handler lets the access retry, and the retry meets
    /// the unmapped memory) rather than be taken for someone else's; a
    /// region mapped in the hole meanwhile is found first, being newer.
    pub fn republish_in_thread(&self, region: &Arc<Region>) {
        if region.in_thread && self.in_thread_on() {
            in_thread::set_ranges(self, region, true);
        }
    }

    /// Takes an unmapped region out of the in-thread service's table, once
    /// its memory is unregistered (until then, a fault on it must find it,
    /// to wait for the unmap rather than be taken for someone else's).
    pub fn forget_unmapped(&self, region: &Arc<Region>) {
        if self.in_thread_on() {
            in_thread::set_ranges(self, region, false);
        }
    }

    /// The id of the next region: unique in the process, across runtimes
    /// (the in-thread service's table holds every in-thread runtime's
    /// regions by id).
    pub fn next_region_id(&self) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The regular pool.
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The huge-page pool, if the runtime has one.
    #[inline]
    pub fn huge_pool(&self) -> Option<&Pool> {
        self.huge.as_ref()
    }

    /// The bound of `region`'s pool.
    #[inline]
    pub fn budget_of(&self, region: &Region) -> &FrameBudget {
        &self.pool_of(region).budget
    }

    /// `region`'s pool.
    #[inline]
    pub fn pool_of(&self, region: &Region) -> &Pool {
        match &self.huge {
            Some(h) if region.huge_pool => h,
            _ => &self.pool,
        }
    }

    /// The eviction policy of `region`'s pool.
    #[inline]
    pub fn policy_of(&self, region: &Region) -> &dyn EvictionPolicy {
        &*self.pool_of(region).policy
    }

    /// Wakes the evictors (one atomic load when a wake-up is pending).
    #[inline]
    pub fn kick_evictors(&self) {
        self.evict_signal.kick();
    }

    /// An evictor waits for a kick or the timeout.
    pub fn wait_for_eviction_work(&self, timeout: Duration) {
        self.evict_signal.wait(timeout);
    }

    /// Counts `bytes` more pinned, unless pinned pages would then hold more
    /// than half of the cache (then nothing changes and false).
    pub fn try_pin_bytes(&self, bytes: u64) -> bool {
        let before = self.pinned_bytes.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > self.total_limit() / 2 {
            self.pinned_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Counts `bytes` fewer pinned.
    pub fn unpin_bytes(&self, bytes: u64) {
        self.pinned_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes of pinned pages now.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes.load(Ordering::Acquire)
    }

    #[inline]
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Tells every thread to stop: the fillers (through the descriptor they
    /// poll), the evictors, the prefetch thread and the autosize thread.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.shutdown_fd.signal();
        self.evict_signal.kick();
        self.jobs.wake_all();
    }

    /// The CPU each filler is pinned to ([`Runtime::filler_cpus`](crate::Runtime::filler_cpus)).
    pub fn filler_cpus(&self) -> Vec<Option<usize>> {
        self.filler_cpus
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A filler that was to be pinned for good could not be.
    pub(crate) fn clear_filler_cpu(&self, index: usize) {
        if let Some(c) = self
            .filler_cpus
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(index)
        {
            *c = None;
        }
    }

    /// Records the fillers' CPUs as they start.
    pub(crate) fn set_filler_cpus(&self, cpus: Vec<Option<usize>>) {
        *self.filler_cpus.lock().unwrap_or_else(|e| e.into_inner()) = cpus;
    }

    /// Signalled at shutdown: fillers and the autosize thread poll it.
    pub fn shutdown_fd(&self) -> &EventFd {
        &self.shutdown_fd
    }

    /// Refuses further maps (`Runtime::shutdown`).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether maps are refused.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sets the bound of the regular pool or of the huge-page pool.
    pub(crate) fn set_pool_limit(&self, huge_pool: bool, bytes: u64) -> Result<()> {
        // One change at a time: the checks below hold until it is made.
        let _one = RESIZING.lock();
        let budget = if huge_pool {
            &self
                .huge
                .as_ref()
                .ok_or(Error::InvalidArgument("the runtime has no huge-page pool"))?
                .budget
        } else {
            &self.pool.budget
        };
        if bytes < 4 * self.largest_page(huge_pool) as u64 {
            return Err(Error::InvalidArgument(
                "the cache must hold at least 4 pages of the page size and of every region's",
            ));
        }
        let pinned = self.pinned_bytes();
        let total = self.total_limit() - budget.limit() + bytes;
        if pinned > total / 2 {
            return Err(Error::BelowPinned {
                pinned,
                requested: bytes,
            });
        }
        let before = budget.limit();
        if self.in_thread_on() && bytes > before {
            // Room in the policy first: the handler must find it there.
            let policy = if huge_pool {
                &*self.huge.as_ref().map_or(&self.pool, |h| h).policy
            } else {
                &*self.pool.policy
            };
            policy.reserve((bytes / crate::config::MIN_PAGE_SIZE as u64) as usize);
        }
        budget.set_limit(bytes);
        self.stats.cache_resizes.fetch_add(1, Ordering::Relaxed);
        if bytes < before {
            self.evict_signal.kick();
        }
        log::info!("umio: cache bound {before} -> {bytes} bytes");
        Ok(())
    }

    /// The largest page size a pool must hold 4 of: the runtime's default
    /// (2 MiB for the huge-page pool) or a region's mapped in it now.
    pub(crate) fn largest_page(&self, huge_pool: bool) -> usize {
        let min_page = if huge_pool {
            HUGE_PAGE_SIZE
        } else {
            self.cfg.default_page_size
        };
        self.regions
            .load()
            .all()
            .iter()
            .filter(|r| r.huge_pool == huge_pool)
            .map(|r| r.page_size)
            .max()
            .unwrap_or(0)
            .max(min_page)
    }

    /// Both pools' bounds together.
    pub(crate) fn total_limit(&self) -> u64 {
        self.pool.budget.limit() + self.huge.as_ref().map_or(0, |h| h.budget.limit())
    }

    /// Counters and gauges now.
    pub fn stats(&self) -> Stats {
        let huge = self.huge.as_ref().map_or(0, |h| h.budget.used());
        self.stats.snapshot(Gauges {
            resident_bytes: self.pool.budget.used() + huge,
            huge_pool_bytes: huge,
            cache_bytes: self.pool.budget.limit(),
            huge_cache_bytes: self.huge.as_ref().map_or(0, |h| h.budget.limit()),
            filler_windows: self
                .spin
                .windows_by_mode
                .each_ref()
                .map(|w| w.load(Ordering::Relaxed)),
            regions: self.regions.load().len() as u64,
            in_thread_regions: self
                .regions
                .load()
                .all()
                .iter()
                .filter(|r| r.in_thread)
                .count() as u64,
        })
    }

    /// What holds the cache, for the log when a miss cannot get space.
    pub fn describe_cache(&self) -> String {
        let table = self.regions.load();
        let mut out = format!(
            "{} of {} bytes used, {} pinned; policy {} tracks {} entries;",
            self.pool.budget.used(),
            self.pool.budget.limit(),
            self.pinned_bytes.load(Ordering::Relaxed),
            self.pool.policy.name(),
            self.pool.policy.tracked()
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

    /// The most recent traced miss, if tracing is on.
    pub fn last_trace(&self) -> Option<FaultTrace> {
        self.trace.as_ref()?.last()
    }

    /// Stamps `step` of the current miss, if tracing is on.
    #[inline]
    pub fn trace_step(&self, step: Step) {
        if let Some(t) = &self.trace {
            t.step(step);
        }
    }

    /// Stamps the wake-up of the faulting thread and publishes the trace,
    /// if tracing is on.
    #[inline]
    pub fn trace_woken(&self) {
        if let Some(t) = &self.trace {
            t.woken();
        }
    }

    /// The counter now if tracing is on (the start of an event read), else 0.
    #[inline]
    pub fn trace_read_begin(&self) -> u64 {
        if self.trace.is_some() { now() } else { 0 }
    }

    /// The event read that began at `begin` returned events.
    #[inline]
    pub fn trace_read(&self, begin: u64) {
        if let Some(t) = &self.trace {
            t.read(begin);
        }
    }
}

/// A wake-up flag for a background thread.
#[derive(Default)]
struct Signal {
    pending: Mutex<bool>,
    cond: Condvar,
    armed: AtomicBool,
}

impl Signal {
    /// Wakes the thread unless a wake-up is already pending: callers on the
    /// fault path pay one atomic load when the thread is already busy.
    fn kick(&self) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }

    /// Waits for a kick or the timeout.
    fn wait(&self, timeout: Duration) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !*p {
            p = self
                .cond
                .wait_timeout(p, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *p = false;
        self.armed.store(false, Ordering::Release);
    }
}

/// A request to fill pages in the background: sorted, disjoint page
/// ranges of one region, filled in batches of store requests.
pub(crate) struct PrefetchJob {
    pub region: Arc<Region>,
    pub pages: Vec<Range<usize>>,
    /// More ranges, as a prefetcher asked for them: what a signal handler
    /// queues (a `FetchList` needs no allocation).
    pub fetch: FetchList,
    /// Instead of filling `pages`: promote this 2 MiB range (claimed).
    pub promote: Option<usize>,
    /// Every page of `pages` is held busy for this job (a hint's, locked
    /// by the hinting thread: `Shared::lock_hint`): filled or released,
    /// never dropped, and never merged with another job.
    pub locked: bool,
}

/// The queue of [`PrefetchJob`]s, served in order by the `umio-prefetch`
/// thread. Room for [`JOB_QUEUE_ROOM`] jobs is made in advance, for
/// [`push_without_growing`](JobQueue::push_without_growing).
pub(crate) struct JobQueue {
    jobs: Mutex<VecDeque<PrefetchJob>>,
    ready: Condvar,
    /// Threads waiting for a job (changed under the queue's lock).
    idle: AtomicU64,
}

/// Jobs a queue holds without growing.
const JOB_QUEUE_ROOM: usize = 256;

impl Default for JobQueue {
    fn default() -> Self {
        JobQueue {
            jobs: Mutex::new(VecDeque::with_capacity(JOB_QUEUE_ROOM)),
            ready: Condvar::new(),
            idle: AtomicU64::new(0),
        }
    }
}

impl JobQueue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<PrefetchJob>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a job and wakes the thread.
    pub fn push(&self, job: PrefetchJob) {
        self.lock().push_back(job);
        self.ready.notify_one();
    }

    /// Queues a job if the queue has room for it without growing (a
    /// signal handler must not allocate); drops it otherwise (prefetch and
    /// promotion are optimisations). Returns whether it was queued.
    pub fn push_without_growing(&self, job: PrefetchJob) -> bool {
        let mut q = self.lock();
        if q.len() == q.capacity() {
            return false;
        }
        q.push_back(job);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// The next job, waiting for one; `None` once `stop()` holds (checked
    /// before every job, and after every wake-up).
    pub fn next(&self, stop: impl Fn() -> bool) -> Option<PrefetchJob> {
        let mut q = self.lock();
        loop {
            if stop() {
                return None;
            }
            if let Some(j) = q.pop_front() {
                return Some(j);
            }
            self.idle.fetch_add(1, Ordering::Relaxed);
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            self.idle.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Moves `job`'s fetch list into its page ranges, then moves into
    /// `job` the page ranges (and fetch lists) of the fill jobs queued
    /// right behind it for the same region (read-ahead of several streams,
    /// queued while the threads served the last batches), until `job`
    /// holds `max_pages` pages or more: their reads then go to the store
    /// in one batch, all in flight at once. Jobs an idle thread would take
    /// are left to it: separate threads install their batches side by
    /// side, each as soon as its own reads complete. Leaves `job`'s ranges
    /// sorted.
    pub fn merge_following(&self, job: &mut PrefetchJob, max_pages: usize) {
        if job.promote.is_some() || job.locked {
            return;
        }
        let take_fetch = |pages: &mut Vec<Range<usize>>, fetch: &FetchList| {
            pages.extend(
                fetch
                    .as_slice()
                    .iter()
                    .map(|r| r.start as usize..r.end as usize),
            );
        };
        take_fetch(&mut job.pages, &job.fetch);
        job.fetch.clear();
        let mut pages: usize = job.pages.iter().map(|r| r.len()).sum();
        {
            let mut q = self.lock();
            while pages < max_pages
                && q.len() as u64 > self.idle.load(Ordering::Relaxed)
                && let Some(next) = q.front()
                && next.promote.is_none()
                && !next.locked
                && Arc::ptr_eq(&next.region, &job.region)
            {
                let Some(next) = q.pop_front() else { break };
                let before = job.pages.len();
                job.pages.extend(next.pages);
                take_fetch(&mut job.pages, &next.fetch);
                pages += job.pages[before..].iter().map(|r| r.len()).sum::<usize>();
            }
        }
        job.pages.sort_unstable_by_key(|r| r.start);
    }

    /// Takes every job left (at shutdown, for their locked pages).
    pub fn take_all(&self) -> Vec<PrefetchJob> {
        self.lock().drain(..).collect()
    }

    /// Wakes the waiting thread so that it checks its stop condition.
    pub fn wake_all(&self) {
        let _q = self.lock();
        self.ready.notify_all();
    }
}
