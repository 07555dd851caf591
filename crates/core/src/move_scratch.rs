//! The eviction scratch of asynchronous dirty tracking ([`MoveScratch`]):
//! a runtime's shared state holds it (`shared.rs`), the eviction uses it
//! (`dirty.rs`).

/// Bytes an eviction takes away at once ([`MoveScratch`]).
pub(crate) const SCRATCH_BYTES: usize = 2 << 20;

/// Where an eviction under asynchronous dirty tracking takes victims to
/// make sure no write is lost: `area`, anonymous memory registered with the
/// runtime's userfaultfd (missing faults only; `UFFDIO_MOVE` moves pages
/// only into registered memory), and `copy`, the victims' bytes as they
/// were when found unwritten. One per runtime, taken under a lock.
pub(crate) struct MoveScratch {
    pub(crate) area: usize,
    pub(crate) copy: Box<[u8]>,
}

impl MoveScratch {
    /// Maps and registers the area; `None` (logged) if it cannot.
    pub(crate) fn new(uffd: &crate::sys::uffd::Uffd) -> Option<MoveScratch> {
        let area = crate::sys::mm::map_anonymous(SCRATCH_BYTES, SCRATCH_BYTES, true).ok()?;
        if let Err(e) = uffd.register(area, SCRATCH_BYTES, false) {
            log::warn!("umio: registering the eviction scratch failed (errno {e})");
            let _ = crate::sys::mm::unmap(area, SCRATCH_BYTES);
            return None;
        }
        Some(MoveScratch {
            area,
            copy: vec![0u8; SCRATCH_BYTES].into_boxed_slice(),
        })
    }
}

impl Drop for MoveScratch {
    fn drop(&mut self) {
        // Unmapping unregisters it too.
        let _ = crate::sys::mm::unmap(self.area, SCRATCH_BYTES);
    }
}
