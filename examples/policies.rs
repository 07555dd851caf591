//! Eviction policies side by side, on the workload where the choice
//! matters: a hot set that fits in the cache, read while a scan of a file
//! larger than the cache runs alongside; then a cold sequential scan. Each
//! umio policy (FIFO, CLOCK, LRU, 2Q) and Linux `mmap` under a cgroup v1
//! memory limit of the cache's size run it on one file on `/dev/shm`.
//!
//! ```text
//! cargo run --release --example policies
//! ```
//!
//! umio sees no accessed bits, so FIFO, CLOCK and LRU all evict a
//! read-only hot set in fill order: the scan flushes it. 2Q remembers the
//! pages it evicted and protects the ones that miss again: the hot set
//! stays. The example checks that 2Q keeps a hot-set hit ratio of at least
//! 0.9 where FIFO does not, and exits with an error otherwise.
//!
//! Needs root: userfaultfd, and for the mmap row a cgroup, a loop device
//! and a mount (see `crates/bench/src/policy_workload.rs`); without them the
//! mmap row is skipped.

use umio_bench::policy_workload;

use std::process::ExitCode;

use policy_workload::{Params, print_table, run_all};

fn main() -> ExitCode {
    umio_bench::cli::command("policies", "Eviction policies side by side (FIFO, CLOCK, LRU, 2Q and Linux mmap under a cgroup limit) on a hot set read while a scan runs, then a cold scan.").get_matches();
    let p = Params {
        file_mib: 128,
        cache_mib: 16,
        page_kib: 64,
        hot_mib: 4,
        scan_per_op: 8,
        steps: 4000,
        warmup: 1000,
    };
    let rows = match run_all(&p) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("policies: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_table(&p, &rows);
    let ratio = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| r.hot_hit_ratio)
    };
    let (two_q, fifo) = (ratio("umio 2q"), ratio("umio fifo"));
    match (two_q, fifo) {
        (Some(q), Some(f)) if q >= 0.9 && f < 0.9 => {
            println!("check: 2q keeps the hot set ({q:.3} >= 0.9), fifo does not ({f:.3})");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("check failed: 2q {two_q:?}, fifo {fifo:?}");
            ExitCode::FAILURE
        }
    }
}
