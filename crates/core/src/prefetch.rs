//! Prefetch policies: what to fetch ahead of a miss.
//!
//! A filler shows the region's [`Prefetcher`] each fault it has resolved
//! (a miss once the page is installed and the faulting thread woken), then
//! fills the returned ranges, in one store read and one `UFFDIO_COPY` per
//! run of missing pages, the runs' reads in flight together: itself when
//! they are small (64 KiB), one of the region's store slots is free and
//! the cache has room, else through the `umio-prefetch` threads (which merge the ranges queued
//! meanwhile, from every stream, into one batch, and evict older pages
//! for room if they must). Prefetch is off the faulting thread's critical
//! path either way. Built-ins: [`ReadAhead`] (adaptive sequential windows, several
//! streams per region, pipelined) and [`Stride`].

use std::ops::Range;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Access-pattern advice for a range of a mapping, as with `madvise(2)`:
/// advice that leaves the bytes as they are, given with
/// [`Mapping::advise`](crate::Mapping::advise) through a shared handle.
/// The advice that drops pages is [`UncheckedAdvice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Advice {
    /// No special treatment: the region's prefetch policy decides.
    #[default]
    Normal,
    /// Expect sequential access: read ahead with the largest window.
    Sequential,
    /// Expect random access: no read-ahead.
    Random,
    /// Expect access soon: fetch the range in the background now, as
    /// [`Mapping::prefetch`](crate::Mapping::prefetch) does (reads in
    /// batches of the store's depth, at most half of the cache).
    WillNeed,
    /// Promote the range's aligned 2 MiB ranges to huge pages on their
    /// next miss, whatever the region's promotion policy (as
    /// `MADV_HUGEPAGE` asks of the kernel). Needs a page size that divides
    /// 2 MiB; a no-op on hugetlbfs regions.
    Huge,
    /// Never promote the range's 2 MiB ranges (as `MADV_NOHUGEPAGE`).
    NoHuge,
}

/// Advice that drops the range's pages, so that the next access reads the
/// store again and may see other bytes than before: memmap2's
/// `UncheckedAdvice`. Given with
/// [`Mapping::advise_mut`](crate::Mapping::advise_mut), which borrows the
/// mapping mutably so that no slice of it lives across the change, or
/// through a shared handle with the `unsafe`
/// [`Mapping::advise_shared`](crate::Mapping::advise_shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UncheckedAdvice {
    /// Not needed: discard the range's pages without writing them back;
    /// the next access reads the store again (changes not yet written back
    /// are lost, as they are for `MADV_DONTNEED` on a private mapping).
    DontNeed,
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
    /// first, so nothing written through the mapping is lost; the next
    /// access reads the store again, and shows what was written to it by
    /// other means meanwhile.
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
/// ([`on_fault`](Prefetcher::on_fault)) and then, after waking the
/// faulting thread, fills the ranges asked for, itself or through the
/// `umio-prefetch` threads (ranges over 64 KiB, or when the region's store
/// slots are taken or the cache is full): prefetch runs off the faulting thread's critical path,
/// and a thread that faults on a page being prefetched waits for that
/// page's read. Pages already resident or being filled are skipped, pages
/// past the region's end are ignored, and when the cache is full the
/// prefetch threads evict older pages to make room, as for
/// [`Advice::WillNeed`] (a scan larger than the cache keeps its
/// read-ahead). The decision may be asked for from any thread.
///
/// Implement [`on_miss`](Prefetcher::on_miss) to see misses only (the
/// default `on_fault` calls it on each miss), or `on_fault` to see every
/// fault. Built-in policies get one instance per region; an instance given
/// with `MapOptions::prefetcher` serves the regions it is given to.
/// Called from several threads concurrently, so keep state in atomics (or
/// behind a lock held briefly).
///
/// **May run in a signal handler**: under
/// [`FaultService::InThread`](crate::FaultService::InThread), `on_fault`
/// (and so `on_miss`) is called by the faulting thread inside its SIGBUS
/// handler. There it must not allocate (`fetch` has room reserved), log,
/// panic (a panic in the handler aborts the process), or take a lock the
/// application may hold while it touches mapped memory.
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
    /// Sequential read-ahead ([`ReadAhead`]): up to 8 streams per region,
    /// each with a window that starts at 4 pages and doubles with each
    /// window the stream consumes, the next window read while the
    /// application consumes this one.
    Sequential {
        /// Largest window, in bytes. A window is also at most a sixteenth
        /// of the cache (as it is when the region is mapped): more would
        /// evict its own pages before they are read.
        max_window: usize,
    },
    /// Stride detection ([`Stride`]): after two misses the same number of
    /// pages apart, forward or backward, fetch the next pages of the
    /// stride, more while the stride holds.
    Stride {
        /// Largest window, in bytes: how far ahead a stride of one page
        /// (a sequential scan, either direction) reads. Larger strides
        /// fetch up to 16 pages ahead, within this window's page count.
        /// Also at most a sixteenth of the cache, as for `Sequential`.
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

/// A read-ahead window is at most this fraction of the cache (of the pool
/// the region's pages count against), whatever the policy's setting: a
/// region's 8 streams with two windows each in flight then fill at most the
/// cache, and a window never evicts the page whose fault asked for it (or
/// the window before it) before the application has used it. A window
/// larger than the cache would read pages only to evict them unread, and
/// evict dirty pages the application just wrote, to write them twice.
pub(crate) const WINDOW_CACHE_FRACTION: u64 = 16;

impl PrefetchKind {
    /// The region's prefetcher, its windows clipped to
    /// `cache_bytes / WINDOW_CACHE_FRACTION` (at least one page).
    pub(crate) fn build(
        self,
        page_size: usize,
        cache_bytes: u64,
    ) -> std::sync::Arc<dyn Prefetcher> {
        let clip = |window: usize| {
            let most = usize::try_from(cache_bytes / WINDOW_CACHE_FRACTION).unwrap_or(usize::MAX);
            window.min(most.max(page_size))
        };
        match self {
            PrefetchKind::None => std::sync::Arc::new(ReadAhead::new(0, page_size, clip(2 << 20))),
            PrefetchKind::Sequential { max_window } => std::sync::Arc::new(ReadAhead::new(
                clip(max_window),
                page_size,
                clip(max_window.max(2 << 20)),
            )),
            PrefetchKind::Stride { max_window } => {
                std::sync::Arc::new(Stride::new(clip(max_window), page_size))
            }
        }
    }
}

/// Adaptive sequential read-ahead, several streams per region.
///
/// A small table of streams ([`ReadAhead::STREAMS`] of them, least
/// recently used replaced) follows sequential access wherever it happens in
/// the region: two threads scanning two halves, or one thread reading two
/// files' worth of records side by side, each get a stream of their own. A
/// fault belongs to the stream whose last page it follows most closely (at
/// or after that page, at most [`ReadAhead::NEAR`] pages past what the
/// stream asked for); a miss that belongs to none starts a new stream,
/// which reads nothing ahead yet.
///
/// Each stream asks for windows of pages ahead of its thread, pipelined the
/// way Linux's read-ahead is (its `PG_readahead` mark): the first page of
/// the last window asked for is the *trigger*, and a fault at or just
/// before it (the thread reached the last window while its read is still
/// in flight, or is about to) asks for the next window, so that the next
/// read is in flight while the thread consumes this one. The first window
/// is small (4 pages); each further one doubles, up to the largest window.
/// A miss on a page of a window the stream asked for before its last one
/// (read ahead, then evicted before use, or a read-ahead dropped for want
/// of cache space) halves the window and asks for the rest of that window
/// again. [`Advice::Sequential`] makes every window the advised size from
/// the first miss on; [`Advice::Random`] reads nothing ahead and leaves
/// the streams alone.
///
/// The decision is a function of the table and the fault alone, callable
/// from any thread: the table sits behind a mutex held for a few
/// comparisons. The fill path checks every page's state, so a window asked
/// for twice is read once.
///
/// ```
/// use umio_core::{Advice, Fault, FaultKind, FetchList, Prefetcher, ReadAhead};
/// let ra = ReadAhead::new(2 << 20, 4096, 2 << 20);
/// let mut fetch = FetchList::new();
/// let mut fault = |page| {
///     fetch.clear();
///     let f = Fault { page, pages: 10_000, offset: page as usize * 4096, write: false,
///                     thread: 0, kind: FaultKind::Miss, advice: Advice::Normal };
///     ra.on_fault(&f, &mut fetch);
///     fetch.as_slice().to_vec()
/// };
/// // Two threads' scans, interleaved: each gets its own stream.
/// assert!(fault(0).is_empty());
/// assert!(fault(5000).is_empty());
/// assert_eq!(fault(1), [2..6]);
/// assert_eq!(fault(5001), [5002..5006]);
/// ```
#[derive(Debug)]
pub struct ReadAhead {
    max_pages: u64,
    advised_pages: u64,
    table: std::sync::Mutex<Streams>,
}

/// One sequential stream of a [`ReadAhead`].
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    /// Whether the slot holds a stream.
    live: bool,
    /// The furthest page the stream's thread faulted on.
    last: u64,
    /// End (exclusive) of the pages asked for.
    ahead: u64,
    /// First page of the last window asked for: reaching it asks for the
    /// next window.
    trigger: u64,
    /// Size of the last window asked for, in pages (0: none yet).
    window: u64,
    /// When the stream last took a fault (the table's clock), for LRU.
    used: u64,
}

/// The stream table of a [`ReadAhead`].
#[derive(Debug, Default)]
struct Streams {
    slots: [Stream; ReadAhead::STREAMS],
    clock: u64,
}

impl Streams {
    /// The stream `page` belongs to: the one whose last page it follows
    /// most closely, within what the stream asked for and
    /// [`ReadAhead::NEAR`] pages beyond.
    fn find(&self, page: u64) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.live
                    && page >= s.last
                    && page <= s.ahead.max(s.last + 1).saturating_add(ReadAhead::NEAR)
            })
            .min_by_key(|(_, s)| page - s.last)
            .map(|(i, _)| i)
    }

    /// A slot for a new stream: a free one, else the least recently used.
    fn victim(&self) -> usize {
        self.slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (s.live, s.used))
            .map_or(0, |(i, _)| i)
    }

    /// What to read ahead after `fault`, given the largest window `cap`
    /// (pages) and whether the advice asks for it whole at once.
    fn decide(&mut self, fault: &Fault, cap: u64, advised: bool, fetch: &mut FetchList) {
        let p = fault.page;
        self.clock += 1;
        let clock = self.clock;
        let i = match self.find(p) {
            Some(i) => i,
            // A thread waiting for another's fill starts nothing.
            None if fault.kind != FaultKind::Miss => return,
            None => {
                let i = self.victim();
                self.slots[i] = Stream {
                    live: true,
                    last: p,
                    ahead: p + 1,
                    trigger: p + 1,
                    window: 0,
                    used: clock,
                };
                if !advised {
                    // No evidence of a stream yet.
                    return;
                }
                i
            }
        };
        let s = &mut self.slots[i];
        s.used = clock;
        if fault.kind == FaultKind::Miss && p > s.last && p < s.trigger {
            // A page of a window asked for before the last one, not there:
            // evicted before use, or a read-ahead dropped for want of
            // cache space. Smaller windows from now on, and the rest of
            // this one again.
            s.window = (s.window / 2).max(1);
            fetch.push(p + 1..s.trigger);
        }
        s.last = s.last.max(p);
        // Reaching the last window (or about to) asks for the next; a
        // stream with no window yet asks for one only, and a second once
        // it has one (start small).
        for _ in 0..2 {
            if s.trigger > p + 1 || s.ahead >= fault.pages {
                break;
            }
            let first = s.window == 0;
            let start = s.ahead.max(p + 1);
            let w = if advised {
                cap
            } else if first {
                ReadAhead::FIRST_WINDOW.min(cap)
            } else {
                (s.window * 2).min(cap)
            };
            let end = start.saturating_add(w).min(fault.pages);
            if !fetch.push(start..end) {
                break;
            }
            s.trigger = start;
            s.ahead = end;
            s.window = w;
            if first {
                break;
            }
        }
    }
}

impl ReadAhead {
    /// The first window of a stream, in pages.
    pub const FIRST_WINDOW: u64 = 4;
    /// Streams followed at once per region.
    pub const STREAMS: usize = 8;
    /// How many pages past what a stream asked for a fault may land and
    /// still belong to it (a thread that skips a few pages).
    pub const NEAR: u64 = 8;

    /// Read-ahead up to `max_window` bytes on its own, up to
    /// `advised_window` bytes where [`Advice::Sequential`] is in force.
    pub fn new(max_window: usize, page_size: usize, advised_window: usize) -> Self {
        ReadAhead {
            max_pages: (max_window / page_size) as u64,
            advised_pages: ((advised_window / page_size) as u64).max(1),
            table: std::sync::Mutex::new(Streams::default()),
        }
    }
}

impl Prefetcher for ReadAhead {
    /// The pages [`on_fault`](Prefetcher::on_fault) asks for after `miss`,
    /// as one range: the first run of consecutive pages asked for.
    fn on_miss(&self, miss: &Miss) -> Range<u64> {
        let mut fetch = FetchList::new();
        let fault = Fault {
            page: miss.page,
            pages: miss.pages,
            offset: 0,
            write: miss.write,
            kind: FaultKind::Miss,
            advice: miss.advice,
            thread: 0,
        };
        self.on_fault(&fault, &mut fetch);
        let mut out: Option<Range<u64>> = None;
        for r in fetch.as_slice() {
            match &mut out {
                None => out = Some(r.clone()),
                Some(o) if o.end == r.start => o.end = r.end,
                Some(_) => break,
            }
        }
        out.unwrap_or(0..0)
    }

    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        if !matches!(fault.kind, FaultKind::Miss | FaultKind::Coalesced) {
            return;
        }
        let (cap, advised) = match fault.advice {
            Advice::Random => return,
            Advice::Sequential => (self.advised_pages, true),
            _ if self.max_pages == 0 => return,
            _ => (self.max_pages, false),
        };
        // A panic while the table was held leaves it consistent enough:
        // every stream field is a hint.
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.decide(fault, cap, advised, fetch);
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

    /// What `ra` asks for after a fault of `kind` at `page` (1000 pages).
    fn ra_after(ra: &ReadAhead, page: u64, kind: FaultKind, advice: Advice) -> Vec<Range<u64>> {
        let mut f = FetchList::new();
        ra.on_fault(&fault(page, kind, advice), &mut f);
        f.as_slice().to_vec()
    }

    fn ra_miss(ra: &ReadAhead, page: u64) -> Vec<Range<u64>> {
        ra_after(ra, page, FaultKind::Miss, Advice::Normal)
    }

    /// A fault on a page being read ahead (the thread reached it first).
    fn ra_wait(ra: &ReadAhead, page: u64) -> Vec<Range<u64>> {
        ra_after(ra, page, FaultKind::Coalesced, Advice::Normal)
    }

    /// The largest range `p` asks for over two sequential walks: one that
    /// misses only where read-ahead has not reached (the pages it asked
    /// for are in by the time the thread gets there), one that misses twice
    /// and then faults on pages being read ahead (the thread keeping up).
    fn largest_window(p: &dyn Prefetcher, advice: Advice) -> u64 {
        let mut largest = 0;
        let mut page = 0;
        while page < 1000 {
            let mut f = FetchList::new();
            p.on_fault(&fault(page, FaultKind::Miss, advice), &mut f);
            let most = f.as_slice().iter().map(|r| r.end - r.start).max();
            largest = largest.max(most.unwrap_or(0));
            page = f.as_slice().iter().map(|r| r.end).max().unwrap_or(page + 1);
        }
        // A second walk over the same pages: a new stream for the policy.
        for page in 0..1000 {
            let kind = if page < 2 {
                FaultKind::Miss
            } else {
                FaultKind::Coalesced
            };
            let mut f = FetchList::new();
            p.on_fault(&fault(page, kind, advice), &mut f);
            let most = f.as_slice().iter().map(|r| r.end - r.start).max();
            largest = largest.max(most.unwrap_or(0));
        }
        largest
    }

    #[test]
    fn windows_are_at_most_a_sixteenth_of_the_cache() {
        let kinds = [
            PrefetchKind::default(),
            PrefetchKind::Stride {
                max_window: 2 << 20,
            },
        ];
        for kind in kinds {
            // 1 MiB of cache, 4 KiB pages: 64 KiB windows, 16 pages.
            let small = kind.build(4096, 1 << 20);
            assert_eq!(largest_window(&*small, Advice::Normal), 16, "{kind:?}");
            // A cache 16 times the window leaves the setting alone.
            let large = kind.build(4096, 1 << 30);
            assert!(largest_window(&*large, Advice::Normal) > 16, "{kind:?}");
        }
        let advised = PrefetchKind::None.build(4096, 1 << 20);
        assert_eq!(largest_window(&*advised, Advice::Sequential), 16);
        // Never less than a page.
        let tiny = PrefetchKind::default().build(16 << 10, 64 << 10);
        assert_eq!(largest_window(&*tiny, Advice::Normal), 1);
    }

    #[test]
    fn a_stream_starts_small_and_asks_for_the_next_window_when_it_reaches_the_last() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        assert!(ra_miss(&ra, 10).is_empty(), "first miss: no evidence yet");
        assert_eq!(ra_miss(&ra, 11), [12..16], "4 pages first");
        // The thread reaches the window while it is read: the next one,
        // twice as large, goes in flight.
        assert_eq!(ra_wait(&ra, 12), [16..24]);
        assert!(ra_wait(&ra, 13).is_empty(), "inside the window: nothing");
        // The page before the trigger (the first of the last window)
        // already asks for the next window.
        assert_eq!(ra_wait(&ra, 15), [24..40]);
        assert!(ra_wait(&ra, 16).is_empty(), "asked for already");
        assert_eq!(ra_wait(&ra, 24), [40..72]);
        assert_eq!(ra_wait(&ra, 40), [72..136], "64 pages: the cap");
        assert_eq!(ra_wait(&ra, 72), [136..200], "capped");
        // The thread outran nothing: every window was in by the time it
        // got there, and it misses where the stream stopped. Nothing is in
        // flight: two windows go, so that the next is in flight while it
        // consumes the first.
        assert_eq!(ra_miss(&ra, 200), [201..265, 265..329]);
        // A miss on a page of the last window asked for is a thread that
        // got there before the prefetch thread did: no loss, and the next
        // window goes.
        assert_eq!(ra_miss(&ra, 266), [329..393]);
        assert!(ra_wait(&ra, 267).is_empty());
    }

    #[test]
    fn two_interleaved_sequential_streams_both_grow_their_windows() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        let (mut a, mut b) = (0u64, 500u64);
        assert!(ra_miss(&ra, a).is_empty());
        assert!(ra_miss(&ra, b).is_empty());
        let mut largest = [0u64; 2];
        // Each thread misses the page after its last, then waits on each
        // window's first page: a scan that outruns its reads.
        let mut next = [ra_miss(&ra, a + 1), ra_miss(&ra, b + 1)];
        for _ in 0..8 {
            for (k, pos) in [&mut a, &mut b].into_iter().enumerate() {
                let asked = &next[k];
                assert_eq!(asked.len(), 1, "stream {k}: {asked:?}");
                let r = asked[0].clone();
                largest[k] = largest[k].max(r.end - r.start);
                *pos = r.start;
                next[k] = ra_wait(&ra, *pos);
            }
        }
        assert_eq!(largest, [64, 64], "both reached the cap");
        assert!(a < 500 && b > 500, "{a} {b}");
    }

    #[test]
    fn random_misses_read_nothing_ahead_and_leave_a_stream_alone() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        ra_miss(&ra, 100);
        assert_eq!(ra_miss(&ra, 101), [102..106]);
        let mut x = 12345u64;
        for _ in 0..ReadAhead::STREAMS - 2 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = 200 + (x >> 33) % 800;
            let mut f = FetchList::new();
            ra.on_fault(
                &Fault {
                    pages: 1_000_000,
                    ..fault(page * 1000, FaultKind::Miss, Advice::Normal)
                },
                &mut f,
            );
            assert!(f.is_empty(), "random miss at {page}: {:?}", f.as_slice());
        }
        // The stream goes on where it was.
        assert_eq!(ra_wait(&ra, 102), [106..114]);
        // Waiting on another thread's fill starts no stream.
        assert!(ra_wait(&ra, 900).is_empty());
        assert!(ra_wait(&ra, 901).is_empty());
    }

    #[test]
    fn the_least_recently_used_stream_makes_room() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        let n = ReadAhead::STREAMS as u64;
        for s in 0..n {
            ra_miss(&ra, s * 100);
        }
        for s in 1..n {
            assert_eq!(ra_miss(&ra, s * 100 + 1), [s * 100 + 2..s * 100 + 6]);
        }
        // Stream 0 was used least recently: a new one takes its place.
        ra_miss(&ra, 950);
        assert!(ra_miss(&ra, 1).is_empty(), "stream 0 forgotten");
        assert_eq!(ra_wait(&ra, 702), [706..714], "the others kept");
    }

    #[test]
    fn a_miss_behind_the_last_window_shrinks_the_window() {
        let ra = ReadAhead::new(64 * 4096, 4096, 512 * 4096);
        ra_miss(&ra, 0);
        assert_eq!(ra_miss(&ra, 1), [2..6]);
        assert_eq!(ra_wait(&ra, 2), [6..14]);
        assert_eq!(ra_wait(&ra, 6), [14..30]);
        assert_eq!(ra_wait(&ra, 14), [30..62]);
        // [14, 30) was asked for before the last window: a miss at 20
        // means that read-ahead was lost. Half the window (32 -> 16), the
        // rest of that window again.
        assert_eq!(ra_miss(&ra, 20), [21..30]);
        assert_eq!(ra_wait(&ra, 30), [62..94], "32 again: 16 doubled");
        assert_eq!(ra_miss(&ra, 40), [41..62], "lost again");
        assert_eq!(ra_wait(&ra, 62), [94..126], "16 doubled");
    }

    #[test]
    fn advice_overrides_and_range_is_clipped() {
        // PrefetchKind::None: nothing on its own, the advised window with
        // Advice::Sequential, from the first miss on.
        let ra = ReadAhead::new(0, 4096, 16 * 4096);
        assert!(ra_miss(&ra, 1).is_empty());
        assert!(ra_miss(&ra, 2).is_empty());
        assert_eq!(
            ra_after(&ra, 3, FaultKind::Miss, Advice::Sequential),
            [4..20]
        );
        assert_eq!(
            ra_after(&ra, 995, FaultKind::Miss, Advice::Sequential),
            [996..1000]
        );
        assert!(ra_after(&ra, 999, FaultKind::Miss, Advice::Sequential).is_empty());
        // Sequential advice: the advised window at once, whatever the
        // stream's window.
        let ra = ReadAhead::new(64 * 4096, 4096, 256 * 4096);
        ra_miss(&ra, 10);
        assert_eq!(ra_miss(&ra, 11), [12..16]);
        assert_eq!(
            ra_after(&ra, 12, FaultKind::Coalesced, Advice::Sequential),
            [16..272]
        );
        // Random advice: nothing, and the stream is left as it was.
        let ra = ReadAhead::new(64 * 4096, 4096, 64 * 4096);
        ra_miss(&ra, 1);
        assert!(ra_after(&ra, 2, FaultKind::Miss, Advice::Random).is_empty());
        assert_eq!(ra_miss(&ra, 2), [3..7]);
        // Only misses and waits drive it.
        assert!(ra_after(&ra, 3, FaultKind::FirstWrite, Advice::Normal).is_empty());
        // A window of fewer pages than the first step (2 MiB pages, 2 MiB
        // window): one page ahead, never a panic.
        let ra = ReadAhead::new(2 << 20, 2 << 20, 2 << 20);
        assert!(ra_miss(&ra, 0).is_empty());
        assert_eq!(ra_miss(&ra, 1), [2..3]);
        assert_eq!(ra_wait(&ra, 2), [3..4, 4..5]);
        assert_eq!(ra_miss(&ra, 4), [5..6, 6..7]);
        // Clipped at the region's end.
        let ra = ReadAhead::new(64 * 4096, 4096, 64 * 4096);
        ra_miss(&ra, 990);
        assert_eq!(ra_miss(&ra, 991), [992..996]);
        assert_eq!(ra_wait(&ra, 992), [996..1000]);
        assert!(ra_wait(&ra, 996).is_empty());
        assert!(ra_miss(&ra, 999).is_empty());
    }

    #[test]
    fn on_miss_gives_the_first_run_asked_for() {
        let ra = ReadAhead::new(64 * 4096, 4096, 64 * 4096);
        assert!(ra.on_miss(&miss(10, Advice::Normal)).is_empty());
        assert_eq!(ra.on_miss(&miss(11, Advice::Normal)), 12..16);
        assert_eq!(
            ra.on_miss(&miss(16, Advice::Normal)),
            17..41,
            "two windows, one range"
        );
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
        /// Fetches the page after each miss.
        struct Next;
        impl Prefetcher for Next {
            fn on_miss(&self, miss: &Miss) -> Range<u64> {
                miss.page + 1..miss.page + 2
            }
        }
        let mut f = FetchList::new();
        Next.on_fault(&fault(10, FaultKind::Miss, Advice::Normal), &mut f);
        assert_eq!(f.as_slice(), [11..12]);
        f.clear();
        Next.on_fault(&fault(16, FaultKind::Coalesced, Advice::Normal), &mut f);
        assert!(f.is_empty());
    }
}
