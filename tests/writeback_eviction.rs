//! Write-back on eviction and unmap: a dirty page reaches the store when it
//! is evicted (before any flush) and when its region is unmapped or
//! dropped; a clean page is dropped without a write, including a page made
//! clean by a flush.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::{CountingStore, FileStore, MemoryStore};
use umio::{Mapping, PrefetchKind, Runtime};

use common::rw_file_with;

const PAGE: usize = 16 << 10;
const STORE_LEN: usize = 2 << 20;
/// An eighth of the store.
const CACHE: u64 = (STORE_LEN / 8) as u64;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 167 % 253) as u8).collect()
}

fn runtime() -> Runtime {
    common::runtime(CACHE, PAGE, 2)
}

fn counting_store() -> Arc<CountingStore<MemoryStore>> {
    Arc::new(CountingStore::new(MemoryStore::new(pattern(STORE_LEN))))
}

fn map_store(rt: &Runtime, store: &Arc<CountingStore<MemoryStore>>) -> Mapping {
    common::map_store(rt, store, true, PrefetchKind::None)
}

/// Reads every page but `skip` (sequentially, several passes) until `page`
/// is no longer resident: the cache holds an eighth of the region, so it
/// must go. Panics if it stays.
fn evict_by_reading(map: &Mapping, page: usize) {
    let pages = map.len() / PAGE;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sum = 0u64;
    'passes: for _ in 0..20 {
        for p in 0..pages {
            if p == page {
                continue;
            }
            // SAFETY: p * PAGE is inside the mapping.
            sum += unsafe { std::ptr::read_volatile(map.as_ptr().add(p * PAGE)) } as u64;
            if p % 8 == 0 && !map.is_resident(page * PAGE) {
                break 'passes;
            }
        }
        assert!(Instant::now() < deadline);
    }
    std::hint::black_box(sum);
    assert!(
        !map.is_resident(page * PAGE),
        "page {page} stayed resident through 20 passes over 8x the cache"
    );
}

/// Polls `cond` for up to 5 s: an evictor may still be finishing the write
/// of a page that already looks non-resident.
fn eventually(what: &str, cond: impl FnMut() -> bool) {
    common::eventually(what, Duration::from_millis(2), cond)
}

#[test]
fn clean_pages_are_evicted_without_a_write() {
    let rt = runtime();
    let store = counting_store();
    let map = map_store(&rt, &store);
    let data = pattern(STORE_LEN);
    for _ in 0..3 {
        assert!(
            map.as_slice() == &data[..],
            "bytes read through the mapping"
        );
    }
    let st = rt.stats();
    assert!(st.evicted_pages > 0, "{st:?}");
    assert_eq!(
        store.counts().writes,
        0,
        "reading a writable mapping wrote to the store"
    );
    assert_eq!(st.evicted_dirty_pages, 0, "{st:?}");
    map.unmap().unwrap();
    assert_eq!(store.counts().writes, 0, "unmapping clean pages wrote");
    assert_eq!(store.inner().snapshot(), data);
}

#[test]
fn a_dirty_page_is_written_back_when_evicted() {
    let rt = runtime();
    let store = counting_store();
    let mut map = map_store(&rt, &store).into_mut().unwrap();
    let page = 3;
    let msg = b"evicted, not flushed";
    map.as_mut_slice()[page * PAGE + 100..page * PAGE + 100 + msg.len()].copy_from_slice(msg);
    assert_eq!(map.mapping().dirty_pages(), 1);
    assert_eq!(store.counts().writes, 0, "nothing written before eviction");
    evict_by_reading(map.mapping(), page);
    // The store counts the write as it is submitted; the evictor counts
    // the page undirtied and evicted after it completes.
    eventually("the evicted page's write-back", || {
        store.counts().writes >= 1
            && map.mapping().dirty_pages() == 0
            && rt.stats().evicted_dirty_pages >= 1
    });
    let c = store.counts();
    assert_eq!(c.writes, 1, "one dirty page, one write: {c:?}");
    assert_eq!(c.bytes_written, PAGE as u64);
    assert_eq!(c.syncs, 0, "no flush was asked for");
    let snap = store.inner().snapshot();
    assert_eq!(
        &snap[page * PAGE + 100..page * PAGE + 100 + msg.len()],
        msg,
        "the store has the write before any flush"
    );
    let mut model = pattern(STORE_LEN);
    model[page * PAGE + 100..page * PAGE + 100 + msg.len()].copy_from_slice(msg);
    assert_eq!(snap, model, "and nothing else changed");
    assert_eq!(map.mapping().dirty_pages(), 0);
    let st = rt.stats();
    assert_eq!(st.evicted_dirty_pages, 1, "{st:?}");
    // Read back after eviction: the page comes from the store again.
    assert_eq!(
        &map.as_slice()[page * PAGE + 100..page * PAGE + 100 + msg.len()],
        msg
    );
    map.unmap().unwrap();
    assert_eq!(store.counts().writes, 1, "unmap rewrote a clean page");
}

#[test]
fn a_flushed_page_is_clean_and_evicted_without_another_write() {
    let rt = runtime();
    let store = counting_store();
    let mut map = map_store(&rt, &store).into_mut().unwrap();
    map.as_mut_slice()[7 * PAGE] = 0xEE;
    map.flush().unwrap();
    assert_eq!(store.counts().writes, 1);
    assert_eq!(map.mapping().dirty_pages(), 0);
    evict_by_reading(map.mapping(), 7);
    // Give an evictor time to (wrongly) write it.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        store.counts().writes,
        1,
        "evicting a flushed page wrote it again"
    );
    assert_eq!(map.as_slice()[7 * PAGE], 0xEE);
    // Dirty it again: the next eviction writes it again.
    map.as_mut_slice()[7 * PAGE + 1] = 0xDD;
    evict_by_reading(map.mapping(), 7);
    eventually("the second write-back", || store.counts().writes == 2);
    assert_eq!(store.inner().snapshot()[7 * PAGE + 1], 0xDD);
}

#[test]
fn dirty_pages_are_written_back_on_unmap() {
    let rt = runtime();
    let store = counting_store();
    let mut map = map_store(&rt, &store).into_mut().unwrap();
    let s = map.as_mut_slice();
    // Pages 3 and 4 (adjacent) and 10; far less than the cache.
    s[3 * PAGE..3 * PAGE + 6].copy_from_slice(b"three!");
    s[4 * PAGE - 4..4 * PAGE + 4].copy_from_slice(b"3and4..4");
    s[10 * PAGE + 9] = 0x10;
    assert_eq!(map.mapping().dirty_pages(), 3);
    assert_eq!(store.counts().writes, 0, "no pressure: nothing written yet");
    map.unmap().unwrap();
    let c = store.counts();
    assert!(c.writes >= 1, "{c:?}");
    assert!(
        c.writes <= 2,
        "adjacent dirty pages are written in one write: {c:?}"
    );
    assert_eq!(c.bytes_written, 3 * PAGE as u64, "{c:?}");
    let snap = store.inner().snapshot();
    let mut model = pattern(STORE_LEN);
    model[3 * PAGE..3 * PAGE + 6].copy_from_slice(b"three!");
    model[4 * PAGE - 4..4 * PAGE + 4].copy_from_slice(b"3and4..4");
    model[10 * PAGE + 9] = 0x10;
    assert_eq!(snap, model);
}

#[test]
fn dropping_a_mapping_writes_back_its_dirty_pages() {
    let rt = runtime();
    let store = counting_store();
    {
        let mut map = map_store(&rt, &store).into_mut().unwrap();
        map.as_mut_slice()[12_345] = 0xAB;
        map.as_mut_slice()[STORE_LEN - 1] = 0xCD;
        assert_eq!(store.counts().writes, 0);
    }
    let snap = store.inner().snapshot();
    assert_eq!((snap[12_345], snap[STORE_LEN - 1]), (0xAB, 0xCD));
    assert_eq!(rt.stats().regions, 0);
}

#[test]
fn an_evicted_dirty_page_is_in_the_file_before_any_flush() {
    // The same with a real file, checked through a second descriptor.
    let data = pattern(STORE_LEN);
    let (tmp, file) = rw_file_with(&data);
    let store = Arc::new(CountingStore::new(FileStore::new(&file).unwrap()));
    let rt = runtime();
    let mut map = common::map_store(&rt, &store, true, PrefetchKind::None)
        .into_mut()
        .unwrap();
    map.as_mut_slice()[PAGE + 5..PAGE + 10].copy_from_slice(b"hello");
    evict_by_reading(map.mapping(), 1);
    let reader = std::fs::File::open(tmp.path()).unwrap();
    eventually("the write-back to reach the file", || {
        let mut buf = [0u8; 5];
        reader.read_exact_at(&mut buf, (PAGE + 5) as u64).unwrap();
        &buf == b"hello"
    });
    assert_eq!(store.counts().syncs, 0, "no flush happened");
    drop(map);
    assert_eq!(
        std::fs::read(tmp.path()).unwrap()[PAGE + 5..PAGE + 10],
        *b"hello"
    );
}

/// Read-ahead and eviction must not take the page whose fault asked for it
/// before the application has used it: a sparse writer (one byte per 64 KiB,
/// a stride the read-ahead streams follow) over a region 32 times the cache
/// then has each dirty page written back once. Read-ahead windows larger
/// than the cache, stale policy entries left by two threads evicting one
/// page, and write misses inserted without the referenced bit each let an
/// evictor write a page back between its write fault and the write itself,
/// so the page was written back without the write and then again with it
/// (CI's RADOS test saw 516 writes for 512 pages; this test 513-521).
///
/// One case remains, and the bound allows for it: a woken thread that does
/// not get a CPU while the cache turns over twice (the referenced bit's
/// second chance) loses its page the same way; here that is a single page
/// in about one run of 30, on an idle machine.
#[test]
fn each_dirty_page_is_written_back_once_under_read_ahead() {
    const LEN: usize = 32 << 20;
    const STRIDE: usize = 64 << 10;
    let rt = common::runtime(1 << 20, PAGE, 2);
    let store = Arc::new(CountingStore::new(MemoryStore::new(vec![0; LEN])));
    let mut map = common::map_store(&rt, &store, true, PrefetchKind::default())
        .into_mut()
        .unwrap();
    assert!(map.as_slice().iter().all(|&b| b == 0));
    let n = LEN / STRIDE;
    for i in 0..n {
        map.as_mut_slice()[i * STRIDE + i % 1000] = (i % 251) as u8 + 1;
    }
    map.flush().unwrap();
    let c = store.counts();
    assert!(
        c.writes >= n as u64 && c.writes <= n as u64 + 2,
        "{n} dirty pages, each written once (two more allowed, see above): {c:?}"
    );
    assert_eq!(c.bytes_written, c.writes * PAGE as u64, "page-sized writes");
    let snap = store.inner().snapshot();
    for i in 0..n {
        assert_eq!(snap[i * STRIDE + i % 1000], (i % 251) as u8 + 1, "page {i}");
    }
    assert_eq!(snap.iter().filter(|&&b| b != 0).count(), n);
}
