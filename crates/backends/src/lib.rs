//! Storage backends for umio.
//!
//! A [`Store`] is where a mapped region's bytes live: umio reads a page from
//! it on a miss and writes dirty pages back to it. This crate knows nothing
//! of page faults; it only moves bytes.
//!
//! Implementations here:
//! - [`FileStore`]: a file or block device through `pread`/`pwrite`/`fdatasync`,
//!   or a nameless scratch file ([`FileStore::scratch`]).
//! - [`UncachedFileStore`]: a file read and written without leaving a
//!   second copy in the kernel's page cache: `O_DIRECT` through io_uring
//!   where the file system supports it, drop-behind buffered I/O elsewhere.
//!   What `Runtime::map_file` uses by default.
//! - [`MemoryStore`]: a growable byte vector, for tests and scratch regions.
//! - [`CopyOnWrite`]: a private view of another store: written pages go to
//!   a scratch file, the store below is never written (`MAP_PRIVATE`).
//! - [`CountingStore`]: wraps another store and counts its operations.
//! - [`FaultyStore`]: wraps another store and fails operations on a
//!   schedule, for reliability tests.
//! - [`UringStore`]: a file or block device through io_uring, optionally
//!   `O_DIRECT`, with many requests in flight per batch.
//! - [`DaxStore`]: byte-addressable memory (a DAX device or file, or any
//!   file mapped shared): fills copy straight from it, write-back uses
//!   non-temporal stores.
//! - `RadosStore` (cargo feature `rados`): a set of Ceph RADOS objects
//!   through librados, with many asynchronous requests in flight.
//! - `SpdkStore` (cargo feature `spdk`): an SPDK bdev (NVMe, NVMe-oF,
//!   malloc, aio...) served by a polling thread, many requests in flight.
//!
//! # Synchronous and batched stores
//!
//! The simplest store implements [`read_at`](Store::read_at) and
//! [`write_at`](Store::write_at) and nothing else. A store that can work on
//! many requests at once (io_uring, an SPDK queue pair, a network store)
//! also implements [`submit`](Store::submit): umio hands it a batch of
//! [`IoRequest`]s (the runs of one prefetch, the dirty runs of one flush or
//! one eviction batch) and the store submits them all, polls or waits for
//! their completions in whatever way suits it, and returns when every
//! request has its result. [`queue_depth`](Store::queue_depth) tells umio
//! how large to make its batches.
//!
//! ```
//! use umio_backends::{MemoryStore, Store};
//! let store = MemoryStore::new(vec![7u8; 8192]);
//! let mut page = [0u8; 4096];
//! assert_eq!(store.read_at(4096, &mut page).unwrap(), 4096);
//! assert!(page.iter().all(|&b| b == 7));
//! ```

mod counting;
mod cow;
mod dax;
mod error;
mod faulty;
mod file;
mod memory;
#[cfg(feature = "rados")]
mod rados;
mod request;
#[cfg(feature = "spdk")]
mod spdk;
mod sys;
mod uncached;
mod uring;

pub use counting::{CountingStore, StoreCounts};
pub use cow::CopyOnWrite;
pub use dax::{DaxStore, Persistence};
pub use error::{StoreError, StoreOp};
pub use faulty::{FaultTrigger, FaultyStore};
pub use file::FileStore;
pub use memory::MemoryStore;
#[cfg(feature = "rados")]
pub use rados::{RadosError, RadosOptions, RadosStats, RadosStore};
pub use request::IoRequest;
#[cfg(feature = "spdk")]
pub use spdk::{SpdkEnv, SpdkEnvOptions, SpdkError, SpdkStats, SpdkStore};
pub use uncached::{CacheMode, UncachedFileStore, UncachedStats, cached_bytes, dio_alignment};
pub use uring::{UringOptions, UringStats, UringStore, WRITE_SIZE_BUCKETS};

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
///
/// **[`read_at`](Store::read_at) and [`len`](Store::len) may run in a
/// signal handler**: under umio-core's in-thread fault service
/// (`FaultService::InThread`) a miss is served by the faulting thread in
/// its SIGBUS handler, which reads one page with `read_at`, interrupting
/// whatever that thread was doing. There, take no lock that the
/// application may hold while it touches mapped memory, do not allocate
/// (the interrupted code may hold the allocator's lock), do not log, and
/// do not panic (a panic in the handler aborts the process). System calls
/// (`pread`, say) are fine, and so is reading another umio mapping (that
/// fault is served in turn, nested). The batch path
/// ([`submit`](Store::submit)), writes and `sync` run on umio's threads
/// only.
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

    /// Performs every request of `batch`, possibly concurrently and in any
    /// order, and returns once each has its result
    /// ([`IoRequest::result`]). A read has [`read_at`](Store::read_at)'s
    /// meaning (short only at the end of the store), a write
    /// [`write_at`](Store::write_at)'s (all bytes, or an error). umio never
    /// puts two overlapping requests in one batch. Requests that already
    /// carry a result (a wrapper such as [`FaultyStore`] failed them) are
    /// left alone.
    ///
    /// The default performs them one after another with `read_at` and
    /// `write_at`. A store with a submission queue (io_uring, an SPDK queue
    /// pair) submits them all, then polls or waits for their completions.
    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        for req in batch.iter_mut().filter(|r| r.result().is_none()) {
            req.perform(self);
        }
    }

    /// [`submit`](Store::submit), calling `done(i, &mut batch[i])` once
    /// for every request of `batch` as soon as it has its result, in the
    /// order the results arrive (requests that carried a result already
    /// first): umio installs each page as its read completes, while the
    /// others are still in flight. A store with a submission queue keeps
    /// it full meanwhile: as each request completes, it submits the next,
    /// up to its [`queue_depth`](Store::queue_depth). `done` runs on the
    /// calling thread; it may take a while (a `UFFDIO_COPY`), so submit the
    /// next requests before calling it.
    ///
    /// The default calls [`submit`](Store::submit), then `done` for each
    /// request in order: right for every store, the results arriving
    /// together.
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        self.submit(batch);
        for (i, req) in batch.iter_mut().enumerate() {
            done(i, req);
        }
    }

    /// How many requests the store usefully works on at once; umio keeps
    /// up to this many of a batch in flight. The default, 1, suits a
    /// synchronous store.
    fn queue_depth(&self) -> usize {
        1
    }

    /// The store's bytes, when the store lives in memory the process can
    /// read directly (a DAX device or file mapped into the process). umio
    /// then fills a page by copying straight from here into place, with no
    /// staging copy, and reads through [`read_at`](Store::read_at) only the
    /// last, partial page. The slice must stay valid, and its length
    /// equal to [`len`](Store::len), for as long as the store lives.
    fn as_mapped(&self) -> Option<&[u8]> {
        None
    }

    /// Whether the store keeps a private copy of what is written to it
    /// rather than writing what it stands for (a `MAP_PRIVATE` view:
    /// [`CopyOnWrite`]). umio then never fills a page dirty on a guess
    /// that it will be written (umio-core's `Builder::write_prediction`):
    /// writing an unchanged page back would copy it for good. Default:
    /// false.
    fn is_private_copy(&self) -> bool {
        false
    }

    /// Discards the bytes `[offset, offset + len)`: they read as zeros
    /// afterwards, and the store may free their space (`fallocate`'s
    /// `PUNCH_HOLE` on a file; `MADV_REMOVE` on a umio mapping asks for
    /// it). The length is unchanged. Default: `EOPNOTSUPP`, for stores
    /// that cannot.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        let _ = len;
        Err(StoreError::new(
            StoreOp::PunchHole,
            offset,
            libc::EOPNOTSUPP,
        ))
    }
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
    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        (**self).submit(batch)
    }
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        (**self).submit_each(batch, done)
    }
    fn queue_depth(&self) -> usize {
        (**self).queue_depth()
    }
    fn as_mapped(&self) -> Option<&[u8]> {
        (**self).as_mapped()
    }
    fn is_private_copy(&self) -> bool {
        (**self).is_private_copy()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        (**self).punch_hole(offset, len)
    }
}
