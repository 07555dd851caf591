//! Handing a mapping's memory over to another mapping at the same
//! addresses (`Mapping::hand_over`): the `LD_PRELOAD` shim gives a file
//! mapped twice in one process to the kernel, whose page cache keeps the
//! two mappings coherent.
//!
//! Each mapped part of the region is taken as a partial unmap takes it
//! (`unmap.rs`, `take_pages`): every page locked and the dirty ones
//! written back and write-protected, the part out of the region table;
//! then, instead of a `munmap`, the caller's `mmap(MAP_FIXED)` replaces
//! the memory in one step. A thread that writes or faults meanwhile waits
//! on its busy page (or faults again for want of a region) and, woken,
//! meets the new mapping: nothing it writes is lost, nothing it reads is
//! stale.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::region::Region;
use crate::shared::Shared;
use crate::unmap::Take;

impl Shared {
    /// Hands every mapped part of `region` over to `replace(addr, len,
    /// store_offset)`, which maps something else there with `MAP_FIXED`
    /// (`store_offset`: the store's offset of `addr`). The store is synced
    /// afterwards. On an error, the parts handed over so far stay handed
    /// over, the others umio's.
    pub(crate) fn hand_over(
        &self,
        region: &Arc<Region>,
        replace: &mut dyn FnMut(usize, usize, u64) -> std::result::Result<(), i32>,
    ) -> Result<()> {
        // Most of the write-back before the table's writer lock, as
        // `unmap_range` does.
        if let Err(Error::NotMapped) = self.write_dirty(region, 0..region.pages.len()) {
            return Err(Error::NotMapped);
        }
        let w = self.lock_regions();
        let mut lost = None;
        for pages in region.mapped_ranges() {
            let at = region.store_offset(pages.start);
            let mut part = |addr: usize, len: usize| replace(addr, len, at);
            if let Some(e) = self.take_pages(&w, region, pages, Take::Replace(&mut part))? {
                lost.get_or_insert(e);
            }
        }
        drop(w);
        let synced = region.store.sync();
        match lost {
            Some(e) => Err(Error::Store(e)),
            None => synced.map_err(Error::Store),
        }
    }
}
