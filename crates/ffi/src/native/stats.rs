//! A mapping's counters: `struct umio_stats`, `umio_stats`.

use std::ffi::{c_int, c_void};

use crate::boundary::{check_ptr, ffi_boundary};
use crate::registry;

/// Counters of one mapping since it was mapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_stats {
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
}

/// Copies the counters of the mapping holding `addr` to `*out`. Returns 0,
/// or -1 with errno `EINVAL` (`out` NULL or misaligned, or `addr` in no
/// umio mapping).
///
/// # Safety
/// `out` points to writable memory for a `struct umio_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umio_stats(addr: *const c_void, out: *mut umio_stats) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(out)?;
        let s = registry::get(addr)?.stats();
        let stats = umio_stats {
            faults: s.faults,
            hits: s.hits,
            fills: s.fills,
            prefetched: s.prefetched,
            evictions: s.evictions,
            writebacks: s.writebacks,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            no_progress_faults: s.no_progress_faults,
        };
        // SAFETY: checked non-null and aligned; the caller promised it is
        // writable.
        unsafe { out.write(stats) };
        Ok(0)
    })
}
