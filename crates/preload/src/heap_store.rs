//! The heap's store: its file, and which parts of it were ever written.
//!
//! Heap memory that was never written back (fresh extents, and extents
//! freed since: their file range is punched) reads as zeros. A read that
//! falls wholly in such parts is answered with zeros at once, without a
//! system call: fresh allocations cost no file reads.
//!
//! The parts are tracked in granules of [`GRANULE`] bytes or more: a bit
//! per granule, set before any write to it is issued, and cleared only
//! when a punch covers the whole granule. A read of a granule with its bit
//! set goes to the file (which may hold zeros there: still right).

use std::sync::atomic::{AtomicU64, Ordering};

use umio_backends::{FileStore, IoRequest, Store, StoreError};

/// The smallest granule: umio's default page.
const GRANULE: u64 = 64 << 10;
/// The most bits the map holds (2 MiB of them).
const MAX_BITS: u64 = 1 << 24;

pub(crate) struct HeapStore {
    file: FileStore,
    /// The file's length (fixed: the heap never resizes it).
    len: u64,
    granule: u64,
    written: Box<[AtomicU64]>,
    /// Bytes answered with zeros without a file read (for `UMIO_STATS`).
    zeroed: AtomicU64,
}

impl HeapStore {
    pub(crate) fn new(file: FileStore, len: u64) -> HeapStore {
        let mut granule = GRANULE;
        while len.div_ceil(granule) > MAX_BITS {
            granule *= 2;
        }
        let words = len.div_ceil(granule).div_ceil(64) as usize;
        HeapStore {
            file,
            len,
            granule,
            written: (0..words).map(|_| AtomicU64::new(0)).collect(),
            zeroed: AtomicU64::new(0),
        }
    }

    /// Granules overlapping `[offset, offset + len)`.
    fn granules(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        let end = offset.saturating_add(len).min(self.len);
        offset / self.granule..end.div_ceil(self.granule)
    }

    fn bit(&self, g: u64) -> (&AtomicU64, u64) {
        (&self.written[(g / 64) as usize], 1u64 << (g % 64))
    }

    /// Marks the bytes as (about to be) written.
    fn mark(&self, offset: u64, len: u64) {
        for g in self.granules(offset, len) {
            let (w, b) = self.bit(g);
            if w.load(Ordering::Relaxed) & b == 0 {
                w.fetch_or(b, Ordering::AcqRel);
            }
        }
    }

    /// Whether no byte of the range was ever written (since a punch).
    fn fresh(&self, offset: u64, len: u64) -> bool {
        self.granules(offset, len).all(|g| {
            let (w, b) = self.bit(g);
            w.load(Ordering::Acquire) & b == 0
        })
    }

    /// The file's bytes `[offset, offset + len)` were punched: the
    /// granules wholly inside read as zeros without the file again.
    pub(crate) fn forget(&self, offset: u64, len: u64) {
        let first = offset.div_ceil(self.granule);
        let end = offset.saturating_add(len).min(self.len);
        let last = if end == self.len {
            end.div_ceil(self.granule)
        } else {
            end / self.granule
        };
        for g in first..last {
            let (w, b) = self.bit(g);
            w.fetch_and(!b, Ordering::AcqRel);
        }
    }

    /// Bytes answered with zeros so far (umio counts them as read).
    pub(crate) fn zeroed_bytes(&self) -> u64 {
        self.zeroed.load(Ordering::Relaxed)
    }

    /// Zeros for a fresh read: the bytes answered, or `None` if the read
    /// must go to the file.
    fn zeros(&self, offset: u64, buf: &mut [u8]) -> Option<usize> {
        if offset >= self.len || !self.fresh(offset, buf.len() as u64) {
            return None;
        }
        let n = buf.len().min((self.len - offset) as usize);
        buf[..n].fill(0);
        self.zeroed.fetch_add(n as u64, Ordering::Relaxed);
        Some(n)
    }
}

impl Store for HeapStore {
    fn len(&self) -> Result<u64, StoreError> {
        self.file.len()
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.file.set_len(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        match self.zeros(offset, buf) {
            Some(n) => Ok(n),
            None => self.file.read_at(offset, buf),
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        self.mark(offset, buf.len() as u64);
        self.file.write_at(offset, buf)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.file.sync()
    }

    fn is_writable(&self) -> bool {
        self.file.is_writable()
    }

    fn alignment(&self) -> usize {
        self.file.alignment()
    }

    fn name(&self) -> &str {
        "heap file"
    }

    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        for req in batch.iter_mut().filter(|r| r.result().is_none()) {
            let offset = req.offset();
            if req.is_write() {
                self.mark(offset, req.len() as u64);
            } else {
                let answered = req.read_buf().and_then(|buf| self.zeros(offset, buf));
                if let Some(n) = answered {
                    req.complete(Ok(n));
                }
            }
        }
        // Requests answered here carry their result: the file's submit
        // leaves them alone.
        self.file.submit(batch);
    }

    fn queue_depth(&self) -> usize {
        self.file.queue_depth()
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        self.file.punch_hole(offset, len)?;
        self.forget(offset, len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_parts_read_zeros_and_written_ones_the_file() {
        let f = FileStore::scratch(None, 1 << 20).unwrap();
        let s = HeapStore::new(f, 1 << 20);
        let mut buf = vec![7u8; 4096];
        assert_eq!(s.read_at(0, &mut buf).unwrap(), 4096);
        assert!(buf.iter().all(|&b| b == 0));
        s.write_at(GRANULE + 4096, &[5u8; 4096]).unwrap();
        assert!(!s.fresh(GRANULE, 1));
        assert!(s.fresh(0, GRANULE));
        let mut buf = vec![0u8; 4096];
        s.read_at(GRANULE + 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 5));
        // A punch of part of a granule keeps it marked; of all of it, not.
        s.punch_hole(GRANULE, 4096).unwrap();
        assert!(!s.fresh(GRANULE, 1));
        s.punch_hole(GRANULE, GRANULE).unwrap();
        assert!(s.fresh(GRANULE, 1));
        let mut buf = vec![9u8; 4096];
        s.read_at(GRANULE + 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }
}
