//! Prefetch policies: what to fetch ahead of a miss.
//!
//! A filler calls the region's [`Prefetcher`] after it has installed a
//! missed page and woken the faulting thread, then fills the returned range
//! itself, in one store read and one `UFFDIO_COPY` per run of missing pages:
//! read-ahead costs no thread hand-off and is off the faulting thread's
//! critical path.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Access-pattern advice for a range of a mapping, as with `madvise(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Advice {
    /// No special treatment: the region's prefetch policy decides.
    #[default]
    Normal,
    /// Expect sequential access: read ahead with the largest window.
    Sequential,
    /// Expect random access: no read-ahead.
    Random,
    /// Expect access soon: fetch the range in the background now.
    WillNeed,
    /// Not needed: discard the range's pages without writing them back;
    /// the next access reads the store again (changes not yet written back
    /// are lost, as they are for `MADV_DONTNEED` on a private mapping).
    DontNeed,
}

/// What a prefetcher learns of a miss.
#[derive(Clone, Copy, Debug)]
pub struct Miss {
    /// The missed page's index in the region.
    pub page: u64,
    /// Pages in the region.
    pub pages: u64,
    /// Whether the access was a write.
    pub write: bool,
    /// The advice in force for this page ([`Advice::Normal`],
    /// [`Advice::Sequential`] or [`Advice::Random`]).
    pub advice: Advice,
}

/// Decides, on each miss, which pages of the region to fetch ahead.
///
/// Built-in policies get one instance per region; an instance given with
/// `MapOptions::prefetcher` serves the regions it is given to. Called from
/// fillers concurrently, so keep state in atomics. Return an empty range for no prefetch. Pages already resident
/// or being filled in the range are skipped, and prefetch never evicts to
/// make room: it uses free cache only.
pub trait Prefetcher: Send + Sync + 'static {
    /// Pages to fetch after `miss`.
    fn on_miss(&self, miss: &Miss) -> Range<u64>;
}

/// The built-in prefetch policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchKind {
    /// No read-ahead; [`Advice::Sequential`] still reads ahead.
    None,
    /// Sequential read-ahead with an adaptive window: it doubles while
    /// misses follow one another and collapses on a random miss.
    Sequential {
        /// Largest window, in bytes.
        max_window: usize,
    },
}

impl Default for PrefetchKind {
    fn default() -> Self {
        PrefetchKind::Sequential {
            max_window: 2 << 20,
        }
    }
}

impl PrefetchKind {
    pub(crate) fn build(self, page_size: usize) -> std::sync::Arc<dyn Prefetcher> {
        match self {
            PrefetchKind::None => std::sync::Arc::new(ReadAhead::new(0, page_size, 2 << 20)),
            PrefetchKind::Sequential { max_window } => std::sync::Arc::new(ReadAhead::new(
                max_window,
                page_size,
                max_window.max(2 << 20),
            )),
        }
    }
}

/// Adaptive sequential read-ahead.
///
/// State is two atomics: the page a sequential stream would miss next, and
/// the current window. Races between fillers only make the guess less
/// precise, never wrong: the fill path checks every page's state.
#[derive(Debug)]
pub struct ReadAhead {
    max_pages: u64,
    advised_pages: u64,
    next: AtomicU64,
    window: AtomicU64,
}

impl ReadAhead {
    const FIRST_WINDOW: u64 = 4;

    /// Read-ahead up to `max_window` bytes on its own, up to
    /// `advised_window` bytes where [`Advice::Sequential`] is in force.
    pub fn new(max_window: usize, page_size: usize, advised_window: usize) -> Self {
        ReadAhead {
            max_pages: (max_window / page_size) as u64,
            advised_pages: ((advised_window / page_size) as u64).max(1),
            next: AtomicU64::new(u64::MAX),
            window: AtomicU64::new(0),
        }
    }
}

impl Prefetcher for ReadAhead {
    fn on_miss(&self, miss: &Miss) -> Range<u64> {
        let start = miss.page + 1;
        let window = match miss.advice {
            Advice::Random => 0,
            Advice::Sequential => self.advised_pages,
            _ if self.max_pages == 0 => 0,
            _ => {
                let expected = self.next.load(Relaxed);
                // Sequential if this miss is where the last stream stopped,
                // or right after the last miss with no read-ahead yet.
                if miss.page == expected {
                    let w = self.window.load(Relaxed);
                    (w * 2).clamp(Self::FIRST_WINDOW, self.max_pages)
                } else {
                    0
                }
            }
        };
        self.window.store(window, Relaxed);
        let end = start.saturating_add(window).min(miss.pages);
        self.next.store(end.max(start), Relaxed);
        start.min(end)..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss(page: u64, advice: Advice) -> Miss {
        Miss {
            page,
            pages: 1000,
            write: false,
            advice,
        }
    }

    #[test]
    fn window_grows_on_sequential_misses_and_collapses_on_random() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        assert!(
            ra.on_miss(&miss(10, Advice::Normal)).is_empty(),
            "first miss: no evidence yet"
        );
        assert_eq!(ra.on_miss(&miss(11, Advice::Normal)), 12..16);
        assert_eq!(ra.on_miss(&miss(16, Advice::Normal)), 17..25);
        assert_eq!(ra.on_miss(&miss(25, Advice::Normal)), 26..42);
        assert_eq!(ra.on_miss(&miss(42, Advice::Normal)), 43..75);
        assert_eq!(ra.on_miss(&miss(75, Advice::Normal)), 76..140);
        assert_eq!(
            ra.on_miss(&miss(140, Advice::Normal)),
            141..205,
            "capped at 64 pages"
        );
        assert!(
            ra.on_miss(&miss(500, Advice::Normal)).is_empty(),
            "random miss collapses"
        );
        assert_eq!(
            ra.on_miss(&miss(501, Advice::Normal)),
            502..506,
            "and it restarts small"
        );
    }

    #[test]
    fn advice_overrides_and_range_is_clipped() {
        let ra = ReadAhead::new(0, 4096, 16 * 4096);
        assert!(ra.on_miss(&miss(1, Advice::Normal)).is_empty());
        assert!(
            ra.on_miss(&miss(2, Advice::Normal)).is_empty(),
            "PrefetchKind::None"
        );
        assert_eq!(ra.on_miss(&miss(3, Advice::Sequential)), 4..20);
        assert_eq!(ra.on_miss(&miss(995, Advice::Sequential)), 996..1000);
        assert!(ra.on_miss(&miss(999, Advice::Sequential)).is_empty());
        let ra = ReadAhead::new(64 * 4096, 4096, 64 * 4096);
        ra.on_miss(&miss(1, Advice::Normal));
        assert!(ra.on_miss(&miss(2, Advice::Random)).is_empty());
    }
}
