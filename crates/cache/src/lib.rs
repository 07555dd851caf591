//! umio's page-cache bookkeeping, free of system calls and threads.
//!
//! - [`PageTable`]: one atomic byte per page of a region, holding its
//!   [`PageState`] and a busy bit that serializes the threads that change a
//!   page (fill, dirtying, write-back, eviction).
//! - [`FrameBudget`] and [`FrameCredit`]: lock-free accounting of the bytes
//!   the cache holds against its bound, with per-thread batches.
//! - [`EvictionPolicy`]: which resident pages to evict, sharded so that the
//!   fault path takes at most one short per-shard lock. Built-ins: [`Fifo`],
//!   [`Clock`], [`Lru`] and the scan-resistant [`TwoQ`]; [`PolicyKind`]
//!   names them.
//!
//! umio-core owns the threads and the kernel calls; this crate decides and
//! counts.
//!
//! # What recency umio can observe
//!
//! umio sees no hardware accessed bits: a read or write of a resident page
//! never reaches it (the MMU serves it). The signals a user-space runtime
//! has are faults, and core passes each one to the policy:
//!
//! - a **miss** ([`EvictionPolicy::inserted`]): the page was not resident
//!   and a thread needed it; or a **prefetch** fill
//!   ([`EvictionPolicy::prefetched`]), which no thread asked for yet;
//! - a **first write** to a clean page (a write-protect fault,
//!   [`Touch::FirstWrite`]): seen once per residency, or once per
//!   write-back, since write-back protects the page again;
//! - a **coalesced fault** ([`Touch::Coalesced`]): a thread faulted on a
//!   page another thread was filling or changing.
//!
//! The last two also set the page's REFERENCED bit
//! ([`PageTable::mark_referenced`](crate::PageTable::mark_referenced)),
//! which [`Clock`] reads as its second-chance bit. A miss itself does not
//! set it, or every page would get a second chance.
//!
//! So a page read over and over while resident looks, to any policy here,
//! exactly like a page read once: FIFO, CLOCK and LRU order a read-only
//! working set by fill time. What does tell a hot page from a cold one is
//! the **miss history**: a page missed again soon after it was evicted was
//! needed again. [`TwoQ`] remembers the keys of recently evicted pages (its
//! ghost list, A1out) and gives a page that misses while remembered a place
//! in its protected queue (Am), where a one-off scan, whose pages each miss
//! once, never reaches it.
//!
//! | policy | order | signals used | scan-resistant |
//! |---|---|---|---|
//! | [`Fifo`] | fill order | misses | no |
//! | [`Clock`] | fill order, second chance | misses, REFERENCED bit | no |
//! | [`Lru`] | last observed use | misses, first writes, coalesced faults | no |
//! | [`TwoQ`] | A1in FIFO, Am by last use, A1out ghosts | misses and their history, first writes, coalesced faults | yes |

mod budget;
mod lists;
mod lru;
mod page_table;
mod policy;
mod shards;
mod sync;
mod two_q;

pub use budget::{FrameBudget, FrameCredit};
pub use lru::Lru;
pub use page_table::{Observed, PageState, PageTable};
pub use policy::{
    Clock, EvictionPolicy, Fifo, PageKey, PageOracle, PageProbe, PolicyKind, QueuePolicy, Touch,
    UnknownName,
};
pub use two_q::{TwoQ, TwoQConfig};

#[cfg(all(test, not(loom)))]
mod sim_tests;
