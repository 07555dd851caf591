//! `libumio_preload.so`: unmodified programs on umio, through `LD_PRELOAD`.
//!
//! - **mmap shim**: `mmap` of a file whose real path matches
//!   `UMIO_PRELOAD_PATHS` (colon-separated `fnmatch(3)` patterns; `*` also
//!   matches `/`) and is at least `UMIO_PRELOAD_MIN_SIZE` bytes long is
//!   served by umio; every other mapping, anonymous ones included, is the
//!   kernel's. `munmap`, `msync`, `madvise`, `posix_madvise`, `mprotect`
//!   and `mremap` on umio mappings keep their kernel meaning as far as
//!   `maps.rs` and the README document, and pass everything else to the
//!   kernel.
//!   `MAP_SHARED` writes reach the file (at `msync`, `munmap`, eviction
//!   and exit); `MAP_PRIVATE` writes never do (they go to a nameless
//!   scratch file).
//! - **Heap mode** (`UMIO_HEAP_FILE`): `malloc` and its kin serve blocks of
//!   at least `UMIO_HEAP_MIN_ALLOC` bytes from a umio region over that file
//!   (`heap.rs`).
//! - `UMIO_STATS=1` prints the process's counters at exit (`exit` or
//!   `_exit`), with the hit ratio, the bytes read per byte faulted, the
//!   fault service and the fault-latency histogram.
//! - `UMIO_LOG` (`off`, `error`, `warn`, `info`, `debug`; default `warn`):
//!   umio's log records at that level and above go to stderr.
//!
//! The runtime starts on the first selected mapping or large allocation,
//! configured by the `UMIO_*` variables of `umio_core::Builder::from_env`.
//! Calls the shim makes itself, and calls from umio's threads, go straight
//! to the kernel (raw system calls) and to glibc (`__libc_malloc` and
//! kin); the shim's Rust allocations never reach the interposed `malloc`.
//!
//! After `fork`, the child sees each umio mapping of its parent as a
//! kernel mapping of the same file at the same address (the parent writes
//! its dirty pages back first; a private mapping's written pages are
//! copied in), and the parent's heap as a private mapping of its file; the
//! child's own new mappings start a runtime of its own.

// The unit tests build the library as a test program, without the exports
// (a test binary that replaced its own malloc and mmap would test nothing
// of use), so parts of it go unused there.
#![cfg_attr(test, allow(dead_code))]

mod buffers;
mod coherence;
mod config;
mod heap;
mod heap_store;
mod maps;
mod runtime;
mod stores;
mod sys;

#[cfg(not(test))]
mod alloc;
#[cfg(not(test))]
mod exports;

#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: alloc::LibcAllocator = alloc::LibcAllocator;

use std::cell::RefCell;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

/// Runs when the library is loaded, before `main`: reads the
/// configuration and registers the fork and exit hooks.
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn constructor() {
    let _ = std::panic::catch_unwind(|| {
        let cfg = runtime::config();
        heap::configure(cfg);
        if cfg.stats {
            sys::keep_stderr();
        }
        // SAFETY: registering functions that live as long as the process
        // (this library is never unloaded: it interposes malloc).
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            );
            libc::atexit(at_exit);
        }
    });
}

/// What `before_fork` holds until the fork is done: the locks of the
/// heap's start, the runtime slot, the mapping table and the heap's
/// extents, in that order, so the child inherits none of them held by a
/// thread it does not have.
struct ForkLocks {
    _guard: Option<sys::ShimGuard>,
    _init: MutexGuard<'static, ()>,
    _runtime: umio_core::ProcessLock,
    table: MutexGuard<'static, maps::Table>,
    extents: Option<MutexGuard<'static, heap::Extents>>,
}

thread_local! {
    static FORK_LOCKS: RefCell<Option<ForkLocks>> = const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let _ = std::panic::catch_unwind(|| {
        let guard = sys::enter();
        let init = heap::INIT.lock().unwrap_or_else(|e| e.into_inner());
        let runtime = umio_core::ProcessRuntime::lock();
        let table = maps::lock();
        // The child maps the files again: they must hold the parent's
        // writes. Private mappings write to their scratch files.
        maps::flush_all(&table, true);
        let extents = heap::made().filter(|_| !heap::inherited()).map(|h| {
            h.flush();
            h.lock()
        });
        FORK_LOCKS.with(|l| {
            *l.borrow_mut() = Some(ForkLocks {
                _guard: guard,
                _init: init,
                _runtime: runtime,
                table,
                extents,
            })
        });
    });
}

extern "C" fn after_fork_parent() {
    let _ = std::panic::catch_unwind(|| FORK_LOCKS.with(|l| l.borrow_mut().take()));
}

extern "C" fn after_fork_child() {
    let _ = std::panic::catch_unwind(|| {
        let Some(mut locks) = FORK_LOCKS.with(|l| l.borrow_mut().take()) else {
            return;
        };
        // The runtime needs nothing here: umio_core::ProcessRuntime sees
        // the child's pid and starts it a runtime of its own.
        maps::MAPPED.store(0, Ordering::Relaxed);
        maps::MAPPED_BYTES.store(0, Ordering::Relaxed);
        maps::adopt_in_child(locks.table.drain());
        if locks.extents.is_some()
            && let Some(h) = heap::made()
        {
            h.adopt_in_child();
        }
        drop(locks);
    });
}

/// At `exit`: shared mappings still mapped are written back (the kernel
/// would have their pages in its page cache; umio's cache dies with the
/// process), then the counters are printed if `UMIO_STATS` asks
/// ([`before_exit`]; `_exit` does the same, `exports.rs`).
extern "C" fn at_exit() {
    before_exit();
}

/// What a process leaving by `exit` or `_exit` does, once: shared
/// mappings still mapped are written back, then the counters are printed
/// if `UMIO_STATS` asks. Only in the process whose runtime it is (not in a
/// `vfork` child, which shares its parent's memory).
pub(crate) fn before_exit() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let _ = std::panic::catch_unwind(|| {
        let Some(_guard) = sys::enter() else {
            return;
        };
        // Processes that never used umio (a shell's children, say) stay quiet.
        if runtime::runtime_if_started().is_none() || DONE.swap(true, Ordering::AcqRel) {
            return;
        }
        // Every shared mapping written back: the keeper has nothing left
        // to write, and quits (a file another program changes after this
        // one is gone must not get this one's pages).
        if !maps::any() || maps::flush_all(&maps::lock(), false) {
            umio_core::keeper::all_written();
        }
        if runtime::config().stats {
            print_stats();
        }
    });
}

/// Hit ratio (faults served without a store read) and read amplification:
/// bytes read from stores per byte of pages faulted in (misses times the
/// page size; pages read ahead and used without a fault are not seen, so
/// the ratio is an upper bound).
fn efficiency(s: &umio_core::Stats, page_size: usize) -> String {
    let misses = s.read_misses + s.write_misses;
    let mut out = String::new();
    if s.faults > 0 {
        let hits = s.faults.saturating_sub(misses);
        out += &format!("; hit ratio {:.1}%", 100.0 * hits as f64 / s.faults as f64);
    }
    if misses > 0 {
        let touched = misses as f64 * page_size as f64;
        out += &format!(
            ", {:.2} bytes read per byte faulted",
            s.bytes_read as f64 / touched
        );
    }
    out
}

/// The fault-latency histogram: a summary line and its non-empty buckets.
fn latency_lines(h: &umio_core::FaultLatency) -> String {
    let mut out = format!("umio-preload: fault latency (pid {}): {h}\n", sys::pid());
    if h.count() == 0 {
        return out;
    }
    out += "umio-preload: fault latency buckets:";
    for (i, &n) in h.buckets.iter().enumerate() {
        if n > 0 {
            let (lo, _) = umio_core::FaultLatency::bucket_range(i);
            out += &format!(" {:?}+ {n};", std::time::Duration::from_nanos(lo));
        }
    }
    out.pop();
    out.push('\n');
    out
}

fn print_stats() {
    let mapped = maps::MAPPED.load(Ordering::Relaxed);
    let in_thread = maps::MAPPED_IN_THREAD.load(Ordering::Relaxed);
    let mut out = format!(
        "umio-preload: pid {}: {} file mappings ({} MiB) served by umio ({} by the fillers, \
         {} in the faulting thread)",
        sys::pid(),
        mapped,
        maps::MAPPED_BYTES.load(Ordering::Relaxed) >> 20,
        mapped - in_thread,
        in_thread
    );
    if let Some(h) = heap::made() {
        let s = h.lock().stats;
        out += &format!(
            "; heap (served by the {}): {} allocations, {} frees, {} MiB live, peak {} MiB, \
             {} fell back to glibc, {} MiB fresh (zero-filled, not read)",
            match h.mapping().fault_service() {
                umio_core::FaultService::InThread => "faulting thread",
                _ => "fillers",
            },
            s.allocations,
            s.frees,
            s.live_bytes >> 20,
            s.peak_bytes >> 20,
            s.fallbacks,
            h.zeroed_bytes() >> 20
        );
    }
    if let Some(rt) = runtime::runtime_if_started() {
        let s = rt.stats();
        out += &format!(
            "; cache {} MiB: {} faults, {} read misses, {} write misses, {} first writes, \
             {} prefetched pages, {} MiB read, {} evicted pages ({} dirty), {} dirty pages \
             written back in place, {} MiB written back, {} faults without progress",
            rt.cache_bytes() >> 20,
            s.faults,
            s.read_misses,
            s.write_misses,
            s.wp_faults,
            s.prefetched_pages,
            s.bytes_read >> 20,
            s.evicted_pages,
            s.evicted_dirty_pages,
            s.limit_written_pages,
            s.bytes_written >> 20,
            s.no_progress_faults
        );
        out += &efficiency(&s, rt.page_size());
        out += &format!("; fault service {}", runtime::service_name(&rt));
    }
    out.push('\n');
    if let Some(rt) = runtime::runtime_if_started() {
        out += &latency_lines(&rt.stats().fault_latency);
    }
    sys::report(&out);
}
