//! The fault path in cycles: one umio miss broken into its steps (trap and
//! delivery to the filler, event read, lookup, cache reservation, store
//! read, `UFFDIO_COPY`, wake-up), beside the floor of the mechanism (a
//! minimal handler of our own) and Linux's own minor, anonymous and major
//! faults, and the published ring-0 figures.
//!
//! `cargo run --release --example fault_path [faults]` (root: userfaultfd
//! in full mode, a loop mount for the major-fault row; a few seconds).

use umio_bench::bench;
use umio_bench::cli::{self, Arg, value_parser};
use umio_bench::fault_path;

fn main() {
    let m = cli::command(
        "fault_path",
        "One umio miss broken into its steps in cycles, beside the floor of the mechanism and \
         Linux's own minor, anonymous and major faults.",
    )
    .arg(
        Arg::new("faults")
            .value_name("FAULTS")
            .default_value("2000")
            .value_parser(value_parser!(usize))
            .help("faults measured per row"),
    )
    .get_matches();
    let faults: usize = cli::get(&m, "faults");
    let run = || -> bench::Result<()> {
        let data = bench::Data::new(256, true)?;
        if let Some(why) = &data.no_ext4 {
            eprintln!("major-fault row skipped: {why}");
        }
        let fp = fault_path::run(&data, faults, &mut |name| eprintln!("measuring {name}"))?;
        print!("{}", fault_path::markdown(&fp));
        let (pread, mapped) = fault_path::ratio_to_floor(&fp);
        println!(
            "umio / floor (median 4 KiB miss): {pread:.2}x with pread (beside the floor + \
             pread); {mapped:.2}x over the mapped file (beside the bare floor)"
        );
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("fault_path: {e}");
        std::process::exit(1);
    }
}
