//! Many threads faulting on one page at once cause one store read: the
//! other misses wait for the first fill. Reads and writes both.

mod common;

use std::sync::{Arc, Barrier};

use umio::backends::{CountingStore, MemoryStore};
use umio::{Mapping, PrefetchKind, Runtime};

const THREADS: usize = 8;
const PAGE: usize = 64 << 10;
const STORE_LEN: usize = 16 * PAGE;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

fn setup(writable: bool) -> (Runtime, Arc<CountingStore<MemoryStore>>, Mapping) {
    let store = Arc::new(CountingStore::new(MemoryStore::new(pattern(STORE_LEN))));
    let rt = common::runtime(4 << 20, PAGE, 4);
    let map = common::map_store(&rt, &store, writable, PrefetchKind::None);
    (rt, store, map)
}

#[test]
fn concurrent_reads_of_one_page_read_it_once() {
    let (rt, store, map) = setup(false);
    let data = pattern(STORE_LEN);
    // Several pages, each hit by all threads at once.
    let pages = [3usize, 0, 15, 7, 8];
    for (round, &page) in pages.iter().enumerate() {
        assert!(!map.is_resident(page * PAGE));
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|sc| {
            for t in 0..THREADS {
                let (map, barrier, data) = (&map, &barrier, &data);
                sc.spawn(move || {
                    // Different bytes of the same page.
                    let at = page * PAGE + t * 4099 % PAGE;
                    barrier.wait();
                    // SAFETY: `at` is inside the mapping; volatile so that
                    // every thread really touches the page.
                    let got = unsafe { std::ptr::read_volatile(map.as_ptr().add(at)) };
                    assert_eq!(got, data[at], "thread {t}, byte {at}");
                });
            }
        });
        assert_eq!(
            store.counts().reads,
            round as u64 + 1,
            "round {round}: {THREADS} threads missing page {page} together read the store more than once"
        );
        assert!(map.is_resident(page * PAGE));
        // No read-ahead: the neighbours were not read.
        if page + 1 < STORE_LEN / PAGE {
            assert!(!map.is_resident((page + 1) * PAGE));
        }
    }
    let st = rt.stats();
    assert_eq!(st.read_misses, pages.len() as u64, "{st:?}");
    assert_eq!(st.store_reads, pages.len() as u64, "{st:?}");
    assert_eq!(st.prefetched_pages, 0, "{st:?}");
    assert_eq!(store.counts().bytes_read, (pages.len() * PAGE) as u64);
    // `coalesced` depends on timing; it is only printed.
    println!("coalesced faults: {}, stale: {}", st.coalesced, st.stale);
}

#[test]
fn concurrent_writes_to_one_page_read_it_once_and_keep_every_write() {
    let (_rt, store, map) = setup(true);
    let page = 5;
    let barrier = Barrier::new(THREADS);
    let ptr = map.as_ptr() as usize;
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let barrier = &barrier;
            sc.spawn(move || {
                barrier.wait();
                // SAFETY: each thread writes its own byte of page 5, inside
                // the mapping, which outlives the scope.
                unsafe { std::ptr::write_volatile((ptr + page * PAGE + t * 1000) as *mut u8, !0) };
            });
        }
    });
    assert_eq!(
        store.counts().reads,
        1,
        "concurrent write misses on one page read it more than once"
    );
    assert_eq!(map.dirty_pages(), 1);
    let data = pattern(STORE_LEN);
    let s = &map.as_slice()[page * PAGE..(page + 1) * PAGE];
    for (i, &b) in s.iter().enumerate() {
        let want = if i % 1000 == 0 && i / 1000 < THREADS {
            !0
        } else {
            data[page * PAGE + i]
        };
        assert_eq!(b, want, "byte {i} of the page");
    }
    map.flush().unwrap();
    assert_eq!(store.counts().writes, 1, "one dirty page, one write");
    let snap = store.inner().snapshot();
    for t in 0..THREADS {
        assert_eq!(snap[page * PAGE + t * 1000], !0, "thread {t}'s write");
    }
    assert_eq!(snap[..page * PAGE], data[..page * PAGE]);
    assert_eq!(snap[(page + 1) * PAGE..], data[(page + 1) * PAGE..]);
}

#[test]
fn concurrent_faults_on_a_few_pages_read_each_once() {
    // 8 threads over 4 pages, each thread touching all of them in its own
    // order: every page is read once, however the misses interleave.
    let (_rt, store, map) = setup(false);
    let data = pattern(STORE_LEN);
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (map, barrier, data) = (&map, &barrier, &data);
            sc.spawn(move || {
                barrier.wait();
                for k in 0..4 {
                    let page = 10 + (t + k) % 4;
                    let at = page * PAGE + 17 * t;
                    assert_eq!(map.as_slice()[at], data[at]);
                }
            });
        }
    });
    assert_eq!(store.counts().reads, 4);
}
