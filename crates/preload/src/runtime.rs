//! The process's umio runtime, started on first use (in a fork child too:
//! a child never touches its parent's runtime, whose threads it lacks).
//! Also whether the kernel's own accesses to umio memory go unserved, so
//! that system call buffers are faulted in first (`buffers.rs`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use umio_core::{EnvConfig, ProcessConfig, ProcessRuntime, Runtime};

use crate::config::Config;
use crate::sys;

pub(crate) use umio_core::Errno;

/// The shim's configuration (read from the environment on first use).
pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// The shim's start of the process-wide runtime: the environment, as
/// `Builder::from_env` reads it, and what the shim sets up before the
/// first mapping.
#[derive(PartialEq)]
struct ShimStart(EnvConfig);

impl ProcessConfig for ShimStart {
    fn builder(&self) -> umio_core::Result<umio_core::Builder> {
        self.0.builder()
    }

    fn started(&self, rt: &Runtime) {
        start_logging();
        runtime_started(rt);
        log::info!(
            "runtime started: {} fault service, page size {} bytes, cache {} bytes",
            service_name(rt),
            rt.page_size(),
            rt.cache_bytes()
        );
    }
}

/// The runtime of this process, started from `UMIO_*` on first use (in a
/// fork child, its own: see `umio_core::ProcessRuntime`). A failed start
/// is reported on stderr once, and its error returned without a second
/// start until the environment changes (a changed one that fails too is
/// reported again).
pub(crate) fn runtime() -> Result<Runtime, Errno> {
    match ProcessRuntime::get_or_start(|| EnvConfig::from_process().map(ShimStart)) {
        Ok(rt) => Ok(rt.clone()),
        Err(f) => {
            if !f.repeated {
                sys::eprint(&format!(
                    "umio-preload: umio cannot start ({}); mappings and allocations stay with the kernel and glibc\n",
                    f.error
                ));
            }
            Err(f.into())
        }
    }
}

/// Prints umio's log records to standard error, up to the level
/// `UMIO_LOG` asks for (warnings and errors by default): what made it fail
/// a fault with SIGBUS or a write-back, say, which a program's user must
/// see.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let msg = record.args().to_string();
            let msg = msg.strip_prefix("umio: ").unwrap_or(&msg);
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug => "debug",
                log::Level::Trace => "trace",
            };
            sys::eprint(&format!("umio-preload: {level}: {msg}\n"));
        }
    }

    fn flush(&self) {}
}

/// Installs the stderr logger at the level of `UMIO_LOG`.
fn start_logging() {
    static LOGGER: StderrLog = StderrLog;
    // Fails only if set already (by an earlier runtime of this process).
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(config().log_level.0);
}

/// The runtime if it was started (in this process), without starting it.
pub(crate) fn runtime_if_started() -> Option<Runtime> {
    ProcessRuntime::get().cloned()
}

/// The runtime's fault service, as `UMIO_FAULT_SERVICE` names it.
pub(crate) fn service_name(rt: &Runtime) -> &'static str {
    match rt.fault_service() {
        umio_core::FaultService::InThread => "in-thread",
        _ => "fillers",
    }
}

/// Whether some umio memory of the process leaves the kernel's accesses
/// unserved: the runtime's userfaultfd is user-mode-only, or a mapping is
/// served in-thread (`UMIO_PRELOAD_IN_THREAD_PATHS`).
static NEEDED: AtomicBool = AtomicBool::new(false);
/// The runtime's userfaultfd is user-mode-only: the fillers' mappings need
/// faulting in too.
static USER_MODE_ONLY: AtomicBool = AtomicBool::new(false);
/// Bytes one call may fault in: half the cache.
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Records how `rt`, the process's runtime (just built), serves the
/// kernel's accesses.
fn runtime_started(rt: &Runtime) {
    let half = usize::try_from(rt.cache_bytes() / 2).unwrap_or(usize::MAX);
    LIMIT.store(half.max(rt.page_size()), Ordering::Relaxed);
    USER_MODE_ONLY.store(rt.user_mode_only(), Ordering::Relaxed);
    if rt.user_mode_only() {
        NEEDED.store(true, Ordering::Release);
    }
}

/// A mapping served in the faulting thread was made: calls must fault
/// their buffers in from now on.
pub(crate) fn in_thread_mapped() {
    NEEDED.store(true, Ordering::Release);
}

/// Whether calls must fault their buffers in first.
#[inline]
pub(crate) fn needed() -> bool {
    NEEDED.load(Ordering::Acquire)
}

/// Whether the runtime's userfaultfd is user-mode-only.
pub(crate) fn user_mode_only() -> bool {
    USER_MODE_ONLY.load(Ordering::Relaxed)
}

/// Bytes one call may fault in.
pub(crate) fn fault_in_limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}
