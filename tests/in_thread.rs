//! The in-thread fault service (`FaultService::InThread`): faults served
//! by the faulting thread in umio's SIGBUS handler.
//!
//! Scenarios that install signal handlers or expect a process to die run
//! in a child process (this binary, re-run on one test with
//! `UMIO_IN_THREAD_CHILD` set), with a deadline.

mod common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::{Gate, Hooked, Rng, StoreHooks, assert_same, file_with, random_bytes, rw_file_with};
use umio::backends::{FaultTrigger, FaultyStore, MemoryStore};
use umio::{FaultService, MapOptions, PrefetchKind, Runtime, Store};

fn in_thread(cache_bytes: u64) -> Runtime {
    let rt = Runtime::builder()
        .cache_bytes(cache_bytes)
        .page_size(4096)
        .fault_service(FaultService::InThread)
        .build()
        .unwrap();
    assert_eq!(rt.fault_service(), FaultService::InThread);
    rt
}

/// What marks the child process of a test.
const CHILD: &str = "UMIO_IN_THREAD_CHILD";
/// How long a child may run: a hang detector.
const CHILD_DEADLINE: Duration = Duration::from_secs(300);

/// Runs test `name` of this binary in a child process with
/// `UMIO_IN_THREAD_CHILD=1`, killed after 60 s; returns its status.
fn run_child(name: &str) -> std::process::ExitStatus {
    common::run_test_in_child(name, CHILD, CHILD_DEADLINE)
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Whether test `name` runs here: in its child process, yes; in the
/// parent, it runs the child (`run_child`), asserts that it succeeded, and
/// no.
fn in_child(name: &str) -> bool {
    common::in_child(name, CHILD, CHILD_DEADLINE)
}

#[test]
fn reads_writes_and_eviction_are_served_in_the_faulting_thread() {
    let data = random_bytes(8 << 20, 1);
    let (tmp, f) = rw_file_with(&data);
    let rt = in_thread(2 << 20);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &f,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    assert_same(&map, &data, "first read");
    // Writes to clean pages (write-protect faults) and misses on write,
    // under eviction: the cache holds a quarter of the file.
    let mut want = data.clone();
    let mut rng = Rng::new(7);
    {
        let m = map.as_mut_slice();
        for _ in 0..4000 {
            let at = rng.below(want.len());
            let v = rng.next() as u8;
            m[at] = v;
            want[at] = v;
        }
    }
    assert_same(&map, &want, "after writes");
    map.flush().unwrap();
    let s = rt.stats();
    assert!(s.faults > 2048, "{s}");
    assert_eq!(s.in_thread_faults, s.faults, "every fault in-thread: {s}");
    assert!(s.first_writes() > 0 && s.evicted_pages > 0, "{s}");
    assert_eq!(s.read_errors, 0);
    drop(map);
    let mut on_disk = Vec::new();
    std::fs::File::open(tmp.path())
        .unwrap()
        .read_to_end(&mut on_disk)
        .unwrap();
    assert_same(&on_disk, &want, "the file after flush");
}

#[test]
fn concurrent_faults_on_one_page_read_the_store_once() {
    // Eight threads touch the same pages in the same order: each page is
    // read once, whichever thread takes its fault first; the others wait
    // for it.
    let data = random_bytes(4 << 20, 2);
    let (_tmp, f) = file_with(&data);
    let rt = in_thread(64 << 20);
    let map = Arc::new(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }.unwrap(),
    );
    let sums: Vec<u64> = (0..8)
        .map(|_| {
            let map = map.clone();
            std::thread::spawn(move || {
                let mut sum = 0u64;
                for p in 0..map.len() / 4096 {
                    sum += map[p * 4096 + 5] as u64;
                }
                sum
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let want: u64 = (0..data.len() / 4096)
        .map(|p| data[p * 4096 + 5] as u64)
        .sum();
    assert!(sums.iter().all(|&s| s == want), "{sums:?} != {want}");
    let s = rt.stats();
    assert_eq!(s.bytes_read, data.len() as u64, "one read per page: {s}");
    assert_eq!(s.in_thread_faults, s.faults);
}

#[test]
fn system_calls_on_non_resident_pages_fail_until_populated() {
    let data = random_bytes(1 << 20, 3);
    let (_tmp, f) = file_with(&data);
    let rt = in_thread(16 << 20);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }.unwrap();
    let (_t2, out) = rw_file_with(&[]);
    // write(2) from a non-resident mapped buffer: the kernel's own access
    // is not delivered as a signal.
    // SAFETY: a readable mapping of 64 KiB at least.
    let r = unsafe { libc::write(out.as_raw_fd(), map.as_ptr().cast(), 65536) };
    let e = std::io::Error::last_os_error().raw_os_error();
    assert!(
        r == -1 && e == Some(libc::EFAULT),
        "write returned {r}, {e:?}"
    );
    map.populate(0..65536, false).unwrap();
    // SAFETY: as above.
    let r = unsafe { libc::write(out.as_raw_fd(), map.as_ptr().cast(), 65536) };
    assert_eq!(r, 65536, "{}", std::io::Error::last_os_error());

    // read(2) into a writable mapping: clean pages are write-protected, so
    // populate for write first.
    let (_t3, wf) = rw_file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut wmap = unsafe {
        rt.map_file(
            &wf,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    let src = random_bytes(65536, 4);
    let (_t4, srcf) = file_with(&src);
    wmap.mapping().populate(0..65536, false).unwrap();
    // SAFETY: a writable mapping of 64 KiB at least.
    let r = unsafe {
        libc::pread(
            srcf.as_raw_fd(),
            wmap.as_mut_slice().as_mut_ptr().cast(),
            65536,
            0,
        )
    };
    let e = std::io::Error::last_os_error().raw_os_error();
    if rt.dirty_tracking() == umio::DirtyTracking::Async {
        // The kernel resolves a write to a clean (write-protected) page
        // itself: no fault reaches the handler, and the read works.
        assert_eq!(r, 65536, "read into clean pages, async tracking: {e:?}");
        assert_same(&wmap[..65536], &src, "read(2) into clean pages");
        assert_eq!(wmap.mapping().dirty_pages(), 16, "found written");
    } else {
        assert!(
            r == -1 && e == Some(libc::EFAULT),
            "read into clean pages: {r}, {e:?}"
        );
    }
    assert!(
        wmap.mapping().populate(0..65536, true).is_ok(),
        "populate for write"
    );
    // SAFETY: as above.
    let r = unsafe {
        libc::pread(
            srcf.as_raw_fd(),
            wmap.as_mut_slice().as_mut_ptr().cast(),
            65536,
            0,
        )
    };
    assert_eq!(r, 65536, "{}", std::io::Error::last_os_error());
    assert_same(&wmap[..65536], &src, "read(2) into the mapping");
    assert_same(&wmap[65536..], &data[65536..], "the rest, untouched");
    assert!(map.populate(0..4096, true).is_err(), "write on read-only");
}

#[test]
fn a_thread_that_blocks_sigbus_cannot_map() {
    // In a child: while the thread blocks SIGBUS, any in-thread map in the
    // process is refused (other tests' too).
    if !in_child("a_thread_that_blocks_sigbus_cannot_map") {
        return;
    }
    let data = random_bytes(1 << 16, 5);
    let (_tmp, f) = file_with(&data);
    let rt = in_thread(16 << 20);
    let h = std::thread::spawn(move || {
        // SAFETY: an empty set with SIGBUS added, then blocked in this
        // thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&f, MapOptions::new()) }.map(|_| ())
    });
    let r = h.join().unwrap();
    assert!(
        matches!(r, Err(umio::Error::InvalidArgument(m)) if m.contains("SIGBUS")),
        "{r:?}"
    );
}

static FROM_HANDLER: AtomicUsize = AtomicUsize::new(usize::MAX);
static HANDLER_ADDR: AtomicUsize = AtomicUsize::new(0);

extern "C" fn read_in_handler(_: libc::c_int) {
    let at = HANDLER_ADDR.load(Ordering::SeqCst);
    // SAFETY: the test stores the address of a byte of a live mapping.
    let v = unsafe { std::ptr::read_volatile(at as *const u8) };
    FROM_HANDLER.store(v as usize, Ordering::SeqCst);
}

#[test]
fn faults_from_an_application_signal_handler_and_with_signals_pending() {
    if !in_child("faults_from_an_application_signal_handler_and_with_signals_pending") {
        return;
    }
    let data = random_bytes(1 << 20, 6);
    let (_tmp, f) = file_with(&data);
    let rt = in_thread(16 << 20);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }.unwrap();
    // A SIGUSR1 handler of the application's own reads a non-resident page.
    // SAFETY: installs a plain handler for SIGUSR1.
    unsafe {
        libc::signal(
            libc::SIGUSR1,
            read_in_handler as *const () as libc::sighandler_t,
        );
    }
    HANDLER_ADDR.store(map.as_ptr() as usize + 300_000, Ordering::SeqCst);
    // SAFETY: raises SIGUSR1 in this thread.
    unsafe { libc::raise(libc::SIGUSR1) };
    assert_eq!(FROM_HANDLER.load(Ordering::SeqCst), data[300_000] as usize);
    // A thread with SIGUSR2 blocked and pending faults all the same.
    let map = Arc::new(map);
    let m2 = map.clone();
    let want = data.clone();
    let h = std::thread::spawn(move || {
        // SAFETY: blocks SIGUSR2 in this thread, then makes it pending.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::raise(libc::SIGUSR2);
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            assert_eq!(libc::sigismember(&pending, libc::SIGUSR2), 1);
        }
        assert_same(&m2[..], &want, "with a signal pending");
    });
    h.join().unwrap();
    assert_eq!(rt.stats().in_thread_faults, rt.stats().faults);
}

static EXPECT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn app_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = EXPECT.load(Ordering::SeqCst);
    let code = if addr >= page && addr < page + 4096 {
        42
    } else {
        43
    };
    // SAFETY: async-signal-safe exit.
    unsafe { libc::_exit(code) };
}

#[test]
fn a_failed_read_raises_sigbus_in_the_application_s_handler() {
    if !is_child() {
        let st = run_child("a_failed_read_raises_sigbus_in_the_application_s_handler");
        assert_eq!(st.code(), Some(42), "child: {st:?}");
        return;
    }
    // The application's handler, installed before umio's: chained to.
    // SAFETY: a valid SA_SIGINFO action.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = app_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
    let rt = in_thread(16 << 20);
    let store = Arc::new(FaultyStore::new(MemoryStore::new(vec![7u8; 1 << 20])));
    store.fail_reads(FaultTrigger::Offsets(40960..45056), libc::EIO);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap();
    assert_eq!(map[0], 7, "a good page reads");
    EXPECT.store(map.as_ptr() as usize + 40960, Ordering::SeqCst);
    let v = map[40960 + 17];
    eprintln!("the failed page read {v}: no SIGBUS");
    std::process::exit(1);
}

#[test]
fn a_failed_read_without_a_handler_kills_with_sigbus() {
    use std::os::unix::process::ExitStatusExt;
    if !is_child() {
        let st = run_child("a_failed_read_without_a_handler_kills_with_sigbus");
        assert_eq!(st.signal(), Some(libc::SIGBUS), "child: {st:?}");
        return;
    }
    let rt = in_thread(16 << 20);
    let store = Arc::new(FaultyStore::new(MemoryStore::new(vec![7u8; 1 << 20])));
    store.fail_reads(FaultTrigger::Offsets(8192..12288), libc::EIO);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map =
        unsafe { rt.map(MapOptions::new().store(store).prefetch(PrefetchKind::None)) }.unwrap();
    assert_eq!(map[0], 7);
    let v = map[8192];
    eprintln!("the failed page read {v}: no SIGBUS");
    std::process::exit(1);
}

static FOREIGN_FIXED: AtomicU8 = AtomicU8::new(0);

extern "C" fn fix_foreign(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo; maps a zero page over the faulting
    // page of the test's own truncated file mapping.
    unsafe {
        let page = ((*info).si_addr() as usize) & !4095;
        libc::mmap(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
    }
    FOREIGN_FIXED.store(1, Ordering::SeqCst);
}

#[test]
fn a_sigbus_that_is_not_umio_s_reaches_the_application() {
    if !in_child("a_sigbus_that_is_not_umio_s_reaches_the_application") {
        return;
    }
    // SAFETY: a valid SA_SIGINFO action.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = fix_foreign as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
    let rt = in_thread(16 << 20);
    let data = random_bytes(1 << 16, 8);
    let (_tmp, f) = file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new()) }.unwrap();
    // A kernel mapping past the end of its file: SIGBUS, BUS_ADRERR, at an
    // address that is not umio's.
    let (_t2, small) = rw_file_with(&[1u8; 4096]);
    // SAFETY: a fresh shared mapping of two pages of a one-page file.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ,
            libc::MAP_SHARED,
            small.as_raw_fd(),
            0,
        )
    } as *const u8;
    assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
    // SAFETY: the second page raises SIGBUS, which the handler fixes by
    // mapping a zero page there.
    let v = unsafe { std::ptr::read_volatile(p.add(4096)) };
    assert_eq!(v, 0);
    assert_eq!(FOREIGN_FIXED.load(Ordering::SeqCst), 1);
    assert_same(&map, &data, "umio's own faults still served");
}

/// A fork child of a process whose faults umio serves in-thread starts a
/// runtime of its own, and a mapping of its own over addresses where its
/// parent had one is served by the child's runtime: the parent's regions,
/// runtime and userfaultfd, which the child inherits as memory and
/// descriptors, are not its own. (The parent's mapping starts 64 KiB into
/// the child's, so that a lookup that kept the parent's ranges would find
/// the parent's for the child's second half.)
///
/// The addresses are the test's own throughout: a reservation (plain
/// `PROT_NONE` memory, inherited by the child) holds the 64 KiB below the
/// parent's mapping, and the child reserves the range where the parent's
/// region was (not inherited) before it does anything else, so that
/// nothing the child maps while its runtime starts lands there and is
/// then replaced by the fixed mapping.
#[test]
fn a_fork_child_serves_its_own_mapping_where_its_parent_had_one() {
    if !in_child("a_fork_child_serves_its_own_mapping_where_its_parent_had_one") {
        return;
    }
    const HOLE: usize = 64 << 10;
    const CHILD_LEN: usize = 128 << 10;
    const PARENT_LEN: usize = 256 << 10;
    // SAFETY: a fresh reservation where the kernel chooses.
    let reserved = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            HOLE + PARENT_LEN,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(reserved, libc::MAP_FAILED);
    let addr = reserved as usize;
    let parent = in_thread(1 << 20);
    // SAFETY: the range is the test's own reservation, which nothing uses.
    let opts = unsafe { MapOptions::new().fixed_address(addr + HOLE) }
        .store(Arc::new(MemoryStore::new(vec![7u8; PARENT_LEN])));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { parent.map(opts) }.unwrap();
    assert_eq!(map.as_ptr() as usize, addr + HOLE);
    assert!(map.iter().all(|&b| b == 7));
    // SAFETY: the child uses umio (no umio lock is held: this is the only
    // thread touching umio) and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: first of all, the range of the parent's region (not
        // inherited: free here) becomes the test's again; nothing is
        // replaced (MAP_FIXED_NOREPLACE).
        let held = unsafe {
            libc::mmap(
                (addr + HOLE) as *mut libc::c_void,
                PARENT_LEN,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if held as usize != addr + HOLE {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(5) };
        }
        // SAFETY: a deadline for the child: a hang becomes SIGALRM.
        unsafe { libc::alarm(300) };
        let code = (|| -> Result<(), i32> {
            let rt = Runtime::builder()
                .cache_bytes(1 << 20)
                .page_size(4096)
                .fault_service(FaultService::InThread)
                .build()
                .map_err(|_| 1)?;
            // SAFETY: [addr, addr+CHILD_LEN) is the test's reservation,
            // which nothing uses: MAP_FIXED replaces nothing else.
            let opts = unsafe { MapOptions::new().fixed_address(addr) }
                .store(Arc::new(MemoryStore::new(vec![9u8; CHILD_LEN])));
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            let m = unsafe { rt.map(opts) }.map_err(|_| 2)?;
            if m.as_ptr() as usize != addr {
                return Err(3);
            }
            if !m.iter().all(|&b| b == 9) {
                return Err(4);
            }
            Ok(())
        })();
        // SAFETY: ends the child at once, running no exit handler.
        unsafe { libc::_exit(code.err().unwrap_or(0)) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's mapping was not served as its own: status {status:#x}"
    );
    // The parent's mapping still reads its own bytes.
    assert!(map.iter().all(|&b| b == 7));
}

/// The hooks of a memory store whose writes wait at a gate while the
/// test keeps it closed.
#[derive(Default)]
struct GatedWrites {
    writes: Gate,
}

impl StoreHooks for GatedWrites {
    fn before_write(&self, _offset: u64) {
        self.writes.pass();
    }
}

/// A miss that finds the cache full of the pages of a region being
/// unmapped waits, in its handler, for the unmap to release them. The
/// unmap's last step but one takes the region out of the handler's table
/// and waits for the handlers that may still see it (an RCU grace period),
/// and it releases the pages' cache space only after that: a handler that
/// waited for the space inside its read section made the unmap wait for it
/// in turn, until the miss gave up (30 s) and the thread got SIGBUS for a
/// valid address. Seen under load in `unmap_while_faulting` (cache full of
/// the unmapped region's pages, a reader of the other region faulting);
/// forced here with a store whose write-back waits until a reader is in.
#[test]
fn a_miss_waiting_for_the_space_an_unmap_frees_is_served() {
    if !in_child("a_miss_waiting_for_the_space_an_unmap_frees_is_served") {
        return;
    }
    const PAGES: usize = 16;
    // The background evictor never runs on its own (the high watermark is
    // the bound); the waiting reader's want sets it to work, but A's pages
    // cannot be evicted while A closes: only the unmap frees them.
    let rt = Runtime::builder()
        .cache_bytes((PAGES * 4096) as u64)
        .page_size(4096)
        .watermarks(100, 100)
        .fault_service(FaultService::InThread)
        .build()
        .unwrap();
    let store_a = Hooked::new(
        vec![1u8; PAGES * 4096],
        "gated writes",
        GatedWrites::default(),
    );
    store_a.writes.close();
    let store_a_dyn: Arc<dyn Store> = store_a.clone();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut a = unsafe {
        rt.map(
            MapOptions::new()
                .store(store_a_dyn)
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    let b = Arc::new(
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe {
            rt.map(
                MapOptions::new()
                    .store(Arc::new(MemoryStore::new(vec![2u8; 4096])))
                    .prefetch(PrefetchKind::None),
            )
        }
        .unwrap(),
    );
    // A's pages fill the cache: dirty as far as the dirty limit lets them
    // (half the cache), clean for the rest. A handler's own reclaim takes
    // clean pages only, and none of A's once A closes.
    for p in 0..PAGES {
        if p < PAGES / 2 {
            a.as_mut_slice()[p * 4096] = 3;
        } else {
            assert_eq!(a.as_slice()[p * 4096], 1);
        }
    }
    assert_eq!(rt.stats().resident_bytes, (PAGES * 4096) as u64);
    // The unmap of A starts: A is closed to new work (its pages can no
    // longer be evicted), and its write-back waits at the gate.
    let unmap = std::thread::spawn(move || a.unmap());
    assert!(
        store_a.writes.wait_for_caller(CHILD_DEADLINE),
        "the unmap's write-back never reached the store"
    );
    // A reader of B misses and waits for cache space in its handler.
    let reclaims = rt.stats().direct_reclaims;
    let (tx, rx) = mpsc::channel();
    let reader = {
        let b = b.clone();
        std::thread::spawn(move || tx.send(b[100]).unwrap())
    };
    let deadline = Instant::now() + CHILD_DEADLINE;
    while rt.stats().direct_reclaims == reclaims {
        assert!(
            Instant::now() < deadline,
            "the reader never waited for space"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The unmap goes on, and frees A's pages: the reader gets its byte.
    store_a.writes.open();
    match rx.recv_timeout(CHILD_DEADLINE) {
        Ok(v) => assert_eq!(v, 2),
        Err(_) => {
            eprintln!("the reader of B hung behind the unmap of A");
            std::process::exit(1);
        }
    }
    reader.join().unwrap();
    unmap.join().unwrap().unwrap();
    assert_eq!(rt.stats().read_errors, 0);
}

/// A miss that finds the cache full of dirty pages is served even where
/// the evictors would not start on their own (high watermark at the
/// limit): a miss waiting for space tells them what it wants, and they
/// write pages back and free it. A handler cannot write back itself; it
/// used to wait for 30 s and then die of SIGBUS.
#[test]
fn a_miss_in_a_cache_full_of_dirty_pages_is_served_below_the_high_watermark() {
    if !in_child("a_miss_in_a_cache_full_of_dirty_pages_is_served_below_the_high_watermark") {
        return;
    }
    const PAGES: usize = 32;
    let rt = Runtime::builder()
        .cache_bytes((PAGES * 4096) as u64)
        .page_size(4096)
        .watermarks(100, 90)
        .fault_service(FaultService::InThread)
        .build()
        .unwrap();
    let data = random_bytes(4 * PAGES * 4096, 9);
    let (tmp, f) = rw_file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &f,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    // Four times the cache, every page written: from the 33rd on, each
    // miss finds only dirty pages.
    let bytes = map.as_mut_slice();
    for p in 0..4 * PAGES {
        bytes[p * 4096 + 1] ^= 0xFF;
    }
    // At least three caches' worth of dirty pages left before the flush:
    // each was written back first (evicted dirty, or cleaned by the
    // dirty limit's write-back and then evicted).
    let before_flush = rt.stats();
    assert!(
        before_flush.evicted_pages >= (3 * PAGES) as u64,
        "{before_flush}"
    );
    assert!(
        before_flush.bytes_written >= (3 * PAGES * 4096) as u64,
        "{before_flush}"
    );
    map.flush().unwrap();
    let mut want = data.clone();
    for p in 0..4 * PAGES {
        want[p * 4096 + 1] ^= 0xFF;
    }
    assert_same(&map[..], &want, "after the writes");
    let mut on_disk = Vec::new();
    std::fs::File::open(tmp.path())
        .unwrap()
        .read_to_end(&mut on_disk)
        .unwrap();
    assert_same(&on_disk, &want, "the file");
}
