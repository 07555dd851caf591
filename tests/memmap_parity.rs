//! What users coming from memmap2 expect: offsets that are not page
//! multiples (handled inside), copy-on-write private mappings
//! (`Runtime::map_copy`), `flush_async` and `flush_range`.

mod common;

use umio::{Error, MapOptions};

use common::{Rng, assert_same, file_with, random_bytes, rw_file_with};

const FILE_LEN: usize = 1 << 20;

/// A runtime whose 256 KiB cache the 1 MiB file overflows: every pass
/// re-reads evicted pages.
fn small_runtime() -> umio::Runtime {
    common::runtime(256 << 10, 4096, 2)
}

#[test]
fn an_offset_off_a_page_boundary_reads_from_that_byte() {
    let data = random_bytes(FILE_LEN, 11);
    let (_tmp, file) = rw_file_with(&data);
    let rt = small_runtime();
    for off in [1usize, 100, 4095, 3 * 4096 + 123] {
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe { rt.map_file(&file, MapOptions::new().offset(off as u64)) }.unwrap();
        assert_eq!(map.offset(), off as u64);
        assert_eq!(map.len(), FILE_LEN - off, "to the end of the file");
        assert_eq!(map.as_ptr() as usize % 4096, off % 4096, "pointer skewed");
        for pass in 0..2 {
            assert_same(
                map.as_slice(),
                &data[off..],
                &format!("offset {off}, pass {pass}"),
            );
        }
        let mut rng = Rng::new(off as u64);
        for _ in 0..500 {
            let i = rng.below(map.len());
            assert!(map.is_mapped_at(i));
            assert_eq!(map[i], data[off + i], "byte {i} at offset {off}");
        }
        assert!(!map.is_mapped_at(map.len()));
        // With a length: exactly those bytes.
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let part =
            unsafe { rt.map_file(&file, MapOptions::new().offset(off as u64).len(5000)) }.unwrap();
        assert_eq!(part.len(), 5000);
        assert_same(part.as_slice(), &data[off..off + 5000], "with a length");
    }
    assert!(rt.stats().evicted_pages > 0);
}

#[test]
fn writes_at_an_unaligned_offset_land_there_and_nowhere_else() {
    let data = random_bytes(FILE_LEN, 12);
    let (tmp, file) = rw_file_with(&data);
    let rt = small_runtime();
    let off = 5 * 4096 + 777;
    let len = 300_000;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new().offset(off as u64).len(len).writable(true),
        )
    }
    .unwrap();
    // write_at and flush_range count from the mapping's first byte too.
    map.write_at(0, b"head").unwrap();
    map.flush_range(0..4).unwrap();
    let mut map = map.into_mut().unwrap();
    map[len - 1] = 0xAB;
    map[4..104].fill(7);
    map.mapping().pin(0..10).unwrap();
    map.mapping().unpin(0..10).unwrap();
    map.mapping().flush().unwrap();
    let mut want = data.clone();
    want[off..off + 4].copy_from_slice(b"head");
    want[off + 4..off + 104].fill(7);
    want[off + len - 1] = 0xAB;
    assert_same(&std::fs::read(tmp.path()).unwrap(), &want, "the file");
    assert_same(&map[..], &want[off..off + len], "the mapping");
}

#[test]
fn map_copy_writes_stay_private_across_eviction() {
    let data = random_bytes(FILE_LEN, 13);
    // Read-only: a private mapping needs no write access to the file.
    let (tmp, file) = file_with(&data);
    let rt = small_runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_copy(&file, MapOptions::new()) }.unwrap();
    assert!(map.is_writable());
    let mut map = map.into_mut().unwrap();
    let mut model = data.clone();
    let mut rng = Rng::new(13);
    for _ in 0..200 {
        let at = rng.below(FILE_LEN - 64);
        let byte = rng.next() as u8;
        map[at..at + 64].fill(byte);
        model[at..at + 64].fill(byte);
    }
    map.mapping().flush().unwrap();
    map.mapping().flush_async().unwrap();
    // Every page is read again after the passes evict them: the written
    // ones from the scratch copy.
    for pass in 0..2 {
        assert_same(&map[..], &model, &format!("pass {pass}"));
    }
    assert!(
        rt.stats().evicted_dirty_pages + rt.stats().limit_written_pages > 0,
        "written pages were written back before a flush asked"
    );
    assert_same(
        &std::fs::read(tmp.path()).unwrap(),
        &data,
        "the file is untouched",
    );
    // A shared mapping of the same file sees none of it.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let other = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert_same(&other[..], &data, "another mapping");
    drop(map);
    assert_same(&std::fs::read(tmp.path()).unwrap(), &data, "after unmap");
}

#[test]
fn map_copy_at_an_unaligned_offset() {
    let data = random_bytes(FILE_LEN, 14);
    let (tmp, file) = file_with(&data);
    let rt = small_runtime();
    let off = 4096 + 1;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map =
        unsafe { rt.map_copy(&file, MapOptions::new().offset(off as u64).len(10_000)) }.unwrap();
    let mut map = map.into_mut().unwrap();
    map[0] = !data[off];
    assert_eq!(map[0], !data[off]);
    assert_same(&map[1..], &data[off + 1..off + 10_000], "the rest");
    drop(map);
    assert_same(&std::fs::read(tmp.path()).unwrap(), &data, "the file");
}

#[test]
fn flush_async_puts_the_data_where_read_sees_it() {
    let data = random_bytes(FILE_LEN, 15);
    let (tmp, file) = rw_file_with(&data);
    let rt = small_runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map =
        unsafe { rt.map_file(&file, MapOptions::new().len(64 << 10).writable(true)) }.unwrap();
    let mut map = map.into_mut().unwrap();
    map[..4096].fill(0x5A);
    assert_eq!(map.mapping().dirty_pages(), 1);
    // Not yet in the file: the page is dirty in umio's cache.
    assert_eq!(std::fs::read(tmp.path()).unwrap()[0], data[0]);
    map.mapping().flush_async().unwrap();
    assert_eq!(map.mapping().dirty_pages(), 0);
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert!(on_disk[..4096].iter().all(|&b| b == 0x5A));
    assert_same(&on_disk[4096..], &data[4096..], "the rest");
    let map = map.into_mapping();
    map.unmap().unwrap();
}

#[test]
fn flush_async_on_an_unmapped_mapping_is_not_mapped() {
    let data = random_bytes(64 << 10, 16);
    let (_tmp, file) = rw_file_with(&data);
    let rt = small_runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    map.unmap_range(0..64 << 10).unwrap();
    assert!(matches!(map.flush_async(), Err(Error::NotMapped)));
}
