//! umio's runtime: files and other stores mapped into memory, their page
//! faults served in user space through userfaultfd.
//!
//! See [`Runtime`] to start, [`Mapping`] for what a mapped region offers,
//! and `docs/ARCHITECTURE.md` for how a fault is served.

// Where things live: docs/ARCHITECTURE.md, "Where things live".
mod autosize;
mod config;
mod create;
mod dirty;
mod env;
mod error;
mod evict;
mod fault;
mod fill;
mod fork;
mod fork_lock;
mod handler_stacks;
mod handover;
pub mod histogram;
mod huge;
mod in_thread;
pub mod keeper;
mod kernel;
mod mapping;
mod misses;
mod move_scratch;
mod padded;
pub mod parse;
mod pin;
mod predict;
mod prefetch;
mod process;
mod progress;
mod promote;
mod rcu;
mod region;
mod removals;
mod remove;
mod report;
mod runs;
mod runtime;
mod scratch;
mod shared;
mod spin;
mod stats;
mod store_slots;
mod sys;
mod threads;
mod trace;
mod unmap;
mod update;
mod writeback;

pub use autosize::DEFAULT_AUTO_SHARE;
pub use config::{
    Builder, DEFAULT_EVICTORS, DEFAULT_MAX_FAULT_EVENTS, DEFAULT_PAGE_SIZE, DEFAULT_READ_AHEAD,
    DEFAULT_REMOVE_EVENTS, DEFAULT_WATERMARKS, MAX_PAGE_SIZE, MIN_PAGE_SIZE, RuntimeConfig,
    default_cache_bytes, default_fillers,
};
pub use env::{EnvCache, EnvConfig, EnvPrefetch};
pub use error::{Errno, Error, Result};
pub use handler_stacks::in_fault_handler;
pub use histogram::{FaultLatency, LATENCY_BUCKETS};
pub use huge::{HUGE_PAGE_SIZE, PromoteAlways, PromoteKind, PromoteSequential, Promoter};
pub use kernel::{DirtyTracking, FaultService, KernelFeatures, UffdMode, kernel_features};
pub use mapping::{IntoMutError, MapOptions, Mapping, MappingMut};
pub use parse::parse_size;
pub use prefetch::{
    Advice, Fault, FaultKind, FetchList, Miss, PrefetchKind, Prefetcher, ReadAhead, Stride,
    UncheckedAdvice,
};
pub use process::{ProcessConfig, ProcessLock, ProcessRuntime, StartFailure};
pub use runtime::Runtime;
pub use stats::{RegionStats, Stats, format_bytes};
pub use threads::on_runtime_thread;
pub use trace::{FaultTrace, now as trace_clock};
pub use update::Updated;
