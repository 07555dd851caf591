//! Read-copy-update for what the in-thread fault service reads in a
//! signal handler: a reader takes no lock, allocates nothing and touches
//! no thread-local (`arc-swap`'s loads do all three the first time a
//! thread uses them), and a writer frees what it replaced only once no
//! reader can see it.
//!
//! One process-wide domain, in the manner of sleepable RCU: readers count
//! themselves in one of two counters chosen by the epoch's parity; a
//! writer publishes, flips the epoch and waits for the old parity's
//! readers to leave, twice (a reader that read the epoch just before the
//! first flip is caught by the second). Writers are rare (a map, an
//! unmap, new advice) and may sleep; readers are the fault path. Writers
//! take one process-wide lock ([`writer`]).
//!
//! Across `fork` (`fork.rs`): the child forgets the parent's readers
//! ([`after_fork`]) and its writers' lock is free, so that the child's
//! first writer does not wait for threads it does not have (a parent's
//! thread paused in a read section as it forked).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::fork_lock::{ForkGuard, ForkMutex};
use crate::padded::CachePadded;

static EPOCH: AtomicUsize = AtomicUsize::new(0);
static READERS: [CachePadded<AtomicUsize>; 2] = [
    CachePadded::new(AtomicUsize::new(0)),
    CachePadded::new(AtomicUsize::new(0)),
];
/// Forks this process descends from, counted in each child: a section
/// entered before a fork is not counted out in the child, whose counters
/// start again from zero.
static GENERATION: AtomicUsize = AtomicUsize::new(0);
/// Serialises writers: updates and their grace periods.
pub(crate) static WRITERS: ForkMutex<()> = ForkMutex::new(());

/// A read-side critical section: what was read under it stays valid until
/// it is dropped.
pub(crate) struct ReadGuard {
    parity: usize,
    generation: usize,
    /// Not `Send`: the section belongs to the thread that entered it.
    _thread: PhantomData<*const ()>,
}

/// Enters a read-side critical section. Async-signal-safe: atomic
/// operations only.
#[inline]
pub(crate) fn read() -> ReadGuard {
    let generation = GENERATION.load(SeqCst);
    let parity = EPOCH.load(SeqCst) & 1;
    READERS[parity].fetch_add(1, SeqCst);
    ReadGuard {
        parity,
        generation,
        _thread: PhantomData,
    }
}

impl Drop for ReadGuard {
    #[inline]
    fn drop(&mut self) {
        if GENERATION.load(SeqCst) == self.generation {
            READERS[self.parity].fetch_sub(1, SeqCst);
        }
    }
}

/// In a fork child, on its only thread (`fork.rs`): the parent's readers
/// are other threads, which the child does not have.
pub(crate) fn after_fork() {
    GENERATION.fetch_add(1, SeqCst);
    for r in &READERS {
        r.store(0, SeqCst);
    }
}

/// The writers' lock, held: see [`RcuCell::update_locked`].
pub(crate) type Writer = ForkGuard<'static, ()>;

/// Takes the writers' lock. Not from a signal handler, nor inside a read
/// section.
pub(crate) fn writer() -> Writer {
    WRITERS.lock()
}

/// Waits until every read-side critical section that began before the
/// call has ended. Must not be called inside one (it would wait for
/// itself).
fn synchronize(_writer: &Writer) {
    for _ in 0..2 {
        let old = EPOCH.fetch_add(1, SeqCst) & 1;
        let mut spins = 0u32;
        while READERS[old].load(SeqCst) != 0 {
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// A value readers load without a lock under a [`ReadGuard`], replaced
/// whole by writers.
pub(crate) struct RcuCell<T> {
    ptr: AtomicPtr<T>,
}

// SAFETY: the cell owns a `T` reached by shared references from any
// thread, and moves it to whichever thread drops the cell.
unsafe impl<T: Send + Sync> Send for RcuCell<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RcuCell<T> {}

impl<T> RcuCell<T> {
    pub(crate) fn new(value: T) -> RcuCell<T> {
        RcuCell {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
        }
    }

    /// The value now, valid while `guard` lives.
    #[inline]
    pub(crate) fn load<'g>(&self, _guard: &'g ReadGuard) -> &'g T {
        // SAFETY: the pointer is always a live Box; a writer frees the one
        // it replaced only after `synchronize`, which waits for `_guard`.
        unsafe { &*self.ptr.load(SeqCst) }
    }

    /// The value now, for a writer-side reader (not in a signal handler):
    /// runs `f` under a read-side section.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let g = read();
        f(self.load(&g))
    }

    /// Replaces the value with `f(old)`, then frees the old one once no
    /// reader can see it. Not from a signal handler, nor inside a read
    /// section.
    pub(crate) fn update(&self, f: impl FnOnce(&T) -> T) {
        self.update_locked(&writer(), f)
    }

    /// [`update`](RcuCell::update) under the writers' lock the caller
    /// holds (to keep what `f` reads from changing before it is
    /// published).
    pub(crate) fn update_locked(&self, writer: &Writer, f: impl FnOnce(&T) -> T) {
        // SAFETY: writers are serialised by the writers' lock, so the
        // value is not freed while we read it.
        let new = Box::into_raw(Box::new(f(unsafe { &*self.ptr.load(SeqCst) })));
        let old = self.ptr.swap(new, SeqCst);
        synchronize(writer);
        // SAFETY: `old` came from Box::into_raw and no reader can reach it
        // any more.
        drop(unsafe { Box::from_raw(old) });
    }
}

impl<T> Drop for RcuCell<T> {
    fn drop(&mut self) {
        // SAFETY: the cell is being dropped: no reader holds a reference
        // borrowed from it (loads borrow the cell).
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn readers_never_see_a_freed_value() {
        let cell = Arc::new(RcuCell::new(vec![0u64; 16]));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, stop) = (cell.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(SeqCst) {
                        let g = read();
                        let v = cell.load(&g);
                        // Every element of one version is equal.
                        assert!(v.iter().all(|&x| x == v[0]), "torn read");
                        seen = seen.max(v[0]);
                    }
                    seen
                })
            })
            .collect();
        for i in 1..=200u64 {
            cell.update(|_| vec![i; 16]);
        }
        stop.store(true, SeqCst);
        for r in readers {
            assert!(r.join().unwrap() <= 200);
        }
        assert_eq!(cell.with(|v| v[0]), 200);
    }
}
