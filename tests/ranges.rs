//! Range operations: pinning, partial unmap, fixed addresses, per-region
//! counters.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use umio::backends::{MemoryStore, Store};
use umio::{Error, MapOptions, PrefetchKind, Runtime};

mod common;
use common::rw_file_with as file_with;
use common::{Hooked, StoreHooks};

const PAGE: usize = 4096;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn runtime(cache_pages: u64) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache_pages * PAGE as u64)
        .page_size(PAGE)
        .fillers(2)
        .prefetch(PrefetchKind::None)
        .build()
        .unwrap()
}

/// A memory store that logs the offset of every read.
#[derive(Default)]
struct ReadLog {
    offsets: std::sync::Mutex<Vec<u64>>,
}

impl StoreHooks for ReadLog {
    fn before_read(&self, offset: u64) {
        self.offsets.lock().unwrap().push(offset);
    }
}

/// Whether `[addr, addr+len)` is mapped in this process.
fn is_mapped(addr: usize, len: usize) -> bool {
    // SAFETY: MADV_NORMAL changes no contents; on an unmapped range it
    // fails with ENOMEM and does nothing.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_NORMAL) == 0 }
}

#[test]
fn pinned_pages_survive_eviction_and_their_writes_are_written_back() {
    let data = pattern(256 * PAGE, 1);
    let store = Hooked::new(data.clone(), "read-log", ReadLog::default());
    let rt = runtime(64);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map(MapOptions::new().store(store.clone()).writable(true)) }.unwrap();
    map.pin(0..8 * PAGE).unwrap();
    for p in 0..8 {
        assert!(map.is_resident(p * PAGE), "pin makes pages resident");
    }
    // SAFETY: in bounds, the mapping is writable and lives.
    unsafe { map.as_ptr().add(3 * PAGE).write_volatile(0xAB) };
    store.offsets.lock().unwrap().clear();
    let bytes_before = rt.stats().bytes_read;
    // Stream the rest of the file through the cache several times.
    for _ in 0..3 {
        for p in 8..256 {
            assert_eq!(map.as_slice()[p * PAGE + 1], data[p * PAGE + 1]);
        }
    }
    assert!(rt.stats().evicted_pages > 200, "{:?}", rt.stats());
    for p in 0..8 {
        assert!(map.is_resident(p * PAGE), "pinned page {p} was evicted");
        assert_eq!(map.as_slice()[p * PAGE + 7], data[p * PAGE + 7]);
    }
    let offsets = store.offsets.lock().unwrap().clone();
    // One read per page, or fewer where read-ahead reads runs of pages.
    let read = rt.stats().bytes_read - bytes_before;
    assert!(
        read >= 3 * 248 * PAGE as u64,
        "every pass read the other pages: {read} bytes"
    );
    assert!(
        offsets.iter().all(|&o| o >= 8 * PAGE as u64),
        "a pinned page was read again"
    );
    map.flush().unwrap();
    assert_eq!(store.memory().snapshot()[3 * PAGE], 0xAB);
    // Unpinned, they go like any page.
    map.unpin(0..8 * PAGE).unwrap();
    for p in 8..256 {
        std::hint::black_box(map.as_slice()[p * PAGE]);
    }
    assert!((0..8).any(|p| !map.is_resident(p * PAGE)));
}

#[test]
fn pins_hold_at_most_half_the_cache() {
    let data = pattern(128 * PAGE, 2);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(data));
    let rt = runtime(64);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map(MapOptions::new().store(store)) }.unwrap();
    map.pin(0..32 * PAGE).unwrap();
    let e = map.pin(32 * PAGE..33 * PAGE).unwrap_err();
    assert!(matches!(e, Error::PinLimit), "{e}");
    assert_eq!(e.errno(), libc::ENOMEM);
    assert!(!map.is_resident(32 * PAGE), "a refused pin fills nothing");
    map.unpin(0..16 * PAGE).unwrap();
    map.pin(32 * PAGE..48 * PAGE).unwrap();
    map.unmap().unwrap();
    // Unmapping gave the pins back: a new region can pin half the cache.
    let store2: Arc<dyn Store> = Arc::new(MemoryStore::new(pattern(64 * PAGE, 3)));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map2 = unsafe { rt.map(MapOptions::new().store(store2)) }.unwrap();
    map2.pin(0..32 * PAGE).unwrap();
}

#[test]
fn unmap_range_unmaps_the_range_writes_it_back_and_keeps_the_rest() {
    let data = pattern(64 * PAGE, 4);
    let (tmp, file) = file_with(&data);
    let rt = runtime(32);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    map.as_mut_slice()[20 * PAGE..24 * PAGE].fill(0x5A);
    map.as_mut_slice()[40 * PAGE] = 0x11;
    let mut map = map.into_mapping();
    let base = map.as_ptr() as usize;
    map.unmap_range(16 * PAGE..32 * PAGE).unwrap();
    assert!(
        !is_mapped(base + 16 * PAGE, 16 * PAGE),
        "the range is unmapped"
    );
    assert!(is_mapped(base, 16 * PAGE) && is_mapped(base + 32 * PAGE, 32 * PAGE));
    assert_eq!(map.mapped_bytes(), 48 * PAGE);
    let mut disk = vec![0u8; 4 * PAGE];
    tmp.as_file()
        .read_exact_at(&mut disk, 20 * PAGE as u64)
        .unwrap();
    assert!(
        disk.iter().all(|&b| b == 0x5A),
        "the range was written back"
    );
    // The rest still reads and writes.
    // SAFETY: pages 0..16 and 32..64 are still mapped.
    unsafe {
        assert_eq!(*map.as_ptr().add(5 * PAGE + 3), data[5 * PAGE + 3]);
        assert_eq!(*map.as_ptr().add(40 * PAGE), 0x11);
        map.as_ptr().add(50 * PAGE).write(0x22);
    }
    // Range operations on the hole are refused; on the rest they work.
    for e in [
        map.unmap_range(16 * PAGE..32 * PAGE).unwrap_err(),
        map.unmap_range(8 * PAGE..20 * PAGE).unwrap_err(),
        map.prefetch(17 * PAGE..18 * PAGE).unwrap_err(),
        map.pin(30 * PAGE..34 * PAGE).unwrap_err(),
    ] {
        assert!(matches!(e, Error::NotMapped), "{e}");
        assert_eq!(e.errno(), libc::EINVAL);
    }
    let e = map.into_mut().unwrap_err();
    assert!(matches!(e.error(), Error::NotMapped), "{e}");
    let mut map = e.into_mapping();
    map.flush().unwrap();
    let mut b = [0u8; 1];
    tmp.as_file()
        .read_exact_at(&mut b, 50 * PAGE as u64)
        .unwrap();
    assert_eq!(b[0], 0x22);
    // Unmapping the rest, piece by piece, unmaps the region.
    map.unmap_range(0..16 * PAGE).unwrap();
    assert_eq!(rt.stats().regions, 1);
    map.unmap_range(32 * PAGE..64 * PAGE).unwrap();
    assert_eq!(map.mapped_bytes(), 0);
    assert_eq!(rt.stats().regions, 0);
    assert!(!is_mapped(base, PAGE) && !is_mapped(base + 63 * PAGE, PAGE));
    assert!(matches!(map.unmap_range(0..PAGE), Err(Error::NotMapped)));
    drop(map);
    assert_eq!(rt.stats().regions, 0);
}

#[test]
fn unmap_range_checks_alignment() {
    let (_tmp, file) = file_with(&pattern(10 * PAGE + 100, 5));
    let rt = runtime(32);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    for r in [1..PAGE, 0..PAGE + 1, PAGE..PAGE, 0..11 * PAGE] {
        let e = map.unmap_range(r.clone()).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{r:?}: {e}");
    }
    // The partial last page ends at the mapping's end.
    map.unmap_range(10 * PAGE..10 * PAGE + 100).unwrap();
    assert_eq!(map.mapped_bytes(), 10 * PAGE);
}

#[test]
fn fixed_address_maps_there_and_refuses_overlap() {
    let data = pattern(16 * PAGE, 6);
    let (_tmp, file) = file_with(&data);
    let rt = runtime(32);
    // Reserve an address range to map over.
    // SAFETY: a fresh anonymous reservation that nothing else uses.
    let hole = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            32 * PAGE,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(hole, libc::MAP_FAILED);
    let addr = hole as usize + 4 * PAGE;
    // SAFETY: the reservation is ours and unused.
    let opts = unsafe { MapOptions::new().fixed_address(addr) };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, opts) }.unwrap();
    assert_eq!(map.as_ptr() as usize, addr);
    assert_eq!(map.as_slice(), &data[..]);
    let over = MapOptions::new().fixed_address_noreplace(addr + 8 * PAGE);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map_file(&file, over) }.unwrap_err();
    assert!(matches!(e, Error::Overlap), "{e}");
    assert_eq!(e.errno(), libc::EEXIST);
    // SAFETY: as above.
    let odd = unsafe { MapOptions::new().fixed_address(addr + 1) };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map_file(&file, odd) }.unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    map.unmap().unwrap();
    // The rest of the reservation, around the mapping's range: that range
    // is unmapped now, and another test's thread may have mapped into it
    // (unmapping the whole reservation killed such a thread with SIGSEGV
    // in a loaded run).
    // SAFETY: the two pieces of our reservation that no mapping replaced.
    unsafe {
        libc::munmap(hole, 4 * PAGE);
        libc::munmap(hole.cast::<u8>().add(20 * PAGE).cast(), 12 * PAGE);
    }
}

#[test]
fn region_stats_count_this_region_only() {
    let data = pattern(32 * PAGE, 7);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(data.clone()));
    let rt = runtime(64);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let a = unsafe { rt.map(MapOptions::new().store(store.clone()).writable(true)) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let b = unsafe { rt.map(MapOptions::new().store(store)) }.unwrap();
    for p in 0..10 {
        assert_eq!(a.as_slice()[p * PAGE], data[p * PAGE]);
    }
    // SAFETY: in bounds of a writable, live mapping; page 0 is clean.
    unsafe { a.as_ptr().write_volatile(9) };
    a.flush().unwrap();
    std::hint::black_box(b.as_slice()[0]);
    let s = a.stats();
    assert_eq!(s.fills, 10, "{s:?}");
    assert_eq!(s.bytes_read, 10 * PAGE as u64);
    if rt.dirty_tracking() == umio::DirtyTracking::Sync {
        assert!(s.faults >= 11, "{s:?}");
        assert!(s.hits >= 1, "the write to a clean page is a hit: {s:?}");
    } else {
        // The kernel resolves the first write itself: no fault to count.
        assert!(s.faults >= 10, "{s:?}");
    }
    assert_eq!((s.writebacks, s.bytes_written), (1, PAGE as u64));
    let t = b.stats();
    assert_eq!((t.fills, t.writebacks), (1, 0), "{t:?}");
}
