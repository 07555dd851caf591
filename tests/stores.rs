//! One integrity suite, run against every backend: pread/pwrite files,
//! memory, io_uring (buffered and `O_DIRECT`) and DAX (emulated by a tmpfs
//! file mapped shared: this machine has no persistent memory). Then what is
//! particular to each: io_uring's batches, DAX's copy-free fills.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use umio::backends::{
    DaxStore, FaultTrigger, FaultyStore, FileStore, MemoryStore, UringOptions, UringStore,
};
use umio::{Error, MapOptions, PrefetchKind, Runtime, Store, StoreError};

use common::{
    assert_same, eventually, random_bytes, read_random_slices, runtime, write_random_runs_in_halves,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Memory,
    Uring,
    UringDirect,
    Dax,
}

const ALL: [Kind; 5] = [
    Kind::File,
    Kind::Memory,
    Kind::Uring,
    Kind::UringDirect,
    Kind::Dax,
];

/// A file holding `data`: on tmpfs (fast, and what DAX is emulated on),
/// except for `O_DIRECT`, which goes to the default temporary directory
/// should tmpfs refuse it.
fn backing(kind: Kind, data: &[u8]) -> tempfile::NamedTempFile {
    let dir = if kind == Kind::UringDirect && !tmpfs_takes_direct() {
        std::env::temp_dir()
    } else {
        "/dev/shm".into()
    };
    let tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
    std::fs::write(tmp.path(), data).unwrap();
    tmp
}

fn tmpfs_takes_direct() -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(tmp.path())
        .is_ok()
}

fn open(kind: Kind, path: &Path, writable: bool) -> Arc<dyn Store> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(writable)
        .open(path)
        .unwrap();
    match kind {
        Kind::File => Arc::new(FileStore::new(&f).unwrap()),
        Kind::Memory => {
            let bytes = std::fs::read(path).unwrap();
            if writable {
                Arc::new(MemoryStore::new(bytes))
            } else {
                Arc::new(MemoryStore::read_only(bytes))
            }
        }
        Kind::Uring => Arc::new(UringStore::new(&f, UringOptions::new()).unwrap()),
        Kind::UringDirect => {
            Arc::new(UringStore::new(&f, UringOptions::new().direct(true)).unwrap())
        }
        Kind::Dax => Arc::new(DaxStore::new(&f).unwrap()),
    }
}

/// Everything the store holds, read through the store itself.
fn contents(store: &dyn Store) -> Vec<u8> {
    let mut v = vec![0u8; store.len().unwrap() as usize];
    assert_eq!(store.read_at(0, &mut v).unwrap(), v.len());
    v
}

/// What reached the file (every kind but memory).
fn check_file(kind: Kind, path: &Path, want: &[u8], what: &str) {
    if kind != Kind::Memory {
        assert_same(&std::fs::read(path).unwrap(), want, what);
    }
}

fn map(rt: &Runtime, store: &Arc<dyn Store>, writable: bool) -> umio::Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .writable(writable)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// Random and sequential reads from two threads, cache an eighth of the
/// data, a partial last page: every byte as in the store.
#[test]
fn reads_match_under_eviction() {
    let data = random_bytes((4 << 20) + 1234, 11);
    for kind in ALL {
        for ps in [4096, 64 << 10] {
            let what = format!("{kind:?}, {ps}-byte pages");
            let tmp = backing(kind, &data);
            let store = open(kind, tmp.path(), false);
            let rt = runtime(512 << 10, ps, 2);
            let m = map(&rt, &store, false);
            let s = m.as_slice();
            assert_same(s, &data, &what);
            read_random_slices(s, &data, 300, &what);
            let st = m.stats();
            assert!(st.evictions > 0, "{what}: nothing was evicted: {st:?}");
        }
    }
}

/// Writes from two threads on halves of the mapping, reads in between,
/// the cache an eighth of the data: after a last
/// flush the store and its file hold exactly the model.
#[test]
fn writes_persist_through_eviction_and_flush() {
    let data = random_bytes((2 << 20) + 3000, 12);
    for kind in ALL {
        let what = format!("{kind:?}");
        let tmp = backing(kind, &data);
        let store = open(kind, tmp.path(), true);
        let rt = runtime(256 << 10, 4096, 2);
        let mut m = map(&rt, &store, true).into_mut().unwrap();
        let mut model = data.clone();
        write_random_runs_in_halves(m.as_mut_slice(), &mut model, 400, &what);
        m.flush().unwrap();
        assert_eq!(m.mapping().dirty_pages(), 0, "{what}");
        assert_same(&contents(&*store), &model, &what);
        check_file(kind, tmp.path(), &model, &what);
        assert!(
            m.mapping().stats().evictions > 0,
            "{what}: nothing was evicted"
        );
        m.unmap().unwrap();
    }
}

/// Bytes past the end of the store in its last page read as zero, and
/// writing the part of that page inside the store changes nothing beyond.
#[test]
fn tail_page_is_zero_past_the_end() {
    let data = random_bytes(10_000, 13);
    for kind in ALL {
        let what = format!("{kind:?}");
        let tmp = backing(kind, &data);
        let store = open(kind, tmp.path(), true);
        let rt = runtime(1 << 20, 4096, 1);
        let mut m = map(&rt, &store, true).into_mut().unwrap();
        assert_eq!(m.len(), 10_000, "{what}");
        // SAFETY: the region spans whole pages; bytes past len up to the
        // page end are mapped and readable.
        let tail = unsafe { std::slice::from_raw_parts(m.as_ptr().add(10_000), 12_288 - 10_000) };
        assert!(tail.iter().all(|&b| b == 0), "{what}: bytes past the end");
        m.as_mut_slice()[9_990..].fill(0xEE);
        m.flush().unwrap();
        let mut want = data.clone();
        want[9_990..].fill(0xEE);
        assert_same(&contents(&*store), &want, &what);
        check_file(kind, tmp.path(), &want, &what);
    }
}

/// A failed write-back names the operation and the offset, the page stays
/// dirty, and a later flush that succeeds writes it.
#[test]
fn failed_write_back_names_offset_and_keeps_data() {
    let data = random_bytes(256 << 10, 14);
    for kind in ALL {
        let what = format!("{kind:?}");
        let tmp = backing(kind, &data);
        let faulty = Arc::new(FaultyStore::new(open(kind, tmp.path(), true)));
        faulty.fail_writes(FaultTrigger::Offsets(65536..65537), libc::EIO);
        let store: Arc<dyn Store> = faulty.clone();
        let rt = runtime(1 << 20, 4096, 1);
        let mut m = map(&rt, &store, true).into_mut().unwrap();
        m.as_mut_slice()[65536 + 10] = 0x5A;
        m.as_mut_slice()[200_000] = 0xA5;
        match m.flush() {
            Err(Error::Store(StoreError { offset, errno, .. })) => {
                assert_eq!((offset, errno), (65536, libc::EIO), "{what}");
            }
            r => panic!("{what}: flush gave {r:?}"),
        }
        assert_eq!(m.mapping().dirty_pages(), 1, "{what}");
        faulty.fail_writes(FaultTrigger::Never, libc::EIO);
        m.flush().unwrap();
        let mut want = data.clone();
        want[65536 + 10] = 0x5A;
        want[200_000] = 0xA5;
        assert_same(&contents(&*store), &want, &what);
        check_file(kind, tmp.path(), &want, &what);
    }
}

/// Prefetching many disjoint ranges fills them all, with the right bytes.
#[test]
fn prefetch_of_disjoint_ranges_fills_them() {
    let data = random_bytes(4 << 20, 15);
    for kind in ALL {
        let what = format!("{kind:?}");
        let tmp = backing(kind, &data);
        let store = open(kind, tmp.path(), false);
        let rt = runtime(4 << 20, 4096, 1);
        let m = map(&rt, &store, false);
        let ranges: Vec<_> = (0..64).map(|i| i * 65536..i * 65536 + 16384).collect();
        m.prefetch_ranges(&ranges).unwrap();
        // Prefetch runs in the background.
        eventually(&what, Duration::from_millis(5), || {
            ranges
                .iter()
                .all(|r| (r.start..r.end).step_by(4096).all(|b| m.is_resident(b)))
        });
        assert_eq!(m.stats().faults, 0, "{what}: prefetch faulted");
        for r in &ranges {
            assert_same(&m.as_slice()[r.clone()], &data[r.clone()], &what);
        }
        assert_same(m.as_slice(), &data, &what);
    }
}

/// io_uring: prefetch puts many requests in flight at once, and a large
/// contiguous dirty set is written back in large writes.
#[test]
fn uring_batches_reads_and_merges_writes() {
    let data = random_bytes(8 << 20, 16);
    for direct in [false, true] {
        let kind = if direct {
            Kind::UringDirect
        } else {
            Kind::Uring
        };
        let tmp = backing(kind, &data);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp.path())
            .unwrap();
        let uring = Arc::new(UringStore::new(&f, UringOptions::new().direct(direct)).unwrap());
        let store: Arc<dyn Store> = uring.clone();
        let rt = runtime(16 << 20, 4096, 1);
        let mut m = map(&rt, &store, true).into_mut().unwrap();
        let ranges: Vec<_> = (0..32).map(|i| i * 131072..i * 131072 + 8192).collect();
        m.mapping().prefetch_ranges(&ranges).unwrap();
        eventually("uring prefetch", Duration::from_millis(5), || {
            ranges.iter().all(|r| m.mapping().is_resident(r.start))
        });
        let st = uring.stats();
        assert!(st.max_in_flight >= 8, "direct {direct}: {st:?}");
        m.as_mut_slice()[..4 << 20].fill(7);
        m.flush().unwrap();
        let st = uring.stats();
        assert!(st.largest_write >= 1 << 20, "direct {direct}: {st:?}");
        let mut want = data.clone();
        want[..4 << 20].fill(7);
        assert_same(&std::fs::read(tmp.path()).unwrap(), &want, "uring file");
    }
}

/// DAX: misses copy straight from the store's mapping (no staging copy:
/// the store's copy counter stays at zero for whole pages), and after a
/// flush the bytes are in the backing mapping and file.
#[test]
fn dax_fills_copy_nothing_and_flush_reaches_the_mapping() {
    let data = random_bytes((1 << 20) + 100, 17);
    let tmp = backing(Kind::Dax, &data);
    let dax = Arc::new(DaxStore::open(tmp.path(), true).unwrap());
    let store: Arc<dyn Store> = dax.clone();
    let rt = runtime(256 << 10, 4096, 1);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    assert_same(&m.as_slice()[..1 << 20], &data[..1 << 20], "dax reads");
    assert_eq!(
        dax.copied_bytes(),
        0,
        "whole pages were copied through read_at"
    );
    assert!(m.mapping().stats().fills >= 256);
    // The last, partial page is the one read through a staging buffer.
    assert_same(&m.as_slice()[1 << 20..], &data[1 << 20..], "dax tail");
    assert_eq!(dax.copied_bytes(), 100);
    m.as_mut_slice()[4096..8192].fill(0x42);
    m.flush().unwrap();
    let mapped = dax.as_mapped().unwrap();
    assert!(mapped[4096..8192].iter().all(|&b| b == 0x42));
    let mut want = data.clone();
    want[4096..8192].fill(0x42);
    assert_same(&std::fs::read(tmp.path()).unwrap(), &want, "dax file");
}
