//! Helpers shared by the integration tests: deterministic random data,
//! temporary files, runtimes and mappings, byte comparisons that name the
//! first difference, polling, and raw `read(2)`/`write(2)` loops.
//!
//! Each file under `tests/` is a crate of its own and pulls this module in
//! with `mod common;`.

// Every test binary compiles all of this module but uses only some of it:
// without this, each binary would warn about the helpers it does not call.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::IoRequest;
use umio::{FaultService, MapOptions, Mapping, PrefetchKind, Runtime, Store};

/// xorshift64: deterministic, good enough for test data and offsets.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `len` bytes of the xorshift stream seeded with `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let r = rng.next().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    v
}

/// A temporary file holding `data`. Keep the `NamedTempFile`: dropping it
/// deletes the file.
fn temp_file_with(data: &[u8]) -> tempfile::NamedTempFile {
    let mut tmp = tempfile::NamedTempFile::new().unwrap();
    tmp.write_all(data).unwrap();
    tmp.flush().unwrap();
    tmp
}

/// A temporary file holding `data`, opened read-write.
pub fn rw_file_with(data: &[u8]) -> (tempfile::NamedTempFile, File) {
    let tmp = temp_file_with(data);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp.path())
        .unwrap();
    (tmp, f)
}

/// A temporary file holding `data`, opened read-only.
pub fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, File) {
    let tmp = temp_file_with(data);
    let f = File::open(tmp.path()).unwrap();
    (tmp, f)
}

/// A runtime with a `cache_bytes` cache, `page_size` pages and `fillers`
/// filler threads; everything else default.
pub fn runtime(cache_bytes: u64, page_size: usize, fillers: usize) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(page_size)
        .fillers(fillers)
        .build()
        .unwrap()
}

/// Maps all of `store` with the runtime's page size.
pub fn map_store<S: Store>(
    rt: &Runtime,
    store: &Arc<S>,
    writable: bool,
    prefetch: PrefetchKind,
) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .writable(writable)
                .prefetch(prefetch),
        )
    }
    .unwrap()
}

/// Panics naming how many bytes differ and the first of them (a plain
/// `assert_eq!` on megabytes prints megabytes).
#[track_caller]
pub fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if got != want {
        let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
        panic!(
            "{what}: {bad} bytes differ, the first at byte {i}: got {:#04x}, want {:#04x}",
            got[i], want[i]
        );
    }
}

/// Two threads each read `reads` random slices (up to 100 000 bytes) of
/// the mapped bytes `mapped` and compare them with `data`.
pub fn read_random_slices(mapped: &[u8], data: &[u8], reads: usize, what: &str) {
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            sc.spawn(move || {
                let mut rng = Rng::new(t + 7);
                for _ in 0..reads {
                    let a = rng.below(data.len());
                    let b = (a + 1 + rng.below(100_000)).min(data.len());
                    assert_same(&mapped[a..b], &data[a..b], what);
                }
            });
        }
    });
}

/// Two threads, one per half of the mapped bytes `mapped`, each fill
/// `writes` random runs (up to 20 000 bytes) with random bytes, doing the
/// same to `model`, and check a random byte every 50 writes; then the
/// mapping must equal the model.
pub fn write_random_runs_in_halves(mapped: &mut [u8], model: &mut [u8], writes: usize, what: &str) {
    let half = mapped.len() / 2;
    {
        let (lo, hi) = mapped.split_at_mut(half);
        let (mlo, mhi) = model.split_at_mut(half);
        std::thread::scope(|sc| {
            for (t, (mem, model)) in [(lo, mlo), (hi, mhi)].into_iter().enumerate() {
                sc.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 100);
                    for i in 0..writes {
                        let a = rng.below(mem.len());
                        let b = (a + 1 + rng.below(20_000)).min(mem.len());
                        let v = rng.next() as u8;
                        mem[a..b].fill(v);
                        model[a..b].fill(v);
                        if i % 50 == 0 {
                            let c = rng.below(mem.len());
                            assert_eq!(mem[c], model[c], "{what}: byte {c}");
                        }
                    }
                });
            }
        });
    }
    assert_same(mapped, model, what);
}

/// Polls `cond` every `poll` for up to a minute (a hang detector, not a
/// timing check: a loaded machine may take seconds); panics naming `what`
/// if it never holds.
#[track_caller]
pub fn eventually(what: &str, poll: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(poll);
    }
}

/// Runs test `name` of this binary alone in a child process with `var=1`
/// in its environment, killed after `deadline` (a hang detector, generous
/// for a loaded machine); returns its exit status.
pub fn run_test_in_child(name: &str, var: &str, deadline: Duration) -> ExitStatus {
    run_test_in_child_with(name, var, deadline, Stdio::inherit())
}

/// [`run_test_in_child`], the child's standard error going to `stderr`.
pub fn run_test_in_child_with(
    name: &str,
    var: &str,
    deadline: Duration,
    stderr: Stdio,
) -> ExitStatus {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(var, "1")
        .stderr(stderr)
        .spawn()
        .unwrap();
    let end = Instant::now() + deadline;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {name} still running after {deadline:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether test `name` runs here: in its child process (`var` set), yes;
/// in the parent, it runs the child ([`run_test_in_child`]), asserts that
/// it succeeded, and no.
#[track_caller]
pub fn in_child(name: &str, var: &str, deadline: Duration) -> bool {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os(var).is_some() {
        return true;
    }
    let st = run_test_in_child(name, var, deadline);
    assert!(
        st.success(),
        "child {name}: {st:?} (signal {:?})",
        st.signal()
    );
    false
}

/// Runs `body` with each fault service: here with the fillers; with the
/// in-thread service (which installs a SIGBUS handler) in a child process
/// running test `name` alone with `var` set, killed after 300 s: a hang.
#[track_caller]
pub fn both_services(name: &str, var: &str, body: impl FnOnce(FaultService)) {
    if std::env::var_os(var).is_some() {
        body(FaultService::InThread);
        return;
    }
    body(FaultService::Fillers);
    in_child(name, var, Duration::from_secs(300));
}

/// Repeats `op(done)` (a `read(2)` or `write(2)` of the rest after `done`
/// bytes) until `len` bytes are through; panics with `what` and the OS error
/// if a call returns 0 or less.
#[track_caller]
fn raw_io_loop(len: usize, what: &str, mut op: impl FnMut(usize) -> isize) {
    let mut done = 0;
    while done < len {
        let n = op(done);
        assert!(n > 0, "{what}: {}", std::io::Error::last_os_error());
        done += n as usize;
    }
}

/// `write(2)` of all of `buf`, looping over short writes.
#[track_caller]
pub fn write_all_raw(fd: i32, buf: *const u8, len: usize) {
    raw_io_loop(len, "write(2) from the mapping failed", |done| {
        // SAFETY: buf..buf+len is readable memory (a live mapping).
        unsafe { libc::write(fd, buf.add(done).cast(), len - done) }
    });
}

/// `read(2)` until `len` bytes arrived, looping over short reads.
#[track_caller]
pub fn read_exact_raw(fd: i32, buf: *mut u8, len: usize) {
    raw_io_loop(len, "read(2) into the mapping failed or hit EOF", |done| {
        // SAFETY: buf..buf+len is writable memory (a live writable mapping).
        unsafe { libc::read(fd, buf.add(done).cast(), len - done) }
    });
}

/// Prints umio's warnings and errors to stderr (the test harness shows
/// them for failing tests), so that a failure says what umio saw.
pub fn log_to_stderr() {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) {
                eprintln!("[{}] {}", r.level(), r.args());
            }
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

/// What a [`Hooked`] store does before it passes a call to its memory
/// store: wait at a gate, log, count; and how it performs a batch. Each
/// defaults to nothing (and to one request after another, at depth 1).
pub trait StoreHooks: Send + Sync + 'static {
    /// Before each read, with its offset.
    fn before_read(&self, _offset: u64) {}
    /// Before each write, with its offset.
    fn before_write(&self, _offset: u64) {}
    /// Before each sync.
    fn before_sync(&self) {}
    /// Before each batch given to [`Store::submit`], with its requests.
    fn before_submit(&self, _batch: &[IoRequest<'_>]) {}
    /// How the store performs a batch's requests.
    fn batches(&self) -> Batches {
        Batches::OneByOne
    }
    /// The store's [`Store::queue_depth`].
    fn queue_depth(&self) -> usize {
        1
    }
}

/// How a [`Hooked`] store performs the requests of a batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Batches {
    /// One after another, each through the hooks (`read_at`, `write_at`):
    /// [`Store::submit`]'s default.
    OneByOne,
    /// All at once, each on a thread of its own and through the hooks: a
    /// device that works on its whole queue.
    AllAtOnce,
    /// One after another on the memory store, past the hooks: only
    /// [`StoreHooks::before_submit`] sees them.
    PastTheHooks,
}

/// A memory store that runs its hooks (the state a test watches, which
/// it derefs to) before reads, writes, syncs and batches: the gated,
/// logging, pairing and counting stores of the tests, without each
/// writing the store out again.
pub struct Hooked<H> {
    inner: umio::backends::MemoryStore,
    name: &'static str,
    writable: bool,
    hooks: H,
}

impl<H: StoreHooks> Hooked<H> {
    /// A writable store of `bytes` named `name`.
    pub fn new(bytes: Vec<u8>, name: &'static str, hooks: H) -> Arc<Hooked<H>> {
        Arc::new(Hooked {
            inner: umio::backends::MemoryStore::new(bytes),
            name,
            writable: true,
            hooks,
        })
    }

    /// The same, read-only.
    pub fn read_only(bytes: Vec<u8>, name: &'static str, hooks: H) -> Arc<Hooked<H>> {
        Arc::new(Hooked {
            inner: umio::backends::MemoryStore::new(bytes),
            name,
            writable: false,
            hooks,
        })
    }
}

impl<H> Hooked<H> {
    /// The memory store behind the hooks.
    pub fn memory(&self) -> &umio::backends::MemoryStore {
        &self.inner
    }
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: StoreHooks> Store for Hooked<H> {
    fn len(&self) -> Result<u64, umio::StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), umio::StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, umio::StoreError> {
        self.hooks.before_read(offset);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), umio::StoreError> {
        self.hooks.before_write(offset);
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), umio::StoreError> {
        self.hooks.before_sync();
        Ok(())
    }
    fn is_writable(&self) -> bool {
        self.writable
    }
    fn name(&self) -> &str {
        self.name
    }
    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        self.hooks.before_submit(batch);
        let todo = batch.iter_mut().filter(|r| r.result().is_none());
        match self.hooks.batches() {
            Batches::OneByOne => todo.for_each(|req| req.perform(self)),
            Batches::AllAtOnce => std::thread::scope(|sc| {
                for req in todo {
                    sc.spawn(move || req.perform(self));
                }
            }),
            Batches::PastTheHooks => todo.for_each(|req| req.perform(&self.inner)),
        }
    }
    fn queue_depth(&self) -> usize {
        self.hooks.queue_depth()
    }
}

/// A gate a store's calls wait at while it is closed, which a test opens
/// when it has seen a caller wait (the window it means to open).
#[derive(Default)]
pub struct Gate {
    /// (closed, callers waiting)
    state: std::sync::Mutex<(bool, usize)>,
    changed: std::sync::Condvar,
}

impl Gate {
    pub fn close(&self) {
        self.state.lock().unwrap().0 = true;
    }

    pub fn open(&self) {
        self.state.lock().unwrap().0 = false;
        self.changed.notify_all();
    }

    /// Called by the store: waits while the gate is closed.
    pub fn pass(&self) {
        let mut g = self.state.lock().unwrap();
        if !g.0 {
            return;
        }
        g.1 += 1;
        self.changed.notify_all();
        let mut g = self.changed.wait_while(g, |g| g.0).unwrap();
        g.1 -= 1;
    }

    /// Waits until a caller waits at the gate, or `limit` passed; whether
    /// one does.
    pub fn wait_for_caller(&self, limit: Duration) -> bool {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .changed
            .wait_timeout_while(g, limit, |g| g.1 == 0)
            .unwrap();
        g.1 > 0
    }
}
