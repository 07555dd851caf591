//! The C library's configuration of the process-wide runtime
//! (`umio_core::ProcessRuntime`, whose rules hold here too: started by the
//! first mapping, a fork child's own, a failed start remembered until the
//! configuration changes), from (in rising order of precedence) umio's
//! defaults, the environment (read by umio-core's one reader, `EnvConfig`:
//! the `UMIO_*` variables, with UMap's `UMAP_*` names as aliases) and the
//! `umio_config_set_*` calls made before. Defaults and checks are core's.
//!
//! Every setting is passed to the builder explicitly; once the runtime
//! runs, the getters read what it runs with off the runtime itself
//! (`Settings::running`), since Rust's `Runtime::global` may have started
//! it from the environment alone.

use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

use log::LevelFilter;
use umio_cache::PolicyKind;
use umio_core::{
    Builder, DEFAULT_EVICTORS, DEFAULT_PAGE_SIZE, DEFAULT_READ_AHEAD, DEFAULT_WATERMARKS, EnvCache,
    EnvConfig, EnvPrefetch, FaultService, PrefetchKind, ProcessConfig, ProcessRuntime, PromoteKind,
    Runtime, UffdMode,
};

use crate::boundary::Errno;
use crate::logging;
use crate::policy::CEviction;

/// `UMAP_MAX_FAULT_EVENTS` when unset: UMap's default, which the C library
/// keeps (umio-core's is `umio_core::DEFAULT_MAX_FAULT_EVENTS`).
const UMAP_MAX_FAULT_EVENTS: u64 = 256;

/// The runtime's eviction policy: a built-in one, or one written in C.
#[derive(Clone)]
pub(crate) enum Eviction {
    Builtin(PolicyKind),
    Custom(CEviction),
    /// A Rust program's own (`Builder::eviction_policy`), in a runtime
    /// that Rust's `Runtime::global` started, not this library.
    Foreign,
}

impl PartialEq for Eviction {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Eviction::Builtin(a), Eviction::Builtin(b)) => a == b,
            (Eviction::Custom(a), Eviction::Custom(b)) => a.same(b),
            (Eviction::Foreign, Eviction::Foreign) => true,
            _ => false,
        }
    }
}

impl Eq for Eviction {}

impl std::fmt::Debug for Eviction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.c_name().to_str().unwrap_or("?"))
    }
}

impl Eviction {
    /// The policy's name as a C string, for `struct umio_config`: a
    /// built-in's, or `"custom"`.
    pub(crate) fn c_name(&self) -> &'static CStr {
        match self {
            Eviction::Builtin(kind) => policy_c_name(*kind),
            Eviction::Custom(_) | Eviction::Foreign => c"custom",
        }
    }
}

/// Settings given by `umio_config_set_*`; `None` leaves the environment
/// or the default in force.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub page_size: Option<usize>,
    pub cache_bytes: Option<u64>,
    /// The automatic bound's share, in thousandths
    /// (`umio_config_set_cache_auto`).
    pub cache_auto: Option<u16>,
    pub huge_cache_bytes: Option<u64>,
    pub fillers: Option<usize>,
    pub evictors: Option<usize>,
    pub watermarks: Option<(u8, u8)>,
    pub eviction: Option<Eviction>,
    pub read_ahead: Option<usize>,
    pub max_fault_events: Option<u32>,
    pub uffd_mode: Option<UffdMode>,
    /// `umio_config_set_page_cache`.
    pub page_cache: Option<bool>,
    /// `umio_config_set_fault_service`.
    pub fault_service: Option<FaultService>,
}

/// A resolved configuration: what the runtime runs (or will run) with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub page_size: usize,
    pub cache_bytes: u64,
    /// `Some(thousandths)`: the automatic bound, that share of the memory
    /// left for umio; `cache_bytes` is then the bound it started with.
    pub cache_auto: Option<u16>,
    /// The huge-page pool's bound (`UMIO_HUGE_CACHE_BYTES`); 0: none.
    pub huge_cache_bytes: u64,
    pub fillers: usize,
    pub evictors: usize,
    pub high_water: u8,
    pub low_water: u8,
    pub eviction: Eviction,
    /// Largest read-ahead window in bytes; 0 for none.
    pub read_ahead: usize,
    /// The stride prefetcher rather than the sequential one
    /// (`UMIO_PREFETCH=stride`).
    pub stride: bool,
    /// How long fillers poll before they sleep (`UMIO_FILLER_SPIN_US`);
    /// `None`: umio's choice (unset or `auto`).
    pub filler_spin: Option<std::time::Duration>,
    /// Huge-page promotion (`UMIO_PROMOTE`).
    pub promote: PromoteKind,
    pub max_fault_events: u64,
    /// Store requests in flight per batch (`UMIO_QUEUE_DEPTH`); `None`:
    /// each store's own.
    pub queue_depth: Option<usize>,
    pub log_level: Option<LevelFilter>,
    /// Full mode, user-mode-only, or full where allowed (`UMIO_UFFD_MODE`).
    pub uffd_mode: UffdMode,
    /// Files read and written through the kernel's page cache too
    /// (`UMIO_PAGE_CACHE`).
    pub page_cache: bool,
    /// The program's own `madvise` on umio memory followed through
    /// userfaultfd remove events (`UMIO_REMOVE_EVENTS`).
    pub remove_events: bool,
    /// Seconds between two statistics lines printed on stderr
    /// (`UMAP_MONITOR_FREQ`, UMap's monitor thread); 0: none.
    pub monitor_freq: u64,
    /// Fillers, in the faulting thread, or automatic
    /// (`UMIO_FAULT_SERVICE`).
    pub fault_service: FaultService,
}

impl ProcessConfig for Settings {
    fn builder(&self) -> umio_core::Result<Builder> {
        Ok(self.runtime_builder())
    }

    fn started(&self, rt: &Runtime) {
        log::info!("umio: runtime started: {self:?}");
        if self.monitor_freq > 0 {
            crate::monitor::start(rt, self.monitor_freq);
        }
    }
}

impl Settings {
    fn runtime_builder(&self) -> Builder {
        let mut builder = Runtime::builder()
            .page_size(self.page_size)
            .cache_bytes(self.cache_bytes)
            .fillers(self.fillers)
            .evictors(self.evictors)
            .watermarks(self.high_water, self.low_water)
            .prefetch(match prefetch_kind(self.read_ahead) {
                PrefetchKind::Sequential { max_window } if self.stride => {
                    PrefetchKind::Stride { max_window }
                }
                kind => kind,
            })
            .promote(self.promote)
            .max_fault_events(self.max_fault_events as usize)
            .uffd_mode(self.uffd_mode)
            .fault_service(self.fault_service)
            .page_cache(self.page_cache)
            .remove_events(self.remove_events);
        if let Some(share) = self.cache_auto {
            builder = builder.cache_bytes_auto(f64::from(share) / 1000.0);
        }
        if let Some(n) = self.queue_depth {
            builder = builder.queue_depth(n);
        }
        if let Some(spin) = self.filler_spin {
            builder = builder.filler_spin(spin);
        }
        if self.huge_cache_bytes > 0 {
            builder = builder.huge_cache_bytes(self.huge_cache_bytes);
        }
        match &self.eviction {
            Eviction::Builtin(kind) => builder.eviction(*kind),
            Eviction::Custom(policy) => builder.eviction_policy(Box::new(policy.clone())),
            // Never resolved from the environment and the setters: only
            // read off a running runtime (`Settings::running`).
            Eviction::Foreign => builder,
        }
    }

    /// What `rt`, the running process-wide runtime, runs with, whoever
    /// started it: this library, from `started` (the environment and the
    /// setters), or Rust's `Runtime::global`, from the environment alone
    /// (then the setters were never applied). Read off the runtime, so a
    /// getter reports what is in force, not what C would have asked for;
    /// C's own policy, log level and monitor come from `started`, the
    /// only place they are known.
    fn running(rt: &Runtime, started: Option<&Settings>) -> Settings {
        let c = rt.config();
        let (read_ahead, stride) = match c.prefetch {
            PrefetchKind::None => (0, false),
            PrefetchKind::Sequential { max_window } => (max_window, false),
            PrefetchKind::Stride { max_window } => (max_window, true),
        };
        let eviction = match (c.eviction, started) {
            (Some(kind), _) => Eviction::Builtin(kind),
            (None, Some(s)) => s.eviction.clone(),
            (None, None) => Eviction::Foreign,
        };
        Settings {
            page_size: c.page_size,
            // The bounds in force now: they change at run time.
            cache_bytes: rt.cache_bytes(),
            cache_auto: c
                .cache_auto
                .map(|share| (share * 1000.0).round().max(1.0) as u16),
            huge_cache_bytes: rt.huge_cache_bytes().unwrap_or(0),
            fillers: c.fillers,
            evictors: c.evictors,
            high_water: c.watermarks.0,
            low_water: c.watermarks.1,
            eviction,
            read_ahead,
            stride,
            filler_spin: c.filler_spin,
            promote: c.promote,
            max_fault_events: c.max_fault_events as u64,
            queue_depth: c.queue_depth,
            log_level: started.and_then(|s| s.log_level),
            uffd_mode: c.uffd_mode,
            page_cache: c.page_cache,
            remove_events: c.remove_events,
            monitor_freq: started.map_or(0, |s| s.monitor_freq),
            fault_service: c.fault_service,
        }
    }
}

/// The prefetch policy for a largest read-ahead window (0: none).
pub(crate) fn prefetch_kind(read_ahead: usize) -> PrefetchKind {
    if read_ahead == 0 {
        PrefetchKind::None
    } else {
        PrefetchKind::Sequential {
            max_window: read_ahead,
        }
    }
}

/// An eviction policy by name (`"fifo"`, `"clock"`, `"lru"`, `"2q"`; any
/// case), as umio-cache spells them.
pub(crate) fn parse_policy(name: &str) -> Option<PolicyKind> {
    PolicyKind::from_name(name)
}

/// A policy's name as a C string, for `struct umio_config`.
pub(crate) fn policy_c_name(kind: PolicyKind) -> &'static CStr {
    static NAMES: OnceLock<Vec<(PolicyKind, CString)>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            PolicyKind::ALL
                .into_iter()
                .filter_map(|k| Some((k, CString::new(k.name()).ok()?)))
                .collect()
        })
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(c"", |(_, name)| name.as_c_str())
}

/// `umio_config_set_watermarks`' arguments, as core checks them.
pub(crate) fn check_watermarks(high: u32, low: u32) -> Result<(u8, u8), Errno> {
    let einval = |_| Errno(libc::EINVAL);
    let (high, low) = (
        u8::try_from(high).map_err(einval)?,
        u8::try_from(low).map_err(einval)?,
    );
    Builder::check_watermarks(high, low)?;
    Ok((high, low))
}

/// Fault events a filler reads at once, as core checks them (1 to 4096).
pub(crate) fn check_max_fault_events(n: u64) -> Result<u32, Errno> {
    let n = usize::try_from(n).map_err(|_| Errno(libc::EINVAL))?;
    Builder::check_max_fault_events(n)?;
    Ok(n as u32)
}

/// The environment, read through a function so tests can supply their own.
trait Env {
    /// The variable's value as set, empty or not.
    fn get(&self, name: &str) -> Option<String>;
}

struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// A variable's value; one set to nothing (or blanks) is unset, as UMap
/// and job scripts (`export UMAP_PAGESIZE=`) take it.
fn var<E: Env + ?Sized>(env: &E, name: &str) -> Option<String> {
    env.get(name).filter(|v| !v.trim().is_empty())
}

/// A number; anything else is `EINVAL` (UMap would read `4096x` as 4096 and
/// `many` as 0: umio refuses both rather than guess).
fn env_number<E: Env + ?Sized>(env: &E, name: &str) -> Result<Option<u64>, Errno> {
    match var(env, name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Errno(libc::EINVAL)),
    }
}

/// A number UMap reads with its `read_env_var`, which takes 0 for unset
/// (src/umap/RegionManager.cpp): `UMAP_PAGESIZE=0`, `UMAP_BUFSIZE=0`,
/// `UMAP_PAGE_FILLERS=0`, ... leave the default in force, so that job
/// scripts written for UMap run unchanged. (`UMAP_READ_AHEAD` is not one:
/// its 0 means no read-ahead, which is what it meant to UMap too.)
fn umap_number<E: Env + ?Sized>(env: &E, name: &str) -> Result<Option<u64>, Errno> {
    Ok(env_number(env, name)?.filter(|&n| n != 0))
}

/// A huge-page pool's bound, as core checks it; 0 means none.
pub(crate) fn check_huge_cache_bytes(bytes: u64) -> Result<u64, Errno> {
    if bytes != 0 {
        Builder::check_huge_cache_bytes(bytes)?;
    }
    Ok(bytes)
}

/// A setting umio refuses: the errno the call that needed it fails with,
/// and why, for the log.
#[derive(Debug)]
pub(crate) struct Refused {
    pub errno: Errno,
    pub reason: String,
}

impl Refused {
    fn einval(reason: impl Into<String>) -> Refused {
        Refused {
            errno: Errno(libc::EINVAL),
            reason: reason.into(),
        }
    }
}

impl From<umio_core::Error> for Refused {
    fn from(e: umio_core::Error) -> Refused {
        Refused {
            reason: e.to_string(),
            errno: Errno::from(e),
        }
    }
}

/// The smallest cache the runtime accepts, in pages.
const MIN_CACHE_PAGES: u64 = 4;

/// `settings` if their cache is at least [`MIN_CACHE_PAGES`], else why
/// not, naming where the bound came from (the runtime would refuse to
/// start with a message of its own that names neither). The getters
/// report such settings; only a mapping is refused.
fn check_cache_minimum(o: &Overrides, settings: Settings) -> Result<Settings, Refused> {
    let page_size = settings.page_size;
    let min_cache = MIN_CACHE_PAGES * page_size as u64;
    if settings.cache_auto.is_some() || settings.cache_bytes >= min_cache {
        return Ok(settings);
    }
    let bytes = settings.cache_bytes;
    let given = match o.cache_bytes {
        Some(b) => format!("umio_config_set_cache_bytes({b})"),
        None => match EnvConfig::read(|name| ProcessEnv.get(name))?.cache {
            Some(EnvCache::Pages(n)) => format!("UMAP_BUFSIZE={n}"),
            _ => format!("UMIO_CACHE_BYTES={bytes}"),
        },
    };
    Err(Refused::einval(format!(
        "{given} is below the minimum cache of {MIN_CACHE_PAGES} pages \
         (UMAP_BUFSIZE={MIN_CACHE_PAGES}, {min_cache} bytes with pages of {page_size} bytes)"
    )))
}

fn resolve<E: Env + ?Sized>(env: &E, o: &Overrides) -> Result<Settings, Errno> {
    resolve_why(env, o).map_err(|r| r.errno)
}

/// The settings the environment and the setters give, or the first one
/// umio refuses and why.
fn resolve_why<E: Env + ?Sized>(env: &E, o: &Overrides) -> Result<Settings, Refused> {
    // The one reader of the environment, core's: `UMIO_*` names first,
    // UMap's `UMAP_*` as aliases in their units.
    let e = EnvConfig::read(|name| env.get(name))?;
    let page_size = o.page_size.or(e.page_size).unwrap_or(DEFAULT_PAGE_SIZE);
    Builder::check_page_size(page_size)?;
    let (cache_bytes, cache_auto) = match (o.cache_bytes, o.cache_auto, e.cache) {
        (Some(b), _, _) => (b, o.cache_auto),
        (None, Some(_), _) => (umio_core::default_cache_bytes(), o.cache_auto),
        (None, None, Some(EnvCache::Auto(share))) => {
            Builder::check_cache_share(share)?;
            let thousandths = (share * 1000.0).round().max(1.0) as u16;
            (umio_core::default_cache_bytes(), Some(thousandths))
        }
        (None, None, _) => (
            e.cache_bytes(page_size)?
                .unwrap_or_else(umio_core::default_cache_bytes),
            None,
        ),
    };
    let huge_cache_bytes = match o.huge_cache_bytes {
        Some(b) => b,
        None => {
            let bytes = e.huge_cache_bytes.unwrap_or(0);
            if bytes != 0 {
                Builder::check_huge_cache_bytes(bytes)?;
            }
            bytes
        }
    };
    let fillers = o
        .fillers
        .or(e.fillers)
        .unwrap_or_else(umio_core::default_fillers);
    let evictors = o.evictors.or(e.evictors).unwrap_or(DEFAULT_EVICTORS);
    let (high_water, low_water) = match o.watermarks {
        Some(w) => w,
        None => {
            let high = e.high_water.unwrap_or(DEFAULT_WATERMARKS.0);
            let low = e.low_water.unwrap_or(DEFAULT_WATERMARKS.1);
            Builder::check_watermarks(high, low)?;
            (high, low)
        }
    };
    let eviction = match &o.eviction {
        Some(ev) => ev.clone(),
        None => Eviction::Builtin(e.eviction.unwrap_or_default()),
    };
    let read_ahead = match o.read_ahead {
        Some(b) => b,
        None if e.prefetch == Some(EnvPrefetch::None) => 0,
        None => e.read_ahead_bytes(page_size)?.unwrap_or(DEFAULT_READ_AHEAD),
    };
    let max_fault_events = match o.max_fault_events {
        Some(n) => n.into(),
        None => match e.max_fault_events {
            Some(n) => {
                Builder::check_max_fault_events(n)?;
                n as u64
            }
            None => UMAP_MAX_FAULT_EVENTS,
        },
    };
    if let Some(n) = e.queue_depth {
        Builder::check_queue_depth(n)?;
    }
    let log_level = match var(env, "UMAP_LOG_LEVEL") {
        Some(v) => Some(logging::parse_level(&v).ok_or_else(|| {
            Refused::einval(format!(
                "UMAP_LOG_LEVEL={v} is none of ERROR, WARNING, INFO, DEBUG and OFF"
            ))
        })?),
        None => None,
    };
    let monitor_freq = umap_number(env, "UMAP_MONITOR_FREQ")
        .map_err(|_| Refused::einval("UMAP_MONITOR_FREQ is not a number of seconds"))?
        .unwrap_or(0);
    Ok(Settings {
        fault_service: o.fault_service.or(e.fault_service).unwrap_or_default(),
        monitor_freq,
        page_size,
        cache_bytes,
        cache_auto,
        huge_cache_bytes,
        fillers,
        evictors,
        high_water,
        low_water,
        eviction,
        read_ahead,
        stride: e.prefetch == Some(EnvPrefetch::Stride),
        filler_spin: e.filler_spin.flatten(),
        promote: e.promote.unwrap_or_default(),
        max_fault_events,
        queue_depth: e.queue_depth,
        log_level,
        uffd_mode: o.uffd_mode.or(e.uffd_mode).unwrap_or_default(),
        page_cache: o.page_cache.or(e.page_cache).unwrap_or_default(),
        remove_events: e.remove_events.unwrap_or(umio_core::DEFAULT_REMOVE_EVENTS),
    })
}

/// The `umio_config_set_*` settings, and the lock that orders them with
/// the runtime's start: a setter never races the first mapping.
static OVERRIDES: Mutex<Overrides> = Mutex::new(Overrides {
    page_size: None,
    cache_bytes: None,
    cache_auto: None,
    huge_cache_bytes: None,
    fillers: None,
    evictors: None,
    watermarks: None,
    eviction: None,
    read_ahead: None,
    max_fault_events: None,
    uffd_mode: None,
    page_cache: None,
    fault_service: None,
});

fn overrides() -> std::sync::MutexGuard<'static, Overrides> {
    OVERRIDES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runtime, started now from the environment and the setters if this
/// is the process's first mapping. A failed start is remembered with the
/// settings it was tried with (`umio_core::ProcessRuntime`): the next call
/// gets its error at once unless a variable or a setter changed them; a
/// malformed variable is refused before any start, on every call.
///
/// A refused setting, or a start that fails, is logged at the error
/// level, which prints unless `UMAP_LOG_LEVEL` asks for less: the program
/// sees only `EINVAL` or the start's errno, and the reason is in a
/// variable it may not know it set.
pub(crate) fn runtime() -> Result<Runtime, Errno> {
    let o = overrides();
    if let Some(rt) = ProcessRuntime::get() {
        return Ok(rt.clone());
    }
    let settings = match resolve_why(&ProcessEnv, &o).and_then(|s| check_cache_minimum(&o, s)) {
        Ok(s) => s,
        Err(refused) => {
            // The level asked for, if that much can be read.
            let level = var(&ProcessEnv, "UMAP_LOG_LEVEL").and_then(|v| logging::parse_level(&v));
            logging::start(level.unwrap_or(logging::DEFAULT_LEVEL));
            log::error!("umio: mapping refused: {}", refused.reason);
            return Err(refused.errno);
        }
    };
    logging::start(settings.log_level.unwrap_or(logging::DEFAULT_LEVEL));
    match ProcessRuntime::get_or_start(|| Ok(settings)) {
        Ok(rt) => Ok(rt.clone()),
        Err(e) => {
            if !e.repeated {
                log::error!(
                    "umio: mapping refused: the runtime cannot start: {}",
                    e.error
                );
            }
            Err(e.into())
        }
    }
}

/// The runtime if it runs (started by a first mapping), without starting
/// it.
pub(crate) fn running() -> Option<Runtime> {
    ProcessRuntime::get().cloned()
}

/// The settings the running runtime runs with, whoever started it (this
/// library or Rust's `Runtime::global`), or, before it starts, those a
/// mapping made now would start it with; and whether it runs.
pub(crate) fn current() -> Result<(Settings, bool), Errno> {
    let o = overrides();
    Ok(match ProcessRuntime::running::<Settings>() {
        Some((rt, started)) => (Settings::running(rt, started.as_ref()), true),
        None => (resolve(&ProcessEnv, &o)?, false),
    })
}

/// Whether the runtime serves user-mode faults only: the running
/// runtime's answer, or before the first mapping the one a mapping made
/// now would get (probing the kernel in `auto` mode). An error if no
/// userfaultfd can be opened at all, or the configuration is malformed.
pub(crate) fn user_mode_only() -> Result<bool, Errno> {
    let mode = {
        let o = overrides();
        if let Some(rt) = ProcessRuntime::get() {
            return Ok(rt.user_mode_only());
        }
        resolve(&ProcessEnv, &o)?.uffd_mode
    };
    match mode {
        UffdMode::Full if umio_core::kernel_features()?.user_mode_only() => Err(Errno(libc::EPERM)),
        UffdMode::Full => Ok(false),
        UffdMode::UserModeOnly => Ok(true),
        UffdMode::Auto => Ok(umio_core::kernel_features()?.user_mode_only()),
    }
}

/// Changes the cache bound: of the running runtime (at once, see
/// `Runtime::set_cache_bytes`), or before the first mapping the one it
/// will start with.
pub(crate) fn set_cache_bytes(bytes: u64) -> Result<(), Errno> {
    let mut o = overrides();
    match ProcessRuntime::get() {
        Some(rt) => rt.set_cache_bytes(bytes)?,
        None => {
            o.cache_bytes = Some(bytes);
            o.cache_auto = None;
        }
    }
    Ok(())
}

/// Changes a setting before the runtime starts; `EBUSY` after. Returns
/// what `change` returns (a replaced value), to be dropped by the caller
/// once the lock is released: dropping a policy written in C calls its
/// `release`, which is then free to call umio.
pub(crate) fn set<R>(change: impl FnOnce(&mut Overrides) -> R) -> Result<R, Errno> {
    let mut o = overrides();
    if ProcessRuntime::get().is_some() {
        return Err(Errno(libc::EBUSY));
    }
    Ok(change(&mut o))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Vars(HashMap<&'static str, &'static str>);

    impl Env for Vars {
        fn get(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| v.to_string())
        }
    }

    fn vars(pairs: &[(&'static str, &'static str)]) -> Vars {
        Vars(pairs.iter().copied().collect())
    }

    #[test]
    fn defaults_are_umios_and_umaps() {
        let s = resolve(&vars(&[]), &Overrides::default()).unwrap();
        assert_eq!(s.page_size, 4 << 10);
        assert!(!s.page_cache);
        assert_eq!(s.remove_events, umio_core::DEFAULT_REMOVE_EVENTS);
        assert_eq!((s.high_water, s.low_water), (90, 70));
        assert_eq!(s.max_fault_events, 256);
        assert_eq!(s.evictors, 1);
        assert_eq!(s.read_ahead, 2 << 20);
        assert_eq!(s.log_level, None);
        assert_eq!(s.cache_bytes, umio_core::default_cache_bytes());
        assert_eq!(s.uffd_mode, UffdMode::Auto);
        assert_eq!(s.huge_cache_bytes, 0, "no huge-page pool by default");
    }

    #[test]
    fn umap_variables_are_read_in_their_units() {
        let env = vars(&[
            ("UMAP_PAGESIZE", "16384"),
            ("UMAP_BUFSIZE", "100"),
            ("UMAP_PAGE_FILLERS", "3"),
            ("UMAP_PAGE_EVICTORS", "2"),
            ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "80"),
            ("UMAP_EVICT_LOW_WATER_THRESHOLD", "50"),
            ("UMAP_MAX_FAULT_EVENTS", "128"),
            ("UMAP_READ_AHEAD", "4"),
            ("UMAP_LOG_LEVEL", "info"),
            ("UMIO_EVICTION", "fifo"),
            ("UMIO_UFFD_MODE", "FULL"),
            ("UMIO_HUGE_CACHE_BYTES", "16777216"),
        ]);
        let s = resolve(&env, &Overrides::default()).unwrap();
        assert_eq!(s.page_size, 16384);
        assert_eq!(s.cache_bytes, 100 * 16384);
        assert_eq!((s.fillers, s.evictors), (3, 2));
        assert_eq!((s.high_water, s.low_water), (80, 50));
        assert_eq!(s.max_fault_events, 128);
        assert_eq!(s.read_ahead, 4 * 16384);
        assert_eq!(s.log_level, Some(LevelFilter::Info));
        assert_eq!(s.eviction, Eviction::Builtin(PolicyKind::Fifo));
        assert_eq!(s.uffd_mode, UffdMode::Full);
        assert_eq!(s.huge_cache_bytes, 16 << 20);
    }

    /// The variables UMap reads with `read_env_var`, which takes 0 for
    /// unset.
    const UMAP_NUMBERS: [&str; 8] = [
        "UMAP_MONITOR_FREQ",
        "UMAP_PAGESIZE",
        "UMAP_BUFSIZE",
        "UMAP_PAGE_FILLERS",
        "UMAP_PAGE_EVICTORS",
        "UMAP_EVICT_HIGH_WATER_THRESHOLD",
        "UMAP_EVICT_LOW_WATER_THRESHOLD",
        "UMAP_MAX_FAULT_EVENTS",
    ];

    #[test]
    fn umap_numbers_at_zero_or_empty_are_unset() {
        let defaults = resolve(&vars(&[]), &Overrides::default()).unwrap();
        for name in UMAP_NUMBERS {
            for value in ["0", "00", " 0 ", "", "  "] {
                let s = resolve(&vars(&[(name, value)]), &Overrides::default());
                assert_eq!(s, Ok(defaults.clone()), "{name}={value:?}");
            }
        }
        // All at once, as a job script exporting them all would.
        let all: Vec<_> = UMAP_NUMBERS.iter().map(|&n| (n, "0")).collect();
        assert_eq!(resolve(&vars(&all), &Overrides::default()), Ok(defaults));
    }

    #[test]
    fn empty_strings_are_unset_and_read_ahead_zero_is_none() {
        let defaults = resolve(&vars(&[]), &Overrides::default()).unwrap();
        for name in [
            "UMAP_READ_AHEAD",
            "UMAP_LOG_LEVEL",
            "UMIO_EVICTION",
            "UMIO_UFFD_MODE",
            "UMIO_HUGE_CACHE_BYTES",
        ] {
            let s = resolve(&vars(&[(name, "")]), &Overrides::default());
            assert_eq!(s, Ok(defaults.clone()), "{name}=\"\"");
        }
        // UMAP_READ_AHEAD=0 keeps its meaning: no read-ahead.
        let s = resolve(&vars(&[("UMAP_READ_AHEAD", "0")]), &Overrides::default()).unwrap();
        assert_eq!(s.read_ahead, 0);
        assert_eq!(prefetch_kind(s.read_ahead), PrefetchKind::None);
        // A nonzero value is still read, and garbage still refused.
        let s = resolve(&vars(&[("UMAP_PAGE_EVICTORS", "3")]), &Overrides::default());
        assert_eq!(s.unwrap().evictors, 3);
        let s = resolve(&vars(&[("UMAP_PAGESIZE", "0x")]), &Overrides::default());
        assert_eq!(s, Err(Errno(libc::EINVAL)));
    }

    #[test]
    fn every_policy_has_a_c_name_that_parses_back() {
        for kind in PolicyKind::ALL {
            let name = policy_c_name(kind).to_str().unwrap();
            assert_eq!(parse_policy(name), Some(kind), "{name}");
        }
    }

    #[test]
    fn setters_win_over_the_environment() {
        let env = vars(&[("UMAP_PAGESIZE", "16384"), ("UMAP_BUFSIZE", "100")]);
        let o = Overrides {
            page_size: Some(8192),
            cache_bytes: Some(1 << 20),
            ..Overrides::default()
        };
        let s = resolve(&env, &o).unwrap();
        assert_eq!((s.page_size, s.cache_bytes), (8192, 1 << 20));
    }

    #[test]
    fn max_fault_events_setter_wins_and_is_range_checked() {
        let env = vars(&[("UMAP_MAX_FAULT_EVENTS", "128")]);
        let o = Overrides {
            max_fault_events: Some(4096),
            ..Overrides::default()
        };
        assert_eq!(resolve(&env, &o).unwrap().max_fault_events, 4096);
        assert_eq!(check_max_fault_events(1), Ok(1));
        for n in [0, 4097, u64::MAX] {
            assert_eq!(check_max_fault_events(n), Err(Errno(libc::EINVAL)), "{n}");
        }
    }

    #[test]
    fn malformed_variables_are_einval() {
        for (k, v) in [
            ("UMAP_PAGESIZE", "lots"),
            ("UMAP_PAGESIZE", "1000"),
            ("UMAP_BUFSIZE", "-1"),
            ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "101"),
            ("UMAP_EVICT_LOW_WATER_THRESHOLD", "95"),
            ("UMAP_MAX_FAULT_EVENTS", "4097"),
            ("UMAP_LOG_LEVEL", "chatty"),
            ("UMIO_EVICTION", "arc"),
            ("UMIO_UFFD_MODE", "sometimes"),
            ("UMAP_PAGESIZE", "-1"),
            ("UMAP_PAGESIZE", "18446744073709551616"),
            ("UMAP_BUFSIZE", "abc"),
            ("UMAP_BUFSIZE", "18446744073709551615"),
            ("UMAP_PAGE_FILLERS", "two"),
            ("UMAP_PAGE_EVICTORS", "1.5"),
            ("UMAP_READ_AHEAD", "-4"),
            ("UMIO_HUGE_CACHE_BYTES", "4194304"),
            ("UMIO_HUGE_CACHE_BYTES", "8Q"),
            ("UMIO_CACHE_BYTES", "lots"),
            ("UMIO_PAGE_SIZE", "1000"),
            ("UMIO_FILLERS", "two"),
        ] {
            let r = resolve(&vars(&[(k, v)]), &Overrides::default());
            assert_eq!(r, Err(Errno(libc::EINVAL)), "{k}={v}");
        }
    }

    /// The C library reads the environment as the Rust builder does (one
    /// reader, core's `EnvConfig`): `UMIO_*` names in their syntax, sizes
    /// with suffixes, and they win over their `UMAP_*` aliases.
    #[test]
    fn umio_variables_are_read_as_rust_reads_them() {
        let s = resolve(
            &vars(&[
                ("UMIO_HUGE_CACHE_BYTES", "8M"),
                ("UMIO_CACHE_BYTES", "64M"),
                ("UMAP_BUFSIZE", "100"),
                ("UMIO_PAGE_SIZE", "16K"),
                ("UMIO_FILLERS", "3"),
                ("UMIO_READAHEAD", "256K"),
                ("UMIO_PREFETCH", "stride"),
                ("UMIO_MAX_FAULT_EVENTS", "32"),
                ("UMIO_REMOVE_EVENTS", "1"),
            ]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.huge_cache_bytes, 8 << 20);
        assert_eq!(
            s.cache_bytes,
            64 << 20,
            "UMIO_CACHE_BYTES over UMAP_BUFSIZE"
        );
        assert_eq!(s.page_size, 16 << 10);
        assert_eq!(s.fillers, 3);
        assert_eq!((s.read_ahead, s.stride), (256 << 10, true));
        assert_eq!(s.max_fault_events, 32);
        assert!(s.remove_events);
        let auto = resolve(
            &vars(&[("UMIO_CACHE_BYTES", "auto:0.25")]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(auto.cache_auto, Some(250));
        let none = resolve(&vars(&[("UMIO_PREFETCH", "none")]), &Overrides::default()).unwrap();
        assert_eq!(none.read_ahead, 0);
    }

    /// Set in the child process of
    /// `getters_report_the_runtime_that_runs_whoever_started_it`.
    const CHILD: &str = "UMIO_FFI_TEST_GETTERS_CHILD";

    /// Rust's `Runtime::global` starts the process-wide runtime from the
    /// environment alone, without the C setters: from then on the C getters
    /// report what that runtime runs with, not what C would have started
    /// it with. Runs in a child process of its own: it starts the process's
    /// one runtime, which the other tests must not find running.
    #[test]
    fn getters_report_the_runtime_that_runs_whoever_started_it() {
        use std::process::Command;
        if std::env::var_os(CHILD).is_some() {
            getters_in_child();
            return;
        }
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "config::tests::getters_report_the_runtime_that_runs_whoever_started_it",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ]);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            // The fault service stays: the suite runs in both.
            if (k.starts_with("UMIO_") || k.starts_with("UMAP_")) && k != "UMIO_FAULT_SERVICE" {
                cmd.env_remove(&*k);
            }
        }
        let out = cmd
            .env(CHILD, "1")
            .env("UMIO_PAGE_SIZE", "8K")
            .env("UMIO_CACHE_BYTES", "4M")
            .env("UMIO_FILLERS", "2")
            .env("UMIO_EVICTORS", "2")
            .env("UMIO_EVICT_HIGH_WATER", "95")
            .env("UMIO_EVICT_LOW_WATER", "60")
            .env("UMIO_EVICTION", "2q")
            .env("UMIO_MAX_FAULT_EVENTS", "32")
            .env("UMIO_READAHEAD", "128K")
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn config_get() -> crate::native::umio_config {
        let mut c = std::mem::MaybeUninit::<crate::native::umio_config>::uninit();
        // SAFETY: a writable, aligned `umio_config`.
        assert_eq!(unsafe { crate::native::umio_config_get(c.as_mut_ptr()) }, 0);
        // SAFETY: written by the call, which returned 0.
        unsafe { c.assume_init() }
    }

    fn getters_in_child() {
        use crate::native::*;
        use crate::umap::*;
        // SAFETY: the exports take plain values or NUL-terminated strings.
        unsafe {
            assert_eq!(umio_config_set_page_size(16 << 10), 0);
            assert_eq!(umio_config_set_cache_bytes(8 << 20), 0);
            assert_eq!(umio_config_set_fillers(1), 0);
            assert_eq!(umio_config_set_evictors(3), 0);
            assert_eq!(umio_config_set_watermarks(80, 40), 0);
            assert_eq!(umio_config_set_eviction(c"fifo".as_ptr()), 0);
            assert_eq!(umio_config_set_max_fault_events(7), 0);
            assert_eq!(umio_config_set_read_ahead(0), 0);
        }
        // Before the start: what C would start the runtime with.
        let c = config_get();
        assert_eq!(c.running, 0);
        assert_eq!((c.page_size, c.cache_bytes), (16 << 10, 8 << 20));
        assert_eq!((c.fillers, c.evictors), (1, 3));
        assert_eq!((c.high_water, c.low_water), (80, 40));
        assert_eq!(c.max_fault_events, 7);
        assert_eq!(c.read_ahead, 0);
        // SAFETY: a static string.
        assert_eq!(unsafe { CStr::from_ptr(c.eviction) }, c"fifo");

        // Rust starts it, from the environment only.
        let rt = umio_core::Runtime::global().expect("the runtime starts (run as root)");
        assert_eq!(rt.page_size(), 8 << 10);
        let c = config_get();
        assert_eq!(c.running, 1);
        assert_eq!(c.page_size, 8 << 10);
        assert_eq!(c.cache_bytes, 4 << 20);
        assert_eq!((c.fillers, c.evictors), (2, 2));
        assert_eq!((c.high_water, c.low_water), (95, 60));
        assert_eq!(c.max_fault_events, 32);
        assert_eq!(c.read_ahead, 128 << 10);
        assert_eq!(c.huge_cache_bytes, 0);
        // SAFETY: a static string.
        assert_eq!(unsafe { CStr::from_ptr(c.eviction) }, c"2q");
        // SAFETY: the getters take nothing.
        unsafe {
            assert_eq!(umapcfg_get_umap_page_size(), 8 << 10);
            assert_eq!(umapcfg_get_max_pages_in_buffer(), 512);
            assert_eq!(umapcfg_get_num_fillers(), 2);
            assert_eq!(umapcfg_get_num_evictors(), 2);
            assert_eq!(umapcfg_get_max_fault_events(), 32);
            assert_eq!(umapcfg_get_read_ahead(), 16);
            assert_eq!(umapcfg_get_evict_high_water_threshold(), 95);
            assert_eq!(umapcfg_get_evict_low_water_threshold(), 60);
        }
        // The setters are refused (it runs); the bound changes it, and the
        // getters follow.
        // SAFETY: plain values.
        unsafe {
            assert_eq!(umio_config_set_fillers(1), -1);
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EBUSY)
            );
            assert_eq!(umio_set_cache_bytes(6 << 20), 0);
        }
        assert_eq!(config_get().cache_bytes, 6 << 20);
        // A mapping through C asks for the policy that runs, or is refused.
        let (settings, running) = current().unwrap();
        assert!(running);
        assert_eq!(settings.eviction, Eviction::Builtin(PolicyKind::TwoQ));
    }
}
