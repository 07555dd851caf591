//! A prefetch policy written in C: `struct umio_prefetch_ops` as a
//! [`Prefetcher`], given to one mapping with `umio_map_options.prefetcher`.

use std::ffi::{c_int, c_void};

use umio_core::{Advice, Fault, FaultKind, FetchList, Prefetcher};

use crate::native::{
    UMIO_ADVICE_HUGE, UMIO_ADVICE_NOHUGE, UMIO_ADVICE_NORMAL, UMIO_ADVICE_RANDOM,
    UMIO_ADVICE_SEQUENTIAL, UMIO_ADVICE_WILLNEED,
};
use crate::ops::{OwnedOps, callback_table};

/// The page was not resident: this fault read it from the store
/// (`struct umio_fault.kind`).
pub const UMIO_FAULT_MISS: c_int = 0;
/// Another thread was filling or changing the page: the fault waited for
/// it, with no read of its own.
pub const UMIO_FAULT_COALESCED: c_int = 1;
/// The first write to a clean page: the page is now dirty.
pub const UMIO_FAULT_FIRST_WRITE: c_int = 2;
/// The page was already resident when the fault was handled.
pub const UMIO_FAULT_RESOLVED: c_int = 3;

/// A fault umio served, as a prefetcher sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct umio_fault {
    /// The page's index in the mapping (from 0).
    pub page: u64,
    /// Pages in the mapping.
    pub pages: u64,
    /// Byte offset of the page in the mapping.
    pub offset: u64,
    /// 1 if the access was a write, else 0.
    pub write: c_int,
    /// `UMIO_FAULT_MISS`, `UMIO_FAULT_COALESCED`, `UMIO_FAULT_FIRST_WRITE`
    /// or `UMIO_FAULT_RESOLVED`.
    pub kind: c_int,
    /// The advice in force for the page (`umio_advise`):
    /// `UMIO_ADVICE_NORMAL`, `UMIO_ADVICE_SEQUENTIAL` or
    /// `UMIO_ADVICE_RANDOM`.
    pub advice: c_int,
    /// The faulting thread's id (Linux TID), or 0 where the kernel does not
    /// report it.
    pub thread: u32,
}

/// Pages `[start, end)` of a mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_page_range {
    /// First page.
    pub start: u64,
    /// One past the last page.
    pub end: u64,
}

/// Most ranges `on_fault` may return for one fault (its `cap`).
pub const UMIO_PREFETCH_MAX_RANGES: usize = 16;

/// A prefetch policy written in C, for one mapping
/// (`umio_map_options.prefetcher`): after each fault of the mapping umio
/// asks it which pages to fetch ahead, and fills them in the background.
///
/// Thread safety: `on_fault` is called from umio's filler threads, several
/// at once: it must be thread-safe (atomics or a mutex for its state) and
/// quick, since it runs on the page-fault path. It must not call any umio
/// function, nor touch memory mapped by umio, nor unwind out of the
/// callback.
///
/// Ownership: from the moment `umio_map` is called with these ops, umio
/// owns `user`. `release`, if set, is called exactly once for each such
/// `umio_map` call: before `umio_map` returns if it fails, otherwise once
/// umio is done with the prefetcher, after the mapping is unmapped. No
/// other callback is called after `release`. To share one `user` between
/// mappings, count the references in `release`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umio_prefetch_ops {
    /// Required. Called after each fault umio serves on the mapping (every
    /// fault, not only misses), once the faulting thread is resumed.
    /// Writes up to `cap` (`UMIO_PREFETCH_MAX_RANGES`) page ranges to
    /// fetch to `out[0..n)` and returns `n` (0: fetch nothing). Pages
    /// already resident or being filled are skipped, ranges past the end
    /// of the mapping are clipped, empty ranges and any beyond `cap` are
    /// ignored. When the cache is full, prefetch evicts older pages.
    pub on_fault: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            fault: *const umio_fault,
            out: *mut umio_page_range,
            cap: usize,
        ) -> usize,
    >,
    /// Called once when umio no longer needs `user` (see above). May be
    /// NULL.
    pub release: Option<unsafe extern "C" fn(user: *mut c_void)>,
    /// Passed to every callback.
    pub user: *mut c_void,
}

callback_table!(umio_prefetch_ops, required: on_fault);

/// [`umio_prefetch_ops`] copied at map time; releases `user` on drop.
pub(crate) type CPrefetcher = OwnedOps<umio_prefetch_ops>;

fn advice_value(advice: Advice) -> c_int {
    match advice {
        Advice::Normal => UMIO_ADVICE_NORMAL,
        Advice::Sequential => UMIO_ADVICE_SEQUENTIAL,
        Advice::Random => UMIO_ADVICE_RANDOM,
        Advice::WillNeed => UMIO_ADVICE_WILLNEED,
        Advice::Huge => UMIO_ADVICE_HUGE,
        Advice::NoHuge => UMIO_ADVICE_NOHUGE,
    }
}

impl From<&Fault> for umio_fault {
    fn from(fault: &Fault) -> umio_fault {
        umio_fault {
            page: fault.page,
            pages: fault.pages,
            offset: fault.offset as u64,
            write: fault.write.into(),
            kind: match fault.kind {
                FaultKind::Miss => UMIO_FAULT_MISS,
                FaultKind::Coalesced => UMIO_FAULT_COALESCED,
                FaultKind::FirstWrite => UMIO_FAULT_FIRST_WRITE,
                FaultKind::Resolved => UMIO_FAULT_RESOLVED,
            },
            advice: advice_value(fault.advice),
            thread: fault.thread,
        }
    }
}

impl Prefetcher for CPrefetcher {
    fn on_fault(&self, fault: &Fault, fetch: &mut FetchList) {
        let Some(on_fault) = self.on_fault else {
            return;
        };
        let c = umio_fault::from(fault);
        // On the fault path: no allocation.
        let mut out = [umio_page_range::default(); UMIO_PREFETCH_MAX_RANGES];
        // SAFETY: a callback of the ops' owner, called with its `user`
        // while the prefetcher is live, as the ops' contract allows; `c`
        // is readable and `out` writable for `cap` ranges during the call.
        let n = unsafe { on_fault(self.user, &c, out.as_mut_ptr(), out.len()) };
        for r in &out[..n.min(out.len())] {
            let end = r.end.min(fault.pages);
            if r.start < end {
                fetch.push(r.start..end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::boundary::Errno;

    unsafe extern "C" fn ahead(
        user: *mut c_void,
        fault: *const umio_fault,
        out: *mut umio_page_range,
        cap: usize,
    ) -> usize {
        // SAFETY: the test passes a valid fault and `cap` writable ranges.
        let (f, out) = unsafe { (&*fault, std::slice::from_raw_parts_mut(out, cap)) };
        let calls = user as *const AtomicUsize;
        // SAFETY: the tests pass a live AtomicUsize as `user`.
        unsafe { &*calls }.fetch_add(1, Ordering::Relaxed);
        if f.kind != UMIO_FAULT_MISS {
            return 0;
        }
        out[0] = umio_page_range {
            start: f.page + 2,
            end: f.page + 3,
        };
        out[1] = umio_page_range { start: 5, end: 5 };
        out[2] = umio_page_range {
            start: f.pages - 1,
            end: f.pages + 10,
        };
        // More than `cap`: only `cap` are read.
        cap + 100
    }

    unsafe extern "C" fn count_release(user: *mut c_void) {
        // SAFETY: the tests pass a live AtomicUsize as `user`.
        unsafe { &*(user as *const AtomicUsize) }.fetch_add(1000, Ordering::Relaxed);
    }

    fn fault(page: u64, kind: FaultKind) -> Fault {
        Fault {
            page,
            pages: 100,
            offset: page as usize * 4096,
            write: false,
            kind,
            advice: Advice::Normal,
            thread: 1,
        }
    }

    #[test]
    fn ranges_are_clipped_and_counted_and_release_runs_once() {
        let calls = AtomicUsize::new(0);
        let ops = umio_prefetch_ops {
            on_fault: Some(ahead),
            release: Some(count_release),
            user: &calls as *const AtomicUsize as *mut c_void,
        };
        let p = CPrefetcher::new(&ops);
        assert!(p.check().is_ok());
        let mut fetch = FetchList::new();
        p.on_fault(&fault(10, FaultKind::Miss), &mut fetch);
        assert_eq!(fetch.as_slice(), &[12..13, 99..100]);
        fetch.clear();
        p.on_fault(&fault(10, FaultKind::Resolved), &mut fetch);
        assert!(fetch.is_empty());
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        drop(p);
        assert_eq!(calls.load(Ordering::Relaxed), 1002);
    }

    #[test]
    fn cap_is_cores() {
        assert_eq!(UMIO_PREFETCH_MAX_RANGES, FetchList::CAPACITY);
    }

    #[test]
    fn on_fault_is_required() {
        let calls = AtomicUsize::new(0);
        let ops = umio_prefetch_ops {
            on_fault: None,
            release: Some(count_release),
            user: &calls as *const AtomicUsize as *mut c_void,
        };
        let p = CPrefetcher::new(&ops);
        assert_eq!(p.check(), Err(Errno(libc::EINVAL)));
        drop(p);
        assert_eq!(calls.load(Ordering::Relaxed), 1000);
    }
}
