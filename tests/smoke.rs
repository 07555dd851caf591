//! Smoke test: map, read, write, flush, unmap.

mod common;

#[test]
fn smoke_read_write_flush() {
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let (f, file) = common::rw_file_with(&data);
    let rt = common::runtime(256 << 10, 16 << 10, 2);
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
