//! The in-thread fault service allocates nothing in its SIGBUS handler: a
//! counting global allocator sees no allocation by the faulting thread
//! across a million faults served in it (misses, first writes, and
//! direct reclaim with write-back, the cache holding a quarter of the
//! data), once the eviction policy has seen every page once.
//!
//! An allocation there could deadlock: the interrupted code may hold the
//! allocator's lock.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Rng, random_bytes, rw_file_with};
use umio::{FaultService, MapOptions, PrefetchKind, Runtime};

struct Counting;

static COUNTED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (const: reading it
    /// allocates nothing).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Set while a counted allocation's backtrace is printed.
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// Counts an allocation of this thread, if counting; with
/// `UMIO_ALLOC_TRACE` set, prints where it came from (to find it).
fn count() {
    if COUNTING.with(Cell::get) && !TRACING.with(Cell::get) {
        COUNTED.fetch_add(1, Ordering::Relaxed);
        TRACING.with(|t| t.set(true));
        if std::env::var_os("UMIO_ALLOC_TRACE").is_some() {
            eprintln!("{}", std::backtrace::Backtrace::force_capture());
        }
        TRACING.with(|t| t.set(false));
    }
}

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count();
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn a_million_in_thread_faults_allocate_nothing() {
    const PAGES: usize = 8192;
    let data = random_bytes(PAGES * 4096, 11);
    let (_tmp, f) = rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes((PAGES * 4096 / 4) as u64)
        .page_size(4096)
        .fault_service(FaultService::InThread)
        .build()
        .unwrap();
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
    let base = map.as_mut_slice().as_mut_ptr();
    let mut rng = Rng::new(3);
    // One pass over every page, so that the eviction policy has grown to
    // what it needs.
    for p in 0..PAGES {
        // SAFETY: within the mapping.
        unsafe { std::ptr::read_volatile(base.add(p * 4096)) };
    }
    let before = rt.stats();
    COUNTING.with(|c| c.set(true));
    let mut sum = 0u64;
    for i in 0..1_400_000usize {
        let p = rng.below(PAGES);
        // SAFETY: within the mapping; volatile so that every access
        // happens.
        unsafe {
            let at = base.add(p * 4096 + (i % 4096));
            if i % 8 == 0 {
                std::ptr::write_volatile(at, std::ptr::read_volatile(at).wrapping_add(1));
            } else {
                sum = sum.wrapping_add(std::ptr::read_volatile(at) as u64);
            }
        }
    }
    COUNTING.with(|c| c.set(false));
    let after = rt.stats();
    let faults = after.in_thread_faults - before.in_thread_faults;
    let counted = COUNTED.load(Ordering::Relaxed);
    assert!(
        faults >= 1_000_000,
        "only {faults} faults (sum {sum}): {after}"
    );
    assert!(
        after.evicted_dirty_pages + after.limit_written_pages > 0,
        "{after}"
    );
    assert_eq!(
        counted, 0,
        "{counted} allocations by the faulting thread across {faults} in-thread faults"
    );
}

/// The same from a cold start (the store's first transfer is a miss in a
/// handler) with 2 MiB ranges promoted as they are touched: first writes
/// to promoted ranges, direct reclaim beside them, and the store's first
/// read allocate nothing in the faulting thread.
#[test]
fn cold_in_thread_faults_beside_promoted_ranges_allocate_nothing() {
    const MIB: usize = 1 << 20;
    const LEN: usize = 32 * MIB;
    let data = random_bytes(LEN, 12);
    let (_tmp, f) = rw_file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes((8 * MIB) as u64)
        .page_size(4096)
        .fault_service(FaultService::InThread)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe {
        rt.map_file(
            &f,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None)
                .promote(umio::PromoteKind::Always),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    let base = map.as_mut_slice().as_mut_ptr();
    let mut rng = Rng::new(5);
    let mut model = data.clone();
    COUNTING.with(|c| c.set(true));
    let mut wrong = None;
    for i in 0..20_000usize {
        let at = rng.below(LEN);
        // SAFETY: inside the writable mapping, which outlives the loop.
        unsafe {
            let b = base.add(at);
            if i % 4 == 0 {
                let v = std::ptr::read_volatile(b).wrapping_add(1);
                std::ptr::write_volatile(b, v);
                model[at] = v;
            } else if std::ptr::read_volatile(b) != model[at] && wrong.is_none() {
                wrong = Some(at);
            }
        }
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(wrong, None, "a byte read differs from the model");
    let counted = COUNTED.load(Ordering::Relaxed);
    // A promotion is counted by the prefetch thread as it starts the job.
    common::eventually("a promotion", std::time::Duration::from_millis(5), || {
        rt.stats().promotions > 0
    });
    let s = rt.stats();
    assert!(s.evicted_pages > 0, "no eviction: {s}");
    assert_eq!(
        counted, 0,
        "{counted} allocations by the faulting thread beside promoted ranges: {s}"
    );
    map.flush().unwrap();
    assert!(map[..] == model[..], "bytes differ from the model");
}
