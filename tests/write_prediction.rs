//! Write prediction (synchronous dirty tracking, `Builder::write_prediction`):
//! a region whose read misses are followed by writes has its read misses
//! filled dirty, so the write costs no write-protect fault; reads that are
//! not followed by writes are never written back; the prediction ends when
//! the writes stop. Every written byte reaches the store either way. Both
//! fault services.

mod common;

use std::sync::Arc;

use common::{Rng, assert_same, random_bytes};
use umio::backends::{CopyOnWrite, FaultTrigger, FaultyStore, MemoryStore};
use umio::{DirtyTracking, FaultService, MapOptions, Mapping, PrefetchKind, Runtime, Stats, Store};

const PAGE: usize = 4096;
const PAGES: usize = 2048;

const SERVICES: [FaultService; 2] = [FaultService::Fillers, FaultService::InThread];

fn runtime(service: FaultService, predict: bool) -> Runtime {
    Runtime::builder()
        // Room for every page: no eviction, no dirty limit reached.
        .cache_bytes((4 * PAGES * PAGE) as u64)
        .page_size(PAGE)
        .fault_service(service)
        .dirty_tracking(DirtyTracking::Sync)
        .write_prediction(predict)
        .build()
        .unwrap()
}

fn map<S: Store>(rt: &Runtime, store: &Arc<S>) -> Mapping {
    // SAFETY: nothing else reaches the store.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// Reads one word of each page of `pages`, then, if `write`, stores it
/// plus one (a load, then a store, as a program that reads a record and
/// updates it), in the mapping and in `model`.
fn read_modify_write(
    m: &Mapping,
    model: &mut [u8],
    pages: &[usize],
    write: impl Fn(usize) -> bool,
) {
    let base = m.as_ptr();
    for &p in pages {
        let at = p * PAGE + 8 * (p % 511);
        // SAFETY: inside the mapping, 8-aligned; this thread alone uses it.
        let v = unsafe { (base.add(at) as *const u64).read_volatile() };
        if write(p) {
            let v = std::hint::black_box(v).wrapping_add(1);
            // SAFETY: as above.
            unsafe { (base.add(at) as *mut u64).write_volatile(v) };
            model[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
    }
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        v.swap(i, rng.below(i + 1));
    }
    v
}

fn delta(after: &Stats, before: &Stats) -> (u64, u64, u64) {
    (
        after.wp_faults - before.wp_faults,
        after.predicted_writes - before.predicted_writes,
        after.bytes_written - before.bytes_written,
    )
}

/// Every page read then written, in random order: after the first few
/// dozen, read misses are filled dirty and the writes take no fault (one
/// read miss in 16 stays a probe). Off, every write faults.
#[test]
fn read_then_write_takes_no_second_fault() {
    for service in SERVICES {
        for predict in [true, false] {
            let what = format!("{service:?}, prediction {predict}");
            let data = random_bytes(PAGES * PAGE, 5);
            let store = Arc::new(MemoryStore::new(data.clone()));
            let rt = runtime(service, predict);
            let m = map(&rt, &store);
            let mut model = data.clone();
            read_modify_write(&m, &mut model, &shuffled(PAGES, 1), |_| true);
            let st = rt.stats();
            assert_eq!(st.read_misses, PAGES as u64, "{what}: {st}");
            if predict {
                assert!(st.wp_faults < PAGES as u64 / 8, "{what}: {st}");
                assert!(st.predicted_writes > PAGES as u64 * 3 / 4, "{what}: {st}");
                assert!(st.to_string().contains("write prediction"), "{what}: {st}");
            } else {
                assert_eq!(st.wp_faults, PAGES as u64, "{what}: {st}");
                assert_eq!(st.predicted_writes, 0, "{what}: {st}");
            }
            assert_eq!(m.dirty_pages(), PAGES, "{what}");
            m.flush().unwrap();
            assert_eq!(m.dirty_pages(), 0, "{what}");
            assert_same(&store.snapshot(), &model, &what);
            // Clean again and write-protected: the next writes fault.
            let before = rt.stats();
            read_modify_write(&m, &mut model, &shuffled(PAGES, 2)[..64], |_| true);
            assert_eq!(delta(&rt.stats(), &before).0, 64, "{what}");
            m.flush().unwrap();
            assert_same(&store.snapshot(), &model, &what);
            assert!(rt.config().write_prediction == predict, "{what}");
        }
    }
}

/// Reads not followed by writes (a read-only pass; then one page in four
/// written after its read) are never filled dirty: the store gets exactly
/// the pages written.
#[test]
fn reads_without_writes_are_not_written_back() {
    for service in SERVICES {
        let what = format!("{service:?}");
        let data = random_bytes(PAGES * PAGE, 6);
        let store = Arc::new(MemoryStore::new(data.clone()));
        let rt = runtime(service, true);
        let m = map(&rt, &store);
        let mut model = data.clone();
        let order = shuffled(PAGES, 3);
        read_modify_write(&m, &mut model, &order[..PAGES / 2], |_| false);
        m.flush().unwrap();
        assert_eq!(rt.stats().bytes_written, 0, "{what}: {}", rt.stats());
        read_modify_write(&m, &mut model, &order[PAGES / 2..], |p| p % 4 == 0);
        let written = order[PAGES / 2..].iter().filter(|&&p| p % 4 == 0).count();
        let st = rt.stats();
        assert_eq!(st.predicted_writes, 0, "{what}: {st}");
        assert_eq!(st.wp_faults, written as u64, "{what}: {st}");
        m.flush().unwrap();
        assert_eq!(
            rt.stats().bytes_written,
            (written * PAGE) as u64,
            "{what}: {}",
            rt.stats()
        );
        assert_same(&store.snapshot(), &model, &what);
    }
}

/// Once the program stops writing what it reads, the prediction ends
/// within a few hundred read misses; what it filled dirty is written back
/// unchanged, and what was written is in the store.
#[test]
fn prediction_ends_when_the_writes_stop() {
    for service in SERVICES {
        let what = format!("{service:?}");
        let data = random_bytes(PAGES * PAGE, 7);
        let store = Arc::new(MemoryStore::new(data.clone()));
        let rt = runtime(service, true);
        let m = map(&rt, &store);
        let mut model = data.clone();
        let order = shuffled(PAGES, 4);
        read_modify_write(&m, &mut model, &order[..PAGES / 4], |_| true);
        let before = rt.stats();
        assert!(before.predicted_writes > 0, "{what}: {before}");
        read_modify_write(&m, &mut model, &order[PAGES / 4..], |_| false);
        let (wp, predicted, _) = delta(&rt.stats(), &before);
        assert_eq!(wp, 0, "{what}");
        assert!(
            predicted < 400,
            "{what}: {predicted} of {} reads without writes filled dirty",
            PAGES * 3 / 4
        );
        m.flush().unwrap();
        assert_same(&store.snapshot(), &model, &what);
        // A write to a page read since is a first write again.
        let before = rt.stats();
        read_modify_write(&m, &mut model, &order[PAGES - 8..], |_| true);
        assert_eq!(delta(&rt.stats(), &before).0, 8, "{what}");
        m.flush().unwrap();
        assert_same(&store.snapshot(), &model, &what);
    }
}

/// A private copy never fills a read miss dirty on a guess: writing an
/// unchanged page back would copy it into the scratch file for good, and
/// the page would no longer be the file's. Both ways one is made:
/// `Runtime::map_copy` (`MAP_PRIVATE`), and a `CopyOnWrite` store mapped
/// writable (the shim's private mappings). Every first write faults; the
/// file is never written.
#[test]
fn private_copies_never_predict() {
    for service in SERVICES {
        for how in ["map_copy", "CopyOnWrite store"] {
            let what = format!("{service:?}, {how}");
            let data = random_bytes(PAGES * PAGE, 8);
            let (tmp, file) = common::file_with(&data);
            let rt = runtime(service, true);
            let m = if how == "map_copy" {
                // SAFETY: nothing else changes the file.
                unsafe { rt.map_copy(&file, MapOptions::new().prefetch(PrefetchKind::None)) }
                    .unwrap()
            } else {
                let lower = MemoryStore::new(data.clone());
                let cow =
                    CopyOnWrite::new(Box::new(lower), 0, (PAGES * PAGE) as u64, None).unwrap();
                map(&rt, &Arc::new(cow))
            };
            let mut model = data.clone();
            read_modify_write(&m, &mut model, &shuffled(PAGES, 9), |_| true);
            let st = rt.stats();
            assert_eq!(st.predicted_writes, 0, "{what}: {st}");
            assert_eq!(st.wp_faults, PAGES as u64, "{what}: {st}");
            m.flush().unwrap();
            assert_same(m.as_slice(), &model, &what);
            assert_same(&std::fs::read(tmp.path()).unwrap(), &data, &what);
        }
    }
}

/// A store that fails its writes once the program has written (the
/// prediction on) and flushed: the pages the program then only reads,
/// filled dirty on the guess, hold the store's bytes. The program wrote
/// nothing since its flush, so its next flush succeeds, as `msync` of a
/// kernel mapping would, and those pages are clean, not stuck dirty for
/// as long as the store fails. The failure is noted: no more guesses.
#[test]
fn guesses_of_a_failing_store_are_not_stuck_dirty() {
    for service in SERVICES {
        let what = format!("{service:?}");
        let data = random_bytes(PAGES * PAGE, 10);
        let store = Arc::new(FaultyStore::new(MemoryStore::new(data.clone())));
        let rt = runtime(service, true);
        let m = map(&rt, &store);
        let mut model = data.clone();
        let order = shuffled(PAGES, 11);
        read_modify_write(&m, &mut model, &order[..PAGES / 4], |_| true);
        m.flush().unwrap();
        assert_same(&store.inner().snapshot(), &model, &what);
        store.fail_writes(FaultTrigger::Always, libc::ENOSPC);
        let before = rt.stats();
        read_modify_write(&m, &mut model, &order[PAGES / 4..PAGES / 2], |_| false);
        let guessed = delta(&rt.stats(), &before).1;
        assert!(guessed > 0, "{what}: no read filled dirty: {}", rt.stats());
        assert_eq!(m.dirty_pages(), guessed as usize, "{what}");
        m.flush()
            .unwrap_or_else(|e| panic!("{what}: a flush after reads alone failed: {e}"));
        assert_eq!(m.dirty_pages(), 0, "{what}");
        // Noted: the next reads are filled clean.
        let before = rt.stats();
        read_modify_write(&m, &mut model, &order[PAGES / 2..PAGES / 2 + 64], |_| false);
        assert_eq!(delta(&rt.stats(), &before).1, 0, "{what}");
        assert_eq!(m.dirty_pages(), 0, "{what}");
        assert_same(m.as_slice(), &model, &what);
        assert_same(&store.inner().snapshot(), &model, &what);
    }
}
