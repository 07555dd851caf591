//! Fault-path store reads, bounded per region, so that a store that hangs
//! cannot take every filler with it.
//!
//! A filler reads the store itself (one hand-off per miss). A store whose
//! read never returns (a dead network server, a wedged device) would keep
//! every filler that picks up a miss on its region, one by one, until no
//! filler is left to read fault events and every region of the runtime
//! hangs. So each region lets at most `fillers - 1` fillers into its store
//! at once (its *slots*). A miss on a region whose slots are all taken is
//! not read by the filler that picked it up: the page stays busy (further
//! faults on it coalesce as usual), the fill is queued on the region, and
//! the filler goes back to the other regions' events. A filler leaving a
//! region's store takes the region's queued fills before it gives its slot
//! back, so a queued fill is served as soon as one of the region's reads
//! returns: all of them at once, as one batch of reads (`misses.rs`). Read-ahead after a fault takes a slot
//! too, or goes to the `umio-prefetch` threads when none is free.
//!
//! With one filler nothing can be kept free: that runtime trades isolation
//! for its single thread. Two or more stores hanging at once can still take
//! a filler each beyond the first's `fillers - 1`.

use std::collections::VecDeque;
use std::sync::Mutex;

/// A region's fault-path store slots and its queue of fills waiting for one.
#[derive(Default)]
pub(crate) struct StoreSlots {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// Fillers in the region's store now.
    busy: usize,
    /// Missed pages held busy, waiting for a filler that is in the store.
    queued: VecDeque<Miss>,
}

/// A missed page held busy by the thread that will fill it: the page,
/// whether the fault was a write, and the faulting thread (0: unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Miss {
    pub page: usize,
    pub write: bool,
    pub thread: u32,
}

impl StoreSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for the fills of `misses` (their pages held busy), or,
    /// if all `limit` are taken, queues them for a filler in the store.
    /// Returns whether the caller has the slot (and must fill the pages).
    pub(crate) fn enter_or_queue(&self, limit: usize, misses: &[Miss]) -> bool {
        let mut s = self.lock();
        if s.busy < limit {
            s.busy += 1;
            true
        } else {
            s.queued.extend(misses.iter().copied());
            false
        }
    }

    /// Takes a slot if one of `limit` is free.
    pub(crate) fn try_enter(&self, limit: usize) -> bool {
        let mut s = self.lock();
        if s.busy < limit {
            s.busy += 1;
            true
        } else {
            false
        }
    }

    /// Gives the caller's slot back, unless fills are queued: then the
    /// caller keeps its slot, and up to `most` of them, oldest first, are
    /// moved into `into` (cleared first) for it to fill. Returns whether it
    /// kept the slot.
    pub(crate) fn leave_or_take(&self, into: &mut Vec<Miss>, most: usize) -> bool {
        into.clear();
        let mut s = self.lock();
        if s.queued.is_empty() {
            s.busy -= 1;
            return false;
        }
        let n = s.queued.len().min(most.max(1));
        into.extend(s.queued.drain(..n));
        true
    }

    /// Fillers in the store and fills queued, now.
    #[cfg(test)]
    fn load(&self) -> (usize, usize) {
        let s = self.lock();
        (s.busy, s.queued.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss(page: usize, write: bool) -> Miss {
        Miss {
            page,
            write,
            thread: 0,
        }
    }

    #[test]
    fn full_slots_queue_fills_for_the_holders() {
        let s = StoreSlots::default();
        assert!(s.enter_or_queue(2, &[miss(10, false)]));
        assert!(s.try_enter(2));
        assert!(!s.try_enter(2), "both slots taken");
        assert!(!s.enter_or_queue(2, &[miss(11, true)]));
        assert!(!s.enter_or_queue(2, &[miss(12, false), miss(13, false)]));
        assert_eq!(s.load(), (2, 3));
        // The first holder to leave takes the queue, in order, as one
        // batch (up to the most it asks for), keeping its slot meanwhile.
        let mut got = Vec::new();
        assert!(s.leave_or_take(&mut got, 2));
        assert_eq!(got, [miss(11, true), miss(12, false)]);
        assert!(s.leave_or_take(&mut got, 64));
        assert_eq!(got, [miss(13, false)]);
        assert_eq!(s.load(), (2, 0));
        assert!(!s.leave_or_take(&mut got, 64));
        assert!(got.is_empty());
        assert!(!s.leave_or_take(&mut got, 64));
        assert_eq!(s.load(), (0, 0));
        assert!(s.try_enter(2));
    }
}
