//! Smoke test: map, read, write, flush, unmap.

mod common;

#[test]
fn smoke_read_write_flush() {
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let (f, file) = common::rw_file_with(&data);
    let rt = common::runtime(256 << 10, 16 << 10, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &file,
            umio::MapOptions::new().len(data.len()).writable(true),
        )
    }
    .unwrap()
    .into_mut()
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

#[test]
fn one_fault_event_per_read_still_serves_every_fault() {
    let data: Vec<u8> = (0..(256u32 << 10)).map(|i| (i % 253) as u8).collect();
    let (_tmp, file) = common::rw_file_with(&data);
    let rt = umio::Runtime::builder()
        .cache_bytes(64 << 10)
        .page_size(4096)
        .fillers(2)
        .max_fault_events(1)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, umio::MapOptions::new()) }.unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let map = &map;
            let data = &data;
            s.spawn(move || {
                for i in (t * 4096..data.len()).step_by(4 * 4096) {
                    assert_eq!(map.as_slice()[i], data[i]);
                }
            });
        }
    });
}
