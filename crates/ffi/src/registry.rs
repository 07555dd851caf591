//! The live mappings, found by address.
//!
//! C names a mapping by an address in it. Entries are keyed by base
//! address and a sequence number: after a partial unmap the kernel may
//! place a new mapping inside an older one's hole, so the entry containing
//! an address is the newest one with the highest base below it.
//!
//! Each entry remembers the process that made it: a fork child inherits
//! the table, but not the regions (see `umio.h`, "fork"), and must not
//! write its parent's mappings back at exit (`exit.rs`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use umio_core::Mapping;

use crate::boundary::Errno;

struct Registry {
    next_seq: u64,
    live: BTreeMap<(usize, u64), Entry>,
}

struct Entry {
    mapping: Arc<Mapping>,
    /// The process that made it.
    pid: u32,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_seq: 0,
    live: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps a new mapping; returns its address. The first one arranges for
/// the process's mappings to be written back at exit.
pub(crate) fn insert(mapping: Mapping) -> usize {
    crate::exit::write_back_at_exit();
    let base = mapping.as_ptr() as usize;
    let mut r = registry();
    let seq = r.next_seq;
    r.next_seq += 1;
    let entry = Entry {
        mapping: Arc::new(mapping),
        pid: std::process::id(),
    };
    r.live.insert((base, seq), entry);
    base
}

/// The mapping whose bytes include `addr`: the one that maps it now, else
/// the newest whose range includes it (`addr` in its hole).
pub(crate) fn find(addr: usize) -> Option<Arc<Mapping>> {
    let r = registry();
    let mut containing = r
        .live
        .range(..=(addr, u64::MAX))
        .rev()
        .map(|(_, e)| &e.mapping)
        .filter(|m| addr - (m.as_ptr() as usize) < m.len());
    let first = containing.next()?;
    let base = |m: &Arc<Mapping>| m.as_ptr() as usize;
    if first.is_mapped_at(addr - base(first)) {
        return Some(first.clone());
    }
    // A fixed mapping that replaced this address may start below the
    // older mapping whose hole it is in.
    containing
        .find(|m| m.is_mapped_at(addr - base(m)))
        .unwrap_or(first)
        .clone()
        .into()
}

/// Forgets every mapping with nothing mapped any more (after a fixed
/// mapping replaced all of it).
pub(crate) fn forget_unmapped() {
    registry().live.retain(|_, e| e.mapping.mapped_bytes() != 0);
}

/// The mapping including `addr`, or `EINVAL`.
pub(crate) fn get(addr: *const libc::c_void) -> Result<Arc<Mapping>, Errno> {
    find(addr as usize).ok_or(Errno(libc::EINVAL))
}

/// Every live mapping, oldest first.
pub(crate) fn all() -> Vec<Arc<Mapping>> {
    registry()
        .live
        .values()
        .map(|e| e.mapping.clone())
        .collect()
}

/// Every live mapping this process made (not a fork parent's), oldest
/// first.
pub(crate) fn of_this_process() -> Vec<Arc<Mapping>> {
    let pid = std::process::id();
    registry()
        .live
        .values()
        .filter(|e| e.pid == pid)
        .map(|e| e.mapping.clone())
        .collect()
}

/// Forgets `mapping` once nothing of it is mapped any more.
pub(crate) fn forget_if_unmapped(mapping: &Arc<Mapping>) {
    if mapping.mapped_bytes() == 0 {
        registry()
            .live
            .retain(|_, e| !Arc::ptr_eq(&e.mapping, mapping));
    }
}

/// `[addr, addr + len)` as a byte range of `mapping`, or `EINVAL` if it
/// reaches outside it. Bytes past the mapping's length in its last page
/// are part of the page, as with `mmap`, and are clipped. `len` 0 means
/// up to the end of the mapping.
pub(crate) fn relative(
    mapping: &Mapping,
    addr: *const libc::c_void,
    len: usize,
) -> Result<Range<usize>, Errno> {
    let start = (addr as usize)
        .checked_sub(mapping.as_ptr() as usize)
        .filter(|&s| s < mapping.len())
        .ok_or(Errno(libc::EINVAL))?;
    if len == 0 {
        return Ok(start..mapping.len());
    }
    let span = mapping.len().next_multiple_of(mapping.page_size());
    let end = start
        .checked_add(len)
        .filter(|&e| e <= span)
        .ok_or(Errno(libc::EINVAL))?;
    Ok(start..end.min(mapping.len()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use umio_backends::MemoryStore;
    use umio_core::{MapOptions, Runtime};

    use super::*;

    const PS: usize = 4096;

    /// Lookups and ranges follow partial unmaps: an address in a hole still
    /// names its mapping (whose calls then fail with EINVAL), and the entry
    /// goes once nothing of it is mapped.
    #[test]
    fn lookups_follow_partial_unmaps() {
        let rt = Runtime::builder()
            .cache_bytes(1 << 20)
            .page_size(PS)
            .fillers(1)
            .build()
            .expect("a runtime (the tests need userfaultfd: run as root)");
        let store = Arc::new(MemoryStore::new(vec![1u8; 8 * PS]));
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let base = insert(unsafe { rt.map(MapOptions::new().store(store).len(8 * PS)) }.unwrap());
        let other = insert(
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            unsafe { rt.map(MapOptions::new().store(Arc::new(MemoryStore::new(vec![2u8; PS])))) }
                .unwrap(),
        );
        let at = |addr: usize| find(addr).map(|m| m.as_ptr() as usize);
        assert_eq!(at(base), Some(base));
        assert_eq!(at(base + 8 * PS - 1), Some(base));
        assert_eq!(at(other + 100), Some(other));
        if base + 8 * PS != other {
            assert_eq!(at(base + 8 * PS), None);
        }

        let m = find(base).unwrap();
        let addr = |off: usize| (base + off) as *const libc::c_void;
        assert_eq!(relative(&m, addr(PS), 0), Ok(PS..8 * PS));
        assert_eq!(relative(&m, addr(7 * PS), PS), Ok(7 * PS..8 * PS));
        assert_eq!(relative(&m, addr(7 * PS), PS + 1), Err(Errno(libc::EINVAL)));
        assert_eq!(relative(&m, addr(8 * PS), 1), Err(Errno(libc::EINVAL)));

        // SAFETY: the test holds no slice of the mapping.
        unsafe { m.unmap_range_shared(2 * PS..4 * PS) }.unwrap();
        forget_if_unmapped(&m);
        assert_eq!(at(base + 3 * PS), Some(base), "a hole names its mapping");
        assert_eq!(m.mapped_bytes(), 6 * PS);
        // SAFETY: the test holds no slice of the mapping.
        unsafe { m.unmap_range_shared(0..2 * PS) }.unwrap();
        // SAFETY: the test holds no slice of the mapping.
        unsafe { m.unmap_range_shared(4 * PS..8 * PS) }.unwrap();
        forget_if_unmapped(&m);
        assert_eq!(at(base), None);
        assert_eq!(at(other), Some(other));
        let o = find(other).unwrap();
        // SAFETY: the test holds no slice of the mapping.
        unsafe { o.unmap_range_shared(0..o.len()) }.unwrap();
        forget_if_unmapped(&o);
        assert_eq!(at(other), None);
    }
}
