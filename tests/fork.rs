//! A forked child does not inherit a region: in the child the range is not
//! mapped at all (so no access can hang on a fault nobody serves), and the
//! parent's mapping keeps working after the fork. A child starts umio of
//! its own whatever its parent's threads were doing as it forked.
//!
//! Scenarios that fork while other threads run umio run in a child
//! process (this binary, re-run on one test with `UMIO_FORK_CHILD` set),
//! with a deadline; each fork child has its own (`alarm`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use umio::backends::MemoryStore;
use umio::cache::{EvictionPolicy, PageKey, PageOracle, PolicyKind, Touch};
use umio::{Advice, FaultService, MapOptions, Mapping, PrefetchKind, Runtime};

/// Whether test `name` runs here: in its child process, yes; in the
/// parent, it runs this binary on the one test with `UMIO_FORK_CHILD` set,
/// kills it after `deadline`, asserts that it succeeded, and no.
fn in_child(name: &str, deadline: Duration) -> bool {
    common::in_child(name, "UMIO_FORK_CHILD", deadline)
}

/// Forks; the child runs `body` under `alarm(deadline_s)` and exits with
/// its code (0: success). Returns the child's wait status.
fn fork_and_run(deadline_s: u32, body: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `body` (umio on a fresh runtime: what is
    // tested) and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: a deadline for the child: a hang becomes SIGALRM.
        unsafe { libc::alarm(deadline_s) };
        let code = body();
        // SAFETY: ends the child at once, running no exit handler.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    status
}

fn describe(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let what = if sig == libc::SIGALRM {
            " (SIGALRM: the child hung)"
        } else {
            ""
        };
        format!("killed by signal {sig}{what}")
    } else {
        format!("exit code {}", libc::WEXITSTATUS(status))
    }
}

/// In a fork child: starts a runtime serving faults with `service`, maps
/// `data` (advising sequential access) and reads it back. 0 if every byte
/// matched; the step that failed otherwise.
fn child_maps_and_reads(service: FaultService, data: &[u8]) -> i32 {
    let Ok(rt) = Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(4096)
        .fault_service(service)
        .build()
    else {
        return 10;
    };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = match unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(MemoryStore::new(data.to_vec())))
                .prefetch(PrefetchKind::None),
        )
    } {
        Ok(m) => m,
        Err(e) => {
            eprintln!("fork child: map: {e}");
            return 11;
        }
    };
    if m.advise(0..m.len(), Advice::Sequential).is_err() {
        return 12;
    }
    if m[..] != data[..] {
        return 13;
    }
    0
}

/// A runtime of `service` with a 16-page cache over 256 pages, and a thread
/// that reads random pages of it until `stop`: every read a miss, every
/// miss an eviction.
fn busy_runtime(
    service: FaultService,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let rt = Runtime::builder()
        .cache_bytes(64 << 10)
        .page_size(4096)
        .fault_service(service)
        .build()
        .unwrap();
    let data = common::random_bytes(1 << 20, seed);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(MemoryStore::new(data.clone())))
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let stop = stop.clone();
    std::thread::spawn(move || {
        let _rt = rt;
        let mut rng = common::Rng::new(seed);
        let mut reads = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let at = rng.below(data.len());
            assert_eq!(m[at], data[at], "byte {at}");
            reads += 1;
        }
        reads
    })
}

/// Forks; the child checks with `madvise(MADV_NORMAL)` (which fails with
/// ENOMEM on unmapped memory) that each range is unmapped and exits 0 if
/// so, 1 or 2 otherwise. Returns the child's wait status.
fn child_sees_unmapped(ranges: &[(usize, usize)]) -> i32 {
    // SAFETY: the child calls only async-signal-safe functions (madvise,
    // __errno_location, _exit) and touches no lock or allocation.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        for &(addr, len) in ranges {
            // SAFETY: madvise only inspects the range; it is unmapped in
            // the child (which is what we test) or ours.
            let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_NORMAL) };
            if r != -1 {
                // SAFETY: _exit ends the child at once.
                unsafe { libc::_exit(1) };
            }
            // SAFETY: reads this thread's errno.
            if unsafe { *libc::__errno_location() } != libc::ENOMEM {
                // SAFETY: as above.
                unsafe { libc::_exit(2) };
            }
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    status
}

fn assert_child_ok(status: i32) {
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit normally (status {status:#x})"
    );
    match libc::WEXITSTATUS(status) {
        0 => {}
        1 => panic!("the region is still mapped in the child"),
        2 => panic!("madvise in the child failed, but not with ENOMEM"),
        c => panic!("the child exited with {c}"),
    }
}

fn range_of(m: &Mapping) -> (usize, usize) {
    (m.as_ptr() as usize, m.len())
}

#[test]
fn forked_child_does_not_inherit_regions() {
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let (tmp, file) = common::rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(16 << 10)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let ro = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut rw = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .offset(64 << 10)
                .len(100_000)
                .writable(true),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    // Some pages resident (clean and dirty), most not.
    assert_eq!(ro.as_slice()[..4096], data[..4096]);
    rw.as_mut_slice()[10] = 0x77;
    assert!(ro.is_resident(0) && !ro.is_resident(512 << 10));

    let (ro_addr, ro_len) = range_of(&ro);
    let (rw_addr, rw_len) = range_of(rw.mapping());
    let status = child_sees_unmapped(&[
        (ro_addr, ro_len),
        (rw_addr, rw_len),
        // Each page on its own too: none of it is mapped.
        (ro_addr, 4096),
        (ro_addr + (512 << 10), 4096),
        (rw_addr + (96 << 10), 4096),
    ]);
    assert_child_ok(status);

    // The parent's regions are intact: old and new pages, reads and writes.
    assert_eq!(ro.as_slice(), &data[..]);
    assert_eq!(rw.as_slice()[10], 0x77);
    rw.as_mut_slice()[99_999] = 0x88;
    rw.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk[(64 << 10) + 10], 0x77);
    assert_eq!(on_disk[(64 << 10) + 99_999], 0x88);
}

#[test]
fn a_madvise_probe_detects_mapped_memory() {
    // The probe itself: memory the child does inherit is reported mapped,
    // so the test above cannot pass for the wrong reason.
    let v = vec![1u8; 64 << 10];
    let page = (v.as_ptr() as usize).next_multiple_of(4096);
    let status = child_sees_unmapped(&[(page, 4096)]);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        1,
        "a heap page must look mapped in the child"
    );
}

/// The parent forks a thousand times while a thread of an in-thread
/// runtime and one of a filler runtime fault and evict without a pause
/// (in-thread, each of those faults holds RCU read sections: the table
/// lookup, the direct reclaim). Every child starts a runtime of its own
/// (both services in turn), maps, advises and reads; none may hang.
#[test]
fn a_thousand_fork_children_start_umio_while_the_parent_faults_and_evicts() {
    if !in_child(
        "a_thousand_fork_children_start_umio_while_the_parent_faults_and_evicts",
        Duration::from_secs(900),
    ) {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let busy = [
        busy_runtime(FaultService::InThread, 1, &stop),
        busy_runtime(FaultService::Fillers, 2, &stop),
    ];
    let data = common::random_bytes(64 << 10, 3);
    let mut failed = Vec::new();
    for i in 0..1000 {
        let service = if i % 2 == 0 {
            FaultService::InThread
        } else {
            FaultService::Fillers
        };
        let status = fork_and_run(120, || child_maps_and_reads(service, &data));
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failed.push(format!(
                "fork {i} ({}): {}",
                service.name(),
                describe(status)
            ));
            if failed.len() >= 3 {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = busy.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(failed.is_empty(), "children failed: {failed:?}");
    assert!(reads > 0, "the parent's threads faulted meanwhile");
}

/// A policy that, once armed, pauses its next `select_victims` (called
/// in-thread from the SIGBUS handler, inside an RCU read section) until
/// released.
struct PausingPolicy {
    inner: Box<dyn EvictionPolicy>,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    armed: AtomicBool,
    /// 1 once a `select_victims` waits at the gate.
    entered: AtomicUsize,
    released: AtomicBool,
}

impl EvictionPolicy for PausingPolicy {
    fn name(&self) -> &'static str {
        "pausing"
    }
    fn inserted(&self, key: PageKey) {
        self.inner.inserted(key)
    }
    fn prefetched(&self, key: PageKey) {
        self.inner.prefetched(key)
    }
    fn touched(&self, key: PageKey, touch: Touch) {
        self.inner.touched(key, touch)
    }
    fn restore(&self, key: PageKey) {
        self.inner.restore(key)
    }
    fn forget_region(&self, region: u64) {
        self.inner.forget_region(region)
    }
    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        if self.gate.armed.swap(false, Ordering::SeqCst) {
            self.gate.entered.store(1, Ordering::SeqCst);
            // In a signal handler: atomics and nanosleep only.
            while !self.gate.released.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.inner.select_victims(oracle, max, out)
    }
    fn reserve(&self, pages: usize) {
        self.inner.reserve(pages)
    }
    fn tracked(&self) -> usize {
        self.inner.tracked()
    }
    fn purge(&self, oracle: &dyn PageOracle) {
        self.inner.purge(oracle)
    }
}

/// The reproducer: a thread's in-thread fault pauses in the
/// policy's `select_victims` (its direct reclaim holds an RCU read section
/// there) while the process forks. The child maps in-thread (which
/// publishes the in-thread table: an RCU writer), and maps with fillers
/// and advises (new advice: an RCU writer); neither may wait for the
/// parent's paused thread, which the child does not have.
#[test]
fn a_fork_child_maps_while_a_parent_thread_pauses_in_a_policy_in_its_fault_handler() {
    if !in_child(
        "a_fork_child_maps_while_a_parent_thread_pauses_in_a_policy_in_its_fault_handler",
        Duration::from_secs(300),
    ) {
        return;
    }
    let gate = Arc::new(Gate::default());
    let rt = Runtime::builder()
        .cache_bytes(64 << 10)
        .page_size(4096)
        .fault_service(FaultService::InThread)
        .evictors(1)
        .eviction_policy(Box::new(PausingPolicy {
            inner: PolicyKind::Clock.build(),
            gate: gate.clone(),
        }))
        .build()
        .unwrap();
    let data = common::random_bytes(1 << 20, 4);
    let m = Arc::new(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe {
            rt.map(
                MapOptions::new()
                    .store(Arc::new(MemoryStore::new(data.clone())))
                    .prefetch(PrefetchKind::None),
            )
        }
        .unwrap(),
    );
    // Fill the cache, then arm the gate: the next miss reclaims.
    common::assert_same(&m[..64 << 10], &data[..64 << 10], "first 16 pages");
    gate.armed.store(true, Ordering::SeqCst);
    let (m2, want) = (m.clone(), data.clone());
    let t = std::thread::spawn(move || {
        for at in (64 << 10..1 << 20).step_by(4096) {
            assert_eq!(m2[at], want[at], "byte {at}");
        }
    });
    while gate.entered.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let small = common::random_bytes(64 << 10, 5);
    let in_thread = fork_and_run(60, || child_maps_and_reads(FaultService::InThread, &small));
    let fillers = fork_and_run(60, || child_maps_and_reads(FaultService::Fillers, &small));
    gate.released.store(true, Ordering::SeqCst);
    t.join().unwrap();
    let ok = |s: i32| libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0;
    assert!(
        ok(in_thread) && ok(fillers),
        "in-thread child: {}; fillers child: {}",
        describe(in_thread),
        describe(fillers)
    );
}
