//! The kernel itself faults on mapped pages: `write(2)` from non-resident
//! pages of a mapping, `read(2)` into non-resident (and clean,
//! write-protected) pages of a writable mapping. The data must be right and
//! what `read(2)` stored must reach the file on flush.
//!
//! Fillers only (every runtime here asks for them): the kernel's own
//! faults are served by filler threads in full userfaultfd mode; under the
//! in-thread service they fail the call with `EFAULT` (`tests/in_thread.rs`
//! checks that rule and `Mapping::populate`, the way around it).

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;

use umio::{MapOptions, PrefetchKind, Runtime};

use common::{assert_same, random_bytes, read_exact_raw, rw_file_with, write_all_raw};

const FILE_LEN: usize = 1 << 20;

/// A small cache (256 KiB), 4 KiB pages, no read-ahead: what the test does
/// not touch stays non-resident.
fn runtime() -> Runtime {
    Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(4 << 10)
        .prefetch(PrefetchKind::None)
        .fillers(2)
        .fault_service(umio::FaultService::Fillers)
        .build()
        .unwrap()
}

#[test]
fn fillers_serve_write_syscall_from_non_resident_pages_to_a_file() {
    let data = random_bytes(FILE_LEN, 1);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // 300,000 bytes from an unaligned start: more than the cache, so pages
    // the kernel has copied are evicted while it copies the rest.
    let (start, len) = (100_001usize, 300_000usize);
    for p in (start..start + len).step_by(4096) {
        assert!(!map.is_resident(p), "byte {p} resident before the test");
    }
    let mut out = tempfile::tempfile().unwrap();
    // SAFETY: start+len <= map.len().
    write_all_raw(out.as_raw_fd(), unsafe { map.as_ptr().add(start) }, len);
    let mut got = Vec::new();
    out.seek(SeekFrom::Start(0)).unwrap();
    out.read_to_end(&mut got).unwrap();
    assert_same(
        &got,
        &data[start..start + len],
        "file written from the mapping",
    );
    let st = rt.stats();
    assert!(
        st.read_misses >= (len / 4096) as u64,
        "each page was a miss: {st:?}"
    );
    assert!(st.evicted_pages > 0, "{st:?}");
}

#[test]
fn fillers_serve_write_syscall_from_non_resident_pages_to_a_pipe() {
    let data = random_bytes(FILE_LEN, 2);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: fds is an array of two descriptors for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (start, len) = (500_000usize, 40_000usize);
    assert!(!map.is_resident(start));
    let ptr = map.as_ptr() as usize;
    std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            write_all_raw(fds[1], (ptr + start) as *const u8, len);
            // SAFETY: closing the write end we own ends the reader's stream.
            unsafe { libc::close(fds[1]) };
        });
        let mut got = vec![0u8; len];
        read_exact_raw(fds[0], got.as_mut_ptr(), len);
        writer.join().unwrap();
        assert_same(&got, &data[start..start + len], "bytes through the pipe");
    });
    // SAFETY: the read end is ours.
    unsafe { libc::close(fds[0]) };
}

#[test]
fn fillers_serve_read_syscall_into_non_resident_and_clean_pages() {
    let data = random_bytes(FILE_LEN, 3);
    let (tmp, file) = rw_file_with(&data);
    let src_data = random_bytes(200_000, 4);
    let (_src_tmp, src) = rw_file_with(&src_data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    let start = 50_003usize;
    // Make a few pages of the target range resident and clean (so
    // write-protected): read(2) meets both kinds of faults.
    for p in [60_000usize, 61_000, 120_000, 200_000] {
        assert_eq!(map.as_slice()[p], data[p]);
        assert!(map.is_resident(p));
    }
    assert!(!map.is_resident(start));
    assert_eq!(map.dirty_pages(), 0);
    read_exact_raw(
        src.as_raw_fd(),
        // SAFETY: start + src_data.len() <= map.len().
        unsafe { map.as_ptr().add(start) },
        src_data.len(),
    );
    let mut model = data.clone();
    model[start..start + src_data.len()].copy_from_slice(&src_data);
    assert_same(map.as_slice(), &model, "mapping after read(2)");
    map.flush().unwrap();
    assert_same(
        &std::fs::read(tmp.path()).unwrap(),
        &model,
        "file after read(2) into the mapping and flush",
    );
    let st = rt.stats();
    assert!(st.write_misses > 0, "read(2) filled missing pages: {st:?}");
    // Asynchronous dirty tracking: the kernel resolves its own writes to
    // clean pages, and umio learns of them by a scan (before the flush).
    assert!(st.first_writes() > 0, "read(2) dirtied clean pages: {st:?}");
}

#[test]
fn fillers_serve_std_read_exact_into_a_mutable_slice() {
    // The same through safe std APIs: File::read_exact into as_mut_slice.
    let data = random_bytes(FILE_LEN, 5);
    let (tmp, file) = rw_file_with(&data);
    let src_data = random_bytes(700_000, 6);
    let (_src_tmp, mut src) = rw_file_with(&src_data);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    let start = 300_000;
    src.read_exact(&mut map.as_mut_slice()[start..start + src_data.len()])
        .unwrap();
    let mut model = data.clone();
    model[start..start + src_data.len()].copy_from_slice(&src_data);
    assert_same(map.as_slice(), &model, "mapping");
    // 700 KB into a 256 KiB cache: dirty pages were written back before
    // the flush, the rest by it.
    let st = rt.stats();
    assert!(
        st.evicted_dirty_pages + st.limit_written_pages > 0,
        "{st:?}"
    );
    map.flush().unwrap();
    assert_same(&std::fs::read(tmp.path()).unwrap(), &model, "file");
}

#[test]
fn read_syscall_into_a_read_only_mapping_fails_with_efault() {
    let data = random_bytes(64 << 10, 7);
    let (_tmp, file) = rw_file_with(&data);
    let (_src_tmp, src) = rw_file_with(&[1u8; 4096]);
    let rt = runtime();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: the kernel must refuse to write read-only memory; the buffer
    // is inside the mapping either way.
    let n = unsafe { libc::read(src.as_raw_fd(), map.as_ptr().cast(), 4096) };
    let err = std::io::Error::last_os_error();
    assert_eq!(n, -1, "read(2) wrote into a read-only mapping");
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    assert_eq!(map.as_slice(), &data[..], "the mapping is unchanged");
}
