//! Each bad argument gives its own error, with the errno the C ABI reports,
//! and leaves nothing behind: no region, no change to the file, and the
//! runtime keeps working.

mod common;

use std::fs::{File, OpenOptions};
use std::sync::Arc;

use umio::backends::MemoryStore;
use umio::{Advice, Error, MapOptions, Runtime, UncheckedAdvice};

const FILE_LEN: usize = 64 << 10;

fn rw_file() -> (tempfile::NamedTempFile, File) {
    common::rw_file_with(&vec![5u8; FILE_LEN])
}

/// 1 MiB cache, 16 KiB pages.
fn runtime() -> Runtime {
    common::runtime(1 << 20, 16 << 10, 1)
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e @ Error::InvalidArgument(_)) => {
            assert_eq!(e.errno(), libc::EINVAL, "{what}");
            assert!(!e.to_string().is_empty());
            let io: std::io::Error = e.into();
            assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput, "{what}");
        }
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn builder_rejects_bad_settings() {
    let b = || Runtime::builder().cache_bytes(64 << 20);
    assert_invalid(b().fillers(0).build(), "fillers 0");
    assert_invalid(b().fillers(257).build(), "fillers 257");
    assert_invalid(b().evictors(65).build(), "evictors 65");
    assert_invalid(b().max_fault_events(0).build(), "max_fault_events 0");
    assert_invalid(b().max_fault_events(4097).build(), "max_fault_events 4097");
    assert_invalid(b().watermarks(60, 70).build(), "low watermark above high");
    assert_invalid(b().watermarks(0, 0).build(), "high watermark 0");
    assert_invalid(b().watermarks(101, 50).build(), "high watermark over 100");
    assert_invalid(b().page_size(0).build(), "page size 0");
    assert_invalid(b().page_size(1000).build(), "page size 1000");
    assert_invalid(b().page_size(6 << 10).build(), "page size 6 KiB");
    assert_invalid(b().page_size(2 << 30).build(), "page size 2 GiB");
    assert_invalid(
        Runtime::builder()
            .cache_bytes(4 * (64 << 10) - 1)
            .page_size(64 << 10)
            .build(),
        "cache smaller than 4 pages",
    );
    assert_invalid(Runtime::builder().cache_bytes(0).build(), "cache 0");
    // The in-thread service reclaims clean pages only in its signal
    // handler: a writable mapping needs an evictor for the dirty ones.
    let no_evictor = Runtime::builder()
        .fault_service(umio::FaultService::InThread)
        .evictors(0)
        .build()
        .unwrap();
    let store = || Arc::new(MemoryStore::new(vec![0u8; 1 << 20]));
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { no_evictor.map(MapOptions::new().store(store()).writable(true)) },
        "writable, in-thread, no evictor",
    );
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe { no_evictor.map(MapOptions::new().store(store())) }
        .expect("read-only needs no evictor");
    // The boundaries themselves are fine (fillers: no evictor).
    let rt = Runtime::builder()
        .cache_bytes(4 * (64 << 10))
        .page_size(64 << 10)
        .fillers(1)
        .fault_service(umio::FaultService::Fillers)
        .evictors(0)
        .watermarks(100, 100)
        .build()
        .unwrap();
    assert_eq!(rt.cache_bytes(), 4 * (64 << 10));
    assert_eq!(rt.page_size(), 64 << 10);
}

#[test]
fn map_rejects_bad_lengths_and_offsets() {
    let (tmp, file) = rw_file();
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    assert_invalid(
        unsafe { rt.map_file(&file, MapOptions::new().len(0)) },
        "len 0",
    );
    // Offsets that are not multiples of 4096 are handled inside, as
    // memmap2 does (tests/memmap_parity.rs); with a fixed address they are
    // refused, as by mmap.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut spot =
        unsafe { rt.map_file(&file, MapOptions::new().len(8192)) }.expect("a spot to map at");
    let addr = spot.as_ptr() as usize;
    spot.unmap_range(0..8192).unwrap();
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe {
            rt.map_file(
                &file,
                MapOptions::new()
                    .offset(100)
                    .len(4096)
                    .fixed_address_noreplace(addr),
            )
        },
        "offset 100 at a fixed address",
    );
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().offset(FILE_LEN as u64 + 4096)) },
        "offset past the end, no len",
    );
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().offset(FILE_LEN as u64)) },
        "offset at the end, no len: nothing to map",
    );
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().offset(u64::MAX - 4095).len(8192)) },
        "offset + len overflows u64",
    );
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().offset(1 << 63).len(4096)) },
        "offset + len past i64::MAX",
    );
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().len(usize::MAX)) },
        "len that cannot be rounded to pages",
    );
    // A writable mapping must not extend the file when it fails.
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe {
            rt.map_file(
                &file,
                MapOptions::new()
                    .offset(u64::MAX - 4095)
                    .len(8192)
                    .writable(true),
            )
        },
        "writable, overflowing",
    );
    let empty = tempfile::NamedTempFile::new().unwrap();
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&File::open(empty.path()).unwrap(), MapOptions::new()) },
        "empty file, no len",
    );
    assert_eq!(
        std::fs::metadata(tmp.path()).unwrap().len(),
        FILE_LEN as u64
    );
    assert_eq!(rt.stats().regions, 0, "a failed map left a region");
}

#[test]
fn map_rejects_bad_page_sizes() {
    let (_tmp, file) = rw_file();
    let rt = runtime();
    for (ps, what) in [
        (0, "page size 0"),
        (1000, "page size 1000"),
        (4096 + 512, "page size 4.5 KiB"),
        (2 << 30, "page size 2 GiB"),
        (512 << 10, "page size half the cache"),
        (
            (256 << 10) + 4096,
            "page size just over a quarter of the cache",
        ),
    ] {
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        assert_invalid(
            unsafe { rt.map_file(&file, MapOptions::new().page_size(ps)) },
            what,
        );
    }
    // A quarter of the cache is the largest allowed.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map_file(&file, MapOptions::new().page_size(256 << 10)) }.unwrap();
    assert_eq!(m.as_slice(), &vec![5u8; FILE_LEN][..]);
    m.unmap().unwrap();
    assert_eq!(rt.stats().regions, 0);
}

#[test]
fn writable_mapping_of_a_read_only_store() {
    let (tmp, _) = rw_file();
    let rt = runtime();
    let ro_file = File::open(tmp.path()).unwrap();
    // Even past EOF: the refusal comes before any change to the file.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map_file(&ro_file, MapOptions::new().len(1 << 20).writable(true)) }
        .unwrap_err();
    assert!(matches!(e, Error::ReadOnlyStore), "{e:?}");
    assert_eq!(e.errno(), libc::EACCES);
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
    assert_eq!(
        std::fs::metadata(tmp.path()).unwrap().len(),
        FILE_LEN as u64
    );

    let store = Arc::new(MemoryStore::read_only(vec![0; 8192]));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map(MapOptions::new().store(store.clone()).writable(true)) }.unwrap_err();
    assert!(matches!(e, Error::ReadOnlyStore), "{e:?}");
    assert_eq!(e.errno(), libc::EACCES);
    // Read-only is fine.
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map(MapOptions::new().store(store)) }.unwrap();
    assert_eq!(m.as_slice(), &[0u8; 8192][..]);
    assert!(!m.is_writable());
}

#[test]
fn files_that_cannot_be_stores() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe {
        rt.map_file(
            &File::open(dir.path()).unwrap(),
            MapOptions::new().len(4096),
        )
    }
    .unwrap_err();
    assert!(
        matches!(e, Error::Os { errno, .. } if errno == libc::ENODEV),
        "a directory: {e:?}"
    );
    assert_eq!(e.errno(), libc::ENODEV);

    let (tmp, _) = rw_file();
    let wo = OpenOptions::new().write(true).open(tmp.path()).unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map_file(&wo, MapOptions::new()) }.unwrap_err();
    assert!(
        matches!(e, Error::Os { errno, .. } if errno == libc::EACCES),
        "a write-only descriptor: {e:?}"
    );
    assert_eq!(e.errno(), libc::EACCES);
}

#[test]
fn store_option_and_map_file_do_not_mix() {
    let (_tmp, file) = rw_file();
    let rt = runtime();
    let store = Arc::new(MemoryStore::new(vec![0; 8192]));
    assert_invalid(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&file, MapOptions::new().store(store)) },
        "map_file with a store option",
    );
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    assert_invalid(
        unsafe { rt.map(MapOptions::new().len(4096)) },
        "map without a store",
    );
    assert_eq!(rt.stats().regions, 0);
}

#[test]
fn map_after_shutdown() {
    let (tmp, file) = rw_file();
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut before = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    rt.shutdown();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap_err();
    assert!(matches!(e, Error::ShutDown), "{e:?}");
    assert_eq!(e.errno(), libc::ESHUTDOWN);
    let store = Arc::new(MemoryStore::new(vec![0; 8192]));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map(MapOptions::new().store(store)) }.unwrap_err();
    assert!(matches!(e, Error::ShutDown), "{e:?}");
    // A clone is the same runtime: shut down too.
    assert!(matches!(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.clone().map_file(&file, MapOptions::new()) },
        Err(Error::ShutDown)
    ));
    // The mapping made before keeps working, and unmaps cleanly.
    assert_eq!(before.as_slice()[FILE_LEN - 1], 5);
    before.as_mut_slice()[0] = 9;
    before.flush().unwrap();
    before.unmap().unwrap();
    assert_eq!(std::fs::read(tmp.path()).unwrap()[0], 9);
}

#[test]
fn range_arguments_of_a_mapping() {
    let (_tmp, file) = rw_file();
    let rt = runtime();
    let len = 40_000; // two whole 16 KiB pages and a partial one
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe { rt.map_file(&file, MapOptions::new().len(len)) }.unwrap();
    let ps = m.page_size();
    assert_eq!(ps, 16 << 10);

    // DontNeed discards whole pages only.
    assert_invalid(
        m.advise_mut(100..ps, UncheckedAdvice::DontNeed),
        "DontNeed, start unaligned",
    );
    assert_invalid(
        m.advise_mut(0..ps + 1, UncheckedAdvice::DontNeed),
        "DontNeed, end unaligned",
    );
    assert_invalid(
        m.advise_mut(ps..len - 1, UncheckedAdvice::DontNeed),
        "DontNeed, end before len",
    );
    m.advise_mut(0..ps, UncheckedAdvice::DontNeed).unwrap();
    m.advise_mut(ps..len, UncheckedAdvice::DontNeed).unwrap();
    m.advise_mut(ps..ps, UncheckedAdvice::DontNeed).unwrap();

    // Ranges must lie inside the mapping.
    assert_invalid(m.prefetch(0..len + 1), "prefetch past the end");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert_invalid(m.prefetch(backwards.clone()), "prefetch, start > end");
    assert_invalid(
        m.advise(0..len + 1, Advice::Sequential),
        "advise past the end",
    );
    assert_invalid(
        m.advise(backwards.clone(), Advice::Random),
        "advise, start > end",
    );
    assert_invalid(
        m.advise(len..len + ps, Advice::WillNeed),
        "WillNeed past the end",
    );
    assert_invalid(m.flush_range(0..len + 1), "flush_range past the end");
    assert_invalid(m.flush_range(backwards), "flush_range, start > end");
    m.prefetch(0..len).unwrap();
    m.prefetch(len..len).unwrap();
    m.flush_range(0..len).unwrap();
    assert!(!m.is_resident(len), "past the end is never resident");
    assert!(!m.is_resident(usize::MAX));
}

/// A read-only mapping has no `as_mut_slice` (a compile error, see
/// `MappingMut`'s docs); `into_mut` refuses it with `EINVAL`, an error `?`
/// propagates, and gives it back unchanged.
#[test]
fn mutable_slice_of_a_read_only_mapping() {
    let (_tmp, file) = rw_file();
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the file while a slice of
    // it lives.
    let m = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    assert!(!m.is_writable());
    let e = m.into_mut().unwrap_err();
    assert!(matches!(e.error(), Error::InvalidArgument(_)), "{e}");
    let m = e.into_mapping();
    assert_eq!(m.as_slice()[0], 5);
    let through_question_mark = || -> umio::Result<umio::MappingMut> { Ok(m.into_mut()?) };
    assert_invalid(through_question_mark().map(|m| m.len()), "into_mut with ?");
    // SAFETY: as above.
    let w = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    assert_eq!(w.into_mut().unwrap().as_mut_slice().len(), FILE_LEN);
}
