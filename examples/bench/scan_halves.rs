//! `bench scan-halves`: sequential scans through umio with its defaults (4 KiB pages, adaptive
//! read-ahead, `O_DIRECT` where the file system allows): one thread
//! scanning the first half of a file alone, then two threads scanning the
//! two halves at once (as UMap's `pfbenchmark-read -t 2` does), and one
//! thread scanning the whole file; beside each, in interleaved rounds, the
//! same scans by the device's own `O_DIRECT` reads (one reading thread per
//! part), by the userfaultfd floor (`umio_bench::scan_floor`: per part a
//! mapping, reader threads doing one `O_DIRECT` read and one `UFFDIO_COPY`
//! per 2 MiB window, and the scanning thread; together they keep at most
//! `--cache` installed), with one reader per part ("floor1") and with two
//! ("floor2", which lets one scan keep two CPUs busy, as umio's prefetch
//! threads do), and by Linux `mmap` (`MAP_SHARED`, its default
//! read-ahead). Every run starts cold: a fresh runtime and
//! mapping, and the file's page cache dropped.
//!
//! ```text
//! cargo run --release --example bench -- scan-halves [--file PATH | --dir DIR --size MiB]
//!                                                 [--cache MiB] [--rounds N] [--no-mmap]
//! ```
//!
//! Defaults: a 1024 MiB file made in the temporary directory, a 256 MiB
//! umio cache, 3 rounds; `--file` scans an existing file instead (read
//! only). For a fast device, use ext4 on a loop device over a tmpfs file.
//! Each line gives the per-thread rate (MB/s of the part that thread
//! scanned) and, for umio, the read-ahead counters: misses (faults that
//! read their page), pages prefetched, and store reads. "two/one" is the
//! two-thread per-thread rate over the one-thread rate: 1.0 means each of
//! two threads is as fast as one alone. A summary of the rounds ends the
//! output; both tables are written as CSV (`scan-halves.csv`,
//! `scan-halves-summary.csv`).

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use umio::{MapOptions, Runtime};
use umio_bench::bench::{MIB, Mmap, PAGE, drop_cache, load};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::scan_floor::{self, WINDOW};
use umio_bench::table::{Table, median, num};

use crate::{Result, emit};

struct Args {
    file: Option<PathBuf>,
    dir: PathBuf,
    size_mib: usize,
    cache_mib: u64,
    rounds: usize,
    mmap: bool,
}

pub fn command() -> Command {
    cli::command(
        "scan-halves",
        "Sequential scans: one thread over half of a file, two threads over the two halves at \
         once, one thread over the whole file; by the device's O_DIRECT reads, the userfaultfd \
         floor, umio with its defaults and Linux mmap, in interleaved rounds.",
    )
    .arg(
        cli::opt_none(
            "file",
            "PATH",
            "scan this existing file (read only) instead of making one",
        )
        .value_parser(value_parser!(PathBuf))
        .conflicts_with_all(["dir", "size"]),
    )
    .arg(
        cli::opt_none(
            "dir",
            "DIR",
            "directory of the test file made (default: the temporary directory)",
        )
        .value_parser(value_parser!(PathBuf)),
    )
    .arg(
        cli::opt("size", "MiB", "1024", "size of the test file made")
            .value_parser(value_parser!(usize)),
    )
    .arg(
        cli::opt(
            "cache",
            "MiB",
            "256",
            "umio's cache, and what the floor keeps installed",
        )
        .value_parser(value_parser!(u64)),
    )
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .arg(cli::switch("no-mmap", "skip the Linux mmap runs"))
}

fn args(m: &ArgMatches) -> Args {
    Args {
        file: cli::get_opt(m, "file"),
        dir: cli::get_opt(m, "dir").unwrap_or_else(std::env::temp_dir),
        size_mib: cli::get(m, "size"),
        cache_mib: cli::get(m, "cache"),
        rounds: cli::get::<usize>(m, "rounds").max(1),
        mmap: !m.get_flag("no-mmap"),
    }
}

/// Sums one byte of every page of `data`, the way a scan that touches each
/// page once would; returns the sum (so the reads are not optimised away).
/// Every side's scanning threads do this, the device's and the floor's to
/// each window they are handed.
fn touch(data: &[u8]) -> u64 {
    data.iter().step_by(PAGE).map(|&b| b as u64).sum()
}

/// Scans `parts` of `data` at once, one thread each; the seconds each took.
fn scan_parts(data: &[u8], parts: &[Range<usize>]) -> Vec<f64> {
    std::thread::scope(|s| {
        let hs: Vec<_> = parts
            .iter()
            .map(|r| {
                let part = &data[r.clone()];
                s.spawn(move || {
                    let t = Instant::now();
                    std::hint::black_box(touch(part));
                    t.elapsed().as_secs_f64()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Sys {
    Device,
    /// The floor with this many reader threads per scanning thread.
    Floor(usize),
    Umio,
    Mmap,
}

impl Sys {
    fn label(self) -> String {
        match self {
            Sys::Device => "device".into(),
            Sys::Floor(readers) => format!("floor{readers}"),
            Sys::Umio => "umio".into(),
            Sys::Mmap => "mmap".into(),
        }
    }
}

/// CPU time so far, in seconds: this process's (user and system, all its
/// threads), and the machine's outside niced tasks (so it counts the
/// kernel's work for the scan in other threads, such as the loop device's
/// workers, but not other users' `nice`d builds).
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // user nice system idle iowait irq softirq steal, in clock ticks.
    let t: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let machine = if t.len() == 8 {
        (t[0] + t[2] + t[5] + t[6] + t[7]) / hz
    } else {
        f64::NAN
    };
    (tv(ru.ru_utime) + tv(ru.ru_stime), machine)
}

/// One cold run; returns the per-thread MB/s (the mean over threads), the
/// vCPUs busy meanwhile (this process's, the machine's outside niced
/// tasks) and, for umio, its counters. `path` names `f` for the sides that
/// open it with `O_DIRECT` themselves.
fn run_one(
    f: &File,
    path: &Path,
    len: usize,
    cache: u64,
    sys: Sys,
    parts: &[Range<usize>],
) -> Result<(f64, (f64, f64), String)> {
    drop_cache(f);
    let mut note = String::new();
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mbps: Vec<f64> = match sys {
        Sys::Device => scan_floor::device_scan_rates(path, parts, touch)?.0,
        Sys::Floor(readers) => {
            scan_floor::copy_floor_rates(path, parts, cache as usize, readers, touch)?.0
        }
        Sys::Umio | Sys::Mmap => {
            let secs = if sys == Sys::Umio {
                let rt = Runtime::builder().cache_bytes(cache).build()?;
                // SAFETY: nothing but this mapping changes the store while a slice of it lives.
                let map = unsafe { rt.map_file(f, MapOptions::new()) }?;
                let secs = scan_parts(map.as_slice(), parts);
                let s = map.stats();
                note = format!(
                    "faults {} misses {} prefetched {} reads {}",
                    s.faults,
                    s.fills - s.prefetched,
                    s.prefetched,
                    rt.stats().store_reads
                );
                secs
            } else {
                let map = Mmap::new(f, len, libc::MADV_NORMAL, false)?;
                // SAFETY: the mapping, `len` readable bytes, alive until
                // the end of this block.
                scan_parts(
                    unsafe { std::slice::from_raw_parts(map.ptr, map.len) },
                    parts,
                )
            };
            parts
                .iter()
                .zip(&secs)
                .map(|(r, s)| r.len() as f64 / s)
                .collect()
        }
    }
    .into_iter()
    .map(|bps| bps / 1e6)
    .collect();
    let (wall, cpu_end) = (t.elapsed().as_secs_f64(), cpu_seconds());
    let vcpus = ((cpu_end.0 - cpu.0) / wall, (cpu_end.1 - cpu.1) / wall);
    Ok((mbps.iter().sum::<f64>() / mbps.len() as f64, vcpus, note))
}

/// Makes a `size_mib` MiB file of varied bytes in `dir`, opens it and
/// removes its name (it lives while open).
fn make_file(dir: &Path, size_mib: usize) -> Result<File> {
    let path = dir.join(format!("umio-scan-halves-{}", std::process::id()));
    {
        let mut f = File::create(&path)?;
        let mut block = vec![0u8; MIB];
        for i in 0..size_mib {
            block.iter_mut().enumerate().for_each(|(j, b)| {
                *b = (i * 31 + j * 7) as u8;
            });
            f.write_all(&block)?;
        }
        f.sync_all()?;
    }
    let f = File::open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

/// "lo-hi" of `v`, formatted with `prec` decimals.
fn range(v: &[f64], prec: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.prec$}-{hi:.prec$}")
}

// Each scan is a list of ranges, some of one range.
#[allow(clippy::single_range_in_vec_init)]
pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let a = args(m);
    let (f, path, shown) = match &a.file {
        Some(p) => (File::open(p)?, p.clone(), p.display().to_string()),
        None => {
            let f = make_file(&a.dir, a.size_mib)?;
            // The file has no name left; the floor and the device open it
            // again, with O_DIRECT, through its descriptor.
            let p = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
            (f, p, format!("a file made in {}", a.dir.display()))
        }
    };
    // Two halves of whole windows (the floor's and the device's unit).
    let len = usize::try_from(f.metadata()?.len())? / (2 * WINDOW) * (2 * WINDOW);
    if len == 0 {
        return Err(format!("the file is smaller than {} MiB", 2 * WINDOW / MIB).into());
    }
    let cache = a.cache_mib << 20;
    let half = len / 2;
    let scans: [(&str, Vec<Range<usize>>); 3] = [
        ("one thread, half", vec![0..half]),
        ("two threads, halves", vec![0..half, half..len]),
        ("one thread, whole", vec![0..len]),
    ];
    let mut systems = vec![Sys::Device, Sys::Floor(1), Sys::Floor(2), Sys::Umio];
    if a.mmap {
        systems.push(Sys::Mmap);
    }
    println!(
        "{shown}, {} MiB scanned, umio cache and floor budget {} MiB, {} rounds",
        len / MIB,
        a.cache_mib,
        a.rounds
    );
    let mut runs = Table::new(
        "scan-halves",
        [
            "round",
            "side",
            "scan",
            "MB/s per thread",
            "two/one",
            "vCPUs (process)",
            "vCPUs (machine)",
            "umio counters",
            "load",
        ],
    );
    // Per side and scan, the rates of every round; per side, two/one.
    let mut rates = vec![[vec![], vec![], vec![]]; systems.len()];
    let mut ratios = vec![vec![]; systems.len()];
    let mut vcpus = vec![[vec![], vec![], vec![]]; systems.len()];
    for round in 0..a.rounds {
        for (n, (name, parts)) in scans.iter().enumerate() {
            for (k, &sys) in systems.iter().enumerate() {
                let (mbps, (own, all), note) = run_one(&f, &path, len, cache, sys, parts)?;
                rates[k][n].push(mbps);
                vcpus[k][n].push(all);
                let mut ratio = f64::NAN;
                if n == 1 {
                    ratio = mbps / rates[k][0][round];
                    ratios[k].push(ratio);
                }
                runs.push([
                    num((round + 1) as f64, 0),
                    sys.label(),
                    name.to_string(),
                    num(mbps, 0),
                    num(ratio, 2),
                    num(own, 2),
                    num(all, 2),
                    note,
                    load(),
                ]);
                eprintln!(
                    "round {} {} {name}: {mbps:.0} MB/s per thread",
                    round + 1,
                    sys.label()
                );
            }
        }
    }
    emit(&runs, "each run (MB/s per thread):", out)?;
    let mut sum = Table::new(
        "scan-halves-summary",
        [
            "side",
            "one, half",
            "two, halves",
            "two/one",
            "one, whole",
            "vCPUs one",
            "vCPUs two",
            "one, half (range)",
            "two, halves (range)",
        ],
    );
    for (k, sys) in systems.iter().enumerate() {
        sum.push([
            sys.label(),
            num(median(&rates[k][0]), 0),
            num(median(&rates[k][1]), 0),
            num(median(&ratios[k]), 2),
            num(median(&rates[k][2]), 0),
            num(median(&vcpus[k][0]), 2),
            num(median(&vcpus[k][1]), 2),
            range(&rates[k][0], 0),
            range(&rates[k][1], 0),
        ]);
    }
    emit(
        &sum,
        &format!(
            "medians of {} rounds: MB/s per thread, and the machine's vCPUs busy (outside niced \
             tasks); the ranges of the rates",
            a.rounds
        ),
        out,
    )
}
