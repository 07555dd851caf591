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
//! too, or is skipped when none is free.
//!
//! With one filler nothing can be kept free: that runtime trades isolation
//! for its single thread. Two or more stores hanging at once can still take
//! a filler each beyond the first's `fillers - 1`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;

use crate::fault::Worker;
use crate::region::Region;
use crate::runtime::Shared;

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
    fn enter_or_queue(&self, limit: usize, page: usize, write: bool) -> bool {
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
    fn try_enter(&self, limit: usize) -> bool {
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
    fn leave_or_next(&self) -> Option<(usize, bool)> {
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

impl Shared {
    /// Slots of each region: all fillers but one.
    fn store_slot_limit(&self) -> usize {
        self.cfg.fillers.saturating_sub(1).max(1)
    }

    /// Fills a missed page this thread holds busy, in one of the region's
    /// store slots; if none is free, queues the fill for a filler already
    /// in the region's store and returns at once.
    pub(crate) fn fill_fault_in_slot(
        &self,
        w: &mut Worker,
        region: &Region,
        page: usize,
        write: bool,
    ) {
        if w.in_store {
            self.fill_fault(w, region, page, write);
            return;
        }
        if !region
            .store_slots
            .enter_or_queue(self.store_slot_limit(), page, write)
        {
            self.stats.queued_fills.fetch_add(1, Relaxed);
            return;
        }
        w.in_store = true;
        self.fill_fault(w, region, page, write);
        self.leave_store(w, region);
    }

    /// Runs read-ahead after a fault in one of the region's store slots, or
    /// skips it when none is free (the region's store is slow or hung).
    pub(crate) fn fill_ranges_in_slot(
        &self,
        w: &mut Worker,
        region: &Region,
        ranges: &[std::ops::Range<usize>],
    ) {
        if w.in_store {
            self.fill_ranges(w, region, ranges, false);
            return;
        }
        if !region.store_slots.try_enter(self.store_slot_limit()) {
            return;
        }
        w.in_store = true;
        self.fill_ranges(w, region, ranges, false);
        self.leave_store(w, region);
    }

    /// Serves the fills queued on the region, then gives the slot back.
    fn leave_store(&self, w: &mut Worker, region: &Region) {
        while let Some((page, write)) = region.store_slots.leave_or_next() {
            self.fill_fault(w, region, page, write);
        }
        w.in_store = false;
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
