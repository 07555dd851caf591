//! Hints at the store's depth: a batch of hinted pages reaches the store
//! as one submission of up to its `queue_depth` reads, a page touched
//! while its hinted read is in flight waits for that read (one store read,
//! not two), and a hint larger than the cache leaves the pages the
//! application is using in it. Both fault services.
//!
//! The in-thread service installs a SIGBUS handler: its runs are in a
//! child process (this binary, re-run on one test with `UMIO_HINT_CHILD`
//! set), with a generous deadline that only catches a hang.

mod common;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{Batches, Hooked, StoreHooks};
use umio::backends::IoRequest;
use umio::{
    Advice, Fault, FaultKind, FaultService, FetchList, MapOptions, Mapping, PrefetchKind,
    Prefetcher, Runtime,
};

const PS: usize = 4096;
const DEPTH: usize = 32;

/// The byte at `i` of the store.
fn byte(i: usize) -> u8 {
    (i / PS) as u8 ^ (i as u8).wrapping_mul(7)
}

/// The hooks of a store of depth [`DEPTH`] that records each batch
/// submitted, each single read, the reads of each page, and whose batches
/// wait while its gate is closed (then read past the hooks).
#[derive(Default)]
struct Recording {
    log: Mutex<Log>,
    changed: Condvar,
}

type RecordingStore = Hooked<Recording>;

#[derive(Default)]
struct Log {
    /// Sizes of the `submit` batches, in order.
    batches: Vec<usize>,
    /// `read_at` calls (a miss's own read).
    single: usize,
    /// Reads of each page (store offset / PS), batched or single.
    per_page: HashMap<usize, usize>,
    /// Pages read in batches.
    batched_pages: usize,
    /// While true, a batch waits before it reads.
    gate_closed: bool,
    /// Batches waiting at the gate.
    waiting: usize,
}

impl Recording {
    fn new(pages: usize) -> Arc<RecordingStore> {
        Hooked::read_only(
            (0..pages * PS).map(byte).collect(),
            "recording",
            Recording::default(),
        )
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap()
    }

    fn set_gate(&self, closed: bool) {
        self.log().gate_closed = closed;
        self.changed.notify_all();
    }

    /// Closes the gate until the returned guard drops: a failed check
    /// opens it again on its way out, so the runtime can shut down and
    /// the test fails instead of hanging.
    fn closed_gate(&self) -> GateGuard<'_> {
        self.set_gate(true);
        GateGuard(self)
    }

    /// Waits (up to 120 s: a hang) for `cond` on the log.
    fn wait_for(&self, what: &str, cond: impl Fn(&Log) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut log = self.log();
        while !cond(&log) {
            assert!(Instant::now() < deadline, "hung waiting for {what}");
            log = self
                .changed
                .wait_timeout(log, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }

    /// Pages read in batches so far.
    fn batched_pages(&self) -> usize {
        self.log().batched_pages
    }
}

impl StoreHooks for Recording {
    fn before_read(&self, offset: u64) {
        {
            let mut log = self.log();
            log.single += 1;
            *log.per_page.entry(offset as usize / PS).or_default() += 1;
        }
        self.changed.notify_all();
    }
    fn before_submit(&self, batch: &[IoRequest<'_>]) {
        {
            let mut log = self.log();
            log.waiting += 1;
            self.changed.notify_all();
            while log.gate_closed {
                log = self.changed.wait(log).unwrap();
            }
            log.waiting -= 1;
            log.batches.push(batch.len());
            for req in batch.iter() {
                for p in
                    req.offset() as usize / PS..(req.offset() as usize + req.len()).div_ceil(PS)
                {
                    *log.per_page.entry(p).or_default() += 1;
                    log.batched_pages += 1;
                }
            }
        }
        self.changed.notify_all();
    }
    /// A batch's reads are not `read_at` calls of their own: past the
    /// hooks, counted by `before_submit` alone.
    fn batches(&self) -> Batches {
        Batches::PastTheHooks
    }
    fn queue_depth(&self) -> usize {
        DEPTH
    }
}

/// Opens the gate when dropped.
struct GateGuard<'a>(&'a Recording);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.0.set_gate(false);
    }
}

fn runtime(service: FaultService, cache_bytes: u64) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(PS)
        .fillers(2)
        .fault_service(service)
        .build()
        .unwrap()
}

fn map(
    rt: &Runtime,
    store: &Arc<RecordingStore>,
    prefetcher: Option<Arc<dyn Prefetcher>>,
) -> Mapping {
    let mut opts = MapOptions::new()
        .store(store.clone())
        .prefetch(PrefetchKind::None);
    if let Some(p) = prefetcher {
        opts = opts.prefetcher(p);
    }
    // SAFETY: nothing else reaches the store.
    unsafe { rt.map(opts) }.unwrap()
}

/// Reads byte `at` of the mapping through a volatile load (a fault if the
/// page is missing) and checks it.
fn touch(map: &Mapping, at: usize) {
    assert!(at < map.len());
    // SAFETY: inside the mapping; volatile so that the access happens.
    let got = unsafe { std::ptr::read_volatile(map.as_ptr().add(at)) };
    assert_eq!(got, byte(at), "byte {at}");
}

/// `n` distinct scattered pages of `pages`, out of order.
fn scattered(n: usize, pages: usize, salt: usize) -> Vec<usize> {
    // An odd multiplier modulo a power of two is a permutation.
    assert!(pages.is_power_of_two());
    (0..n).map(|k| (k * 2481 + salt) % pages).collect()
}

fn page_ranges(pages: &[usize]) -> Vec<Range<usize>> {
    pages.iter().map(|p| p * PS..p * PS + PS).collect()
}

/// Runs `body` here for the fillers; for the in-thread service, in a
/// child process running test `name` alone.
fn both_services(name: &str, body: fn(FaultService)) {
    common::both_services(name, "UMIO_HINT_CHILD", body);
}

/// Asks for `pages` on every miss (at most `FetchList::CAPACITY`).
struct Scatter(Vec<usize>);

impl Prefetcher for Scatter {
    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        if fault.kind == FaultKind::Miss {
            for &p in &self.0 {
                fetch.push(p as u64..p as u64 + 1);
            }
        }
    }
}

fn every_hint_reaches_the_store_as_one_batch_at_its_depth(service: FaultService) {
    const PAGES: usize = 4096;
    let rt = runtime(service, 8 << 20);
    // prefetch_ranges: 32 scattered pages, one of them twice.
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    let mut pages = scattered(DEPTH, PAGES, 5);
    pages.push(pages[7]);
    m.prefetch_ranges(&page_ranges(&pages)).unwrap();
    store.wait_for("32 hinted reads", |l| {
        l.batches.iter().sum::<usize>() >= DEPTH
    });
    for &p in &pages {
        touch(&m, p * PS + 1);
    }
    assert_eq!(store.log().batches, [DEPTH], "prefetch_ranges");
    assert_eq!(store.log().single, 0, "the hinted pages were resident");
    drop(m);

    // Advice::WillNeed of a range whose every other page is resident: 32
    // runs of one page, one batch.
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    for k in 0..DEPTH {
        touch(&m, (100 + 2 * k) * PS);
    }
    assert_eq!(store.log().single, DEPTH);
    m.advise(100 * PS..(100 + 2 * DEPTH) * PS, Advice::WillNeed)
        .unwrap();
    store.wait_for("32 advised reads", |l| {
        l.batches.iter().sum::<usize>() >= DEPTH
    });
    for k in 0..DEPTH {
        touch(&m, (101 + 2 * k) * PS);
    }
    assert_eq!(store.log().batches, [DEPTH], "Advice::WillNeed");
    assert_eq!(store.log().single, DEPTH, "no miss on an advised page");
    drop(m);

    // A prefetcher's output: 16 scattered pages after a miss.
    let store = Recording::new(PAGES);
    let asked = scattered(FetchList::CAPACITY, PAGES, 9);
    let m = map(&rt, &store, Some(Arc::new(Scatter(asked.clone()))));
    let missed = (0..PAGES).find(|p| !asked.contains(p)).unwrap();
    touch(&m, missed * PS);
    store.wait_for("16 read-ahead reads", |l| {
        l.batches.iter().sum::<usize>() >= FetchList::CAPACITY
    });
    assert_eq!(
        store.log().batches,
        [FetchList::CAPACITY],
        "a prefetcher's output"
    );
    let st = rt.stats();
    assert!(st.read_submissions >= 3, "{st:?}");
    assert_eq!(st.max_reads_in_flight, DEPTH as u64, "{st:?}");
    assert!(st.mean_reads_in_flight() > 1.0, "{st:?}");
}

#[test]
fn every_hint_reaches_the_store_as_one_batch() {
    both_services(
        "every_hint_reaches_the_store_as_one_batch",
        every_hint_reaches_the_store_as_one_batch_at_its_depth,
    );
}

fn a_page_touched_while_its_hinted_read_is_in_flight_is_read_once_with(service: FaultService) {
    const PAGES: usize = 1024;
    let rt = runtime(service, 8 << 20);
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    let hinted = [3usize, 700, 41, 512];
    store.set_gate(true);
    m.prefetch_ranges(&page_ranges(&hinted)).unwrap();
    // The batch is at the gate: the hinted pages' reads are in flight.
    store.wait_for("the hint's batch", |l| l.waiting == 1);
    let faults = rt.stats().faults;
    std::thread::scope(|s| {
        let toucher = s.spawn(|| touch(&m, 41 * PS + 123));
        // The application touched the page and waits for it.
        let deadline = Instant::now() + Duration::from_secs(120);
        while rt.stats().faults == faults {
            assert!(Instant::now() < deadline, "hung: no fault");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Time for a wrong second read to be made, were it to be.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!toucher.is_finished(), "the touch returned before its read");
        store.set_gate(false);
        toucher.join().unwrap();
    });
    for p in hinted {
        touch(&m, p * PS + 7);
    }
    let log = store.log();
    assert_eq!(log.batches, [hinted.len()], "{service:?}");
    assert_eq!(
        log.single, 0,
        "{service:?}: a second read of a page in flight"
    );
    for p in hinted {
        assert_eq!(log.per_page.get(&p), Some(&1), "{service:?}: page {p}");
    }
}

#[test]
fn a_page_touched_while_its_hinted_read_is_in_flight_is_read_once() {
    both_services(
        "a_page_touched_while_its_hinted_read_is_in_flight_is_read_once",
        a_page_touched_while_its_hinted_read_is_in_flight_is_read_once_with,
    );
}

/// A page of a hint whose reads have not gone to the store yet (both
/// prefetch threads are held at the store's gate by earlier hints, the
/// third hint queued behind them) is locked busy by the hinting call: a
/// touch waits for the hint's read instead of reading it itself.
fn a_hinted_page_touched_before_its_read_is_submitted_is_read_once_with(service: FaultService) {
    const PAGES: usize = 1024;
    let rt = runtime(service, 8 << 20);
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    let gate = store.closed_gate();
    m.prefetch_ranges(&page_ranges(&[10, 600])).unwrap();
    m.prefetch_ranges(&page_ranges(&[20, 700])).unwrap();
    // Both prefetch threads wait at the gate with a batch each.
    store.wait_for("two hints' batches", |l| l.waiting == 2);
    let queued = [30usize, 800, 801];
    m.prefetch_ranges(&page_ranges(&queued)).unwrap();
    let faults = rt.stats().faults;
    std::thread::scope(|s| {
        let toucher = s.spawn(|| touch(&m, 800 * PS + 5));
        let deadline = Instant::now() + Duration::from_secs(120);
        while rt.stats().faults == faults {
            assert!(Instant::now() < deadline, "hung: no fault");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Time for a wrong read of its own, were it to be made.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !toucher.is_finished(),
            "{service:?}: the touch returned before the hint's read"
        );
        assert_eq!(store.log().single, 0, "{service:?}: read by the fault");
        drop(gate);
        toucher.join().unwrap();
    });
    for p in [10, 600, 20, 700].into_iter().chain(queued) {
        touch(&m, p * PS + 11);
    }
    let log = store.log();
    assert_eq!(log.single, 0, "{service:?}: a second read of a hinted page");
    for p in queued {
        assert_eq!(log.per_page.get(&p), Some(&1), "{service:?}: page {p}");
    }
    // The queued hint's two runs ([30], [800, 801]) in one batch.
    assert_eq!(log.batches.len(), 3, "{service:?}: {:?}", log.batches);
}

#[test]
fn a_hinted_page_touched_before_its_read_is_submitted_is_read_once() {
    both_services(
        "a_hinted_page_touched_before_its_read_is_submitted_is_read_once",
        a_hinted_page_touched_before_its_read_is_submitted_is_read_once_with,
    );
}

/// `Builder::queue_depth` bounds what any store is given at once: a hint
/// of 32 scattered pages reaches the depth-32 store in batches of 4, and
/// `Builder::queue_depth(0)` is refused.
fn a_configured_queue_depth_bounds_the_batches_with(service: FaultService) {
    const PAGES: usize = 4096;
    assert!(
        Runtime::builder()
            .queue_depth(0)
            .fault_service(service)
            .build()
            .is_err()
    );
    let rt = Runtime::builder()
        .cache_bytes(8 << 20)
        .page_size(PS)
        .fillers(2)
        .queue_depth(4)
        .fault_service(service)
        .build()
        .unwrap();
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    let pages = scattered(DEPTH, PAGES, 3);
    m.prefetch_ranges(&page_ranges(&pages)).unwrap();
    store.wait_for("32 hinted reads", |l| {
        l.batches.iter().sum::<usize>() >= DEPTH
    });
    for &p in &pages {
        touch(&m, p * PS + 2);
    }
    assert_eq!(store.log().batches, [4; DEPTH / 4], "{service:?}");
    assert_eq!(store.log().single, 0, "{service:?}");
    assert_eq!(rt.stats().max_reads_in_flight, 4, "{service:?}");
}

#[test]
fn a_configured_queue_depth_bounds_the_batches() {
    both_services(
        "a_configured_queue_depth_bounds_the_batches",
        a_configured_queue_depth_bounds_the_batches_with,
    );
}

fn hints_past_the_cache_size_keep_the_pages_in_use_with(service: FaultService) {
    const PAGES: usize = 2048;
    // 256 pages of cache; the application uses 64 of them.
    let cache_pages = 256;
    let rt = runtime(service, (cache_pages * PS) as u64);
    let store = Recording::new(PAGES);
    let m = map(&rt, &store, None);
    let in_use = 0..64usize;
    for p in in_use.clone() {
        touch(&m, p * PS);
    }
    assert_eq!(store.log().single, in_use.len());
    // A hint of six times the cache.
    m.prefetch(512 * PS..PAGES * PS).unwrap();
    // Until the prefetch stops filling: no new batch for a second.
    let mut last = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = store.batched_pages();
        if now == last && now > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "hung: the hint read nothing");
        last = now;
        std::thread::sleep(Duration::from_secs(1));
    }
    let evicted: Vec<usize> = in_use.clone().filter(|&p| !m.is_resident(p * PS)).collect();
    assert!(
        evicted.is_empty(),
        "{service:?}: the hint evicted pages in use: {evicted:?} ({} pages hinted)",
        store.batched_pages()
    );
    for p in in_use.clone() {
        touch(&m, p * PS + 9);
    }
    assert_eq!(store.log().single, in_use.len(), "{service:?}: read again");
    // The hint was served up to half the cache, from its start.
    let filled = store.batched_pages();
    assert!(
        filled <= cache_pages / 2,
        "{service:?}: {filled} pages hinted"
    );
    assert!(
        m.is_resident(512 * PS),
        "{service:?}: the hint's first page"
    );
}

#[test]
fn hints_past_the_cache_size_keep_the_pages_in_use() {
    both_services(
        "hints_past_the_cache_size_keep_the_pages_in_use",
        hints_past_the_cache_size_keep_the_pages_in_use_with,
    );
}
