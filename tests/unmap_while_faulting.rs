//! Unmapping a region (whole, or part of it) while the runtime is busy with
//! it and with other regions: threads keep faulting on region B and on the
//! part of A that stays, read-ahead and an explicit prefetch of A are in
//! flight, and a cache too small for the data keeps evicting and writing
//! back. Nothing hangs, B stays correct, and every write made to A before
//! the unmap reaches its store. No thread touches memory after it is
//! unmapped (that would be the test's own use-after-free).

mod common;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use umio::backends::MemoryStore;
use umio::{Mapping, PrefetchKind, Runtime};

const PAGE: usize = 16 << 10;
const PAGES: usize = 64;
/// Rounds: whole and partial unmaps alternate.
const ROUNDS: usize = 36;
/// A hang detector, generous for a shared, noisy machine.
const HANG: Duration = Duration::from_secs(30);

/// Runs `f` on a thread of its own; panics naming `what` if it has not
/// returned within [`HANG`].
#[track_caller]
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {HANG:?}: hung"),
    }
}

/// Joins a thread within [`HANG`], passing its panic on.
#[track_caller]
fn join<T: Send + 'static>(what: &str, h: JoinHandle<T>) -> T {
    within(what, move || h.join()).unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Writes a stamp at the start of each of `pages` (its own, disjoint from
/// other writers'), over and over, checking that each page still holds the
/// last stamp this thread wrote there, until `stop`. Returns the last
/// stamps.
///
/// # Safety
/// `base..base + PAGES * PAGE` must stay mapped and writable until this
/// returns, and no other thread may write these pages.
unsafe fn stamp_pages(
    base: usize,
    pages: Vec<usize>,
    original: Arc<Vec<u8>>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Vec<(usize, u64)> {
    let mut last: Vec<Option<u64>> = vec![None; pages.len()];
    let mut round = 0u64;
    // At least one pass, so that every page is dirtied whatever `stop` says.
    while round == 0 || !stop.load(Relaxed) {
        for (k, &p) in pages.iter().enumerate() {
            let ptr = (base + p * PAGE) as *mut u64;
            // SAFETY: inside the mapping (caller's contract); aligned.
            let now = unsafe { ptr.read_volatile() };
            let want = last[k].unwrap_or_else(|| {
                u64::from_le_bytes(original[p * PAGE..p * PAGE + 8].try_into().unwrap())
            });
            assert_eq!(now, want, "A page {p}: lost or torn stamp");
            let stamp = seed << 32 | round;
            // SAFETY: as above; only this thread writes the page.
            unsafe { ptr.write_volatile(stamp) };
            last[k] = Some(stamp);
        }
        round += 1;
    }
    pages
        .iter()
        .zip(last)
        .map(|(&p, s)| (p, s.unwrap()))
        .collect()
}

/// Reads B's pages in a loop, checking them, until `stop`.
fn read_b(
    b: Arc<Mapping>,
    data: Arc<Vec<u8>>,
    seed: u64,
    stop: Arc<AtomicBool>,
    n: Arc<AtomicU64>,
) {
    let mut rng = common::Rng::new(seed);
    while !stop.load(Relaxed) {
        let p = rng.below(PAGES);
        let i = p * PAGE + rng.below(PAGE);
        assert_eq!(b.as_slice()[i], data[i], "B byte {i}");
        n.fetch_add(1, Relaxed);
    }
}

/// The store's bytes must be the original ones but for the stamps.
#[track_caller]
fn check_store(store: &MemoryStore, original: &[u8], stamps: &[(usize, u64)], what: &str) {
    let mut want = original.to_vec();
    for &(p, s) in stamps {
        want[p * PAGE..p * PAGE + 8].copy_from_slice(&s.to_le_bytes());
    }
    common::assert_same(&store.snapshot(), &want, what);
}

/// Spawns `writers` threads stamping the pages of `range`, interleaved.
fn spawn_stampers(
    a: &Arc<Mapping>,
    range: Range<usize>,
    writers: usize,
    original: &Arc<Vec<u8>>,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<Vec<(usize, u64)>>> {
    (0..writers)
        .map(|t| {
            let pages: Vec<usize> = range.clone().filter(|p| p % writers == t).collect();
            let (a, original, stop) = (a.clone(), original.clone(), stop.clone());
            std::thread::spawn(move || {
                let base = a.as_ptr() as usize;
                // SAFETY: `a` (an Arc of the mapping) lives in this closure;
                // the main thread unmaps these pages only after joining us,
                // and each writer has pages of its own.
                unsafe { stamp_pages(base, pages, original, seed * 16 + t as u64, stop) }
            })
        })
        .collect()
}

#[test]
fn unmap_while_other_threads_fault() {
    common::log_to_stderr();
    // 24 pages of cache for 128 pages in use: eviction and write-back never
    // stop.
    let rt = Runtime::builder()
        .cache_bytes(24 * PAGE as u64)
        .page_size(PAGE)
        .fillers(2)
        .build()
        .unwrap();
    let data_b = Arc::new(common::random_bytes(PAGES * PAGE, 100));
    let store_b = Arc::new(MemoryStore::new(data_b.to_vec()));
    let b = Arc::new(common::map_store(
        &rt,
        &store_b,
        false,
        PrefetchKind::Sequential {
            max_window: 8 * PAGE,
        },
    ));
    let stop_b = Arc::new(AtomicBool::new(false));
    let b_reads = Arc::new(AtomicU64::new(0));
    let b_readers: Vec<_> = (0..2)
        .map(|t| {
            let (b, data_b, stop_b, n) =
                (b.clone(), data_b.clone(), stop_b.clone(), b_reads.clone());
            std::thread::spawn(move || read_b(b, data_b, t + 1, stop_b, n))
        })
        .collect();

    for round in 0..ROUNDS {
        let original = Arc::new(common::random_bytes(PAGES * PAGE, 1000 + round as u64));
        let store_a = Arc::new(MemoryStore::new(original.to_vec()));
        let a = Arc::new(common::map_store(
            &rt,
            &store_a,
            true,
            PrefetchKind::Sequential {
                max_window: 8 * PAGE,
            },
        ));
        let b_before = b_reads.load(Relaxed);
        if round % 2 == 0 {
            // Whole unmap: writers stamp all of A, stop, and A is unmapped
            // at once, while their read-ahead, a prefetch of all of A and
            // eviction of A's pages are still under way.
            let stop = Arc::new(AtomicBool::new(false));
            let writers = spawn_stampers(&a, 0..PAGES, 3, &original, round as u64, &stop);
            std::thread::sleep(Duration::from_millis(20));
            stop.store(true, Relaxed);
            let mut stamps = Vec::new();
            for h in writers {
                stamps.extend(join("a writer of A", h));
            }
            a.prefetch(0..PAGES * PAGE).unwrap();
            let a = Arc::into_inner(a).expect("the writers dropped their handles");
            within("unmap of A", move || a.unmap()).unwrap();
            check_store(&store_a, &original, &stamps, "A's store after unmap");
        } else {
            // Partial unmap of A's upper half while writers keep faulting on
            // the lower half, next to the hole (read-ahead runs into it).
            let (low, high) = (0..PAGES / 2, PAGES / 2..PAGES);
            let stop_high = Arc::new(AtomicBool::new(false));
            let high_writers =
                spawn_stampers(&a, high.clone(), 2, &original, round as u64, &stop_high);
            let stop_low = Arc::new(AtomicBool::new(false));
            let low_writers =
                spawn_stampers(&a, low.clone(), 2, &original, 100 + round as u64, &stop_low);
            std::thread::sleep(Duration::from_millis(20));
            stop_high.store(true, Relaxed);
            let mut stamps = Vec::new();
            for h in high_writers {
                stamps.extend(join("a writer of A's upper half", h));
            }
            a.prefetch(0..PAGES * PAGE).unwrap();
            let a2 = a.clone();
            within("unmap_range of A's upper half", move || {
                // SAFETY: the handles of this test reach A's bytes through
                // raw pointers only, never as slices, and the writers of the
                // upper half have stopped; the lower half stays mapped.
                unsafe { a2.unmap_range_shared(high.start * PAGE..high.end * PAGE) }
            })
            .unwrap();
            // The lower half goes on being written after the hole is made.
            std::thread::sleep(Duration::from_millis(10));
            stop_low.store(true, Relaxed);
            for h in low_writers {
                stamps.extend(join("a writer of A's lower half", h));
            }
            // Every stamp, both halves, reaches the store.
            let a = Arc::into_inner(a).expect("the writers dropped their handles");
            within("unmap of the rest of A", move || a.unmap()).unwrap();
            check_store(&store_a, &original, &stamps, "A's store after both unmaps");
        }
        common::eventually("B's readers carry on", Duration::from_millis(1), || {
            b_reads.load(Relaxed) > b_before
        });
    }
    stop_b.store(true, Relaxed);
    for h in b_readers {
        join("a reader of B", h);
    }
    common::assert_same(b.as_slice(), &data_b, "B at the end");
    let stats = rt.stats();
    assert_eq!(stats.regions, 1, "only B is left");
    assert!(
        stats.evicted_dirty_pages + stats.limit_written_pages > 0 && stats.prefetched_pages > 0,
        "write-back (at eviction or the dirty limit) and prefetch were to run alongside: {stats:?}"
    );
}
