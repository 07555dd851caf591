//! `MapOptions::fixed_address` over older umio mappings replaces them
//! there, as `mmap`'s `MAP_FIXED` does: their dirty pages in the range
//! reach the file first, the rest of each older mapping keeps working, and
//! a range that would split an older page still in use is refused without
//! changing anything. `fixed_address_noreplace` refuses any overlap.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::Duration;

use common::rw_file_with;
use umio::{Error, MapOptions, Mapping, PrefetchKind, Runtime};

const SMALL: usize = 4096;
/// The older mappings' page size.
const BIG: usize = 16 << 10;
const HANG: Duration = Duration::from_secs(60);

/// Runs `f` on a thread of its own; panics if it has not returned within
/// [`HANG`] (a hang fails the test instead of stalling CI).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(h.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no result within {HANG:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i / 4096) as u8)
        .collect()
}

fn runtime() -> Runtime {
    Runtime::builder()
        .cache_bytes(16 << 20)
        .page_size(SMALL)
        .fillers(2)
        .prefetch(PrefetchKind::None)
        .build()
        .unwrap()
}

/// `len` bytes at `addr`, read through a raw pointer (`as_slice` refuses
/// a mapping with a hole).
fn bytes_at(addr: usize, len: usize) -> Vec<u8> {
    // SAFETY: the callers pass ranges of live umio mappings.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

fn write_byte(addr: usize, v: u8) {
    // SAFETY: the callers pass addresses in live, writable umio mappings.
    unsafe { (addr as *mut u8).write_volatile(v) };
}

fn file_bytes(f: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).unwrap();
    buf
}

fn map_big(rt: &Runtime, f: &File, len: usize) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe { rt.map_file(f, MapOptions::new().len(len).writable(true).page_size(BIG)) }.unwrap()
}

#[test]
fn fixed_map_inside_an_older_one_replaces_that_part() {
    within("replacing part of a mapping", || {
        let a_data = pattern(32 * BIG, 1);
        let b_data = pattern(4 * BIG, 2);
        let (_ta, a) = rw_file_with(&a_data);
        let (_tb, b) = rw_file_with(&b_data);
        let rt = runtime();
        let mut old = map_big(&rt, &a, 32 * BIG);
        let base = old.as_ptr() as usize;
        // Dirty pages outside and inside the range about to be replaced.
        write_byte(base + 2 * BIG + 7, 0xA1);
        write_byte(base + 5 * BIG + 9, 0xA2);
        assert!(old.dirty_pages() >= 2);

        let at = base + 4 * BIG;
        // SAFETY: the range is part of `old`, which nothing borrows.
        let opts = unsafe {
            MapOptions::new()
                .len(4 * BIG)
                .writable(true)
                .fixed_address(at)
        };
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let new = unsafe { rt.map_file(&b, opts) }.expect("MAP_FIXED over a umio mapping");
        assert_eq!(new.as_ptr() as usize, at);
        assert_eq!(new.as_slice(), &b_data[..], "the new mapping's bytes");

        // The replaced dirty page reached the file before it went.
        let mut want_a = a_data.clone();
        want_a[2 * BIG + 7] = 0xA1;
        want_a[5 * BIG + 9] = 0xA2;
        assert_eq!(
            file_bytes(&a, 5 * BIG as u64, BIG),
            want_a[5 * BIG..6 * BIG],
            "the dirty page in the replaced range was written back"
        );
        // The rest of the older mapping still works, dirty byte included.
        assert_eq!(old.mapped_bytes(), 28 * BIG);
        assert_eq!(bytes_at(base, 4 * BIG), want_a[..4 * BIG]);
        assert_eq!(bytes_at(base + 8 * BIG, 24 * BIG), want_a[8 * BIG..]);
        // The hole is the older mapping's no more.
        assert!(matches!(
            old.unmap_range(4 * BIG..8 * BIG),
            Err(Error::NotMapped)
        ));

        // Both take writes that reach their own files.
        write_byte(base + 20 * BIG + 3, 0xB1);
        write_byte(at + BIG + 3, 0xB2);
        want_a[20 * BIG + 3] = 0xB1;
        let mut want_b = b_data.clone();
        want_b[BIG + 3] = 0xB2;
        old.flush().unwrap();
        new.flush().unwrap();
        assert_eq!(file_bytes(&a, 0, 32 * BIG), want_a, "file A");
        assert_eq!(file_bytes(&b, 0, 4 * BIG), want_b, "file B");

        // Unmapping the older mapping leaves the new one alone.
        old.unmap().unwrap();
        assert_eq!(
            bytes_at(at, 4 * BIG),
            want_b,
            "the new mapping after the old went"
        );
        new.unmap().unwrap();
    });
}

#[test]
fn fixed_map_over_a_whole_older_mapping_replaces_it() {
    within("replacing a whole mapping", || {
        let a_data = pattern(8 * BIG, 3);
        let b_data = pattern(8 * BIG, 4);
        let (_ta, a) = rw_file_with(&a_data);
        let (_tb, b) = rw_file_with(&b_data);
        let rt = runtime();
        let old = map_big(&rt, &a, 8 * BIG);
        let base = old.as_ptr() as usize;
        write_byte(base + 3 * BIG, 0xC3);
        // SAFETY: the range is all of `old`, which nothing borrows.
        let opts = unsafe { MapOptions::new().len(8 * BIG).fixed_address(base) };
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let new = unsafe { rt.map_file(&b, opts) }.unwrap();
        assert_eq!(new.as_ptr() as usize, base);
        assert_eq!(new.as_slice(), &b_data[..]);
        assert_eq!(
            old.mapped_bytes(),
            0,
            "nothing of the older mapping is left"
        );
        let mut want_a = a_data.clone();
        want_a[3 * BIG] = 0xC3;
        assert_eq!(file_bytes(&a, 0, 8 * BIG), want_a, "written back first");
        drop(old);
        assert_eq!(
            new.as_slice(),
            &b_data[..],
            "dropping the old one left the new"
        );
        new.unmap().unwrap();
    });
}

#[test]
fn fixed_map_may_not_split_an_older_page_in_use() {
    within("splitting a page", || {
        let a_data = pattern(4 * BIG, 5);
        let b_data = pattern(2 * BIG, 6);
        let (_ta, a) = rw_file_with(&a_data);
        let (_tb, b) = rw_file_with(&b_data);
        let rt = runtime();
        let old = map_big(&rt, &a, 4 * BIG);
        let base = old.as_ptr() as usize;
        write_byte(base + 1, 0xD1);
        for at in [base + SMALL, base + BIG + SMALL] {
            // SAFETY: refused: nothing is replaced.
            let opts = unsafe { MapOptions::new().len(SMALL).fixed_address(at) };
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            let e = unsafe { rt.map_file(&b, opts) }.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert_eq!(e.errno(), libc::EINVAL);
        }
        // A range ending inside the first page of the mapping.
        // SAFETY: refused before anything is mapped (what lies below
        // `base` is left alone).
        let opts = unsafe { MapOptions::new().len(2 * SMALL).fixed_address(base - SMALL) };
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let e = unsafe { rt.map_file(&b, opts) }.unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{e}");
        // Nothing changed: the whole mapping is there, dirty byte included.
        assert_eq!(old.mapped_bytes(), 4 * BIG);
        let mut want = a_data.clone();
        want[1] = 0xD1;
        assert_eq!(old.as_slice(), &want[..]);
        old.unmap().unwrap();
        assert_eq!(file_bytes(&a, 0, 4 * BIG), want);
    });
}

#[test]
fn fixed_map_may_take_the_unused_end_of_an_older_last_page() {
    within("taking a last page's padding", || {
        // Two pages, the second one a quarter used.
        let a_data = pattern(BIG + SMALL, 7);
        let b_data = pattern(4 * SMALL, 8);
        let (_ta, a) = rw_file_with(&a_data);
        let (_tb, b) = rw_file_with(&b_data);
        let rt = runtime();
        let old = map_big(&rt, &a, BIG + SMALL);
        let base = old.as_ptr() as usize;
        write_byte(base + BIG + 5, 0xE1);
        // Covers the used part of the last page and half its padding.
        let at = base + BIG;
        // SAFETY: the range is `old`'s last page, which nothing borrows.
        let opts = unsafe { MapOptions::new().len(2 * SMALL).fixed_address(at) };
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let new = unsafe { rt.map_file(&b, opts) }.unwrap();
        assert_eq!(new.as_slice(), &b_data[..2 * SMALL]);
        assert_eq!(old.mapped_bytes(), BIG);
        let mut want = a_data.clone();
        want[BIG + 5] = 0xE1;
        assert_eq!(file_bytes(&a, 0, BIG + SMALL), want, "written back first");
        assert_eq!(bytes_at(base, BIG), want[..BIG]);
        drop(old);
        assert_eq!(new.as_slice(), &b_data[..2 * SMALL]);
    });
}

#[test]
fn fixed_address_noreplace_refuses_any_overlap() {
    within("noreplace", || {
        let a_data = pattern(4 * BIG, 9);
        let (_ta, a) = rw_file_with(&a_data);
        let rt = runtime();
        let old = map_big(&rt, &a, 4 * BIG);
        let base = old.as_ptr() as usize;
        let opts = MapOptions::new()
            .len(SMALL)
            .page_size(SMALL)
            .fixed_address_noreplace(base + BIG);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let e = unsafe { rt.map_file(&a, opts) }.unwrap_err();
        assert!(matches!(e, Error::Overlap), "{e}");
        assert_eq!(e.errno(), libc::EEXIST);
        // Memory that is not umio's is refused as well.
        let other = vec![0u8; 4 * SMALL];
        let page = (other.as_ptr() as usize).next_multiple_of(SMALL);
        let opts = MapOptions::new().len(SMALL).fixed_address_noreplace(page);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let e = unsafe { rt.map_file(&a, opts) }.unwrap_err();
        assert!(matches!(e, Error::Overlap), "{e}");
        assert_eq!(old.mapped_bytes(), 4 * BIG);
        assert_eq!(old.as_slice(), &a_data[..]);
        old.unmap().unwrap();
        // A free range is taken. (Another test's thread may map into it
        // between the munmap and the map: try a few.)
        let mapped = (0..10).find_map(|_| {
            // SAFETY: a fresh reservation, given back at once.
            let free = unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    SMALL,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                libc::munmap(p, SMALL);
                p as usize
            };
            let opts = MapOptions::new().len(SMALL).fixed_address_noreplace(free);
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            unsafe { rt.map_file(&a, opts) }.ok().map(|m| (free, m))
        });
        let (free, m) = mapped.expect("a free range is mapped");
        assert_eq!(m.as_ptr() as usize, free);
        assert_eq!(m.as_slice(), &a_data[..SMALL]);
    });
}
