//! Eviction and prefetch policies through real mappings: which pages stay
//! resident under each policy, that no policy loses a write or evicts a
//! pinned page or overfills the cache, and what the prefetchers fetch.
//!
//! Runtimes here have one filler, no evictor and no read-ahead unless a
//! test says otherwise: eviction then happens only on the faulting path,
//! before the faulting access returns, so the workloads are deterministic.

mod common;

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Rng, eventually, random_bytes};
use umio::backends::{CountingStore, MemoryStore};
use umio::{
    Fault, FaultKind, FetchList, MapOptions, Mapping, PolicyKind, PrefetchKind, Prefetcher,
    Runtime, Store,
};

const PS: usize = 4096;

/// A runtime with no evictor: its fillers reclaim before they resolve a
/// miss, so nothing is evicted behind a test's back. Fillers, whatever
/// `UMIO_FAULT_SERVICE` says: the in-thread service needs an evictor for
/// writable mappings (a signal handler reclaims clean pages only) and
/// refuses them without.
fn runtime_with(policy: PolicyKind, cache_pages: usize) -> Runtime {
    Runtime::builder()
        .cache_bytes((cache_pages * PS) as u64)
        .page_size(PS)
        .fillers(1)
        .fault_service(umio::FaultService::Fillers)
        .evictors(0)
        .eviction(policy)
        .prefetch(PrefetchKind::None)
        .build()
        .unwrap()
}

fn map_memory(rt: &Runtime, store: Arc<dyn Store>, writable: bool) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe { rt.map(MapOptions::new().store(store).writable(writable)) }.unwrap()
}

/// Reads one byte of page `p` (volatile: the access must happen).
fn touch(map: &Mapping, p: usize) -> u8 {
    // SAFETY: p * PS is within the mapping, which lives while `map` does.
    unsafe { std::ptr::read_volatile(map.as_ptr().add(p * PS)) }
}

/// Hit ratio on a hot set of 128 pages, read at random in a cache of 512
/// pages while a scan of another 4096-page region runs alongside: 8 scan
/// pages after each hot read, the scan starting over at the end. The hot
/// set is its own mapping, so its misses are its region's fills.
fn hot_set_hit_ratio(policy: PolicyKind) -> f64 {
    let rt = runtime_with(policy, 512);
    let hot_pages = 128;
    let hot = map_memory(
        &rt,
        Arc::new(MemoryStore::new(vec![1; hot_pages * PS])),
        false,
    );
    let scan_pages = 4096;
    let scan = map_memory(
        &rt,
        Arc::new(MemoryStore::new(vec![2; scan_pages * PS])),
        false,
    );
    let mut rng = Rng::new(7);
    let mut at = 0;
    let (warmup, steps) = (1500, 5000);
    let mut misses_before = 0;
    for step in 0..steps {
        if step == warmup {
            misses_before = hot.stats().fills;
        }
        assert_eq!(touch(&hot, rng.below(hot_pages)), 1);
        for _ in 0..8 {
            assert_eq!(touch(&scan, at), 2);
            at = (at + 1) % scan_pages;
        }
    }
    let misses = hot.stats().fills - misses_before;
    let ratio = 1.0 - misses as f64 / (steps - warmup) as f64;
    eprintln!("{policy}: hot-set hit ratio {ratio:.3}");
    ratio
}

#[test]
fn two_q_keeps_the_hot_set_through_a_scan_and_fifo_does_not() {
    let two_q = hot_set_hit_ratio(PolicyKind::TwoQ);
    let fifo = hot_set_hit_ratio(PolicyKind::Fifo);
    assert!(two_q >= 0.9, "2q hot-set hit ratio {two_q:.3}");
    assert!(fifo < 0.9, "fifo hot-set hit ratio {fifo:.3}");
}

/// Pages of the store whose content differs from the model, among the
/// pages not resident now.
fn lost_writes(map: &Mapping, store: &MemoryStore, model: &[u8]) -> Vec<usize> {
    let bytes = store.snapshot();
    (0..model.len() / PS)
        .filter(|&p| !map.is_resident(p * PS))
        .filter(|&p| bytes[p * PS..(p + 1) * PS] != model[p * PS..(p + 1) * PS])
        .collect()
}

#[test]
fn no_policy_drops_a_dirty_page_before_writing_it_back_or_overfills_the_cache_of_fillers_reclaiming_without_an_evictor()
 {
    let (pages, cache_pages) = (96, 16);
    for (seed, policy) in PolicyKind::ALL.into_iter().enumerate() {
        let rt = runtime_with(policy, cache_pages);
        let initial = random_bytes(pages * PS, seed as u64);
        let store = Arc::new(MemoryStore::new(initial.clone()));
        let mut map = map_memory(&rt, store.clone(), true).into_mut().unwrap();
        let mut model = initial;
        let pinned = [5usize, 6];
        map.mapping().pin(5 * PS..7 * PS).unwrap();
        let mut rng = Rng::new(100 + seed as u64);
        for op in 0..1500 {
            // Mostly a few hot pages, sometimes anywhere.
            let p = if rng.below(3) == 0 {
                rng.below(pages)
            } else {
                rng.below(24)
            };
            let at = p * PS + rng.below(PS);
            if rng.below(2) == 0 {
                let v = rng.next() as u8;
                map.as_mut_slice()[at] = v;
                model[at] = v;
            } else {
                assert_eq!(map.as_slice()[at], model[at], "{policy}: read of byte {at}");
            }
            // Nothing is being evicted now (no evictor thread; the filler
            // evicts before it resolves a miss): every page that is not
            // resident must hold its last write in the store.
            let lost = lost_writes(map.mapping(), &store, &model);
            assert!(
                lost.is_empty(),
                "{policy}, op {op}: pages {lost:?} lost writes"
            );
            let stats = rt.stats();
            assert!(
                stats.resident_bytes <= rt.cache_bytes(),
                "{policy}: {} bytes resident in a {}-byte cache",
                stats.resident_bytes,
                rt.cache_bytes()
            );
            for &q in &pinned {
                assert!(
                    map.mapping().is_resident(q * PS),
                    "{policy}: pinned page {q} evicted"
                );
            }
        }
        let stats = rt.stats();
        assert!(
            stats.evicted_dirty_pages + stats.limit_written_pages > 0,
            "{policy}: the test never wrote a dirty page back before a flush"
        );
        map.unmap().unwrap();
        assert!(
            store.snapshot() == model,
            "{policy}: store differs after unmap"
        );
    }
}

#[test]
fn prefetch_ranges_fills_merged_ranges_in_batches_and_returns_at_once() {
    let rt = Runtime::builder()
        .cache_bytes(256 * PS as u64)
        .page_size(PS)
        .fillers(1)
        .prefetch(PrefetchKind::None)
        .build()
        .unwrap();
    let data = random_bytes(64 * PS, 3);
    let store = Arc::new(CountingStore::new(MemoryStore::new(data.clone())));
    let map = map_memory(&rt, store.clone(), false);
    // Out of the mapping: refused, nothing queued.
    assert!(map.prefetch_ranges(&[0..PS, 0..65 * PS]).is_err());
    // Overlapping, adjacent and unordered: two runs, 2..10 and 20..24.
    let ranges: [Range<usize>; 4] = [
        20 * PS..24 * PS,
        2 * PS..5 * PS,
        4 * PS + 100..8 * PS,
        8 * PS..10 * PS - 1,
    ];
    map.prefetch_ranges(&ranges).unwrap();
    let wanted: Vec<usize> = (2..10).chain(20..24).collect();
    eventually("the ranges are resident", Duration::from_millis(5), || {
        wanted.iter().all(|&p| map.is_resident(p * PS))
    });
    assert_eq!(
        store.counts().reads,
        2,
        "one store read per run of consecutive pages"
    );
    assert_eq!(map.resident_pages(), wanted.len(), "nothing else was read");
    for &p in &wanted {
        common::assert_same(
            &map.as_slice()[p * PS..(p + 1) * PS],
            &data[p * PS..(p + 1) * PS],
            "prefetched page",
        );
    }
    assert_eq!(
        map.stats().faults,
        0,
        "reads of prefetched pages do not fault"
    );
}

#[test]
fn stride_prefetch_fetches_ahead_of_a_strided_reader_forward_and_backward_when_fillers_read_ahead()
{
    let pages = 1024;
    let data = random_bytes(pages * PS, 9);
    for (kind, prefetched_at_least) in [
        (PrefetchKind::None, 0),
        (
            PrefetchKind::Stride {
                max_window: 64 * PS,
            },
            100,
        ),
    ] {
        // Fillers: in the faulting thread, read-ahead is queued to the
        // prefetch threads, which a reader of a memory store outruns;
        // whether they are ahead of it is then a matter of timing.
        let rt = Runtime::builder()
            .cache_bytes(512 * PS as u64)
            .page_size(PS)
            .fillers(1)
            .fault_service(umio::FaultService::Fillers)
            .build()
            .unwrap();
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe {
            rt.map(
                MapOptions::new()
                    .store(Arc::new(MemoryStore::new(data.clone())))
                    .prefetch(kind),
            )
        }
        .unwrap();
        // Every 5th page forward, then every 3rd page backward.
        let forward = (0..pages).step_by(5);
        let backward = (0..pages).rev().step_by(3).filter(|p| p % 5 != 0);
        let mut accessed = 0;
        for p in forward.chain(backward) {
            assert_eq!(map.as_slice()[p * PS], data[p * PS]);
            accessed += 1;
        }
        let stats = map.stats();
        assert!(
            stats.prefetched as usize >= prefetched_at_least,
            "{kind:?}: {} of {accessed} pages prefetched",
            stats.prefetched
        );
        if kind == PrefetchKind::None {
            assert_eq!(stats.prefetched, 0);
            assert_eq!(stats.fills as usize, accessed, "every access missed");
        } else {
            assert!(
                (stats.fills - stats.prefetched) * 4 < accessed as u64,
                "{kind:?}: {} of {accessed} accesses missed",
                stats.fills - stats.prefetched
            );
        }
    }
}

/// Records the faults it is shown; on a first write, asks for the next page.
#[derive(Default)]
struct Recorder {
    kinds: Mutex<Vec<(u64, FaultKind, bool)>>,
    calls: AtomicUsize,
}

impl Prefetcher for Recorder {
    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        self.calls.fetch_add(1, Relaxed);
        self.kinds
            .lock()
            .unwrap()
            .push((fault.page, fault.kind, fault.write));
        assert_eq!(fault.offset, fault.page as usize * PS);
        if fault.kind == FaultKind::FirstWrite {
            fetch.push(fault.page + 1..fault.page + 2);
        }
    }
}

#[test]
fn a_prefetcher_sees_misses_and_first_writes_and_its_ranges_are_filled() {
    let rt = runtime_with(PolicyKind::default(), 64);
    let recorder = Arc::new(Recorder::default());
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(MemoryStore::new(vec![0; 16 * PS])))
                .writable(true)
                .prefetcher(recorder.clone()),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    assert_eq!(touch(map.mapping(), 3), 0); // read miss
    map.as_mut_slice()[3 * PS] = 1; // first write to the clean page
    map.as_mut_slice()[8 * PS] = 1; // write miss
    // Asynchronous dirty tracking: the kernel resolves the first write to
    // a clean page itself, and no fault reaches the prefetcher.
    let want: &[_] = if rt.dirty_tracking() == umio::DirtyTracking::Sync {
        &[
            (3, FaultKind::Miss, false),
            (3, FaultKind::FirstWrite, true),
            (8, FaultKind::Miss, true),
        ]
    } else {
        &[(3, FaultKind::Miss, false), (8, FaultKind::Miss, true)]
    };
    // The filler shows the fault after it woke the faulting thread.
    eventually("the faults shown", Duration::from_millis(5), || {
        recorder.calls.load(Relaxed) >= want.len()
    });
    let seen = recorder.kinds.lock().unwrap().clone();
    assert_eq!(seen, want);
    if want.len() == 3 {
        // The first write's range (page 4).
        eventually("page 4 prefetched", Duration::from_millis(5), || {
            map.mapping().is_resident(4 * PS)
        });
        assert_eq!(map.mapping().stats().prefetched, 1);
    }
}
