//! The cache bound changes while the runtime runs: shrinking evicts down to
//! the new bound in the background while threads keep faulting and
//! writing, and no write is lost; growing makes room at once; a bound too
//! small for the pinned pages is refused.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use umio::{Error, MapOptions};

use common::{Rng, random_bytes, rw_file_with};

const MIB: u64 = 1 << 20;
const PAGE: usize = 64 << 10;
const FILE: usize = 128 << 20;
const THREADS: usize = 4;

#[test]
fn shrink_while_four_threads_fault_and_write_then_grow_back() {
    let data = random_bytes(FILE, 1);
    let (tmp, file) = rw_file_with(&data);
    let rt = common::runtime(64 * MIB, PAGE, 2);
    let map = Arc::new(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let base = map.as_ptr() as usize;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (map, stop) = (map.clone(), stop.clone());
            let mut model = data[t * FILE / THREADS..(t + 1) * FILE / THREADS].to_vec();
            std::thread::spawn(move || {
                let _keep = &map;
                let part = FILE / THREADS;
                let mine = base + t * part;
                let mut rng = Rng::new(t as u64 + 10);
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let at = rng.below(part);
                    // SAFETY: within this thread's quarter of the mapping,
                    // which no other thread touches while the map lives.
                    let p = unsafe { (mine as *mut u8).add(at) };
                    if rng.below(2) == 0 {
                        let v = rng.next() as u8;
                        // SAFETY: as above.
                        unsafe { p.write_volatile(v) };
                        model[at] = v;
                    } else {
                        // SAFETY: as above.
                        let got = unsafe { p.read_volatile() };
                        assert_eq!(got, model[at], "thread {t}, byte {at}");
                    }
                    ops += 1;
                }
                (model, ops)
            })
        })
        .collect();

    let wait_for = |bound: u64, what: &str| {
        let start = Instant::now();
        loop {
            let s = rt.stats();
            if s.resident_bytes <= bound {
                return start.elapsed();
            }
            // A hang detector: a loaded machine may take seconds.
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: {} bytes resident a minute after the bound became {bound}",
                s.resident_bytes
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    common::eventually(
        "the cache filled up first",
        Duration::from_millis(10),
        || rt.stats().resident_bytes > 32 * MIB,
    );
    rt.set_cache_bytes(8 * MIB).unwrap();
    assert_eq!(rt.cache_bytes(), 8 * MIB);
    let took = wait_for(8 * MIB, "shrinking");
    eprintln!("64 MiB -> 8 MiB: at the bound after {took:?}");
    let faults = rt.stats().faults;
    common::eventually(
        "faults kept being served",
        Duration::from_millis(10),
        || rt.stats().faults > faults,
    );
    // Counted after the batch that made room returns.
    common::eventually(
        "the shrink's evictions counted",
        Duration::from_millis(10),
        || rt.stats().shrink_evicted_bytes > 0,
    );
    let during = rt.stats();
    assert!(during.resident_bytes <= 8 * MIB);
    assert!(during.shrink_evicted_bytes > 0);
    assert_eq!(during.cache_bytes, 8 * MIB);
    assert!(during.cache_resizes >= 1);

    rt.set_cache_bytes(64 * MIB).unwrap();
    common::eventually("the cache grew again", Duration::from_millis(10), || {
        rt.stats().resident_bytes > 16 * MIB
    });
    stop.store(true, Ordering::Relaxed);
    let mut model = Vec::with_capacity(FILE);
    for w in workers {
        let (part, ops) = w.join().unwrap();
        // Every thread went on faulting and writing throughout (how
        // many operations it managed is the machine's business).
        assert!(ops > 0, "a thread made no progress");
        model.extend_from_slice(&part);
    }
    common::assert_same(map.as_slice(), &model, "the mapping");
    map.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    common::assert_same(&on_disk, &model, "the file");
}

#[test]
fn a_bound_too_small_for_the_pinned_pages_is_refused() {
    let data = random_bytes(64 << 20, 2);
    let (_tmp, file) = rw_file_with(&data);
    let rt = common::runtime(64 * MIB, PAGE, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    map.pin(0..(20 << 20)).unwrap();
    let err = rt.set_cache_bytes(32 * MIB).unwrap_err();
    assert!(
        matches!(err, Error::BelowPinned { pinned, requested } if pinned == 20 * MIB && requested == 32 * MIB),
        "{err:?}"
    );
    assert_eq!(err.errno(), libc::EBUSY);
    assert_eq!(rt.cache_bytes(), 64 * MIB, "nothing changed");
    assert!(matches!(
        rt.set_cache_bytes(3 * PAGE as u64),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        rt.set_huge_cache_bytes(64 * MIB),
        Err(Error::InvalidArgument(_))
    ));
    rt.set_cache_bytes(48 * MIB).unwrap();
    map.unpin(0..(20 << 20)).unwrap();
    rt.set_cache_bytes(8 * MIB).unwrap();
    // Pinned pages stay readable through it all.
    common::assert_same(&map.as_slice()[..1 << 20], &data[..1 << 20], "pinned pages");
}
