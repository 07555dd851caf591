//! Benchmark helpers shared by umio's examples (`examples/bench`, the
//! benchmark tool; `fault_path.rs`, `policies.rs`, `bfs.rs`, `huge.rs`, `spdk_fault.rs`)
//! and benches (`benches/workloads.rs`, `fault_latency.rs`,
//! `policies.rs`). Not published: it exists so that those targets share
//! one copy of the code, compiled once, with its own lints.
//!
//! - [`bench`](mod@bench): data files, the memory budget for Linux `mmap`, umio and
//!   `mmap` mappings side by side, and the workloads;
//! - [`fault_path`]: the fault-path microbenchmark;
//! - [`hints`]: batch-hinted random reads and random reads from several
//!   threads, umio beside `mmap`, and the device's io_uring rate at a depth;
//! - [`policy_workload`]: the workload where the eviction policy matters;
//! - [`sigbus_floor`]: the floor of a miss served in the faulting thread
//!   from an `O_DIRECT` file;
//! - [`scan_floor`]: the device's own sequential rate and the floor of a
//!   scan fed through userfaultfd;
//! - [`svg`]: the report's charts;
//! - [`device`]: the block device under a file and its own rates;
//! - [`cli`]: the examples' command lines (`--help` for each);
//! - [`table`]: the benchmark tool's output, a table printed aligned and
//!   written as CSV, which the report reads back.

pub mod bench;
pub mod cli;
pub mod device;
pub mod fault_path;
pub mod hints;
pub mod policy_workload;
pub mod scan_floor;
pub mod sigbus_floor;
pub mod svg;
pub mod table;
