//! The fault service per region (`MapOptions::fault_service`,
//! `MapOptions::user_access_only`, `FaultService::Auto`): a region of each
//! service in one runtime, each on its own userfaultfd; and system calls
//! on mapped memory (`Mapping::read_into`, `Mapping::write_from`), which
//! work under either service, where a plain `read(2)` into a non-resident
//! in-thread region fails with `EFAULT` and one into a fillers' region
//! (full-mode userfaultfd) does not.
//!
//! Every test names each region's service itself, so the suite tests the
//! same thing whatever `UMIO_FAULT_SERVICE` says.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};

use common::{assert_same, random_bytes, rw_file_with};

const FILE_LEN: usize = 1 << 20;
const SERVICES: [FaultService; 2] = [FaultService::Fillers, FaultService::InThread];

/// A small cache (512 KiB), 4 KiB pages, no read-ahead: what a test does
/// not touch stays non-resident.
fn runtime(service: FaultService) -> Runtime {
    Runtime::builder()
        .cache_bytes(512 << 10)
        .page_size(4 << 10)
        .prefetch(PrefetchKind::None)
        .fault_service(service)
        .build()
        .unwrap()
}

/// A temporary file of `data`, open for reading from the start.
fn source(data: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f
}

/// A plain `read(2)` of `len` bytes into `addr`: the bytes read, or the
/// errno.
fn raw_read(fd: i32, addr: *mut u8, len: usize) -> Result<usize, i32> {
    // SAFETY: callers pass a range of a live writable mapping of theirs.
    let n = unsafe { libc::read(fd, addr.cast(), len) };
    if n < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(n as usize)
    }
}

#[test]
fn one_runtime_serves_a_region_of_each_service() {
    let data = random_bytes(FILE_LEN, 1);
    let (_tmp, file) = rw_file_with(&data);
    // The runtime's default is the fillers; one region asks for in-thread.
    let rt = runtime(FaultService::Fillers);
    let opts = MapOptions::new().writable(true);
    // SAFETY: nothing but these mappings changes the file, each its own half.
    let fillers = unsafe { rt.map_file(&file, opts.clone().len(FILE_LEN / 2)) }.unwrap();
    // SAFETY: nothing else changes the file while the mappings live.
    let in_thread = unsafe {
        rt.map_file(
            &file,
            opts.clone()
                .offset((FILE_LEN / 2) as u64)
                .fault_service(FaultService::InThread),
        )
    }
    .unwrap();
    assert_eq!(fillers.fault_service(), FaultService::Fillers);
    assert_eq!(in_thread.fault_service(), FaultService::InThread);
    assert_eq!(fillers.stats().fault_service, FaultService::Fillers);
    assert_eq!(in_thread.stats().fault_service, FaultService::InThread);
    assert_eq!(rt.stats().in_thread_regions, 1);
    assert_eq!(rt.stats().regions, 2);
    // Twice the cache in all, read from both in turn: each region's misses
    // evict the other's pages, across services.
    for round in 0..2 {
        for off in (0..FILE_LEN / 2).step_by(4096) {
            assert_eq!(
                fillers[off], data[off],
                "fillers, byte {off}, round {round}"
            );
            assert_eq!(
                in_thread[off],
                data[FILE_LEN / 2 + off],
                "in-thread, byte {off}, round {round}"
            );
        }
    }
    assert_same(&fillers[..], &data[..FILE_LEN / 2], "fillers' region");
    assert_same(&in_thread[..], &data[FILE_LEN / 2..], "in-thread region");
    assert!(rt.stats().evicted_pages > 0, "the regions shared the cache");
    rt.check_policy().unwrap();
    // Writes in both, flushed: the file has them.
    let mut fillers = fillers.into_mut().unwrap();
    let mut in_thread = in_thread.into_mut().unwrap();
    fillers[10] = !data[10];
    in_thread[20] = !data[FILE_LEN / 2 + 20];
    fillers.flush().unwrap();
    in_thread.flush().unwrap();
    let mut back = vec![0u8; FILE_LEN];
    let mut f = file.try_clone().unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut back).unwrap();
    assert_eq!(back[10], !data[10]);
    assert_eq!(back[FILE_LEN / 2 + 20], !data[FILE_LEN / 2 + 20]);
}

#[test]
fn auto_serves_in_thread_only_what_it_loses_nothing_by() {
    let data = random_bytes(FILE_LEN, 2);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime(FaultService::Auto);
    // SAFETY: nothing else changes the file.
    let plain = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: nothing else changes the file while the mappings live.
    let private = unsafe { rt.map_file(&file, MapOptions::new().user_access_only(true)) }.unwrap();
    let sigbus = rt.kernel_features().names().contains(&"SIGBUS");
    if rt.user_mode_only() {
        // Kernel accesses fail whatever the service: in-thread for both.
        assert_eq!(plain.fault_service(), FaultService::InThread);
    } else {
        assert_eq!(plain.fault_service(), FaultService::Fillers);
        assert_eq!(rt.fault_service(), FaultService::Fillers);
        assert_eq!(rt.config().fault_service, FaultService::Fillers);
    }
    assert_eq!(
        private.fault_service(),
        if sigbus {
            FaultService::InThread
        } else {
            FaultService::Fillers
        }
    );
    assert_same(&plain[..], &data, "plain region");
    assert_same(&private[..], &data, "user-access-only region");
    // A region's own choice wins over the runtime's default and `Auto`.
    // SAFETY: nothing else changes the file while the mappings live.
    let forced = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .user_access_only(true)
                .fault_service(FaultService::Fillers),
        )
    }
    .unwrap();
    assert_eq!(forced.fault_service(), FaultService::Fillers);
}

#[test]
fn plain_read_into_a_non_resident_in_thread_region_fails_and_into_fillers_does_not() {
    let data = random_bytes(FILE_LEN, 3);
    let input = random_bytes(64 << 10, 4);
    for service in SERVICES {
        let (_tmp, file) = rw_file_with(&data);
        let rt = runtime(FaultService::Fillers);
        if rt.user_mode_only() {
            eprintln!("user-mode-only userfaultfd: the fillers do not serve the kernel either");
            return;
        }
        // SAFETY: nothing else changes the file.
        let map = unsafe {
            rt.map_file(
                &file,
                MapOptions::new().writable(true).fault_service(service),
            )
        }
        .unwrap();
        let off = 128 << 10;
        assert!(!map.is_resident(off));
        let src = source(&input);
        let got = raw_read(
            src.as_raw_fd(),
            // SAFETY: off + the input's length lies within the mapping.
            unsafe { map.as_ptr().add(off) },
            input.len(),
        );
        match service {
            FaultService::InThread => assert_eq!(got, Err(libc::EFAULT), "{service:?}"),
            _ => {
                assert_eq!(got, Ok(input.len()), "{service:?}");
                assert_same(&map[off..off + input.len()], &input, "read(2) into fillers");
            }
        }
    }
}

#[test]
fn read_into_fills_a_non_resident_region_of_either_service() {
    let data = random_bytes(FILE_LEN, 5);
    let input = random_bytes(300_000, 6);
    for service in SERVICES {
        let (_tmp, file) = rw_file_with(&data);
        let rt = runtime(FaultService::Fillers);
        // SAFETY: nothing but this mapping changes the file.
        let mut map = unsafe {
            rt.map_file(
                &file,
                MapOptions::new().writable(true).fault_service(service),
            )
        }
        .unwrap();
        assert_eq!(map.fault_service(), service);
        // An unaligned start, by the descriptor's position, all of it in
        // as many calls as it takes.
        let start = 100_001;
        let src = source(&input);
        let mut done = 0;
        while done < input.len() {
            let n = map
                .read_into(&src, None, start + done..start + input.len())
                .unwrap();
            assert!(n > 0, "{service:?}: read_into made no progress");
            done += n;
        }
        // And at a file offset, with `pread(2)`.
        let n = map.read_into(&src, Some(10), 900_000..900_100).unwrap();
        assert_eq!(n, 100);
        let mut want = data.clone();
        want[start..start + input.len()].copy_from_slice(&input);
        want[900_000..900_100].copy_from_slice(&input[10..110]);
        assert_same(&map[..], &want, "the mapping after read_into");
        map.flush().unwrap();
        let mut back = Vec::new();
        let mut f = file.try_clone().unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut back).unwrap();
        assert_same(&back, &want, "the file after read_into and flush");
    }
}

#[test]
fn write_from_writes_non_resident_pages_of_either_service() {
    let data = random_bytes(FILE_LEN, 7);
    for service in SERVICES {
        let (_tmp, file) = rw_file_with(&data);
        let rt = runtime(FaultService::Fillers);
        // SAFETY: nothing else changes the file.
        let map = unsafe { rt.map_file(&file, MapOptions::new().fault_service(service)) }.unwrap();
        let (start, len) = (200_003, 250_000);
        assert!(!map.is_resident(start));
        let mut out = tempfile::tempfile().unwrap();
        let mut done = 0;
        while done < len {
            let n = map
                .write_from(&out, None, start + done..start + len)
                .unwrap();
            assert!(n > 0, "{service:?}: write_from made no progress");
            done += n;
        }
        let mut got = Vec::new();
        out.seek(SeekFrom::Start(0)).unwrap();
        out.read_to_end(&mut got).unwrap();
        assert_same(
            &got,
            &data[start..start + len],
            "file written by write_from",
        );
    }
}

#[test]
fn read_into_refuses_bad_arguments() {
    let data = random_bytes(64 << 10, 8);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime(FaultService::Fillers);
    let src = source(&data);
    for service in SERVICES {
        // SAFETY: nothing else changes the file.
        let mut ro =
            unsafe { rt.map_file(&file, MapOptions::new().fault_service(service)) }.unwrap();
        assert!(matches!(
            ro.read_into(&src, None, 0..10),
            Err(umio::Error::InvalidArgument(_))
        ));
        // SAFETY: nothing else changes the file while the mappings live.
        let mut rw = unsafe {
            rt.map_file(
                &file,
                MapOptions::new().writable(true).fault_service(service),
            )
        }
        .unwrap();
        assert!(matches!(
            rw.read_into(&src, None, 0..(64 << 10) + 1),
            Err(umio::Error::InvalidArgument(_))
        ));
        assert_eq!(rw.read_into(&src, None, 5..5).unwrap(), 0);
        // A descriptor open for writing only: read(2)'s own error.
        let wo = tempfile::tempfile().unwrap();
        let path = format!("/proc/self/fd/{}", wo.as_raw_fd());
        let wo = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let e = rw.read_into(&wo, None, 0..10).unwrap_err();
        assert_eq!(e.errno(), libc::EBADF, "{e}");
    }
}
