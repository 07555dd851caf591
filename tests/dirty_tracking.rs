//! Dirty tracking, synchronous (write-protect faults served by umio) and
//! asynchronous (`UFFD_FEATURE_WP_ASYNC` + `PAGEMAP_SCAN`): what each
//! reports, and that written pages reach the store either way, through a
//! flush, through eviction and through a partial unmap, with both fault
//! services.

mod common;

use common::{Rng, assert_same, random_bytes, rw_file_with};
use umio::{DirtyTracking, FaultService, MapOptions, Runtime, kernel_features};

const PAGE: usize = 4096;

fn has_async() -> bool {
    kernel_features().unwrap().async_dirty_tracking()
}

fn runtime(cache_bytes: u64, tracking: DirtyTracking, service: FaultService) -> Runtime {
    let rt = Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(PAGE)
        .fault_service(service)
        .dirty_tracking(tracking)
        .build()
        .unwrap();
    assert_eq!(rt.fault_service(), service);
    rt
}

fn modes() -> Vec<DirtyTracking> {
    if has_async() {
        vec![DirtyTracking::Sync, DirtyTracking::Async]
    } else {
        vec![DirtyTracking::Sync]
    }
}

const SERVICES: [FaultService; 2] = [FaultService::Fillers, FaultService::InThread];

#[test]
fn auto_resolves_and_is_reported() {
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .dirty_tracking(DirtyTracking::Auto)
        .build()
        .unwrap();
    // `Auto` is synchronous until asynchronous tracking keeps every
    // guarantee (see `DirtyTracking::Async`).
    assert_eq!(rt.dirty_tracking(), DirtyTracking::Sync);
    assert_eq!(rt.config().dirty_tracking, DirtyTracking::Sync);
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .dirty_tracking(DirtyTracking::Sync)
        .build()
        .unwrap();
    assert_eq!(rt.dirty_tracking(), DirtyTracking::Sync);
    assert_eq!(rt.config().dirty_tracking, DirtyTracking::Sync);
    let r = Runtime::builder()
        .cache_bytes(1 << 20)
        .dirty_tracking(DirtyTracking::Async)
        .build();
    if has_async() {
        assert_eq!(r.unwrap().dirty_tracking(), DirtyTracking::Async);
    } else {
        assert!(matches!(r, Err(umio::Error::Unsupported(_))), "{r:?}");
    }
}

#[test]
fn names_round_trip() {
    for t in [
        DirtyTracking::Auto,
        DirtyTracking::Sync,
        DirtyTracking::Async,
    ] {
        assert_eq!(DirtyTracking::from_name(t.name()), Some(t));
    }
    assert_eq!(
        DirtyTracking::from_name(" ASYNC "),
        Some(DirtyTracking::Async)
    );
    assert_eq!(DirtyTracking::from_name("lazy"), None);
}

/// Reads every page (clean, write-protected), then writes one word in
/// each: sync tracking takes a write-protect fault per page, async none;
/// both count every page dirty and flush them all.
#[test]
fn first_writes_to_clean_pages() {
    const PAGES: usize = 64;
    for service in SERVICES {
        for tracking in modes() {
            let what = format!("{service:?}/{tracking:?}");
            let data = random_bytes(PAGES * PAGE, 3);
            let (tmp, file) = rw_file_with(&data);
            let rt = runtime(1 << 20, tracking, service);
            // SAFETY: only this mapping changes the file while it lives.
            let mut map = unsafe { rt.map_file_mut(&file, MapOptions::new()) }.unwrap();
            let mut sum = 0u64;
            for p in 0..PAGES {
                sum += map[p * PAGE] as u64;
            }
            assert!(sum > 0, "{what}");
            assert_eq!(map.mapping().dirty_pages(), 0, "{what}: read only");
            let before = rt.stats();
            assert_eq!(before.wp_faults, 0, "{what}");
            let mut model = data.clone();
            for p in 0..PAGES {
                let v = (p as u64 + 1).to_le_bytes();
                map[p * PAGE + 8..p * PAGE + 16].copy_from_slice(&v);
                model[p * PAGE + 8..p * PAGE + 16].copy_from_slice(&v);
            }
            let after = rt.stats();
            match tracking {
                DirtyTracking::Sync => {
                    assert_eq!(after.wp_faults, PAGES as u64, "{what}: {after}")
                }
                _ => assert_eq!(after.wp_faults, 0, "{what}: {after}"),
            }
            assert_eq!(map.mapping().dirty_pages(), PAGES, "{what}");
            assert_eq!(rt.stats().first_writes(), PAGES as u64, "{what}");
            map.flush().unwrap();
            assert_eq!(map.mapping().dirty_pages(), 0, "{what}: flushed");
            assert_same(&std::fs::read(tmp.path()).unwrap(), &model, &what);
            // Written again after the flush: dirty again, flushed again.
            map[5 * PAGE] ^= 0xff;
            model[5 * PAGE] ^= 0xff;
            assert_eq!(map.mapping().dirty_pages(), 1, "{what}: rewritten");
            map.flush().unwrap();
            assert_same(&std::fs::read(tmp.path()).unwrap(), &model, &what);
            map.unmap().unwrap();
        }
    }
}

/// Read-modify-write of one word per page at random over 16x the cache:
/// the pages written while umio held them clean are found and written
/// back when evicted (async: by the evictors' scans), and the file equals
/// the model after the flush and after the unmap.
#[test]
fn written_clean_pages_survive_eviction() {
    const PAGES: usize = 1024;
    for service in SERVICES {
        for tracking in modes() {
            let what = format!("{service:?}/{tracking:?}");
            let data = random_bytes(PAGES * PAGE, 7);
            let (tmp, file) = rw_file_with(&data);
            let rt = runtime((PAGES * PAGE / 16) as u64, tracking, service);
            // SAFETY: only this mapping changes the file while it lives.
            let mut map = unsafe { rt.map_file_mut(&file, MapOptions::new()) }.unwrap();
            let mut model = data.clone();
            let mut rng = Rng::new(11);
            for _ in 0..4 * PAGES {
                let at = rng.below(PAGES) * PAGE + 8 * rng.below(PAGE / 8);
                let old = u64::from_le_bytes(map[at..at + 8].try_into().unwrap());
                let want = u64::from_le_bytes(model[at..at + 8].try_into().unwrap());
                assert_eq!(old, want, "{what}: word at {at}");
                let new = (old.wrapping_mul(31) + 7).to_le_bytes();
                map[at..at + 8].copy_from_slice(&new);
                model[at..at + 8].copy_from_slice(&new);
            }
            let st = rt.stats();
            assert!(
                st.evicted_dirty_pages + st.limit_written_pages > 0,
                "{what}: {st}"
            );
            if tracking == DirtyTracking::Async {
                assert_eq!(st.wp_faults, 0, "{what}: {st}");
                assert!(st.scan_dirtied_pages > 0, "{what}: {st}");
                // Victims are taken out with UFFDIO_MOVE (Linux 6.8+).
                let has_move = kernel_features().unwrap().names().contains(&"MOVE");
                assert!(
                    !has_move || st.moved_victims > 0,
                    "{what}: no victim moved: {st:?}"
                );
            }
            assert_same(&map[..], &model, &format!("{what}: mapping"));
            map.flush().unwrap();
            assert_same(&std::fs::read(tmp.path()).unwrap(), &model, &what);
            // A partial unmap writes its written clean pages back too.
            let at = 3 * PAGE;
            let _ = map[at];
            map[at + 1] ^= 0x5a;
            model[at + 1] ^= 0x5a;
            let mut map = map.into_mapping();
            map.unmap_range(0..16 * PAGE).unwrap();
            assert_eq!(
                &std::fs::read(tmp.path()).unwrap()[at..at + PAGE],
                &model[at..at + PAGE],
                "{what}: after the partial unmap"
            );
            map.unmap().unwrap();
            assert_same(&std::fs::read(tmp.path()).unwrap(), &model, &what);
        }
    }
}

/// A page written through the mapping, then updated in place for a
/// `pwrite` of other bytes of it (what the preload shim does): both
/// writes reach the store. Under asynchronous tracking umio learns of the
/// first write only by looking; before, the update put the page back
/// clean and the first write was never written back.
#[test]
fn a_write_before_an_update_in_place_is_kept() {
    for tracking in modes() {
        for service in SERVICES {
            let data = vec![0u8; 4 * PAGE];
            let (_tmp, file) = rw_file_with(&data);
            let rt = runtime(1 << 20, tracking, service);
            // SAFETY: the file changes only through this mapping (and the
            // update below, which stands for a `pwrite` of the same bytes).
            let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
            let base = map.as_ptr();
            // SAFETY: page 0 of the live, writable mapping: read (resident,
            // clean), then written.
            unsafe {
                assert_eq!(base.read_volatile(), 0);
                base.add(10).write_volatile(0xAA);
            }
            std::os::unix::fs::FileExt::write_at(&file, &[0xBB], 100).unwrap();
            // SAFETY: no slice of the mapping is alive.
            unsafe { map.update_resident_shared(100, &[0xBB]) }.unwrap();
            map.flush().unwrap();
            let mut got = vec![0u8; 4 * PAGE];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut got, 0).unwrap();
            assert_eq!(
                (got[10], got[100]),
                (0xAA, 0xBB),
                "{tracking:?} {service:?}: the write through the mapping and the update"
            );
        }
    }
}

/// How long a child of [`dropped_pages_are_not_written_back`] may take
/// before it counts as hung: minutes (a hang detector, not a speed check).
const CHILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(240);

/// A page umio holds clean that the program dropped itself
/// (`madvise(MADV_DONTNEED)`, remove events on) is not a written page,
/// though the kernel's scan of written pages calls a page without data
/// (none was filled, it was dropped, or moved away) written. Before, a
/// flush made before umio had settled the removal took such pages for
/// written ones and wrote them back from the mapping: the write-protection
/// of the write-back left a marker on each, and reading it raised a
/// missing fault on a page the flushing thread itself held busy, which
/// hung for good. Each fault service in a child process, under a hang
/// detector.
#[test]
fn dropped_pages_are_not_written_back() {
    if !has_async() {
        eprintln!("no asynchronous dirty tracking on this kernel: skipped");
        return;
    }
    use std::process::Command;
    let mut failures = Vec::new();
    for svc in ["fillers", "in-thread"] {
        let out = tempfile::tempfile().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "dropped_pages_child", "--nocapture"])
            .env("UMIO_DIRTY_CHILD", svc)
            .stdout(out.try_clone().unwrap())
            .stderr(out.try_clone().unwrap())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + CHILD_DEADLINE;
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if std::time::Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut text = String::new();
        use std::io::{Read, Seek};
        let mut out = out;
        out.rewind().unwrap();
        out.read_to_string(&mut text).unwrap();
        eprintln!("--- {svc}:\n{text}");
        match status {
            None => failures.push(format!("{svc}: hung (killed after {CHILD_DEADLINE:?})")),
            Some(st) if !st.success() => failures.push(format!("{svc}: {st:?}")),
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// The child of [`dropped_pages_are_not_written_back`].
#[test]
fn dropped_pages_child() {
    let Ok(svc) = std::env::var("UMIO_DIRTY_CHILD") else {
        return;
    };
    let service = match svc.as_str() {
        "fillers" => FaultService::Fillers,
        _ => FaultService::InThread,
    };
    const PAGES: usize = 64;
    let data = random_bytes(PAGES * PAGE, 21);
    let (tmp, file) = rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes((4 * PAGES * PAGE) as u64)
        .page_size(PAGE)
        .fault_service(service)
        .dirty_tracking(DirtyTracking::Async)
        .remove_events(true)
        .build()
        .unwrap();
    // SAFETY: only this mapping changes the file while it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    let base = map.as_ptr() as usize;
    for round in 0..20 {
        // Every page resident and clean.
        assert_same(map.as_slice(), &data, &format!("round {round}: read"));
        // SAFETY: the whole mapping, which this test holds; the program's
        // own MADV_DONTNEED on umio memory is what remove events are for.
        let rc =
            unsafe { libc::madvise(base as *mut libc::c_void, PAGES * PAGE, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        // At once, before umio settles the removal: nothing was written.
        map.flush().unwrap();
        assert_eq!(map.dirty_pages(), 0, "round {round}");
    }
    assert_same(map.as_slice(), &data, "after the rounds");
    assert_eq!(rt.stats().bytes_written, 0, "nothing written back");
    map.unmap().unwrap();
    assert_same(&std::fs::read(tmp.path()).unwrap(), &data, "the file");
}
