//! The cache is the only cache: `Runtime::map_file` with defaults leaves
//! (almost) nothing of the file in the kernel's page cache, on reads and
//! on write-back, also for a file whose last page is partial, and never
//! changes the file's length; `MapOptions::page_cache(true)` and
//! `UMIO_PAGE_CACHE=1` keep the kernel's copy.
//!
//! The checks of the page cache need a file system with direct I/O and a
//! droppable page cache (ext4, xfs...: `statx` reports `STATX_DIOALIGN`).
//! The temporary directory is tried; where it has none the tests print
//! SKIPPED and check only the bytes. On tmpfs (no direct I/O, and its pages
//! are the file itself, read and written in place) the buffered path is
//! checked for its bytes and length; drop-behind's cache dropping is
//! checked by the unit tests of `umio_backends::UncachedFileStore` on a
//! file system that has a cache.

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use umio::backends::{cached_bytes, dio_alignment};
use umio::{MapOptions, Runtime};

use common::{Rng, assert_same, random_bytes};

/// Runs `f` on a thread and fails the test if it takes longer than 60 s
/// (a fault that is never served would otherwise hang the test).
fn with_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no result within 60 s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: failed (see above)"),
    }
}

/// A directory on a file system with direct I/O, or `None`.
fn dio_dir() -> Option<PathBuf> {
    let d = std::env::temp_dir();
    let f = tempfile::tempfile_in(&d).ok()?;
    dio_alignment(&f).filter(|&a| a <= 4096).map(|_| d)
}

/// A file holding `data` in `dir`, on disk and out of the page cache.
fn file_in(dir: &Path, data: &[u8]) -> (tempfile::NamedTempFile, File) {
    let mut tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
    tmp.write_all(data).unwrap();
    tmp.as_file().sync_all().unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp.path())
        .unwrap();
    // SAFETY: advice on a descriptor we own.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    (tmp, f)
}

fn share_cached(f: &File) -> f64 {
    let (cached, len) = cached_bytes(f).unwrap();
    cached as f64 / len as f64
}

fn runtime() -> Runtime {
    // A cache of 1 MiB for a 16 MiB file: reads evict all the time.
    Runtime::builder()
        .cache_bytes(1 << 20)
        .fillers(1)
        .build()
        .unwrap()
}

/// Reads every 4 KiB page of the file through a mapping made with `opts`
/// in random order and checks the bytes; returns the share of the file in
/// the kernel's page cache afterwards.
fn random_reads_then_share(rt: Runtime, dir: PathBuf, opts: MapOptions) -> f64 {
    let len = 16 << 20;
    let data = random_bytes(len, 19);
    let (_tmp, f) = file_in(&dir, &data);
    assert!(share_cached(&f) < 0.01, "the file was not dropped first");
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, opts) }.unwrap();
    let pages = len / 4096;
    let mut order: Vec<usize> = (0..pages).collect();
    let mut rng = Rng::new(7);
    for i in (1..pages).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let m = map.as_slice();
    for p in order {
        assert_same(&m[p * 4096..][..4096], &data[p * 4096..][..4096], "page");
    }
    drop(map);
    share_cached(&f)
}

#[test]
fn random_reads_through_defaults_leave_under_5_percent_in_the_page_cache() {
    let Some(dir) = dio_dir() else {
        eprintln!("SKIPPED: the temporary directory has no direct I/O (statx STATX_DIOALIGN)");
        return;
    };
    let share = with_deadline("random reads", move || {
        random_reads_then_share(runtime(), dir, MapOptions::new())
    });
    eprintln!("page cache share after random reads, defaults: {share:.3}");
    assert!(share < 0.05, "the kernel cached {share:.3} of the file");
}

#[test]
fn page_cache_opt_in_keeps_the_kernels_copy() {
    let Some(dir) = dio_dir() else {
        eprintln!("SKIPPED: the temporary directory has no direct I/O (statx STATX_DIOALIGN)");
        return;
    };
    let share = with_deadline("random reads", move || {
        random_reads_then_share(runtime(), dir, MapOptions::new().page_cache(true))
    });
    eprintln!("page cache share after random reads, page_cache(true): {share:.3}");
    assert!(share > 0.5, "the kernel cached only {share:.3} of the file");
}

#[test]
fn umio_page_cache_env_keeps_the_kernels_copy() {
    let Some(dir) = dio_dir() else {
        eprintln!("SKIPPED: the temporary directory has no direct I/O (statx STATX_DIOALIGN)");
        return;
    };
    // SAFETY: no other test of this binary reads the environment (they
    // build their runtimes without `from_env`).
    unsafe { std::env::set_var("UMIO_PAGE_CACHE", "1") };
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .fillers(1)
        .from_env()
        .unwrap()
        .build()
        .unwrap();
    // SAFETY: as above.
    unsafe { std::env::remove_var("UMIO_PAGE_CACHE") };
    assert!(rt.page_cache());
    let share = with_deadline("random reads", move || {
        random_reads_then_share(rt, dir, MapOptions::new())
    });
    assert!(share > 0.5, "the kernel cached only {share:.3} of the file");
}

/// A writable mapping of a file whose last page is partial: the bytes read
/// right, write-back keeps the file's length, and (where `dio`) nothing of
/// the file stays in the page cache after the flush.
fn partial_last_page_round_trip(dir: PathBuf, dio: bool) {
    let len = 5 * 4096 + 1000;
    let data = random_bytes(len, 23);
    let (tmp, f) = file_in(&dir, &data);
    let rt = common::runtime(1 << 20, 4096, 1);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&f, MapOptions::new().writable(true).page_size(4096)) }
        .unwrap()
        .into_mut()
        .unwrap();
    assert_eq!(map.len(), len);
    assert_same(map.as_slice(), &data, "mapped file");
    let mut model = data.clone();
    {
        let m = map.as_mut_slice();
        // A whole page and the partial last page, dirtied.
        m[4096..8192].fill(0xA5);
        m[5 * 4096..].fill(0x5A);
    }
    model[4096..8192].fill(0xA5);
    model[5 * 4096..].fill(0x5A);
    map.flush().unwrap();
    assert_eq!(
        f.metadata().unwrap().len(),
        len as u64,
        "write-back changed the file's length"
    );
    if dio {
        // Checked before anything below reads the file through the cache.
        let (cached, _) = cached_bytes(&f).unwrap();
        assert_eq!(cached, 0, "the file's pages stayed in the page cache");
    }
    map.unmap().unwrap();
    assert_eq!(std::fs::metadata(tmp.path()).unwrap().len(), len as u64);
    assert_same(
        &std::fs::read(tmp.path()).unwrap(),
        &model,
        "file after write-back",
    );
}

#[test]
fn direct_partial_last_page_reads_and_writes_back() {
    let Some(dir) = dio_dir() else {
        eprintln!("SKIPPED: the temporary directory has no direct I/O (statx STATX_DIOALIGN)");
        return;
    };
    with_deadline("partial last page", move || {
        partial_last_page_round_trip(dir, true)
    });
}

#[test]
fn tmpfs_partial_last_page_reads_and_writes_back() {
    let dir = PathBuf::from("/dev/shm");
    if !dir.is_dir() {
        eprintln!("SKIPPED: no /dev/shm");
        return;
    }
    let f = tempfile::tempfile_in(&dir).unwrap();
    assert_eq!(dio_alignment(&f), None, "tmpfs reports direct I/O now");
    with_deadline("partial last page on tmpfs", move || {
        partial_last_page_round_trip(dir, false)
    });
}
