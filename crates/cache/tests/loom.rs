//! loom models of the page state machine ([`PageTable`]) and the frame
//! budget ([`FrameBudget`], [`FrameCredit`]).
//!
//! Built with `--cfg loom`, umio-cache's atomics are loom's (src/sync.rs), so
//! these models check the code the runtime runs, under every interleaving
//! (and every reordering the memory orderings allow) up to the preemption
//! bound:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p umio-cache --release --test loom
//! ```
//!
//! The page contents are a loom `UnsafeCell`: loom reports any access to it
//! that the page's BUSY bit does not order after the previous owner's (a
//! data race), so the models also check that `try_lock` acquires what
//! `unlock` released.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use umio_cache::{FrameBudget, FrameCredit, Observed, PageState, PageTable};

/// Runs `f` under loom, bounding preemptions at 3 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// A page: its state byte and its bytes.
struct Page {
    table: PageTable,
    bytes: UnsafeCell<u32>,
}

impl Page {
    fn new() -> Arc<Page> {
        Arc::new(Page {
            table: PageTable::new(1),
            bytes: UnsafeCell::new(0),
        })
    }
}

// SAFETY: `bytes` is only touched by the thread that holds the page busy, or
// read by one that saw it stable; loom checks exactly that.
unsafe impl Sync for Page {}

/// Two fillers race to lock one empty page: exactly one wins, installs it,
/// and the page ends Clean with the winner's bytes.
#[test]
fn one_of_two_lockers_wins() {
    model(|| {
        let p = Page::new();
        let hs: Vec<_> = (1..=2u32)
            .map(|id| {
                let p = p.clone();
                thread::spawn(move || {
                    if p.table.try_lock(0, PageState::Empty) {
                        // SAFETY: this thread holds the page busy.
                        p.bytes.with_mut(|b| unsafe { *b = id });
                        assert!(!p.table.unlock(0, PageState::Clean), "nobody waited");
                        Some(id)
                    } else {
                        None
                    }
                })
            })
            .collect();
        let winners: Vec<u32> = hs.into_iter().filter_map(|h| h.join().unwrap()).collect();
        assert_eq!(winners.len(), 1, "exactly one locker wins: {winners:?}");
        assert_eq!(p.table.get(0), Observed::Stable(PageState::Clean));
        // SAFETY: both threads are joined.
        assert_eq!(p.bytes.with(|b| unsafe { *b }), winners[0]);
    });
}

/// Threads that lock, change and unlock a page over and over exclude each
/// other (loom would report the cell's accesses as a race otherwise), and
/// no lock is lost: the count equals the successful locks.
#[test]
fn lock_cycles_exclude_each_other() {
    model(|| {
        let p = Page::new();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let p = p.clone();
                thread::spawn(move || {
                    let mut won = 0;
                    for _ in 0..2 {
                        if p.table.try_lock(0, PageState::Empty) {
                            // SAFETY: this thread holds the page busy.
                            p.bytes.with_mut(|b| unsafe { *b += 1 });
                            let _ = p.table.unlock(0, PageState::Empty);
                            won += 1;
                        }
                    }
                    won
                })
            })
            .collect();
        let won: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(won >= 1);
        // SAFETY: both threads are joined.
        assert_eq!(p.bytes.with(|b| unsafe { *b }), won);
        assert_eq!(p.table.get(0), Observed::Stable(PageState::Empty));
    });
}

/// What a faulting thread's filler did with a page another thread held.
#[derive(Debug, PartialEq)]
enum Fault {
    /// Registered as a waiter: the owner's unlock must report it.
    Waited,
    /// Found the page stable (installed): it wakes the thread itself, and
    /// must see the owner's bytes.
    SawStable(u32),
}

/// The filler side of `handle_fault` on a page that may be busy: register
/// as a waiter, or find the page stable and read it.
fn fault(p: &Page) -> Fault {
    loop {
        match p.table.get(0) {
            Observed::Busy(_) => {
                if p.table.add_waiter(0) {
                    return Fault::Waited;
                }
                // Unlocked meanwhile: look again.
            }
            Observed::Stable(s) => {
                assert_ne!(s, PageState::Empty, "a fill ends resident");
                // SAFETY: the page is stable: nobody writes it.
                return Fault::SawStable(p.bytes.with(|b| unsafe { *b }));
            }
        }
    }
}

/// A fault on a page being filled races the filler's unlock. The waiter is
/// never lost: either the unlock reports WAITERS (the filler wakes the
/// page), or the faulting side finds the page stable, with the filled
/// bytes (and wakes the thread itself).
#[test]
fn unlock_never_loses_a_waiter() {
    model(|| {
        let p = Page::new();
        assert!(p.table.try_lock(0, PageState::Empty));
        let owner = {
            let p = p.clone();
            thread::spawn(move || {
                // SAFETY: this thread holds the page busy.
                p.bytes.with_mut(|b| unsafe { *b = 42 });
                p.table.unlock(0, PageState::Clean)
            })
        };
        let faulter = {
            let p = p.clone();
            thread::spawn(move || fault(&p))
        };
        let woke = owner.join().unwrap();
        let f = faulter.join().unwrap();
        match f {
            Fault::Waited => assert!(woke, "a registered waiter was not reported"),
            Fault::SawStable(v) => assert_eq!(v, 42, "stable page without its bytes"),
        }
        // Waiters are reported once: the next owner is not told again.
        assert!(p.table.try_lock(0, PageState::Clean));
        assert!(!p.table.unlock(0, PageState::Clean));
    });
}

/// Two faults on one page race its unlock: every registered waiter is
/// reported to the unlock.
#[test]
fn unlock_never_loses_two_waiters() {
    model(|| {
        let p = Page::new();
        assert!(p.table.try_lock(0, PageState::Empty));
        let owner = {
            let p = p.clone();
            thread::spawn(move || {
                // SAFETY: this thread holds the page busy.
                p.bytes.with_mut(|b| unsafe { *b = 7 });
                p.table.unlock(0, PageState::Clean)
            })
        };
        let faulters: Vec<_> = (0..2)
            .map(|_| {
                let p = p.clone();
                thread::spawn(move || fault(&p))
            })
            .collect();
        let woke = owner.join().unwrap();
        for f in faulters {
            match f.join().unwrap() {
                Fault::Waited => assert!(woke, "a registered waiter was not reported"),
                Fault::SawStable(v) => assert_eq!(v, 7),
            }
        }
    });
}

/// A page locked twice in a row (a fill, then a first write): a waiter that
/// registered during either hold is reported by that hold's unlock or a
/// later one, never dropped between them.
#[test]
fn waiter_reported_across_owners() {
    model(|| {
        let p = Page::new();
        assert!(p.table.try_lock(0, PageState::Empty));
        let owner = {
            let p = p.clone();
            thread::spawn(move || {
                // SAFETY: this thread holds the page busy.
                p.bytes.with_mut(|b| unsafe { *b = 1 });
                let mut woke = p.table.unlock(0, PageState::Clean);
                // A first write: un-protect the page, unlock it Dirty (the
                // bytes are then the application's, not the owner's).
                if p.table.try_lock(0, PageState::Clean) {
                    woke |= p.table.unlock(0, PageState::Dirty);
                }
                woke
            })
        };
        let faulter = {
            let p = p.clone();
            thread::spawn(move || fault(&p))
        };
        let woke = owner.join().unwrap();
        match faulter.join().unwrap() {
            Fault::Waited => assert!(woke, "a registered waiter was not reported"),
            Fault::SawStable(v) => assert_eq!(v, 1),
        }
        // Whatever happened, no WAITERS bit is left behind.
        assert!(p.table.try_lock(0, PageState::Dirty));
        assert!(!p.table.unlock(0, PageState::Dirty));
    });
}

/// `pin` races an evictor (lock Clean; if pinned put it back, else evict to
/// Empty) and a coalesced fault marking the page referenced. No bit is lost
/// to another's compare-and-swap: the page ends pinned and referenced, and
/// an evictor that evicted it had locked it before it was pinned.
#[test]
fn pin_races_lock() {
    model(|| {
        let t = Arc::new(PageTable::new(1));
        assert!(t.try_lock(0, PageState::Empty));
        assert!(!t.unlock(0, PageState::Clean));
        let evictor = {
            let t = t.clone();
            thread::spawn(move || {
                if !t.try_lock(0, PageState::Clean) {
                    return false;
                }
                if t.is_pinned(0) {
                    let _ = t.unlock(0, PageState::Clean);
                    false
                } else {
                    let _ = t.unlock(0, PageState::Empty);
                    true
                }
            })
        };
        let pinner = {
            let t = t.clone();
            thread::spawn(move || t.pin(0))
        };
        let marker = {
            let t = t.clone();
            thread::spawn(move || t.mark_referenced(0))
        };
        let evicted = evictor.join().unwrap();
        assert!(pinner.join().unwrap(), "first pin");
        marker.join().unwrap();
        assert!(t.is_pinned(0), "the pin was lost");
        assert!(t.take_referenced(0), "the referenced bit was lost");
        let want = if evicted {
            PageState::Empty
        } else {
            PageState::Clean
        };
        assert_eq!(t.get(0), Observed::Stable(want));
        assert!(!t.pin(0), "already pinned");
    });
}

/// `unpin` races a lock cycle and a waiter: the page ends unpinned and
/// stable, and the waiter is reported if it registered.
#[test]
fn unpin_races_lock_and_waiter() {
    model(|| {
        let t = Arc::new(PageTable::new(1));
        assert!(t.pin(0));
        assert!(t.try_lock(0, PageState::Empty));
        let owner = {
            let t = t.clone();
            thread::spawn(move || t.unlock(0, PageState::Dirty))
        };
        let unpinner = {
            let t = t.clone();
            thread::spawn(move || t.unpin(0))
        };
        let waiter = {
            let t = t.clone();
            thread::spawn(move || t.add_waiter(0))
        };
        let woke = owner.join().unwrap();
        assert!(unpinner.join().unwrap(), "it was pinned");
        if waiter.join().unwrap() {
            assert!(woke, "a registered waiter was not reported");
        }
        assert!(!t.is_pinned(0), "the unpin was lost");
        assert_eq!(t.get(0), Observed::Stable(PageState::Dirty));
    });
}

/// A retired page (unmapped) is never locked again, whatever races it.
#[test]
fn retired_page_stays_retired() {
    model(|| {
        let t = Arc::new(PageTable::new(1));
        assert!(t.try_lock(0, PageState::Empty));
        let unmapper = {
            let t = t.clone();
            thread::spawn(move || t.retire(0))
        };
        let locker = {
            let t = t.clone();
            thread::spawn(move || {
                let got = [PageState::Empty, PageState::Clean, PageState::Dirty]
                    .into_iter()
                    .any(|s| t.try_lock(0, s));
                t.mark_referenced(0);
                got
            })
        };
        unmapper.join().unwrap();
        assert!(!locker.join().unwrap(), "a busy or retired page was locked");
        assert_eq!(t.get(0), Observed::Busy(PageState::Empty));
        assert!(!t.try_lock(0, PageState::Empty));
    });
}

const PAGE: u64 = 4096;

/// Two fillers each fill two pages through their own credits (batches of
/// two pages) from a budget of three pages: the budget never goes over its
/// limit, exactly three pages are had between them (a full budget is not
/// left partly unused by the batching), and the accounting matches what
/// the threads hold; once they give everything back it is zero.
#[test]
fn credits_never_exceed_limit_nor_leak() {
    model(|| {
        let b = Arc::new(FrameBudget::new(3 * PAGE, 90, 70));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    let mut c = FrameCredit::default();
                    let mut pages = 0u64;
                    for _ in 0..2 {
                        if c.take(&b, PAGE, 2 * PAGE) {
                            pages += 1;
                        }
                        assert!(b.used() <= b.limit(), "over the limit: {}", b.used());
                    }
                    (pages, c)
                })
            })
            .collect();
        let held: Vec<(u64, FrameCredit)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let pages: u64 = held.iter().map(|(p, _)| p).sum();
        let credit: u64 = held.iter().map(|(_, c)| c.held()).sum();
        assert_eq!(pages, 3, "four pages wanted, three fit");
        assert_eq!(b.used(), pages * PAGE + credit, "accounting drifted");
        for (p, mut c) in held {
            c.release_all(&b);
            b.release(p * PAGE);
        }
        assert_eq!(b.used(), 0, "budget leaked");
    });
}

/// An evictor releases pages while a filler reserves: the budget stays
/// within its limit, a reservation that fails saw it full, and releases
/// are never lost to a concurrent reservation's compare-and-swap.
#[test]
fn release_races_reserve() {
    model(|| {
        let b = Arc::new(FrameBudget::new(2 * PAGE, 90, 70));
        assert!(b.try_reserve(2 * PAGE));
        let evictor = {
            let b = b.clone();
            thread::spawn(move || {
                b.release(PAGE);
                b.release(PAGE);
            })
        };
        let filler = {
            let b = b.clone();
            thread::spawn(move || {
                let mut c = FrameCredit::default();
                let mut pages = 0;
                for _ in 0..2 {
                    if c.take(&b, PAGE, 2 * PAGE) {
                        pages += 1;
                    }
                    assert!(b.used() <= b.limit(), "over the limit: {}", b.used());
                }
                (pages, c)
            })
        };
        evictor.join().unwrap();
        let (pages, mut c) = filler.join().unwrap();
        assert_eq!(b.used(), pages * PAGE + c.held(), "accounting drifted");
        c.release_all(&b);
        b.release(pages * PAGE);
        assert_eq!(b.used(), 0, "budget leaked");
    });
}
