//! Write prediction for synchronous dirty tracking: a region whose read
//! misses are nearly all followed by a first write (a program that reads a
//! record, then updates it) has its read misses filled dirty, without
//! write protection, so that the write that follows costs no second fault
//! (the write-protect round trip through umio).
//!
//! The evidence: a read miss filled clean (write-protected) is a probe,
//! remembered by page in a small direct-mapped table; a first write to a
//! clean page that is still in that table is a hit. A region predicts
//! writes while at least [`MIN_PROBES`] probes were seen and 7 in 8 of
//! them were hits, over a window that halves both counts every [`WINDOW`]
//! probes. While it predicts, one read miss in [`PROBE_EVERY`] is still
//! filled clean as a probe, so that the prediction ends when the program
//! stops writing what it reads. A first write to a page that did not come
//! in by a recent read miss (a page written again after its write-back)
//! is no evidence: a program rewriting hot pages does not make its cold
//! reads dirty.
//!
//! The cost of a wrong prediction is one write-back of an unchanged page;
//! a page is filled dirty only below the dirty limit and while the
//! region's store takes writes (`Shared::may_dirty_now`). Signal-safe:
//! atomics only (the in-thread service fills in a signal handler).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Recent probes remembered, by page modulo this.
const SLOTS: usize = 64;
/// Probes (and hits) are halved when probes reach this.
const WINDOW: u64 = 128;
/// Probes seen before a region may predict.
const MIN_PROBES: u64 = 32;
/// While predicting, one read miss in this many is filled clean, a probe.
const PROBE_EVERY: u64 = 16;

/// A region's evidence that its read misses are followed by writes.
pub(crate) struct WritePredictor {
    /// Probes in the high 32 bits, hits in the low 32.
    counts: AtomicU64,
    /// `page + 1` of a recent probe at `page % SLOTS`; 0: none.
    recent: [AtomicUsize; SLOTS],
    /// Read misses met while predicting (every [`PROBE_EVERY`]th probes).
    predicted: AtomicU64,
}

impl Default for WritePredictor {
    fn default() -> Self {
        WritePredictor {
            counts: AtomicU64::new(0),
            recent: std::array::from_fn(|_| AtomicUsize::new(0)),
            predicted: AtomicU64::new(0),
        }
    }
}

fn split(c: u64) -> (u64, u64) {
    (c >> 32, c & 0xffff_ffff)
}

impl WritePredictor {
    /// Whether the evidence says read misses are followed by writes.
    pub fn predicting(&self) -> bool {
        let (probes, hits) = split(self.counts.load(Relaxed));
        probes >= MIN_PROBES && hits * 8 >= probes * 7
    }

    /// At a read miss of a writable region: whether to fill it dirty (a
    /// write predicted), or clean (a probe, when the caller then
    /// [`probed`](WritePredictor::probed) it).
    pub fn predicts_write(&self) -> bool {
        self.predicting()
            && !self
                .predicted
                .fetch_add(1, Relaxed)
                .is_multiple_of(PROBE_EVERY)
    }

    /// A read miss of `page` was filled clean, write-protected.
    pub fn probed(&self, page: usize) {
        self.recent[page % SLOTS].store(page.wrapping_add(1), Relaxed);
        let _ = self.counts.fetch_update(Relaxed, Relaxed, |c| {
            let (probes, hits) = split(c);
            // Probes never pass WINDOW: halved when they reach it.
            let (probes, hits) = if probes + 1 >= WINDOW {
                (WINDOW / 2, hits / 2)
            } else {
                (probes + 1, hits)
            };
            Some(probes << 32 | hits.min(probes))
        });
    }

    /// A first write to `page`, held clean: a hit if a recent probe.
    pub fn first_write(&self, page: usize) {
        let slot = &self.recent[page % SLOTS];
        if slot
            .compare_exchange(page.wrapping_add(1), 0, Relaxed, Relaxed)
            .is_ok()
        {
            let _ = self.counts.fetch_update(Relaxed, Relaxed, |c| {
                let (probes, hits) = split(c);
                Some(probes << 32 | (hits + 1).min(probes))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_followed_by_writes_turn_prediction_on() {
        let p = WritePredictor::default();
        for page in 0..MIN_PROBES as usize - 1 {
            assert!(!p.predicts_write());
            p.probed(page * 7);
            p.first_write(page * 7);
        }
        assert!(!p.predicting(), "too few probes yet");
        p.probed(1000);
        p.first_write(1000);
        assert!(p.predicting());
        // One read miss in PROBE_EVERY stays a probe.
        let dirty = (0..160).filter(|_| p.predicts_write()).count();
        assert_eq!(dirty, 150);
    }

    #[test]
    fn reads_alone_or_unrelated_writes_never_predict() {
        let p = WritePredictor::default();
        for page in 0..1000 {
            p.probed(page);
            // Writes to pages that did not come in by a recent read miss.
            p.first_write(page + 100_000);
        }
        assert!(!p.predicting());
        // Half the reads written: not enough.
        for page in 0..1000 {
            p.probed(page);
            if page % 2 == 0 {
                p.first_write(page);
            }
        }
        assert!(!p.predicting());
    }

    #[test]
    fn prediction_ends_when_the_writes_stop() {
        let p = WritePredictor::default();
        for page in 0..200 {
            p.probed(page);
            p.first_write(page);
        }
        assert!(p.predicting());
        let mut misses = 0;
        let mut page = 0;
        while p.predicting() {
            if !p.predicts_write() {
                p.probed(page);
            }
            page += 1;
            misses += 1;
            assert!(misses < 10_000, "still predicting");
        }
        // Probes without writes: a few window's worth of read misses.
        assert!(misses <= 16 * 32, "{misses}");
    }
}
