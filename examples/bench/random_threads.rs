//! `bench random-threads`: out-of-core random 4 KiB reads by N threads
//! over an existing file: umio (each fault service, no read-ahead) beside
//! Linux `mmap` with `MADV_RANDOM`, in one process, one after the other,
//! alternating, as many rounds as asked.
//!
//! Put the process in a memory cgroup to compare at one budget (both
//! sides' memory is then counted by the kernel: umio's cache, and the page
//! cache `mmap` fills):
//!
//! ```text
//! mkdir /sys/fs/cgroup/memory/umio-bench
//! echo 256M > /sys/fs/cgroup/memory/umio-bench/memory.limit_in_bytes
//! echo $$ > /sys/fs/cgroup/memory/umio-bench/tasks
//! cargo run --release --example bench -- random-threads --file /mnt/fast/data --threads 2 --cache 192
//! ```
//!
//! umio's side takes `UMIO_*` settings from the environment
//! (`Builder::from_env`: `UMIO_FILLERS=3`, say) over the bench's own.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};
use umio_bench::bench::{Mmap, PAGE, drop_cache, load, random_pages, touch_pages};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::table::{Table, num};

use crate::{Result, emit};

pub fn command() -> Command {
    cli::command(
        "random-threads",
        "Random 4 KiB reads by N threads over a file: umio with filler threads, umio in-thread, \
         and Linux mmap with MADV_RANDOM, alternating; reads per second. Run it in a memory \
         cgroup to compare at one budget. UMIO_* variables apply to umio's side.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf))
            .required(true),
    )
    .arg(cli::opt("threads", "N", "1", "reading threads").value_parser(value_parser!(usize)))
    .arg(
        cli::opt("reads", "N", "100000", "reads per thread per run")
            .value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("cache", "MiB", "192", "umio's cache").value_parser(value_parser!(u64)))
    .arg(cli::opt("rounds", "N", "2", "rounds").value_parser(value_parser!(usize)))
    .arg(
        cli::opt_none(
            "only",
            "SIDE",
            "run one side only: fillers, in-thread or mmap",
        )
        .value_parser(["fillers", "in-thread", "mmap"]),
    )
    .arg(
        cli::opt(
            "remove-events",
            "on|off",
            "off",
            "umio's remove events (Builder::remove_events)",
        )
        .value_parser(["on", "off"]),
    )
}

/// `threads` threads each read one byte of `reads` random pages of the
/// `len` bytes at `base`; returns reads per second.
fn read_random(base: *const u8, len: usize, threads: usize, reads: usize, seed: u64) -> f64 {
    let keys: Vec<Vec<usize>> = (0..threads)
        .map(|k| random_pages(seed + k as u64 * 0x9E37_79B9, len / PAGE, reads))
        .collect();
    let base = base as usize;
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in &keys {
            // SAFETY: the pages are below the mapping's page count.
            s.spawn(move || std::hint::black_box(unsafe { touch_pages(base as *const u8, k) }));
        }
    });
    (threads * reads) as f64 / t.elapsed().as_secs_f64()
}

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let file: PathBuf = cli::get(m, "file");
    let threads = cli::get::<usize>(m, "threads").max(1);
    let reads: usize = cli::get(m, "reads");
    let cache_mib: u64 = cli::get(m, "cache");
    let rounds = cli::get::<usize>(m, "rounds").max(1);
    let only: Option<String> = cli::get_opt(m, "only");
    let remove_events = cli::get::<String>(m, "remove-events") == "on";
    println!(
        "random 4 KiB reads of {}, {threads} thread(s), {reads} reads each, umio cache \
         {cache_mib} MiB; reads per second",
        file.display()
    );
    let umio = |service: FaultService, seed: u64| -> Result<f64> {
        let rt = Runtime::builder()
            .cache_bytes(cache_mib << 20)
            .page_size(PAGE)
            .fault_service(service)
            .remove_events(remove_events)
            // `UMIO_FILLERS` and the like, to compare settings.
            .from_env()?
            .build()?;
        let f = File::open(&file)?;
        drop_cache(&f);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }?;
        let rate = read_random(map.as_ptr(), map.len(), threads, reads, seed);
        let s = rt.stats();
        eprintln!(
            "  {}: {} faults ({} in-thread), {} evicted, {} remove events, {} fills queued, \
             {:.2} reads per batch",
            service.name(),
            s.faults,
            s.in_thread_faults,
            s.evicted_pages,
            s.remove_events,
            s.queued_fills,
            s.mean_reads_in_flight()
        );
        Ok(rate)
    };
    let mmap = |seed: u64| -> Result<f64> {
        let f = File::open(&file)?;
        drop_cache(&f);
        let map = Mmap::new(&f, f.metadata()?.len() as usize, libc::MADV_RANDOM, false)?;
        Ok(read_random(map.ptr, map.len, threads, reads, seed))
    };
    let mut t = Table::new(
        "random-threads",
        [
            "round",
            "umio fillers",
            "umio in-thread",
            "mmap MADV_RANDOM",
            "in-thread / mmap",
            "load",
        ],
    );
    for r in 0..rounds {
        let seed = 7 + r as u64;
        let want = |side: &str| only.as_deref().is_none_or(|o| o == side);
        let fillers = if want("fillers") {
            umio(FaultService::Fillers, seed)?
        } else {
            f64::NAN
        };
        let in_thread = if want("in-thread") {
            umio(FaultService::InThread, seed)?
        } else {
            f64::NAN
        };
        let kernel = if want("mmap") { mmap(seed)? } else { f64::NAN };
        t.push([
            num((r + 1) as f64, 0),
            num(fillers, 0),
            num(in_thread, 0),
            num(kernel, 0),
            num(in_thread / kernel, 2),
            load(),
        ]);
    }
    emit(&t, "random 4 KiB reads by N threads (reads/s):", out)
}
