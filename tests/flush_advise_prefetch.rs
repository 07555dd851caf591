//! `flush`, `flush_range`, `advise` and `prefetch`: a flush makes every
//! write made before it durable (including writes right before it, and
//! writes after an earlier flush); `DontNeed` discards unflushed changes;
//! prefetch and read-ahead advice fill pages in the background.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::{CountingStore, MemoryStore};
use umio::{Advice, MapOptions, Mapping, PrefetchKind, Runtime, UncheckedAdvice};

use common::rw_file_with;

const PAGE: usize = 16 << 10;
const STORE_LEN: usize = 1 << 20;

type Counted = Arc<CountingStore<MemoryStore>>;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 89 % 241) as u8).collect()
}

fn runtime(cache: u64) -> Runtime {
    common::runtime(cache, PAGE, 2)
}

fn counted() -> Counted {
    Arc::new(CountingStore::new(MemoryStore::new(pattern(STORE_LEN))))
}

fn map(rt: &Runtime, store: &Counted, writable: bool, prefetch: PrefetchKind) -> Mapping {
    common::map_store(rt, store, writable, prefetch)
}

fn eventually(what: &str, cond: impl FnMut() -> bool) {
    common::eventually(what, Duration::from_millis(1), cond)
}

#[test]
fn flush_right_after_a_write_makes_it_durable() {
    // The write's fault must be fully recorded before the writing thread
    // runs on: a flush called at once must see the page dirty. Both kinds
    // of first write: to a missing page, and to a clean resident one.
    // Several threads at once widen the window a slow filler would leave.
    let rt = runtime(4 << 20);
    std::thread::scope(|sc| {
        for t in 0..4u8 {
            let rt = &rt;
            sc.spawn(move || {
                for i in 0..60u8 {
                    let store = Arc::new(MemoryStore::new(vec![0xFF; 64 << 10]));
                    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
                    let mut m =
                        unsafe { rt.map(MapOptions::new().store(store.clone()).writable(true)) }
                            .unwrap()
                            .into_mut()
                            .unwrap();
                    let read_first = i % 2 == 1;
                    if read_first {
                        assert_eq!(m.as_slice()[0], 0xFF);
                    }
                    m.as_mut_slice()[0] = t ^ i;
                    m.flush().unwrap();
                    assert_eq!(
                        store.snapshot()[0],
                        t ^ i,
                        "thread {t}, iteration {i} (read first: {read_first}): \
                         flush returned but the store lacks the write"
                    );
                    m.unmap().unwrap();
                }
            });
        }
    });
}

#[test]
fn writes_after_a_flush_are_made_durable_by_the_next() {
    let data = pattern(STORE_LEN);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime(4 << 20);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    let mut model = data.clone();
    m.as_mut_slice()[PAGE + 1] = 1;
    model[PAGE + 1] = 1;
    m.flush().unwrap();
    assert_eq!(std::fs::read(tmp.path()).unwrap(), model);
    assert_eq!(m.mapping().dirty_pages(), 0);
    // The same page again (clean now, write-protected), and a new one.
    m.as_mut_slice()[PAGE + 2] = 2;
    m.as_mut_slice()[9 * PAGE] = 3;
    model[PAGE + 2] = 2;
    model[9 * PAGE] = 3;
    assert_eq!(m.mapping().dirty_pages(), 2);
    m.flush().unwrap();
    assert_eq!(std::fs::read(tmp.path()).unwrap(), model);
    // And a third time, the whole mapping rewritten.
    m.as_mut_slice().fill(0x42);
    m.flush().unwrap();
    assert_eq!(std::fs::read(tmp.path()).unwrap(), vec![0x42; STORE_LEN]);
    assert!(rt.stats().first_writes() >= 2, "{:?}", rt.stats());
}

#[test]
fn flush_of_a_clean_mapping_writes_nothing() {
    let rt = runtime(4 << 20);
    let store = counted();
    let m = map(&rt, &store, true, PrefetchKind::None);
    assert!(m.as_slice() == &pattern(STORE_LEN)[..]);
    m.flush().unwrap();
    let c = store.counts();
    assert_eq!(c.writes, 0, "{c:?}");
    assert_eq!(c.syncs, 1, "flush still syncs the store: {c:?}");
}

#[test]
fn flush_range_writes_only_its_pages() {
    let rt = runtime(4 << 20);
    let store = counted();
    let mut m = map(&rt, &store, true, PrefetchKind::None)
        .into_mut()
        .unwrap();
    m.as_mut_slice()[PAGE + 7] = 0xA1;
    m.as_mut_slice()[5 * PAGE + 7] = 0xA5;
    assert_eq!(m.mapping().dirty_pages(), 2);
    // Any range overlapping page 1 flushes it, and only it.
    m.flush_range(2 * PAGE - 1..2 * PAGE).unwrap();
    let snap = store.inner().snapshot();
    assert_eq!(snap[PAGE + 7], 0xA1);
    assert_eq!(snap[5 * PAGE + 7], pattern(STORE_LEN)[5 * PAGE + 7]);
    assert_eq!(m.mapping().dirty_pages(), 1);
    assert_eq!(store.counts().writes, 1);
    m.flush().unwrap();
    assert_eq!(store.inner().snapshot()[5 * PAGE + 7], 0xA5);
    assert_eq!(m.mapping().dirty_pages(), 0);
}

#[test]
fn dont_need_discards_unflushed_changes() {
    let rt = runtime(4 << 20);
    let store = counted();
    let data = pattern(STORE_LEN);
    let mut m = map(&rt, &store, true, PrefetchKind::None)
        .into_mut()
        .unwrap();
    // Page 2: flushed change, then an unflushed one. Page 3: unflushed.
    m.as_mut_slice()[2 * PAGE] = 0x11;
    m.flush().unwrap();
    m.as_mut_slice()[2 * PAGE + 1] = 0x22;
    m.as_mut_slice()[3 * PAGE] = 0x33;
    assert_eq!(m.mapping().dirty_pages(), 2);
    let resident = m.mapping().resident_pages();
    let used = rt.stats().resident_bytes;
    m.advise_mut(2 * PAGE..4 * PAGE, UncheckedAdvice::DontNeed)
        .unwrap();
    assert_eq!(
        m.mapping().dirty_pages(),
        0,
        "discarded pages are not dirty"
    );
    assert_eq!(m.mapping().resident_pages(), resident - 2);
    assert!(!m.mapping().is_resident(2 * PAGE) && !m.mapping().is_resident(3 * PAGE));
    assert!(
        rt.stats().resident_bytes <= used - 2 * PAGE as u64,
        "DontNeed gave the pages back to the cache"
    );
    // The next reads get the store's bytes: the flushed change survives,
    // the unflushed ones are gone.
    assert_eq!(m.as_slice()[2 * PAGE], 0x11);
    assert_eq!(m.as_slice()[2 * PAGE + 1], data[2 * PAGE + 1]);
    assert_eq!(m.as_slice()[3 * PAGE], data[3 * PAGE]);
    let writes = store.counts().writes;
    m.flush().unwrap();
    m.unmap().unwrap();
    assert_eq!(
        store.counts().writes,
        writes,
        "discarded pages were written"
    );
    let mut model = data;
    model[2 * PAGE] = 0x11;
    assert_eq!(store.inner().snapshot(), model);
}

#[test]
fn prefetch_fills_pages_in_the_background() {
    let rt = runtime(4 << 20);
    let store = counted();
    let m = map(&rt, &store, false, PrefetchKind::None);
    let range = 4 * PAGE + 100..20 * PAGE - 100;
    for p in (range.start..range.end).step_by(PAGE) {
        assert!(!m.is_resident(p));
    }
    m.prefetch(range.clone()).unwrap();
    eventually("prefetched pages to become resident", || {
        (4..20).all(|p| m.is_resident(p * PAGE))
    });
    assert!(
        !m.is_resident(3 * PAGE),
        "prefetch filled outside its range"
    );
    assert!(
        !m.is_resident(20 * PAGE),
        "prefetch filled outside its range"
    );
    let st = rt.stats();
    assert_eq!(st.prefetched_pages, 16, "{st:?}");
    assert_eq!(st.read_misses, 0, "{st:?}");
    // Reading the range now costs no store read.
    let reads = store.counts().reads;
    assert!(m.as_slice()[4 * PAGE..20 * PAGE] == pattern(STORE_LEN)[4 * PAGE..20 * PAGE]);
    assert_eq!(store.counts().reads, reads);
    assert_eq!(rt.stats().read_misses, 0);

    // WillNeed does the same.
    m.advise(30 * PAGE..32 * PAGE, Advice::WillNeed).unwrap();
    eventually("WillNeed pages to become resident", || {
        m.is_resident(30 * PAGE) && m.is_resident(31 * PAGE)
    });
}

#[test]
fn prefetch_larger_than_the_cache_fills_half_of_it() {
    let rt = runtime(256 << 10);
    let store = counted();
    let m = map(&rt, &store, false, PrefetchKind::None);
    m.prefetch(0..STORE_LEN).unwrap();
    // A hint four times the cache fills its first half-cache of pages and
    // stops there: it would otherwise evict every page in use, then its
    // own before their use.
    let half = rt.cache_bytes() / 2 / PAGE as u64;
    eventually("prefetch to fill half of the cache", || {
        rt.stats().prefetched_pages >= half
    });
    std::thread::sleep(Duration::from_millis(100));
    let st = rt.stats();
    assert_eq!(st.prefetched_pages, half, "{st:?}");
    assert!(st.resident_bytes <= rt.cache_bytes(), "{st:?}");
    assert_eq!(st.evicted_pages, 0, "{st:?}");
    assert_eq!(st.read_misses, 0, "{st:?}");
    assert!((0..half as usize).all(|p| m.is_resident(p * PAGE)));
    // The rest is read when touched.
    assert!(m.as_slice() == &pattern(STORE_LEN)[..]);
}

#[test]
fn sequential_advice_reads_ahead_even_without_a_prefetch_policy() {
    let rt = runtime(4 << 20);
    let store = counted();
    let m = map(&rt, &store, false, PrefetchKind::None);
    m.advise(0..STORE_LEN / 2, Advice::Sequential).unwrap();
    assert_eq!(m.as_slice()[0], pattern(1)[0]);
    eventually("read-ahead after a miss under Sequential advice", || {
        m.is_resident(PAGE) && m.is_resident(8 * PAGE)
    });
    assert!(rt.stats().prefetched_pages > 0);
}

#[test]
fn random_advice_turns_read_ahead_off() {
    let rt = runtime(4 << 20);
    let store = counted();
    let m = map(&rt, &store, false, PrefetchKind::default());
    m.advise(0..STORE_LEN, Advice::Random).unwrap();
    let data = pattern(STORE_LEN);
    for p in 0..32 {
        assert_eq!(m.as_slice()[p * PAGE], data[p * PAGE]);
    }
    std::thread::sleep(Duration::from_millis(20));
    let st = rt.stats();
    assert_eq!(st.prefetched_pages, 0, "{st:?}");
    assert_eq!(store.counts().reads, 32, "one read per page touched");
    assert!(!m.is_resident(32 * PAGE));
}

#[test]
fn unmap_right_after_a_large_prefetch_returns_promptly() {
    // Unmapping waits for the prefetch under way on the region; that must
    // not be a wait for cache space the prefetch can never get.
    let rt = runtime(256 << 10);
    let store = counted();
    let m = map(&rt, &store, false, PrefetchKind::None);
    m.prefetch(0..STORE_LEN).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let t = Instant::now();
    m.unmap().unwrap();
    // A wait for space the prefetch can never get is forever; a loaded
    // machine's unmap, seconds at most.
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "unmap took {:?}",
        t.elapsed()
    );
    assert_eq!(rt.stats().regions, 0);
}
