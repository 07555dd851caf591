//! Regions: one mapped range, its page table and its store; and the
//! read-mostly table that finds a region by address or id without a lock.

use std::ops::Range;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::rcu::RcuCell;
use umio_backends::{Store, StoreError};
use umio_cache::{PageKey, PageTable};

use crate::huge::HugeState;
use crate::predict::WritePredictor;
use crate::prefetch::{Advice, Prefetcher};
use crate::stats::RegionCounters;
use crate::store_slots::StoreSlots;

/// Set in `Region::users` once unmapping has begun.
const CLOSING: usize = 1 << (usize::BITS - 1);

/// A mapped region.
///
/// The `pub(crate)` fields are fixed by `Region::create` (`create.rs`) and
/// never change; the state that does change is behind its own type's
/// methods (`PageTable`, counters, `StoreSlots`, `HugeState`) or in the
/// private fields below, changed only by the methods of this file.
pub(crate) struct Region {
    pub id: u64,
    /// First address (aligned to the page size where that is a power of two).
    pub base: usize,
    /// Bytes the user mapped.
    pub len: usize,
    pub page_size: usize,
    /// Store offset of `base`.
    pub offset: u64,
    pub store: Arc<dyn Store>,
    pub writable: bool,
    pub pages: PageTable,
    pub prefetcher: Arc<dyn Prefetcher>,
    /// Threads working on the region now, plus the CLOSING bit.
    users: AtomicUsize,
    /// Partial unmaps and drops locking a range of the region's pages now
    /// ([`Region::taking`]).
    takers: AtomicUsize,
    /// Pages in state Dirty (flush skips clean regions without a scan).
    pub dirty: AtomicUsize,
    /// Access advice by page range; the last matching entry wins.
    /// Read by the in-thread service in a signal handler: an [`RcuCell`].
    advice: RcuCell<Vec<(Range<u64>, Advice)>>,
    /// The first write-back failure of background eviction, reported by the
    /// next flush.
    deferred_error: Mutex<Option<StoreError>>,
    /// The errno of the store's last write-back if it failed, 0 once one
    /// succeeds: while it is set, new writes to clean pages fail (see
    /// `Shared::may_dirty`) and eviction leaves dirty pages alone.
    write_errno: AtomicI32,
    /// When that failure was seen (`crate::shared::now_ms`).
    write_failed_at: AtomicU64,
    /// Page ranges unmapped by `unmap_range`; their pages are retired.
    holes: Mutex<Vec<Range<usize>>>,
    /// Serializes `unmap_range` calls on this region.
    unmap_lock: Mutex<()>,
    pub stats: RegionCounters,
    /// Backed by hugetlbfs 2 MiB pages.
    pub hugetlb: bool,
    /// Cached in the runtime's huge-page pool, not the regular one.
    pub huge_pool: bool,
    /// Promotion state, for regions laid out for transparent huge pages
    /// (2 MiB-aligned, page size dividing 2 MiB).
    pub huge: Option<HugeState>,
    /// Fillers in the store on the fault path, bounded, and the misses
    /// queued for them.
    pub store_slots: StoreSlots,
    /// Served in the faulting thread (`FaultService::InThread`: registered
    /// with the runtime's in-thread userfaultfd), else by the fillers.
    pub in_thread: bool,
    /// Whether read misses are followed by writes (`predict.rs`).
    pub writes: WritePredictor,
    /// Whether the region may fill read misses dirty on that evidence:
    /// writable, and its store writes what it stands for, not a private
    /// copy (`Store::is_private_copy`: a `MAP_PRIVATE` view, whose copy
    /// of an unchanged page would be kept for good).
    pub may_predict_writes: bool,
}

/// Proof that a thread is working on a region; unmapping waits for it.
pub(crate) struct RegionGuard<'a> {
    region: &'a Region,
}

/// A partial unmap or a drop under way on a region: [`Region::taking`].
pub(crate) struct TakingGuard<'a> {
    region: &'a Region,
}

impl Drop for TakingGuard<'_> {
    fn drop(&mut self) {
        self.region.takers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for RegionGuard<'_> {
    fn drop(&mut self) {
        self.region.users.fetch_sub(1, Ordering::Release);
    }
}

/// A region entered, held by a caller that keeps the entry beyond a
/// borrow ([`Region::enter_owned`]): a filler's misses set aside to be
/// filled with the others read at once (`misses.rs`).
pub(crate) struct EnteredRegion(Arc<Region>);

impl std::ops::Deref for EnteredRegion {
    type Target = Arc<Region>;
    fn deref(&self) -> &Arc<Region> {
        &self.0
    }
}

impl Drop for EnteredRegion {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::Release);
    }
}

impl Region {
    /// The region, with no page resident, in the regular pool and without
    /// huge pages (see [`with_huge`](Region::with_huge)); `None` if its page
    /// table cannot be allocated.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        base: usize,
        len: usize,
        page_size: usize,
        offset: u64,
        store: Arc<dyn Store>,
        writable: bool,
        prefetcher: Arc<dyn Prefetcher>,
    ) -> Option<Region> {
        let npages = len.div_ceil(page_size);
        let may_predict_writes = writable && !store.is_private_copy();
        Some(Region {
            id,
            base,
            len,
            page_size,
            offset,
            store,
            writable,
            pages: PageTable::try_new(npages)?,
            prefetcher,
            users: AtomicUsize::new(0),
            takers: AtomicUsize::new(0),
            dirty: AtomicUsize::new(0),
            advice: RcuCell::new(Vec::new()),
            deferred_error: Mutex::new(None),
            write_errno: AtomicI32::new(0),
            write_failed_at: AtomicU64::new(0),
            holes: Mutex::new(Vec::new()),
            unmap_lock: Mutex::new(()),
            stats: RegionCounters::default(),
            hugetlb: false,
            huge_pool: false,
            huge: None,
            store_slots: StoreSlots::default(),
            in_thread: false,
            writes: WritePredictor::default(),
            may_predict_writes,
        })
    }

    /// The region served in the faulting thread (`in_thread`) or by the
    /// fillers.
    pub fn with_in_thread(mut self, in_thread: bool) -> Region {
        self.in_thread = in_thread;
        self
    }

    /// The region backed by hugetlbfs pages or not, cached in the huge-page
    /// pool or not, with promotion state or not; before it is shared.
    pub fn with_huge(self, hugetlb: bool, huge_pool: bool, huge: Option<HugeState>) -> Region {
        Region {
            hugetlb,
            huge_pool,
            huge,
            ..self
        }
    }

    /// Keeps a write-back failure of background eviction for the next
    /// flush (the first one only).
    pub fn defer_error(&self, e: StoreError) {
        self.deferred_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    }

    /// The failure kept by [`defer_error`](Region::defer_error), if any,
    /// taken.
    pub fn take_deferred_error(&self) -> Option<StoreError> {
        self.deferred_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Records the outcome of a write to the store: `Some(errno)` if it
    /// failed. Returns true when this starts a run of failures (the one
    /// to log).
    pub fn note_write(&self, failed: Option<i32>, now_ms: u64) -> bool {
        match failed {
            Some(e) => {
                self.write_failed_at.store(now_ms, Ordering::Relaxed);
                self.write_errno.swap(e, Ordering::AcqRel) == 0
            }
            None => {
                if self.write_errno.load(Ordering::Relaxed) != 0 {
                    self.write_errno.store(0, Ordering::Release);
                }
                false
            }
        }
    }

    /// The errno of the store's last write-back, if it failed.
    #[inline]
    pub fn write_failure(&self) -> Option<i32> {
        match self.write_errno.load(Ordering::Acquire) {
            0 => None,
            e => Some(e),
        }
    }

    /// When the last failed write-back was seen, if the last one failed.
    pub fn write_failed_at(&self) -> Option<u64> {
        self.write_failure()?;
        Some(self.write_failed_at.load(Ordering::Relaxed))
    }

    /// Held while a page range of the region is taken out
    /// (`Shared::take_pages`): one at a time.
    pub fn serialize_unmaps(&self) -> MutexGuard<'_, ()> {
        self.unmap_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    pub fn page_of(&self, addr: usize) -> usize {
        (addr - self.base) / self.page_size
    }

    #[inline]
    pub fn page_addr(&self, page: usize) -> usize {
        self.base + page * self.page_size
    }

    #[inline]
    pub fn store_offset(&self, page: usize) -> u64 {
        self.offset + (page * self.page_size) as u64
    }

    /// Bytes of pages `[first, first+count)` that lie within the mapped
    /// length (the rest of the last page is past it).
    #[inline]
    pub fn valid_bytes(&self, first: usize, count: usize) -> usize {
        let start = first * self.page_size;
        ((first + count) * self.page_size).min(self.len) - start
    }

    #[inline]
    pub fn key(&self, page: usize) -> PageKey {
        PageKey {
            region: self.id,
            index: page as u64,
        }
    }

    /// Starts work on the region, unless it is being unmapped.
    #[inline]
    pub fn enter(&self) -> Option<RegionGuard<'_>> {
        let prev = self.users.fetch_add(1, Ordering::Acquire);
        if prev & CLOSING != 0 {
            self.users.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(RegionGuard { region: self })
    }

    /// [`enter`](Region::enter), the entry owned.
    pub(crate) fn enter_owned(self: &Arc<Region>) -> Option<EnteredRegion> {
        let guard = self.enter()?;
        std::mem::forget(guard);
        Some(EnteredRegion(self.clone()))
    }

    /// Whether any page of `pages` was unmapped by `unmap_range`.
    pub fn intersects_hole(&self, pages: &Range<usize>) -> bool {
        let holes = self.holes.lock().unwrap_or_else(|e| e.into_inner());
        holes
            .iter()
            .any(|h| h.start < pages.end && pages.start < h.end)
    }

    /// Records an unmapped page range.
    pub fn add_hole(&self, pages: Range<usize>) {
        self.holes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pages);
    }

    /// Forgets the hole `pages` recorded by [`add_hole`](Region::add_hole)
    /// (its `munmap` failed: the pages are still mapped).
    pub fn remove_hole(&self, pages: &Range<usize>) {
        let mut holes = self.holes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = holes.iter().rposition(|h| h == pages) {
            holes.remove(i);
        }
    }

    /// Page ranges still mapped, in order.
    pub fn mapped_ranges(&self) -> Vec<Range<usize>> {
        let mut holes = self.holes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        holes.sort_by_key(|h| h.start);
        let mut out = Vec::new();
        let mut at = 0;
        for h in holes {
            if h.start > at {
                out.push(at..h.start);
            }
            at = at.max(h.end);
        }
        if at < self.pages.len() {
            out.push(at..self.pages.len());
        }
        out
    }

    /// Whether unmapping has begun.
    #[inline]
    pub fn is_closing(&self) -> bool {
        self.users.load(Ordering::Relaxed) & CLOSING != 0
    }

    /// Marks a partial unmap or a drop locking pages of the region, until
    /// the guard is dropped. It locks its range page by page, waiting for
    /// busy ones; a miss that holds one of them busy while it waits for
    /// cache space that only those pages could give would wait for it for
    /// ever. So a miss that finds no space to take while this is set gives
    /// its page back and faults again ([`Shared::reserve`]).
    ///
    /// [`Shared::reserve`]: crate::shared::Shared
    pub fn taking(&self) -> TakingGuard<'_> {
        self.takers.fetch_add(1, Ordering::AcqRel);
        TakingGuard { region: self }
    }

    /// Whether a partial unmap or a drop is locking pages of the region.
    pub fn is_taking(&self) -> bool {
        self.takers.load(Ordering::Acquire) != 0
    }

    /// Refuses new work and waits until the work under way is done.
    pub fn close(&self) {
        self.users.fetch_or(CLOSING, Ordering::AcqRel);
        let mut spins = 0u32;
        while self.users.load(Ordering::Acquire) & !CLOSING != 0 {
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
    }

    /// Advice in force for a page.
    pub fn advice_for(&self, page: u64) -> Advice {
        self.advice.with(|list| {
            list.iter()
                .rev()
                .find(|(r, _)| r.contains(&page))
                .map_or(Advice::Normal, |&(_, a)| a)
        })
    }

    /// Records access advice for a page range.
    pub fn set_advice(&self, pages: Range<u64>, advice: Advice) {
        self.advice.update(|list| {
            // Entries wholly covered by the new one no longer matter.
            let mut v: Vec<_> = list
                .iter()
                .filter(|(r, _)| !(pages.start <= r.start && r.end <= pages.end))
                .cloned()
                .collect();
            if advice != Advice::Normal {
                v.push((pages.clone(), advice));
            }
            if v.len() > 256 {
                v.remove(0);
            }
            v
        });
    }
}

/// The regions of a runtime, by address and by id, replaced whole on
/// every map, unmap and partial unmap so that the fault path reads it
/// without a lock.
///
/// By address the table holds the mapped parts of regions, sorted by
/// start. A region with holes (pages taken out by a partial unmap, or
/// replaced by a fixed mapping) has one entry per mapped part, and a newer
/// region may lie in an older one's hole. The parts are disjoint when the
/// table is published, but lookups do not rely on it: an address that two
/// entries cover belongs to the newer region (the older one's entry is
/// stale: memory that was unmapped before the newer region could be mapped
/// there).
#[derive(Default)]
pub(crate) struct RegionTable {
    by_addr: Vec<(Range<usize>, Arc<Region>)>,
    /// `reach[i]`: the largest end of `by_addr[..=i]`, so that a lookup
    /// knows where to stop looking back for an entry that covers an
    /// address.
    reach: Vec<usize>,
    /// Ids increase with every map, so insertion order is id order.
    by_id: Vec<Arc<Region>>,
}

/// Regions by id: the runtime's table, or, in a signal handler, the
/// in-thread service's (`in_thread.rs`), which is safe to read there.
pub(crate) trait RegionLookup {
    fn region(&self, id: u64) -> Option<&Arc<Region>>;
}

impl RegionLookup for RegionTable {
    fn region(&self, id: u64) -> Option<&Arc<Region>> {
        self.get(id)
    }
}

impl RegionTable {
    /// The region mapped at `addr`: of the entries that cover it, the
    /// newest region's (see [`RegionTable`]).
    #[inline]
    pub fn find(&self, addr: usize) -> Option<&Arc<Region>> {
        let i = self.by_addr.partition_point(|(r, _)| r.start <= addr);
        newest_covering(i, addr, |k| {
            let (r, region) = &self.by_addr[k];
            (r.end, self.reach[k], region.id)
        })
        .map(|k| &self.by_addr[k].1)
    }

    #[inline]
    pub fn get(&self, id: u64) -> Option<&Arc<Region>> {
        let i = self.by_id.binary_search_by_key(&id, |r| r.id).ok()?;
        Some(&self.by_id[i])
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn all(&self) -> &[Arc<Region>] {
        &self.by_id
    }

    /// The mapped parts of regions that overlap `range`, in address order.
    pub fn overlapping(&self, range: &Range<usize>) -> Vec<(Range<usize>, Arc<Region>)> {
        self.by_addr
            .iter()
            .filter(|(r, _)| r.start < range.end && range.start < r.end)
            .cloned()
            .collect()
    }

    pub fn with(&self, region: Arc<Region>) -> RegionTable {
        let mut by_id = self.by_id.clone();
        by_id.push(region.clone());
        RegionTable::new(Self::placed(&self.by_addr, &region), by_id)
    }

    fn new(by_addr: Vec<(Range<usize>, Arc<Region>)>, by_id: Vec<Arc<Region>>) -> RegionTable {
        let reach = by_addr
            .iter()
            .scan(0, |far, (r, _)| {
                *far = r.end.max(*far);
                Some(*far)
            })
            .collect();
        RegionTable {
            by_addr,
            reach,
            by_id,
        }
    }

    pub fn without(&self, id: u64) -> RegionTable {
        RegionTable::new(
            self.by_addr
                .iter()
                .filter(|(_, r)| r.id != id)
                .cloned()
                .collect(),
            self.by_id.iter().filter(|r| r.id != id).cloned().collect(),
        )
    }

    /// The table with `region`'s address entries made anew from its
    /// mapped ranges (after it gained a hole).
    pub fn reshaped(&self, region: &Arc<Region>) -> RegionTable {
        let others: Vec<_> = self
            .by_addr
            .iter()
            .filter(|(_, r)| r.id != region.id)
            .cloned()
            .collect();
        let present = self.get(region.id).is_some();
        let by_addr = if present {
            Self::placed(&others, region)
        } else {
            others
        };
        RegionTable::new(by_addr, self.by_id.clone())
    }

    /// `entries` with the mapped ranges of `region` added, sorted.
    fn placed(
        entries: &[(Range<usize>, Arc<Region>)],
        region: &Arc<Region>,
    ) -> Vec<(Range<usize>, Arc<Region>)> {
        let mut by_addr = entries.to_vec();
        for pages in region.mapped_ranges() {
            let range = region.page_addr(pages.start)..region.page_addr(pages.end);
            let i = by_addr.partition_point(|(r, _)| r.start < range.start);
            by_addr.insert(i, (range, region.clone()));
        }
        by_addr
    }
}

/// Of the entries `0..i` of an address table sorted by start whose starts
/// are at most `addr`, the one that covers `addr` and belongs to the newest
/// region (the highest id: ids grow with every map), if any. `entry(k)` is
/// entry `k`'s end, its reach (the largest end of entries `0..=k`) and its
/// region's id. Looks back only while an entry's reach passes `addr`: one
/// step when the entries are disjoint. The in-thread service's table
/// (`in_thread.rs`) looks up the same way.
#[inline]
pub(crate) fn newest_covering(
    i: usize,
    addr: usize,
    entry: impl Fn(usize) -> (usize, usize, u64),
) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for k in (0..i).rev() {
        let (end, reach, id) = entry(k);
        if reach <= addr {
            break;
        }
        if addr < end && best.is_none_or(|(_, b)| id > b) {
            best = Some((k, id));
        }
    }
    best.map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::newest_covering;

    /// Entries (start, end, id) sorted by start; the lookup as the tables
    /// make it.
    fn lookup(entries: &[(usize, usize, u64)], addr: usize) -> Option<u64> {
        let reach: Vec<usize> = entries
            .iter()
            .scan(0, |far, e| {
                *far = e.1.max(*far);
                Some(*far)
            })
            .collect();
        let i = entries.partition_point(|e| e.0 <= addr);
        newest_covering(i, addr, |k| (entries[k].1, reach[k], entries[k].2)).map(|k| entries[k].2)
    }

    #[test]
    fn disjoint_entries() {
        let t = [(0, 10, 1), (10, 20, 2), (30, 40, 3)];
        assert_eq!(lookup(&t, 0), Some(1));
        assert_eq!(lookup(&t, 19), Some(2));
        assert_eq!(lookup(&t, 25), None);
        assert_eq!(lookup(&t, 40), None);
    }

    /// A stale entry of an older region (1) covering a newer one (2) in
    /// its hole: past the newer one, the older is found; inside it, the
    /// newer wins.
    #[test]
    fn overlapping_entries_newest_wins() {
        let t = [(0, 64, 1), (16, 32, 2), (70, 80, 3)];
        assert_eq!(lookup(&t, 40), Some(1));
        assert_eq!(lookup(&t, 20), Some(2));
        assert_eq!(lookup(&t, 8), Some(1));
        assert_eq!(lookup(&t, 75), Some(3));
        assert_eq!(lookup(&t, 66), None);
        // The newer region first in the list (a lower start).
        let t = [(10, 20, 5), (12, 40, 4)];
        assert_eq!(lookup(&t, 15), Some(5));
        assert_eq!(lookup(&t, 30), Some(4));
    }
}
