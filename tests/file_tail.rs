//! The end of the file: a read-only mapping past EOF reads the file's bytes
//! then zeros and leaves the file alone; a writable one extends the file at
//! map time; write-back never writes past the mapped length.

mod common;

use std::fs::File;

use umio::{MapOptions, Runtime};

use common::{Rng, rw_file_with};

/// Three whole 4 KiB pages and a partial one.
const FILE_LEN: usize = 3 * 4096 + 1234;

/// Random bytes with no zero among them, so that a zero read back is
/// a zero-fill, never file data.
fn nonzero_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| (rng.next() % 255) as u8 + 1).collect()
}

fn runtime() -> Runtime {
    common::runtime(1 << 20, 4 << 10, 2)
}

fn file_len(tmp: &tempfile::NamedTempFile) -> u64 {
    std::fs::metadata(tmp.path()).unwrap().len()
}

fn read_only_past_eof(page_size: usize, offset: usize) {
    let data = nonzero_bytes(FILE_LEN, page_size as u64);
    let (tmp, _) = rw_file_with(&data);
    // A read-only descriptor: nothing may write the file.
    let file = File::open(tmp.path()).unwrap();
    let rt = runtime();
    let len = 64 << 10;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .offset(offset as u64)
                .len(len)
                .page_size(page_size),
        )
    }
    .unwrap();
    assert_eq!(map.len(), len);
    let s = map.as_slice();
    let in_file = FILE_LEN - offset;
    // The page holding EOF first: file bytes, then zeros.
    let eof_page = in_file / page_size * page_size;
    assert_eq!(
        &s[eof_page..in_file],
        &data[offset + eof_page..],
        "the partial last page starts with the file's bytes"
    );
    let tail_zeros = (eof_page + page_size).min(len);
    assert!(
        s[in_file..tail_zeros].iter().all(|&b| b == 0),
        "the rest of the partial last page reads zero"
    );
    assert_eq!(&s[..in_file], &data[offset..], "bytes before EOF");
    assert!(
        s[in_file..].iter().all(|&b| b == 0),
        "every byte past EOF reads zero"
    );
    assert_eq!(
        file_len(&tmp),
        FILE_LEN as u64,
        "a read-only mapping changed the file's length"
    );
    map.unmap().unwrap();
    assert_eq!(file_len(&tmp), FILE_LEN as u64);
    assert_eq!(std::fs::read(tmp.path()).unwrap(), data);
}

#[test]
fn read_only_past_eof_4k_pages() {
    read_only_past_eof(4 << 10, 0);
}

#[test]
fn read_only_past_eof_16k_pages() {
    // EOF falls inside the first 16 KiB page.
    read_only_past_eof(16 << 10, 0);
}

#[test]
fn read_only_past_eof_with_offset() {
    read_only_past_eof(4 << 10, 8192);
}

#[test]
fn read_only_default_len_stops_at_eof() {
    let data = nonzero_bytes(FILE_LEN, 1);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    for ps in [4 << 10, 8 << 10, 64 << 10] {
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe { rt.map_file(&file, MapOptions::new().page_size(ps)) }.unwrap();
        assert_eq!(map.len(), FILE_LEN, "page size {ps}");
        assert_eq!(map.as_slice(), &data[..], "page size {ps}");
    }
}

#[test]
fn writable_mapping_past_eof_extends_the_file_at_map_time() {
    let data = nonzero_bytes(FILE_LEN, 2);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    let len = 100_000;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().len(len).writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    assert_eq!(
        file_len(&tmp),
        len as u64,
        "mapping writable past EOF extends the file before any access"
    );
    assert_eq!(&map.as_slice()[..FILE_LEN], &data[..]);
    assert!(map.as_slice()[FILE_LEN..].iter().all(|&b| b == 0));
    let s = map.as_mut_slice();
    s[FILE_LEN..FILE_LEN + 5].copy_from_slice(b"tail!");
    s[len - 3..].copy_from_slice(b"end");
    map.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk.len(), len, "flush changed the length");
    assert_eq!(&on_disk[..FILE_LEN], &data[..]);
    assert_eq!(&on_disk[FILE_LEN..FILE_LEN + 5], b"tail!");
    assert!(on_disk[FILE_LEN + 5..len - 3].iter().all(|&b| b == 0));
    assert_eq!(&on_disk[len - 3..], b"end");
    map.unmap().unwrap();
    assert_eq!(file_len(&tmp), len as u64, "unmap changed the length");
}

#[test]
fn writable_mapping_with_offset_past_eof_extends_to_offset_plus_len() {
    let data = nonzero_bytes(FILE_LEN, 3);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    let (off, len) = (8192usize, 200_000usize);
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
    assert_eq!(file_len(&tmp), (off + len) as u64);
    map.as_mut_slice()[len - 1] = 0x5A;
    map.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk.len(), off + len);
    assert_eq!(on_disk[off + len - 1], 0x5A);
    assert_eq!(&on_disk[..FILE_LEN], &data[..]);
}

#[test]
fn writable_mapping_inside_the_file_does_not_change_its_length() {
    let data = nonzero_bytes(FILE_LEN, 4);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().len(4096).writable(true)) }.unwrap();
    assert_eq!(file_len(&tmp), FILE_LEN as u64);
    map.unmap().unwrap();
    assert_eq!(file_len(&tmp), FILE_LEN as u64);
}

#[test]
fn write_back_stops_at_the_mapped_length() {
    // A 10,000-byte writable mapping with 16 KiB pages over a longer file:
    // its one page covers file bytes 10,000..16,384 that are not mapped.
    // Writing the page back must not overwrite them (with the zeros the
    // page holds there), nor extend a file that ends at the mapping's end.
    let data = nonzero_bytes(20_000, 5);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    let len = 10_000;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .len(len)
                .page_size(16 << 10)
                .writable(true),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    assert_eq!(map.as_slice(), &data[..len]);
    map.as_mut_slice()[0] = 0;
    map.as_mut_slice()[len - 1] = 0;
    map.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk.len(), 20_000);
    assert_eq!((on_disk[0], on_disk[len - 1]), (0, 0));
    assert_eq!(&on_disk[1..len - 1], &data[1..len - 1]);
    assert_eq!(
        &on_disk[len..],
        &data[len..],
        "write-back clobbered file bytes past the mapping"
    );
    map.unmap().unwrap();

    // A file exactly as long as the mapping stays that long.
    let data = nonzero_bytes(len, 6);
    let (tmp, file) = rw_file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map =
        unsafe { rt.map_file(&file, MapOptions::new().page_size(16 << 10).writable(true)) }
            .unwrap()
            .into_mut()
            .unwrap();
    assert_eq!(map.len(), len);
    map.as_mut_slice()[len - 1] = 0;
    map.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(
        on_disk.len(),
        len,
        "write-back extended the file to a whole page"
    );
    assert_eq!(on_disk[len - 1], 0);
    assert_eq!(&on_disk[..len - 1], &data[..len - 1]);
}

#[test]
fn tail_with_a_page_size_not_a_power_of_two() {
    // 12 KiB pages: EOF (13,522) falls in the second page.
    read_only_past_eof(12 << 10, 0);
    let data = nonzero_bytes(FILE_LEN, 7);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    let len = 30_000;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .len(len)
                .page_size(12 << 10)
                .writable(true),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    assert_eq!(file_len(&tmp), len as u64);
    assert_eq!(&map.as_slice()[..FILE_LEN], &data[..]);
    assert!(map.as_slice()[FILE_LEN..].iter().all(|&b| b == 0));
    map.as_mut_slice()[len - 1] = 9;
    map.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk.len(), len);
    assert_eq!(on_disk[len - 1], 9);
    assert_eq!(&on_disk[..FILE_LEN], &data[..]);
}
