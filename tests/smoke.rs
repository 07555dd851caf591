//! Smoke test: map, read, write, flush, unmap.

use std::io::Write;

#[test]
fn smoke_read_write_flush() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    f.write_all(&data).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(f.path())
        .unwrap();
    let rt = umio::Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(16 << 10)
        .fillers(2)
        .build()
        .unwrap();
    let mut map = rt
        .map_file(
            &file,
            umio::MapOptions::new().len(data.len()).writable(true),
        )
        .unwrap();
    assert_eq!(map.as_slice(), &data[..]);
    map.as_mut_slice()[..5].copy_from_slice(b"hello");
    map.flush().unwrap();
    let on_disk = std::fs::read(f.path()).unwrap();
    assert_eq!(&on_disk[..5], b"hello");
    assert_eq!(&on_disk[5..], &data[5..]);
    println!("{:?}", rt.stats());
    map.unmap().unwrap();
}
