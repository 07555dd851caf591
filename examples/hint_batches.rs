//! Application-driven I/O at the device's depth (issue 30), one process,
//! sides alternating, each run cold: random 4 KiB pages of a file in
//! batches of N, each batch hinted then touched (umio `prefetch_ranges`,
//! as `umap_prefetch`; Linux `mmap` + `MADV_WILLNEED` per page) beside the
//! device's own rate at depth N (`O_DIRECT` io_uring, the queue kept
//! full); then random pages from `--threads` threads (umio default
//! settings, `mmap` `MADV_RANDOM`). Every umio and `mmap` run is inside a
//! cgroup v1 memory limit of `--budget` MiB when one can be made (root),
//! so both sides' memory counts; umio's cache is the budget less
//! `--slack` MiB for the process. Pages per second; medians.
//!
//! ```text
//! cargo run --release --example hint_batches -- --file PATH [--batch N] [--batches N]
//!     [--budget MiB] [--slack MiB] [--threads N] [--reads N] [--rounds N]
//! ```

use std::error::Error;
use std::fs::File;
use std::path::PathBuf;

use umio::FaultService;
use umio_bench::bench::bounded;
use umio_bench::cli::{self, value_parser};
use umio_bench::hints;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const PAGE: usize = 4096;

struct Args {
    file: PathBuf,
    batch: usize,
    batches: usize,
    budget_mib: u64,
    slack_mib: u64,
    threads: usize,
    reads: usize,
    rounds: usize,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "hint_batches",
        "Batch-hinted random 4 KiB reads (umio prefetch_ranges, mmap MADV_WILLNEED) beside the \
         device's O_DIRECT io_uring rate at depth N; random reads from several threads (umio \
         defaults, mmap MADV_RANDOM); alternating, in a cgroup memory budget when root.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf)),
    )
    .arg(
        cli::opt("batch", "N", "32", "pages per hint, and the device's depth")
            .value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("batches", "N", "1500", "batches per run").value_parser(value_parser!(usize)))
    .arg(
        cli::opt("budget", "MiB", "256", "memory budget of each side")
            .value_parser(value_parser!(u64)),
    )
    .arg(
        cli::opt(
            "slack",
            "MiB",
            "32",
            "of the budget, left to umio's process beside its cache",
        )
        .value_parser(value_parser!(u64)),
    )
    .arg(
        cli::opt(
            "threads",
            "N",
            "2",
            "threads of the random-read runs (0: none)",
        )
        .value_parser(value_parser!(usize)),
    )
    .arg(
        cli::opt("reads", "N", "40000", "pages read per random-read run")
            .value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .get_matches();
    Ok(Args {
        file: cli::get_opt(&m, "file").ok_or("--file is required")?,
        batch: cli::get::<usize>(&m, "batch").max(1),
        batches: cli::get::<usize>(&m, "batches").max(1),
        budget_mib: cli::get(&m, "budget"),
        slack_mib: cli::get(&m, "slack"),
        threads: cli::get(&m, "threads"),
        reads: cli::get::<usize>(&m, "reads").max(1),
        rounds: cli::get::<usize>(&m, "rounds").max(1),
    })
}

/// Runs `f` in the budget's cgroup where one can be made.
fn in_budget<T>(a: &Args, f: impl FnOnce() -> T) -> T {
    let mut f = Some(f);
    match bounded((a.budget_mib << 20) as usize, || {
        (f.take().expect("once"))()
    }) {
        Ok(v) => v,
        Err(_) => (f.take().expect("not run"))(),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let a = args()?;
    let pages = File::open(&a.file)?.metadata()?.len() as usize / PAGE;
    if pages == 0 {
        return Err("the file is smaller than a page".into());
    }
    let cache = (a.budget_mib.saturating_sub(a.slack_mib).max(1)) << 20;
    let budget = match umio_bench::bench::cgroup_unavailable() {
        None => format!("cgroup v1 limit {} MiB on each side", a.budget_mib),
        Some(why) => format!("NO cgroup ({why}): mmap unbounded"),
    };
    println!(
        "{}: batches of {} x {}, {} threads x {} reads; umio cache {} MiB; {budget}; pages/s",
        a.file.display(),
        a.batch,
        a.batches,
        a.threads,
        a.reads,
        cache >> 20
    );
    let names = [
        "umio hinted (fillers)",
        "umio hinted (in-thread)",
        "mmap WILLNEED",
        "device io_uring qdN",
        "umio threads (fillers)",
        "umio threads (in-thread)",
        "mmap RANDOM threads",
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..a.rounds {
        let keys = hints::keys(
            a.batch * a.batches,
            pages,
            0x9E37_79B9_7F4A_7C15 + round as u64,
        );
        let tkeys = hints::keys(a.reads, pages, 0x1234_5678 + round as u64);
        let mut r = [0.0f64; 7];
        // Alternate which side goes first.
        let order: [usize; 7] = if round % 2 == 0 {
            [0, 1, 2, 3, 4, 5, 6]
        } else {
            [3, 2, 1, 0, 6, 5, 4]
        };
        for k in order {
            r[k] = match k {
                0 | 1 => {
                    let service = if k == 0 {
                        FaultService::Fillers
                    } else {
                        FaultService::InThread
                    };
                    let (rate, s) = in_budget(&a, || {
                        hints::umio_batches(&a.file, cache, service, &keys, a.batch)
                    })?;
                    eprintln!(
                        "  {}: {} batches, {:.1} reads per batch (max {}), {} faults, {} coalesced",
                        names[k],
                        s.read_submissions,
                        s.mean_reads_in_flight(),
                        s.max_reads_in_flight,
                        s.faults,
                        s.coalesced
                    );
                    rate
                }
                2 => in_budget(&a, || hints::mmap_batches(&a.file, &keys, a.batch))?,
                3 => hints::device_rate(&a.file, a.batch as u32, a.batch * a.batches)?,
                _ if a.threads == 0 => 0.0,
                4 | 5 => {
                    let service = if k == 4 {
                        FaultService::Fillers
                    } else {
                        FaultService::InThread
                    };
                    in_budget(&a, || {
                        hints::umio_threads(&a.file, cache, service, &tkeys, a.threads)
                    })?
                    .0
                }
                _ => in_budget(&a, || hints::mmap_threads(&a.file, &tkeys, a.threads))?,
            };
        }
        print!("round {round}:");
        for (k, v) in r.iter().enumerate() {
            rates[k].push(*v);
            print!(" {} {:.1}k;", names[k], v / 1e3);
        }
        println!(" load {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    }
    println!("medians of {} rounds:", a.rounds);
    let med: Vec<f64> = rates.iter_mut().map(|v| median(v)).collect();
    for (k, m) in med.iter().enumerate() {
        let (base, what) = if k < 4 {
            (med[2], "mmap WILLNEED")
        } else {
            (med[6], "mmap RANDOM")
        };
        println!(
            "  {:<26} {:>7.1} k/s  {:.2}x {what}{}",
            names[k],
            m / 1e3,
            m / base,
            if k < 4 {
                format!(", {:.2}x the device at depth {}", m / med[3], a.batch)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
