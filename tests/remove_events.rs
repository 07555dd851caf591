//! The application's own `madvise` on umio memory, called directly (not
//! through `Mapping::advise`), with remove events on
//! (`Builder::remove_events`): umio drops the pages from its cache as
//! `Advice::DontNeed` does, so the next access reads the store, and its
//! counts stay true. A umio mapping is private anonymous memory over a
//! store, so `madvise` means what it means on a `MAP_PRIVATE` file
//! mapping: changes not yet written back are discarded, and the next read
//! sees the store's bytes; `MADV_REMOVE` is refused (`EINVAL`), as on any
//! private mapping. Runs in either fault service (`UMIO_FAULT_SERVICE`).
//!
//! Each test runs under a watchdog: a `madvise` whose event nobody reads
//! would hang, and the watchdog fails the run instead.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use umio::{MapOptions, Runtime};

use common::{eventually, random_bytes, rw_file_with};

const PAGE: usize = 4096;

/// Ends the process if the test is still running after `limit`: a hang
/// (a `madvise` waiting forever for its event to be read) fails the run
/// rather than stalling it.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(what: &'static str, limit: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + limit;
            while !d.load(Ordering::Acquire) {
                if Instant::now() > end {
                    eprintln!("watchdog: {what} still running after {limit:?}: hung");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn runtime(cache_bytes: u64, fillers: usize) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(PAGE)
        .fillers(fillers)
        .remove_events(true)
        .build()
        .unwrap()
}

fn madvise(ptr: *const u8, pages: std::ops::Range<usize>, advice: i32) -> std::io::Result<()> {
    // SAFETY: the range lies in a mapping the caller holds; madvise with
    // these advice values changes no memory outside it.
    let rc = unsafe {
        libc::madvise(
            ptr.add(pages.start * PAGE) as *mut libc::c_void,
            pages.len() * PAGE,
            advice,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn page_of(bytes: &[u8], p: usize) -> &[u8] {
    &bytes[p * PAGE..(p + 1) * PAGE]
}

/// Pages 0..16 dirty (written twice, flushed once in between), 16..32
/// clean with flushed writes, 32..64 clean as read; then the program's own
/// `madvise` on 8..24 and 40..48.
fn dropped_pages_read_the_store(advice: i32, name: &'static str) {
    let _dog = Watchdog::new(name, Duration::from_secs(120));
    let orig = random_bytes(64 * PAGE, 1);
    let first = random_bytes(32 * PAGE, 2);
    let second = random_bytes(16 * PAGE, 3);
    let (tmp, file) = rw_file_with(&orig);
    // One filler: the configuration where a reader dropping pages itself
    // would wait for itself.
    let rt = runtime(1 << 20, 1);
    let mut map = rt
        .map_file(&file, MapOptions::new().writable(true))
        .unwrap();
    let m = map.as_mut_slice();
    m[..32 * PAGE].copy_from_slice(&first);
    map.flush().unwrap();
    let m = map.as_mut_slice();
    m[..16 * PAGE].copy_from_slice(&second);
    let mut sum = 0u64;
    for p in 32..64 {
        sum += u64::from(m[p * PAGE]);
    }
    std::hint::black_box(sum);
    assert_eq!(map.dirty_pages(), 16);
    let before = rt.stats();
    assert_eq!(before.resident_bytes, (64 * PAGE) as u64);

    let ptr = map.as_slice().as_ptr();
    madvise(ptr, 8..24, advice).unwrap();
    madvise(ptr, 40..48, advice).unwrap();

    // umio drops the 24 pages (on an evictor, after the events are read).
    eventually(
        "the removed pages dropped",
        Duration::from_millis(5),
        || rt.stats().removed_pages >= 24,
    );
    let after = rt.stats();
    assert_eq!(after.removed_pages, 24, "{name}: pages dropped");
    assert_eq!(
        after.resident_bytes,
        (40 * PAGE) as u64,
        "{name}: cache usage after the drop"
    );
    assert_eq!(map.dirty_pages(), 8, "{name}: pages 0..8 stay dirty");

    // What each page reads now: the store's bytes where dropped (the
    // unwritten second writes to 8..16 are gone), the rest as before.
    let m = map.as_slice();
    for p in 0..64 {
        let want = match p {
            0..8 => page_of(&second, p),
            8..32 => page_of(&first, p),
            _ => page_of(&orig, p),
        };
        assert!(page_of(m, p) == want, "{name}: page {p} reads wrong bytes");
    }
    map.flush().unwrap();
    drop(map);
    let on_disk = std::fs::read(tmp.path()).unwrap();
    for p in 0..64 {
        let want = match p {
            0..8 => page_of(&second, p),
            8..32 => page_of(&first, p),
            _ => page_of(&orig, p),
        };
        assert!(
            page_of(&on_disk, p) == want,
            "{name}: page {p} of the file after flush"
        );
    }
    let s = rt.stats();
    assert_eq!(s.no_progress_faults, 0, "{name}: no thread got stuck");
    assert_eq!(s.read_errors, 0);
}

#[test]
fn madv_dontneed_drops_pages_and_the_next_read_reads_the_store() {
    dropped_pages_read_the_store(libc::MADV_DONTNEED, "MADV_DONTNEED");
}

#[test]
fn madv_free_drops_pages_and_the_next_read_reads_the_store() {
    dropped_pages_read_the_store(libc::MADV_FREE, "MADV_FREE");
}

/// `MADV_REMOVE` needs a shared mapping; umio's memory is private, so the
/// kernel refuses it, as on a `MAP_PRIVATE` file mapping, and nothing
/// changes (`Mapping::advise(Advice::Remove)` is umio's way).
#[test]
fn madv_remove_is_refused_and_changes_nothing() {
    let _dog = Watchdog::new("MADV_REMOVE", Duration::from_secs(120));
    let orig = random_bytes(16 * PAGE, 4);
    let (_tmp, file) = rw_file_with(&orig);
    let rt = runtime(1 << 20, 1);
    let mut map = rt
        .map_file(&file, MapOptions::new().writable(true))
        .unwrap();
    map.as_mut_slice()[..PAGE].fill(7);
    let e = madvise(map.as_slice().as_ptr(), 0..8, libc::MADV_REMOVE).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(map.dirty_pages(), 1);
    assert!(map.as_slice()[..PAGE].iter().all(|&b| b == 7));
    assert!(map.as_slice()[PAGE..] == orig[PAGE..]);
    assert_eq!(rt.stats().removed_pages, 0);
}

/// Threads read a mapping four times the cache (umio evicts all the time,
/// each eviction raising remove events of its own) while another calls
/// `madvise(MADV_DONTNEED)` on ranges of it, with one filler: nothing
/// hangs, and every read sees the file's bytes.
#[test]
fn own_evictions_and_the_programs_madvise_together_never_hang() {
    let _dog = Watchdog::new("evictions with madvise", Duration::from_secs(300));
    const PAGES: usize = 1024;
    let data = Arc::new(random_bytes(PAGES * PAGE, 5));
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime((PAGES * PAGE / 4) as u64, 1);
    let map = Arc::new(rt.map_file(&file, MapOptions::new()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (map, data) = (map.clone(), data.clone());
            std::thread::spawn(move || {
                let mut rng = common::Rng::new(10 + t);
                for _ in 0..20_000 {
                    let p = rng.below(PAGES);
                    let at = p * PAGE + rng.below(PAGE);
                    assert_eq!(map.as_slice()[at], data[at], "byte {at}");
                }
            })
        })
        .collect();
    let advisor = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = common::Rng::new(99);
            let ptr = map.as_slice().as_ptr();
            let mut calls = 0u32;
            while !stop.load(Ordering::Acquire) || calls < 100 {
                let p = rng.below(PAGES - 16);
                madvise(ptr, p..p + 1 + rng.below(16), libc::MADV_DONTNEED).unwrap();
                calls += 1;
                std::thread::yield_now();
            }
        })
    };
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    advisor.join().unwrap();
    let s = rt.stats();
    assert!(s.evicted_pages > 0, "the cache was full: umio evicted");
    assert!(s.remove_events > 0);
    // Every byte still reads the file's.
    assert!(map.as_slice() == &data[..], "the mapping reads the file");
}
