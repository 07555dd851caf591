//! A forked child does not inherit a region: in the child the range is not
//! mapped at all (so no access can hang on a fault nobody serves), and the
//! parent's mapping keeps working after the fork.

mod common;

use umio::{MapOptions, Mapping, Runtime};

/// Forks; the child checks with `madvise(MADV_NORMAL)` (which fails with
/// ENOMEM on unmapped memory) that each range is unmapped and exits 0 if
/// so, 1 or 2 otherwise. Returns the child's wait status.
fn child_sees_unmapped(ranges: &[(usize, usize)]) -> i32 {
    // SAFETY: the child calls only async-signal-safe functions (madvise,
    // __errno_location, _exit) and touches no lock or allocation.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        for &(addr, len) in ranges {
            // SAFETY: madvise only inspects the range; it is unmapped in
            // the child (which is what we test) or ours.
            let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_NORMAL) };
            if r != -1 {
                // SAFETY: _exit ends the child at once.
                unsafe { libc::_exit(1) };
            }
            // SAFETY: reads this thread's errno.
            if unsafe { *libc::__errno_location() } != libc::ENOMEM {
                // SAFETY: as above.
                unsafe { libc::_exit(2) };
            }
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    status
}

fn assert_child_ok(status: i32) {
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit normally (status {status:#x})"
    );
    match libc::WEXITSTATUS(status) {
        0 => {}
        1 => panic!("the region is still mapped in the child"),
        2 => panic!("madvise in the child failed, but not with ENOMEM"),
        c => panic!("the child exited with {c}"),
    }
}

fn range_of(m: &Mapping) -> (usize, usize) {
    (m.as_ptr() as usize, m.len())
}

#[test]
fn forked_child_does_not_inherit_regions() {
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let (tmp, file) = common::rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(16 << 10)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let ro = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut rw = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .offset(64 << 10)
                .len(100_000)
                .writable(true),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    // Some pages resident (clean and dirty), most not.
    assert_eq!(ro.as_slice()[..4096], data[..4096]);
    rw.as_mut_slice()[10] = 0x77;
    assert!(ro.is_resident(0) && !ro.is_resident(512 << 10));

    let (ro_addr, ro_len) = range_of(&ro);
    let (rw_addr, rw_len) = range_of(rw.mapping());
    let status = child_sees_unmapped(&[
        (ro_addr, ro_len),
        (rw_addr, rw_len),
        // Each page on its own too: none of it is mapped.
        (ro_addr, 4096),
        (ro_addr + (512 << 10), 4096),
        (rw_addr + (96 << 10), 4096),
    ]);
    assert_child_ok(status);

    // The parent's regions are intact: old and new pages, reads and writes.
    assert_eq!(ro.as_slice(), &data[..]);
    assert_eq!(rw.as_slice()[10], 0x77);
    rw.as_mut_slice()[99_999] = 0x88;
    rw.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert_eq!(on_disk[(64 << 10) + 10], 0x77);
    assert_eq!(on_disk[(64 << 10) + 99_999], 0x88);
}

#[test]
fn a_madvise_probe_detects_mapped_memory() {
    // The probe itself: memory the child does inherit is reported mapped,
    // so the test above cannot pass for the wrong reason.
    let v = vec![1u8; 64 << 10];
    let page = (v.as_ptr() as usize).next_multiple_of(4096);
    let status = child_sees_unmapped(&[(page, 4096)]);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        1,
        "a heap page must look mapped in the child"
    );
}
