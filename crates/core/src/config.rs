//! Configuration of a runtime: [`Builder`] with its defaults and checks,
//! and the `UMIO_*` environment variables ([`Builder::from_env`]).
//!
//! [`Builder::build`] (in `runtime.rs`) checks a builder into [`Settings`]
//! and starts the runtime from them.

use std::time::Duration;

use umio_cache::{EvictionPolicy, PolicyKind};

use crate::error::{Error, Result};
use crate::huge::{HUGE_PAGE_SIZE, PromoteKind};
use crate::kernel::FaultService;
use crate::kernel::{DirtyTracking, UffdMode};
use crate::prefetch::PrefetchKind;
use crate::spin::FillerWait;

/// Smallest fill unit: the system page.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest fill unit accepted.
pub const MAX_PAGE_SIZE: usize = 1 << 30;
/// Default fill unit of regions ([`Builder::page_size`]).
pub const DEFAULT_PAGE_SIZE: usize = 4 << 10;
/// Default number of background eviction threads ([`Builder::evictors`]).
pub const DEFAULT_EVICTORS: usize = 1;
/// Default watermarks, high and low, in percent ([`Builder::watermarks`]).
pub const DEFAULT_WATERMARKS: (u8, u8) = (90, 70);
/// Default most fault events read at once ([`Builder::max_fault_events`]).
pub const DEFAULT_MAX_FAULT_EVENTS: usize = 64;
/// Default largest read-ahead window: the window of the default prefetch
/// policy, and of a prefetch policy named without one.
pub const DEFAULT_READ_AHEAD: usize = 2 << 20;

enum PolicySpec {
    Builtin(PolicyKind),
    Custom(Box<dyn EvictionPolicy>),
}

/// Configuration of a [`Runtime`](crate::Runtime); see [`Runtime::builder`](crate::Runtime::builder).
pub struct Builder {
    cache_bytes: Option<u64>,
    /// `Some(share)`: the automatic bound ([`Builder::cache_bytes_auto`]).
    cache_auto: Option<f64>,
    huge_cache_bytes: Option<u64>,
    page_size: usize,
    fillers: usize,
    evictors: usize,
    high_water: u8,
    low_water: u8,
    policy: PolicySpec,
    prefetch: PrefetchKind,
    filler_spin: Option<Duration>,
    max_fault_events: usize,
    /// `None`: each store's own depth.
    queue_depth: Option<usize>,
    promote: PromoteKind,
    uffd_mode: UffdMode,
    /// `None`: `UMIO_FAULT_SERVICE`, else the default.
    fault_service: Option<FaultService>,
    /// `None`: `UMIO_DIRTY_TRACKING`, else the default.
    dirty_tracking: Option<DirtyTracking>,
    trace_faults: bool,
    page_cache: bool,
    /// `None`: `UMIO_WRITE_PREDICTION`, else on.
    write_prediction: Option<bool>,
    /// `None`: `UMIO_PIN_FILLERS`, else measured where the fillers can be
    /// pinned.
    pin_fillers: Option<bool>,
    remove_events: bool,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("cache_bytes", &self.cache_bytes)
            .field("huge_cache_bytes", &self.huge_cache_bytes)
            .field("page_size", &self.page_size)
            .field("fillers", &self.fillers)
            .field("evictors", &self.evictors)
            .field("high_water", &self.high_water)
            .field("low_water", &self.low_water)
            .field("prefetch", &self.prefetch)
            .field("filler_spin", &self.filler_spin)
            .field("max_fault_events", &self.max_fault_events)
            .field("queue_depth", &self.queue_depth)
            .field("promote", &self.promote)
            .field("uffd_mode", &self.uffd_mode)
            .field("fault_service", &self.fault_service)
            .field("dirty_tracking", &self.dirty_tracking)
            .field("trace_faults", &self.trace_faults)
            .field("page_cache", &self.page_cache)
            .field("write_prediction", &self.write_prediction)
            .field("pin_fillers", &self.pin_fillers)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cache_bytes: None,
            cache_auto: None,
            huge_cache_bytes: None,
            page_size: DEFAULT_PAGE_SIZE,
            fillers: default_fillers(),
            evictors: DEFAULT_EVICTORS,
            high_water: DEFAULT_WATERMARKS.0,
            low_water: DEFAULT_WATERMARKS.1,
            policy: PolicySpec::Builtin(PolicyKind::default()),
            prefetch: PrefetchKind::default(),
            filler_spin: None,
            max_fault_events: DEFAULT_MAX_FAULT_EVENTS,
            queue_depth: None,
            promote: PromoteKind::default(),
            uffd_mode: UffdMode::default(),
            fault_service: None,
            dirty_tracking: None,
            remove_events: DEFAULT_REMOVE_EVENTS,
            trace_faults: false,
            page_cache: false,
            write_prediction: None,
            pin_fillers: None,
        }
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Builder {
    /// Bound on the bytes of all regions' resident pages together. Default:
    /// a quarter of physical memory, at most 4 GiB.
    pub fn cache_bytes(mut self, bytes: u64) -> Self {
        self.cache_bytes = Some(bytes);
        self.cache_auto = None;
        self
    }

    /// An automatic cache bound: `share` (more than 0, at most 1) of the
    /// memory left for umio, re-checked every second and on memory
    /// pressure: the process's memory cgroup limit (v1 or v2) less the
    /// cgroup's other memory, or without a limit the machine's available
    /// memory. The cache shrinks (evicting in the background) when the
    /// limit is lowered or other memory grows, and grows back. How it
    /// decides: `docs/ARCHITECTURE.md`, "The automatic cache bound".
    /// `UMIO_CACHE_BYTES=auto` (share 0.5) or `auto:0.7`.
    pub fn cache_bytes_auto(mut self, share: f64) -> Self {
        self.cache_auto = Some(share);
        self.cache_bytes = None;
        self
    }

    /// Default fill unit of regions (a multiple of 4 KiB); a region may
    /// choose its own with [`MapOptions::page_size`](crate::MapOptions::page_size). Default 4 KiB.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Threads that read fault events and fill pages. Default: one more
    /// than the number of CPUs (1 to 4): at most `fillers - 1` read one
    /// region's store at once, one being kept for the others' faults
    /// (`docs/ARCHITECTURE.md`, store slots), so that as many misses as
    /// there are CPUs are read side by side.
    pub fn fillers(mut self, n: usize) -> Self {
        self.fillers = n;
        self
    }

    /// Background eviction threads (0: fillers evict for themselves when
    /// the cache is full). Default 1. Writable mappings under the in-thread
    /// fault service need at least one (mapping one without is an error;
    /// `Auto` takes the fillers): a signal handler reclaims clean pages
    /// only.
    pub fn evictors(mut self, n: usize) -> Self {
        self.evictors = n;
        self
    }

    /// Background eviction starts when the cache is `high` percent full and
    /// stops at `low` percent. Default 90 and 70.
    pub fn watermarks(mut self, high: u8, low: u8) -> Self {
        self.high_water = high;
        self.low_water = low;
        self
    }

    /// A built-in eviction policy, for all regions of the runtime (they
    /// share one cache). Default CLOCK; [`PolicyKind::TwoQ`] keeps a working
    /// set through scans that run alongside it.
    pub fn eviction(mut self, kind: PolicyKind) -> Self {
        self.policy = PolicySpec::Builtin(kind);
        self
    }

    /// An eviction policy of the application's own.
    pub fn eviction_policy(mut self, policy: Box<dyn EvictionPolicy>) -> Self {
        self.policy = PolicySpec::Custom(policy);
        self
    }

    /// Default prefetch policy of regions. Default: sequential read-ahead
    /// up to 2 MiB.
    pub fn prefetch(mut self, kind: PrefetchKind) -> Self {
        self.prefetch = kind;
        self
    }

    /// A second cache pool of `bytes` for huge pages (xmap's two pools):
    /// regions with 2 MiB (or larger) pages (hugetlbfs regions, regions
    /// mapped with 2 MiB pages) and 2 MiB ranges promoted to transparent
    /// huge pages ([`MapOptions::promote`](crate::MapOptions::promote)).
    /// Huge pages are reserved from, and evicted within, this pool, by a
    /// policy of their own, so that a scan through huge pages never evicts
    /// the small pages of other regions, nor the reverse. A promoted range
    /// moves its 2 MiB into this pool when it is promoted (evicting older
    /// huge pages if needed; if it cannot, it stays in its region's pool)
    /// and back when it is split. `cache_bytes` then bounds the small
    /// pages; the process's cache is the sum. The huge pool's policy is the
    /// runtime's built-in policy (the default one if the runtime's is the
    /// application's own), and its watermarks are the runtime's.
    ///
    /// Default: no huge pool; every region shares `cache_bytes`.
    pub fn huge_cache_bytes(mut self, bytes: u64) -> Self {
        self.huge_cache_bytes = Some(bytes);
        self
    }

    /// Default huge-page promotion policy of regions whose page size
    /// divides 2 MiB (see [`MapOptions::promote`](crate::MapOptions::promote)). Default: never.
    pub fn promote(mut self, kind: PromoteKind) -> Self {
        self.promote = kind;
        self
    }

    /// How long every filler keeps polling for fault events after the last
    /// one before it sleeps; zero: fillers sleep at once. Default: neither
    /// fixed, but measured: the runtime times its fault events with
    /// fillers sleeping and with one filler polling for 50 us, runs the
    /// faster way, and tries the other now and then
    /// ([`Stats::filler_poll_windows`](crate::Stats::filler_poll_windows) says how often each ran).
    ///
    /// Which is faster depends on the machine's other load. On a 2-vCPU
    /// virtual machine (`examples/fault_path.rs`), a cold 4 KiB fault took
    /// 38-52 us with fillers sleeping and 22-29 us with one polling when
    /// the machine was otherwise idle (a sleeping filler is woken on the
    /// idle CPU, and wakes the faulting thread back across CPUs), but
    /// 10-13 us sleeping and 19-23 us polling with the other CPU busy (the
    /// kernel then wakes the filler on the faulting thread's own CPU).
    /// With the default the fault took 18-25 us and 10-13 us.
    pub fn filler_spin(mut self, spin: Duration) -> Self {
        self.filler_spin = Some(spin);
        self
    }

    /// Most fault events a filler reads with one `read(2)`, 1 to 4096.
    /// Default 64.
    pub fn max_fault_events(mut self, n: usize) -> Self {
        self.max_fault_events = n;
        self
    }

    /// Store requests kept in flight at once by a batch (a hint's reads,
    /// read-ahead), 1 to 4096; default: each store's own
    /// ([`Store::queue_depth`](umio_backends::Store::queue_depth): 64 for
    /// the `O_DIRECT` io_uring store `map_file` opens, 1 for a synchronous
    /// store). `map_file`'s store is opened with this depth; any other
    /// store is given at most this many requests per batch (at most 64 are
    /// given at once whatever the setting). Also `UMIO_QUEUE_DEPTH`.
    pub fn queue_depth(mut self, n: usize) -> Self {
        self.queue_depth = Some(n);
        self
    }

    /// Which faults the runtime's userfaultfd receives. Default
    /// [`UffdMode::Auto`]: full mode (faults raised by the kernel served
    /// too, so a mapped buffer can be passed to any system call) where the
    /// process may open it (root, `CAP_SYS_PTRACE`,
    /// `vm.unprivileged_userfaultfd=1`, or read-write access to
    /// `/dev/userfaultfd`), else user-mode-only, reported by
    /// [`Runtime::user_mode_only`](crate::Runtime::user_mode_only). [`UffdMode::Full`] refuses the
    /// fallback.
    pub fn uffd_mode(mut self, mode: UffdMode) -> Self {
        self.uffd_mode = mode;
        self
    }

    /// How the faults of regions that do not choose
    /// ([`MapOptions::fault_service`](crate::MapOptions::fault_service))
    /// are served: by filler threads ([`FaultService::Fillers`]), by the
    /// faulting thread itself in a SIGBUS handler
    /// ([`FaultService::InThread`]: no thread hand-off, see its rule about
    /// system calls), or, the default, whichever loses nothing for each
    /// region ([`FaultService::Auto`]). Unless set here, the runtime takes
    /// `UMIO_FAULT_SERVICE` (`fillers`, `in-thread` or `auto`) from the
    /// environment, so that a program can be switched without a rebuild;
    /// a malformed value fails [`build`](Builder::build).
    pub fn fault_service(mut self, service: FaultService) -> Self {
        self.fault_service = Some(service);
        self
    }

    /// How the runtime learns which pages were written: write-protect
    /// faults served by umio ([`DirtyTracking::Sync`]), or the kernel's
    /// asynchronous write-protection read back with `PAGEMAP_SCAN`
    /// ([`DirtyTracking::Async`], Linux 6.7+: a first write to a clean page
    /// costs what it costs under `mmap`). [`DirtyTracking::Auto`] (the
    /// default) is `Sync` for now: `Async` does not yet keep every
    /// guarantee of `Sync` (what it does not: [`DirtyTracking::Async`]). Unless set here, the
    /// runtime takes `UMIO_DIRTY_TRACKING` (`auto`, `sync` or `async`) from
    /// the environment; a malformed value fails [`build`](Builder::build).
    /// What it became: [`Runtime::dirty_tracking`](crate::Runtime::dirty_tracking).
    pub fn dirty_tracking(mut self, tracking: DirtyTracking) -> Self {
        self.dirty_tracking = Some(tracking);
        self
    }

    /// Whether the runtime asks the kernel for remove events
    /// (`UFFD_FEATURE_EVENT_REMOVE`), so that the application's own
    /// `madvise(MADV_DONTNEED)` or `MADV_FREE` on umio memory (called
    /// directly, not through [`Mapping::advise_mut`](crate::Mapping::advise_mut))
    /// drops the pages from umio's cache as
    /// [`UncheckedAdvice::DontNeed`](crate::UncheckedAdvice::DontNeed) does: the next access
    /// reads the store. Off, such a call zaps pages umio still counts
    /// resident, and a thread that touches one is only noticed after a
    /// thousand faults in a row (a clean page is filled again, a dirty one
    /// poisoned: `Stats::no_progress_faults`).
    ///
    /// The price: umio's own evictions are `madvise` calls too, and each
    /// run of pages evicted then waits until a filler (or, in-thread, the
    /// `umio-events` thread) has read its event, a thread hand-off per
    /// run. Default off (see `docs/ARCHITECTURE.md`, "Remove events", and
    /// the benchmark report for the measured cost); `UMIO_REMOVE_EVENTS=1`
    /// turns it on from the environment. Ignored on a kernel without the
    /// feature.
    pub fn remove_events(mut self, on: bool) -> Self {
        self.remove_events = on;
        self
    }

    /// Records the time stamp counter at each step of every miss, for
    /// benchmarks: [`Runtime::last_fault_trace`](crate::Runtime::last_fault_trace) returns the most recent.
    /// Default off; off, the fault path only tests that it is off.
    pub fn trace_faults(mut self, on: bool) -> Self {
        self.trace_faults = on;
        self
    }

    /// Whether [`Runtime::map_file`](crate::Runtime::map_file) keeps the
    /// kernel's page cache in the path of its reads and writes (buffered
    /// `pread`/`pwrite`), as before umio bypassed it. Default off: umio's
    /// cache is the only cache ([`umio_backends::UncachedFileStore`]:
    /// `O_DIRECT` where the file system supports it, else
    /// `POSIX_FADV_DONTNEED` of what was read and written).
    /// [`MapOptions::page_cache`](crate::MapOptions::page_cache) overrides
    /// it per mapping.
    pub fn page_cache(mut self, on: bool) -> Self {
        self.page_cache = on;
        self
    }

    /// Whether, with synchronous dirty tracking, a region whose read
    /// misses are nearly all followed by a first write (a program that
    /// reads a record, then updates it) has its read misses filled dirty,
    /// so that the write costs no second fault. Default on. It turns on
    /// per region from what umio sees (7 in 8 of the recent read misses
    /// written while resident), keeps testing one read miss in 16, and
    /// turns off when the writes stop; a wrong prediction costs a write-back
    /// of an unchanged page. Counted in [`Stats::predicted_writes`](crate::Stats::predicted_writes).
    /// Nothing changes with [`DirtyTracking::Async`], whose first writes
    /// cost no fault. Unless set here, the runtime takes
    /// `UMIO_WRITE_PREDICTION` (`0` or `1`) from the environment; a
    /// malformed value fails [`build`](Builder::build).
    pub fn write_prediction(mut self, on: bool) -> Self {
        self.write_prediction = Some(on);
        self
    }

    /// Fillers pinned one to each CPU the process may run on, each woken
    /// by every fault (not one idle filler per fault), so that the filler
    /// on the faulting thread's own CPU serves it: the thread sleeps, its
    /// CPU runs that filler at once, and the filler's wake-up of the thread
    /// stays on the CPU. Unpinned, the kernel wakes an idle filler on
    /// another CPU, and the faulting thread is woken back across CPUs: two
    /// inter-processor wake-ups per miss, tens of microseconds each on a
    /// virtual machine. The cost: every fault also wakes the fillers of the
    /// other CPUs, which find nothing to do.
    ///
    /// Which is faster depends on where a miss's time goes: on a 2-vCPU
    /// virtual machine, pinned fillers served a cold miss from a tmpfs
    /// file in 8 us against 28 us unpinned, and random writes on a fast
    /// device ran 1.47x faster, but the same writes on a virtio disk ran
    /// 0.85x (its completions arrive on either CPU). So by default (unset
    /// here and in `UMIO_PIN_FILLERS`, `0` or `1`, read from the
    /// environment; a malformed value fails [`build`](Builder::build)),
    /// pinned is a third way for the fillers to wait beside sleeping and
    /// polling ([`filler_spin`](Builder::filler_spin)), measured and run
    /// when fastest, where there is a filler for every CPU the mapping
    /// thread may run on (the default fillers: up to 4 CPUs), at least two
    /// such CPUs, and no fixed `filler_spin`
    /// ([`Stats::filler_pinned_windows`](crate::Stats::filler_pinned_windows)
    /// says how often it ran). `true` pins them for good, `false` never.
    /// Pinned, the first fillers take the first CPUs (with fewer fillers
    /// than CPUs, faults on the others are served across CPUs, as
    /// unpinned); a filler beyond the CPUs stays unpinned.
    /// [`Runtime::filler_cpus`](crate::Runtime::filler_cpus) says which
    /// filler takes which CPU. Affinity set on the process later
    /// (`taskset -a`, a cpuset) is kept: a filler pins itself only to a
    /// CPU it may still run on, and unpinned goes back to the CPUs it had.
    pub fn pin_fillers(mut self, on: bool) -> Self {
        self.pin_fillers = Some(on);
        self
    }

    /// Overrides settings from the environment: every `UMIO_*` variable,
    /// and UMap's `UMAP_*` names as aliases where the `UMIO_*` one is unset
    /// (see [`EnvConfig`](crate::EnvConfig) for the table): the cache bound
    /// (`UMIO_CACHE_BYTES`: a size, `auto` or `auto:SHARE`), the huge-page
    /// pool, the page size, fillers, evictors, watermarks, fault events per
    /// read, the eviction, prefetch and promotion policies, the read-ahead
    /// window, filler polling, the fault service, the userfaultfd mode and
    /// the kernel page cache. Sizes accept K, M, G suffixes. Unset or empty
    /// variables leave the setting alone; a malformed one is an error. The
    /// C library and the preload shim read the same variables the same way.
    pub fn from_env(self) -> Result<Self> {
        self.with_env(&crate::env::EnvConfig::from_process()?)
    }

    /// Applies what `env` sets.
    pub(crate) fn with_env(mut self, env: &crate::env::EnvConfig) -> Result<Self> {
        use crate::env::{EnvCache, EnvPrefetch};
        if let Some(p) = env.page_size {
            self.page_size = p;
        }
        match env.cache {
            Some(EnvCache::Auto(share)) => self = self.cache_bytes_auto(share),
            Some(_) => {
                if let Some(b) = env.cache_bytes(self.page_size)? {
                    self = self.cache_bytes(b);
                }
            }
            None => {}
        }
        if let Some(b) = env.huge_cache_bytes {
            self.huge_cache_bytes = Some(b);
        }
        if let Some(on) = env.page_cache {
            self.page_cache = on;
        }
        if let Some(on) = env.write_prediction {
            self.write_prediction = Some(on);
        }
        if let Some(on) = env.pin_fillers {
            self.pin_fillers = Some(on);
        }
        if let Some(on) = env.remove_events {
            self.remove_events = on;
        }
        if let Some(n) = env.fillers {
            self.fillers = n;
        }
        if let Some(n) = env.evictors {
            self.evictors = n;
        }
        if let Some(p) = env.high_water {
            self.high_water = p;
        }
        if let Some(p) = env.low_water {
            self.low_water = p;
        }
        if let Some(n) = env.max_fault_events {
            self.max_fault_events = n;
        }
        if let Some(n) = env.queue_depth {
            self.queue_depth = Some(n);
        }
        if let Some(k) = env.eviction {
            self.policy = PolicySpec::Builtin(k);
        }
        if let Some(spin) = env.filler_spin {
            self.filler_spin = spin;
        }
        if let Some(k) = env.promote {
            self.promote = k;
        }
        if let Some(s) = env.fault_service {
            self.fault_service = Some(s);
        }
        if let Some(m) = env.uffd_mode {
            self.uffd_mode = m;
        }
        if let Some(t) = env.dirty_tracking {
            self.dirty_tracking = Some(t);
        }
        let window = env.read_ahead_bytes(self.page_size)?;
        if env.prefetch.is_some() || window.is_some() {
            let (was_stride, was_window) = match self.prefetch {
                PrefetchKind::None => (false, DEFAULT_READ_AHEAD),
                PrefetchKind::Sequential { max_window } => (false, max_window),
                PrefetchKind::Stride { max_window } => (true, max_window),
            };
            let max_window = window.unwrap_or(was_window);
            let stride = env
                .prefetch
                .map_or(was_stride, |k| k == EnvPrefetch::Stride);
            self.prefetch = if env.prefetch == Some(EnvPrefetch::None) || max_window == 0 {
                PrefetchKind::None
            } else if stride {
                PrefetchKind::Stride { max_window }
            } else {
                PrefetchKind::Sequential { max_window }
            };
        }
        Ok(self)
    }

    /// Checks the configuration: what [`build`](Builder::build) starts a
    /// runtime from.
    pub(crate) fn validate(self) -> Result<Settings> {
        if let Some(share) = self.cache_auto {
            Builder::check_cache_share(share)?;
        }
        let cache_bytes = match self.cache_auto {
            Some(share) => crate::autosize::MemoryView::read()
                .target(share, 0)
                .max(4 * self.page_size as u64),
            None => self.cache_bytes.unwrap_or_else(default_cache_bytes),
        };
        Builder::check_page_size(self.page_size)?;
        let fault_service = match self.fault_service {
            Some(s) => s,
            None => match env_var("UMIO_FAULT_SERVICE") {
                Some(v) => FaultService::from_name(&v).ok_or(Error::InvalidArgument(
                    "UMIO_FAULT_SERVICE must be fillers, in-thread or auto",
                ))?,
                None => FaultService::default(),
            },
        };
        let dirty_tracking = match self.dirty_tracking {
            Some(t) => t,
            None => match env_var("UMIO_DIRTY_TRACKING") {
                Some(v) => DirtyTracking::from_name(&v).ok_or(Error::InvalidArgument(
                    "UMIO_DIRTY_TRACKING must be auto, sync or async",
                ))?,
                None => DirtyTracking::default(),
            },
        };
        let pin_fillers = match self.pin_fillers {
            Some(on) => Some(on),
            None => match env_var("UMIO_PIN_FILLERS") {
                Some(v) => Some(
                    crate::env::on_off(v.trim())
                        .ok_or(Error::InvalidArgument("UMIO_PIN_FILLERS is not 0 or 1"))?,
                ),
                None => None,
            },
        };
        let write_prediction = match self.write_prediction {
            Some(on) => on,
            None => match env_var("UMIO_WRITE_PREDICTION") {
                Some(v) => crate::env::on_off(v.trim()).ok_or(Error::InvalidArgument(
                    "UMIO_WRITE_PREDICTION is not 0 or 1",
                ))?,
                None => true,
            },
        };
        Builder::check_fillers(self.fillers)?;
        Builder::check_max_fault_events(self.max_fault_events)?;
        if let Some(n) = self.queue_depth {
            Builder::check_queue_depth(n)?;
        }
        Builder::check_evictors(self.evictors)?;
        Builder::check_watermarks(self.high_water, self.low_water)?;
        if cache_bytes < 4 * self.page_size as u64 {
            return Err(Error::InvalidArgument(
                "cache_bytes must hold at least 4 pages",
            ));
        }
        if let Some(bytes) = self.huge_cache_bytes {
            Builder::check_huge_cache_bytes(bytes)?;
        }
        let (policy, huge_policy, eviction) = match self.policy {
            PolicySpec::Builtin(k) => (k.build(), k, Some(k)),
            PolicySpec::Custom(p) => (p, PolicyKind::default(), None),
        };
        Ok(Settings {
            cfg: Config {
                default_page_size: self.page_size,
                prefetch: self.prefetch,
                credit_batch: (cache_bytes / 256).min(1 << 20),
                filler_wait: match self.filler_spin {
                    Some(d) => FillerWait::Fixed(d.min(Duration::from_secs(1))),
                    None => FillerWait::Adaptive,
                },
                max_fault_events: self.max_fault_events,
                queue_depth: self.queue_depth,
                cache_auto: self.cache_auto,
                promote: self.promote,
                fillers: self.fillers,
                evictors: self.evictors,
                page_cache: self.page_cache,
                write_prediction,
                pin_fillers,
                fault_service,
                dirty_tracking,
                remove_events: self.remove_events,
                watermarks: (self.high_water, self.low_water),
                eviction,
                uffd_mode: self.uffd_mode,
            },
            cache_bytes,
            huge_cache_bytes: self.huge_cache_bytes,
            high_water: self.high_water,
            low_water: self.low_water,
            policy,
            huge_policy,
            evictors: self.evictors,
            uffd_mode: self.uffd_mode,
            trace_faults: self.trace_faults,
        })
    }
}

/// [`Builder::remove_events`]'s default.
pub const DEFAULT_REMOVE_EVENTS: bool = false;

/// The checks [`Builder::build`] makes of single settings, for callers
/// that take a setting before they build (the C library's setters): each
/// is [`Error::InvalidArgument`] for a value the builder would refuse.
impl Builder {
    /// [`Builder::page_size`] (and [`MapOptions::page_size`](crate::MapOptions::page_size)):
    /// a multiple of 4 KiB, 4 KiB to 1 GiB.
    pub fn check_page_size(bytes: usize) -> Result<()> {
        if !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&bytes) || !bytes.is_multiple_of(MIN_PAGE_SIZE)
        {
            return Err(Error::InvalidArgument(
                "page size must be a multiple of 4096 between 4 KiB and 1 GiB",
            ));
        }
        Ok(())
    }

    /// [`Builder::fillers`]: 1 to 256.
    pub fn check_fillers(n: usize) -> Result<()> {
        if !(1..=256).contains(&n) {
            return Err(Error::InvalidArgument("fillers must be 1 to 256"));
        }
        Ok(())
    }

    /// [`Builder::evictors`]: 0 to 64.
    pub fn check_evictors(n: usize) -> Result<()> {
        if n > 64 {
            return Err(Error::InvalidArgument("evictors must be 0 to 64"));
        }
        Ok(())
    }

    /// [`Builder::watermarks`]: `0 <= low <= high <= 100` and `high > 0`.
    pub fn check_watermarks(high: u8, low: u8) -> Result<()> {
        if high == 0 || high > 100 || low > high {
            return Err(Error::InvalidArgument(
                "watermarks must satisfy 0 <= low <= high <= 100 and high > 0",
            ));
        }
        Ok(())
    }

    /// [`Builder::max_fault_events`]: 1 to 4096.
    pub fn check_max_fault_events(n: usize) -> Result<()> {
        if !(1..=4096).contains(&n) {
            return Err(Error::InvalidArgument("max_fault_events must be 1 to 4096"));
        }
        Ok(())
    }

    /// [`Builder::queue_depth`]: 1 to 4096.
    pub fn check_queue_depth(n: usize) -> Result<()> {
        if !(1..=4096).contains(&n) {
            return Err(Error::InvalidArgument("queue_depth must be 1 to 4096"));
        }
        Ok(())
    }

    /// [`Builder::huge_cache_bytes`]: at least 4 huge pages (8 MiB).
    pub fn check_huge_cache_bytes(bytes: u64) -> Result<()> {
        if bytes < 4 * HUGE_PAGE_SIZE as u64 {
            return Err(Error::InvalidArgument(
                "huge_cache_bytes must hold at least 4 huge pages (8 MiB)",
            ));
        }
        Ok(())
    }

    /// [`Builder::cache_bytes_auto`]'s share: more than 0, at most 1.
    pub fn check_cache_share(share: f64) -> Result<()> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(Error::InvalidArgument(
                "the automatic cache share must be more than 0 and at most 1",
            ));
        }
        Ok(())
    }
}

/// The default number of fillers: one more than the number of CPUs (1 to
/// 4), so that a region's store slots (`fillers - 1`) are one per CPU.
pub fn default_fillers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4)) + 1
}

/// The default cache bound: a quarter of physical memory, 64 MiB to 4 GiB.
pub fn default_cache_bytes() -> u64 {
    let total = match crate::sys::proc::phys_pages() {
        Some(pages) => pages * 4096,
        None => 1 << 30,
    };
    (total / 4).clamp(64 << 20, 4 << 30)
}

/// What the runtime's threads read of the configuration, fixed at build.
pub(crate) struct Config {
    /// Default fill unit of new regions (a region may have its own: read
    /// `Region::page_size` for the pages of a region).
    pub default_page_size: usize,
    /// Default prefetch policy of new regions.
    pub prefetch: PrefetchKind,
    /// Bytes a thread reserves from the budget at once.
    pub credit_batch: u64,
    /// `Some(share)`: the automatic cache bound.
    pub cache_auto: Option<f64>,
    /// How fillers wait for events.
    pub filler_wait: FillerWait,
    /// Fault events read at once.
    pub max_fault_events: usize,
    /// Store requests in flight per batch ([`Builder::queue_depth`]);
    /// `None`: each store's own.
    pub queue_depth: Option<usize>,
    /// Default promotion policy.
    pub promote: PromoteKind,
    /// Filler threads.
    pub fillers: usize,
    /// Evictor threads.
    pub evictors: usize,
    /// `map_file` through the kernel's page cache ([`Builder::page_cache`]).
    pub page_cache: bool,
    /// Read misses filled dirty where writes follow them
    /// ([`Builder::write_prediction`]).
    pub write_prediction: bool,
    /// Fillers pinned to CPUs ([`Builder::pin_fillers`]); `None`:
    /// measured, where they can be.
    pub pin_fillers: Option<bool>,
    /// As asked: [`FaultService::Auto`] is resolved per region when it is
    /// mapped (`Shared::region_service`); the runtime's default for
    /// regions that declare nothing is resolved when it starts.
    pub fault_service: FaultService,
    /// As asked, then resolved when the runtime starts: `Sync` or `Async`.
    pub dirty_tracking: DirtyTracking,
    /// Remove events are on (`Builder::remove_events`, and the kernel has
    /// them: resolved when the runtime starts).
    pub remove_events: bool,
    /// High and low watermarks at start, in percent.
    pub watermarks: (u8, u8),
    /// The built-in eviction policy; `None`: the application's own.
    pub eviction: Option<PolicyKind>,
    /// The userfaultfd mode asked for (what it became:
    /// `KernelFeatures::user_mode_only`).
    pub uffd_mode: UffdMode,
}

impl Config {
    /// What [`Runtime::config`](crate::Runtime::config) reports.
    pub(crate) fn public(&self) -> RuntimeConfig {
        RuntimeConfig {
            page_size: self.default_page_size,
            cache_auto: self.cache_auto,
            fillers: self.fillers,
            evictors: self.evictors,
            watermarks: self.watermarks,
            eviction: self.eviction,
            prefetch: self.prefetch,
            filler_spin: match self.filler_wait {
                FillerWait::Fixed(d) => Some(d),
                FillerWait::Adaptive => None,
            },
            max_fault_events: self.max_fault_events,
            queue_depth: self.queue_depth,
            promote: self.promote,
            uffd_mode: self.uffd_mode,
            fault_service: self.fault_service,
            dirty_tracking: self.dirty_tracking,
            page_cache: self.page_cache,
            write_prediction: self.write_prediction,
            pin_fillers: self.pin_fillers,
            remove_events: self.remove_events,
        }
    }
}

/// The configuration a running runtime started with
/// ([`Runtime::config`](crate::Runtime::config)): its [`Builder`]'s
/// settings after the environment, the defaults and the checks, with what
/// the runtime resolved when it started (the fault service `Auto` chose,
/// remove events the kernel lacks turned off). The cache bounds change at
/// run time and are not here: [`Runtime::cache_bytes`](crate::Runtime::cache_bytes)
/// and [`Runtime::huge_cache_bytes`](crate::Runtime::huge_cache_bytes).
///
/// ```no_run
/// # fn main() -> Result<(), umio_core::Error> {
/// let rt = umio_core::Runtime::builder().fillers(2).build()?;
/// assert_eq!(rt.config().fillers, 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Default fill unit of new regions ([`Builder::page_size`]).
    pub page_size: usize,
    /// `Some(share)`: the automatic cache bound
    /// ([`Builder::cache_bytes_auto`]).
    pub cache_auto: Option<f64>,
    /// Fillers asked for ([`Builder::fillers`]); they start with the
    /// first region the fillers serve.
    pub fillers: usize,
    /// Evictors asked for ([`Builder::evictors`]); with remove events on,
    /// at least one runs.
    pub evictors: usize,
    /// High and low watermarks in percent ([`Builder::watermarks`]).
    pub watermarks: (u8, u8),
    /// The built-in eviction policy; `None`: the application's own
    /// ([`Builder::eviction_policy`]).
    pub eviction: Option<PolicyKind>,
    /// Default prefetch policy of new regions ([`Builder::prefetch`]).
    pub prefetch: PrefetchKind,
    /// Fillers' polling fixed by [`Builder::filler_spin`] (at most 1 s);
    /// `None`: measured.
    pub filler_spin: Option<Duration>,
    /// Fault events read at once ([`Builder::max_fault_events`]).
    pub max_fault_events: usize,
    /// Store requests in flight per batch ([`Builder::queue_depth`]);
    /// `None`: each store's own.
    pub queue_depth: Option<usize>,
    /// Default promotion policy ([`Builder::promote`]).
    pub promote: PromoteKind,
    /// The userfaultfd mode asked for ([`Builder::uffd_mode`]); what it
    /// became: [`Runtime::user_mode_only`](crate::Runtime::user_mode_only).
    pub uffd_mode: UffdMode,
    /// How the faults of a region that chooses nothing and declares
    /// nothing are served: [`FaultService::Fillers`] or
    /// [`FaultService::InThread`] (what `Auto` became for it). Each
    /// region's own: [`Mapping::fault_service`](crate::Mapping::fault_service).
    pub fault_service: FaultService,
    /// How written pages are found: [`DirtyTracking::Sync`] or
    /// [`DirtyTracking::Async`] (what `Auto` became).
    pub dirty_tracking: DirtyTracking,
    /// [`Builder::page_cache`].
    pub page_cache: bool,
    /// [`Builder::write_prediction`].
    pub write_prediction: bool,
    /// [`Builder::pin_fillers`] as asked; `None`: measured, where the
    /// fillers can be pinned ([`Runtime::filler_cpus`](crate::Runtime::filler_cpus)).
    pub pin_fillers: Option<bool>,
    /// Remove events are on: asked for ([`Builder::remove_events`]) and
    /// the kernel has them.
    pub remove_events: bool,
}

/// A checked [`Builder`]: the runtime's [`Config`] and what starting it
/// takes.
pub(crate) struct Settings {
    pub cfg: Config,
    /// The regular pool's bound at start.
    pub cache_bytes: u64,
    pub huge_cache_bytes: Option<u64>,
    pub high_water: u8,
    pub low_water: u8,
    /// The regular pool's policy.
    pub policy: Box<dyn EvictionPolicy>,
    /// The kind of the huge-page pool's policy.
    pub huge_policy: PolicyKind,
    pub evictors: usize,
    pub uffd_mode: UffdMode,
    pub trace_faults: bool,
}
