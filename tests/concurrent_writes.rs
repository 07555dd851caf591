//! Random writes from several threads through one writable mapping, with a
//! cache an eighth of the data: the mapping, the file after `flush`, and the
//! file after `unmap` all equal a model kept in memory. Also: writes racing
//! with flushes lose nothing.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use umio::{MapOptions, Mapping, Runtime};

use common::{Rng, assert_same, random_bytes, rw_file_with};

const DATA_LEN: usize = 4 << 20;
const THREADS: usize = 4;

fn assert_file(path: &Path, want: &[u8], what: &str) {
    let on_disk = std::fs::read(path).unwrap();
    assert_same(&on_disk, want, what);
}

/// Which thread owns byte `pos`: stripes of `stripe` bytes, dealt round
/// robin. `stripe == 1` interleaves single bytes, so every page is written
/// by every thread.
fn owner(pos: usize, stripe: usize) -> usize {
    (pos / stripe) % THREADS
}

/// One round of writes: each thread writes random values at random places
/// of its own stripes, checks now and then that it reads back what it
/// wrote, and returns its model. The models are then merged by ownership.
fn write_round(map: &Mapping, base: &[u8], stripe: usize, writes: usize, seed: u64) -> Vec<u8> {
    let ptr = map.as_ptr() as usize;
    let len = map.len();
    let models: Vec<Vec<u8>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let mut model = base.to_vec();
                sc.spawn(move || {
                    let mut rng = Rng::new(seed * 31 + t as u64);
                    let stripes = len.div_ceil(stripe);
                    let mut last: Option<usize> = None;
                    for i in 0..writes {
                        // A random stripe of ours.
                        let s = rng.below(stripes / THREADS) * THREADS + t;
                        let s_start = s * stripe;
                        if s_start >= len {
                            continue;
                        }
                        let s_end = (s_start + stripe).min(len);
                        let start = s_start + rng.below(s_end - s_start);
                        let n = 1 + rng.below((s_end - start).min(300));
                        let bytes = random_bytes(n, rng.next());
                        debug_assert!((start..start + n).all(|p| owner(p, stripe) == t));
                        // SAFETY: [start, start+n) lies inside the mapping,
                        // which outlives the scope, and only thread t writes
                        // the bytes of its stripes; nobody reads them
                        // meanwhile but thread t.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                bytes.as_ptr(),
                                (ptr as *mut u8).add(start),
                                n,
                            );
                        }
                        model[start..start + n].copy_from_slice(&bytes);
                        if let Some(p) = last.filter(|_| i % 8 == 0) {
                            // SAFETY: p is a byte of ours inside the mapping.
                            let got = unsafe { std::ptr::read_volatile((ptr as *const u8).add(p)) };
                            assert_eq!(
                                got, model[p],
                                "thread {t} reads back its own byte {p} wrong"
                            );
                        }
                        last = Some(start + n - 1);
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (0..len)
        .map(|p| models[owner(p, stripe)][p])
        .collect::<Vec<u8>>()
}

fn run(stripe: usize, page_size: usize, writes: usize) {
    let data = random_bytes(DATA_LEN, 17 + stripe as u64);
    let (tmp, file) = rw_file_with(&data);
    let rt = common::runtime((DATA_LEN / 8) as u64, page_size, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();

    let model = write_round(&map, &data, stripe, writes, 1);
    assert_ne!(model, data, "the round wrote nothing");
    assert_same(map.as_slice(), &model, "mapping after round 1");
    let st = rt.stats();
    assert!(
        st.evicted_dirty_pages + st.limit_written_pages > 0,
        "random writes over 8x the cache wrote back nothing before a flush: {st:?}"
    );
    assert!(st.resident_bytes <= rt.cache_bytes(), "{st:?}");
    assert_eq!(st.write_errors, 0, "{st:?}");

    map.flush().unwrap();
    assert_eq!(map.dirty_pages(), 0, "flush left dirty pages");
    assert_file(tmp.path(), &model, "file after flush");

    // Round 2 on top, then unmap without a flush.
    let model2 = write_round(&map, &model, stripe, writes, 2);
    assert_same(map.as_slice(), &model2, "mapping after round 2");
    map.unmap().unwrap();
    assert_file(tmp.path(), &model2, "file after unmap");
    assert_eq!(rt.stats().regions, 0);
}

#[test]
fn interleaved_bytes_16k_pages() {
    // Every page is written by all four threads.
    run(1, 16 << 10, 3000);
}

#[test]
fn interleaved_bytes_4k_pages() {
    run(1, 4 << 10, 3000);
}

#[test]
fn stripes_crossing_page_boundaries() {
    // 1000-byte stripes: writes of up to 300 bytes cross 4 KiB boundaries.
    run(1000, 4 << 10, 3000);
}

#[test]
fn page_size_not_a_power_of_two() {
    run(1000, 12 << 10, 3000);
}

#[test]
fn writers_evictions_and_a_flushing_thread_together() {
    // Writers under eviction pressure while another thread flushes in a
    // loop: every write must survive, whoever writes its page back.
    let data = random_bytes(DATA_LEN, 99);
    let (tmp, file) = rw_file_with(&data);
    let rt = common::runtime((DATA_LEN / 8) as u64, 16 << 10, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    let done = AtomicBool::new(false);
    let model = std::thread::scope(|sc| {
        let flusher = sc.spawn(|| {
            let mut n = 0u32;
            while !done.load(Ordering::Acquire) {
                map.flush().unwrap();
                n += 1;
            }
            n
        });
        let model = write_round(&map, &data, 7, 3000, 3);
        done.store(true, Ordering::Release);
        assert!(flusher.join().unwrap() > 0);
        model
    });
    assert_same(map.as_slice(), &model, "mapping");
    map.flush().unwrap();
    assert_file(tmp.path(), &model, "file after the last flush");
    map.unmap().unwrap();
    assert_file(tmp.path(), &model, "file after unmap");
}

#[test]
fn writes_racing_with_flushes_are_not_lost() {
    // One thread keeps rewriting counters spread over a few pages while
    // another flushes in a loop: a write landing while its page is being
    // written back must end up in the file too.
    const LEN: usize = 256 << 10;
    let data = vec![0u8; LEN];
    let (tmp, file) = rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(4 << 10)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    let slots: Vec<usize> = (0..16).map(|i| i * (LEN / 16) + 8 * i).collect();
    let ptr = map.as_ptr() as usize;
    let stop = AtomicBool::new(false);
    let flushes = AtomicUsize::new(0);
    let last = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut v = 0u64;
            for round in 1..=20_000u64 {
                v = round;
                for &s in &slots {
                    // SAFETY: s+8 <= LEN and only this thread writes the
                    // mapping while the scope lives.
                    unsafe { std::ptr::write_unaligned((ptr + s) as *mut u64, round) };
                }
                if round == 1 {
                    // Let a whole flush pass over the dirty pages, so that
                    // later rounds write to clean, write-protected pages.
                    let f0 = flushes.load(Ordering::Acquire);
                    while flushes.load(Ordering::Acquire) < f0 + 2 {
                        std::thread::yield_now();
                    }
                }
            }
            stop.store(true, Ordering::Release);
            v
        });
        while !stop.load(Ordering::Acquire) || flushes.load(Ordering::Relaxed) < 10 {
            map.flush().unwrap();
            flushes.fetch_add(1, Ordering::AcqRel);
        }
        writer.join().unwrap()
    });
    for &s in &slots {
        let got = u64::from_le_bytes(map.as_slice()[s..s + 8].try_into().unwrap());
        assert_eq!(got, last, "mapping slot {s}");
    }
    map.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    for &s in &slots {
        let got = u64::from_le_bytes(on_disk[s..s + 8].try_into().unwrap());
        assert_eq!(got, last, "file slot {s} after the final flush");
    }
    assert_same(&on_disk, map.as_slice(), "file vs mapping");
    assert!(
        rt.stats().first_writes() > 0,
        "no write hit a flushed page: {:?}",
        rt.stats()
    );
}
