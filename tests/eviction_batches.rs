//! Background eviction brings a pool down to its low watermark, not far
//! below it, when a region's pages are larger than the runtime's default
//! page size: the evictor sizes its batches by the pool's pages, not by the
//! default (which it used to do, evicting a 1 MiB-page region whole).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use umio::backends::MemoryStore;
use umio::{MapOptions, PrefetchKind, Runtime};

const MIB: usize = 1 << 20;
/// 64 pages of the region's size.
const CACHE: u64 = 64 << 20;

/// Fills just past the high watermark (90%: 58 of 64 MiB) with 1 MiB
/// pages of a runtime whose default page size is 64 KiB, waits for the
/// evictor to finish, and returns the bytes still resident.
fn resident_after_background_eviction() -> u64 {
    let rt = Runtime::builder()
        .cache_bytes(CACHE)
        .page_size(64 << 10)
        .fillers(2)
        .evictors(1)
        .watermarks(90, 70)
        .prefetch(PrefetchKind::None)
        .build()
        .expect("runtime");
    let store = Arc::new(MemoryStore::new(vec![7u8; 80 * MIB]));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map(
            MapOptions::new()
                .store(store)
                .page_size(MIB)
                .prefetch(PrefetchKind::None),
        )
    }
    .expect("map");
    let mut sum = 0u64;
    for p in 0..59 {
        // SAFETY: p * MIB is inside the 80 MiB mapping.
        sum += u64::from(unsafe { std::ptr::read_volatile(map.as_ptr().add(p * MIB)) });
    }
    assert_eq!(sum, 59 * 7);
    // The evictor wakes on the kick of the fill that crossed the high
    // watermark (or within 100 ms) and stops below the low one.
    // A hang detector of a minute, not a speed check: a loaded machine
    // may keep the evictor off the CPU a while.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = rt.stats();
        if stats.evicted_pages > 0 && stats.resident_bytes <= CACHE * 70 / 100 + MIB as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not brought to the low watermark: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Whatever the batch in flight still evicts, then the final count.
    std::thread::sleep(Duration::from_millis(300));
    rt.stats().resident_bytes
}

#[test]
fn large_pages_are_evicted_to_the_low_watermark_not_below() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(resident_after_background_eviction()));
    let resident = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("the scenario hung or panicked");
    // The low watermark is 44.8 MiB; one batch (at least 16 pages) may
    // take it a little below. Sized by the 64 KiB default, the batch was
    // every resident page.
    assert!(
        resident >= CACHE / 2,
        "evicted to {resident} bytes, far below the low watermark ({} bytes)",
        CACHE * 70 / 100
    );
}
