//! The atomics under [`PageTable`](crate::PageTable) and
//! [`FrameBudget`](crate::FrameBudget): std's, or loom's when the crate is
//! built with `--cfg loom`, so that the loom models in `tests/loom.rs`
//! check the real code (crossbeam's approach).
//!
//! Run the models with
//! `RUSTFLAGS="--cfg loom" cargo test -p umio-cache --release --test loom`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU8, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU8, AtomicU64};

pub(crate) use std::sync::atomic::Ordering;
