//! Failing and stalled storage, in both fault services, each scenario in a
//! child process with a deadline (a death or a hang is the failure):
//!
//! - a store whose writes all fail with ENOSPC, under a small cache: a
//!   reader keeps reading (100,000 misses) while a writer's write fails
//!   with SIGBUS at its write fault (as on a full file system), `flush`
//!   returns ENOSPC, and nothing read back differs from what was stored
//!   or written;
//! - a store that stalls for 60 s (reads and writes wait at a gate), with
//!   the cache full of dirty pages when it stalls: nobody dies, and once
//!   the gate opens everything reads and writes back right;
//! - the same with a frozen ext4 file system (`fsfreeze`) on a loop
//!   device, where the machine can make one (skipped, saying so, where
//!   it cannot).

mod common;

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::Rng;
use umio::backends::{FaultTrigger, FaultyStore, MemoryStore};
use umio::{Error, FaultService, MapOptions, PrefetchKind, Runtime, Store, StoreError};

const PAGE: usize = 4096;
/// How long a stall lasts.
const STALL: Duration = Duration::from_secs(60);
/// The deadline of a child: a hang, not slowness, is what it catches.
const CHILD_DEADLINE: Duration = Duration::from_secs(300);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

fn service(name: &str) -> FaultService {
    FaultService::from_name(name).unwrap()
}

/// Runs the scenario `name` (a function of this file, below) in a child
/// process of this test binary, for each fault service at once (with
/// `env(service)` added to its environment), and asserts that each exited
/// 0. `tick` is called with the time since they started while it waits.
/// Returns the children's output.
fn in_children(
    scenario: &str,
    env: &dyn Fn(&str) -> Vec<(String, String)>,
    tick: &dyn Fn(Duration),
) -> Vec<String> {
    use std::os::unix::process::ExitStatusExt;
    let started = Instant::now();
    let children: Vec<_> = ["fillers", "in-thread"]
        .into_iter()
        .map(|svc| {
            // Output to a file: a pipe nobody reads while the child runs
            // could fill and stop it.
            let out = tempfile::tempfile().unwrap();
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child", "--nocapture", "--test-threads=1"])
                .env("UMIO_STORAGE_CHILD", scenario)
                .env("UMIO_STORAGE_SERVICE", svc)
                .envs(env(svc))
                .stdout(out.try_clone().unwrap())
                .stderr(out.try_clone().unwrap())
                .spawn()
                .unwrap();
            (svc, child, out)
        })
        .collect();
    let deadline = started + CHILD_DEADLINE;
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for (svc, mut child, mut out) in children {
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            tick(started.elapsed());
            std::thread::sleep(Duration::from_millis(50));
        };
        use std::io::{Read, Seek};
        let mut text = String::new();
        out.rewind().unwrap();
        out.read_to_string(&mut text).unwrap();
        eprintln!("--- {scenario}, {svc}:\n{text}");
        match status {
            None => failures.push(format!("{svc}: still running after {CHILD_DEADLINE:?}")),
            Some(st) if !st.success() => {
                failures.push(format!("{svc}: {st:?} (signal {:?})", st.signal()))
            }
            Some(_) => {}
        }
        outputs.push(text);
    }
    assert!(failures.is_empty(), "{scenario}: {failures:?}");
    outputs
}

/// The child's entry: runs the scenario its environment names.
#[test]
fn child() {
    let Ok(scenario) = std::env::var("UMIO_STORAGE_CHILD") else {
        return;
    };
    common::log_to_stderr();
    let svc = service(&std::env::var("UMIO_STORAGE_SERVICE").unwrap());
    match scenario.as_str() {
        "enospc" => enospc(svc),
        "gate" => gated_stall(svc),
        "fsfreeze" => frozen_ext4(svc),
        "ignored" => refused_with_sigbus_ignored(svc, false),
        "ignored-mixed" => refused_with_sigbus_ignored(svc, true),
        other => panic!("no scenario {other}"),
    }
    std::io::stdout().flush().unwrap();
    // The mappings were left to the process's end (their drop would
    // write back, which these stores may refuse).
    std::process::exit(0);
}

/// The writer thread of [`enospc`]: its id, and what its SIGBUS said.
static WRITER_TID: AtomicI32 = AtomicI32::new(0);
static WRITER_FAULT_ADDR: AtomicUsize = AtomicUsize::new(0);
static WRITER_DIED: AtomicBool = AtomicBool::new(false);
/// When it died, `CLOCK_MONOTONIC` in ns.
static WRITER_DIED_NS: AtomicU64 = AtomicU64::new(0);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The application's SIGBUS handler, installed before the runtime (so the
/// in-thread service chains to it): the writer's SIGBUS ends the writer
/// thread alone, recording where it faulted; any other thread's SIGBUS
/// ends the process, as without a handler.
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for this signal; gettid has no
    // preconditions.
    unsafe {
        if libc::gettid() == WRITER_TID.load(Ordering::SeqCst) {
            WRITER_FAULT_ADDR.store((*info).si_addr() as usize, Ordering::SeqCst);
            WRITER_DIED_NS.store(monotonic_ns(), Ordering::SeqCst);
            WRITER_DIED.store(true, Ordering::SeqCst);
            // Ends this thread only (no unwinding, no cleanup: the
            // process ends soon).
            libc::syscall(libc::SYS_exit, 0);
        }
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

fn install_sigbus_handler() {
    // SAFETY: a plain sigaction with a handler of the right signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()), 0);
    }
}

/// A store whose writes all fail with ENOSPC.
fn enospc(svc: FaultService) {
    install_sigbus_handler();
    const PAGES: usize = 1024;
    let data = pattern(PAGES * PAGE);
    let store = Arc::new(FaultyStore::new(MemoryStore::new(data.clone())));
    store.fail_writes(FaultTrigger::Always, libc::ENOSPC);
    // Write refusal at the first write to a clean page needs the write
    // to fault: synchronous dirty tracking. With asynchronous tracking the
    // kernel lets writes to resident clean pages through (README, "failing
    // storage"), and this cache of 16 pages would fill with dirty pages the
    // store refuses (`tests/dirty_tracking.rs` checks what async does).
    let rt = Runtime::builder()
        .cache_bytes(16 * PAGE as u64)
        .page_size(PAGE)
        .fillers(2)
        .fault_service(svc)
        .dirty_tracking(umio::DirtyTracking::Sync)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone() as Arc<dyn Store>)
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let base = map.as_ptr() as usize;
    // The writer writes one byte at the start of each page in turn, each
    // a first write (a write miss or a write to a clean page), until one
    // fails.
    let written = Arc::new(AtomicUsize::new(0));
    let started = monotonic_ns();
    {
        let written = written.clone();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            WRITER_TID.store(unsafe { libc::gettid() }, Ordering::SeqCst);
            for p in 0..PAGES {
                // SAFETY: inside the writable mapping, which outlives the
                // process's threads (it is never unmapped).
                unsafe { ((base + p * PAGE) as *mut u8).write_volatile(0xEE) };
                written.store(p + 1, Ordering::SeqCst);
            }
        });
    }
    // The reader, meanwhile: random pages, each read at byte 100 (the
    // writer writes byte 0), 100,000 misses.
    let mut rng = Rng::new(5);
    let misses_before = rt.stats().read_misses;
    let mut reads = 0u64;
    loop {
        let p = rng.below(PAGES);
        // SAFETY: inside the mapping.
        let b = unsafe { ((base + p * PAGE + 100) as *const u8).read_volatile() };
        assert_eq!(b, data[p * PAGE + 100], "read {reads}: page {p}");
        reads += 1;
        if reads.is_multiple_of(1000)
            && rt.stats().read_misses - misses_before >= 100_000
            && WRITER_DIED.load(Ordering::SeqCst)
        {
            break;
        }
    }
    let n = written.load(Ordering::SeqCst);
    let addr = WRITER_FAULT_ADDR.load(Ordering::SeqCst);
    println!(
        "writer: {n} pages written, then SIGBUS at page {} ({:?} after it started); \
         reader: {reads} reads, {} misses",
        (addr - base) / PAGE,
        Duration::from_nanos(WRITER_DIED_NS.load(Ordering::SeqCst) - started),
        rt.stats().read_misses - misses_before
    );
    assert_eq!(
        addr,
        base + n * PAGE,
        "the writer's SIGBUS is at its next write"
    );
    assert!(n < 64, "{n} pages dirtied with every write failing");
    // Nothing dropped: the pages written hold their writes, dirty.
    assert_eq!(map.dirty_pages(), n, "the dirty pages stay");
    for p in 0..PAGES {
        let want = if p < n { 0xEE } else { data[p * PAGE] };
        // SAFETY: inside the mapping.
        let b = unsafe { ((base + p * PAGE) as *const u8).read_volatile() };
        assert_eq!(b, want, "page {p} read back");
    }
    match map.flush() {
        Err(Error::Store(e)) => assert_eq!(e.errno, libc::ENOSPC, "{e}"),
        other => panic!("flush: {other:?}"),
    }
    assert_eq!(map.dirty_pages(), n, "a failed flush keeps them dirty");
    // The store recovers: the dirty pages reach it, and writes work again.
    store.fail_writes(FaultTrigger::Never, 0);
    map.flush().unwrap();
    assert_eq!(map.dirty_pages(), 0);
    // SAFETY: inside the writable mapping.
    unsafe { ((base + (n + 1) * PAGE) as *mut u8).write_volatile(0xDD) };
    map.flush().unwrap();
    let stored = store.inner().snapshot();
    for p in 0..PAGES {
        let want = match p {
            p if p < n => 0xEE,
            p if p == n + 1 => 0xDD,
            p => data[p * PAGE],
        };
        assert_eq!(stored[p * PAGE], want, "page {p} in the store");
    }
    std::mem::forget(map);
}

/// A memory store whose reads and writes wait while its gate is closed.
struct GatedStore {
    inner: MemoryStore,
    closed: Mutex<bool>,
    opened: Condvar,
    waited: AtomicU64,
}

impl GatedStore {
    fn pass(&self) {
        let mut c = self.closed.lock().unwrap();
        if *c {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
        while *c {
            c = self.opened.wait(c).unwrap();
        }
    }

    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

impl Store for GatedStore {
    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        self.pass();
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        self.pass();
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.pass();
        Ok(())
    }
    fn is_writable(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "gated"
    }
}

/// The shared part of the stall scenarios: a runtime with a 16-page cache
/// and three fillers over `map` (of `pages` pages whose bytes were
/// `data`): the cache is filled with dirty pages, `stall` starts the stall
/// (and ends it after [`STALL`] on a thread of its own), four readers
/// miss meanwhile (two of them writing), and afterwards every byte is
/// checked in memory and, after a flush, by `stored` (the store's bytes).
fn stall_scenario(
    rt: &Runtime,
    map: &umio::Mapping,
    data: &[u8],
    stall: impl FnOnce(),
    stored: impl Fn() -> Vec<u8>,
) {
    let pages = data.len() / PAGE;
    let base = map.as_ptr() as usize;
    let mut want = data.to_vec();
    // Sixteen dirty pages: the whole cache, as far as umio lets it.
    for p in 0..16 {
        // SAFETY: inside the writable mapping.
        unsafe { ((base + p * PAGE) as *mut u8).write_volatile(p as u8) };
        want[p * PAGE] = p as u8;
    }
    let began = Instant::now();
    stall();
    let want = Arc::new(Mutex::new(want));
    std::thread::scope(|s| {
        for t in 0..4usize {
            let want = want.clone();
            s.spawn(move || {
                let mut rng = Rng::new(40 + t as u64);
                for i in 0..200 {
                    // Threads 0 and 1 write their own pages' byte 8 + t.
                    let p = 16 + rng.below(pages - 16);
                    if t < 2 && i % 2 == 0 {
                        let v = (i % 250) as u8 + 1;
                        // SAFETY: inside the writable mapping; no other
                        // thread writes this byte.
                        unsafe { ((base + p * PAGE + 8 + t) as *mut u8).write_volatile(v) };
                        want.lock().unwrap()[p * PAGE + 8 + t] = v;
                    } else {
                        // SAFETY: inside the mapping.
                        let b = unsafe { ((base + p * PAGE + 100) as *const u8).read_volatile() };
                        assert_eq!(b, data[p * PAGE + 100], "thread {t}: page {p}");
                    }
                }
            });
        }
    });
    println!(
        "the readers and writers finished {:?} after the stall began",
        began.elapsed()
    );
    let want = want.lock().unwrap().clone();
    common::assert_same(map.as_slice(), &want, "the mapping after the stall");
    map.flush().unwrap();
    common::assert_same(&stored(), &want, "the store after a flush");
    let st = rt.stats();
    println!("{st}");
}

/// A store that stalls for 60 s, reads and writes, with the cache full of
/// dirty pages.
fn gated_stall(svc: FaultService) {
    const PAGES: usize = 256;
    let data = pattern(PAGES * PAGE);
    let store = Arc::new(GatedStore {
        inner: MemoryStore::new(data.clone()),
        closed: Mutex::new(false),
        opened: Condvar::new(),
        waited: AtomicU64::new(0),
    });
    let rt = Runtime::builder()
        .cache_bytes(16 * PAGE as u64)
        .page_size(PAGE)
        .fillers(3)
        .fault_service(svc)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone() as Arc<dyn Store>)
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let gate = store.clone();
    stall_scenario(
        &rt,
        &map,
        &data,
        || {
            gate.set(true);
            std::thread::spawn(move || {
                std::thread::sleep(STALL);
                gate.set(false);
            });
        },
        || store.inner.snapshot(),
    );
    assert!(
        store.waited.load(Ordering::Relaxed) > 0,
        "nothing waited at the gate"
    );
    std::mem::forget(map);
}

/// Runs a command; its output if it succeeded.
fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!(
            "{cmd} {args:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

/// A loop-mounted ext4 file system, thawed and unmounted on drop.
struct LoopExt4 {
    dir: tempfile::TempDir,
}

impl LoopExt4 {
    fn make() -> Result<LoopExt4, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| e.to_string())?;
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()])?;
        run(
            "mount",
            &["-o", "loop", image.to_str().unwrap(), mnt.to_str().unwrap()],
        )?;
        Ok(LoopExt4 { dir })
    }

    fn mnt(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }

    /// Thaws it if it is frozen.
    fn thaw(&self) {
        let _ = run("fsfreeze", &["-u", self.mnt().to_str().unwrap()]);
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        self.thaw();
        // Lazily: a child's descriptors may still hold it while it ends.
        let _ = run("umount", &["-l", self.mnt().to_str().unwrap()]);
    }
}

/// A frozen ext4 file system (`fsfreeze`), mounted by the parent at
/// `UMIO_STORAGE_MNT`, for 60 s, with the cache full of dirty pages of a
/// file on it.
fn frozen_ext4(svc: FaultService) {
    let mnt = std::path::PathBuf::from(std::env::var_os("UMIO_STORAGE_MNT").unwrap());
    const PAGES: usize = 256;
    let data = pattern(PAGES * PAGE);
    let path = mnt.join("data");
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let rt = Runtime::builder()
        .cache_bytes(16 * PAGE as u64)
        .page_size(PAGE)
        .fillers(3)
        .fault_service(svc)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let frozen = mnt.clone();
    stall_scenario(
        &rt,
        &map,
        &data,
        || {
            run("fsfreeze", &["-f", frozen.to_str().unwrap()]).unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(STALL);
                run("fsfreeze", &["-u", frozen.to_str().unwrap()]).unwrap();
            });
        },
        || std::fs::read(&path).unwrap(),
    );
    std::mem::forget(map);
    println!("ext4 on a loop device frozen for {STALL:?}: passed");
}

#[test]
fn a_store_whose_writes_fail_fails_the_writer_and_never_the_reader() {
    if std::env::var_os("UMIO_STORAGE_CHILD").is_some() {
        return;
    }
    for out in in_children("enospc", &|_| Vec::new(), &|_| ()) {
        assert!(out.contains("then SIGBUS at page"), "{out}");
    }
}

#[test]
fn a_store_stalled_for_a_minute_is_waited_for() {
    if std::env::var_os("UMIO_STORAGE_CHILD").is_some() {
        return;
    }
    for out in in_children("gate", &|_| Vec::new(), &|_| ()) {
        assert!(out.contains("after the stall began"), "{out}");
    }
}

#[test]
fn a_frozen_file_system_is_waited_for() {
    if std::env::var_os("UMIO_STORAGE_CHILD").is_some() {
        return;
    }
    // One file system per child, made here: whatever becomes of a child,
    // its file system is thawed (a process that dies with threads blocked
    // on a frozen file system cannot end until it is thawed).
    let fs = match (LoopExt4::make(), LoopExt4::make()) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIPPED: cannot make a loop-mounted ext4 here: {why}");
            return;
        }
    };
    let mnt = |svc: &str| {
        let i = usize::from(svc != "fillers");
        vec![(
            "UMIO_STORAGE_MNT".to_string(),
            fs[i].mnt().to_str().unwrap().to_string(),
        )]
    };
    // Should a child not thaw its file system (it died), it is thawed
    // here once the stall is well over, so that the child can end.
    let thaw = |t: Duration| {
        if t > STALL + Duration::from_secs(60) {
            fs.iter().for_each(LoopExt4::thaw);
        }
    };
    for out in in_children("fsfreeze", &mnt, &thaw) {
        assert!(out.contains("frozen for"), "{out}");
    }
}

/// A write refused (its store fails writes) while the program ignores
/// SIGBUS: the kernel forces a fault's SIGBUS (the process ends), and so
/// does umio; before, the fillers' sent SIGBUS was dropped and the write
/// faulted again for ever.
///
/// `mixed`: the program ignores SIGBUS before an in-thread runtime
/// installs umio's handler (which keeps "ignore" as the action it
/// replaced), and the refused write is a fillers region's: the sent
/// SIGBUS meets umio's handler, which must treat it as the write's fault,
/// not as a `kill` to ignore (before, it was dropped: the write faulted
/// for ever).
fn refused_with_sigbus_ignored(svc: FaultService, mixed: bool) {
    let _in_thread = mixed.then(|| {
        // SAFETY: SIG_IGN for SIGBUS; no handler runs.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_IGN) };
        let rt = Runtime::builder()
            .cache_bytes((16 * PAGE) as u64)
            .page_size(PAGE)
            .fault_service(FaultService::InThread)
            .build()
            .unwrap();
        // SAFETY: a private store only this mapping uses.
        let map =
            unsafe { rt.map(MapOptions::new().store(Arc::new(MemoryStore::new(vec![5u8; PAGE])))) }
                .unwrap();
        assert_eq!(map[0], 5, "the in-thread region serves its fault");
        (rt, map)
    });
    let rt = Runtime::builder()
        .cache_bytes((64 * PAGE) as u64)
        .page_size(PAGE)
        .fillers(2)
        .fault_service(svc)
        .build()
        .unwrap();
    let store = Arc::new(FaultyStore::new(MemoryStore::new(vec![0u8; 8 * PAGE])));
    // SAFETY: nothing but this mapping changes the store while a slice of
    // it lives (none does).
    let map = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone() as Arc<dyn Store>)
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    let base = map.as_ptr() as usize;
    // SAFETY: pages of the live mapping.
    unsafe {
        (base as *const u8).read_volatile();
        ((base + PAGE) as *const u8).read_volatile();
        (base as *mut u8).write_volatile(1);
    }
    store.fail_writes(FaultTrigger::Always, libc::ENOSPC);
    assert!(map.flush().is_err(), "the store fails its writes");
    if !mixed {
        // SAFETY: SIG_IGN for SIGBUS; no handler runs.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_IGN) };
    }
    // With asynchronous dirty tracking the kernel lets a write to a
    // resident clean page through (umio hears of it later; it stays dirty
    // and the next flush fails): the write refused is a write miss.
    let target = match rt.dirty_tracking() {
        umio::DirtyTracking::Async => 2 * PAGE,
        _ => PAGE,
    };
    println!("writing to a clean page with SIGBUS ignored");
    std::io::stdout().flush().unwrap();
    // SAFETY: a page of the live mapping; the write is refused.
    unsafe { ((base + target) as *mut u8).write_volatile(2) };
    println!("the refused write went through");
    std::io::stdout().flush().unwrap();
    std::process::exit(3);
}

#[test]
fn a_refused_write_ends_the_process_even_with_sigbus_ignored() {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os("UMIO_STORAGE_CHILD").is_some() {
        return;
    }
    for (svc, scenario) in [
        ("fillers", "ignored"),
        ("in-thread", "ignored"),
        ("fillers", "ignored-mixed"),
    ] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("UMIO_STORAGE_CHILD", scenario)
            .env("UMIO_STORAGE_SERVICE", svc)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + CHILD_DEADLINE;
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{svc} {scenario}: the refused write faulted for ever (hung)");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        assert!(
            out.contains("with SIGBUS ignored"),
            "{svc} {scenario}: {out}"
        );
        assert_eq!(
            status.signal(),
            Some(libc::SIGBUS),
            "{svc} {scenario}: {status:?}\n{out}"
        );
    }
}
