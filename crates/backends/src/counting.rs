use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::{IoRequest, Store, StoreError};

/// Counts of the operations a [`CountingStore`] has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Calls to `read_at`.
    pub reads: u64,
    /// Bytes returned by `read_at`.
    pub bytes_read: u64,
    /// Calls to `write_at`.
    pub writes: u64,
    /// Bytes passed to `write_at`.
    pub bytes_written: u64,
    /// Calls to `sync`.
    pub syncs: u64,
    /// Calls to `submit`; their requests count as reads and writes too.
    pub batches: u64,
}

/// Wraps a store and counts what passes through it: how tests check that
/// concurrent misses to one page read it once, or that a clean page is
/// evicted without a write.
///
/// An operation is counted when the wrapped store returns from it, so a
/// count that a test sees is a count of operations whose effects are in the
/// store: a test that waits for `writes == 1` and then reads the store sees
/// that write's bytes.
#[derive(Debug, Default)]
pub struct CountingStore<S> {
    inner: S,
    reads: AtomicU64,
    bytes_read: AtomicU64,
    writes: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    batches: AtomicU64,
}

impl<S: Store> CountingStore<S> {
    /// Counts a request of a batch the wrapped store has served.
    fn count(&self, req: &IoRequest<'_>) {
        if req.is_write() {
            self.bytes_written.fetch_add(req.len() as u64, Relaxed);
            self.writes.fetch_add(1, Release);
        } else {
            if let Some(Ok(n)) = req.result() {
                self.bytes_read.fetch_add(n as u64, Relaxed);
            }
            self.reads.fetch_add(1, Release);
        }
    }

    /// Wraps `inner` with all counts at zero.
    pub fn new(inner: S) -> Self {
        CountingStore {
            inner,
            reads: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> StoreCounts {
        StoreCounts {
            reads: self.reads.load(Acquire),
            bytes_read: self.bytes_read.load(Acquire),
            writes: self.writes.load(Acquire),
            bytes_written: self.bytes_written.load(Acquire),
            syncs: self.syncs.load(Acquire),
            batches: self.batches.load(Acquire),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for CountingStore<S> {
    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let r = self.inner.read_at(offset, buf);
        if let Ok(n) = r {
            self.bytes_read.fetch_add(n as u64, Relaxed);
        }
        self.reads.fetch_add(1, Release);
        r
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        let r = self.inner.write_at(offset, buf);
        self.bytes_written.fetch_add(buf.len() as u64, Relaxed);
        self.writes.fetch_add(1, Release);
        r
    }
    fn sync(&self) -> Result<(), StoreError> {
        let r = self.inner.sync();
        self.syncs.fetch_add(1, Release);
        r
    }
    fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        let todo: Vec<usize> = (0..batch.len())
            .filter(|&i| batch[i].result().is_none())
            .collect();
        self.inner.submit(batch);
        for i in todo {
            self.count(&batch[i]);
        }
        self.batches.fetch_add(1, Release);
    }
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        let mut open: Vec<bool> = batch.iter().map(|r| r.result().is_none()).collect();
        self.inner.submit_each(batch, &mut |i, req| {
            if std::mem::take(&mut open[i]) {
                self.count(req);
            }
            done(i, req);
        });
        self.batches.fetch_add(1, Release);
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        self.inner.punch_hole(offset, len)
    }
    fn is_private_copy(&self) -> bool {
        self.inner.is_private_copy()
    }
    // `as_mapped` stays `None`: every read passes through the counters.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn counts_operations_and_bytes() {
        let s = CountingStore::new(MemoryStore::new(vec![0; 100]));
        let mut buf = [0u8; 64];
        s.read_at(50, &mut buf).unwrap();
        s.write_at(0, &[1; 10]).unwrap();
        s.sync().unwrap();
        assert_eq!(
            s.counts(),
            StoreCounts {
                reads: 1,
                bytes_read: 50,
                writes: 1,
                bytes_written: 10,
                syncs: 1,
                batches: 0,
            }
        );
        // A batch counts once, and each of its requests as a read or write.
        let mut a = [0u8; 30];
        let mut batch = [IoRequest::read(90, &mut a), IoRequest::write(0, &[2; 5])];
        s.submit(&mut batch);
        assert_eq!(batch[0].result(), Some(Ok(10)));
        assert_eq!(batch[1].result(), Some(Ok(5)));
        assert_eq!(
            s.counts(),
            StoreCounts {
                reads: 2,
                bytes_read: 60,
                writes: 2,
                bytes_written: 15,
                syncs: 1,
                batches: 1,
            }
        );
    }
}
