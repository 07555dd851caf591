//! Faults that make no progress: the same thread faulting on the same page
//! again and again while umio holds the page resident, so that each fault
//! is resolved without installing anything (the kernel dropped the page's
//! mapping behind umio's back, say with the application's own
//! `madvise(MADV_DONTNEED)`). Left alone, the thread would spin forever.
//!
//! One word per thread slot (thread id modulo [`SLOTS`]) remembers the
//! last such fault: a key made of the thread and the page, and how many
//! times in a row it came. Any other fault of the thread (on another page,
//! or one that fills or dirties the page) starts over. A thread blocked on
//! a fault cannot fault anywhere else, so a stuck thread's count only
//! grows. No lock, no allocation: one relaxed load per fault, a store
//! when the slot changes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Thread slots; threads whose ids are equal modulo this share one (they
/// then only delay each other's detection).
const SLOTS: usize = 1024;
/// Low bits of a slot counting the repeats.
const COUNT_BITS: u32 = 12;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Repeats of one fault, with nothing installed in between, after which
/// the fault counts as stuck. A fault on a resident page happens once per
/// race with a fill at most; a thousand in a row is a loop, found within
/// milliseconds.
pub(crate) const STUCK_AFTER: u64 = 1000;

/// The per-thread record of faults resolved without progress.
pub(crate) struct Progress {
    slots: Box<[AtomicU64]>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, thread: u32) -> &AtomicU64 {
        &self.slots[thread as usize % SLOTS]
    }

    /// Thread `thread` faulted on the page at `addr` and the fault is
    /// resolved without installing anything. Returns `true` once this has
    /// happened [`STUCK_AFTER`] times in a row (the slot then starts over).
    pub fn stalled(&self, thread: u32, addr: usize) -> bool {
        let key = key(thread, addr);
        let slot = self.slot(thread);
        let v = slot.load(Relaxed);
        let count = if v & !COUNT_MASK == key {
            (v & COUNT_MASK) + 1
        } else {
            1
        };
        if count >= STUCK_AFTER {
            slot.store(0, Relaxed);
            return true;
        }
        slot.store(key | count, Relaxed);
        false
    }

    /// Thread `thread` made progress (its fault filled or dirtied a page,
    /// or waits for another thread's fill): its record starts over.
    #[inline]
    pub fn made(&self, thread: u32) {
        let slot = self.slot(thread);
        if slot.load(Relaxed) != 0 {
            slot.store(0, Relaxed);
        }
    }
}

/// The thread and the page, hashed into the bits above the count (never
/// 0, so that an empty slot matches nothing).
fn key(thread: u32, addr: usize) -> u64 {
    let h = ((addr as u64 >> 12) ^ (u64::from(thread) << 40))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17);
    (h & !COUNT_MASK).max(1 << COUNT_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_thread_is_found_and_progress_or_other_pages_start_over() {
        let p = Progress::new();
        for _ in 0..STUCK_AFTER - 1 {
            assert!(!p.stalled(7, 0x10000));
        }
        assert!(p.stalled(7, 0x10000));
        // Started over.
        assert!(!p.stalled(7, 0x10000));
        // Another page of the same thread starts over.
        for _ in 0..STUCK_AFTER - 2 {
            assert!(!p.stalled(7, 0x10000));
        }
        assert!(!p.stalled(7, 0x20000));
        assert!(!p.stalled(7, 0x10000));
        // So does progress.
        for _ in 0..STUCK_AFTER - 2 {
            assert!(!p.stalled(7, 0x10000));
        }
        p.made(7);
        assert!(!p.stalled(7, 0x10000));
        // Other threads keep their own counts.
        for _ in 0..STUCK_AFTER - 1 {
            assert!(!p.stalled(8, 0x10000));
            assert!(!p.stalled(9, 0x30000));
        }
        assert!(p.stalled(8, 0x10000));
        assert!(p.stalled(9, 0x30000));
    }
}
