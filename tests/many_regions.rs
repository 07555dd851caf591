//! More than a thousand regions at once, with 4 KiB, 8 KiB and 64 KiB pages
//! sharing one small cache: each reads its own bytes, unmapping some leaves
//! the others readable, and unmapping all gives the cache back.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::FileStore;
use umio::{MapOptions, Mapping, Runtime, Store};

use common::{Rng, file_with, random_bytes};

const FILE_LEN: usize = 4 << 20;
const PAGE_SIZES: [usize; 3] = [4 << 10, 8 << 10, 64 << 10];

/// Region `i`: where it starts in the file, its length, its page size.
fn layout(i: usize) -> (usize, usize, usize) {
    let len = 9_000 + (i % 7) * 3_001;
    let offset = (i * 12_288) % (FILE_LEN - (64 << 10));
    (offset, len, PAGE_SIZES[i % PAGE_SIZES.len()])
}

fn check_region(m: &Mapping, i: usize, data: &[u8], what: &str) {
    let (off, len, ps) = layout(i);
    assert_eq!(
        (m.offset(), m.len(), m.page_size()),
        (off as u64, len, ps),
        "{what}: region {i}'s geometry"
    );
    if m.as_slice() != &data[off..off + len] {
        panic!("{what}: region {i} (offset {off}, len {len}, pages {ps}) reads wrong bytes");
    }
}

/// After every region is gone, the cache must count no pages. Fillers keep
/// a small reserve of budget across wake-ups (at most cache/256 each), so
/// allow a little slack; a leak of pages per region would exceed it.
fn wait_for_empty_cache(rt: &Runtime) {
    let slack = rt.cache_bytes() / 64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while rt.stats().resident_bytes > slack {
        assert!(
            Instant::now() < deadline,
            "all regions unmapped but the cache still counts {} bytes: {:?}",
            rt.stats().resident_bytes,
            rt.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The cache still has its full capacity: a region as large as the cache
/// reads back right, twice, without waiting on space that leaked.
fn assert_full_capacity(rt: &Runtime, store: Arc<dyn Store>, data: &[u8]) {
    let len = rt.cache_bytes() as usize;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe {
        rt.map(
            MapOptions::new()
                .store(store)
                .len(len)
                .page_size(4 << 10)
                .prefetch(umio::PrefetchKind::None),
        )
    }
    .unwrap();
    for _ in 0..2 {
        assert!(m.as_slice() == &data[..len]);
    }
    m.unmap().unwrap();
}

fn runtime() -> Runtime {
    common::runtime(2 << 20, 16 << 10, 2)
}

#[test]
fn twelve_hundred_regions_on_one_shared_store() {
    const N: usize = 1200;
    let data = random_bytes(FILE_LEN, 1);
    let (_tmp, file) = file_with(&data);
    // One store for all: the regions do not each hold a descriptor.
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&file).unwrap());
    let rt = runtime();
    let mut maps: Vec<Option<Mapping>> = (0..N)
        .map(|i| {
            let (off, len, ps) = layout(i);
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            let m = unsafe {
                rt.map(
                    MapOptions::new()
                        .store(store.clone())
                        .offset(off as u64)
                        .len(len)
                        .page_size(ps),
                )
            }
            .unwrap_or_else(|e| panic!("mapping region {i}: {e}"));
            Some(m)
        })
        .collect();
    assert_eq!(rt.stats().regions, N as u64);

    for (i, m) in maps.iter().enumerate() {
        check_region(m.as_ref().unwrap(), i, &data, "first read");
    }
    let st = rt.stats();
    assert!(st.evicted_pages > 0, "{st:?}");
    assert!(st.resident_bytes <= rt.cache_bytes(), "{st:?}");

    // Unmap one region in three; the others still read right, including
    // pages evicted meanwhile.
    for i in (0..N).step_by(3) {
        maps[i].take().unwrap().unmap().unwrap();
    }
    assert_eq!(rt.stats().regions, (N - N.div_ceil(3)) as u64);
    for (i, m) in maps.iter().enumerate().rev() {
        if let Some(m) = m {
            check_region(m, i, &data, "after unmapping a third");
        }
    }

    // Unmapping a single region in the middle leaves the regions mapped
    // just before and after it.
    maps[700].take().unwrap().unmap().unwrap();
    check_region(maps[698].as_ref().unwrap(), 698, &data, "region before");
    check_region(maps[701].as_ref().unwrap(), 701, &data, "region after");

    for m in maps.into_iter().flatten() {
        m.unmap().unwrap();
    }
    assert_eq!(rt.stats().regions, 0);
    wait_for_empty_cache(&rt);
    assert_full_capacity(&rt, store, &data);
}

#[test]
fn a_thousand_regions_through_map_file() {
    // map_file keeps a duplicate descriptor per region: make sure the
    // descriptor limit allows a thousand, raising the soft limit if needed.
    const N: usize = 1000;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let want = (4 * N) as libc::rlim_t;
    if lim.rlim_cur < want {
        lim.rlim_cur = want.min(lim.rlim_max);
        // SAFETY: setrlimit reads the struct we pass.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    let data = random_bytes(FILE_LEN, 2);
    let (_tmp, file) = file_with(&data);
    let rt = runtime();
    let maps: Vec<Mapping> = (0..N)
        .map(|i| {
            let (off, len, ps) = layout(i);
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            unsafe {
                rt.map_file(
                    &file,
                    MapOptions::new().offset(off as u64).len(len).page_size(ps),
                )
            }
            .unwrap_or_else(|e| panic!("map_file of region {i}: {e}"))
        })
        .collect();
    assert_eq!(rt.stats().regions, N as u64);
    // Read them in a scrambled order.
    let mut rng = Rng::new(3);
    for _ in 0..N {
        let i = (rng.next() % N as u64) as usize;
        check_region(&maps[i], i, &data, "scrambled read");
    }
    drop(maps);
    assert_eq!(rt.stats().regions, 0, "dropping mappings unmaps them");
    wait_for_empty_cache(&rt);
    assert_full_capacity(&rt, Arc::new(FileStore::new(&file).unwrap()), &data);
}

#[test]
fn unmapping_regions_while_others_are_read() {
    const N: usize = 300;
    let data = random_bytes(FILE_LEN, 4);
    let (_tmp, file) = file_with(&data);
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&file).unwrap());
    let rt = runtime();
    let mut maps: Vec<Mapping> = (0..N)
        .map(|i| {
            let (off, len, ps) = layout(i);
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            unsafe {
                rt.map(
                    MapOptions::new()
                        .store(store.clone())
                        .offset(off as u64)
                        .len(len)
                        .page_size(ps),
                )
            }
            .unwrap()
        })
        .collect();
    let doomed = maps.split_off(N / 2);
    std::thread::scope(|sc| {
        let (maps, data) = (&maps, &data);
        let readers: Vec<_> = (0..2)
            .map(|t| {
                sc.spawn(move || {
                    for round in 0..4 {
                        for (i, m) in maps.iter().enumerate().skip(t) {
                            check_region(m, i, data, &format!("reader {t}, round {round}"));
                        }
                    }
                })
            })
            .collect();
        for m in doomed {
            m.unmap().unwrap();
        }
        for r in readers {
            r.join().unwrap();
        }
    });
    assert_eq!(rt.stats().regions, (N / 2) as u64);
}
