//! `bench hint-batches`: batch-hinted random 4 KiB reads and random reads
//! from several threads. umio hints each batch with
//! `Mapping::prefetch_ranges` (what `umap_prefetch` does), Linux `mmap`
//! with `madvise(MADV_WILLNEED)` per page; beside them the device's own
//! rate of 4 KiB `O_DIRECT` io_uring reads at the batch's depth. Then
//! random reads from `--threads` threads: umio's defaults beside `mmap`
//! with `MADV_RANDOM`. Sides alternate; each umio or `mmap` run sits in a
//! cgroup v1 memory limit of `--budget` MiB on its whole process (umio's
//! cache: the budget less `--slack`) when the machine offers one. Pages
//! read per second.

use std::fs::File;
use std::path::{Path, PathBuf};

use umio::FaultService;
use umio_bench::bench::{PAGE, bounded, load};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::hints;
use umio_bench::table::{Table, median, num};

use crate::{Result, emit};

pub fn command() -> Command {
    cli::command(
        "hint-batches",
        "Batch-hinted random 4 KiB reads (umio prefetch_ranges, mmap MADV_WILLNEED) beside the \
         device's O_DIRECT io_uring rate at depth N; random reads from several threads (umio \
         defaults, mmap MADV_RANDOM); alternating, in a cgroup memory budget when root.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf))
            .required(true),
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
}

/// Runs `f` in a child process within the budget where a cgroup can hold
/// it, else here.
fn in_budget<T>(budget_mib: u64, f: impl FnOnce() -> T) -> T {
    let mut f = Some(f);
    match bounded((budget_mib << 20) as usize, || (f.take().expect("once"))()) {
        Ok(v) => v,
        Err(_) => (f.take().expect("not run"))(),
    }
}

const NAMES: [&str; 7] = [
    "umio hinted fillers",
    "umio hinted in-thread",
    "mmap WILLNEED",
    "device io_uring qdN",
    "umio threads fillers",
    "umio threads in-thread",
    "mmap RANDOM threads",
];

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let file: PathBuf = cli::get(m, "file");
    let batch = cli::get::<usize>(m, "batch").max(1);
    let batches = cli::get::<usize>(m, "batches").max(1);
    let budget_mib: u64 = cli::get(m, "budget");
    let slack_mib: u64 = cli::get(m, "slack");
    let threads: usize = cli::get(m, "threads");
    let reads = cli::get::<usize>(m, "reads").max(1);
    let rounds = cli::get::<usize>(m, "rounds").max(1);
    let pages = File::open(&file)?.metadata()?.len() as usize / PAGE;
    if pages == 0 {
        return Err("the file is smaller than a page".into());
    }
    let cache = (budget_mib.saturating_sub(slack_mib).max(1)) << 20;
    let budget = match umio_bench::bench::cgroup_unavailable() {
        None => format!("cgroup v1 limit {budget_mib} MiB on each side"),
        Some(why) => format!("NO cgroup ({why}): mmap unbounded"),
    };
    println!(
        "{}: batches of {batch} x {batches}, {threads} threads x {reads} reads; umio cache {} \
         MiB; {budget}; pages/s",
        file.display(),
        cache >> 20
    );
    let mut cols: Vec<String> = vec!["round".into()];
    cols.extend(NAMES.iter().map(|n| n.to_string()));
    cols.push("load".into());
    let mut t = Table::new("hint-batches", cols);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); NAMES.len()];
    for round in 0..rounds {
        let keys = hints::keys(batch * batches, pages, 0x9E37_79B9_7F4A_7C15 + round as u64);
        let tkeys = hints::keys(reads, pages, 0x1234_5678 + round as u64);
        let mut r = [0.0f64; 7];
        // Alternate the order of the sides from round to round.
        let order: [usize; 7] = if round % 2 == 0 {
            [0, 1, 2, 3, 4, 5, 6]
        } else {
            [3, 2, 1, 0, 6, 5, 4]
        };
        for k in order {
            let service = if k == 0 || k == 4 {
                FaultService::Fillers
            } else {
                FaultService::InThread
            };
            r[k] = match k {
                0 | 1 => {
                    let (rate, s) = in_budget(budget_mib, || {
                        hints::umio_batches(&file, cache, service, &keys, batch)
                    })?;
                    eprintln!(
                        "  {}: {} batches, {:.1} reads per batch (max {}), {} faults, {} coalesced",
                        NAMES[k],
                        s.read_submissions,
                        s.mean_reads_in_flight(),
                        s.max_reads_in_flight,
                        s.faults,
                        s.coalesced
                    );
                    rate
                }
                2 => in_budget(budget_mib, || hints::mmap_batches(&file, &keys, batch))?,
                3 => hints::device_rate(&file, batch as u32, batch * batches)?,
                _ if threads == 0 => 0.0,
                4 | 5 => {
                    in_budget(budget_mib, || {
                        hints::umio_threads(&file, cache, service, &tkeys, threads)
                    })?
                    .0
                }
                _ => in_budget(budget_mib, || hints::mmap_threads(&file, &tkeys, threads))?,
            };
        }
        let mut row = vec![num((round + 1) as f64, 0)];
        for (k, v) in r.iter().enumerate() {
            rates[k].push(*v);
            row.push(num(*v, 0));
        }
        row.push(load());
        t.push(row);
    }
    emit(&t, "each round (pages/s):", out)?;
    let med: Vec<f64> = rates.iter().map(|v| median(v)).collect();
    let mut sum = Table::new(
        "hint-batches-summary",
        ["side", "pages/s", "/ mmap", "/ device"],
    );
    for (k, m) in med.iter().enumerate() {
        // Hinted sides against mmap WILLNEED and the device; threads
        // against mmap RANDOM.
        let (mmap, device) = if k < 4 {
            (med[2], num(m / med[3], 2))
        } else {
            (med[6], String::new())
        };
        sum.push([NAMES[k].to_string(), num(*m, 0), num(m / mmap, 2), device]);
    }
    emit(&sum, &format!("medians of {rounds} rounds:"), out)
}
