//! umio's benchmark tool: one command, a subcommand per measurement, one
//! output format. Each subcommand prints an aligned table and writes it as
//! a CSV file (`umio_bench::table`); `report` runs the short version of
//! everything, writes its tables as CSV and builds `report.md` and its
//! plots from those files.
//!
//! ```text
//! cargo run --release --example bench -- <SUBCOMMAND> [--help]
//! ```
//!
//! - `direct-io`: random 4 KiB reads by one thread, umio (each fault
//!   service, with and without the kernel's page cache) beside the
//!   device's own `O_DIRECT` rate and the in-thread mechanism's floor;
//! - `random-threads`: random 4 KiB reads by N threads, umio beside
//!   Linux `mmap` with `MADV_RANDOM`;
//! - `scan-halves`: one thread over half a file, two over the halves,
//!   one over the whole: device, userfaultfd floor, umio, `mmap`;
//! - `scan-limits`: one sequential scan six ways (device, floor, umio
//!   with 4 KiB, 2 MiB and hugetlbfs pages, `mmap`);
//! - `hint-batches`: random pages hinted in batches, then touched;
//! - `report`: the report (`target/umio-report/report.md`).
//!
//! Every subcommand runs its sides in interleaved rounds, each from cold,
//! and prints the load average with each round. Put the process in a
//! memory cgroup to compare with `mmap` at one budget (the report does it
//! itself).

mod direct_io;
mod hint_batches;
mod random_threads;
mod report;
mod scan_halves;
mod scan_limits;

use std::path::{Path, PathBuf};

use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::table::Table;

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// The `--out` flag of the measuring subcommands.
fn out_arg(default: &'static str) -> cli::Arg {
    cli::opt(
        "out",
        "DIR",
        default,
        "directory of the CSV file (the report's directory for `report`)",
    )
    .value_parser(value_parser!(PathBuf))
}

/// Prints `t` under `title` and writes it to `OUT/NAME.csv`.
fn emit(t: &Table, title: &str, out: &Path) -> Result<()> {
    println!("\n{title}");
    t.print();
    let p = t.write_csv(out)?;
    println!("(written to {})", p.display());
    Ok(())
}

fn command() -> Command {
    let sub = |c: Command| c.arg(out_arg("target/umio-bench"));
    cli::command(
        "bench",
        "umio's benchmarks: each subcommand measures umio beside the device's own rates and \
         Linux mmap, prints a table and writes it as CSV; `report` runs a short version of all \
         of them and writes a Markdown report with plots.",
    )
    .subcommand_required(true)
    .arg_required_else_help(true)
    .subcommand(sub(direct_io::command()))
    .subcommand(sub(random_threads::command()))
    .subcommand(sub(scan_halves::command()))
    .subcommand(sub(scan_limits::command()))
    .subcommand(sub(hint_batches::command()))
    .subcommand(report::command().arg(out_arg("target/umio-report")))
}

fn run(m: &ArgMatches) -> Result<()> {
    let (name, sm) = m.subcommand().ok_or("no subcommand")?;
    let out: PathBuf = cli::get(sm, "out");
    println!("load average: {}", umio_bench::bench::load());
    match name {
        "direct-io" => direct_io::run(sm, &out),
        "random-threads" => random_threads::run(sm, &out),
        "scan-halves" => scan_halves::run(sm, &out),
        "scan-limits" => scan_limits::run(sm, &out),
        "hint-batches" => hint_batches::run(sm, &out),
        "report" => report::run(sm, &out),
        other => Err(format!("no subcommand {other}").into()),
    }
}

fn main() {
    let m = command().get_matches();
    if let Err(e) = run(&m) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}
