//! The public runtime handle: [`Runtime`], and [`Builder::build`], which
//! starts one. What a runtime shares with its threads and mappings is in
//! `shared.rs`; its configuration in `config.rs`; its threads in
//! `threads.rs`; making a mapping in `create.rs`.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::config::{Builder, RuntimeConfig};
use crate::error::{Error, Result};
use crate::kernel::FaultService;
use crate::kernel::{DirtyTracking, KernelFeatures, UffdMode, kernel_features, open_uffd};
use crate::shared::Shared;
use crate::stats::Stats;
use crate::sys::uffd::feature;
use crate::threads;
use crate::trace::FaultTrace;

impl Builder {
    /// Checks the configuration, opens the userfaultfd and starts the
    /// threads.
    pub fn build(self) -> Result<Runtime> {
        let settings = self.validate()?;
        // The cache resizing lock's reset, before a runtime can take it.
        crate::fork::on_child(crate::fork::Slot::Resizing, |forker, me| {
            crate::shared::RESIZING.raw().after_fork(forker, me)
        });
        crate::fork::install();
        let _ = crate::shared::SPAWN_SERVICE.set(threads::spawn_service);
        let mode = settings.uffd_mode;
        let (uffd, user_mode_only) = open_uffd(mode)?;
        if user_mode_only && mode == UffdMode::Auto {
            log::warn!(
                "umio: no permission for full-mode userfaultfd; serving user-mode faults only: \
                 a system call given a non-resident mapped buffer fails with EFAULT (run as root, \
                 grant access to /dev/userfaultfd or set vm.unprivileged_userfaultfd=1 to lift this)"
            );
        }
        let features = kernel_features()?.with_user_mode_only(user_mode_only);
        let mut settings = settings;
        let sigbus = features.bits() & feature::SIGBUS != 0;
        // The service of regions that choose none and declare nothing;
        // `Auto` is resolved again for each region that declares itself
        // private to user code (`Shared::region_service`).
        let default_service = match settings.cfg.fault_service {
            FaultService::Fillers => FaultService::Fillers,
            FaultService::InThread if !sigbus => {
                return Err(Error::Unsupported(
                    "the in-thread fault service needs UFFD_FEATURE_SIGBUS (Linux 4.14)",
                ));
            }
            FaultService::InThread => FaultService::InThread,
            FaultService::Auto if sigbus && user_mode_only && settings.evictors > 0 => {
                FaultService::InThread
            }
            FaultService::Auto => FaultService::Fillers,
        };
        settings.cfg.remove_events &= features.bits() & feature::EVENT_REMOVE != 0;
        // Synchronous unless asked: asynchronous tracking does not yet keep
        // every guarantee of the synchronous path (see `DirtyTracking`).
        let wp_async = match settings.cfg.dirty_tracking {
            DirtyTracking::Sync | DirtyTracking::Auto => false,
            DirtyTracking::Async if !features.async_dirty_tracking() => {
                return Err(Error::Unsupported(
                    "asynchronous dirty tracking needs UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN \
                     (Linux 6.7)",
                ));
            }
            DirtyTracking::Async => true,
        };
        settings.cfg.dirty_tracking = if wp_async {
            DirtyTracking::Async
        } else {
            DirtyTracking::Sync
        };
        // With remove events, the evictors also drop the pages the
        // application's own `madvise` removed (`remove.rs`): one at least.
        let evictors = if settings.cfg.remove_events {
            settings.evictors.max(1)
        } else {
            settings.evictors
        };
        let shared = Arc::new(Shared::new(settings, features, default_service)?);
        let mut threads = Vec::new();
        let started = threads::spawn_all(&shared, evictors, &mut threads);
        let inner = RuntimeInner {
            shared,
            threads: Mutex::new(threads),
        };
        started?;
        // The default service's descriptor is the one just opened (so that
        // a mode that cannot be had fails here); the other service's opens
        // with its first region.
        inner.shared.adopt_uffd(default_service, uffd)?;
        Ok(Runtime {
            inner: Arc::new(inner),
        })
    }
}

struct RuntimeInner {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        threads::stop(&self.shared, threads);
    }
}

/// A umio runtime: a page cache of bounded size shared by the regions it
/// maps, and the threads that serve their faults.
///
/// Cheap to clone (a reference count). The threads stop when the last
/// clone and the last [`Mapping`](crate::Mapping) are dropped.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = umio_core::Runtime::builder()
///     .cache_bytes(256 << 20)
///     .page_size(64 << 10)
///     .fillers(2)
///     .build()?;
/// let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin")?;
/// let opts = umio_core::MapOptions::new().len(1 << 20);
/// // SAFETY: nothing else changes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file_mut(&file, opts) }?;
/// map[..5].copy_from_slice(b"hello");
/// map.flush()?;
/// map.unmap()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cache_bytes", &self.inner.shared.pool().budget.limit())
            .field("regions", &self.inner.shared.regions().len())
            .finish()
    }
}

impl Runtime {
    /// A builder with defaults that work.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// How this runtime serves the faults of a region that chooses no
    /// service and declares nothing ([`MapOptions::fault_service`](crate::MapOptions::fault_service),
    /// [`MapOptions::user_access_only`](crate::MapOptions::user_access_only)):
    /// [`FaultService::Fillers`] or [`FaultService::InThread`] (what
    /// [`FaultService::Auto`] became for it). Each mapping's own:
    /// [`Mapping::fault_service`](crate::Mapping::fault_service).
    pub fn fault_service(&self) -> FaultService {
        self.inner.shared.default_service()
    }

    /// How this runtime learns which pages were written:
    /// [`DirtyTracking::Sync`] or [`DirtyTracking::Async`] (what `Auto`
    /// became).
    pub fn dirty_tracking(&self) -> DirtyTracking {
        self.inner.shared.cfg().dirty_tracking
    }

    /// Refuses further maps; existing mappings keep working until they are
    /// unmapped or dropped.
    pub fn shutdown(&self) {
        self.inner.shared.close();
    }

    /// Counters since the runtime started.
    pub fn stats(&self) -> Stats {
        self.inner.shared.stats()
    }

    /// For tests: checks that the eviction policy tracks every resident
    /// page that is not pinned (one it lost would never be evicted), and
    /// says what it found if not. Best called while no thread faults.
    #[doc(hidden)]
    pub fn check_policy(&self) -> std::result::Result<(), String> {
        self.inner.shared.check_policy_tracks_resident()
    }

    /// The cache bound in bytes (of the regular pool, when there is a
    /// huge-page pool).
    pub fn cache_bytes(&self) -> u64 {
        self.inner.shared.pool().budget.limit()
    }

    /// The huge-page pool's bound in bytes, if the runtime has one
    /// ([`Builder::huge_cache_bytes`]).
    pub fn huge_cache_bytes(&self) -> Option<u64> {
        self.inner.shared.huge_pool().map(|h| h.budget.limit())
    }

    /// Changes the cache bound (of the regular pool, when there is a
    /// huge-page pool) while the runtime runs. Growing takes effect at
    /// once. Shrinking returns at once too: the evictors bring the cache
    /// down to the new bound in the background, dirty pages written back
    /// first and pinned pages left alone; meanwhile a miss evicts for
    /// itself (one batch) before it fills. [`Stats::cache_bytes`] shows the
    /// bound, [`Stats::shrink_evicted_bytes`] the eviction it caused.
    ///
    /// Errors, with nothing changed: [`Error::InvalidArgument`] if the
    /// bound holds fewer than 4 pages of the runtime's page size or of a
    /// region mapped in the pool now; [`Error::BelowPinned`] if pinned
    /// pages would hold more than half of the cache.
    pub fn set_cache_bytes(&self, bytes: u64) -> Result<()> {
        self.inner.shared.set_pool_limit(false, bytes)
    }

    /// [`set_cache_bytes`](Runtime::set_cache_bytes) for the huge-page pool
    /// ([`Builder::huge_cache_bytes`]): at least 4 huge pages (8 MiB).
    /// [`Error::InvalidArgument`] if the runtime has no huge-page pool.
    pub fn set_huge_cache_bytes(&self, bytes: u64) -> Result<()> {
        self.inner.shared.set_pool_limit(true, bytes)
    }

    /// The configuration this runtime started with (the cache bounds,
    /// which change while it runs, are [`cache_bytes`](Runtime::cache_bytes)
    /// and [`huge_cache_bytes`](Runtime::huge_cache_bytes)).
    pub fn config(&self) -> RuntimeConfig {
        let mut c = self.inner.shared.cfg().public();
        c.fault_service = self.inner.shared.default_service();
        c
    }

    /// The CPU each filler is pinned to while the fillers run pinned, by
    /// filler (`None`: never pinned; all `None` where they are not pinned
    /// at all); empty while no filler runs (a runtime whose regions are all
    /// served in-thread). See [`Builder::pin_fillers`](crate::Builder::pin_fillers).
    pub fn filler_cpus(&self) -> Vec<Option<usize>> {
        self.inner.shared.filler_cpus()
    }

    /// The default page size of new regions.
    pub fn page_size(&self) -> usize {
        self.inner.shared.cfg().default_page_size
    }

    /// Whether [`map_file`](Runtime::map_file) goes through the kernel's
    /// page cache by default ([`Builder::page_cache`]).
    pub fn page_cache(&self) -> bool {
        self.inner.shared.cfg().page_cache
    }

    /// The kernel features in use.
    pub fn kernel_features(&self) -> KernelFeatures {
        self.inner.shared.features()
    }

    /// Whether this runtime's userfaultfd serves user-mode faults only
    /// (see [`UffdMode`] and [`KernelFeatures::user_mode_only`]).
    pub fn user_mode_only(&self) -> bool {
        self.inner.shared.features().user_mode_only()
    }

    /// The time stamps of the most recent miss a filler served, if the
    /// runtime was built with [`Builder::trace_faults`] and has served one.
    /// The filler publishes a trace just after it wakes the faulting
    /// thread: wait for [`FaultTrace::seq`] to change.
    pub fn last_fault_trace(&self) -> Option<FaultTrace> {
        self.inner.shared.last_trace()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
}
