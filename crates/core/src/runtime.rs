//! The runtime: configuration, the shared state of all regions, and the
//! threads that serve them.

use std::collections::VecDeque;
use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use umio_backends::{FileStore, Store, UncachedFileStore};
use umio_cache::{EvictionPolicy, FrameBudget, PolicyKind};

use crate::error::{Error, Result};
use crate::huge::{HUGE_PAGE_SIZE, HugeState, PromoteKind};
use crate::mapping::{Fixed, MapOptions, Mapping};
use crate::prefetch::PrefetchKind;
use crate::progress::Progress;
use crate::region::{Region, RegionTable};
use crate::spin::{FillerWait, SpinTuner};
use crate::stats::{Counters, Stats};
use crate::sys::mm;
use crate::sys::poller::EventFd;
use crate::sys::uffd::{Uffd, feature};
use crate::trace::{FaultTrace, Tracer};

/// Smallest fill unit: the system page.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest fill unit accepted.
pub const MAX_PAGE_SIZE: usize = 1 << 30;

/// Which page faults a runtime's userfaultfd receives: see
/// [`Builder::uffd_mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UffdMode {
    /// Full mode where this process may open a full-mode userfaultfd,
    /// user-mode-only otherwise. The default.
    #[default]
    Auto,
    /// Full mode, or [`Runtime::build`](Builder::build) fails with
    /// [`Error::FullModeUnavailable`], which says what to change.
    Full,
    /// User-mode-only (`UFFD_USER_MODE_ONLY`) even where full mode is
    /// allowed: faults raised by the kernel on a mapping's behalf (a
    /// non-resident mapped buffer passed to `read(2)` or `write(2)`) fail
    /// the system call with `EFAULT` instead of being served.
    UserModeOnly,
}

impl UffdMode {
    /// By name, any case: `auto`, `full`, or `user` (also `user-mode-only`,
    /// `user_mode_only`), as `UMIO_UFFD_MODE` takes them.
    pub fn from_name(name: &str) -> Option<UffdMode> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(UffdMode::Auto),
            "full" => Some(UffdMode::Full),
            "user" | "user-mode-only" | "user_mode_only" => Some(UffdMode::UserModeOnly),
            _ => None,
        }
    }

    /// The name [`from_name`](UffdMode::from_name) takes back.
    pub fn name(&self) -> &'static str {
        match self {
            UffdMode::Auto => "auto",
            UffdMode::Full => "full",
            UffdMode::UserModeOnly => "user",
        }
    }
}

/// What the kernel's userfaultfd offers, probed once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    bits: u64,
    user_mode_only: bool,
}

impl KernelFeatures {
    /// The raw `UFFDIO_API` feature mask.
    pub fn bits(&self) -> u64 {
        self.bits
    }
    /// From [`kernel_features`]: this process may not open a full-mode
    /// userfaultfd, so runtimes in [`UffdMode::Auto`] serve user-mode
    /// faults only. From [`Runtime::kernel_features`]: this runtime's
    /// userfaultfd is user-mode-only. Then a non-resident page of a
    /// mapping passed to a system call (`read(2)` into it, `write(2)` from
    /// it) fails the call with `EFAULT` (or shortens it), and so does a
    /// system call writing into a clean page of a writable mapping; see
    /// [`Mapping::pin`] for the way around it.
    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }
    /// Write-protect faults on anonymous memory: needed by writable mappings.
    pub fn write_protect(&self) -> bool {
        self.bits & feature::PAGEFAULT_FLAG_WP != 0
    }
    /// `UFFDIO_POISON`: failed reads raise SIGBUS in the faulting thread.
    pub fn poison(&self) -> bool {
        self.bits & feature::POISON != 0
    }
    /// Names of the features present.
    pub fn names(&self) -> Vec<&'static str> {
        feature::NAMES
            .iter()
            .filter(|(b, _)| self.bits & b != 0)
            .map(|&(_, n)| n)
            .collect()
    }
}

/// Probes the kernel once (on a throw-away descriptor: `UFFDIO_API` may be
/// called once per descriptor) and remembers the answer.
///
/// It tries a full-mode descriptor first and a user-mode-only one second
/// ([`KernelFeatures::user_mode_only`] says which it got); it fails only
/// if neither can be opened.
pub fn kernel_features() -> Result<KernelFeatures> {
    static PROBE: OnceLock<Result<KernelFeatures>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let (fd, user_mode_only) = open_uffd(UffdMode::Auto)?;
            let bits = fd.api(0).map_err(|e| Error::os("UFFDIO_API", e))?;
            Ok(KernelFeatures {
                bits,
                user_mode_only,
            })
        })
        .clone()
}

/// Opens a userfaultfd in `mode`; returns it and whether it is
/// user-mode-only.
fn open_uffd(mode: UffdMode) -> Result<(Uffd, bool)> {
    let unavailable = |f: crate::sys::uffd::OpenFailure| Error::UffdUnavailable {
        syscall_errno: f.syscall_errno,
        device_errno: f.device_errno,
    };
    match mode {
        UffdMode::UserModeOnly => Uffd::open(true).map(|u| (u, true)).map_err(unavailable),
        UffdMode::Full => {
            Uffd::open(false)
                .map(|u| (u, false))
                .map_err(|f| Error::FullModeUnavailable {
                    syscall_errno: f.syscall_errno,
                    device_errno: f.device_errno,
                })
        }
        UffdMode::Auto => match Uffd::open(false) {
            Ok(u) => Ok((u, false)),
            // The errnos of full mode say what to change; those of
            // user-mode-only (EINVAL before Linux 5.11) say less.
            Err(full) => Uffd::open(true)
                .map(|u| (u, true))
                .map_err(|_| unavailable(full)),
        },
    }
}

enum PolicySpec {
    Builtin(PolicyKind),
    Custom(Box<dyn EvictionPolicy>),
}

/// Configuration of a [`Runtime`]; see [`Runtime::builder`].
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
    promote: PromoteKind,
    uffd_mode: UffdMode,
    trace_faults: bool,
    page_cache: bool,
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
            .field("promote", &self.promote)
            .field("uffd_mode", &self.uffd_mode)
            .field("trace_faults", &self.trace_faults)
            .field("page_cache", &self.page_cache)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cache_bytes: None,
            cache_auto: None,
            huge_cache_bytes: None,
            page_size: 4 << 10,
            fillers: default_fillers(),
            evictors: 1,
            high_water: 90,
            low_water: 70,
            policy: PolicySpec::Builtin(PolicyKind::default()),
            prefetch: PrefetchKind::default(),
            filler_spin: None,
            max_fault_events: 64,
            promote: PromoteKind::Never,
            uffd_mode: UffdMode::Auto,
            trace_faults: false,
            page_cache: false,
        }
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
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
    /// choose its own with [`MapOptions::page_size`]. Default 4 KiB.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Threads that read fault events and fill pages. Default: the number
    /// of CPUs, 1 to 4.
    pub fn fillers(mut self, n: usize) -> Self {
        self.fillers = n;
        self
    }

    /// Background eviction threads (0: fillers evict for themselves when
    /// the cache is full). Default 1.
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
    /// divides 2 MiB (see [`MapOptions::promote`]). Default: never.
    pub fn promote(mut self, kind: PromoteKind) -> Self {
        self.promote = kind;
        self
    }

    /// How long every filler keeps polling for fault events after the last
    /// one before it sleeps; zero: fillers sleep at once. Default: neither
    /// fixed, but measured: the runtime times its fault events with
    /// fillers sleeping and with one filler polling for 50 us, runs the
    /// faster way, and tries the other now and then
    /// ([`Stats::filler_poll_windows`] says how often each ran).
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

    /// Which faults the runtime's userfaultfd receives. Default
    /// [`UffdMode::Auto`]: full mode (faults raised by the kernel served
    /// too, so a mapped buffer can be passed to any system call) where the
    /// process may open it (root, `CAP_SYS_PTRACE`,
    /// `vm.unprivileged_userfaultfd=1`, or read-write access to
    /// `/dev/userfaultfd`), else user-mode-only, reported by
    /// [`Runtime::user_mode_only`]. [`UffdMode::Full`] refuses the
    /// fallback.
    pub fn uffd_mode(mut self, mode: UffdMode) -> Self {
        self.uffd_mode = mode;
        self
    }

    /// Records the time stamp counter at each step of every miss, for
    /// benchmarks: [`Runtime::last_fault_trace`] returns the most recent.
    /// Default off; off, the fault path only tests that it is off.
    pub fn trace_faults(mut self, on: bool) -> Self {
        self.trace_faults = on;
        self
    }

    /// Whether [`Runtime::map_file`] keeps the kernel's page cache in
    /// the path of its reads and writes (buffered `pread`/`pwrite`), as
    /// before umio bypassed it. Default off: umio's cache is the only
    /// cache ([`umio_backends::UncachedFileStore`]: `O_DIRECT` where the
    /// file system supports it, else `POSIX_FADV_DONTNEED` of what was
    /// read and written). [`MapOptions::page_cache`] overrides it per
    /// mapping.
    pub fn page_cache(mut self, on: bool) -> Self {
        self.page_cache = on;
        self
    }

    /// Overrides settings from the environment: `UMIO_CACHE_BYTES`,
    /// `UMIO_HUGE_CACHE_BYTES`, `UMIO_PAGE_SIZE` (sizes accept K, M, G
    /// suffixes), `UMIO_FILLERS`,
    /// `UMIO_EVICTORS`, `UMIO_EVICT_HIGH_WATER`, `UMIO_EVICT_LOW_WATER`
    /// (percent), `UMIO_EVICTION` (`fifo`, `clock`, `lru` or `2q`; see
    /// [`PolicyKind`]), `UMIO_PREFETCH` (`none`, `sequential` or `stride`;
    /// see [`PrefetchKind`]), `UMIO_READAHEAD` (largest prefetch window in
    /// bytes, 0 for none),
    /// `UMIO_FILLER_SPIN_US` (microseconds, or `auto`), `UMIO_PROMOTE` (`never`,
    /// `always` or `sequential`; see [`PromoteKind`]), `UMIO_UFFD_MODE`
    /// (`auto`, `full` or `user`; see [`UffdMode`]), `UMIO_PAGE_CACHE`
    /// (`1` or `0`; see [`Builder::page_cache`]). Unset or empty
    /// variables leave the setting alone; a malformed one is an error.
    pub fn from_env(mut self) -> Result<Self> {
        if let Some(v) = env_var("UMIO_CACHE_BYTES") {
            let bad = Error::InvalidArgument("UMIO_CACHE_BYTES is not a size, auto or auto:SHARE");
            match v.trim().strip_prefix("auto") {
                Some("") => self = self.cache_bytes_auto(DEFAULT_AUTO_SHARE),
                Some(share) => {
                    let share = share.strip_prefix(':').ok_or(bad.clone())?;
                    self = self.cache_bytes_auto(share.trim().parse().map_err(|_| bad)?);
                }
                None => self = self.cache_bytes(parse_size(&v).ok_or(bad)?),
            }
        }
        if let Some(v) = env_var("UMIO_HUGE_CACHE_BYTES") {
            self.huge_cache_bytes = Some(parse_size(&v).ok_or(Error::InvalidArgument(
                "UMIO_HUGE_CACHE_BYTES is not a size",
            ))?);
        }
        if let Some(v) = env_var("UMIO_PAGE_CACHE") {
            self.page_cache = match v.trim() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => return Err(Error::InvalidArgument("UMIO_PAGE_CACHE is not 0 or 1")),
            };
        }
        if let Some(v) = env_var("UMIO_PAGE_SIZE") {
            self.page_size = parse_size(&v)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(Error::InvalidArgument("UMIO_PAGE_SIZE is not a size"))?;
        }
        if let Some(v) = env_var("UMIO_FILLERS") {
            self.fillers = v
                .trim()
                .parse()
                .map_err(|_| Error::InvalidArgument("UMIO_FILLERS is not a number"))?;
        }
        if let Some(v) = env_var("UMIO_EVICTORS") {
            self.evictors = v
                .trim()
                .parse()
                .map_err(|_| Error::InvalidArgument("UMIO_EVICTORS is not a number"))?;
        }
        if let Some(v) = env_var("UMIO_EVICT_HIGH_WATER") {
            self.high_water = v
                .trim()
                .parse()
                .map_err(|_| Error::InvalidArgument("UMIO_EVICT_HIGH_WATER is not a percentage"))?;
        }
        if let Some(v) = env_var("UMIO_EVICT_LOW_WATER") {
            self.low_water = v
                .trim()
                .parse()
                .map_err(|_| Error::InvalidArgument("UMIO_EVICT_LOW_WATER is not a percentage"))?;
        }
        if let Some(v) = env_var("UMIO_EVICTION") {
            self.policy = PolicySpec::Builtin(PolicyKind::from_name(&v).ok_or(
                Error::InvalidArgument("UMIO_EVICTION must be fifo, clock, lru or 2q"),
            )?);
        }
        if let Some(v) = env_var("UMIO_FILLER_SPIN_US") {
            self.filler_spin = if v.trim().eq_ignore_ascii_case("auto") {
                None
            } else {
                let us: u64 = v.trim().parse().map_err(|_| {
                    Error::InvalidArgument("UMIO_FILLER_SPIN_US is not a number or auto")
                })?;
                Some(Duration::from_micros(us))
            };
        }
        let kind = match env_var("UMIO_PREFETCH") {
            None => None,
            Some(v) => {
                let v = v.trim().to_ascii_lowercase();
                match v.as_str() {
                    "none" | "sequential" | "stride" => Some(v),
                    _ => {
                        return Err(Error::InvalidArgument(
                            "UMIO_PREFETCH must be none, sequential or stride",
                        ));
                    }
                }
            }
        };
        let window = match env_var("UMIO_READAHEAD") {
            Some(v) => Some(
                parse_size(&v)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or(Error::InvalidArgument("UMIO_READAHEAD is not a size"))?,
            ),
            None => None,
        };
        if let Some(v) = env_var("UMIO_PROMOTE") {
            self.promote = PromoteKind::from_name(&v).ok_or(Error::InvalidArgument(
                "UMIO_PROMOTE must be never, always or sequential",
            ))?;
        }
        if let Some(v) = env_var("UMIO_UFFD_MODE") {
            self.uffd_mode = UffdMode::from_name(&v).ok_or(Error::InvalidArgument(
                "UMIO_UFFD_MODE must be auto, full or user",
            ))?;
        }
        if kind.is_some() || window.is_some() {
            let (was_stride, was_window) = match self.prefetch {
                PrefetchKind::None => (false, 2 << 20),
                PrefetchKind::Sequential { max_window } => (false, max_window),
                PrefetchKind::Stride { max_window } => (true, max_window),
            };
            let max_window = window.unwrap_or(was_window);
            let stride = kind.as_deref().map_or(was_stride, |k| k == "stride");
            self.prefetch = if kind.as_deref() == Some("none") || max_window == 0 {
                PrefetchKind::None
            } else if stride {
                PrefetchKind::Stride { max_window }
            } else {
                PrefetchKind::Sequential { max_window }
            };
        }
        Ok(self)
    }

    /// Checks the configuration, opens the userfaultfd and starts the
    /// threads.
    pub fn build(self) -> Result<Runtime> {
        if let Some(share) = self.cache_auto
            && !(share > 0.0 && share <= 1.0)
        {
            return Err(Error::InvalidArgument(
                "the automatic cache share must be more than 0 and at most 1",
            ));
        }
        let cache_bytes = match self.cache_auto {
            Some(share) => crate::autosize::MemoryView::read()
                .target(share, 0)
                .max(4 * self.page_size as u64),
            None => self.cache_bytes.unwrap_or_else(default_cache_bytes),
        };
        validate_page_size(self.page_size)?;
        if self.fillers == 0 || self.fillers > 256 {
            return Err(Error::InvalidArgument("fillers must be 1 to 256"));
        }
        if !(1..=4096).contains(&self.max_fault_events) {
            return Err(Error::InvalidArgument("max_fault_events must be 1 to 4096"));
        }
        if self.evictors > 64 {
            return Err(Error::InvalidArgument("evictors must be 0 to 64"));
        }
        if self.high_water == 0 || self.high_water > 100 || self.low_water > self.high_water {
            return Err(Error::InvalidArgument(
                "watermarks must satisfy 0 <= low <= high <= 100 and high > 0",
            ));
        }
        if cache_bytes < 4 * self.page_size as u64 {
            return Err(Error::InvalidArgument(
                "cache_bytes must hold at least 4 pages",
            ));
        }
        if self
            .huge_cache_bytes
            .is_some_and(|b| b < 4 * HUGE_PAGE_SIZE as u64)
        {
            return Err(Error::InvalidArgument(
                "huge_cache_bytes must hold at least 4 huge pages (8 MiB)",
            ));
        }
        let (uffd, user_mode_only) = open_uffd(self.uffd_mode)?;
        if user_mode_only && self.uffd_mode == UffdMode::Auto {
            log::warn!(
                "umio: no permission for full-mode userfaultfd; serving user-mode faults only: \
                 a system call given a non-resident mapped buffer fails with EFAULT (run as root, \
                 grant access to /dev/userfaultfd or set vm.unprivileged_userfaultfd=1 to lift this)"
            );
        }
        let features = KernelFeatures {
            user_mode_only,
            ..kernel_features()?
        };
        let wanted = feature::PAGEFAULT_FLAG_WP | feature::POISON | feature::THREAD_ID;
        uffd.api(features.bits & wanted)
            .map_err(|e| Error::os("UFFDIO_API", e))?;
        let (policy, huge_policy) = match self.policy {
            PolicySpec::Builtin(k) => (k.build(), k),
            PolicySpec::Custom(p) => (p, PolicyKind::default()),
        };
        let huge = self.huge_cache_bytes.map(|bytes| Pool {
            budget: FrameBudget::new(bytes, self.high_water, self.low_water),
            policy: huge_policy.build(),
        });
        let shutdown_fd = EventFd::new().map_err(|e| Error::os("eventfd", e))?;
        let shared = Arc::new(Shared {
            cfg: Config {
                page_size: self.page_size,
                prefetch: self.prefetch,
                credit_batch: (cache_bytes / 256).min(1 << 20),
                filler_wait: match self.filler_spin {
                    Some(d) => FillerWait::Fixed(d.min(Duration::from_secs(1))),
                    None => FillerWait::Adaptive,
                },
                max_fault_events: self.max_fault_events,
                cache_auto: self.cache_auto,
                promote: self.promote,
                fillers: self.fillers,
                page_cache: self.page_cache,
            },
            features,
            uffd,
            regions: ArcSwap::from_pointee(RegionTable::default()),
            regions_writer: Mutex::new(()),
            next_id: AtomicU64::new(1),
            budget: FrameBudget::new(cache_bytes, self.high_water, self.low_water),
            policy,
            huge,
            spin: SpinTuner::new(),
            evict_signal: Signal::default(),
            prefetch_jobs: Mutex::new(VecDeque::new()),
            prefetch_signal: Condvar::new(),
            stats: Counters::default(),
            progress: Progress::new(),
            pinned_bytes: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            shutdown_fd,
            closed: AtomicBool::new(false),
            trace: self.trace_faults.then(Box::default),
        });
        let mut threads = Vec::new();
        let spawn = |name: String, f: fn(Arc<Shared>), threads: &mut Vec<JoinHandle<()>>| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || f(s))
                .map(|h| threads.push(h))
                .map_err(|e| {
                    Error::os(
                        "spawning a thread",
                        e.raw_os_error().unwrap_or(libc::EAGAIN),
                    )
                })
        };
        let started = (|| {
            for i in 0..self.fillers {
                spawn(
                    format!("umio-filler-{i}"),
                    crate::fault::filler_main,
                    &mut threads,
                )?;
            }
            for i in 0..self.evictors {
                spawn(
                    format!("umio-evictor-{i}"),
                    crate::evict::evictor_main,
                    &mut threads,
                )?;
            }
            if shared.cfg.cache_auto.is_some() {
                spawn(
                    "umio-autosize".into(),
                    crate::autosize::autosize_main,
                    &mut threads,
                )?;
            }
            spawn(
                "umio-prefetch".into(),
                crate::fault::prefetch_main,
                &mut threads,
            )
        })();
        let inner = RuntimeInner {
            shared,
            threads: Mutex::new(threads),
        };
        started?;
        Ok(Runtime {
            inner: Arc::new(inner),
        })
    }
}

/// The share of `UMIO_CACHE_BYTES=auto`.
pub const DEFAULT_AUTO_SHARE: f64 = 0.5;

pub(crate) fn validate_page_size(bytes: usize) -> Result<()> {
    if !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&bytes) || !bytes.is_multiple_of(MIN_PAGE_SIZE) {
        return Err(Error::InvalidArgument(
            "page size must be a multiple of 4096 between 4 KiB and 1 GiB",
        ));
    }
    Ok(())
}

/// The default number of fillers: the number of CPUs, 1 to 4.
pub fn default_fillers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4))
}

/// The default cache bound: a quarter of physical memory, 64 MiB to 4 GiB.
pub fn default_cache_bytes() -> u64 {
    // SAFETY: sysconf reads a system constant.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    let total = if pages > 0 {
        pages as u64 * 4096
    } else {
        1 << 30
    };
    (total / 4).clamp(64 << 20, 4 << 30)
}

pub(crate) struct Config {
    pub page_size: usize,
    pub prefetch: PrefetchKind,
    /// Bytes a thread reserves from the budget at once.
    pub credit_batch: u64,
    /// `Some(share)`: the automatic cache bound.
    pub cache_auto: Option<f64>,
    /// How fillers wait for events.
    pub filler_wait: FillerWait,
    /// Fault events read at once.
    pub max_fault_events: usize,
    /// Default promotion policy.
    pub promote: PromoteKind,
    /// Filler threads.
    pub fillers: usize,
    /// `map_file` through the kernel's page cache ([`Builder::page_cache`]).
    pub page_cache: bool,
}

/// A wake-up flag for a background thread.
#[derive(Default)]
pub(crate) struct Signal {
    pending: Mutex<bool>,
    cond: Condvar,
    armed: AtomicBool,
}

impl Signal {
    /// Wakes the thread unless a wake-up is already pending: callers on the
    /// fault path pay one atomic load when the thread is already busy.
    pub fn kick(&self) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }

    /// Waits for a kick or the timeout.
    pub fn wait(&self, timeout: Duration) {
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

/// Why [`Shared::clear_for_fixed`] did not clear the range.
enum ClearError {
    /// A region in the range is being unmapped by another thread: release
    /// the table's lock and look again.
    Retry,
    Fail(Error),
}

/// Unmaps the parts of `released` (memory of pages taken out of older
/// regions) outside `keep` (the new region's range).
fn release_outside(released: &[Range<usize>], keep: Range<usize>) {
    for r in released {
        for part in [r.start..r.end.min(keep.start), r.start.max(keep.end)..r.end] {
            if part.start < part.end {
                let unmapped = mm::unmap(part.start, part.len());
                assert!(
                    unmapped.is_ok(),
                    "munmap of replaced pages failed: {unmapped:?}"
                );
            }
        }
    }
}

/// A request to fill pages in the background: sorted, disjoint page
/// ranges of one region, filled in batches of store requests.
pub(crate) struct PrefetchJob {
    pub region: Arc<Region>,
    pub pages: Vec<Range<usize>>,
    /// Instead of filling `pages`: promote this 2 MiB range (claimed).
    pub promote: Option<usize>,
}

/// State shared by the runtime's handles, its mappings and its threads.
pub(crate) struct Shared {
    pub cfg: Config,
    pub features: KernelFeatures,
    pub uffd: Uffd,
    pub regions: ArcSwap<RegionTable>,
    regions_writer: Mutex<()>,
    next_id: AtomicU64,
    /// The regular pool's bound and policy (every region's, without a huge
    /// pool).
    pub budget: FrameBudget,
    pub policy: Box<dyn EvictionPolicy>,
    /// The huge-page pool ([`Builder::huge_cache_bytes`]).
    pub huge: Option<Pool>,
    /// Whether fillers poll or sleep ([`FillerWait::Adaptive`]).
    pub spin: SpinTuner,
    pub evict_signal: Signal,
    pub prefetch_jobs: Mutex<VecDeque<PrefetchJob>>,
    pub prefetch_signal: Condvar,
    pub stats: Counters,
    /// Faults resolved without progress, per thread.
    pub progress: Progress,
    /// Bytes of pinned pages, bounded by half the cache.
    pub pinned_bytes: AtomicU64,
    pub shutdown: AtomicBool,
    pub shutdown_fd: EventFd,
    closed: AtomicBool,
    /// Fault tracing ([`Builder::trace_faults`]); `None` when off.
    pub trace: Option<Box<Tracer>>,
}

/// A cache pool: a bound on bytes and the policy that evicts within it.
pub(crate) struct Pool {
    pub budget: FrameBudget,
    pub policy: Box<dyn EvictionPolicy>,
}

impl Shared {
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// The bound of `region`'s pool.
    #[inline]
    pub fn budget_of(&self, region: &Region) -> &FrameBudget {
        match &self.huge {
            Some(h) if region.huge_pool => &h.budget,
            _ => &self.budget,
        }
    }

    /// The eviction policy of `region`'s pool.
    #[inline]
    pub fn policy_of(&self, region: &Region) -> &dyn EvictionPolicy {
        match &self.huge {
            Some(h) if region.huge_pool => &*h.policy,
            _ => &*self.policy,
        }
    }

    /// Sets the bound of the regular pool or of the huge-page pool.
    pub fn set_pool_limit(&self, huge_pool: bool, bytes: u64) -> Result<()> {
        // One change at a time: the checks below hold until it is made.
        static RESIZING: Mutex<()> = Mutex::new(());
        let _one = RESIZING.lock().unwrap_or_else(|e| e.into_inner());
        let budget = if huge_pool {
            &self
                .huge
                .as_ref()
                .ok_or(Error::InvalidArgument("the runtime has no huge-page pool"))?
                .budget
        } else {
            &self.budget
        };
        if bytes < 4 * self.largest_page(huge_pool) as u64 {
            return Err(Error::InvalidArgument(
                "the cache must hold at least 4 pages of the page size and of every region's",
            ));
        }
        let pinned = self.pinned_bytes.load(Ordering::Acquire);
        let total = self.total_limit() - budget.limit() + bytes;
        if pinned > total / 2 {
            return Err(Error::BelowPinned {
                pinned,
                requested: bytes,
            });
        }
        let before = budget.limit();
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
    pub fn largest_page(&self, huge_pool: bool) -> usize {
        let min_page = if huge_pool {
            HUGE_PAGE_SIZE
        } else {
            self.cfg.page_size
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
    pub fn total_limit(&self) -> u64 {
        self.budget.limit() + self.huge.as_ref().map_or(0, |h| h.budget.limit())
    }

    fn map(&self, store: Arc<dyn Store>, opts: &MapOptions) -> Result<Arc<Region>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        let mut page_size = opts.page_size.unwrap_or(self.cfg.page_size);
        let mut hugetlb = false;
        if let Some(fallback) = opts.hugetlb {
            if opts.page_size.is_some_and(|p| p != HUGE_PAGE_SIZE) {
                return Err(Error::InvalidArgument(
                    "a hugetlbfs region's page size is 2 MiB",
                ));
            }
            if opts.fixed_address.is_some() {
                return Err(Error::InvalidArgument(
                    "a hugetlbfs region cannot be mapped at a fixed address",
                ));
            }
            page_size = HUGE_PAGE_SIZE;
            if crate::huge::free_huge_pages() > 0 {
                hugetlb = true;
            } else if !fallback {
                return Err(Error::HugePagesUnavailable);
            } else {
                log::info!("umio: no free huge page; mapping ordinary memory with 2 MiB pages");
            }
        }
        validate_page_size(page_size)?;
        let huge_pool = self.huge.is_some() && page_size >= HUGE_PAGE_SIZE;
        let pool_limit = match &self.huge {
            Some(h) if huge_pool => h.budget.limit(),
            _ => self.budget.limit(),
        };
        if 4 * page_size as u64 > pool_limit {
            return Err(Error::InvalidArgument(
                "page size larger than a quarter of the cache",
            ));
        }
        if !opts.offset.is_multiple_of(MIN_PAGE_SIZE as u64) {
            return Err(Error::InvalidArgument("offset must be a multiple of 4096"));
        }
        let len = match opts.len {
            Some(len) => len,
            None => {
                let store_len = store.len()?;
                let rest = store_len
                    .checked_sub(opts.offset)
                    .ok_or(Error::InvalidArgument(
                        "offset is past the end of the store",
                    ))?;
                usize::try_from(rest).map_err(|_| Error::InvalidArgument("length too large"))?
            }
        };
        if len == 0 {
            return Err(Error::InvalidArgument("length must be greater than zero"));
        }
        let end = opts
            .offset
            .checked_add(len as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(Error::InvalidArgument("offset + length overflows"))?;
        let span = len
            .checked_next_multiple_of(page_size)
            .filter(|&s| s <= isize::MAX as usize / 2)
            .ok_or(Error::InvalidArgument("length too large"))?;
        if opts.writable {
            if !store.is_writable() {
                return Err(Error::ReadOnlyStore);
            }
            if !self.features.write_protect() {
                return Err(Error::Unsupported(
                    "write-protect faults (UFFD_FEATURE_PAGEFAULT_FLAG_WP, Linux 5.7+): map read-only",
                ));
            }
            if store.len()? < end {
                store.set_len(end)?;
            }
        }
        let prefetch = match &opts.prefetcher {
            Some(p) => p.clone(),
            None => opts.prefetch.unwrap_or(self.cfg.prefetch).build(page_size),
        };
        // Regions whose pages tile 2 MiB ranges can be promoted.
        let promotable = !hugetlb && HUGE_PAGE_SIZE.is_multiple_of(page_size);
        let promoter = match &opts.promoter {
            Some(p) => Some(p.clone()),
            None => opts.promote.unwrap_or(self.cfg.promote).build(),
        };
        if promoter.is_some() && !promotable {
            return Err(Error::InvalidArgument(
                "huge-page promotion needs a page size that divides 2 MiB",
            ));
        }
        // Held from choosing the address to publishing the region, so that
        // fixed mappings cannot race each other into one range.
        let mut w = self.lock_regions();
        let base = match opts.fixed_address {
            Some(Fixed { addr, replace }) => {
                if !addr.is_multiple_of(MIN_PAGE_SIZE) || addr == 0 {
                    return Err(Error::InvalidArgument(
                        "fixed address must be a non-zero multiple of 4096",
                    ));
                }
                let end = addr
                    .checked_add(span)
                    .ok_or(Error::InvalidArgument("fixed address + length overflows"))?;
                // Pages of older regions taken out, their memory still
                // mapped until the new region replaces it.
                let mut released = Vec::new();
                loop {
                    match self.clear_for_fixed(&w, addr..end, replace, &mut released) {
                        Ok(()) => break,
                        Err(ClearError::Retry) => {
                            // Another thread is unmapping a region there:
                            // let it finish.
                            drop(w);
                            std::thread::sleep(Duration::from_micros(200));
                            w = self.lock_regions();
                        }
                        Err(ClearError::Fail(e)) => {
                            release_outside(&released, 0..0);
                            return Err(e);
                        }
                    }
                }
                let mapped = if replace {
                    // SAFETY: the caller of `MapOptions::fixed_address`
                    // promised the range is theirs to replace; the umio
                    // pages in it are taken out of their regions.
                    unsafe { mm::map_anonymous_fixed(addr, span, opts.writable) }
                } else {
                    mm::map_anonymous_noreplace(addr, span, opts.writable)
                };
                match mapped {
                    Ok(base) => {
                        // What the new region does not cover: the rest of
                        // older regions' last pages, past their lengths.
                        release_outside(&released, addr..end);
                        base
                    }
                    Err(e) => {
                        release_outside(&released, 0..0);
                        return Err(if e == libc::EEXIST && !replace {
                            Error::Overlap
                        } else {
                            Error::os("mmap of the region at a fixed address", e)
                        });
                    }
                }
            }
            None if hugetlb => mm::map_hugetlb(span, opts.writable)
                .map_err(|e| Error::os("mmap of the hugetlbfs region", e))?,
            None => {
                let align = if promotable {
                    HUGE_PAGE_SIZE
                } else if page_size.is_power_of_two() {
                    page_size.min(HUGE_PAGE_SIZE)
                } else {
                    MIN_PAGE_SIZE
                };
                mm::map_anonymous(span, align, opts.writable)
                    .map_err(|e| Error::os("mmap of the region", e))?
            }
        };
        if promoter.is_some() {
            // Collapsed ranges may be backed by huge pages. Not fatal: a
            // kernel without THP refuses each collapse, counted in stats.
            if let Err(e) = mm::advise(base, span, libc::MADV_HUGEPAGE) {
                log::warn!("umio: madvise(MADV_HUGEPAGE) failed: errno {e}");
            }
        }
        if let Err(e) = self.uffd.register(base, span, opts.writable) {
            let r = mm::unmap(base, span);
            debug_assert!(r.is_ok());
            return Err(Error::os("UFFDIO_REGISTER", e));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let Some(mut region) = Region::new(
            id,
            base,
            len,
            page_size,
            opts.offset,
            store,
            opts.writable,
            prefetch,
        ) else {
            let _ = self.uffd.unregister(base, span);
            let r = mm::unmap(base, span);
            debug_assert!(r.is_ok());
            return Err(Error::os("allocating the page table", libc::ENOMEM));
        };
        region.hugetlb = hugetlb;
        region.huge_pool = huge_pool;
        if promotable && base.is_multiple_of(HUGE_PAGE_SIZE) {
            region.huge = Some(HugeState::new(region.pages.len(), page_size, promoter));
        }
        let region = Arc::new(region);
        self.regions
            .store(Arc::new(self.regions.load().with(region.clone())));
        drop(w);
        Ok(region)
    }

    /// The region table's writer lock: held to change the table, and from
    /// choosing a mapping's address to publishing it.
    pub(crate) fn lock_regions(&self) -> MutexGuard<'_, ()> {
        self.regions_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Before a fixed mapping of `range`: with `replace`, takes the pages
    /// of older regions in the range out of them, after writing them back
    /// (see [`MapOptions::fixed_address`]), and adds their address ranges
    /// to `released`, still mapped; without, refuses any overlap.
    fn clear_for_fixed(
        &self,
        w: &MutexGuard<'_, ()>,
        range: Range<usize>,
        replace: bool,
        released: &mut Vec<Range<usize>>,
    ) -> Result<(), ClearError> {
        let table = self.regions.load();
        let parts = table.overlapping(&range);
        if parts.is_empty() {
            return Ok(());
        }
        if !replace {
            return Err(ClearError::Fail(Error::Overlap));
        }
        // Check everything before changing anything.
        let mut victims: Vec<(Arc<Region>, Range<usize>)> = Vec::new();
        for (part, region) in parts {
            if region.is_closing() {
                return Err(ClearError::Retry);
            }
            let first = region.page_of(part.start.max(range.start));
            let last = region.page_of(part.end.min(range.end) - 1) + 1;
            let in_use_end = region.base + region.len.next_multiple_of(MIN_PAGE_SIZE);
            if region.page_addr(first) < range.start
                || (region.page_addr(last) > range.end && range.end < in_use_end)
            {
                log::warn!(
                    "umio: a fixed mapping of {:#x}..{:#x} would split a {}-byte page of the \
                     umio mapping at {:#x} (length {}) whose bytes outside the range are in \
                     use; refused (EINVAL)",
                    range.start,
                    range.end,
                    region.page_size,
                    region.base,
                    region.len
                );
                return Err(ClearError::Fail(Error::InvalidArgument(
                    "a fixed mapping may not split a page of an older umio mapping \
                     whose bytes outside the range are in use",
                )));
            }
            victims.push((region, first..last));
        }
        // Dirty data reaches the store before anything is replaced: a
        // failure leaves the older mappings whole.
        for (region, pages) in &victims {
            self.writeback(region, pages.clone())
                .map_err(ClearError::Fail)?;
        }
        let mut result = Ok(());
        for (region, pages) in &victims {
            match self.take_pages(region, pages.clone(), false) {
                Err(Error::NotMapped) => {
                    // A concurrent unmap took some of these pages first
                    // (nothing of this part was taken): look again.
                    result = Err(ClearError::Retry);
                }
                r => {
                    released.push(region.page_addr(pages.start)..region.page_addr(pages.end));
                    if let (Ok(()), Err(e)) = (&result, r) {
                        result = Err(ClearError::Fail(e));
                    }
                }
            }
            self.republish(w, region);
        }
        result
    }

    /// Writes back, then removes the region. The region is gone whatever
    /// the write-back's outcome; its error is returned.
    pub fn unmap(&self, region: &Arc<Region>) -> Result<()> {
        region.close();
        let result = self.writeback(region, 0..region.pages.len());
        // Held until the memory is unmapped, so that a fixed mapping
        // replacing part of the region cannot be made in between and then
        // unmapped here.
        let w = self.lock_regions();
        self.regions
            .store(Arc::new(self.regions.load().without(region.id)));
        // Ranges charged to the huge-page pool come back to the region's
        // pool, which then releases every resident page.
        self.demote_range(region, &(0..region.pages.len()));
        let resident = region.pages.count_resident();
        let pinned = region.pages.count_pinned();
        // Unregistering wakes any thread still blocked on the range. Pages
        // that `unmap_range` took out are no longer ours: leave them.
        let mut unreg = Ok(());
        for pages in region.mapped_ranges() {
            let (addr, len) = (
                region.page_addr(pages.start),
                pages.len() * region.page_size,
            );
            unreg = unreg.and(self.uffd.unregister(addr, len));
            let unmapped = mm::unmap(addr, len);
            assert!(unmapped.is_ok(), "munmap of a region failed: {unmapped:?}");
        }
        drop(w);
        self.budget_of(region)
            .release((resident * region.page_size) as u64);
        self.pinned_bytes
            .fetch_sub((pinned * region.page_size) as u64, Ordering::AcqRel);
        self.policy_of(region).forget_region(region.id);
        if let Some(pool) = &self.huge {
            pool.policy.forget_region(region.id);
        }
        result?;
        unreg.map_err(|e| Error::os("UFFDIO_UNREGISTER", e))
    }

    pub fn stats(&self) -> Stats {
        let huge = self.huge.as_ref().map_or(0, |h| h.budget.used());
        self.stats.snapshot(crate::stats::Gauges {
            resident_bytes: self.budget.used() + huge,
            huge_pool_bytes: huge,
            cache_bytes: self.budget.limit(),
            huge_cache_bytes: self.huge.as_ref().map_or(0, |h| h.budget.limit()),
            filler_windows: self
                .spin
                .windows_by_mode
                .each_ref()
                .map(|w| w.load(Ordering::Relaxed)),
            regions: self.regions.load().len() as u64,
        })
    }
}

struct RuntimeInner {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        let s = &self.shared;
        s.shutdown.store(true, Ordering::Release);
        s.shutdown_fd.signal();
        s.evict_signal.kick();
        {
            let _q = s.prefetch_jobs.lock().unwrap_or_else(|e| e.into_inner());
            s.prefetch_signal.notify_all();
        }
        for h in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            if h.join().is_err() {
                log::error!("a umio thread panicked");
            }
        }
    }
}

/// A umio runtime: a page cache of bounded size shared by the regions it
/// maps, and the threads that serve their faults.
///
/// Cheap to clone (a reference count). The threads stop when the last
/// clone and the last [`Mapping`] are dropped.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = umio_core::Runtime::builder()
///     .cache_bytes(256 << 20)
///     .page_size(64 << 10)
///     .fillers(2)
///     .build()?;
/// let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin")?;
/// let mut map = rt.map_file(&file, umio_core::MapOptions::new().len(1 << 20).writable(true))?;
/// map.as_mut_slice()[..5].copy_from_slice(b"hello");
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
            .field("cache_bytes", &self.inner.shared.budget.limit())
            .field("regions", &self.inner.shared.regions.load().len())
            .finish()
    }
}

impl Runtime {
    /// A builder with defaults that work.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The process-wide runtime, built on first use from the environment
    /// ([`Builder::from_env`]). An error is returned on every call if the
    /// first build failed.
    pub fn global() -> Result<&'static Runtime> {
        static GLOBAL: OnceLock<Result<Runtime>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Builder::default().from_env()?.build())
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Maps a file. The runtime keeps its own duplicate of the descriptor.
    /// `opts` must not name a store. By default the file is read and
    /// written without the kernel's page cache
    /// ([`umio_backends::UncachedFileStore`]); [`MapOptions::page_cache`]
    /// or [`Builder::page_cache`] opts back in.
    pub fn map_file(&self, file: &File, opts: MapOptions) -> Result<Mapping> {
        if opts.store.is_some() {
            return Err(Error::InvalidArgument(
                "map_file takes no store option; use map",
            ));
        }
        let page_cache = opts.page_cache.unwrap_or(self.inner.shared.cfg.page_cache);
        let store: Arc<dyn Store> = if page_cache {
            FileStore::new(file).map(|s| Arc::new(s) as Arc<dyn Store>)
        } else {
            UncachedFileStore::new(file).map(|s| Arc::new(s) as Arc<dyn Store>)
        }
        .map_err(|e| {
            Error::os(
                "opening the file store",
                e.raw_os_error().unwrap_or(libc::EBADF),
            )
        })?;
        self.map(opts.store(store))
    }

    /// Maps the store named by [`MapOptions::store`].
    pub fn map(&self, opts: MapOptions) -> Result<Mapping> {
        let store = opts.store.clone().ok_or(Error::InvalidArgument(
            "no store given: use MapOptions::store or map_file",
        ))?;
        let (mut opts, skew) = opts.split_offset()?;
        let store = self.region_store(store, &mut opts)?;
        let region = self.inner.shared.map(store, &opts)?;
        Ok(Mapping::new(self.clone(), region).with_skew(skew))
    }

    /// Refuses further maps; existing mappings keep working until they are
    /// unmapped or dropped.
    pub fn shutdown(&self) {
        self.inner.shared.closed.store(true, Ordering::Release);
    }

    /// Counters since the runtime started.
    pub fn stats(&self) -> Stats {
        self.inner.shared.stats()
    }

    /// The cache bound in bytes (of the regular pool, when there is a
    /// huge-page pool).
    pub fn cache_bytes(&self) -> u64 {
        self.inner.shared.budget.limit()
    }

    /// The huge-page pool's bound in bytes, if the runtime has one
    /// ([`Builder::huge_cache_bytes`]).
    pub fn huge_cache_bytes(&self) -> Option<u64> {
        self.inner.shared.huge.as_ref().map(|h| h.budget.limit())
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

    /// The default page size of new regions.
    pub fn page_size(&self) -> usize {
        self.inner.shared.cfg.page_size
    }

    /// Whether [`map_file`](Runtime::map_file) goes through the kernel's
    /// page cache by default ([`Builder::page_cache`]).
    pub fn page_cache(&self) -> bool {
        self.inner.shared.cfg.page_cache
    }

    /// The kernel features in use.
    pub fn kernel_features(&self) -> KernelFeatures {
        self.inner.shared.features
    }

    /// Whether this runtime's userfaultfd serves user-mode faults only
    /// (see [`UffdMode`] and [`KernelFeatures::user_mode_only`]).
    pub fn user_mode_only(&self) -> bool {
        self.inner.shared.features.user_mode_only
    }

    /// The time stamps of the most recent miss a filler served, if the
    /// runtime was built with [`Builder::trace_faults`] and has served one.
    /// The filler publishes a trace just after it wakes the faulting
    /// thread: wait for [`FaultTrace::seq`] to change.
    pub fn last_fault_trace(&self) -> Option<FaultTrace> {
        self.inner.shared.trace.as_ref()?.last()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size(" 2m "), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }
}
