//! A mapping's counters: `struct umio_stats`, `umio_stats`.

use std::ffi::{c_int, c_void};

use crate::boundary::{check_ptr, ffi_boundary};
use crate::extensible::{self, Extensible};
use crate::registry;

/// Counters of one mapping since it was mapped. The structure may grow in
/// later versions (see "Extensible structures" above): set `size` before
/// the call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_stats {
    /// Set by the caller to `sizeof(struct umio_stats)`; umio writes no
    /// byte past it, and sets it to the bytes it filled.
    pub size: usize,
    /// Page faults served.
    pub faults: u64,
    /// Of those, faults served without a store read (the page was being
    /// filled already, or was resident, or was clean and written first).
    pub hits: u64,
    /// Pages read from the store (misses and prefetch).
    pub fills: u64,
    /// Of those, pages read by prefetch or read-ahead.
    pub prefetched: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Store writes made by write-back (each covers a run of pages).
    pub writebacks: u64,
    /// Bytes read from the store.
    pub bytes_read: u64,
    /// Bytes written to the store.
    pub bytes_written: u64,
    /// Faults that made no progress, which umio ended instead of letting
    /// the thread fault forever (the kernel refused a fill: SIGBUS; or the
    /// page's mapping was dropped behind umio's back, say by the
    /// application's own `madvise(MADV_DONTNEED)`: a clean page is filled
    /// again, a dirty one gives SIGBUS). Each is logged (`UMAP_LOG_LEVEL`);
    /// 0 in a correct program.
    pub no_progress_faults: u64,
    /// Batches of store reads submitted at once for this mapping: the
    /// reads of hints (`umio_prefetch`, `madvise` `MADV_WILLNEED`),
    /// read-ahead, pinning; a miss's own read is not one of them.
    pub read_submissions: u64,
    /// Store reads in those batches.
    pub reads_submitted: u64,
    /// The most store reads one batch put in flight at once (the store's
    /// queue depth once a batch filled it).
    pub max_reads_in_flight: u64,
    /// `reads_submitted / read_submissions`: reads per batch, on average
    /// (0 before the first batch).
    pub mean_reads_in_flight: f64,
    /// How the mapping's faults are served: 1 in the faulting thread
    /// (`"in-thread"`), 0 by filler threads (`"fillers"`); see
    /// `umio_map_options.fault_service`.
    pub in_thread: u64,
    /// Of the read misses, those filled dirty, without write protection,
    /// because the mapping's read misses are nearly all followed by a
    /// write (synchronous dirty tracking; `UMIO_WRITE_PREDICTION=0` turns
    /// it off): the write that follows costs no second fault.
    pub predicted_writes: u64,
}

// SAFETY: repr(C), `size` first, integers and one `double` (any bit
// pattern, all zeros too, is a valid `double`).
unsafe impl Extensible for umio_stats {}

/// Copies the counters of the mapping holding `addr` to `*out`
/// (`struct umio_stats s = { .size = sizeof s }; umio_stats(p, &s);`).
/// Returns 0, or -1 with errno `EINVAL` (`out` NULL or misaligned,
/// `out->size` not set, or `addr` in no umio mapping).
///
/// # Safety
/// `out` points to a `struct umio_stats` whose first `size` bytes are
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_stats(addr: *const c_void, out: *mut umio_stats) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(out)?;
        let s = registry::get(addr)?.stats();
        let stats = umio_stats {
            size: 0,
            faults: s.faults,
            hits: s.hits,
            fills: s.fills,
            prefetched: s.prefetched,
            evictions: s.evictions,
            writebacks: s.writebacks,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            no_progress_faults: s.no_progress_faults,
            read_submissions: s.read_submissions,
            reads_submitted: s.reads_submitted,
            max_reads_in_flight: s.max_reads_in_flight,
            mean_reads_in_flight: s.mean_reads_in_flight(),
            in_thread: u64::from(s.fault_service == umio_core::FaultService::InThread),
            predicted_writes: s.predicted_writes,
        };
        // SAFETY: the caller promised `size` writable bytes.
        unsafe { extensible::write(out, stats) }?;
        Ok(0)
    })
}

/// Counters and gauges of the whole runtime (every mapping, from the
/// start), for `umio_runtime_stats`. The structure may grow in later
/// versions (see "Extensible structures" above): set `size` before the
/// call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_runtime_stats {
    /// Set by the caller to `sizeof(struct umio_runtime_stats)`; umio
    /// writes no byte past it, and sets it to the bytes it filled.
    pub size: usize,
    /// Page faults read from userfaultfd.
    pub faults: u64,
    /// Faults by kind: a page filled for a reading thread (a miss).
    pub read_misses: u64,
    /// A page filled for a writing thread.
    pub write_misses: u64,
    /// The first write to a clean page (a write-protect fault).
    pub first_writes: u64,
    /// A fault on a page another thread was filling or changing, served
    /// without a read of its own.
    pub coalesced: u64,
    /// A fault found already resolved when handled.
    pub resolved: u64,
    /// Faults on hugetlbfs mappings.
    pub huge_faults: u64,
    /// Faults that made no progress, ended by umio (see `struct
    /// umio_stats`); 0 in a correct program.
    pub no_progress_faults: u64,
    /// Store reads made to fill pages (faults and prefetch).
    pub store_reads: u64,
    /// Bytes read from stores.
    pub bytes_read: u64,
    /// Pages filled by prefetch or read-ahead rather than by a fault.
    pub prefetched: u64,
    /// Failed fills (the faulting thread got SIGBUS).
    pub read_errors: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Of those, pages that were dirty and written back first.
    pub dirty_evictions: u64,
    /// Store writes made by write-back (each covers a run of pages).
    pub writebacks: u64,
    /// Bytes written back.
    pub bytes_written: u64,
    /// Failed write-backs (the pages stayed dirty).
    pub writeback_errors: u64,
    /// Times a filler evicted pages itself because the cache was full.
    pub direct_reclaims: u64,
    /// Bytes of cache held now: resident pages and pages being filled.
    pub resident_bytes: u64,
    /// The cache's bound now (it may change at run time); before the first
    /// mapping, the bound the runtime will start with.
    pub cache_bytes: u64,
    /// Of `resident_bytes`, those of the huge-page pool; 0 without one.
    pub huge_pool_bytes: u64,
    /// The huge-page pool's bound; 0 without one.
    pub huge_cache_bytes: u64,
    /// Mappings (regions) now.
    pub regions: u64,
    /// The fault-latency histogram's sum of latencies in nanoseconds (a
    /// fault's latency: from umio's read of its event to the end of its
    /// handling, the thread woken).
    pub fault_latency_sum_ns: u64,
    /// The fault-latency histogram: `fault_latency[i]` counts faults served
    /// in `[2^i, 2^(i+1))` nanoseconds; `fault_latency[0]` those under 2 ns
    /// and the last bucket those of `2^(UMIO_LATENCY_BUCKETS - 1)` ns or
    /// more.
    pub fault_latency: [u64; UMIO_LATENCY_BUCKETS],
    /// Of `faults`, those served in the faulting thread (fault service
    /// `"in-thread"`, see `umio_config_set_fault_service`); the rest were
    /// served by filler threads.
    pub in_thread_faults: u64,
    /// Batches of store reads submitted at once (see `struct umio_stats`),
    /// every mapping's.
    pub read_submissions: u64,
    /// Store reads in those batches.
    pub reads_submitted: u64,
    /// The most store reads one batch put in flight at once.
    pub max_reads_in_flight: u64,
    /// `reads_submitted / read_submissions` (0 before the first batch).
    pub mean_reads_in_flight: f64,
    /// Of `regions`, those whose faults are served in the faulting thread
    /// (`umio_map_options.fault_service`); the fillers serve the others.
    pub in_thread_regions: u64,
    /// Of `read_misses`, those filled dirty, without write protection,
    /// because their mapping's read misses are nearly all followed by a
    /// write (see `struct umio_stats`); `first_writes` does not count the
    /// writes that follow them.
    pub predicted_writes: u64,
}

/// Buckets of `umio_runtime_stats.fault_latency`.
pub const UMIO_LATENCY_BUCKETS: usize = 32;
const _: () = assert!(UMIO_LATENCY_BUCKETS == umio_core::LATENCY_BUCKETS);

// SAFETY: repr(C), `size` first, integers and one `double` (any bit
// pattern is a valid `double`).
unsafe impl Extensible for umio_runtime_stats {}

impl umio_runtime_stats {
    pub(crate) fn from_stats(s: &umio_core::Stats) -> Self {
        umio_runtime_stats {
            size: 0,
            faults: s.faults,
            read_misses: s.read_misses,
            write_misses: s.write_misses,
            first_writes: s.wp_faults,
            coalesced: s.coalesced,
            resolved: s.stale,
            huge_faults: s.huge_faults,
            no_progress_faults: s.no_progress_faults,
            store_reads: s.store_reads,
            bytes_read: s.bytes_read,
            prefetched: s.prefetched_pages,
            read_errors: s.read_errors,
            evictions: s.evicted_pages,
            dirty_evictions: s.evicted_dirty_pages,
            writebacks: s.writeback_ops,
            bytes_written: s.bytes_written,
            writeback_errors: s.write_errors,
            direct_reclaims: s.direct_reclaims,
            resident_bytes: s.resident_bytes,
            cache_bytes: s.cache_bytes,
            huge_pool_bytes: s.huge_pool_bytes,
            huge_cache_bytes: s.huge_cache_bytes,
            regions: s.regions,
            fault_latency_sum_ns: s.fault_latency.sum_ns,
            fault_latency: s.fault_latency.buckets,
            in_thread_faults: s.in_thread_faults,
            read_submissions: s.read_submissions,
            reads_submitted: s.reads_submitted,
            max_reads_in_flight: s.max_reads_in_flight,
            mean_reads_in_flight: s.mean_reads_in_flight(),
            in_thread_regions: s.in_thread_regions,
            predicted_writes: s.predicted_writes,
        }
    }
}

/// Copies the runtime's counters (all mappings, from its start) to `*out`
/// (`struct umio_runtime_stats s = { .size = sizeof s };
/// umio_runtime_stats(&s);`). Before the first mapping the runtime does
/// not run: every counter is 0 and `cache_bytes` is the bound it will start
/// with. Returns 0, or -1 with errno `EINVAL` (`out` NULL or misaligned,
/// or `out->size` not set) or the errno of a malformed `UMAP_*` variable
/// (before the first mapping).
///
/// # Safety
/// `out` points to a `struct umio_runtime_stats` whose first `size` bytes
/// are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_runtime_stats(out: *mut umio_runtime_stats) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(out)?;
        let stats = match crate::config::running() {
            Some(rt) => umio_runtime_stats::from_stats(&rt.stats()),
            None => umio_runtime_stats {
                cache_bytes: crate::config::current()?.0.cache_bytes,
                ..Default::default()
            },
        };
        // SAFETY: the caller promised `size` writable bytes.
        unsafe { extensible::write(out, stats) }?;
        Ok(0)
    })
}
