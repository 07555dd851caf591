//! A mapping's offset is honoured: byte `i` of a mapping at offset `o` is
//! byte `o + i` of the file, on reads, after eviction, and on write-back;
//! bytes of the file outside the mapping are left alone.

mod common;

use umio::{MapOptions, Runtime};

use common::{Rng, assert_same, random_bytes, rw_file_with};

const FILE_LEN: usize = 2 << 20;

fn small_runtime(page_size: usize) -> Runtime {
    common::runtime(256 << 10, page_size, 2)
}

fn read_only_at(offset: usize, page_size: usize) {
    let data = random_bytes(FILE_LEN, offset as u64 + page_size as u64);
    let (_tmp, file) = rw_file_with(&data);
    let rt = small_runtime(page_size);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().offset(offset as u64)) }.unwrap();
    assert_eq!(map.offset(), offset as u64);
    assert_eq!(
        map.len(),
        FILE_LEN - offset,
        "no len: to the end of the file"
    );
    let want = &data[offset..];
    // Twice: the second pass re-reads evicted pages.
    for pass in 0..2 {
        assert_same(map.as_slice(), want, &format!("pass {pass}"));
    }
    let mut rng = Rng::new(offset as u64);
    for _ in 0..2000 {
        let i = rng.below(want.len());
        assert_eq!(
            map.as_slice()[i],
            data[offset + i],
            "byte {i} of the mapping"
        );
    }
    assert!(rt.stats().evicted_pages > 0);
}

#[test]
fn read_only_offset_8192_4k_pages() {
    read_only_at(8192, 4 << 10);
}

#[test]
fn read_only_offset_not_a_multiple_of_the_page_size() {
    // 12 KiB into the file with 64 KiB pages: every fill starts 12 KiB off
    // a page boundary of the file.
    read_only_at(3 * 4096, 64 << 10);
}

#[test]
fn read_only_offset_with_len() {
    let data = random_bytes(FILE_LEN, 9);
    let (_tmp, file) = rw_file_with(&data);
    let rt = small_runtime(16 << 10);
    let (off, len) = (1 << 20, 300_001);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().offset(off as u64).len(len)) }.unwrap();
    assert_eq!(map.len(), len);
    assert_same(map.as_slice(), &data[off..off + len], "offset 1 MiB, len");
}

#[test]
fn writes_land_at_offset_plus_i() {
    let data = random_bytes(FILE_LEN, 10);
    let (tmp, file) = rw_file_with(&data);
    let rt = small_runtime(16 << 10);
    let (off, len) = (12288usize, 700_000usize);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new().offset(off as u64).len(len).writable(true),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    let mut model = data.clone();
    let mut rng = Rng::new(11);
    let s = map.as_mut_slice();
    // Writes over the whole region (larger than the cache: some are written
    // back by eviction), including its first and last bytes.
    for _ in 0..3000 {
        let n = 1 + rng.below(200);
        let i = rng.below(len - n);
        let bytes = random_bytes(n, rng.next());
        s[i..i + n].copy_from_slice(&bytes);
        model[off + i..off + i + n].copy_from_slice(&bytes);
    }
    s[0] = !s[0];
    model[off] = !model[off];
    s[len - 1] = !s[len - 1];
    model[off + len - 1] = !model[off + len - 1];
    assert_same(map.as_slice(), &model[off..off + len], "mapping");
    map.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk.len(), FILE_LEN, "the file's length changed");
    assert_same(&on_disk[..off], &data[..off], "file before the offset");
    assert_same(
        &on_disk[off..off + len],
        &model[off..off + len],
        "file inside the mapping",
    );
    assert_same(
        &on_disk[off + len..],
        &data[off + len..],
        "file after the mapping",
    );
    // More writes, then unmap: they too land at offset + i.
    map.as_mut_slice()[4096..4100].copy_from_slice(b"umio");
    model[off + 4096..off + 4100].copy_from_slice(b"umio");
    map.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_same(&on_disk, &model, "file after unmap");
}

#[test]
fn two_regions_at_different_offsets_agree() {
    let data = random_bytes(FILE_LEN, 12);
    let (_tmp, file) = rw_file_with(&data);
    let rt = small_runtime(8 << 10);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let a = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let b = unsafe { rt.map_file(&file, MapOptions::new().offset(1 << 20).len(64 << 10)) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let c = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .offset((1 << 20) + 4096)
                .page_size(64 << 10),
        )
    }
    .unwrap();
    assert_same(
        b.as_slice(),
        &a.as_slice()[1 << 20..(1 << 20) + (64 << 10)],
        "b vs a",
    );
    assert_same(
        &c.as_slice()[..60 << 10],
        &b.as_slice()[4096..],
        "c vs b (shifted one 4 KiB page)",
    );
    assert_same(c.as_slice(), &data[(1 << 20) + 4096..], "c vs file");
}
