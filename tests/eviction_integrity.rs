//! Bytes read through a mapping equal the file while the cache holds only an
//! eighth of it: sequential and random reads, several page sizes, both
//! built-in eviction policies, with and without background evictors, from
//! one thread and from several.

mod common;

use umio::{MapOptions, Mapping, PolicyKind, Runtime};

use common::{Rng, assert_same, file_with, random_bytes};

const FILE_LEN: usize = 8 << 20;
const CACHE: u64 = (FILE_LEN / 8) as u64;

fn assert_within_cache(rt: &Runtime, map: &Mapping, what: &str) {
    let st = rt.stats();
    assert!(
        st.resident_bytes <= rt.cache_bytes(),
        "{what}: resident_bytes {} > cache_bytes {}",
        st.resident_bytes,
        rt.cache_bytes()
    );
    let resident = (map.resident_pages() * map.page_size()) as u64;
    assert!(
        resident <= rt.cache_bytes(),
        "{what}: the region holds {resident} bytes, more than the cache's {}",
        rt.cache_bytes()
    );
}

/// Reads the whole mapping sequentially (twice: the second pass finds the
/// start evicted), then random ranges and random single bytes.
fn read_everything(rt: &Runtime, map: &Mapping, data: &[u8], seed: u64) {
    let s = map.as_slice();
    assert_eq!(s.len(), data.len());
    for pass in 0..2 {
        for start in (0..data.len()).step_by(256 << 10) {
            let end = (start + (256 << 10)).min(data.len());
            assert_same(
                &s[start..end],
                &data[start..end],
                &format!("sequential pass {pass}, bytes {start}..{end}"),
            );
            assert_within_cache(rt, map, "sequential read");
        }
    }
    let mut rng = Rng::new(seed);
    for i in 0..1500 {
        let len = 1 + rng.below(3 * map.page_size());
        let start = rng.below(data.len() - len);
        assert_same(
            &s[start..start + len],
            &data[start..start + len],
            &format!("random range {i}: {start}+{len}"),
        );
        if i % 100 == 0 {
            assert_within_cache(rt, map, "random read");
        }
    }
    for _ in 0..3000 {
        let at = rng.below(data.len());
        assert_eq!(s[at], data[at], "random byte at {at}");
    }
    assert_within_cache(rt, map, "after random reads");
}

fn run(page_size: usize, policy: PolicyKind, evictors: usize, seed: u64) {
    let data = random_bytes(FILE_LEN, seed);
    let (_tmp, file) = file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes(CACHE)
        .page_size(page_size)
        .fillers(2)
        .evictors(evictors)
        .eviction(policy)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert_eq!(map.len(), FILE_LEN);
    assert_eq!(map.page_size(), page_size);
    read_everything(&rt, &map, &data, seed ^ 0xABCD);
    let st = rt.stats();
    assert!(
        st.evicted_pages > 0,
        "reading 8x the cache evicted nothing: {st:?}"
    );
    assert!(
        st.read_misses > 0 && st.bytes_read >= FILE_LEN as u64,
        "{st:?}"
    );
    assert_eq!(st.read_errors, 0, "{st:?}");
    assert_eq!(
        st.evicted_dirty_pages, 0,
        "a read-only mapping has no dirty pages"
    );
    assert_eq!(st.bytes_written, 0, "a read-only mapping wrote: {st:?}");
    map.unmap().unwrap();
}

#[test]
fn clock_4k_pages() {
    run(4 << 10, PolicyKind::Clock, 1, 1);
}

#[test]
fn clock_16k_pages() {
    run(16 << 10, PolicyKind::Clock, 1, 2);
}

#[test]
fn clock_64k_pages() {
    run(64 << 10, PolicyKind::Clock, 1, 3);
}

#[test]
fn fifo_16k_pages() {
    run(16 << 10, PolicyKind::Fifo, 1, 4);
}

#[test]
fn direct_reclaim_only_no_evictor_thread() {
    run(16 << 10, PolicyKind::Clock, 0, 5);
}

#[test]
fn several_threads_read_random_ranges() {
    let data = random_bytes(FILE_LEN, 6);
    let (_tmp, file) = file_with(&data);
    let rt = common::runtime(CACHE, 16 << 10, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let (map, data, rt) = (&map, &data, &rt);
            sc.spawn(move || {
                let s = map.as_slice();
                let mut rng = Rng::new(100 + t);
                for i in 0..1500 {
                    let len = 1 + rng.below(40 << 10);
                    let start = rng.below(data.len() - len);
                    assert_same(
                        &s[start..start + len],
                        &data[start..start + len],
                        &format!("thread {t}, read {i}: {start}+{len}"),
                    );
                }
                assert_within_cache(rt, map, "threads");
            });
        }
    });
    assert_same(map.as_slice(), &data, "whole mapping after the threads");
    let st = rt.stats();
    assert!(st.evicted_pages > 0, "{st:?}");
    assert!(st.resident_bytes <= rt.cache_bytes(), "{st:?}");
}

#[test]
fn two_regions_of_one_file_share_the_cache() {
    // Two read-only regions over the same file compete for one small
    // cache; each must keep returning the right bytes.
    let data = random_bytes(FILE_LEN / 2, 7);
    let (_tmp, file) = file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes(CACHE / 2)
        .page_size(16 << 10)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let a = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let b = unsafe { rt.map_file(&file, MapOptions::new().page_size(4 << 10)) }.unwrap();
    let mut rng = Rng::new(8);
    for i in 0..2000 {
        let len = 1 + rng.below(20 << 10);
        let start = rng.below(data.len() - len);
        let m = if i % 2 == 0 { &a } else { &b };
        assert_same(
            &m.as_slice()[start..start + len],
            &data[start..start + len],
            &format!("region {}, read {i}", i % 2),
        );
    }
    assert!(rt.stats().evicted_pages > 0);
    assert!(rt.stats().resident_bytes <= rt.cache_bytes());
    assert_eq!(rt.stats().regions, 2);
}

#[test]
fn page_size_not_a_power_of_two() {
    // 12 KiB pages: a multiple of 4 KiB, so allowed, but regions are then
    // only 4 KiB aligned and 8 MiB is not a whole number of pages.
    run(12 << 10, PolicyKind::Clock, 1, 9);
}
