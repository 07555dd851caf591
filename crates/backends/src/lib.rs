//! Storage backends for umio.
//!
//! A [`Store`] is where a mapped region's bytes live: umio reads a page from
//! it on a miss and writes dirty pages back to it. This crate knows nothing
//! of page faults; it only moves bytes.
//!
//! Implementations here:
//! - [`FileStore`]: a file or block device through `pread`/`pwrite`/`fdatasync`.
//! - [`MemoryStore`]: a growable byte vector, for tests and scratch regions.
//! - [`CountingStore`]: wraps another store and counts its operations.
//! - [`FaultyStore`]: wraps another store and fails operations on a
//!   schedule, for reliability tests.
//!
//! ```
//! use umio_backends::{MemoryStore, Store};
//! let store = MemoryStore::new(vec![7u8; 8192]);
//! let mut page = [0u8; 4096];
//! assert_eq!(store.read_at(4096, &mut page).unwrap(), 4096);
//! assert!(page.iter().all(|&b| b == 7));
//! ```

mod counting;
mod error;
mod faulty;
mod file;
mod memory;

pub use counting::{CountingStore, StoreCounts};
pub use error::{StoreError, StoreOp};
pub use faulty::{FaultTrigger, FaultyStore};
pub use file::FileStore;
pub use memory::MemoryStore;

/// A backing store for mapped regions.
///
/// Calls come from several umio threads at once (fillers, evictors, the
/// thread calling `flush`), so implementations are `Send + Sync` and must
/// allow concurrent reads and writes of disjoint ranges. umio never issues
/// two overlapping writes at once for one region, but two regions mapping
/// the same store may.
///
/// Errors are small `Copy` values ([`StoreError`]) because they travel on
/// the fault path.
pub trait Store: Send + Sync + 'static {
    /// The store's length in bytes.
    fn len(&self) -> Result<u64, StoreError>;

    /// Whether the store is empty.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Sets the store's length, extending with zeros or truncating.
    fn set_len(&self, len: u64) -> Result<(), StoreError>;

    /// Reads into `buf` from `offset`, looping over short reads, and returns
    /// the number of bytes read: fewer than `buf.len()` only at the end of
    /// the store. Bytes of `buf` past the returned count are left untouched.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError>;

    /// Writes all of `buf` at `offset`, extending the store if needed.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError>;

    /// Makes every write that has returned durable.
    fn sync(&self) -> Result<(), StoreError>;

    /// Whether [`write_at`](Store::write_at) and [`set_len`](Store::set_len)
    /// are allowed.
    fn is_writable(&self) -> bool;

    /// The alignment, in bytes, that offsets and lengths of reads and writes
    /// must have. umio's fill unit is always a multiple of 4 KiB, so any
    /// store whose alignment divides 4096 works with every region.
    fn alignment(&self) -> usize {
        1
    }

    /// A short name for logs and errors.
    fn name(&self) -> &str;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn len(&self) -> Result<u64, StoreError> {
        (**self).len()
    }
    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        (**self).set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        (**self).write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), StoreError> {
        (**self).sync()
    }
    fn is_writable(&self) -> bool {
        (**self).is_writable()
    }
    fn alignment(&self) -> usize {
        (**self).alignment()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}
