//! The dirty limit (half the cache) holds for a writer that keeps meeting
//! it, in both fault services. In-thread, a writer waiting at the limit
//! asked for a write-back pass again while one ran; that pass found the
//! pool brought down already, wrote nothing, and was taken for a stuck
//! store (`Pool::writeback_stuck`), which let every writer past the limit
//! for good: 3,899 pages dirty of a limit of 2,048, leaving readers few
//! clean pages to evict.
mod common;

use std::sync::Arc;

use common::{Rng, assert_same, map_store};
use umio::backends::MemoryStore;
use umio::{DirtyTracking, FaultService, Mapping, PrefetchKind, Runtime};

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
        assert!(st.evicted_dirty_pages > 0, "{what}: {st}");
        m.flush().unwrap();
        assert_same(&store.snapshot(), &model, &what);
    }
}
