//! libumio: umio's C ABI.
//!
//! `cargo build --release -p umio-ffi` builds `target/release/libumio.so`
//! and `libumio.a`; `install.sh` installs them as a distribution ships a C
//! library (`libumio.so.0`, symbol versions from `libumio.map`, `umio.pc`).
//! C programs include either or both of:
//!
//! - `umap/umap.h`: LLNL UMap 2.x's API (`umap`, `uunmap`, `umap_flush`,
//!   `umap_prefetch`, `umap_fetch_and_pin`, the `umapcfg_get_*` getters and
//!   the `UMAP_*` environment), so that programs written for UMap build
//!   unchanged with `-I crates/ffi/include -lumio`; its C++ API
//!   (`Umap::umap_ex`, `umap/store/*.h`) is header-only, over `umio_map`
//!   with a store of callbacks;
//! - `umio.h`: umio's own API, generated from [`native`] and [`store`] by
//!   cbindgen: `umio_map` with options (page size, prefetch, a store
//!   written in C), partial unmap, flush, prefetch, advice, pinning,
//!   per-mapping counters, runtime configuration, and eviction and
//!   prefetch policies written in C ([`policy`], [`prefetcher`]).
//!
//! The callback tables a C program hands over (a store, an eviction,
//! prefetch or promotion policy) are each copied into one
//! `OwnedOps` (`ops.rs`), which is `Send` and `Sync` on the table's contract
//! and calls its `release` exactly once.
//!
//! This crate only translates: C arguments to umio-core calls, umio's
//! errors to errno. Every export runs inside [`boundary::ffi_boundary!`],
//! which catches panics and sets a positive errno; the log prints at
//! `UMAP_LOG_LEVEL`'s level, by default warnings and errors ([`logging`]).
//!
//! [`version`] gives the version macros and `umio_version()`.
//!
//! The process has one runtime, started when the first region is mapped
//! ([`config`]); mappings are found by address in [`registry`], and
//! written back at exit ([`exit`]).

mod boundary;
mod config;
mod exit;
mod extensible;
mod logging;
mod map;
mod monitor;
pub mod native;
mod ops;
pub mod policy;
pub mod prefetcher;
pub mod promoter;
mod rados;
mod registry;
pub mod store;
pub mod umap;
pub mod version;
