//! Advice with `madvise`'s meaning, table-driven against Linux `mmap`: two
//! identical files, one mapped by the kernel (`MAP_SHARED`), one by umio;
//! the same writes to both, the same advice on the same ranges, then what
//! each mapping reads back and what each file holds after a flush must be
//! the same.

mod common;

use std::fs::File;
use std::ops::Range;

use umio::{Advice, MapOptions, UncheckedAdvice};

use common::random_bytes;

const PAGE: usize = 64 << 10;
const K4: usize = 4096;
const LEN: usize = 16 * PAGE;

/// A kernel `MAP_SHARED` mapping of `file`.
struct KernelMap {
    ptr: *mut u8,
}

impl KernelMap {
    fn new(file: &File) -> KernelMap {
        // SAFETY: maps LEN bytes of a file we hold open; unmapped in drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(file),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        KernelMap { ptr: ptr.cast() }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: LEN mapped bytes, borrowed with self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, LEN) }
    }

    fn advise(&self, r: &Range<usize>, advice: i32) {
        // SAFETY: a range of our mapping.
        let rc = unsafe { libc::madvise(self.ptr.add(r.start).cast(), r.len(), advice) };
        assert_eq!(
            rc,
            0,
            "madvise({advice}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for KernelMap {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), LEN) };
    }
}

fn rw(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Advice that keeps the bytes, or drops pages.
#[derive(Clone, Copy, PartialEq)]
enum Either {
    Keep(Advice),
    Drop(UncheckedAdvice),
}

#[test]
fn advice_matches_madvise_on_a_shared_file_mapping() {
    use Either::{Drop, Keep};
    // (name, umio's advice, the kernel's, range)
    let table: &[(&str, Either, i32, Range<usize>)] = &[
        (
            "remove whole pages",
            Drop(UncheckedAdvice::Remove),
            libc::MADV_REMOVE,
            2 * PAGE..4 * PAGE,
        ),
        (
            "remove 4 KiB inside a page",
            Drop(UncheckedAdvice::Remove),
            libc::MADV_REMOVE,
            5 * PAGE + K4..5 * PAGE + 3 * K4,
        ),
        (
            "remove across pages",
            Drop(UncheckedAdvice::Remove),
            libc::MADV_REMOVE,
            7 * PAGE - K4..8 * PAGE + K4,
        ),
        (
            "pageout",
            Drop(UncheckedAdvice::PageOut),
            libc::MADV_PAGEOUT,
            0..LEN,
        ),
        (
            "cold",
            Drop(UncheckedAdvice::PageOut),
            libc::MADV_COLD,
            PAGE..3 * PAGE,
        ),
        (
            "willneed",
            Keep(Advice::WillNeed),
            libc::MADV_WILLNEED,
            0..LEN,
        ),
        (
            "sequential",
            Keep(Advice::Sequential),
            libc::MADV_SEQUENTIAL,
            0..LEN,
        ),
        ("random", Keep(Advice::Random), libc::MADV_RANDOM, 0..LEN),
        ("normal", Keep(Advice::Normal), libc::MADV_NORMAL, 0..LEN),
    ];
    let rt = common::runtime(8 * PAGE as u64, PAGE, 2);
    for (i, (name, advice, madv, range)) in table.iter().enumerate() {
        let data = random_bytes(LEN, i as u64);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (kpath, upath) = (dir.path().join("k"), dir.path().join("u"));
        std::fs::write(&kpath, &data).unwrap();
        std::fs::write(&upath, &data).unwrap();
        let (kf, uf) = (rw(&kpath), rw(&upath));
        let mut k = KernelMap::new(&kf);
        // SAFETY: nothing but this mapping changes the file while a slice
        // of it lives.
        let mut u = unsafe { rt.map_file(&uf, MapOptions::new().writable(true)) }
            .unwrap()
            .into_mut()
            .unwrap();
        // Dirty bytes in and around the ranges, not yet written back.
        let writes = [
            (2 * PAGE + 100, 5000),
            (5 * PAGE, 3 * K4),
            (7 * PAGE - 2 * K4, PAGE),
            (12 * PAGE + 7, 11),
        ];
        for (n, (at, len)) in writes.iter().enumerate() {
            let b = random_bytes(*len, 100 + n as u64);
            k.bytes()[*at..at + len].copy_from_slice(&b);
            u.as_mut_slice()[*at..at + len].copy_from_slice(&b);
        }
        k.advise(range, *madv);
        match *advice {
            Keep(a) => u.mapping().advise(range.clone(), a),
            Drop(a) => u.advise_mut(range.clone(), a),
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        common::assert_same(u.as_slice(), k.bytes(), &format!("{name}: the mappings"));
        // SAFETY: our mapping.
        assert_eq!(unsafe { libc::msync(k.ptr.cast(), LEN, libc::MS_SYNC) }, 0);
        u.flush().unwrap();
        let (kfile, ufile) = (
            std::fs::read(&kpath).unwrap(),
            std::fs::read(&upath).unwrap(),
        );
        common::assert_same(&ufile, &kfile, &format!("{name}: the files"));
        if *advice == Drop(UncheckedAdvice::Remove) {
            assert!(
                ufile[range.clone()].iter().all(|&b| b == 0),
                "{name}: zeros"
            );
        }
        if *advice == Drop(UncheckedAdvice::PageOut) {
            let first = range.start / PAGE;
            assert!(!u.mapping().is_resident(first * PAGE), "{name}: evicted");
        }
    }
}

#[test]
fn remove_needs_a_writable_mapping_and_whole_4k_pages() {
    let data = random_bytes(LEN, 1);
    let (_tmp, f) = common::rw_file_with(&data);
    let rt = common::runtime(8 * PAGE as u64, PAGE, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut ro = unsafe { rt.map_file(&f, MapOptions::new()) }.unwrap();
    assert!(ro.advise_mut(0..PAGE, UncheckedAdvice::Remove).is_err());
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut rw = unsafe { rt.map_file(&f, MapOptions::new().writable(true)) }.unwrap();
    assert!(rw.advise_mut(100..PAGE, UncheckedAdvice::Remove).is_err());
    assert!(rw.advise_mut(0..K4 + 1, UncheckedAdvice::Remove).is_err());
    common::assert_same(rw.as_slice(), &data, "nothing removed");
    // A memory store zeroes the range.
    let mem = std::sync::Arc::new(umio::backends::MemoryStore::new(data.clone()));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe { rt.map(MapOptions::new().store(mem.clone()).writable(true)) }.unwrap();
    m.advise_mut(PAGE..2 * PAGE, UncheckedAdvice::Remove)
        .unwrap();
    assert!(mem.snapshot()[PAGE..2 * PAGE].iter().all(|&b| b == 0));
    assert!(m.as_slice()[PAGE..2 * PAGE].iter().all(|&b| b == 0));
    // A store that cannot punch holes says so, and nothing is dropped.
    let plain = std::sync::Arc::new(NoHoles(umio::backends::MemoryStore::new(data.clone())));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe { rt.map(MapOptions::new().store(plain).writable(true)) }.unwrap();
    let err = m.advise_mut(0..PAGE, UncheckedAdvice::Remove).unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{err}");
    common::assert_same(m.as_slice(), &data, "nothing removed");
}

/// A store without hole punching (the trait's default).
struct NoHoles(umio::backends::MemoryStore);

impl umio::Store for NoHoles {
    fn len(&self) -> Result<u64, umio::backends::StoreError> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> Result<(), umio::backends::StoreError> {
        self.0.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, umio::backends::StoreError> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), umio::backends::StoreError> {
        self.0.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), umio::backends::StoreError> {
        self.0.sync()
    }
    fn is_writable(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "no holes"
    }
}
