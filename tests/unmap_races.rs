//! Unmapping while other work on the region is under way, with the race
//! window held open on purpose: the store's reads or syncs wait at a gate
//! until the test opens it. Both fault services.
//!
//! - A partial unmap keeps the region tables right: a miss on the part of
//!   the region that stays mapped is served while the unmap is still in
//!   its store's `sync` and a newer region lies in the hole.
//! - An unmap waits for an operation that installs pages (`populate`,
//!   `pin`): none of its `UFFDIO_COPY`s lands in a region mapped later at
//!   the same address.
//! - A partial unmap whose `munmap` fails (`ENOMEM` at
//!   `vm.max_map_count`) returns the error and leaves the region whole and
//!   served.
//!
//! Each test runs in a child process (this binary, re-run on one test with
//! `UMIO_UNMAP_RACES_CHILD` set) with a deadline: on failure these hang or
//! kill the process.

mod common;

use common::{Gate, Hooked, StoreHooks};

use std::sync::Arc;
use std::time::Duration;

use umio::backends::MemoryStore;
use umio::{Error, FaultService, MapOptions, Mapping, PrefetchKind, Runtime, Store};

const PAGE: usize = 4096;
/// A hang detector only, generous for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(180);
/// How long a test waits for an unmap to get where the code before these
/// fixes let it go while the gated operation was still in the store. Only
/// bounds the wait of the fixed code, which never gets there.
const LET_IT_RUN: Duration = Duration::from_secs(5);

/// Whether test `name` runs here: in its child process (with
/// `UMIO_UNMAP_RACES_CHILD=1`, killed after [`DEADLINE`]), yes, logging
/// umio's warnings; in the parent, it runs the child, asserts that it
/// succeeded, and no.
fn in_child(name: &str) -> bool {
    let here = common::in_child(name, "UMIO_UNMAP_RACES_CHILD", DEADLINE);
    if here {
        common::log_to_stderr();
    }
    here
}

/// A memory store whose reads and syncs wait at gates.
#[derive(Default)]
struct Gates {
    reads: Gate,
    syncs: Gate,
}

impl StoreHooks for Gates {
    fn before_read(&self, _offset: u64) {
        self.reads.pass();
    }
    fn before_sync(&self) {
        self.syncs.pass();
    }
}

type GatedStore = Hooked<Gates>;

fn gated_store(bytes: Vec<u8>) -> Arc<GatedStore> {
    Hooked::new(bytes, "gated", Gates::default())
}

fn runtime(service: FaultService) -> Runtime {
    let rt = Runtime::builder()
        .cache_bytes((256 * PAGE) as u64)
        .page_size(PAGE)
        .fillers(2)
        .fault_service(service)
        .build()
        .unwrap();
    assert_eq!(rt.fault_service(), service);
    rt
}

fn map(rt: &Runtime, store: Arc<dyn Store>, opts: MapOptions) -> umio::Result<Mapping> {
    // SAFETY: nothing but the mapping itself writes its store, so no
    // slice of it changes under its reader.
    unsafe { rt.map(opts.store(store).prefetch(PrefetchKind::None)) }
}

/// Page `p` of region A holds byte `p + 1` (never 9, B's byte).
fn a_bytes(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|i| (i / PAGE % 200) as u8 + 10)
        .collect()
}

/// Reads the byte at `addr` as the program would, through a raw pointer.
///
/// # Safety
/// `addr` must be mapped for reading.
unsafe fn peek(addr: usize) -> u8 {
    // SAFETY: the caller's.
    unsafe { (addr as *const u8).read_volatile() }
}

/// Plain `mmap`s of `len` bytes (`PROT_NONE`), placed by the kernel, until
/// one lands in `hole`: the kernel places a mapping at the highest gap
/// that fits it, so these fill every higher gap and the next mapping of
/// `len` bytes lands in the hole. The one in the hole is unmapped; the
/// others stay until the `Probes` are dropped.
struct Probes(Vec<usize>, usize);

impl Probes {
    fn up_to(hole: std::ops::Range<usize>, len: usize) -> Probes {
        let mut probes = Probes(Vec::new(), len);
        loop {
            // SAFETY: a new anonymous mapping, placed by the kernel.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
            let p = p as usize;
            if hole.start <= p && p + len <= hole.end {
                // SAFETY: just mapped, used by nothing.
                unsafe { libc::munmap(p as *mut libc::c_void, len) };
                return probes;
            }
            probes.0.push(p);
            assert!(probes.0.len() < 100_000, "the hole is never the next gap");
        }
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        for &p in &self.0 {
            // SAFETY: mapped by `up_to`, used by nothing.
            unsafe { libc::munmap(p as *mut libc::c_void, self.1) };
        }
    }
}

/// How B comes to lie in A's hole.
#[derive(Clone, Copy)]
enum Newcomer {
    /// Mapped by A's runtime at an address the kernel picks: the hole.
    Placed,
    /// Mapped by another runtime at the hole's address
    /// (`fixed_address_noreplace`).
    OtherRuntime,
}

/// Row 1: A's pages 16..32 are unmapped, and the unmap waits in the
/// store's `sync`; B is mapped into the hole; a miss on page 40 of A must
/// be served as A's. Before, the tables still held A whole and B in A's
/// hole, and the lookup, checking only the entry nearest below the
/// address (B's), found nothing: a filler dropped the event and the reader
/// slept for good; in-thread, the SIGBUS was chained to the default action
/// and the process died.
fn miss_beside_a_range_being_unmapped(service: FaultService, newcomer: Newcomer) {
    const PAGES: usize = 64;
    let rt = runtime(service);
    // Started before the hole is made: a runtime starting maps memory of
    // its own, which could land in the hole.
    let other_rt = matches!(newcomer, Newcomer::OtherRuntime).then(|| runtime(service));
    let data = a_bytes(PAGES);
    let store_a = gated_store(data.clone());
    let a = Arc::new(map(&rt, store_a.clone(), MapOptions::new()).unwrap());
    let base = a.as_ptr() as usize;
    // A page read before, so the unmap has a resident page to release.
    // SAFETY: inside A, mapped.
    assert_eq!(unsafe { peek(base + 20 * PAGE) }, data[20 * PAGE]);
    store_a.syncs.close();
    let unmapper = {
        let a = a.clone();
        // SAFETY: no slice of A is alive; the test touches A only through
        // raw pointers, outside the range unmapped.
        std::thread::spawn(move || unsafe { a.unmap_range_shared(16 * PAGE..32 * PAGE) })
    };
    assert!(
        store_a.syncs.wait_for_caller(DEADLINE),
        "the partial unmap never synced its store"
    );
    // The range's memory is gone: B takes its place.
    let hole = base + 16 * PAGE..base + 32 * PAGE;
    let (b, _probes) = match newcomer {
        Newcomer::Placed => {
            // Pages of 12 KiB are mapped with 4 KiB alignment: the kernel
            // is asked for B's length and 4 KiB more.
            let (b_page, b_len) = (3 * PAGE, 12 * PAGE);
            let mut tries = 0;
            loop {
                let probes = Probes::up_to(hole.clone(), b_len + PAGE);
                let b = map(
                    &rt,
                    Arc::new(MemoryStore::new(vec![9; b_len])),
                    MapOptions::new().page_size(b_page),
                )
                .unwrap();
                let at = b.as_ptr() as usize;
                if hole.start <= at && at + b_len <= hole.end {
                    break (b, Some(probes));
                }
                // Something else took the gap first.
                tries += 1;
                assert!(tries < 10, "B never lands in A's hole");
            }
        }
        Newcomer::OtherRuntime => {
            let b = map(
                other_rt.as_ref().unwrap(),
                Arc::new(MemoryStore::new(vec![9; 16 * PAGE])),
                MapOptions::new().fixed_address_noreplace(hole.start),
            )
            .expect("B maps into A's hole");
            (b, None)
        }
    };
    // SAFETY: page 40 of A stays mapped.
    let got = unsafe { peek(base + 40 * PAGE) };
    assert_eq!(got, data[40 * PAGE], "A page 40");
    // SAFETY: page 8 of A stays mapped.
    assert_eq!(unsafe { peek(base + 8 * PAGE) }, data[8 * PAGE], "A page 8");
    assert!(b.as_slice().iter().all(|&x| x == 9), "B's bytes");
    store_a.syncs.open();
    unmapper.join().unwrap().unwrap();
    for p in (0..16).chain(32..PAGES) {
        // SAFETY: the pages of A outside the hole stay mapped.
        let got = unsafe { peek(base + p * PAGE) };
        assert_eq!(got, data[p * PAGE], "A page {p}");
    }
    assert!(b.as_slice().iter().all(|&x| x == 9), "B's bytes after");
    assert_eq!(a.mapped_bytes(), (PAGES - 16) * PAGE);
}

#[test]
fn a_miss_beside_a_range_being_unmapped_is_served_fillers() {
    if in_child("a_miss_beside_a_range_being_unmapped_is_served_fillers") {
        miss_beside_a_range_being_unmapped(FaultService::Fillers, Newcomer::Placed);
    }
}

#[test]
fn a_miss_beside_a_range_being_unmapped_is_served_in_thread() {
    if in_child("a_miss_beside_a_range_being_unmapped_is_served_in_thread") {
        miss_beside_a_range_being_unmapped(FaultService::InThread, Newcomer::Placed);
    }
}

/// The in-thread service's table holds every in-thread runtime's regions:
/// B of another runtime in A's hole.
#[test]
fn a_miss_beside_a_range_being_unmapped_is_served_in_thread_other_runtime() {
    if in_child("a_miss_beside_a_range_being_unmapped_is_served_in_thread_other_runtime") {
        miss_beside_a_range_being_unmapped(FaultService::InThread, Newcomer::OtherRuntime);
    }
}

/// What fills pages of A on the caller's thread while A is unmapped.
#[derive(Clone, Copy)]
enum Filler {
    Populate,
    Pin,
}

/// Row 3: `populate` (or `pin`) of A waits in the store's read; the whole
/// of A is unmapped (`unmap_range_shared(0..len)`); B, of the same
/// runtime, is mapped at A's address. The unmap must wait for the
/// operation: before, it did not, and the operation's late `UFFDIO_COPY`
/// (the kernel accepts it in any range registered with the runtime's
/// userfaultfd) put A's bytes in B's page.
fn fill_in_the_store_keeps_an_unmap_waiting(service: FaultService, filler: Filler) {
    const PAGES: usize = 16;
    let rt = runtime(service);
    let store_a = gated_store(vec![7; PAGES * PAGE]);
    let a = Arc::new(map(&rt, store_a.clone(), MapOptions::new()).unwrap());
    let base = a.as_ptr() as usize;
    store_a.reads.close();
    store_a.syncs.close();
    let worker = {
        let a = a.clone();
        std::thread::spawn(move || match filler {
            Filler::Populate => a.populate(0..PAGE, false),
            Filler::Pin => a.pin(0..PAGE),
        })
    };
    assert!(
        store_a.reads.wait_for_caller(DEADLINE),
        "the fill never read the store"
    );
    let unmapper = {
        let a = a.clone();
        // SAFETY: no slice of A is alive, and nothing touches A after this.
        std::thread::spawn(move || unsafe { a.unmap_range_shared(0..a.len()) })
    };
    // An unmap that does not wait for the fill syncs the store (and then
    // unmaps) while the fill is still in it. One that waits never gets
    // there before the read gate opens: let it run a while.
    let went_on = store_a.syncs.wait_for_caller(LET_IT_RUN);
    let map_b = || {
        map(
            &rt,
            Arc::new(MemoryStore::new(vec![9; PAGES * PAGE])),
            MapOptions::new().fixed_address_noreplace(base),
        )
        .expect("B maps at A's address")
    };
    let mut unmapper = Some(unmapper);
    let early_b = went_on.then(|| {
        store_a.syncs.open();
        unmapper.take().unwrap().join().unwrap().unwrap();
        // B takes A's place while the fill is still in A's store.
        map_b()
    });
    store_a.reads.open();
    store_a.syncs.open();
    let filled = worker.join().unwrap();
    if let Some(u) = unmapper {
        u.join().unwrap().unwrap();
    }
    let b = early_b.unwrap_or_else(map_b);
    assert_eq!(b.as_ptr() as usize, base);
    assert_eq!(
        b.as_slice()[0],
        9,
        "B's first page holds A's byte: a late UFFDIO_COPY of A's fill landed in B"
    );
    assert!(b.as_slice().iter().all(|&x| x == 9), "B's bytes");
    assert!(
        !went_on,
        "the unmap went on while a fill of the region was in its store"
    );
    // The fill finished before the unmap began, so it succeeded.
    filled.unwrap();
}

#[test]
fn a_populate_in_the_store_keeps_an_unmap_waiting_fillers() {
    if in_child("a_populate_in_the_store_keeps_an_unmap_waiting_fillers") {
        fill_in_the_store_keeps_an_unmap_waiting(FaultService::Fillers, Filler::Populate);
    }
}

#[test]
fn a_populate_in_the_store_keeps_an_unmap_waiting_in_thread() {
    if in_child("a_populate_in_the_store_keeps_an_unmap_waiting_in_thread") {
        fill_in_the_store_keeps_an_unmap_waiting(FaultService::InThread, Filler::Populate);
    }
}

#[test]
fn a_pin_in_the_store_keeps_an_unmap_waiting_fillers() {
    if in_child("a_pin_in_the_store_keeps_an_unmap_waiting_fillers") {
        fill_in_the_store_keeps_an_unmap_waiting(FaultService::Fillers, Filler::Pin);
    }
}

#[test]
fn a_pin_in_the_store_keeps_an_unmap_waiting_in_thread() {
    if in_child("a_pin_in_the_store_keeps_an_unmap_waiting_in_thread") {
        fill_in_the_store_keeps_an_unmap_waiting(FaultService::InThread, Filler::Pin);
    }
}

/// Single pages mapped until the process has as many mappings as
/// `vm.max_map_count` allows; unmapped on drop.
struct MapCountFiller {
    pages: Vec<usize>,
}

impl MapCountFiller {
    fn fill() -> MapCountFiller {
        // Room for every page first: growing the list at the limit would
        // need a mapping of its own.
        let mut pages = Vec::with_capacity(1 << 20);
        loop {
            // Alternate protections, so that no page merges with the one
            // mapped next to it the time before: each is a mapping.
            let prot = if pages.len() % 2 == 0 {
                libc::PROT_READ
            } else {
                libc::PROT_NONE
            };
            // SAFETY: a new anonymous mapping, placed by the kernel.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}");
                break;
            }
            pages.push(p as usize);
            assert!(pages.len() < 1 << 20, "no mapping limit met");
        }
        MapCountFiller { pages }
    }

    /// Unmaps `n` of the pages.
    fn release(&mut self, n: usize) {
        for _ in 0..n {
            if let Some(p) = self.pages.pop() {
                // SAFETY: mapped by `fill`, used by nothing.
                unsafe { libc::munmap(p as *mut libc::c_void, PAGE) };
            }
        }
    }
}

impl Drop for MapCountFiller {
    fn drop(&mut self) {
        self.release(self.pages.len());
    }
}

/// The smaller item: a partial unmap whose `munmap` fails, because the
/// split would pass `vm.max_map_count`, returns `ENOMEM` and leaves the
/// region as it was: mapped, served, its changes kept. Before, it
/// unregistered the range first and then asserted on the `munmap`
/// (a panic, the range's pages half taken out).
fn failed_partial_unmap(service: FaultService) {
    const PAGES: usize = 64;
    let rt = runtime(service);
    let data = a_bytes(PAGES);
    let store = Arc::new(MemoryStore::new(data.clone()));
    let a = map(&rt, store.clone(), MapOptions::new().writable(true)).unwrap();
    let base = a.as_ptr() as usize;
    let mut want = data.clone();
    // Dirty pages in the range and outside it, a clean one, the rest not
    // resident.
    for p in [2usize, 17, 20, 40] {
        want[p * PAGE + 5] = 0xEE;
        // SAFETY: inside A, writable; no slice of A is alive.
        unsafe { ((base + p * PAGE + 5) as *mut u8).write_volatile(0xEE) };
    }
    // SAFETY: inside A.
    assert_eq!(unsafe { peek(base + 24 * PAGE) }, data[24 * PAGE]);
    let mut filler = MapCountFiller::fill();
    // SAFETY: no slice of A is alive.
    let r = unsafe { a.unmap_range_shared(16 * PAGE..32 * PAGE) };
    match r {
        Err(e @ Error::Os { errno, .. }) => {
            assert_eq!(errno, libc::ENOMEM, "{e}");
            assert_eq!(e.errno(), libc::ENOMEM);
        }
        other => panic!("a munmap past vm.max_map_count: {other:?}"),
    }
    // Some room again: a filler serving its first miss maps its staging
    // buffer.
    filler.release(16);
    // Served and whole: resident pages, pages read now, a new write.
    assert_eq!(a.mapped_bytes(), PAGES * PAGE);
    assert!(a.is_mapped_at(20 * PAGE));
    for p in 0..PAGES {
        // SAFETY: A is whole.
        let got = unsafe { peek(base + p * PAGE + 5) };
        assert_eq!(got, want[p * PAGE + 5], "A page {p} after the failed unmap");
    }
    want[30 * PAGE] = 0xDD;
    // SAFETY: A is whole and writable.
    unsafe { ((base + 30 * PAGE) as *mut u8).write_volatile(0xDD) };
    // Room for the split: the same unmap now succeeds.
    // SAFETY: no slice of A is alive; the range is not touched after.
    unsafe { a.unmap_range_shared(16 * PAGE..32 * PAGE) }.unwrap();
    drop(filler);
    assert!(!a.is_mapped_at(20 * PAGE));
    assert_eq!(a.mapped_bytes(), (PAGES - 16) * PAGE);
    for p in (0..16).chain(32..PAGES) {
        // SAFETY: outside the hole.
        let got = unsafe { peek(base + p * PAGE + 5) };
        assert_eq!(got, want[p * PAGE + 5], "A page {p}");
    }
    a.flush().unwrap();
    // Every change reached the store, the range's written back by the
    // unmap that succeeded.
    common::assert_same(&store.snapshot(), &want, "the store");
}

#[test]
fn a_failed_partial_munmap_leaves_the_region_whole_fillers() {
    if in_child("a_failed_partial_munmap_leaves_the_region_whole_fillers") {
        failed_partial_unmap(FaultService::Fillers);
    }
}

#[test]
fn a_failed_partial_munmap_leaves_the_region_whole_in_thread() {
    if in_child("a_failed_partial_munmap_leaves_the_region_whole_in_thread") {
        failed_partial_unmap(FaultService::InThread);
    }
}

/// A memory store whose reads of one page wait at a gate.
struct OnePageGate {
    page: u64,
    gate: Gate,
}

impl StoreHooks for OnePageGate {
    fn before_read(&self, offset: u64) {
        if offset / PAGE as u64 == self.page {
            self.gate.pass();
        }
    }
}

/// A drop (`DontNeed`) locks its range page by page and waits for a page a
/// miss holds busy (page 70, held in the store), while another miss in the
/// range (page 100) holds its page busy and waits for cache space that
/// only the pages the drop has locked could give. Before `Region::taking`,
/// neither ever finished (a hang since the 30 s reclaim limit went; before
/// that, SIGBUS after 30 s). A partial unmap locks its range the same way
/// (`take_pages`), and takes the same way out.
fn drop_while_a_miss_waits_for_space(service: FaultService) {
    const GATED: usize = 70;
    let rt = Runtime::builder()
        .cache_bytes((64 * PAGE) as u64)
        .page_size(PAGE)
        .fillers(4)
        .watermarks(100, 100)
        .fault_service(service)
        .build()
        .unwrap();
    let store = Hooked::new(
        vec![7u8; 128 * PAGE],
        "one page gated",
        OnePageGate {
            page: GATED as u64,
            gate: Gate::default(),
        },
    );
    store.gate.close();
    let m = Arc::new(map(&rt, store.clone(), MapOptions::new()).unwrap());
    let base = m.as_ptr() as usize;
    // SAFETY: pages of the live mapping, which `m` keeps mapped.
    let peek = move |p: usize| unsafe { ((base + p * PAGE) as *const u8).read_volatile() };
    for p in 0..64 {
        assert_eq!(peek(p), 7);
    }
    // C: a miss on page 70, held in the store.
    let c = std::thread::spawn(move || peek(GATED));
    assert!(
        store.gate.wait_for_caller(DEADLINE),
        "C never reached the store"
    );
    // The cache full again, C's page holding the last frame.
    let mut p = 0;
    while m.resident_pages() < 63 && p < 128 {
        if p != GATED && p != 100 && !m.is_resident(p * PAGE) {
            peek(p);
        }
        p += 1;
    }
    // B: drops pages 0..128: locks 0..70, waits on 70.
    let m2 = m.clone();
    // SAFETY: no slice of the mapping lives; dropped pages are read again.
    let b = std::thread::spawn(move || unsafe {
        m2.advise_shared(0..128 * PAGE, umio::UncheckedAdvice::DontNeed)
    });
    std::thread::sleep(Duration::from_millis(300));
    // A: a miss on page 100, in B's range, with the cache full of pages B
    // holds.
    let a = std::thread::spawn(move || peek(100));
    std::thread::sleep(Duration::from_millis(500));
    store.gate.open();
    // Hangs here without the fix (the child's deadline catches it).
    assert_eq!(c.join().unwrap(), 7);
    b.join().unwrap().unwrap();
    assert_eq!(a.join().unwrap(), 7);
    assert_eq!(peek(100), 7);
}

#[test]
fn a_drop_and_a_miss_waiting_for_its_space_both_finish_fillers() {
    if in_child("a_drop_and_a_miss_waiting_for_its_space_both_finish_fillers") {
        drop_while_a_miss_waits_for_space(FaultService::Fillers);
    }
}

#[test]
fn a_drop_and_a_miss_waiting_for_its_space_both_finish_in_thread() {
    if in_child("a_drop_and_a_miss_waiting_for_its_space_both_finish_in_thread") {
        drop_while_a_miss_waits_for_space(FaultService::InThread);
    }
}
