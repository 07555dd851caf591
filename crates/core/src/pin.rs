//! Pinning: pages made resident and kept from eviction
//! ([`Mapping::pin`](crate::Mapping::pin)), bounded by half the cache.
//! Runs on the caller's thread, inside the region (`Region::enter`): an
//! unmap waits for it, so that none of its `UFFDIO_COPY`s lands in a region
//! mapped later at the same address.

use std::ops::Range;

use umio_backends::StoreError;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::region::Region;
use crate::scratch::Scratch;
use crate::shared::Shared;

/// How often `pin` tries to make its pages resident before it reports the
/// failure (a store whose reads fail).
const PIN_ATTEMPTS: usize = 3;

impl Shared {
    /// Pins the pages and makes them resident: eviction leaves pinned pages
    /// alone; flush and unmap write them back as any other.
    pub(crate) fn pin(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let Some(_entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        if region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let newly: Vec<usize> = pages.clone().filter(|&p| region.pages.pin(p)).collect();
        let bytes = (newly.len() * region.page_size) as u64;
        if !self.try_pin_bytes(bytes) {
            for &p in &newly {
                region.pages.unpin(p);
            }
            return Err(Error::PinLimit);
        }
        let mut w = Scratch::new();
        for _ in 0..PIN_ATTEMPTS {
            self.fill_ranges(&mut w, region, std::slice::from_ref(&pages), true);
            // Pages another thread holds busy finish on their own: a fill
            // installs them, and eviction leaves pinned pages alone.
            let missing = pages
                .clone()
                .any(|p| region.pages.get(p) == Observed::Stable(PageState::Empty));
            if !missing {
                w.credit.release_all(&self.pool().budget);
                return Ok(());
            }
        }
        w.credit.release_all(&self.pool().budget);
        // The pages stay pinned: the faults that need them read them again
        // and report the failure.
        Err(Error::Store(StoreError::new(
            umio_backends::StoreOp::Read,
            region.store_offset(pages.start),
            libc::EIO,
        )))
    }

    /// Makes the pages resident, on the caller's thread, in batches of
    /// store reads; with `write`, also dirties each one (a write fault,
    /// served like any other) so that the kernel may write into them.
    /// Returns an error if some page could not be read.
    pub(crate) fn populate(&self, region: &Region, pages: Range<usize>, write: bool) -> Result<()> {
        let Some(entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        if region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let mut w = Scratch::new();
        let mut missing = true;
        for _ in 0..PIN_ATTEMPTS {
            self.fill_ranges(&mut w, region, std::slice::from_ref(&pages), true);
            missing = pages
                .clone()
                .any(|p| region.pages.get(p) == Observed::Stable(PageState::Empty));
            if !missing {
                break;
            }
        }
        w.credit.release_all(self.budget_of(region));
        if missing {
            return Err(Error::Store(StoreError::new(
                umio_backends::StoreOp::Read,
                region.store_offset(pages.start),
                libc::EIO,
            )));
        }
        // The writes below are the caller's own accesses, served as
        // faults; inside the region they would keep an unmap that began
        // meanwhile waiting for a fault that waits for the unmap (a
        // closing region serves no fault).
        drop(entered);
        if write && region.writable {
            for p in pages {
                // A write that changes nothing, atomic with any other
                // thread's: the page faults as written (write-protect
                // fault), and is dirty once it returns.
                crate::sys::mm::touch_for_write(region.page_addr(p));
            }
        }
        Ok(())
    }

    /// Unpins the pages; resident ones become eviction candidates again.
    pub(crate) fn unpin(&self, region: &Region, pages: Range<usize>) -> Result<()> {
        let Some(_entered) = region.enter() else {
            return Err(Error::NotMapped);
        };
        if region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        let mut unpinned = 0u64;
        for p in pages {
            if region.pages.unpin(p) {
                unpinned += 1;
                if matches!(
                    region.pages.get(p),
                    Observed::Stable(PageState::Clean | PageState::Dirty)
                        | Observed::Busy(PageState::Clean | PageState::Dirty)
                ) {
                    self.policy_of(region).inserted(region.key(p));
                }
            }
        }
        self.unpin_bytes(unpinned * region.page_size as u64);
        Ok(())
    }
}
