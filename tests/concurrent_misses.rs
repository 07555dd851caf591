//! Misses of several threads at once reach the store together: a store of
//! depth 8 whose reads of two pages each wait (up to a minute: a hang
//! detector, which records and lets the read go) until both reads are
//! inside sees both. Behind a read that holds the region's store slot
//! (their fills queued on the region), with two fillers; and as two fault
//! events read at once by the only filler. In-thread, each thread reads
//! its own page (a child process: the service installs a SIGBUS handler).

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{Batches, Hooked, StoreHooks};
use umio::backends::IoRequest;
use umio::{FaultService, MapOptions, Mapping, PrefetchKind, Runtime};

const PS: usize = 4096;
const PAGES: usize = 64;
/// The page whose read waits while the hold is on.
const HELD: usize = 0;
/// The two pages whose reads wait for each other.
const PAIR: [usize; 2] = [10, 20];
/// How long a read of [`PAIR`] waits for the other: far longer than it
/// takes (milliseconds), under any load.
const PAIR_WAIT: Duration = Duration::from_secs(60);

fn byte(i: usize) -> u8 {
    (i / PS) as u8 ^ (i as u8).wrapping_mul(13)
}

#[derive(Default)]
struct State {
    /// While true, a read of [`HELD`] waits.
    hold: bool,
    /// Reads of [`HELD`] waiting.
    holding: usize,
    /// Reads of [`PAIR`] pages that have arrived.
    arrived: usize,
    /// A read of a [`PAIR`] page waited [`PAIR_WAIT`] without the other.
    alone: bool,
    /// Sizes of the batches submitted.
    batches: Vec<usize>,
}

/// The hooks of a store of depth 8 whose reads of [`HELD`] wait while the
/// hold is on, whose reads of [`PAIR`] wait for each other, and which
/// performs a batch's requests all at once.
#[derive(Default)]
struct Pairing {
    state: Mutex<State>,
    changed: Condvar,
}

type PairingStore = Hooked<Pairing>;

impl Pairing {
    fn new() -> Arc<PairingStore> {
        Hooked::read_only(
            (0..PAGES * PS).map(byte).collect(),
            "pairing",
            Pairing::default(),
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn set_hold(&self, on: bool) {
        self.state().hold = on;
        self.changed.notify_all();
    }

    /// Waits (up to 120 s: a hang) for `cond`.
    fn wait_for(&self, what: &str, cond: impl Fn(&State) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut s = self.state();
        while !cond(&s) {
            assert!(Instant::now() < deadline, "hung waiting for {what}");
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }
}

impl StoreHooks for Pairing {
    fn before_read(&self, offset: u64) {
        let page = offset as usize / PS;
        let mut s = self.state();
        if page == HELD {
            s.holding += 1;
            self.changed.notify_all();
            while s.hold {
                s = self.changed.wait(s).unwrap();
            }
            s.holding -= 1;
        } else if PAIR.contains(&page) {
            s.arrived += 1;
            self.changed.notify_all();
            let deadline = Instant::now() + PAIR_WAIT;
            while s.arrived < PAIR.len() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    s.alone = true;
                    break;
                }
                s = self.changed.wait_timeout(s, left).unwrap().0;
            }
        }
    }
    fn before_submit(&self, batch: &[IoRequest<'_>]) {
        self.state().batches.push(batch.len());
    }
    /// Every request at once, each on a thread of its own: a device that
    /// works on its whole queue.
    fn batches(&self) -> Batches {
        Batches::AllAtOnce
    }
    fn queue_depth(&self) -> usize {
        8
    }
}

fn map(rt: &Runtime, store: &Arc<PairingStore>) -> Mapping {
    common::map_store(rt, store, false, PrefetchKind::None)
}

/// Touches page `page` on a thread of its own, which sends its thread id
/// first; joined by the caller.
fn touch_on_thread(
    m: &Arc<Mapping>,
    page: usize,
) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Receiver<i32>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let m = m.clone();
    let h = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let at = page * PS + 5;
        // SAFETY: inside the mapping; volatile so that the access happens.
        let got = unsafe { std::ptr::read_volatile(m.as_ptr().add(at)) };
        assert_eq!(got, byte(at), "byte {at}");
    });
    (h, rx)
}

/// Whether thread `tid` of this process sleeps in a userfault.
fn in_userfault(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stack"))
        .is_ok_and(|s| s.contains("handle_userfault"))
}

/// The two threads' misses (after a third's, held in the store) must be
/// in flight together. `wait_queued` says when both misses have reached
/// umio (fillers: queued, or pending on the descriptor), once the held
/// read is waiting.
fn pair_in_flight(rt: Runtime, wait_queued: fn(&Runtime, &Pairing, [i32; 2])) {
    pair_in_flight_after(rt, 0..0, wait_queued);
}

/// [`pair_in_flight`], after touching `first` (pages past the others).
fn pair_in_flight_after(
    rt: Runtime,
    first: std::ops::Range<usize>,
    wait_queued: fn(&Runtime, &Pairing, [i32; 2]),
) {
    let store = Pairing::new();
    let m = Arc::new(map(&rt, &store));
    for p in first {
        let at = p * PS;
        // SAFETY: inside the mapping; volatile so that the access happens.
        let got = unsafe { std::ptr::read_volatile(m.as_ptr().add(at)) };
        assert_eq!(got, byte(at), "byte {at}");
    }
    store.set_hold(true);
    let (held, _held_tid) = touch_on_thread(&m, HELD);
    store.wait_for("the held read", |s| s.holding == 1);
    let (a, ta) = touch_on_thread(&m, PAIR[0]);
    let (b, tb) = touch_on_thread(&m, PAIR[1]);
    let tids = [ta.recv().unwrap(), tb.recv().unwrap()];
    wait_queued(&rt, &store, tids);
    store.set_hold(false);
    for h in [held, a, b] {
        h.join().unwrap();
    }
    let s = store.state();
    assert!(
        !s.alone,
        "a miss waited {PAIR_WAIT:?} in the store for the other thread's: \
         they were read one after the other (batches {:?})",
        s.batches
    );
    assert_eq!(s.arrived, 2);
}

fn runtime(service: FaultService, fillers: usize) -> Runtime {
    runtime_of(service, fillers, 8 << 20)
}

fn runtime_of(service: FaultService, fillers: usize, cache_bytes: u64) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(PS)
        .fillers(fillers)
        .fault_service(service)
        .build()
        .unwrap()
}

#[test]
fn misses_queued_behind_a_read_reach_the_store_together() {
    both_services(
        "misses_queued_behind_a_read_reach_the_store_together",
        |service| match service {
            // In-thread: each thread reads its own page.
            FaultService::InThread => pair_in_flight(runtime(service, 2), |_, _, _| {}),
            // Two fillers, one store slot per region: the held read takes
            // it, the other two misses are queued on the region.
            _ => pair_in_flight(runtime(service, 2), two_queued),
        },
    );
}

/// Waits until two fills are queued on the region.
fn two_queued(rt: &Runtime, _: &Pairing, _: [i32; 2]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while rt.stats().queued_fills < 2 {
        assert!(Instant::now() < deadline, "hung waiting for queued fills");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn misses_queued_behind_a_read_reach_the_store_together_with_the_cache_full() {
    // A cache of 32 pages, filled first: the batch's space is evicted for
    // (all of it, not one page of it).
    let rt = runtime_of(FaultService::Fillers, 2, (32 * PS) as u64);
    pair_in_flight_after(rt, 32..PAGES, two_queued);
}

#[test]
fn misses_read_as_one_event_read_reach_the_store_together() {
    // One filler, held in the store: both threads' fault events wait on
    // the descriptor, and are read at once when it comes back.
    pair_in_flight(runtime(FaultService::Fillers, 1), |_, _, tids| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !tids.iter().all(|&t| in_userfault(t)) {
            assert!(
                Instant::now() < deadline,
                "hung waiting for both threads to fault"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Runs `body` here for the fillers; for the in-thread service, in a
/// child process running test `name` alone with `UMIO_MISSES_CHILD` set.
fn both_services(name: &str, body: impl FnOnce(FaultService)) {
    common::both_services(name, "UMIO_MISSES_CHILD", body);
}

/// Threads that miss at once over a file (the default store: `O_DIRECT`
/// through io_uring where the file system allows, so batches of misses
/// reach it), reading and writing, with a cache an eighth of the file:
/// every byte read is the file's or the thread's own last write, and the
/// file holds every write after a flush.
fn many_threads_read_and_write_a_file(service: FaultService) {
    const FILE_PAGES: usize = 2048;
    const THREADS: usize = 4;
    let data = common::random_bytes(FILE_PAGES * PS, 41);
    let (tmp, f) = common::rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes((FILE_PAGES * PS / 8) as u64)
        .page_size(PS)
        .fillers(2)
        .fault_service(service)
        .build()
        .unwrap();
    // SAFETY: nothing else changes the file while the mapping lives.
    let m = unsafe {
        rt.map_file(
            &f,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let base = m.as_ptr() as usize;
    let data = &data;
    // Thread k writes the pages p with p % THREADS == k (byte 0 of each),
    // and reads any page.
    let written: Vec<Vec<(usize, u8)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|k| {
                s.spawn(move || {
                    let mut rng = common::Rng::new(7 + k as u64);
                    let mut mine = std::collections::HashMap::new();
                    for i in 0..3000 {
                        let p = rng.below(FILE_PAGES);
                        let at = p * PS + rng.below(PS);
                        // SAFETY: inside the mapping.
                        let got = unsafe { std::ptr::read_volatile((base + at) as *const u8) };
                        let want = match mine.get(&p) {
                            Some(&v) if at.is_multiple_of(PS) => v,
                            _ => data[at],
                        };
                        if !(at.is_multiple_of(PS) && p % THREADS != k) {
                            assert_eq!(got, want, "thread {k}: byte {at}");
                        }
                        if i % 3 == 0 {
                            let p = (rng.below(FILE_PAGES / THREADS)) * THREADS + k;
                            let v = (i as u8) | 1;
                            // SAFETY: inside the mapping, written by this
                            // thread only.
                            unsafe { std::ptr::write_volatile((base + p * PS) as *mut u8, v) };
                            mine.insert(p, v);
                        }
                    }
                    mine.into_iter().collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    m.flush().unwrap();
    let st = rt.stats();
    eprintln!(
        "{}: {} misses, {} batches of reads ({} reads)",
        service.name(),
        st.read_misses + st.write_misses,
        st.read_submissions,
        st.reads_submitted
    );
    let mut want = data.clone();
    for (p, v) in written.into_iter().flatten() {
        want[p * PS] = v;
    }
    drop(m);
    let got = std::fs::read(tmp.path()).unwrap();
    common::assert_same(&got, &want, "the file after flush");
}

#[test]
fn many_threads_missing_at_once_read_and_write_the_right_bytes() {
    both_services(
        "many_threads_missing_at_once_read_and_write_the_right_bytes",
        many_threads_read_and_write_a_file,
    );
}
