//! umio's page-cache bookkeeping, free of system calls and threads.
//!
//! - [`PageTable`]: one atomic byte per page of a region, holding its
//!   [`PageState`] and a busy bit that serializes the threads that change a
//!   page (fill, dirtying, write-back, eviction).
//! - [`FrameBudget`] and [`FrameCredit`]: lock-free accounting of the bytes
//!   the cache holds against its bound, with per-thread batches.
//! - [`EvictionPolicy`]: which resident pages to evict, sharded so that the
//!   fault path takes at most one short per-shard lock. Built-ins: [`Fifo`]
//!   and [`Clock`].
//!
//! umio-core owns the threads and the kernel calls; this crate decides and
//! counts.

mod budget;
mod page_table;
mod policy;

pub use budget::{FrameBudget, FrameCredit};
pub use page_table::{Observed, PageState, PageTable};
pub use policy::{
    Clock, EvictionPolicy, Fifo, PageKey, PageOracle, PageProbe, PolicyKind, QueuePolicy,
};
