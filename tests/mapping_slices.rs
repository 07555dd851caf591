//! `Mapping` as a byte slice: `Deref<Target = [u8]>` and `AsRef<[u8]>`,
//! `MappingMut` (`DerefMut`, `AsMut`) for writable mappings, and the
//! checks that keep a slice off unmapped memory.

use std::error::Error as _;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use umio::{MapOptions, Mapping, MappingMut, PrefetchKind, Runtime};

mod common;
use common::{file_with, random_bytes, rw_file_with};

const PAGE: usize = 4096;
const LEN: usize = 16 * PAGE;

fn runtime() -> Runtime {
    Runtime::builder()
        .cache_bytes(64 * PAGE as u64)
        .page_size(PAGE)
        .fillers(2)
        .prefetch(PrefetchKind::None)
        .build()
        .unwrap()
}

/// A `&[u8]`-consuming function, as another crate would write it.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| u64::from(b)).sum()
}

/// An `AsRef<[u8]>`-consuming one.
fn first_and_last(bytes: impl AsRef<[u8]>) -> (u8, u8) {
    let b = bytes.as_ref();
    (b[0], b[b.len() - 1])
}

/// An `AsMut<[u8]>`-consuming one.
fn stamp(mut bytes: impl AsMut<[u8]>, at: usize, v: u8) {
    bytes.as_mut()[at] = v;
}

#[test]
fn a_mapping_is_a_byte_slice() {
    let data = random_bytes(LEN, 1);
    let (_tmp, file) = file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert_eq!(checksum(&map), checksum(&data));
    assert_eq!(first_and_last(&map), (data[0], data[LEN - 1]));
    assert_eq!(&map[PAGE..PAGE + 100], &data[PAGE..PAGE + 100]);
    assert_eq!(map[5 * PAGE + 7], data[5 * PAGE + 7]);
    assert_eq!(*map, data[..], "deref gives every mapped byte");
    assert_eq!(map.as_ref(), map.as_slice());
    // The slice methods come through deref; `len` stays the mapping's own.
    assert_eq!(map.len(), LEN);
    assert_eq!(
        map.iter().position(|&b| b != data[0]),
        data.iter().position(|&b| b != data[0])
    );
}

#[test]
fn a_writable_mapping_becomes_a_mutable_slice() {
    let data = random_bytes(LEN, 2);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    let mut map: MappingMut = map.into_mut().expect("a whole, writable mapping");
    map[3 * PAGE..4 * PAGE].fill(0xA5);
    stamp(&mut map, 9 * PAGE + 1, 0x5A);
    map.as_mut()[LEN - 1] = 0x77;
    assert_eq!(map[3 * PAGE + 10], 0xA5);
    assert_eq!(first_and_last(&map).1, 0x77);
    map.mapping().flush().unwrap();
    let mut want = data.clone();
    want[3 * PAGE..4 * PAGE].fill(0xA5);
    want[9 * PAGE + 1] = 0x5A;
    want[LEN - 1] = 0x77;
    let mut disk = vec![0u8; LEN];
    tmp.as_file().read_exact_at(&mut disk, 0).unwrap();
    assert!(
        disk == want,
        "the writes through DerefMut and AsMut reach the file"
    );

    // Back to a `Mapping` for a partial unmap; the rest keeps its bytes.
    let mut map: Mapping = map.into_mapping();
    map.unmap_range(0..PAGE).unwrap();
    assert_eq!(map.mapped_bytes(), LEN - PAGE);
    map.unmap().unwrap();
}

#[test]
fn into_mut_gives_back_read_only_and_partly_unmapped_mappings() {
    let data = random_bytes(LEN, 3);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let ro = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    let ro = ro
        .into_mut()
        .expect_err("a read-only mapping has no MappingMut")
        .into_mapping();
    assert_eq!(&ro[..], &data[..], "given back unchanged and usable");

    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut rw = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    rw.unmap_range(LEN - PAGE..LEN).unwrap();
    let rw = rw
        .into_mut()
        .expect_err("a mapping with a hole has no MappingMut")
        .into_mapping();
    assert_eq!(rw.mapped_bytes(), LEN - PAGE);
    // SAFETY: page 0 is mapped still.
    assert_eq!(unsafe { *rw.as_ptr() }, data[0]);
}

/// After `unmap_range` (which needs `&mut`, so no slice outlives it) a
/// deref would cover unmapped memory: it panics with a message saying so,
/// and so does `as_slice`, rather than reading unmapped memory.
#[test]
fn deref_of_a_partly_unmapped_mapping_panics_clearly() {
    let data = random_bytes(LEN, 4);
    let (_tmp, file) = file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert_eq!(map[LEN - 1], data[LEN - 1]);
    map.unmap_range(8 * PAGE..LEN).unwrap();
    for (what, r) in [
        ("deref", catch_unwind(AssertUnwindSafe(|| checksum(&map)))),
        (
            "as_ref",
            catch_unwind(AssertUnwindSafe(|| first_and_last(&map).0 as u64)),
        ),
        (
            "as_slice",
            catch_unwind(AssertUnwindSafe(|| map.as_slice()[0] as u64)),
        ),
    ] {
        let err = r.expect_err(what);
        let msg = err
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| err.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(msg.contains("unmapped"), "{what}: {msg:?}");
    }
    // Wholly unmapped, piece by piece: still a clear panic, not a read.
    map.unmap_range(0..8 * PAGE).unwrap();
    assert_eq!(map.mapped_bytes(), 0);
    assert!(catch_unwind(AssertUnwindSafe(|| map[0])).is_err());
}

/// memmap2's `MmapMut`: `map_file_mut` maps writable in one call, and
/// `flush_range`, `flush_async` and `flush` of a `MappingMut` each bring
/// the writes made through it to the file.
#[test]
fn a_mapping_mut_flushes_as_memmap2s_mmap_mut() {
    let data = random_bytes(LEN, 5);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the file while a slice of
    // it lives.
    let mut map = unsafe { rt.map_file_mut(&file, MapOptions::new()) }.unwrap();
    assert!(map.mapping().is_writable());
    let on_disk = |at: usize| {
        let mut b = [0u8; 1];
        tmp.as_file().read_exact_at(&mut b, at as u64).unwrap();
        b[0]
    };
    let mut want = data.clone();
    for (i, at) in [PAGE + 3, 7 * PAGE + 1, 12 * PAGE + 9]
        .into_iter()
        .enumerate()
    {
        let v = !data[at];
        map[at] = v;
        want[at] = v;
        assert_ne!(on_disk(at), v, "write {i} not written back yet");
        match i {
            0 => map.flush_range(at..at + 1).unwrap(),
            1 => map.flush_async().unwrap(),
            _ => map.flush().unwrap(),
        }
        assert_eq!(on_disk(at), v, "write {i} reached the file");
        assert_eq!(map.mapping().dirty_pages(), 0);
    }
    // `write_at` and `invalidate_range` of a `MappingMut` take `&mut`, as
    // its writes do: the mapping shows the new bytes.
    map.write_at(2 * PAGE, b"umio").unwrap();
    want[2 * PAGE..2 * PAGE + 4].copy_from_slice(b"umio");
    assert_eq!(&map[2 * PAGE..2 * PAGE + 4], b"umio");
    map.invalidate_range(0..LEN).unwrap();
    assert!(map.as_slice() == &want[..], "the mapping after invalidate");
    map.unmap().unwrap();
    assert!(std::fs::read(tmp.path()).unwrap() == want, "the file");
}

/// `into_mut`'s error carries the mapping back and converts into umio's
/// `Error`, `std::io::Error` and `Box<dyn Error>`, so `?` propagates it.
#[test]
fn into_mut_errors_propagate_with_question_mark() {
    let data = random_bytes(LEN, 6);
    let (_tmp, file) = file_with(&data);
    let rt = runtime();
    let map = || {
        // SAFETY: nothing but this mapping changes the file while a slice
        // of it lives.
        unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap()
    };
    let umio_result = |m: Mapping| -> umio::Result<MappingMut> { Ok(m.into_mut()?) };
    let io_result = |m: Mapping| -> std::io::Result<MappingMut> { Ok(m.into_mut()?) };
    let boxed =
        |m: Mapping| -> Result<MappingMut, Box<dyn std::error::Error>> { Ok(m.into_mut()?) };
    let e = umio_result(map()).unwrap_err();
    assert!(matches!(e, umio::Error::InvalidArgument(_)), "{e}");
    assert_eq!(e.errno(), libc::EINVAL);
    let e = io_result(map()).unwrap_err();
    assert_eq!(e.raw_os_error(), None);
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let e = boxed(map()).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    let e = map().into_mut().unwrap_err();
    assert!(e.source().is_some());
    assert_eq!(e.into_mapping()[LEN - 1], data[LEN - 1], "given back");
}
