//! The dirty limit (half the cache) holds for a writer that keeps meeting
//! it, in both fault services. In-thread, a writer waiting at the limit
//! asked for a write-back pass again while one ran; that pass found the
//! pool brought down already, wrote nothing, and was taken for a stuck
//! store (`Pool::writeback_stuck`), which let every writer past the limit
//! for good: 3,899 pages dirty of a limit of 2,048, leaving readers few
//! clean pages to evict. And with asynchronous dirty tracking, a flush
//! after a write made while the limit's write-back held the page has the
//! write.
mod common;

use std::sync::Arc;

use common::{Rng, assert_same, map_store};
use umio::backends::MemoryStore;
use umio::{DirtyTracking, FaultService, Mapping, PrefetchKind, Runtime, Store};

const PAGE: usize = 4096;
const SERVICES: [FaultService; 2] = [FaultService::Fillers, FaultService::InThread];

fn read_modify_write(m: &Mapping, model: &mut [u8], pages: &[usize]) {
    let base = m.as_ptr();
    for &p in pages {
        let at = p * PAGE + 8 * (p % 511);
        // SAFETY: inside the mapping.
        let v = unsafe { (base.add(at) as *const u64).read_volatile() };
        let v = std::hint::black_box(v).wrapping_add(1);
        // SAFETY: as above.
        unsafe { (base.add(at) as *mut u64).write_volatile(v) };
        model[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

#[test]
fn the_dirty_limit_holds_for_a_writer_that_keeps_meeting_it() {
    const CACHE: usize = 16 << 20;
    const LEN: usize = 4 * CACHE;
    let limit = CACHE / 2 / PAGE;
    for service in SERVICES {
        let what = format!("{service:?}");
        let store = Arc::new(MemoryStore::new(vec![0; LEN]));
        let rt = Runtime::builder()
            .cache_bytes(CACHE as u64)
            .page_size(PAGE)
            .fault_service(service)
            .dirty_tracking(DirtyTracking::Sync)
            .build()
            .unwrap();
        let m = map_store(&rt, &store, true, PrefetchKind::None);
        let mut model = vec![0; LEN];
        let mut rng = Rng::new(12);
        let mut most = 0;
        for _ in 0..1024 {
            let pages: Vec<usize> = (0..48).map(|_| rng.below(LEN / PAGE)).collect();
            read_modify_write(&m, &mut model, &pages);
            most = most.max(m.dirty_pages());
        }
        let st = rt.stats();
        assert!(
            most <= limit + 16,
            "{what}: {most} pages dirty, the limit {limit}: {st}"
        );
        assert!(
            st.evicted_dirty_pages + st.limit_written_pages > 0,
            "{what}: {st}"
        );
        m.flush().unwrap();
        assert_same(&store.snapshot(), &model, &what);
    }
}

/// A store whose writes take their bytes when called (as a device reads
/// its buffer when the request starts) and then wait at a gate: a write
/// made to the page meanwhile is not in what the store writes.
struct EarlyCopy {
    inner: MemoryStore,
    gate: common::Gate,
}

impl Store for EarlyCopy {
    fn len(&self) -> Result<u64, umio::StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), umio::StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, umio::StoreError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), umio::StoreError> {
        let copy = buf.to_vec();
        self.gate.pass();
        self.inner.write_at(offset, &copy)
    }
    fn sync(&self) -> Result<(), umio::StoreError> {
        Ok(())
    }
    fn is_writable(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "early-copy"
    }
}

/// Asynchronous dirty tracking: a write to a page that the dirty limit's
/// write-back holds (write-protected, its bytes taken by the store) does
/// not fault; a `flush` called after it must wait for that write-back and
/// then find the write (it used to see the page come back clean and skip
/// it, and return with the write in no store).
#[test]
fn a_flush_after_a_write_during_the_limit_s_write_back_has_the_write() {
    const PAGES: usize = 64;
    let store = Arc::new(EarlyCopy {
        inner: MemoryStore::new(vec![0; PAGES * PAGE]),
        gate: common::Gate::default(),
    });
    let rt = Runtime::builder()
        .cache_bytes((PAGES / 2 * PAGE) as u64)
        .page_size(PAGE)
        .dirty_tracking(DirtyTracking::Async)
        .build()
        .unwrap();
    if rt.dirty_tracking() != DirtyTracking::Async {
        eprintln!("SKIPPED: this kernel has no UFFD_FEATURE_WP_ASYNC");
        return;
    }
    let map = map_store(&rt, &store, true, PrefetchKind::None);
    let base = map.as_ptr();
    // Resident first (read misses): a write miss past the limit would wait
    // for the write-back that the gate holds.
    for p in 0..24 {
        // SAFETY: inside the mapping.
        unsafe { base.add(p * PAGE).read_volatile() };
    }
    // Past the dirty limit (half the cache, 16 pages here) with the gate
    // closed: the limit's write-back takes the first run's bytes and waits.
    store.gate.close();
    for p in 0..24 {
        // SAFETY: inside the mapping.
        unsafe { base.add(p * PAGE).write_volatile(1) };
    }
    assert!(
        store
            .gate
            .wait_for_caller(std::time::Duration::from_secs(120)),
        "no write-back reached the store (hang detector)"
    );
    // Page 0 leads the run held; written again, without a fault.
    // SAFETY: inside the mapping.
    unsafe { base.write_volatile(2) };
    std::thread::scope(|s| {
        let flush = s.spawn(|| map.flush_range(0..PAGE));
        // Let the flush find the page busy (a flush that comes later finds
        // it clean with its write noted, which the old code handled too).
        std::thread::sleep(std::time::Duration::from_millis(200));
        store.gate.open();
        flush.join().unwrap().unwrap();
    });
    let mut byte = [0u8; 1];
    store.inner.read_at(0, &mut byte).unwrap();
    assert_eq!(
        byte[0], 2,
        "the write made during the write-back was flushed"
    );
    drop(map);
}
