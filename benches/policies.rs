//! Benchmark: eviction policies on a hot set read while a scan runs
//! alongside, and on a cold sequential scan; every umio policy side by side
//! with Linux `mmap` under a cgroup v1 memory limit of the cache's size.
//! The data file is on `/dev/shm` (tmpfs); see
//! `crates/bench/src/policy_workload.rs` for the workload and how the mmap
//! runs are bounded. `cargo bench --bench policies` (root: userfaultfd,
//! cgroups, a loop mount); about half a minute.

use umio_bench::policy_workload;

use policy_workload::{Params, print_table, run_all};

fn main() {
    let p = Params {
        file_mib: 256,
        cache_mib: 32,
        page_kib: 64,
        hot_mib: 8,
        scan_per_op: 8,
        steps: 4000,
        warmup: 1000,
    };
    match run_all(&p) {
        Ok(rows) => print_table(&p, &rows),
        Err(e) => {
            eprintln!("policies bench: {e}");
            std::process::exit(1);
        }
    }
}
