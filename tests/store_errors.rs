//! A store that fails: a failed write-back is reported (by `flush`, by the
//! next `flush` after a failed eviction, by `unmap`) and loses nothing while
//! the region lives; a failed read poisons the page (SIGBUS for a thread,
//! EFAULT for a system call) until `DontNeed` clears it.

mod common;

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use umio::backends::{MemoryStore, StoreError, StoreOp};
use umio::{Error, Mapping, PrefetchKind, Runtime, Store, UncheckedAdvice};

const PAGE: usize = 16 << 10;
const STORE_LEN: usize = 1 << 20;

/// A memory store whose writes, syncs, or reads at or past an offset can be
/// made to fail with EIO.
struct FlakyStore {
    inner: MemoryStore,
    fail_writes: AtomicBool,
    fail_sync: AtomicBool,
    /// Reads touching bytes at or past this offset fail.
    fail_reads_from: AtomicU64,
}

impl FlakyStore {
    fn new() -> Arc<FlakyStore> {
        Arc::new(FlakyStore {
            inner: MemoryStore::new(pattern(STORE_LEN)),
            fail_writes: AtomicBool::new(false),
            fail_sync: AtomicBool::new(false),
            fail_reads_from: AtomicU64::new(u64::MAX),
        })
    }
}

impl Store for FlakyStore {
    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        if offset + buf.len() as u64 > self.fail_reads_from.load(Relaxed) {
            return Err(StoreError::new(StoreOp::Read, offset, libc::EIO));
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if self.fail_writes.load(Relaxed) {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EIO));
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), StoreError> {
        if self.fail_sync.load(Relaxed) {
            return Err(StoreError::new(StoreOp::Sync, 0, libc::EIO));
        }
        Ok(())
    }
    fn is_writable(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "flaky"
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 73 % 251) as u8).collect()
}

/// 8 pages of cache.
fn runtime() -> Runtime {
    common::runtime(8 * PAGE as u64, PAGE, 2)
}

fn map(rt: &Runtime, store: &Arc<FlakyStore>, writable: bool) -> Mapping {
    common::map_store(rt, store, writable, PrefetchKind::None)
}

#[track_caller]
fn assert_store_error(r: Result<(), Error>, op: StoreOp) -> StoreError {
    match r {
        Err(Error::Store(e)) => {
            assert_eq!(e.op, op, "{e:?}");
            assert_eq!(e.errno, libc::EIO);
            assert_eq!(Error::Store(e).errno(), libc::EIO);
            e
        }
        other => panic!("expected a store {op} error, got {other:?}"),
    }
}

#[test]
fn failed_flush_keeps_pages_dirty_until_a_flush_succeeds() {
    let rt = runtime();
    let store = FlakyStore::new();
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    m.as_mut_slice()[PAGE + 1] = 0xA1;
    m.as_mut_slice()[2 * PAGE + 2] = 0xA2;
    store.fail_writes.store(true, Relaxed);
    let e = assert_store_error(m.flush(), StoreOp::Write);
    assert_eq!(e.offset, PAGE as u64, "the failed write's offset");
    assert_eq!(m.mapping().dirty_pages(), 2, "failed pages stay dirty");
    assert!(rt.stats().write_errors > 0);
    // The pages are still usable, writable included.
    assert_eq!(m.as_slice()[PAGE + 1], 0xA1);
    m.as_mut_slice()[PAGE + 3] = 0xA3;
    assert_eq!(
        store.inner.snapshot()[PAGE + 1],
        pattern(STORE_LEN)[PAGE + 1]
    );
    // The store recovers: the next flush writes everything.
    store.fail_writes.store(false, Relaxed);
    m.flush().unwrap();
    assert_eq!(m.mapping().dirty_pages(), 0);
    let snap = store.inner.snapshot();
    assert_eq!(
        (snap[PAGE + 1], snap[PAGE + 3], snap[2 * PAGE + 2]),
        (0xA1, 0xA3, 0xA2)
    );
}

#[test]
fn failed_sync_is_reported() {
    let rt = runtime();
    let store = FlakyStore::new();
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    m.as_mut_slice()[0] = 1;
    store.fail_sync.store(true, Relaxed);
    assert_store_error(m.flush(), StoreOp::Sync);
    store.fail_sync.store(false, Relaxed);
    m.flush().unwrap();
}

#[test]
fn failed_eviction_write_back_is_reported_by_the_next_flush() {
    let rt = runtime();
    let store = FlakyStore::new();
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    let data = pattern(STORE_LEN);
    store.fail_writes.store(true, Relaxed);
    m.as_mut_slice()[5] = 0xEE;
    // Read the rest, several times over the cache, until eviction has
    // tried (and failed) to write the dirty page back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.stats().write_errors == 0 {
        assert!(
            Instant::now() < deadline,
            "eviction never tried the dirty page"
        );
        for p in 1..STORE_LEN / PAGE {
            assert_eq!(m.as_slice()[p * PAGE], data[p * PAGE]);
        }
    }
    // Nothing was lost: the page is still dirty and holds the write.
    assert_eq!(m.mapping().dirty_pages(), 1);
    assert_eq!(m.as_slice()[5], 0xEE);
    store.fail_writes.store(false, Relaxed);
    assert_store_error(m.flush(), StoreOp::Write);
    assert_eq!(store.inner.snapshot()[5], 0xEE, "the flush still wrote it");
    m.flush().unwrap();
    assert_eq!(m.mapping().dirty_pages(), 0);
}

#[test]
fn unmap_reports_a_failed_write_back() {
    let rt = runtime();
    let store = FlakyStore::new();
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    m.as_mut_slice()[3 * PAGE] = 0x33;
    store.fail_writes.store(true, Relaxed);
    assert_store_error(m.unmap(), StoreOp::Write);
    assert_eq!(rt.stats().regions, 0, "the region is gone all the same");
}

#[test]
fn fillers_poison_a_failed_read_so_syscalls_get_efault_until_dont_need_clears_it() {
    // Fillers only: the in-thread service poisons nothing (the faulting
    // thread raises its SIGBUS itself), and system calls on non-resident
    // pages fail with EFAULT there whatever the store did.
    let rt = Runtime::builder()
        .cache_bytes(8 * PAGE as u64)
        .page_size(PAGE)
        .fillers(2)
        .fault_service(umio::FaultService::Fillers)
        .build()
        .unwrap();
    let store = FlakyStore::new();
    let mut m = map(&rt, &store, false);
    let data = pattern(STORE_LEN);
    store.fail_reads_from.store(4 * PAGE as u64, Relaxed);
    assert_eq!(m.as_slice()[PAGE], data[PAGE], "a good page reads fine");
    // write(2) from the failing page: the kernel's copy hits the poisoned
    // page and the call fails with EFAULT instead of hanging.
    let mut out = tempfile::tempfile().unwrap();
    // SAFETY: the source is inside the mapping.
    let n = unsafe { libc::write(out.as_raw_fd(), m.as_ptr().add(4 * PAGE).cast(), 100) };
    let err = std::io::Error::last_os_error();
    assert_eq!(n, -1, "write(2) from a page whose read failed");
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    assert_eq!(rt.stats().read_errors, 1, "{:?}", rt.stats());
    assert!(!m.is_resident(4 * PAGE));
    // The store recovers, but the poison stays until DontNeed.
    store.fail_reads_from.store(u64::MAX, Relaxed);
    // SAFETY: as above.
    let n = unsafe { libc::write(out.as_raw_fd(), m.as_ptr().add(4 * PAGE).cast(), 100) };
    assert_eq!(n, -1, "the poison was cleared by itself");
    m.advise_mut(4 * PAGE..5 * PAGE, UncheckedAdvice::DontNeed)
        .unwrap();
    assert_eq!(m.as_slice()[4 * PAGE..5 * PAGE], data[4 * PAGE..5 * PAGE]);
    // SAFETY: as above.
    let n = unsafe { libc::write(out.as_raw_fd(), m.as_ptr().add(4 * PAGE).cast(), 100) };
    assert_eq!(n, 100);
    use std::io::{Read, Seek};
    out.rewind().unwrap();
    let mut got = Vec::new();
    out.read_to_end(&mut got).unwrap();
    assert_eq!(got, data[4 * PAGE..4 * PAGE + 100]);
}

/// Run by `failed_read_raises_sigbus` in a child process: reads a good
/// page (and says so), then a page whose read fails, which must kill the
/// process with SIGBUS.
#[test]
#[ignore = "run in a child process by failed_read_raises_sigbus"]
fn sigbus_child() {
    if std::env::var_os("UMIO_SIGBUS_CHILD").is_none() {
        return;
    }
    let rt = runtime();
    assert!(rt.kernel_features().poison(), "no UFFDIO_POISON");
    let store = FlakyStore::new();
    store.fail_reads_from.store(4 * PAGE as u64, Relaxed);
    let m = map(&rt, &store, false);
    assert_eq!(m.as_slice()[0], pattern(1)[0]);
    println!("GOOD PAGE OK");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    // SAFETY: inside the mapping; the read is expected to raise SIGBUS.
    let b = unsafe { std::ptr::read_volatile(m.as_ptr().add(4 * PAGE + 7)) };
    println!("NO SIGBUS: read {b}");
}

#[test]
fn failed_read_raises_sigbus() {
    if !umio::kernel_features().unwrap().poison() {
        eprintln!("this kernel has no UFFDIO_POISON: failed reads are retried, not signalled");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "sigbus_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("UMIO_SIGBUS_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the child hung on a page whose read failed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(out.contains("GOOD PAGE OK"), "child output: {out}");
    assert!(!out.contains("NO SIGBUS"), "child output: {out}");
    assert_eq!(
        status.signal(),
        Some(libc::SIGBUS),
        "the child ended with {status:?}, output: {out}"
    );
}
