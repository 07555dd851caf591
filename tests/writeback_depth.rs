//! Write-back at the store's depth: dirty pages leave in batches of
//! several writes, both when the evictors make room and at `flush`, so a
//! store with a queue (io_uring) has them in flight together. Both fault
//! services (in-thread in a child process: the service installs a SIGBUS
//! handler).

mod common;

use std::sync::Mutex;

use common::{Batches, Hooked, StoreHooks};
use umio::backends::IoRequest;
use umio::{FaultService, PrefetchKind, Runtime, Store};

const PS: usize = 4096;
const PAGES: usize = 2048;
const DEPTH: usize = 8;

/// The hooks of a memory store of depth [`DEPTH`] that records how many
/// writes each batch holds (a write of its own: a batch of one).
#[derive(Default)]
struct Recording {
    write_batches: Mutex<Vec<usize>>,
}

impl StoreHooks for Recording {
    fn before_write(&self, _offset: u64) {
        self.write_batches.lock().unwrap().push(1);
    }
    fn before_submit(&self, batch: &[IoRequest<'_>]) {
        let writes = batch.iter().filter(|r| r.is_write()).count();
        if writes > 0 {
            self.write_batches.lock().unwrap().push(writes);
        }
    }
    fn batches(&self) -> Batches {
        Batches::PastTheHooks
    }
    fn queue_depth(&self) -> usize {
        DEPTH
    }
}

fn most_writes(store: &Recording) -> usize {
    let mut b = store.write_batches.lock().unwrap();
    let most = b.iter().copied().max().unwrap_or(0);
    b.clear();
    most
}

fn dirty_pages_leave_in_batches(service: FaultService) {
    let store = Hooked::new(vec![0; PAGES * PS], "recording", Recording::default());
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(PS)
        .fillers(2)
        .fault_service(service)
        .build()
        .unwrap();
    let m = common::map_store(&rt, &store, true, PrefetchKind::None);
    let base = m.as_ptr();
    // Every other page, four times the cache: the evictors write dirty
    // victims back (no two adjacent: a write each).
    let mut rng = common::Rng::new(11);
    let mut want = vec![0u8; PAGES];
    for _ in 0..4 * 256 {
        let p = 2 * rng.below(PAGES / 2);
        want[p] = want[p].wrapping_add(1);
        // SAFETY: inside the mapping.
        unsafe { *base.add(p * PS + 7) = want[p] };
    }
    let evicting = most_writes(&store);
    m.flush().unwrap();
    let flushing = most_writes(&store);
    for (p, &v) in want.iter().enumerate() {
        let mut b = [0u8; 1];
        store.memory().read_at((p * PS + 7) as u64, &mut b).unwrap();
        assert_eq!(b[0], v, "page {p} in the store after flush");
    }
    assert!(
        evicting > 1,
        "{}: eviction wrote dirty pages one write per batch",
        service.name()
    );
    assert!(
        flushing > 1,
        "{}: flush wrote dirty pages one write per batch",
        service.name()
    );
}

#[test]
fn dirty_pages_leave_in_batches_of_several_writes() {
    common::both_services(
        "dirty_pages_leave_in_batches_of_several_writes",
        "UMIO_WB_CHILD",
        dirty_pages_leave_in_batches,
    );
}
