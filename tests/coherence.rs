//! A program that writes or reads a file it also maps: `Mapping::write_at`,
//! `write_back_range` and `invalidate_range` keep the mapping and the file
//! coherent, as a kernel mapping and `pwrite`/`pread` are.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;

use umio::{Error, MapOptions};

use common::{random_bytes, rw_file_with};

const PAGE: usize = 64 << 10;
const LEN: usize = 16 * PAGE;

fn runtime() -> umio::Runtime {
    common::runtime(4 * PAGE as u64, PAGE, 2)
}

fn read_file(file: &File, offset: usize, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset as u64).unwrap();
    buf
}

/// LMDB's mode: a read-only mapping over a read-write file, the file
/// written with `write_at`. A resident page shows the new bytes at once,
/// the rest of the page keeps its bytes, and the file has them.
#[test]
fn write_at_shows_in_a_read_only_mapping_and_reaches_the_file() {
    let data = random_bytes(LEN, 1);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert!(!map.is_writable());
    let mut model = data.clone();
    let mut rng = common::Rng::new(2);
    for round in 0..200 {
        let at = rng.below(LEN - 1);
        let len = 1 + rng.below((LEN - at).min(3 * PAGE));
        // Resident before the write, most of the time.
        let _ = map.as_slice()[at];
        let bytes = random_bytes(len, 100 + round);
        map.write_at(at, &bytes).unwrap();
        model[at..at + len].copy_from_slice(&bytes);
        common::assert_same(&map.as_slice()[at..at + len], &bytes, "the write");
        let lo = at.saturating_sub(PAGE);
        let hi = (at + len + PAGE).min(LEN);
        common::assert_same(&map.as_slice()[lo..hi], &model[lo..hi], "around it");
    }
    common::assert_same(map.as_slice(), &model, "the whole mapping");
    common::assert_same(&read_file(&file, 0, LEN), &model, "the file");
}

/// A write over dirty bytes: the dirty bytes outside its range are kept,
/// the new bytes win inside it.
#[test]
fn write_at_keeps_dirty_bytes_around_it() {
    let data = random_bytes(LEN, 3);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    let dirty = random_bytes(PAGE, 4);
    map.as_mut_slice()[2 * PAGE..3 * PAGE].copy_from_slice(&dirty);
    let new = random_bytes(100, 5);
    let at = 2 * PAGE + 1000;
    map.write_at(at, &new).unwrap();
    let mut want = dirty.clone();
    want[1000..1100].copy_from_slice(&new);
    common::assert_same(&map.as_slice()[2 * PAGE..3 * PAGE], &want, "the mapping");
    common::assert_same(&read_file(&file, 2 * PAGE, PAGE), &want, "the file");
    // Writing through the mapping still works (and is tracked) after.
    map.as_mut_slice()[at] ^= 0xff;
    want[1000] ^= 0xff;
    map.flush().unwrap();
    common::assert_same(&read_file(&file, 2 * PAGE, PAGE), &want, "after flush");
}

/// `write_back_range` makes what was written through the mapping visible to
/// `pread` (no flush, no sync); `invalidate_range` after a `pwrite` of the
/// program's own makes the mapping show it.
#[test]
fn write_back_and_invalidate_around_a_pwrite_of_ones_own() {
    let data = random_bytes(LEN, 6);
    let (_tmp, file) = rw_file_with(&data);
    // Room for the whole file: no eviction writes the pages back first.
    let rt = common::runtime(2 * LEN as u64, PAGE, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    let bytes = random_bytes(3 * PAGE, 7);
    map.as_mut_slice()[PAGE / 2..PAGE / 2 + 3 * PAGE].copy_from_slice(&bytes);
    assert!(map.mapping().dirty_pages() >= 3);
    map.mapping().write_back_range(0..4 * PAGE).unwrap();
    assert_eq!(map.mapping().dirty_pages(), 0, "written back");
    common::assert_same(&read_file(&file, PAGE / 2, 3 * PAGE), &bytes, "pread");

    let _ = map.as_slice()[9 * PAGE];
    let theirs = random_bytes(5000, 8);
    file.write_all_at(&theirs, (9 * PAGE + 10) as u64).unwrap();
    map.invalidate_range(9 * PAGE + 10..9 * PAGE + 5010)
        .unwrap();
    common::assert_same(
        &map.as_slice()[9 * PAGE + 10..9 * PAGE + 5010],
        &theirs,
        "after invalidate_range",
    );
    common::assert_same(
        &map.as_slice()[9 * PAGE..9 * PAGE + 10],
        &data[9 * PAGE..9 * PAGE + 10],
        "the rest of the page",
    );
}

/// Parts taken out by `unmap_range` are skipped; bad ranges and read-only
/// stores are errors that change nothing.
#[test]
fn holes_bad_ranges_and_read_only_stores() {
    let data = random_bytes(LEN, 9);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    map.unmap_range(4 * PAGE..6 * PAGE).unwrap();
    map.invalidate_range(0..LEN).unwrap();
    map.write_back_range(0..LEN).unwrap();
    assert!(matches!(
        map.write_at(5 * PAGE, b"x"),
        Err(Error::NotMapped)
    ));
    assert!(matches!(
        map.write_at(LEN - 1, b"xy"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        map.invalidate_range(0..LEN + 1),
        Err(Error::InvalidArgument(_))
    ));
    map.write_at(LEN, b"").unwrap();
    common::assert_same(&read_file(&file, 0, LEN), &data, "nothing written");

    let ro = File::open(tmp.path()).unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&ro, MapOptions::new()) }.unwrap();
    assert!(matches!(map.write_at(0, b"x"), Err(Error::ReadOnlyStore)));
    assert_eq!(map.as_slice()[0], data[0]);
}
