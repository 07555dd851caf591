//! umio: map files and devices into memory and serve their page faults in
//! user space, out of a page cache of bounded size that you control.
//!
//! This facade re-exports the workspace's crates: [`Runtime`] and
//! [`Mapping`] from umio-core, the stores of umio-backends under
//! [`backends`], the page-cache pieces and eviction policies of umio-cache
//! under [`cache`].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = umio::Runtime::builder().cache_bytes(256 << 20).build()?;
//! let file = std::fs::File::open("data.bin")?;
//! // SAFETY: nothing else changes data.bin while the mapping lives.
//! let map = unsafe { rt.map_file(&file, umio::MapOptions::new()) }?;
//! let sum: u64 = map.iter().map(|&b| b as u64).sum();
//! println!("{sum}");
//! # Ok(()) }
//! ```
//!
//! # How umio differs from memmap2
//! The API reads as memmap2's: a [`Mapping`] is its `Mmap` (`Deref` to
//! `[u8]`), a [`MappingMut`] its `MmapMut` (`DerefMut`, `flush`,
//! `flush_range`, `flush_async`), [`Runtime::map_copy`] its `map_copy`, and
//! mapping is `unsafe` for the same reason (see [`Runtime::map_file`]). What
//! differs is who serves the page faults:
//! - memmap2 maps through the kernel (`mmap(2)`), whose page cache holds
//!   the pages and decides what to read ahead and evict. umio serves every
//!   fault itself, through userfaultfd, out of a cache whose size
//!   ([`Builder::cache_bytes`], changeable at run time), eviction policy
//!   ([`cache`]), prefetch ([`Prefetcher`]) and page size you choose.
//! - Its pages come from any [`Store`] ([`backends`]: files with or
//!   without the kernel's page cache, io_uring, persistent memory, memory,
//!   Ceph RADOS, SPDK, or your own), not only from files.
//! - It caches pages in the process, so a mapping is coherent with
//!   `read(2)`/`write(2)` of its file and with other mappings of it when
//!   you say so ([`Mapping::write_at`], [`Mapping::invalidate_range`];
//!   see [`Mapping`]'s coherence section), not by itself as the kernel's
//!   page cache makes it; and a region is not inherited by `fork`.
//! - It needs Linux userfaultfd, and background threads (or, with
//!   [`FaultService::InThread`], a SIGBUS handler).

pub use umio_core::*;

/// Storage backends: the [`Store`] trait and its implementations.
#[doc(inline)]
pub use umio_backends as backends;
/// Page states, frame budget and eviction policies.
#[doc(inline)]
pub use umio_cache as cache;

pub use umio_backends::{Store, StoreError};
pub use umio_cache::{EvictionPolicy, PolicyKind};
