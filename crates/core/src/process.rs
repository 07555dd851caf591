//! The process-wide runtime ([`ProcessRuntime`]): one per process, shared
//! by [`Runtime::global`], the C library (`umio-ffi`) and the preload shim
//! (`umio-preload`), each of which starts it from a configuration of its
//! own ([`ProcessConfig`]). Its rules are in [`ProcessRuntime`]'s docs.

use std::any::Any;

use crate::config::Builder;
use crate::env::EnvConfig;
use crate::error::{Errno, Error, Result};
use crate::fork_lock::{ForkGuard, ForkMutex};
use crate::runtime::Runtime;

/// A configuration the process-wide runtime starts from: compared with the
/// one a failed start was tried with, so that only a changed configuration
/// is tried again.
///
/// [`EnvConfig`] is one ([`Runtime::global`] and the preload shim start
/// from the environment); the C library's is the environment with its
/// `umio_config_set_*` settings over it.
pub trait ProcessConfig: PartialEq + Send + 'static {
    /// The builder the runtime is built from.
    fn builder(&self) -> Result<Builder>;

    /// Called once the runtime started from this configuration, before any
    /// other caller can reach it (the owner's lock is held): logging, a
    /// monitor, what the caller needs in place before the first mapping.
    /// It must not call [`ProcessRuntime`].
    fn started(&self, rt: &Runtime) {
        let _ = rt;
    }
}

impl ProcessConfig for EnvConfig {
    /// [`Builder::from_env`] with these variables.
    fn builder(&self) -> Result<Builder> {
        Builder::default().with_env(self)
    }
}

/// Why the process-wide runtime is not running: the error of its start.
#[derive(Clone, Debug)]
pub struct StartFailure {
    /// What failed.
    pub error: Error,
    /// `true`: the same configuration failed before in this process, and
    /// this is that failure's error, not a second attempt's.
    pub repeated: bool,
}

impl From<StartFailure> for Error {
    fn from(f: StartFailure) -> Error {
        f.error
    }
}

impl From<StartFailure> for Errno {
    fn from(f: StartFailure) -> Errno {
        f.error.into()
    }
}

/// The process-wide runtime: one per process, shared by
/// [`Runtime::global`], the C library and the preload shim, each of which
/// starts it from a configuration of its own ([`ProcessConfig`]). Every
/// function takes the owner's lock for the time of the call.
///
/// The rules, the same for every caller:
///
/// - **The first use starts it** from the caller's configuration; every
///   later call gets the running runtime, whatever configuration it brings.
///   It runs until the process exits.
/// - **A fork child starts its own.** The owner keeps the id of the process
///   that started the runtime. In a fork child (another pid) the parent's
///   runtime, whose threads the child lacks, is neither used nor dropped
///   (dropping would join threads that do not exist there): the child's
///   first use starts a runtime of its own.
/// - **A failed start is remembered with its configuration.** A later call
///   with an equal configuration gets the same error at once, without a
///   second attempt ([`StartFailure::repeated`] says so, so that a caller
///   reports a failure once); a call with another configuration (a
///   variable fixed, a C setter called) tries again. A configuration that
///   could not be read counts as the same while it fails with the same
///   error. A fork child forgets its parent's failure.
///
/// ```no_run
/// # fn main() -> Result<(), umio_core::Error> {
/// use umio_core::{EnvConfig, ProcessRuntime};
/// // What `Runtime::global` does: start from the environment.
/// let rt = ProcessRuntime::get_or_start(EnvConfig::from_process)?;
/// assert!(std::ptr::eq(rt, ProcessRuntime::get().unwrap()));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ProcessRuntime(());

impl ProcessRuntime {
    /// The runtime of this process, started now from the configuration
    /// `config` returns if none runs (`config` is not called if one does).
    pub fn get_or_start<C: ProcessConfig>(
        config: impl FnOnce() -> Result<C>,
    ) -> Result<&'static Runtime, StartFailure> {
        owner().get_or_start(std::process::id(), config)
    }

    /// The runtime of this process if it runs, without starting it.
    pub fn get() -> Option<&'static Runtime> {
        owner().running(std::process::id()).map(|r| r.rt)
    }

    /// The runtime of this process if it runs, with the configuration it
    /// started from if that was a `C` (`None` if another caller started
    /// it: [`Runtime::config`] says what it runs with either way).
    pub fn running<C: ProcessConfig + Clone>() -> Option<(&'static Runtime, Option<C>)> {
        let mut owner = owner();
        let running = owner.running(std::process::id())?;
        let config = (*running.config).downcast_ref::<C>().cloned();
        Some((running.rt, config))
    }

    /// Holds the owner's lock until the guard is dropped: a `fork` handler
    /// takes it before the fork so that no other thread is starting the
    /// runtime as the process is copied, and drops it after, in the parent
    /// and in the child.
    pub fn lock() -> ProcessLock {
        // Not `owner()`: a fork handler must not register fork handlers.
        on_fork();
        ProcessLock {
            _owner: OWNER.lock(),
        }
    }
}

/// The owner's lock, held: see [`ProcessRuntime::lock`].
pub struct ProcessLock {
    _owner: ForkGuard<'static, Owner>,
}

impl std::fmt::Debug for ProcessLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessLock")
    }
}

/// Freed in a fork child if another thread held it (`fork.rs`), so that a
/// child can start its runtime whatever its parent's threads were doing.
pub(crate) static OWNER: ForkMutex<Owner> = ForkMutex::new(Owner::new());

/// Has a fork child free [`OWNER`] (`fork.rs`): registered before it is
/// first taken (not `pthread_atfork`: allowed in a fork handler).
fn on_fork() {
    crate::fork::on_child(crate::fork::Slot::ProcessOwner, |forker, me| {
        OWNER.raw().after_fork(forker, me)
    });
}

fn owner() -> ForkGuard<'static, Owner> {
    on_fork();
    crate::fork::install();
    OWNER.lock()
}

/// What a start was tried with: the configuration, or the error of reading
/// it.
type Tried = std::result::Result<Box<dyn Any + Send>, String>;

struct Running {
    /// Leaked: a runtime of this process lives until it exits, and a fork
    /// child must never drop its parent's.
    rt: &'static Runtime,
    config: Box<dyn Any + Send>,
}

struct Failed {
    tried: Tried,
    error: Error,
}

impl Failed {
    /// Whether `config` is what this failed start was tried with.
    fn tried_with<C: PartialEq + 'static>(&self, config: &Result<C>) -> bool {
        match (&self.tried, config) {
            // `**t`: the boxed value, not the box (itself an `Any`).
            (Ok(t), Ok(c)) => (**t).downcast_ref::<C>() == Some(c),
            (Err(t), Err(e)) => *t == e.to_string(),
            _ => false,
        }
    }
}

/// The state behind [`ProcessRuntime`], for the process `pid`.
pub(crate) struct Owner {
    pid: u32,
    running: Option<Running>,
    failed: Option<Failed>,
}

impl Owner {
    const fn new() -> Owner {
        Owner {
            pid: 0,
            running: None,
            failed: None,
        }
    }

    /// The running runtime of process `pid`; what belonged to another
    /// process (a fork's parent) is forgotten first.
    fn running(&mut self, pid: u32) -> Option<&Running> {
        if self.pid != pid {
            // The parent's runtime stays leaked: never dropped here.
            self.running = None;
            self.failed = None;
            self.pid = pid;
        }
        self.running.as_ref()
    }

    fn get_or_start<C: ProcessConfig>(
        &mut self,
        pid: u32,
        config: impl FnOnce() -> Result<C>,
    ) -> Result<&'static Runtime, StartFailure> {
        if let Some(running) = self.running(pid) {
            return Ok(running.rt);
        }
        let config = config();
        if let Some(failed) = &self.failed
            && failed.tried_with(&config)
        {
            return Err(StartFailure {
                error: failed.error.clone(),
                repeated: true,
            });
        }
        let (tried, error): (Tried, Error) = match config {
            Ok(c) => match c.builder().and_then(Builder::build) {
                Ok(rt) => {
                    let rt: &'static Runtime = Box::leak(Box::new(rt));
                    c.started(rt);
                    self.running = Some(Running {
                        rt,
                        config: Box::new(c),
                    });
                    self.failed = None;
                    return Ok(rt);
                }
                Err(e) => (Ok(Box::new(c)), e),
            },
            Err(e) => (Err(e.to_string()), e),
        };
        self.failed = Some(Failed {
            tried,
            error: error.clone(),
        });
        Err(StartFailure {
            error,
            repeated: false,
        })
    }
}

impl Runtime {
    /// The process-wide runtime, started on first use from the environment
    /// ([`Builder::from_env`]); the C library and the preload shim share
    /// its owner, [`ProcessRuntime`], and its rules: a fork child starts a
    /// runtime of its own, and a failed start is remembered: every call
    /// returns its error until the environment changes (then the next call
    /// tries again).
    pub fn global() -> Result<&'static Runtime> {
        Ok(ProcessRuntime::get_or_start(EnvConfig::from_process)?)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A configuration by its filler count, counting its builds.
    #[derive(Clone, Debug, PartialEq)]
    struct Fillers(usize);

    impl ProcessConfig for Fillers {
        fn builder(&self) -> Result<Builder> {
            Ok(Builder::default()
                .cache_bytes(1 << 20)
                .fillers(self.0)
                .evictors(1))
        }
    }

    fn errno(r: Result<&'static Runtime, StartFailure>) -> (i32, bool) {
        let f = r.expect_err("the start fails");
        (f.error.errno(), f.repeated)
    }

    #[test]
    fn a_failed_start_is_remembered_until_the_configuration_changes() {
        let mut owner = Owner::new();
        let reads = Cell::new(0);
        let read = |n| {
            reads.set(reads.get() + 1);
            Ok(Fillers(n))
        };
        // Fillers 0: refused by `Builder::build`.
        assert_eq!(
            errno(owner.get_or_start(7, || read(0))),
            (libc::EINVAL, false)
        );
        assert_eq!(
            errno(owner.get_or_start(7, || read(0))),
            (libc::EINVAL, true)
        );
        assert_eq!(reads.get(), 2, "the configuration is read on every call");
        // Another failing configuration is tried, and reported, anew.
        assert_eq!(
            errno(owner.get_or_start(7, || read(300))),
            (libc::EINVAL, false)
        );
        // A configuration that cannot be read: the same while its error is.
        let unreadable = || -> Result<Fillers> { Err(Error::InvalidArgument("UMIO_X is bad")) };
        assert_eq!(
            errno(owner.get_or_start(7, unreadable)),
            (libc::EINVAL, false)
        );
        assert_eq!(
            errno(owner.get_or_start(7, unreadable)),
            (libc::EINVAL, true)
        );
        let other = || -> Result<Fillers> { Err(Error::InvalidArgument("UMIO_Y is bad")) };
        assert_eq!(errno(owner.get_or_start(7, other)), (libc::EINVAL, false));
        // Fixed: it starts, and later calls get it whatever they bring.
        let rt = owner.get_or_start(7, || read(1)).expect("starts");
        assert_eq!(rt.cache_bytes(), 1 << 20, "started from this configuration");
        let again = owner.get_or_start(7, || read(0)).expect("runs");
        assert!(std::ptr::eq(rt, again));
        let started_with = owner
            .running(7)
            .map(|r| (*r.config).downcast_ref::<Fillers>());
        assert_eq!(started_with, Some(Some(&Fillers(1))));
    }

    #[test]
    fn a_fork_child_starts_its_own_runtime_and_forgets_failures() {
        let mut owner = Owner::new();
        assert!(owner.get_or_start(7, || Ok(Fillers(0))).is_err());
        // Process 8, a child of 7: the failure was its parent's.
        assert_eq!(
            errno(owner.get_or_start(8, || Ok(Fillers(0)))),
            (libc::EINVAL, false)
        );
        let parent = owner.get_or_start(8, || Ok(Fillers(1))).expect("starts");
        assert!(owner.running(8).is_some());
        // Process 9, a child of 8: nothing runs until it starts its own.
        assert!(owner.running(9).is_none());
        let child = owner.get_or_start(9, || Ok(Fillers(2))).expect("starts");
        assert!(!std::ptr::eq(parent, child), "the child's own runtime");
        // The parent's is left alone (leaked, not dropped): it still runs.
        assert!(parent.stats().cache_bytes > 0);
    }
}
