//! Write-back at the store's depth: dirty pages leave in batches of
//! several writes, both when the evictors make room and at `flush`, so a
//! store with a queue (io_uring) has them in flight together. Both fault
//! services (in-thread in a child process: the service installs a SIGBUS
//! handler).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// A flush's batches hold several times the store's depth of writes (the
/// store keeps its queue full through a batch, which drains only at its
/// end), not one depth's worth each. The cache holds every page written:
/// nothing is evicted, every dirty page is the flush's. The flush runs in
/// the caller's thread, whatever the fault service.
#[test]
fn flush_batches_hold_several_store_depths() {
    let store = Hooked::new(vec![0; PAGES * PS], "recording", Recording::default());
    let rt = Runtime::builder()
        .cache_bytes((4 * PAGES * PS) as u64)
        .page_size(PS)
        .build()
        .unwrap();
    let m = common::map_store(&rt, &store, true, PrefetchKind::None);
    let base = m.as_ptr();
    // Every other page of the first 512 (no two adjacent: a write each).
    for p in (0..512).step_by(2) {
        // SAFETY: inside the mapping.
        unsafe { *base.add(p * PS + 5) = 1 + (p % 200) as u8 };
    }
    assert_eq!(m.dirty_pages(), 256);
    m.flush().unwrap();
    let batches = store.write_batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), 256, "{batches:?}");
    assert!(
        batches.iter().all(|&n| n > DEPTH) || batches.len() == 1,
        "flush batches of at most the store's depth ({DEPTH}): {batches:?}"
    );
    for p in (0..512).step_by(2) {
        let mut b = [0u8; 1];
        store.memory().read_at((p * PS + 5) as u64, &mut b).unwrap();
        assert_eq!(b[0], 1 + (p % 200) as u8, "page {p}");
    }
}

#[test]
fn dirty_pages_leave_in_batches_of_several_writes() {
    common::both_services(
        "dirty_pages_leave_in_batches_of_several_writes",
        "UMIO_WB_CHILD",
        dirty_pages_leave_in_batches,
    );
}

/// The hooks of a memory store whose batches of writes each take
/// [`SLOW_BATCH`] (the second one until the writer of
/// [`parked_writers_go_on_while_the_pass_writes`] makes progress, or
/// [`PROGRESS_WAIT`]), and record how far that writer got during each.
struct Slow {
    progress: Arc<AtomicUsize>,
    /// Per batch of writes: the writer's progress when it started and ended.
    batches: Mutex<Vec<(usize, usize)>>,
}

const SLOW_BATCH: Duration = Duration::from_millis(300);
/// A hang detector, not a speed check: how long the second batch waits for
/// the writer's progress.
const PROGRESS_WAIT: Duration = Duration::from_secs(20);

impl StoreHooks for Slow {
    fn before_submit(&self, batch: &[IoRequest<'_>]) {
        if !batch.iter().any(|r| r.is_write()) {
            return;
        }
        let start = self.progress.load(Relaxed);
        std::thread::sleep(SLOW_BATCH);
        if self.batches.lock().unwrap().len() == 1 {
            let t = Instant::now();
            while self.progress.load(Relaxed) == start && t.elapsed() < PROGRESS_WAIT {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let end = self.progress.load(Relaxed);
        self.batches.lock().unwrap().push((start, end));
    }
    fn batches(&self) -> Batches {
        Batches::PastTheHooks
    }
    fn queue_depth(&self) -> usize {
        DEPTH
    }
}

/// A writer the fillers park at the dirty limit goes on as soon as the
/// evictors' write-back has brought the dirty pages under the limit (after
/// its first piece), not once the whole pass (down to half the limit) is
/// written: it makes progress while the pass's second piece is written.
#[test]
fn parked_writers_go_on_while_the_pass_writes() {
    // 32 MiB of cache: a dirty limit of 16 MiB, a pass down to 8 MiB in
    // pieces of 4 MiB (one write each: the pages are contiguous).
    const CACHE: usize = 32 << 20;
    const LEN: usize = 2 * CACHE;
    let progress = Arc::new(AtomicUsize::new(0));
    let store = Hooked::new(
        vec![0; LEN],
        "slow",
        Slow {
            progress: progress.clone(),
            batches: Mutex::new(Vec::new()),
        },
    );
    let rt = Runtime::builder()
        .cache_bytes(CACHE as u64)
        .page_size(PS)
        .fault_service(FaultService::Fillers)
        .dirty_tracking(umio::DirtyTracking::Sync)
        .build()
        .unwrap();
    let m = common::map_store(&rt, &store, true, PrefetchKind::None);
    let base = m.as_ptr();
    let mut written = 0;
    for p in 0..LEN / PS {
        if store.batches.lock().unwrap().len() >= 2 {
            break;
        }
        // SAFETY: inside the mapping.
        unsafe { *base.add(p * PS + 3) = 1 + (p % 251) as u8 };
        written = p + 1;
        progress.store(written, Relaxed);
    }
    let batches = store.batches.lock().unwrap().clone();
    assert!(batches.len() >= 2, "{batches:?}");
    assert!(
        written > CACHE / 2 / PS,
        "the writer stopped before the dirty limit: {written} pages"
    );
    let (start, end) = batches[1];
    assert!(
        end > start,
        "the writer made no progress while the pass's second piece was written \
         ({batches:?}): woken only at the end of the pass"
    );
    m.flush().unwrap();
    for p in 0..written {
        let mut b = [0u8; 1];
        store.memory().read_at((p * PS + 3) as u64, &mut b).unwrap();
        assert_eq!(b[0], 1 + (p % 251) as u8, "page {p}");
    }
}
