//! The application's own `madvise` on umio memory, called directly (not
//! through `Mapping::advise`), with remove events on
//! (`Builder::remove_events`): umio drops the pages from its cache as
//! `UncheckedAdvice::DontNeed` does, so the next access reads the store, and its
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
/// clean with flushed writes, 32..64 clean as read: each page's bytes
/// before the `madvise` (`before`) and in the store (`store`).
struct Setup {
    tmp: tempfile::NamedTempFile,
    rt: Runtime,
    map: umio::MappingMut,
    orig: Vec<u8>,
    first: Vec<u8>,
    second: Vec<u8>,
}

impl Setup {
    fn new() -> Setup {
        let orig = random_bytes(64 * PAGE, 1);
        let first = random_bytes(32 * PAGE, 2);
        let second = random_bytes(16 * PAGE, 3);
        let (tmp, file) = rw_file_with(&orig);
        // One filler: the configuration where a reader dropping pages
        // itself would wait for itself.
        let rt = runtime(1 << 20, 1);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
            .unwrap()
            .into_mut()
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
        assert_eq!(map.mapping().dirty_pages(), 16);
        assert_eq!(rt.stats().resident_bytes, (64 * PAGE) as u64);
        Setup {
            tmp,
            rt,
            map,
            orig,
            first,
            second,
        }
    }

    fn before(&self, p: usize) -> &[u8] {
        match p {
            0..16 => page_of(&self.second, p),
            16..32 => page_of(&self.first, p),
            _ => page_of(&self.orig, p),
        }
    }

    fn store(&self, p: usize) -> &[u8] {
        match p {
            0..32 => page_of(&self.first, p),
            _ => page_of(&self.orig, p),
        }
    }
}

const REMOVED: [std::ops::Range<usize>; 2] = [8..24, 40..48];

fn removed(p: usize) -> bool {
    REMOVED.iter().any(|r| r.contains(&p))
}

/// `MADV_DONTNEED`: the pages are gone; umio drops them (unwritten
/// changes to 8..16 discarded, as a `MAP_PRIVATE` file mapping discards
/// its private changes), and the next read reads the store.
#[test]
fn madv_dontneed_drops_pages_and_the_next_read_reads_the_store() {
    let _dog = Watchdog::new("MADV_DONTNEED", Duration::from_secs(120));
    let s = Setup::new();
    let ptr = s.map.as_slice().as_ptr();
    for r in REMOVED {
        madvise(ptr, r, libc::MADV_DONTNEED).unwrap();
    }
    // umio settles the 24 pages on an evictor after the events are read.
    eventually(
        "the removed pages dropped",
        Duration::from_millis(5),
        || {
            // Pages are counted as they drop, their space released after
            // the last of a range.
            let st = s.rt.stats();
            st.removed_pages >= 24 && st.resident_bytes <= (40 * PAGE) as u64
        },
    );
    let after = s.rt.stats();
    assert_eq!(after.removed_pages, 24, "pages dropped");
    assert_eq!(
        after.resident_bytes,
        (40 * PAGE) as u64,
        "cache usage after the drop"
    );
    assert_eq!(s.map.mapping().dirty_pages(), 8, "pages 0..8 stay dirty");
    let m = s.map.as_slice();
    for p in 0..64 {
        let want = if removed(p) { s.store(p) } else { s.before(p) };
        assert!(page_of(m, p) == want, "page {p} reads wrong bytes");
    }
    s.map.flush().unwrap();
    let on_disk = std::fs::read(s.tmp.path()).unwrap();
    for p in 0..64 {
        let want = if removed(p) { s.store(p) } else { s.before(p) };
        assert!(
            page_of(&on_disk, p) == want,
            "page {p} of the file after flush"
        );
    }
    let st = s.rt.stats();
    assert_eq!(st.no_progress_faults, 0, "no thread got stuck");
    assert_eq!(st.read_errors, 0);
}

/// `MADV_FREE`: the kernel may keep the pages, or take them later; a page
/// written after the call is kept with the write (an allocator reusing
/// freed memory). Every page reads what it held or the store's bytes,
/// every write made after the call is read back and reaches the file.
#[test]
fn madv_free_keeps_later_writes_and_reads_old_or_store_bytes() {
    let _dog = Watchdog::new("MADV_FREE", Duration::from_secs(120));
    let mut s = Setup::new();
    let ptr = s.map.as_slice().as_ptr();
    for r in REMOVED {
        madvise(ptr, r, libc::MADV_FREE).unwrap();
    }
    // At once, as an allocator handing the memory out again would: a
    // clean page (20) and a dirty one (10), and one again once settled.
    let m = s.map.as_mut_slice();
    m[10 * PAGE..10 * PAGE + 100].fill(b'x');
    m[20 * PAGE + 7] = b'y';
    eventually("the events read", Duration::from_millis(5), || {
        s.rt.stats().remove_events >= 2
    });
    std::thread::sleep(4 * Duration::from_millis(2));
    let m = s.map.as_mut_slice();
    m[41 * PAGE + 9] = b'z';
    let check = |got: &[u8], what: &str, s: &Setup| {
        for p in 0..64 {
            let g = page_of(got, p);
            let ok = match p {
                10 => {
                    g[..100].iter().all(|&b| b == b'x')
                        && (g[100..] == s.before(p)[100..] || g[100..] == s.store(p)[100..])
                }
                20 | 41 => {
                    let (at, b) = if p == 20 { (7, b'y') } else { (9, b'z') };
                    g[at] == b
                        && (g[..at] == s.before(p)[..at] || g[..at] == s.store(p)[..at])
                        && (g[at + 1..] == s.before(p)[at + 1..]
                            || g[at + 1..] == s.store(p)[at + 1..])
                }
                _ if removed(p) => g == s.before(p) || g == s.store(p),
                _ => g == s.before(p),
            };
            assert!(
                ok,
                "{what}: page {p} holds neither its bytes nor the store's"
            );
        }
    };
    check(s.map.as_slice(), "the mapping", &s);
    s.map.flush().unwrap();
    let on_disk = std::fs::read(s.tmp.path()).unwrap();
    check(&on_disk, "the file after flush", &s);
    assert_eq!(s.rt.stats().read_errors, 0);
}

/// `MADV_REMOVE` needs a shared mapping; umio's memory is private, so the
/// kernel refuses it, as on a `MAP_PRIVATE` file mapping, and nothing
/// changes (`Mapping::advise(UncheckedAdvice::Remove)` is umio's way).
#[test]
fn madv_remove_is_refused_and_changes_nothing() {
    let _dog = Watchdog::new("MADV_REMOVE", Duration::from_secs(120));
    let orig = random_bytes(16 * PAGE, 4);
    let (_tmp, file) = rw_file_with(&orig);
    let rt = runtime(1 << 20, 1);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    map.as_mut_slice()[..PAGE].fill(7);
    let e = madvise(map.as_slice().as_ptr(), 0..8, libc::MADV_REMOVE).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(map.mapping().dirty_pages(), 1);
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
    let _dog = Watchdog::new("evictions with madvise", Duration::from_secs(1200));
    const PAGES: usize = 1024;
    let data = Arc::new(random_bytes(PAGES * PAGE, 5));
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime((PAGES * PAGE / 4) as u64, 1);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = Arc::new(unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap());
    // One pass first: the cache is full (umio has evicted) before the
    // advisor starts, whose drops could otherwise keep it below its high
    // watermark for the whole run on an idle machine.
    assert!(map.as_slice() == &data[..], "the first pass reads the file");
    assert!(
        rt.stats().evicted_pages > 0,
        "the cache was full: umio evicted"
    );
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
    assert!(s.remove_events > 0);
    // Every byte still reads the file's.
    assert!(map.as_slice() == &data[..], "the mapping reads the file");
}

/// A reader may not drop pages itself with remove events on: where a
/// miss's reservation does not fit below the high watermark (here the
/// watermark is at the bound), the evictors free what the reader was
/// short of, and a scan through a full cache goes on. (It used to refault
/// in a loop: the evictors waited for the high watermark, which a full
/// cache of whole pages never passed.)
#[test]
fn a_full_cache_below_the_high_watermark_is_evicted_for_a_reader() {
    const PAGES: usize = 32;
    let _w = Watchdog::new("a scan through a full cache", Duration::from_secs(60));
    let rt = Runtime::builder()
        .cache_bytes((PAGES * PAGE) as u64)
        .page_size(PAGE)
        .watermarks(100, 90)
        .remove_events(true)
        .build()
        .unwrap();
    let data = random_bytes(4 * PAGES * PAGE, 31);
    let (_tmp, f) = rw_file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map =
        unsafe { rt.map_file(&f, MapOptions::new().prefetch(umio::PrefetchKind::None)) }.unwrap();
    for p in 0..4 * PAGES {
        assert_eq!(page_of(&map, p), page_of(&data, p), "page {p}");
    }
    let s = rt.stats();
    assert!(s.evicted_pages >= (3 * PAGES) as u64, "{s}");
}
