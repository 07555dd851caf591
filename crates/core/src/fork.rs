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

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::sys::signal;

/// A reset the child handler runs for a module above this one, given the
/// forking thread's id and the child's: registered by its owner
/// ([`on_child`]) so that this file names none of them.
pub(crate) type Hook = fn(forker: u32, me: u32);

/// The registered resets, by slot: the child handler runs them in the
/// order of their slots (with its own, `rcu`'s and `report`'s, between).
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    /// The process-wide runtime's owner lock (`process.rs`).
    ProcessOwner,
    /// The cache resizing lock (`shared.rs`, registered by `runtime.rs`).
    Resizing,
    /// The in-thread service's slots and table (`in_thread.rs`).
    InThread,
}

/// One hook a slot, set once and read (an atomic load) in the child: no
/// allocation, no lock.
static HOOKS: [OnceLock<Hook>; 3] = [const { OnceLock::new() }; 3];

/// Registers `hook` for `slot`, before the state it resets can be held
/// in a fork: where its owner starts. A second registration of a slot
/// keeps the first (its owners register one function).
pub(crate) fn on_child(slot: Slot, hook: Hook) {
    let _ = HOOKS[slot as usize].set(hook);
}

/// Runs the hook of `slot`, if one is registered.
fn run(slot: Slot, forker: u32, me: u32) {
    if let Some(hook) = HOOKS[slot as usize].get() {
        hook(forker, me);
    }
}

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
    crate::rcu::WRITERS.raw().after_fork(forker, me);
    run(Slot::ProcessOwner, forker, me);
    run(Slot::Resizing, forker, me);
    crate::keeper::KEEPER.raw().after_fork(forker, me);
    crate::rcu::after_fork();
    run(Slot::InThread, forker, me);
    crate::report::after_fork();
    crate::keeper::after_fork();
}
