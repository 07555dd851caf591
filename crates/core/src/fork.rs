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
//! - frees each [`ForkMutex`] another thread held (one the forking thread
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

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
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

/// The lock word of a [`ForkMutex`]: 0 when free, else the holder's
/// thread id, with [`WAITERS`] set once a thread sleeps on it.
pub(crate) struct RawForkLock(AtomicU32);

/// Thread ids are below 2^22 (`PID_MAX_LIMIT`): the top bit is free.
const WAITERS: u32 = 1 << 31;

impl RawForkLock {
    const fn new() -> RawForkLock {
        RawForkLock(AtomicU32::new(0))
    }

    fn lock(&self) {
        let me = signal::gettid();
        // Once a thread has slept, it takes the lock with WAITERS set, as
        // others may still sleep.
        let mut mine = me;
        loop {
            let cur = match self
                .0
                .compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(cur) => cur,
            };
            if cur & WAITERS == 0
                && self
                    .0
                    .compare_exchange(cur, cur | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            signal::futex_wait(&self.0, cur | WAITERS, 10_000_000);
            mine = me | WAITERS;
        }
    }

    fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) & WAITERS != 0 {
            signal::futex_wake_all(&self.0);
        }
    }

    /// In a fork child: held by the thread that forked (`forker` in the
    /// parent, `me` here), it stays held, by `me`; held by any other
    /// thread, which the child does not have, it is free.
    fn after_fork(&self, forker: u32, me: u32) {
        let holder = self.0.load(Ordering::Relaxed) & !WAITERS;
        let now = if holder != 0 && holder == forker {
            me
        } else {
            0
        };
        self.0.store(now, Ordering::Release);
    }
}

/// A mutex that a fork child frees if a thread it does not have held it
/// (see the module's docs). No poisoning: a panic while it is held
/// releases it. For process-wide state only, listed in [`child`].
pub(crate) struct ForkMutex<T> {
    raw: RawForkLock,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only through a guard, which the lock makes
// exclusive, as `std::sync::Mutex` does.
unsafe impl<T: Send> Sync for ForkMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for ForkMutex<T> {}

impl<T> ForkMutex<T> {
    pub(crate) const fn new(value: T) -> ForkMutex<T> {
        ForkMutex {
            raw: RawForkLock::new(),
            data: UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> ForkGuard<'_, T> {
        self.raw.lock();
        ForkGuard {
            mutex: self,
            _thread: PhantomData,
        }
    }

    fn raw(&self) -> &RawForkLock {
        &self.raw
    }
}

/// A held [`ForkMutex`].
pub(crate) struct ForkGuard<'a, T> {
    mutex: &'a ForkMutex<T>,
    /// Not `Send`: a fork child keeps a lock held by the thread that
    /// forked, found by the id of the thread that took it.
    _thread: PhantomData<*const ()>,
}

impl<T> Deref for ForkGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the lock is held: no other guard exists.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T> DerefMut for ForkGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T> Drop for ForkGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.raw.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_and_wakes() {
        let m = Arc::new(ForkMutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 80_000);
    }

    #[test]
    fn a_child_frees_what_other_threads_held_and_keeps_what_the_forker_held() {
        let lock = RawForkLock::new();
        lock.0.store(1234 | WAITERS, Ordering::Relaxed);
        lock.after_fork(99, 100);
        assert_eq!(lock.0.load(Ordering::Relaxed), 0, "held by a lost thread");
        lock.0.store(99, Ordering::Relaxed);
        lock.after_fork(99, 100);
        assert_eq!(lock.0.load(Ordering::Relaxed), 100, "the forker's, still");
    }
}
