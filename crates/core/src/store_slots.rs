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
//! returns, in the order they came. Read-ahead after a fault takes a slot
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
    /// Missed pages held busy, with whether the fault was a write, waiting
    /// for a filler that is in the store.
    queued: VecDeque<(usize, bool)>,
}

impl StoreSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for the fill of `page` (held busy), or, if all `limit`
    /// are taken, queues the fill for a filler in the store. Returns whether
    /// the caller has the slot (and must fill the page).
    pub(crate) fn enter_or_queue(&self, limit: usize, page: usize, write: bool) -> bool {
        let mut s = self.lock();
        if s.busy < limit {
            s.busy += 1;
            true
        } else {
            s.queued.push_back((page, write));
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

    /// Gives the caller's slot back, unless a fill is queued: then the
    /// caller keeps its slot and must do that fill.
    pub(crate) fn leave_or_next(&self) -> Option<(usize, bool)> {
        let mut s = self.lock();
        let next = s.queued.pop_front();
        if next.is_none() {
            s.busy -= 1;
        }
        next
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

    #[test]
    fn full_slots_queue_fills_for_the_holders() {
        let s = StoreSlots::default();
        assert!(s.enter_or_queue(2, 10, false));
        assert!(s.try_enter(2));
        assert!(!s.try_enter(2), "both slots taken");
        assert!(!s.enter_or_queue(2, 11, true));
        assert!(!s.enter_or_queue(2, 12, false));
        assert_eq!(s.load(), (2, 2));
        // The first holder to leave serves the queue, in order, keeping
        // its slot meanwhile.
        assert_eq!(s.leave_or_next(), Some((11, true)));
        assert_eq!(s.leave_or_next(), Some((12, false)));
        assert_eq!(s.load(), (2, 0));
        assert_eq!(s.leave_or_next(), None);
        assert_eq!(s.leave_or_next(), None);
        assert_eq!(s.load(), (0, 0));
        assert!(s.try_enter(2));
    }
}
