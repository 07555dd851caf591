//! Torture: mixed reads and writes from several threads over several
//! regions (different page sizes, two of them sharing one file), with a
//! cache an eighth of the data, continuous eviction and write-back and
//! explicit flushes, checked against a model in memory and in the files.
//!
//! The suite runs a short version. The full one (10 million operations) is
//! `cargo test --release --test torture -- --ignored`.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use umio::{MapOptions, Mapping, PolicyKind, Runtime};

mod common;
use common::{Rng, assert_same, random_bytes, rw_file_with};

/// Each thread owns the 8-byte words whose index is its id modulo the
/// thread count, in every region: its reads of its own words must see its
/// last writes exactly, whatever the eviction and write-back do.
const THREADS: usize = 4;
const WORD: usize = 8;

struct Setup {
    rt: Runtime,
    maps: Vec<Mapping>,
    /// File, offset in it, and initial bytes of each region.
    backing: Vec<(Arc<std::fs::File>, u64, Vec<u8>)>,
    _files: Vec<tempfile::NamedTempFile>,
}

fn setup(policy: PolicyKind) -> Setup {
    common::log_to_stderr();
    // Three regions: 2 MiB at 4 KiB pages, 1 MiB at 16 KiB pages over the
    // first half of a file whose second half is 1 MiB at 64 KiB pages.
    let a_data = random_bytes(2 << 20, 1);
    let b_data = random_bytes(2 << 20, 2);
    let (a_tmp, a_file) = rw_file_with(&a_data);
    let (b_tmp, b_file) = rw_file_with(&b_data);
    let (a_file, b_file) = (Arc::new(a_file), Arc::new(b_file));
    let total = 4usize << 20;
    let rt = Runtime::builder()
        .cache_bytes(total as u64 / 8)
        .page_size(4096)
        .fillers(2)
        .eviction(policy)
        .build()
        .unwrap();
    // (file, offset, length, page size, initial bytes)
    type Spec<'a> = (&'a Arc<std::fs::File>, u64, usize, usize, &'a [u8]);
    let specs: [Spec; 3] = [
        (&a_file, 0, 2 << 20, 4 << 10, &a_data[..]),
        (&b_file, 0, 1 << 20, 16 << 10, &b_data[..1 << 20]),
        (&b_file, 1 << 20, 1 << 20, 64 << 10, &b_data[1 << 20..]),
    ];
    let mut maps = Vec::new();
    let mut backing = Vec::new();
    for (file, offset, len, ps, data) in specs {
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe {
            rt.map_file(
                file,
                MapOptions::new()
                    .offset(offset)
                    .len(len)
                    .page_size(ps)
                    .writable(true),
            )
        }
        .unwrap();
        maps.push(map);
        backing.push((file.clone(), offset, data.to_vec()));
    }
    Setup {
        rt,
        maps,
        backing,
        _files: vec![a_tmp, b_tmp],
    }
}

/// Runs `ops` operations per thread; returns the model of every region.
fn torture(policy: PolicyKind, ops: usize) {
    common::log_to_stderr();
    let s = setup(policy);
    let model: Vec<Vec<u8>> = s.backing.iter().map(|b| b.2.clone()).collect();
    let done = AtomicBool::new(false);
    let flushes = AtomicU64::new(0);
    let models: Vec<Vec<Vec<u8>>> = std::thread::scope(|sc| {
        // A flusher: explicit flushes while the workers run.
        let flusher = sc.spawn(|| {
            let mut i = 0;
            while !done.load(Ordering::Acquire) {
                s.maps[i % s.maps.len()].flush().unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (maps, mut model) = (&s.maps, model.clone());
                sc.spawn(move || {
                    let mut rng = Rng::new(100 + t as u64);
                    // A hot window that drifts, plus uniform accesses: the
                    // cache keeps evicting, and re-reads hit both resident
                    // and evicted pages.
                    let mut hot = 0usize;
                    for op in 0..ops {
                        let r = rng.below(maps.len());
                        let words = maps[r].len() / WORD;
                        let mine = words / THREADS;
                        let k = if rng.below(10) < 8 {
                            (hot + rng.below(256)) % mine
                        } else {
                            rng.below(mine)
                        };
                        if op % 1024 == 0 {
                            hot = rng.below(mine);
                        }
                        let off = (k * THREADS + t) * WORD;
                        let p = maps[r].as_ptr();
                        if rng.below(3) == 0 {
                            let v = rng.next().to_le_bytes();
                            // SAFETY: off + 8 <= len; this thread alone
                            // writes these bytes; the mapping is writable.
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p.add(off), WORD) };
                            model[r][off..off + WORD].copy_from_slice(&v);
                        } else {
                            let mut got = [0u8; WORD];
                            // SAFETY: off + 8 <= len; read of our own words.
                            unsafe {
                                std::ptr::copy_nonoverlapping(p.add(off), got.as_mut_ptr(), WORD)
                            };
                            assert_eq!(
                                got,
                                model[r][off..off + WORD],
                                "thread {t} op {op}: region {r} offset {off}"
                            );
                        }
                    }
                    model
                })
            })
            .collect();
        let models = workers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        flusher.join().unwrap();
        models
    });
    // After every phase: every resident page is one the eviction policy
    // can take (a page it lost track of would stay resident for good).
    s.rt.check_policy().expect("after the workers");
    // Merge: each thread's words from its own model.
    let mut merged = model;
    for (t, m) in models.iter().enumerate() {
        for (r, region) in merged.iter_mut().enumerate() {
            for k in (t * WORD..region.len()).step_by(THREADS * WORD) {
                region[k..k + WORD].copy_from_slice(&m[r][k..k + WORD]);
            }
        }
    }
    let st = s.rt.stats();
    eprintln!(
        "{st}\nmoved victims {}, unmoved {}",
        st.moved_victims, st.unmoved_victims
    );
    assert!(
        st.evicted_pages > 0 && st.evicted_dirty_pages + st.limit_written_pages > 0,
        "{st:?}"
    );
    assert!(flushes.load(Ordering::Relaxed) > 0);
    for (r, map) in s.maps.iter().enumerate() {
        assert_same(map.as_slice(), &merged[r], &format!("region {r} in memory"));
    }
    // Pages nobody uses any more must leave the cache under pressure: a
    // resident page the eviction policy lost track of would stay for good.
    s.maps.iter().for_each(|m| m.flush().unwrap());
    s.rt.check_policy().expect("after the flush");
    let other: Arc<dyn umio::Store> =
        Arc::new(umio::backends::MemoryStore::new(vec![7u8; 4 << 20]));
    let scan =
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { s.rt.map(MapOptions::new().store(other).page_size(4096)) }
            .unwrap();
    for _ in 0..2 {
        for i in (0..scan.len()).step_by(4096) {
            assert_eq!(std::hint::black_box(scan.as_slice()[i]), 7);
        }
    }
    s.rt.check_policy().expect("after the scans");
    let stuck: usize = s.maps.iter().map(|m| m.resident_pages()).sum();
    assert_eq!(
        stuck, 0,
        "pages of idle regions still resident after scans of 8x the cache"
    );
    scan.unmap().unwrap();
    for map in s.maps {
        map.unmap().unwrap();
    }
    for (r, (file, offset, _)) in s.backing.iter().enumerate() {
        let mut disk = vec![0u8; merged[r].len()];
        file.read_exact_at(&mut disk, *offset).unwrap();
        assert_same(&disk, &merged[r], &format!("region {r} in the file"));
    }
}

#[test]
fn torture_short_clock() {
    torture(PolicyKind::Clock, 60_000);
}

#[test]
fn torture_short_fifo() {
    torture(PolicyKind::Fifo, 60_000);
}

/// 10 million operations in all (4 threads x 2.5 million).
#[test]
#[ignore = "long: run with --release --ignored"]
fn torture_full() {
    torture(PolicyKind::Clock, 2_500_000);
}
