use crate::sync::{AtomicU8, Ordering};

const KIND_MASK: u8 = 0b0011;
const BUSY: u8 = 0b0100;
const REFERENCED: u8 = 0b1000;
const WAITERS: u8 = 0b1_0000;
const PINNED: u8 = 0b10_0000;
const EVICTING: u8 = 0b100_0000;
const GUESSED: u8 = 0b1000_0000;

/// The stable states of a page of a region.
///
/// | state | in memory | matches the store | write-protected |
/// |---|---|---|---|
/// | `Empty` | no | - | - |
/// | `Clean` | yes | yes | yes (writable regions) |
/// | `Dirty` | yes | no | no |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PageState {
    /// Not resident: the next access faults as a miss.
    Empty = 0,
    /// Resident and equal to the store.
    Clean = 1,
    /// Resident and written since it was last read or written back.
    Dirty = 2,
}

impl PageState {
    fn from_bits(bits: u8) -> PageState {
        match bits & KIND_MASK {
            0 => PageState::Empty,
            1 => PageState::Clean,
            _ => PageState::Dirty,
        }
    }
}

/// A page's state as read at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Nobody is changing the page.
    Stable(PageState),
    /// A thread holds the page busy (filling, dirtying, writing back or
    /// evicting it) and will wake any thread that faults on it meanwhile.
    /// The state it had when it was locked is given.
    Busy(PageState),
}

/// Per-page state of one region: one atomic byte per page, like a page
/// table. Memory comes zeroed from the allocator (which maps large tables
/// lazily), so an untouched part of a huge region costs nothing.
///
/// A thread changes a page only while it holds the page busy:
/// [`try_lock`](PageTable::try_lock) moves a stable state to busy,
/// [`unlock`](PageTable::unlock) stores the new stable state. This is what
/// makes concurrent misses to one page issue one read: the second faulting
/// thread sees the page busy and waits for the first to install it.
pub struct PageTable {
    states: Box<[AtomicU8]>,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("pages", &self.len())
            .finish()
    }
}

impl PageTable {
    /// A table of `pages` pages, all `Empty`.
    ///
    /// # Panics
    /// If the allocation fails; see [`try_new`](PageTable::try_new).
    pub fn new(pages: usize) -> PageTable {
        Self::try_new(pages).expect("page table allocation failed")
    }

    /// A table of `pages` pages, all `Empty`, or `None` if the memory
    /// cannot be had.
    pub fn try_new(pages: usize) -> Option<PageTable> {
        if pages == 0 {
            return Some(PageTable {
                states: Box::new([]),
            });
        }
        #[cfg(loom)]
        {
            // loom's atomics are not plain bytes: build them one by one
            // (models use a handful of pages).
            Some(PageTable {
                states: (0..pages).map(|_| AtomicU8::new(0)).collect(),
            })
        }
        #[cfg(not(loom))]
        {
            Self::alloc_zeroed(pages)
        }
    }

    #[cfg(not(loom))]
    fn alloc_zeroed(pages: usize) -> Option<PageTable> {
        let layout = std::alloc::Layout::array::<AtomicU8>(pages).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        let slice = std::ptr::slice_from_raw_parts_mut(ptr.cast::<AtomicU8>(), pages);
        // SAFETY: the allocation was made by the global allocator with the
        // layout of `[AtomicU8; pages]`, and zeroed bytes are valid
        // AtomicU8 values (Empty, not busy).
        let states = unsafe { Box::from_raw(slice) };
        Some(PageTable { states })
    }

    /// Number of pages.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether the table has no pages.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The page's state now.
    #[inline]
    pub fn get(&self, page: usize) -> Observed {
        let v = self.states[page].load(Ordering::Acquire);
        let s = PageState::from_bits(v);
        if v & BUSY != 0 {
            Observed::Busy(s)
        } else {
            Observed::Stable(s)
        }
    }

    /// Marks the page busy if it is stable in state `from`. Returns whether
    /// this thread now owns the page.
    #[inline]
    pub fn try_lock(&self, page: usize, from: PageState) -> bool {
        self.lock_setting(page, from, BUSY)
    }

    /// [`try_lock`](PageTable::try_lock) for an eviction: the page is also
    /// marked as being evicted until [`unlock`](PageTable::unlock). A
    /// policy's entry for such a page is stale (the page leaves, or the
    /// evicting thread gives it back to the policy), so a policy that keeps
    /// the entry would, once the page is filled again, hold two entries for
    /// it: the old one would then evict the new page long before its turn.
    #[inline]
    pub fn try_lock_evicting(&self, page: usize, from: PageState) -> bool {
        self.lock_setting(page, from, BUSY | EVICTING)
    }

    /// Sets `bits` (BUSY and any marks of the lock) if the page is stable
    /// in state `from`. Returns whether it did.
    #[inline]
    fn lock_setting(&self, page: usize, from: PageState, bits: u8) -> bool {
        let cell = &self.states[page];
        let mut v = cell.load(Ordering::Relaxed);
        loop {
            if v & (BUSY | KIND_MASK) != from as u8 {
                return false;
            }
            match cell.compare_exchange_weak(v, v | bits, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// Whether a thread holds the page busy to evict it
    /// ([`try_lock_evicting`](PageTable::try_lock_evicting)).
    #[inline]
    pub fn is_evicting(&self, page: usize) -> bool {
        self.states[page].load(Ordering::Acquire) & EVICTING != 0
    }

    /// Stores the new stable state of a page this thread holds busy.
    /// Returns whether a thread registered as a waiter meanwhile
    /// ([`add_waiter`](PageTable::add_waiter)): the caller must then wake
    /// the page's faulting threads.
    #[inline]
    #[must_use = "waiters registered on the page must be woken"]
    pub fn unlock(&self, page: usize, to: PageState) -> bool {
        let cell = &self.states[page];
        let mut v = cell.load(Ordering::Relaxed);
        loop {
            debug_assert!(v & BUSY != 0, "unlock of a page that is not busy");
            // A guess outlives a failed write-back (Dirty again), no more.
            let keep = if to == PageState::Dirty {
                REFERENCED | PINNED | GUESSED
            } else {
                REFERENCED | PINNED
            };
            let new = (v & keep) | to as u8;
            match cell.compare_exchange_weak(v, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return v & WAITERS != 0,
                Err(now) => v = now,
            }
        }
    }

    /// Registers a faulting thread's wait on a busy page: the owner will
    /// learn of it when it unlocks, and wake it. Returns false if the page
    /// is not busy (any more): the caller must look at it again.
    ///
    /// This is how misses to one page coalesce: the second fault costs a
    /// flag, not a read.
    #[inline]
    pub fn add_waiter(&self, page: usize) -> bool {
        let cell = &self.states[page];
        let mut v = cell.load(Ordering::Relaxed);
        loop {
            if v & BUSY == 0 {
                return false;
            }
            if v & WAITERS != 0 {
                return true;
            }
            match cell.compare_exchange_weak(v, v | WAITERS, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// Records a sign of use (a fault on the page), for CLOCK-like policies.
    #[inline]
    pub fn mark_referenced(&self, page: usize) {
        let cell = &self.states[page];
        if cell.load(Ordering::Relaxed) & REFERENCED == 0 {
            cell.fetch_or(REFERENCED, Ordering::Relaxed);
        }
    }

    /// Clears the page's referenced bit and returns whether it was set.
    #[inline]
    pub fn take_referenced(&self, page: usize) -> bool {
        self.states[page].fetch_and(!REFERENCED, Ordering::Relaxed) & REFERENCED != 0
    }

    /// Marks a page this thread holds busy as dirty on a guess (a page
    /// filled dirty because a write was expected, which may never come):
    /// the mark lasts while the page stays `Dirty`, across unlocks, and
    /// goes when it becomes `Clean` or `Empty`.
    #[inline]
    pub fn mark_guessed(&self, page: usize) {
        debug_assert!(self.states[page].load(Ordering::Relaxed) & BUSY != 0);
        self.states[page].fetch_or(GUESSED, Ordering::Relaxed);
    }

    /// Clears the page's [`mark_guessed`](PageTable::mark_guessed) mark
    /// (it was written after all).
    #[inline]
    pub fn clear_guessed(&self, page: usize) {
        self.states[page].fetch_and(!GUESSED, Ordering::Relaxed);
    }

    /// Whether the page is marked [dirty on a guess](PageTable::mark_guessed).
    #[inline]
    pub fn is_guessed(&self, page: usize) -> bool {
        self.states[page].load(Ordering::Acquire) & GUESSED != 0
    }

    /// Pins the page: eviction leaves it alone. Returns whether it was not
    /// pinned before.
    #[inline]
    pub fn pin(&self, page: usize) -> bool {
        self.states[page].fetch_or(PINNED, Ordering::AcqRel) & PINNED == 0
    }

    /// Unpins the page. Returns whether it was pinned.
    #[inline]
    pub fn unpin(&self, page: usize) -> bool {
        self.states[page].fetch_and(!PINNED, Ordering::AcqRel) & PINNED != 0
    }

    /// Whether the page is pinned.
    #[inline]
    pub fn is_pinned(&self, page: usize) -> bool {
        self.states[page].load(Ordering::Acquire) & PINNED != 0
    }

    /// Takes a page this thread holds busy out of service for good: it
    /// becomes `Empty`, unpinned and busy forever, so that no thread fills,
    /// evicts or waits on it again (its memory was unmapped).
    #[inline]
    pub fn retire(&self, page: usize) {
        debug_assert!(self.states[page].load(Ordering::Relaxed) & BUSY != 0);
        self.states[page].store(BUSY | PageState::Empty as u8, Ordering::Release);
    }

    /// Counts the resident pages (`Clean` or `Dirty`, busy or not) in one
    /// pass over the table.
    pub fn count_resident(&self) -> usize {
        self.states
            .iter()
            .filter(|c| {
                matches!(
                    PageState::from_bits(c.load(Ordering::Relaxed)),
                    PageState::Clean | PageState::Dirty
                )
            })
            .count()
    }

    /// Counts the pinned pages.
    pub fn count_pinned(&self) -> usize {
        self.states
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) & PINNED != 0)
            .count()
    }

    /// Counts the pages whose state, busy or not, is `state`.
    pub fn count(&self, state: PageState) -> usize {
        self.states
            .iter()
            .filter(|c| PageState::from_bits(c.load(Ordering::Relaxed)) == state)
            .count()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_eviction_lock_is_marked_until_unlock() {
        let t = PageTable::new(2);
        assert!(t.try_lock(0, PageState::Empty));
        assert!(!t.unlock(0, PageState::Dirty));
        t.mark_referenced(0);
        assert!(
            !t.try_lock_evicting(0, PageState::Clean),
            "the page is dirty"
        );
        assert!(t.try_lock_evicting(0, PageState::Dirty));
        assert!(t.is_evicting(0));
        assert_eq!(t.get(0), Observed::Busy(PageState::Dirty));
        assert!(!t.try_lock(0, PageState::Dirty), "busy");
        assert!(!t.is_evicting(1));
        assert!(!t.unlock(0, PageState::Empty));
        assert!(!t.is_evicting(0), "unlock ends the eviction");
        assert!(t.take_referenced(0), "and keeps the referenced bit");
        assert_eq!(t.get(0), Observed::Stable(PageState::Empty));
        // A plain lock is not an eviction.
        assert!(t.try_lock(1, PageState::Empty));
        assert!(!t.is_evicting(1));
    }

    #[test]
    fn lock_unlock_cycle() {
        let t = PageTable::new(4);
        assert_eq!(t.get(1), Observed::Stable(PageState::Empty));
        assert!(!t.try_lock(1, PageState::Clean));
        assert!(t.try_lock(1, PageState::Empty));
        assert_eq!(t.get(1), Observed::Busy(PageState::Empty));
        assert!(
            !t.try_lock(1, PageState::Empty),
            "busy page cannot be locked twice"
        );
        assert!(!t.unlock(1, PageState::Clean), "nobody waited");
        assert!(!t.add_waiter(1), "a stable page takes no waiter");
        assert_eq!(t.get(1), Observed::Stable(PageState::Clean));
        assert_eq!(t.count(PageState::Clean), 1);
        assert_eq!(t.count_resident(), 1);
        assert_eq!(t.count(PageState::Empty), 3);
    }

    #[test]
    fn a_guess_lasts_while_the_page_stays_dirty() {
        let t = PageTable::new(1);
        assert!(t.try_lock(0, PageState::Empty));
        t.mark_guessed(0);
        let _ = t.unlock(0, PageState::Dirty);
        assert!(t.is_guessed(0));
        assert_eq!(t.get(0), Observed::Stable(PageState::Dirty));
        // A failed write-back: Dirty again, still a guess.
        assert!(t.try_lock(0, PageState::Dirty));
        let _ = t.unlock(0, PageState::Dirty);
        assert!(t.is_guessed(0));
        // Written back: clean, a guess no more.
        assert!(t.try_lock(0, PageState::Dirty));
        let _ = t.unlock(0, PageState::Clean);
        assert!(!t.is_guessed(0));
        assert!(t.try_lock(0, PageState::Clean));
        let _ = t.unlock(0, PageState::Dirty);
        assert!(!t.is_guessed(0));
        assert!(t.try_lock(0, PageState::Dirty));
        t.mark_guessed(0);
        t.clear_guessed(0);
        let _ = t.unlock(0, PageState::Dirty);
        assert!(!t.is_guessed(0));
    }

    #[test]
    fn referenced_bit_survives_transitions() {
        let t = PageTable::new(1);
        t.mark_referenced(0);
        assert!(t.try_lock(0, PageState::Empty));
        assert!(t.add_waiter(0));
        assert!(t.add_waiter(0));
        assert!(t.unlock(0, PageState::Dirty), "the waiter is reported");
        assert_eq!(t.get(0), Observed::Stable(PageState::Dirty));
        assert!(t.try_lock(0, PageState::Dirty));
        assert!(!t.unlock(0, PageState::Dirty), "waiters are reported once");
        assert!(t.take_referenced(0));
        assert!(!t.take_referenced(0));
    }

    #[test]
    fn pin_survives_transitions_and_retire_ends_service() {
        let t = PageTable::new(2);
        assert!(t.pin(0));
        assert!(!t.pin(0), "already pinned");
        assert!(t.try_lock(0, PageState::Empty));
        assert!(!t.unlock(0, PageState::Clean));
        assert!(t.is_pinned(0));
        assert_eq!(t.count_pinned(), 1);
        assert!(t.unpin(0));
        assert!(!t.is_pinned(0));
        assert!(t.try_lock(1, PageState::Empty));
        t.retire(1);
        assert_eq!(t.get(1), Observed::Busy(PageState::Empty));
        assert!(
            !t.try_lock(1, PageState::Empty),
            "a retired page is never locked again"
        );
    }

    #[test]
    fn concurrent_lockers_exclude_each_other() {
        let t = std::sync::Arc::new(PageTable::new(1));
        let owners = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (t, owners) = (t.clone(), owners.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        if t.try_lock(0, PageState::Empty) {
                            assert_eq!(owners.fetch_add(1, Ordering::SeqCst), 0);
                            owners.fetch_sub(1, Ordering::SeqCst);
                            let _ = t.unlock(0, PageState::Empty);
                        } else {
                            let _ = t.add_waiter(0);
                        }
                        t.mark_referenced(0);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(t.get(0), Observed::Stable(PageState::Empty));
    }

    proptest! {
        // The table behaves like a model map page -> (state, busy).
        #[test]
        fn matches_model(ops in proptest::collection::vec((0usize..8, 0u8..3, any::<bool>()), 1..200)) {
            let t = PageTable::new(8);
            let mut model = [(PageState::Empty, false); 8];
            for (page, s, lock) in ops {
                let s = PageState::from_bits(s);
                if lock {
                    let expect = !model[page].1 && model[page].0 == s;
                    prop_assert_eq!(t.try_lock(page, s), expect);
                    if expect { model[page].1 = true; }
                } else if model[page].1 {
                    let _ = t.unlock(page, s);
                    model[page] = (s, false);
                }
                let want = if model[page].1 { Observed::Busy(model[page].0) } else { Observed::Stable(model[page].0) };
                prop_assert_eq!(t.get(page), want);
            }
        }
    }
}
