//! `fork`: what umio owns process-wide is usable in a fork child, whatever
//! the parent's other threads were doing when it forked.
//!
//! A fork child has one thread, the one that forked; every lock another
//! thread of the parent held stays held in the child for good, and every
//! count it kept (an RCU read section, a service slot) stays counted. So
//! umio's process-wide state is reset in the child rather than made
//! quiescent before the fork: a prepare handler that waited for the
//! other threads could wait forever (an in-thread handler paused in a
//! store or a policy, or waiting for something the forking thread holds).
//! The prepare handler only records which thread forks; the child
//! handler then:
//!
//! - frees each [`ForkMutex`](crate::fork_lock::ForkMutex) another thread held (one the forking thread
//!   held stays held, now by its own id in the child): the RCU writers'
//!   lock (`rcu.rs`), the process-wide runtime's owner (`process.rs`), the
//!   cache resizing lock (`shared.rs`);
//! - forgets the parent's RCU readers (`rcu::after_fork`): the child's
//!   first writer does not wait for threads it does not have;
//! - frees the in-thread service's slots and retires its table
//!   (`in_thread::after_fork`).
//!
//! The parent's runtimes and regions are neither used nor dropped in the
//! child (`process.rs`, `in_thread.rs`): a child starts its own.
//!
//! Not covered: a fork that runs no `pthread_atfork` handlers (a raw
//! `clone` or `SYS_fork`); a fork made by a thread inside an RCU read
//! section (from a policy's `select_victims`, say), whose reads the child
//! would no longer protect; a fork while another thread runs the
//! process's one-time setup (the kernel probe of the first runtime, the
//! in-thread service's first start: `OnceLock`s), whose child would wait
//! for that setup for ever if it started umio.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::sys::signal;

/// Registers the fork handlers, once per process. Called where a runtime
/// starts and where the process-wide runtime is looked up, never from a
/// fork handler (`pthread_atfork` from one would wait for the fork).
pub(crate) fn install() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.load(Ordering::Acquire) || INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // A failure (ENOMEM) leaves a child as it was without the handlers.
    if let Err(e) = signal::at_fork(prepare, child) {
        log::warn!("umio: pthread_atfork failed (errno {e}): a fork child may not start umio");
    }
}

/// The thread id of the thread forking now.
static FORKER: AtomicU32 = AtomicU32::new(0);

extern "C" fn prepare() {
    FORKER.store(signal::gettid(), Ordering::SeqCst);
}

/// In the child, on its only thread: async-signal-safe (atomic stores and
/// `gettid`).
extern "C" fn child() {
    let forker = FORKER.load(Ordering::SeqCst);
    let me = signal::gettid();
    for lock in [
        crate::rcu::WRITERS.raw(),
        crate::process::OWNER.raw(),
        crate::shared::RESIZING.raw(),
        crate::keeper::KEEPER.raw(),
    ] {
        lock.after_fork(forker, me);
    }
    crate::rcu::after_fork();
    crate::in_thread::after_fork();
    crate::report::after_fork();
    crate::keeper::after_fork();
}
