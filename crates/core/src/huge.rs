//! Huge pages: the promotion policies and per-region promotion state
//! (the promotion itself is in `promote.rs`), asynchronous promotion of 2 MiB ranges (xmap's design, on
//! an unmodified kernel), and what hugetlbfs regions need.
//!
//! Linux maps file pages 4 KiB at a time; umio's regions are anonymous
//! memory, which the kernel can back with transparent huge pages. A region
//! whose page size divides 2 MiB is laid out 2 MiB-aligned, and a
//! [`Promoter`] decides, per fault, whether to promote the aligned 2 MiB
//! range around it. Promotion runs on the background prefetch thread, never
//! on the fault's critical path: it fills the range's missing pages in one
//! batch of store reads, locks every page, clears write protection over the
//! whole range (its pages become dirty: dirty tracking is per 2 MiB from
//! then on), and asks the kernel to collapse the range into one huge page
//! (`madvise(MADV_COLLAPSE)`, which refuses ranges with a missing or
//! write-protected page).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64};

use crate::prefetch::{Fault, FaultKind};

/// The huge page size umio promotes to and hugetlbfs regions use.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Decides which 2 MiB ranges of a region to promote to huge pages.
///
/// Shown every fault umio serves on the region (after it is resolved, on
/// the filler): return `true` to schedule, in the background, the
/// promotion of the aligned 2 MiB range holding `fault.page`. Promotions of
/// one range are coalesced, and a range already promoted is not offered
/// again until it is evicted. Runs on umio's threads: keep it quick.
///
/// **May run in a signal handler**: under
/// [`FaultService::InThread`](crate::FaultService::InThread),
/// `should_promote` is called by the faulting thread inside its SIGBUS
/// handler: no allocation, no logging, no panic (it aborts the process
/// there), no lock the application may hold while it touches mapped
/// memory.
pub trait Promoter: Send + Sync + 'static {
    /// Whether to promote the 2 MiB range around this fault.
    fn should_promote(&self, fault: &Fault) -> bool;
}

/// Built-in promotion policies (xmap's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PromoteKind {
    /// Never promote (ranges advised [`Advice::Huge`] still are).
    ///
    /// [`Advice::Huge`]: crate::Advice::Huge
    #[default]
    Never,
    /// Promote the range of every miss (xmap's promote-always).
    Always,
    /// Promote when one thread faults on two consecutive pages (xmap's
    /// promote-seqfault): sequential access is worth a whole range.
    Sequential,
}

impl PromoteKind {
    /// Every built-in policy.
    pub const ALL: [PromoteKind; 3] = [
        PromoteKind::Never,
        PromoteKind::Always,
        PromoteKind::Sequential,
    ];

    /// The policy named `never`, `always` or `sequential` (any case).
    pub fn from_name(name: &str) -> Option<PromoteKind> {
        PromoteKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            PromoteKind::Never => "never",
            PromoteKind::Always => "always",
            PromoteKind::Sequential => "sequential",
        }
    }

    pub(crate) fn build(self) -> Option<Arc<dyn Promoter>> {
        match self {
            PromoteKind::Never => None,
            PromoteKind::Always => Some(Arc::new(PromoteAlways)),
            PromoteKind::Sequential => Some(Arc::new(PromoteSequential::new())),
        }
    }
}

/// Promotes the range of every miss.
#[derive(Debug, Default)]
pub struct PromoteAlways;

impl Promoter for PromoteAlways {
    fn should_promote(&self, fault: &Fault) -> bool {
        fault.kind == FaultKind::Miss
    }
}

/// Promotes when a thread faults on the page after the one it last
/// faulted on. Remembers the last fault of up to 64 threads (by thread id
/// modulo 64).
#[derive(Debug)]
pub struct PromoteSequential {
    last: [AtomicU64; 64],
}

impl PromoteSequential {
    /// A policy that has seen no fault.
    pub fn new() -> Self {
        PromoteSequential {
            last: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Default for PromoteSequential {
    fn default() -> Self {
        Self::new()
    }
}

impl Promoter for PromoteSequential {
    fn should_promote(&self, fault: &Fault) -> bool {
        // Thread id in the high half, page + 1 in the low (0: none).
        let me = u64::from(fault.thread) << 32;
        let now = me | (fault.page.wrapping_add(1) & 0xFFFF_FFFF);
        let prev = self.last[fault.thread as usize % 64].swap(now, Relaxed);
        prev & !0xFFFF_FFFF == me && (prev & 0xFFFF_FFFF) + 1 == (now & 0xFFFF_FFFF)
    }
}

pub(crate) const NORMAL: u8 = 0;
const PROMOTING: u8 = 1;
pub(crate) const PROMOTED: u8 = 2;
/// Promoted, and its 2 MiB charged to the runtime's huge-page pool
/// instead of its region's pool (`Builder::huge_cache_bytes`).
pub(crate) const POOLED: u8 = 3;

/// Promotion state of a region: one byte per aligned 2 MiB range.
pub(crate) struct HugeState {
    pub promoter: Option<Arc<dyn Promoter>>,
    /// Region pages per 2 MiB range.
    pub chunk_pages: usize,
    chunks: Box<[AtomicU8]>,
    /// Promote-worthy ranges by advice: `(pages, huge)`, last entry wins.
    advice: crate::rcu::RcuCell<Vec<(Range<usize>, bool)>>,
}

impl HugeState {
    /// State for a region of `pages` pages of `page_size` bytes, which must
    /// divide 2 MiB, with its base 2 MiB-aligned.
    pub fn new(pages: usize, page_size: usize, promoter: Option<Arc<dyn Promoter>>) -> Self {
        let chunk_pages = HUGE_PAGE_SIZE / page_size;
        // Only whole ranges inside the region can be promoted.
        let chunks = (0..pages / chunk_pages)
            .map(|_| AtomicU8::new(NORMAL))
            .collect();
        HugeState {
            promoter,
            chunk_pages,
            chunks,
            advice: crate::rcu::RcuCell::new(Vec::new()),
        }
    }

    /// The promotable range holding `page`, if any.
    pub fn chunk_of(&self, page: usize) -> Option<usize> {
        let c = page / self.chunk_pages;
        (c < self.chunks.len()).then_some(c)
    }

    pub fn pages_of(&self, chunk: usize) -> Range<usize> {
        chunk * self.chunk_pages..(chunk + 1) * self.chunk_pages
    }

    /// Whether the range is neither promoted nor being promoted.
    pub fn is_normal(&self, chunk: usize) -> bool {
        self.chunks[chunk].load(Relaxed) == NORMAL
    }

    pub fn is_promoted(&self, chunk: usize) -> bool {
        matches!(self.chunks[chunk].load(Acquire), PROMOTED | POOLED)
    }

    /// Whether the range is promoted and charged to the huge-page pool.
    pub fn is_pooled(&self, chunk: usize) -> bool {
        self.chunks[chunk].load(Acquire) == POOLED
    }

    /// Marks a promoted range ordinary again (a page of it was evicted, or
    /// dirtied alone): `None` if it was not promoted, else whether it was
    /// charged to the huge-page pool. Use `Shared::demote` (`promote.rs`), which moves
    /// the charge back.
    pub(crate) fn take_promoted(&self, chunk: usize) -> Option<bool> {
        let c = &self.chunks[chunk];
        let mut now = c.load(Acquire);
        while matches!(now, PROMOTED | POOLED) {
            match c.compare_exchange(now, NORMAL, AcqRel, Acquire) {
                Ok(was) => return Some(was == POOLED),
                Err(x) => now = x,
            }
        }
        None
    }

    /// Gives back a claim of a range never promoted.
    pub fn abandon(&self, chunk: usize) {
        let _ = self.chunks[chunk].compare_exchange(PROMOTING, NORMAL, AcqRel, Relaxed);
    }

    /// Claims a range for promotion; false if one is under way or done.
    pub(crate) fn begin(&self, chunk: usize) -> bool {
        self.chunks[chunk]
            .compare_exchange(NORMAL, PROMOTING, AcqRel, Relaxed)
            .is_ok()
    }

    pub(crate) fn end(&self, chunk: usize, state: u8) {
        self.chunks[chunk].store(state, Release);
    }

    /// Ranges promoted now.
    pub fn promoted(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| matches!(c.load(Relaxed), PROMOTED | POOLED))
            .count()
    }

    /// The promotable ranges holding any of `pages`.
    pub(crate) fn chunks_of(&self, pages: &Range<usize>) -> Range<usize> {
        if pages.is_empty() {
            return 0..0;
        }
        let cp = self.chunk_pages;
        pages.start / cp..((pages.end - 1) / cp + 1).min(self.chunks.len())
    }

    /// Records `Advice::Huge` (true) or `Advice::NoHuge` over `pages`.
    pub fn set_advice(&self, pages: Range<usize>, huge: bool) {
        self.advice.update(|list| {
            let mut l = Vec::clone(list);
            l.retain(|(r, _)| !(pages.start <= r.start && r.end <= pages.end));
            l.push((pages.clone(), huge));
            l
        });
    }

    pub(crate) fn advice_for(&self, page: usize) -> Option<bool> {
        self.advice.with(|list| {
            list.iter()
                .rev()
                .find(|(r, _)| r.contains(&page))
                .map(|&(_, h)| h)
        })
    }
}

/// Free 2 MiB hugetlbfs pages in the system pool now.
pub(crate) fn free_huge_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefetch::Advice;

    fn fault(thread: u32, page: u64, kind: FaultKind) -> Fault {
        Fault {
            page,
            pages: 10_000,
            offset: page as usize * 4096,
            write: false,
            kind,
            advice: Advice::Normal,
            thread,
        }
    }

    #[test]
    fn sequential_needs_two_consecutive_faults_by_one_thread() {
        let p = PromoteSequential::new();
        assert!(!p.should_promote(&fault(7, 10, FaultKind::Miss)));
        // Another thread's next page is not sequential for thread 7.
        assert!(!p.should_promote(&fault(8, 11, FaultKind::Miss)));
        assert!(p.should_promote(&fault(7, 11, FaultKind::Miss)));
        assert!(!p.should_promote(&fault(7, 13, FaultKind::Miss)));
        assert!(p.should_promote(&fault(8, 12, FaultKind::Miss)));
    }

    #[test]
    fn always_promotes_misses_only() {
        assert!(PromoteAlways.should_promote(&fault(1, 3, FaultKind::Miss)));
        assert!(!PromoteAlways.should_promote(&fault(1, 3, FaultKind::Resolved)));
    }

    #[test]
    fn ranges_are_claimed_once_and_advice_wins_by_recency() {
        let h = HugeState::new(2000, 4096, None);
        assert_eq!(h.chunk_of(511), Some(0));
        assert_eq!(
            h.chunk_of(1536),
            None,
            "a partial last range is not promotable"
        );
        assert!(h.begin(1));
        assert!(!h.begin(1), "a second promotion of one range coalesces");
        h.end(1, PROMOTED);
        assert!(h.is_promoted(1) && !h.begin(1));
        assert_eq!(h.take_promoted(1), Some(false));
        assert_eq!(h.take_promoted(1), None);
        h.end(1, POOLED);
        assert!(h.is_promoted(1) && h.is_pooled(1));
        assert_eq!(h.take_promoted(1), Some(true));
        assert!(!h.is_promoted(1) && h.begin(1));
        h.abandon(1);
        assert!(h.begin(1), "an abandoned claim can be taken again");
        assert_eq!(h.chunks_of(&(600..1100)), 1..3);
        assert_eq!(h.chunks_of(&(1500..1600)), 2..3);
        assert!(
            h.chunks_of(&(1540..1600)).is_empty(),
            "past the last whole range"
        );
        assert_eq!(h.chunks_of(&(5..5)), 0..0);
        h.set_advice(0..1024, true);
        h.set_advice(512..600, false);
        assert_eq!(h.advice_for(10), Some(true));
        assert_eq!(h.advice_for(550), Some(false));
        assert_eq!(h.advice_for(1500), None);
        assert_eq!(
            PromoteKind::from_name(" Sequential"),
            Some(PromoteKind::Sequential)
        );
    }
}
