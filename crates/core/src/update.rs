//! Updating resident pages in place after the store was written behind
//! them (`pwrite(2)` of a mapped file through the `LD_PRELOAD` shim, say):
//! the new bytes are copied into the pages umio holds, so the next access
//! is a hit, where dropping the pages would cost a miss and a store read.
//!
//! Each page is held busy while it changes, so no fill, eviction or
//! write-back sees it half changed:
//! - **Clean** (write-protected on a writable region: a copy into it would
//!   fault on the page this thread holds): the new page is built aside
//!   (its current bytes with the new ones over them), the old one dropped
//!   and the new one installed with `UFFDIO_COPY`, write-protected as
//!   before; it stays clean (it holds what the store holds).
//! - **Dirty**: write-protected first (so that a write meanwhile waits on
//!   the busy page; its mapping may also be read-only by `mprotect`), then
//!   as a clean page, installed writable; it stays dirty and its later
//!   write-back writes the new bytes again, with the program's own changes
//!   around them. Should the install fail, the built page is written to
//!   the store before the page is left Empty.
//! - **Empty**: nothing to do (the next fault reads the store).
//!
//! A clean page that cannot be installed again is left Empty (the store
//! has its bytes).

use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::region::Region;
use crate::runs::per_vma;
use crate::shared::Shared;
use crate::sys::mm;

/// Pages found in each state by [`Mapping::update_resident_shared`](crate::Mapping::update_resident_shared).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Updated {
    /// Pages updated in place (clean or dirty).
    pub pages: usize,
    /// Pages not resident (nothing to update).
    pub absent: usize,
    /// Clean pages dropped because installing them again failed.
    pub dropped: usize,
}

impl Shared {
    /// The store's bytes at region offset `at` are now `src`: copies them
    /// into the region's resident pages over `at..at + src.len()`, each
    /// held busy meanwhile. Pages in holes (unmapped parts) are skipped.
    /// Works inside the region (`Region::enter`).
    pub(crate) fn update_resident(
        &self,
        region: &Region,
        at: usize,
        src: &[u8],
    ) -> Result<Updated> {
        let Some(_entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        let end = at
            .checked_add(src.len())
            .filter(|&e| e <= region.len)
            .ok_or(Error::InvalidArgument("range outside the mapping"))?;
        let ps = region.page_size;
        let mut out = Updated::default();
        let mut page_buf: Vec<u8> = Vec::new();
        for p in at / ps..end.div_ceil(ps) {
            if region.intersects_hole(&(p..p + 1)) {
                continue;
            }
            let Some(mut state) = self.lock_resident(region, p) else {
                out.absent += 1;
                continue;
            };
            if state == PageState::Clean && self.pagemap().is_some() {
                // Asynchronous dirty tracking: a page umio holds Clean may
                // have been written through the mapping since (`dirty.rs`);
                // installed again clean and write-protected, that write
                // would never be written back. A write landing between
                // this look and the drop below is still lost: see
                // `DirtyTracking::Async`.
                let mut one = [(p, state)];
                self.learn_locked(region, &mut one);
                state = one[0].1;
            }
            let page_start = p * ps;
            let a = at.max(page_start);
            let b = end.min(page_start + ps);
            let bytes = &src[a - at..b - at];
            let addr = region.page_addr(p);
            if state == PageState::Dirty {
                // Writes to it wait on the busy page from here on (a dirty
                // page is not write-protected; its mapping may even be
                // read-only by `mprotect`, so no copy goes through it).
                let protect = per_vma(addr, ps, |at, n| {
                    self.uffd_of(region).writeprotect(at, n, true, false)
                });
                if let Err(e) = protect {
                    self.release_run(region, p..p + 1, PageState::Dirty);
                    return Err(Error::os("UFFDIO_WRITEPROTECT of a page to update", e));
                }
            }
            if page_buf.len() != ps {
                page_buf.resize(ps, 0);
            }
            // SAFETY: the page is resident and held busy by this thread:
            // nothing drops or changes it while it is read (it is
            // write-protected, or read-only, or was made write-protected
            // above).
            let old = unsafe { std::slice::from_raw_parts(addr as *const u8, ps) };
            page_buf.copy_from_slice(old);
            page_buf[a - page_start..b - page_start].copy_from_slice(bytes);
            // A promoted range loses its huge page.
            self.demote_range(region, &(p..p + 1));
            // A clean page stays clean and write-protected; a dirty one
            // dirty and writable.
            let wp = state == PageState::Clean && region.writable;
            let installed = mm::advise(addr, ps, libc::MADV_DONTNEED)
                .and_then(|()| self.install(region, addr, &page_buf, wp, true));
            match installed {
                Ok(()) => {
                    out.pages += 1;
                    self.release_run(region, p..p + 1, state);
                }
                Err(e) => {
                    log::debug!(
                        "umio: a page updated in place could not be installed again \
                         (errno {e}): dropped, read from the store on its next access"
                    );
                    // Whatever is there goes: the page is Empty now.
                    let _ = mm::advise(addr, ps, libc::MADV_DONTNEED);
                    let mut lost = None;
                    if state == PageState::Dirty {
                        // Its changes reach the store first.
                        let valid = region.valid_bytes(p, 1);
                        lost = region
                            .store
                            .write_at(region.store_offset(p), &page_buf[..valid])
                            .err();
                        self.count_undirty(region, 1);
                    }
                    out.dropped += 1;
                    self.release_run(region, p..p + 1, PageState::Empty);
                    self.budget_of(region).release(ps as u64);
                    if let Some(e) = lost {
                        return Err(Error::Store(e));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Locks page `p` busy if it is resident (waiting out another thread's
    /// hold on it: a fill under way ends resident, an eviction Empty);
    /// returns its state, or `None` if it is not resident.
    fn lock_resident(&self, region: &Region, p: usize) -> Option<PageState> {
        loop {
            match region.pages.get(p) {
                Observed::Stable(PageState::Empty) => return None,
                Observed::Stable(s) if region.pages.try_lock(p, s) => return Some(s),
                Observed::Stable(_) => {}
                Observed::Busy(_) if region.is_closing() || region.intersects_hole(&(p..p + 1)) => {
                    return None;
                }
                Observed::Busy(_) => std::thread::yield_now(),
            }
        }
    }
}
