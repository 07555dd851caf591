//! The process's umio runtime, started on first use (in a fork child too:
//! a child never touches its parent's runtime, whose threads it lacks).

use std::sync::{Mutex, MutexGuard, OnceLock};

use umio_core::Runtime;

use crate::config::Config;
use crate::sys;

pub(crate) use umio_core::Errno;

/// The shim's configuration (read from the environment on first use).
pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

pub(crate) struct RuntimeSlot {
    /// The process that built `rt` (a fork child must not use it).
    pid: i32,
    rt: Option<Runtime>,
    /// The first build failed with this errno: reported once, never retried.
    failed: Option<i32>,
}

static RUNTIME: Mutex<RuntimeSlot> = Mutex::new(RuntimeSlot {
    pid: 0,
    rt: None,
    failed: None,
});

pub(crate) fn lock_runtime() -> MutexGuard<'static, RuntimeSlot> {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runtime of this process, built from `UMIO_*` on first use.
pub(crate) fn runtime() -> Result<Runtime, Errno> {
    let mut slot = lock_runtime();
    if let Some(e) = slot.failed {
        return Err(Errno(e));
    }
    if let Some(rt) = &slot.rt {
        return Ok(rt.clone());
    }
    let built = umio_core::Builder::default()
        .from_env()
        .and_then(|b| b.build());
    match built {
        Ok(rt) => {
            start_logging();
            crate::buffers::runtime_started(&rt);
            log::info!(
                "runtime started: page size {} bytes, cache {} bytes",
                rt.page_size(),
                rt.cache_bytes()
            );
            slot.pid = sys::pid();
            slot.rt = Some(rt.clone());
            Ok(rt)
        }
        Err(e) => {
            sys::eprint(&format!(
                "umio-preload: umio cannot start ({e}); mappings and allocations stay with the kernel and glibc\n"
            ));
            slot.failed = Some(e.errno());
            Err(Errno(e.errno()))
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

/// The runtime if it was started, without starting it.
pub(crate) fn runtime_if_started() -> Option<Runtime> {
    lock_runtime().rt.clone()
}

impl RuntimeSlot {
    /// In a fork child: forgets the parent's runtime without dropping it
    /// (dropping would join threads that do not exist here), so the next
    /// use starts a fresh one.
    pub(crate) fn forget_for_child(&mut self) {
        if let Some(rt) = self.rt.take() {
            std::mem::forget(rt);
        }
        self.failed = None;
        self.pid = sys::pid();
    }
}
