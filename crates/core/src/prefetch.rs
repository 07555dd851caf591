//! Prefetch policies: what to fetch ahead of a miss.
//!
//! A filler shows the region's [`Prefetcher`] each fault it has resolved
//! (a miss once the page is installed and the faulting thread woken), then
//! fills the returned ranges itself, in one store read and one
//! `UFFDIO_COPY` per run of missing pages: prefetch costs no thread
//! hand-off and is off the faulting thread's critical path. Built-ins:
//! [`ReadAhead`] (adaptive sequential window) and [`Stride`].

use std::ops::Range;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

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
    /// Promote the range's aligned 2 MiB ranges to huge pages on their
    /// next miss, whatever the region's promotion policy (as
    /// `MADV_HUGEPAGE` asks of the kernel). Needs a page size that divides
    /// 2 MiB; a no-op on hugetlbfs regions.
    Huge,
    /// Never promote the range's 2 MiB ranges (as `MADV_NOHUGEPAGE`).
    NoHuge,
    /// Free the range, as `MADV_REMOVE` does: dirty pages overlapping it
    /// are written back (their bytes outside the range are kept), the
    /// store's bytes in the range are discarded
    /// ([`Store::punch_hole`](umio_backends::Store::punch_hole)), and the
    /// pages overlapping it are dropped: the range reads zeros afterwards,
    /// in the mapping and in the store. Any range of whole 4 KiB pages of
    /// a writable mapping; an error from a store that cannot punch holes.
    Remove,
    /// Evict the pages overlapping the range now (`MADV_PAGEOUT`, and
    /// `MADV_COLD`, which umio treats alike): dirty ones are written back
    /// first, so nothing is lost; the next access reads the store again.
    PageOut,
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

/// How a fault found its page: what umio observed of the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FaultKind {
    /// The page was not resident: this fault read it from the store.
    Miss = 0,
    /// Another thread was filling or changing the page: the fault waits
    /// for it, with no read of its own.
    Coalesced = 1,
    /// The first write to a clean page (a write-protect fault): the page
    /// is now dirty.
    FirstWrite = 2,
    /// The page was already resident when the fault was handled (a fill
    /// by another thread finished first).
    Resolved = 3,
}

/// A fault a prefetcher is shown: every fault umio serves, once it is
/// resolved.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    /// The page's index in the region.
    pub page: u64,
    /// Pages in the region.
    pub pages: u64,
    /// Byte offset of the page in the mapping.
    pub offset: usize,
    /// Whether the access was a write.
    pub write: bool,
    /// What the fault found.
    pub kind: FaultKind,
    /// The advice in force for this page ([`Advice::Normal`],
    /// [`Advice::Sequential`] or [`Advice::Random`]).
    pub advice: Advice,
    /// The faulting thread's id (Linux TID), or 0 where the kernel does
    /// not report it (`UFFD_FEATURE_THREAD_ID`, Linux 4.14+).
    pub thread: u32,
}

impl Fault {
    /// The fault as a [`Miss`], for prefetchers written against
    /// [`Prefetcher::on_miss`].
    pub fn miss(&self) -> Miss {
        Miss {
            page: self.page,
            pages: self.pages,
            write: self.write,
            advice: self.advice,
        }
    }
}

/// The page ranges a prefetcher asks for after a fault: up to
/// [`FetchList::CAPACITY`] of them, kept without allocating (it lives on
/// the fault path).
#[derive(Clone, Debug, Default)]
pub struct FetchList {
    ranges: [Range<u64>; FetchList::CAPACITY],
    len: usize,
}

impl FetchList {
    /// Most ranges one fault may ask for.
    pub const CAPACITY: usize = 16;

    /// An empty list.
    pub const fn new() -> Self {
        FetchList {
            ranges: [const { 0..0 }; FetchList::CAPACITY],
            len: 0,
        }
    }

    /// Adds a range of pages (empty ones are ignored). Returns false, and
    /// adds nothing, when the list is full.
    pub fn push(&mut self, pages: Range<u64>) -> bool {
        if pages.is_empty() {
            return true;
        }
        if self.len == Self::CAPACITY {
            return false;
        }
        self.ranges[self.len] = pages;
        self.len += 1;
        true
    }

    /// The ranges asked for, in order.
    pub fn as_slice(&self) -> &[Range<u64>] {
        &self.ranges[..self.len]
    }

    /// Whether no range was asked for.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the list holds [`CAPACITY`](FetchList::CAPACITY) ranges.
    pub fn is_full(&self) -> bool {
        self.len == Self::CAPACITY
    }

    /// Empties the list.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// Decides, on each fault, which pages of the region to fetch ahead.
///
/// A filler shows the prefetcher every fault once it has resolved it
/// ([`on_fault`](Prefetcher::on_fault)) and then fills the ranges asked
/// for itself, after waking the faulting thread: prefetch runs off the
/// faulting thread's critical path and costs no thread hand-off. Pages
/// already resident or being filled are skipped, pages past the region's
/// end are ignored, and prefetch never evicts to make room: it uses free
/// cache only.
///
/// Implement [`on_miss`](Prefetcher::on_miss) to see misses only (the
/// default `on_fault` calls it on each miss), or `on_fault` to see every
/// fault. Built-in policies get one instance per region; an instance given
/// with `MapOptions::prefetcher` serves the regions it is given to.
/// Called from fillers concurrently, so keep state in atomics.
///
/// ```
/// use umio_core::{Fault, FaultKind, FetchList, Prefetcher};
///
/// /// On a write miss, fetch the page after it.
/// struct NextOnWrite;
///
/// impl Prefetcher for NextOnWrite {
///     fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
///         if fault.kind == FaultKind::Miss && fault.write {
///             fetch.push(fault.page + 1..fault.page + 2);
///         }
///     }
/// }
/// ```
pub trait Prefetcher: Send + Sync + 'static {
    /// Pages to fetch after `miss`. The default fetches nothing.
    fn on_miss(&self, miss: &Miss) -> Range<u64> {
        let _ = miss;
        0..0
    }

    /// Pages to fetch after `fault`, pushed onto `fetch` (empty when
    /// called). The default calls [`on_miss`](Prefetcher::on_miss) for a
    /// [`FaultKind::Miss`] and asks for nothing otherwise.
    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        if fault.kind == FaultKind::Miss {
            fetch.push(self.on_miss(&fault.miss()));
        }
    }
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
    /// Stride detection ([`Stride`]): after two misses the same number of
    /// pages apart, forward or backward, fetch the next pages of the
    /// stride, more while the stride holds.
    Stride {
        /// Largest window, in bytes: how far ahead a stride of one page
        /// (a sequential scan, either direction) reads. Larger strides
        /// fetch up to 16 pages ahead, within this window's page count.
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
            PrefetchKind::Stride { max_window } => {
                std::sync::Arc::new(Stride::new(max_window, page_size))
            }
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
                    // A window smaller than the first step (large pages)
                    // is used whole.
                    (w * 2).max(Self::FIRST_WINDOW).min(self.max_pages)
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

/// Stride detection: a prefetcher for access patterns that step through a
/// region a fixed number of pages at a time, forward or backward (a column
/// of a row-major matrix, every n-th record, a scan running backward).
///
/// Two misses the same number of pages apart after a third set the stride
/// `d`; the prefetcher then fetches the next 2 pages of the stride
/// (`page + d`, `page + 2d`), and each further miss where the stream was
/// expected doubles that depth, up to the window (strides of one page, a
/// sequential scan either way, read the window as one range) or up to
/// [`FetchList::CAPACITY`] pages (larger strides, one range per page). Any
/// other miss ends the stream. [`Advice::Random`] turns it off for its
/// range and [`Advice::Sequential`] reads the whole window ahead.
///
/// State is four atomics: races between fillers only make the guess less
/// precise, never wrong (the fill path checks every page's state).
///
/// ```
/// use umio_core::{Advice, Fault, FaultKind, FetchList, Prefetcher, Stride};
/// let stride = Stride::new(64 << 10, 4096);
/// let mut fetch = FetchList::new();
/// for page in [10, 15, 20] {
///     let miss = Fault { page, pages: 1000, offset: page as usize * 4096, write: false, thread: 0,
///                        kind: FaultKind::Miss, advice: Advice::Normal };
///     fetch.clear();
///     stride.on_fault(&miss, &mut fetch);
/// }
/// assert_eq!(fetch.as_slice(), &[25..26, 30..31]);
/// ```
#[derive(Debug)]
pub struct Stride {
    max_pages: u64,
    /// Page of the last miss, or the last page fetched for a stream.
    last: AtomicU64,
    /// Distance between the last two misses, in pages.
    stride: AtomicI64,
    /// The page a running stream should miss next (`NONE`: no stream).
    next: AtomicU64,
    /// Strides fetched ahead by the last prefetch.
    depth: AtomicU64,
}

const NONE: u64 = u64::MAX;

impl Stride {
    /// Stride detection reading up to `max_window` bytes ahead.
    pub fn new(max_window: usize, page_size: usize) -> Self {
        Stride {
            max_pages: (max_window / page_size) as u64,
            last: AtomicU64::new(NONE),
            stride: AtomicI64::new(0),
            next: AtomicU64::new(NONE),
            depth: AtomicU64::new(0),
        }
    }

    fn max_depth(&self, stride: i64) -> u64 {
        if stride.unsigned_abs() == 1 {
            self.max_pages
        } else {
            self.max_pages.min(FetchList::CAPACITY as u64)
        }
    }
}

impl Prefetcher for Stride {
    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        if fault.kind != FaultKind::Miss {
            return;
        }
        let (page, pages) = (fault.page, fault.pages);
        match fault.advice {
            Advice::Random => return,
            Advice::Sequential => {
                fetch.push(page + 1..page.saturating_add(1 + self.max_pages).min(pages));
                return;
            }
            _ if self.max_pages == 0 => return,
            _ => {}
        }
        let (stride, depth) = if page == self.next.load(Relaxed) {
            let d = self.stride.load(Relaxed);
            (
                d,
                (self.depth.load(Relaxed) * 2).clamp(2, self.max_depth(d)),
            )
        } else {
            let last = self.last.swap(page, Relaxed);
            let d = (page as i64).wrapping_sub(last as i64);
            let before = self.stride.swap(d, Relaxed);
            if last == NONE || d == 0 || d != before {
                self.next.store(NONE, Relaxed);
                self.depth.store(0, Relaxed);
                return;
            }
            (d, self.max_depth(d).min(2))
        };
        // Page `page + stride * i`, if it lies in the region.
        let at = |i: u64| {
            let q = page as i128 + stride as i128 * i as i128;
            (0..pages as i128).contains(&q).then_some(q as u64)
        };
        match stride {
            1 => {
                fetch.push(page + 1..page.saturating_add(depth + 1).min(pages));
            }
            -1 => {
                fetch.push(page.saturating_sub(depth)..page);
            }
            _ => {
                for i in 1..=depth {
                    match at(i) {
                        Some(q) if fetch.push(q..q + 1) => {}
                        _ => break,
                    }
                }
            }
        }
        self.last.store(at(depth).unwrap_or(page), Relaxed);
        self.next.store(at(depth + 1).unwrap_or(NONE), Relaxed);
        self.depth.store(depth, Relaxed);
    }
}

#[cfg(test)]
// Expected fetch lists are arrays of ranges, some of one range.
#[allow(clippy::single_range_in_vec_init)]
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
        // A window of fewer pages than the first step (2 MiB pages, 2 MiB
        // window): one page ahead, never a panic.
        let ra = ReadAhead::new(2 << 20, 2 << 20, 2 << 20);
        assert!(ra.on_miss(&miss(0, Advice::Normal)).is_empty());
        assert_eq!(ra.on_miss(&miss(1, Advice::Normal)), 2..3);
    }

    fn fault(page: u64, kind: FaultKind, advice: Advice) -> Fault {
        Fault {
            page,
            pages: 1000,
            offset: page as usize * 4096,
            write: false,
            thread: 1,
            kind,
            advice,
        }
    }

    fn stride_after(s: &Stride, page: u64) -> Vec<Range<u64>> {
        let mut f = FetchList::new();
        s.on_fault(&fault(page, FaultKind::Miss, Advice::Normal), &mut f);
        f.as_slice().to_vec()
    }

    #[test]
    fn stride_detects_forward_and_backward_strides_and_grows_while_they_hold() {
        let s = Stride::new(64 * 4096, 4096);
        assert!(stride_after(&s, 100).is_empty());
        assert!(
            stride_after(&s, 107).is_empty(),
            "one distance is no stride yet"
        );
        assert_eq!(stride_after(&s, 114), [121..122, 128..129]);
        // The stream goes on where it was expected: depth doubles.
        assert_eq!(
            stride_after(&s, 135),
            [142..143, 149..150, 156..157, 163..164]
        );
        assert_eq!(stride_after(&s, 170).len(), 8);
        assert_eq!(
            stride_after(&s, 233).len(),
            16,
            "capped at FetchList::CAPACITY"
        );
        // A random miss ends it.
        assert!(stride_after(&s, 3).is_empty());
        // Backward, one page at a time: one range below the miss.
        let s = Stride::new(64 * 4096, 4096);
        for p in [500, 499] {
            assert!(stride_after(&s, p).is_empty());
        }
        assert_eq!(stride_after(&s, 498), [496..498]);
        assert_eq!(stride_after(&s, 495), [491..495]);
    }

    #[test]
    fn stride_stays_inside_the_region_and_obeys_advice() {
        let s = Stride::new(64 * 4096, 4096);
        for p in [970, 980] {
            stride_after(&s, p);
        }
        assert!(stride_after(&s, 990).is_empty(), "1000 is past the end");
        let mut f = FetchList::new();
        s.on_fault(&fault(5, FaultKind::Miss, Advice::Sequential), &mut f);
        assert_eq!(f.as_slice(), [6..70]);
        f.clear();
        for p in [10, 20, 30] {
            s.on_fault(&fault(p, FaultKind::Miss, Advice::Random), &mut f);
        }
        assert!(f.is_empty());
        s.on_fault(&fault(40, FaultKind::FirstWrite, Advice::Normal), &mut f);
        assert!(f.is_empty(), "only misses drive it");
    }

    #[test]
    fn fetch_list_holds_its_capacity_and_skips_empty_ranges() {
        let mut f = FetchList::new();
        assert!(f.push(3..3));
        assert!(f.is_empty());
        for i in 0..FetchList::CAPACITY as u64 {
            assert!(f.push(i..i + 1));
        }
        assert!(f.is_full());
        assert!(!f.push(100..101));
        assert_eq!(f.as_slice().len(), FetchList::CAPACITY);
    }

    #[test]
    fn a_miss_only_prefetcher_sees_misses_through_the_default_on_fault() {
        let ra = ReadAhead::new(64 * 4096, 4096, 64 * 4096);
        let mut f = FetchList::new();
        for p in [10, 11] {
            f.clear();
            ra.on_fault(&fault(p, FaultKind::Miss, Advice::Normal), &mut f);
        }
        assert_eq!(f.as_slice(), [12..16]);
        f.clear();
        ra.on_fault(&fault(16, FaultKind::Coalesced, Advice::Normal), &mut f);
        assert!(f.is_empty());
    }
}
