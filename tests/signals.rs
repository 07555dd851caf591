//! Signals around the in-thread fault service: SIGBUS that is not a fault
//! (`kill`, `raise`), the action umio's handler replaced (ignored,
//! one-shot, its mask), faults taken while a fault is served, other
//! signals while a fault is served, threads that block SIGBUS, and what
//! the handler may not do (log).
//!
//! Each test runs in a child process (this binary, re-run on one test
//! with `UMIO_SIGNALS_CHILD` set), with a deadline: they install signal
//! actions, block signals, or expect the process to die.

mod common;

use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Hooked, StoreHooks, assert_same, random_bytes};
use umio::backends::{FaultTrigger, FaultyStore, MemoryStore};
use umio::{FaultService, MapOptions, Mapping, PrefetchKind, Runtime, Store, StoreError};

/// What marks the child process of a test.
const CHILD: &str = "UMIO_SIGNALS_CHILD";
/// How long a child may run: a hang detector.
const CHILD_DEADLINE: Duration = Duration::from_secs(300);

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs test `name` of this binary in a child process, killed after
/// 300 s; returns its status.
fn run_child(name: &str) -> ExitStatus {
    common::run_test_in_child(name, CHILD, CHILD_DEADLINE)
}

/// [`run_child`], the child's standard error going to `stderr`.
fn run_child_with(name: &str, stderr: std::process::Stdio) -> ExitStatus {
    common::run_test_in_child_with(name, CHILD, CHILD_DEADLINE, stderr)
}

/// Whether test `name` runs here: in its child process, yes; in the
/// parent, it runs the child, asserts that it succeeded, and no.
fn in_child(name: &str) -> bool {
    common::in_child(name, CHILD, CHILD_DEADLINE)
}

/// In the parent: runs test `name` in its child and asserts that SIGBUS
/// ended it; in the child, `true`.
fn dies_of_sigbus_in_child(name: &str) -> bool {
    use std::os::unix::process::ExitStatusExt;
    if is_child() {
        return true;
    }
    let st = run_child(name);
    assert_eq!(st.signal(), Some(libc::SIGBUS), "child: {st:?}");
    false
}

fn runtime(service: FaultService) -> Runtime {
    Runtime::builder()
        .cache_bytes(4 << 20)
        .page_size(4096)
        .fault_service(service)
        .build()
        .unwrap()
}

fn map_bytes(rt: &Runtime, data: &[u8]) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(MemoryStore::new(data.to_vec())))
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// Sets SIGBUS's action: `handler` (a `SA_SIGINFO` function, or
/// `SIG_DFL`/`SIG_IGN`) with `flags` and `mask`.
fn set_sigbus(handler: usize, flags: i32, mask: &[i32]) {
    // SAFETY: a valid sigaction struct; the handler (if any) is a function
    // of this test with the SA_SIGINFO signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        for &s in mask {
            libc::sigaddset(&mut sa.sa_mask, s);
        }
        assert_eq!(libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()), 0);
    }
}

fn raise_sigbus() {
    // SAFETY: sends SIGBUS to this thread.
    unsafe { libc::raise(libc::SIGBUS) };
}

fn kill_self_sigbus() {
    // SAFETY: sends SIGBUS to this process.
    unsafe { libc::kill(libc::getpid(), libc::SIGBUS) };
}

/// Row 6: `raise(SIGBUS)` in a process whose SIGBUS action was Rust's own
/// (the standard library's handler, which puts the default action back
/// for a signal it does not own) ends the process, as it would a C
/// program's without umio, instead of being swallowed.
#[test]
fn an_asynchronous_sigbus_ends_the_process() {
    if !dies_of_sigbus_in_child("an_asynchronous_sigbus_ends_the_process") {
        return;
    }
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 20, 1);
    let m = map_bytes(&rt, &data);
    assert_same(&m[..4096], &data[..4096], "a miss before");
    raise_sigbus();
    eprintln!("raise(SIGBUS) returned: the signal was swallowed");
    std::process::exit(1);
}

/// Row 6, with the default action explicitly in place before umio's.
#[test]
fn an_asynchronous_sigbus_under_the_default_action_ends_the_process() {
    if !dies_of_sigbus_in_child("an_asynchronous_sigbus_under_the_default_action_ends_the_process")
    {
        return;
    }
    set_sigbus(libc::SIG_DFL, 0, &[]);
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 20, 2);
    let m = map_bytes(&rt, &data);
    assert_same(&m[..4096], &data[..4096], "a miss before");
    kill_self_sigbus();
    // Delivered to some thread; give it a moment.
    std::thread::sleep(Duration::from_secs(2));
    eprintln!("kill(SIGBUS) did not end the process");
    std::process::exit(1);
}

/// Row 6: an ignored asynchronous SIGBUS is ignored, and umio's handler
/// stays: later misses are served.
#[test]
fn an_ignored_asynchronous_sigbus_is_dropped_and_misses_are_still_served() {
    if !in_child("an_ignored_asynchronous_sigbus_is_dropped_and_misses_are_still_served") {
        return;
    }
    set_sigbus(libc::SIG_IGN, 0, &[]);
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 20, 3);
    let m = map_bytes(&rt, &data);
    assert_same(&m[..4096], &data[..4096], "a miss before");
    raise_sigbus();
    kill_self_sigbus();
    std::thread::sleep(Duration::from_millis(200));
    assert_same(&m, &data, "misses after");
    assert_eq!(rt.stats().in_thread_faults, rt.stats().faults);
}

static ONE_SHOT_CALLS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_one_shot(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    ONE_SHOT_CALLS.fetch_add(1, Ordering::SeqCst);
}

/// `SA_RESETHAND`: the application's one-shot handler runs for the first
/// foreign SIGBUS; the second meets the default action, as the kernel
/// would have it. Umio's own misses are served throughout.
#[test]
fn a_one_shot_handler_runs_once_then_the_default_action() {
    if !dies_of_sigbus_in_child("a_one_shot_handler_runs_once_then_the_default_action") {
        return;
    }
    set_sigbus(
        count_one_shot as *const () as usize,
        libc::SA_SIGINFO | libc::SA_RESETHAND,
        &[],
    );
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 20, 4);
    let m = map_bytes(&rt, &data);
    raise_sigbus();
    assert_eq!(ONE_SHOT_CALLS.load(Ordering::SeqCst), 1);
    assert_same(&m, &data, "misses after the one-shot handler");
    raise_sigbus();
    eprintln!(
        "the second SIGBUS did not end the process (one-shot handler called {} times)",
        ONE_SHOT_CALLS.load(Ordering::SeqCst)
    );
    std::process::exit(1);
}

static SIGRTMAX_BLOCKED: AtomicUsize = AtomicUsize::new(usize::MAX);

extern "C" fn note_mask(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: reads this thread's mask into a local set.
    let blocked = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
        libc::sigismember(&set, libc::SIGRTMAX())
    };
    SIGRTMAX_BLOCKED.store(blocked as usize, Ordering::SeqCst);
}

/// The application's handler runs with every signal of its `sa_mask`
/// blocked, `SIGRTMAX` included.
#[test]
fn the_previous_handler_runs_with_its_whole_mask() {
    if !in_child("the_previous_handler_runs_with_its_whole_mask") {
        return;
    }
    set_sigbus(
        note_mask as *const () as usize,
        libc::SA_SIGINFO,
        &[libc::SIGRTMAX()],
    );
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 16, 5);
    let m = map_bytes(&rt, &data);
    raise_sigbus();
    assert_eq!(
        SIGRTMAX_BLOCKED.load(Ordering::SeqCst),
        1,
        "SIGRTMAX blocked in the handler"
    );
    assert_same(&m, &data, "misses after");
}

/// A store whose bytes are another mapping's: its reads fault on that
/// mapping, inside the service of a fault on this one.
struct MappingStore {
    src: Arc<Mapping>,
}

impl Store for MappingStore {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.src.len() as u64)
    }
    fn set_len(&self, _: u64) -> Result<(), StoreError> {
        Err(StoreError::new(
            umio::backends::StoreOp::Len,
            0,
            libc::EROFS,
        ))
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let from = (offset as usize).min(self.src.len());
        let n = buf.len().min(self.src.len() - from);
        buf[..n].copy_from_slice(&self.src[from..from + n]);
        Ok(n)
    }
    fn write_at(&self, offset: u64, _: &[u8]) -> Result<(), StoreError> {
        Err(StoreError::new(
            umio::backends::StoreOp::Write,
            offset,
            libc::EROFS,
        ))
    }
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn is_writable(&self) -> bool {
        false
    }
    fn name(&self) -> &str {
        "mapping"
    }
}

fn over(rt: &Runtime, src: Mapping) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(MappingStore { src: Arc::new(src) }))
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// Row 7: faults taken while a fault is served (a store reading another
/// umio mapping) are served, two levels deep, from four threads at once,
/// in both fault services (with fillers, each level has a runtime of its
/// own: a filler reading a mapping of its own runtime could wait for
/// itself).
#[test]
fn faults_inside_the_service_of_a_fault_are_served() {
    if !in_child("faults_inside_the_service_of_a_fault_are_served") {
        return;
    }
    for service in [FaultService::InThread, FaultService::Fillers] {
        let data = random_bytes(2 << 20, 6);
        let rts = [runtime(service), runtime(service), runtime(service)];
        let base = map_bytes(&rts[0], &data);
        let one = over(&rts[1], base);
        let two = Arc::new(over(&rts[2], one));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (two, data) = (two.clone(), data.clone());
                std::thread::spawn(move || {
                    let mut rng = common::Rng::new(t);
                    for _ in 0..300 {
                        let at = rng.below(data.len());
                        assert_eq!(two[at], data[at], "byte {at}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_same(&two, &data, service.name());
    }
}

/// Row 7: a fault nested deeper than the service serves (a chain of five
/// mappings, each one's store reading the next) fails with SIGBUS and says
/// why on standard error, rather than dying unexplained.
#[test]
fn a_fault_nested_too_deep_fails_with_a_message() {
    use std::os::unix::process::ExitStatusExt;
    if !is_child() {
        let log = tempfile::NamedTempFile::new().unwrap();
        let st = run_child_with(
            "a_fault_nested_too_deep_fails_with_a_message",
            log.reopen().unwrap().into(),
        );
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert_eq!(
            st.signal(),
            Some(libc::SIGBUS),
            "child: {st:?}; stderr: {text}"
        );
        assert!(text.contains("nested too deep"), "stderr: {text}");
        return;
    }
    let rt = runtime(FaultService::InThread);
    let data = random_bytes(1 << 16, 8);
    let mut m = map_bytes(&rt, &data);
    for _ in 0..5 {
        m = over(&rt, m);
    }
    let v = m[100];
    eprintln!("read {v} through six mappings: no SIGBUS");
    std::process::exit(1);
}

static USR1_HANDLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_: libc::c_int) {
    USR1_HANDLED.store(true, Ordering::SeqCst);
}

/// A store whose reads wait (up to 30 s) for SIGUSR1's handler to have
/// run, and say whether it had.
#[derive(Default)]
struct WaitsForSignal {
    reading: AtomicBool,
    saw_signal: Mutex<Option<bool>>,
}

impl StoreHooks for WaitsForSignal {
    fn before_read(&self, _offset: u64) {
        self.reading.store(true, Ordering::SeqCst);
        let end = Instant::now() + Duration::from_secs(30);
        while !USR1_HANDLED.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut saw = self.saw_signal.lock().unwrap();
        saw.get_or_insert(USR1_HANDLED.load(Ordering::SeqCst));
    }
}

/// Other signals reach the faulting thread while its fault is served: a
/// slow store does not hold up a timer, a profiler or a stop request
/// (in-thread, the handler used to block every signal throughout).
#[test]
fn other_signals_are_delivered_while_a_fault_is_served() {
    if !in_child("other_signals_are_delivered_while_a_fault_is_served") {
        return;
    }
    // SAFETY: installs a plain handler for SIGUSR1.
    unsafe { libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t) };
    for service in [FaultService::InThread, FaultService::Fillers] {
        USR1_HANDLED.store(false, Ordering::SeqCst);
        let rt = runtime(service);
        let data = random_bytes(1 << 16, 7);
        let store = Hooked::read_only(data.clone(), "waits-for-signal", WaitsForSignal::default());
        let m = Arc::new(
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            unsafe {
                rt.map(
                    MapOptions::new()
                        .store(store.clone())
                        .prefetch(PrefetchKind::None),
                )
            }
            .unwrap(),
        );
        let (m2, want) = (m.clone(), data[100]);
        let reader = std::thread::spawn(move || assert_eq!(m2[100], want));
        while !store.reading.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        use std::os::unix::thread::JoinHandleExt;
        // SAFETY: the reader thread is alive (it waits in its fault).
        unsafe { libc::pthread_kill(reader.as_pthread_t(), libc::SIGUSR1) };
        reader.join().unwrap();
        assert_eq!(
            *store.saw_signal.lock().unwrap(),
            Some(true),
            "{}: SIGUSR1 was handled while the fault was served",
            service.name()
        );
    }
}

/// A thread of the process that blocks SIGBUS (not the one mapping) is
/// found at map time: the kernel would kill it on its first miss.
#[test]
fn a_thread_that_blocks_sigbus_anywhere_is_found_at_map_time() {
    if !in_child("a_thread_that_blocks_sigbus_anywhere_is_found_at_map_time") {
        return;
    }
    let rt = runtime(FaultService::InThread);
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        // SAFETY: blocks SIGBUS in this thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        blocked_tx.send(()).unwrap();
        let _ = done_rx.recv();
    });
    blocked_rx.recv().unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let r =
        unsafe { rt.map(MapOptions::new().store(Arc::new(MemoryStore::new(vec![1u8; 1 << 16])))) }
            .map(|_| ());
    done_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(
        matches!(r, Err(umio::Error::InvalidArgument(m)) if m.contains("SIGBUS")),
        "{r:?}"
    );
    // Once no thread blocks it, the same map succeeds.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m =
        unsafe { rt.map(MapOptions::new().store(Arc::new(MemoryStore::new(vec![1u8; 1 << 16])))) }
            .unwrap();
    assert!(m.iter().all(|&b| b == 1));
}

/// Log records, and whether one was made inside umio's fault handler.
struct Recorder {
    in_handler: AtomicUsize,
    records: Mutex<Vec<String>>,
}

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if umio::in_fault_handler() {
            // Nothing else: this is what must not happen.
            self.in_handler.fetch_add(1, Ordering::SeqCst);
            return;
        }
        self.records.lock().unwrap().push(r.args().to_string());
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder {
    in_handler: AtomicUsize::new(0),
    records: Mutex::new(Vec::new()),
};

static PATCHED: AtomicBool = AtomicBool::new(false);

extern "C" fn patch_page(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo; maps a zero page over the faulting
    // page (the test's own mapping), so that the access completes.
    unsafe {
        let page = ((*info).si_addr() as usize) & !4095;
        libc::mmap(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
    }
    PATCHED.store(true, Ordering::SeqCst);
}

/// Row 8: an error met in the fault handler (a store read that fails) is
/// not logged there (the logger could hold a lock the interrupted code
/// holds) but by a thread of umio's, soon after.
#[test]
fn errors_in_the_fault_handler_are_logged_outside_it() {
    if !in_child("errors_in_the_fault_handler_are_logged_outside_it") {
        return;
    }
    log::set_logger(&RECORDER).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    // The application's handler, which umio chains the failed read to.
    set_sigbus(patch_page as *const () as usize, libc::SA_SIGINFO, &[]);
    let rt = runtime(FaultService::InThread);
    let store = Arc::new(FaultyStore::new(MemoryStore::new(vec![7u8; 1 << 20])));
    store.fail_reads(FaultTrigger::Offsets(8192..12288), libc::EIO);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map(MapOptions::new().store(store).prefetch(PrefetchKind::None)) }.unwrap();
    assert_eq!(m[0], 7);
    // SAFETY: a byte of the live mapping; its read fails and the
    // application's handler maps a zero page there.
    let v = unsafe { std::ptr::read_volatile(m.as_ptr().add(8192 + 5)) };
    assert_eq!(v, 0);
    assert!(PATCHED.load(Ordering::SeqCst));
    common::eventually(
        "the store error is logged",
        Duration::from_millis(20),
        || {
            RECORDER
                .records
                .lock()
                .unwrap()
                .iter()
                .any(|r| r.contains("store") && r.contains("8192"))
        },
    );
    assert_eq!(
        RECORDER.in_handler.load(Ordering::SeqCst),
        0,
        "log records made inside the fault handler"
    );
}
