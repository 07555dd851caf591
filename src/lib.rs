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
//! let map = rt.map_file(&file, umio::MapOptions::new())?;
//! let sum: u64 = map.as_slice().iter().map(|&b| b as u64).sum();
//! println!("{sum}");
//! # Ok(()) }
//! ```

pub use umio_core::*;

/// Storage backends: the [`Store`] trait and its implementations.
pub use umio_backends as backends;
/// Page states, frame budget and eviction policies.
pub use umio_cache as cache;

pub use umio_backends::{Store, StoreError};
pub use umio_cache::{EvictionPolicy, PolicyKind};
