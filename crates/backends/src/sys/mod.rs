//! System calls and libc calls of the stores, and the `io-uring` crate's
//! calls that hand it memory.
//!
//! The rule, as in umio-core's `sys`: a system call or a libc call is made
//! only here, through a safe wrapper where its soundness does not depend
//! on the caller, an `unsafe fn` with a `# Safety` section where it does
//! (a buffer handed to io_uring). One interface per module:
//!
//! - `fd.rs`: a descriptor's status flags, direct I/O alignment
//!   (`statx`), punching holes (`fallocate`), page-cache advice
//!   (`posix_fadvise`);
//! - `mm.rs`: a file mapped shared (`DaxStore`), anonymous memory (the
//!   io_uring staging buffers), `mincore` of a file;
//! - `uring.rs`: registering buffers, queueing entries, waiting for
//!   completions;
//! - `thread.rs` (feature `spdk`): `sched_getcpu`, `atexit`.
//!
//! The C libraries of the optional stores have their declarations and
//! wrappers beside them: `rados/sys.rs` (librados, safe wrappers) and
//! `spdk/sys.rs` (SPDK's declarations; `spdk/poller.rs`, the one thread
//! that calls SPDK, calls them, each call with its `// SAFETY:` line).
//!
//! `unsafe` elsewhere in the crate makes no system call: the calls of
//! `uring.rs`'s unsafe functions, whose buffers the submit loop keeps
//! alive until their completions; pointers and slices into a store's own
//! memory (`uring.rs`'s staging slots, `uncached.rs`'s aligned blocks,
//! from the global allocator); `dax.rs`'s non-temporal copies (CPU
//! instructions); the buffers of a RADOS or SPDK request; and the tests'
//! aligned buffers.

pub(crate) mod fd;
pub(crate) mod mm;
#[cfg(feature = "spdk")]
pub(crate) mod thread;
pub(crate) mod uring;
