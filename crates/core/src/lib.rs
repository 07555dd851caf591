//! umio's runtime: files and other stores mapped into memory, their page
//! faults served in user space through userfaultfd.
//!
//! See [`Runtime`] to start, [`Mapping`] for what a mapped region offers,
//! and `docs/ARCHITECTURE.md` for how a fault is served.

mod autosize;
mod error;
mod evict;
mod fault;
pub mod histogram;
mod huge;
mod mapping;
mod parse;
mod prefetch;
mod progress;
mod ranges;
mod region;
mod runtime;
mod spin;
mod stats;
mod store_slots;
mod sys;
mod trace;
mod writeback;

pub use error::{Error, Result};
pub use histogram::{FaultLatency, LATENCY_BUCKETS};
pub use huge::{HUGE_PAGE_SIZE, PromoteAlways, PromoteKind, PromoteSequential, Promoter};
pub use mapping::{MapOptions, Mapping, MappingMut};
pub use prefetch::{
    Advice, Fault, FaultKind, FetchList, Miss, PrefetchKind, Prefetcher, ReadAhead, Stride,
};
pub use runtime::{
    Builder, DEFAULT_AUTO_SHARE, KernelFeatures, MAX_PAGE_SIZE, MIN_PAGE_SIZE, Runtime, UffdMode,
    default_cache_bytes, default_fillers, kernel_features,
};
pub use stats::{RegionStats, Stats};
pub use trace::{FaultTrace, now as trace_clock};
