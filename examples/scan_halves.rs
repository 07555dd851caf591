//! Sequential scans through umio with its defaults (4 KiB pages, adaptive
//! read-ahead, `O_DIRECT` where the file system allows): one thread
//! scanning the first half of a file alone, then two threads scanning the
//! two halves at once (as UMap's `pfbenchmark-read -t 2` does), and one
//! thread scanning the whole file; Linux `mmap` (`MAP_SHARED`, its default
//! read-ahead) beside each, in interleaved rounds. Every run starts cold:
//! a fresh runtime and mapping, and the file's page cache dropped.
//!
//! ```text
//! cargo run --release --example scan_halves -- [--dir DIR] [--size MiB] [--cache MiB]
//!                                               [--rounds N] [--no-mmap]
//! ```
//!
//! Defaults: the temporary directory, a 1024 MiB file, a 256 MiB umio
//! cache, 3 rounds. For a fast device, point `--dir` at ext4 on a loop
//! device over a tmpfs file. Each line gives the per-thread rate (MB/s of
//! the part that thread scanned) and, for umio, the read-ahead counters:
//! misses (faults that read their page), pages prefetched, and store
//! reads. "two/one" is the two-thread per-thread rate over the one-thread
//! rate: 1.0 means each of two threads is as fast as one alone.

use std::error::Error;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

use umio::{MapOptions, Runtime};
use umio_bench::bench::drop_cache;
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MIB: usize = 1 << 20;
const PAGE: usize = 4096;

struct Args {
    dir: PathBuf,
    size_mib: usize,
    cache_mib: u64,
    rounds: usize,
    mmap: bool,
}

fn args() -> Args {
    let m = cli::command(
        "scan_halves",
        "Sequential scans through umio with its defaults: one thread over half of a file, two \
         threads over the two halves at once, one thread over the whole file; Linux mmap beside \
         each, in interleaved rounds.",
    )
    .arg(
        cli::opt_none(
            "dir",
            "DIR",
            "directory of the test file (default: the temporary directory)",
        )
        .value_parser(value_parser!(PathBuf)),
    )
    .arg(
        cli::opt("size", "MiB", "1024", "size of the test file").value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("cache", "MiB", "256", "umio's cache").value_parser(value_parser!(u64)))
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .arg(cli::switch("no-mmap", "skip the Linux mmap runs"))
    .get_matches();
    Args {
        dir: cli::get_opt(&m, "dir").unwrap_or_else(std::env::temp_dir),
        size_mib: cli::get(&m, "size"),
        cache_mib: cli::get(&m, "cache"),
        rounds: cli::get(&m, "rounds"),
        mmap: !m.get_flag("no-mmap"),
    }
}

/// Sums one byte of every page of `data`, the way a scan that touches each
/// page once would; returns the sum (so the reads are not optimised away).
fn touch(data: &[u8]) -> u64 {
    data.iter().step_by(PAGE).map(|&b| b as u64).sum()
}

/// Scans `parts` of `data` at once, one thread each; the seconds each took.
fn scan_parts(data: &[u8], parts: &[std::ops::Range<usize>]) -> Vec<f64> {
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
    Umio,
    Mmap,
}

/// One cold run; returns the per-thread MB/s (the mean over threads) and,
/// for umio, its counters.
fn run(
    f: &File,
    len: usize,
    cache: u64,
    sys: Sys,
    parts: &[std::ops::Range<usize>],
) -> Result<(f64, String)> {
    drop_cache(f);
    let secs;
    let mut note = String::new();
    match sys {
        Sys::Umio => {
            let rt = Runtime::builder().cache_bytes(cache).build()?;
            let map = rt.map_file(f, MapOptions::new())?;
            secs = scan_parts(map.as_slice(), parts);
            let s = map.stats();
            note = format!(
                "faults {:>7}  misses {:>7}  prefetched {:>7}  reads {:>6}",
                s.faults,
                s.fills - s.prefetched,
                s.prefetched,
                rt.stats().store_reads
            );
        }
        Sys::Mmap => {
            // SAFETY: maps `len` bytes of a file we hold open, read-only;
            // unmapped below, after the scan's borrows end.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error().into());
            }
            // SAFETY: `p` is `len` readable bytes until munmap below.
            let data = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            secs = scan_parts(data, parts);
            // SAFETY: unmaps what we mapped; `data` is not used after.
            unsafe { libc::munmap(p, len) };
        }
    }
    let mbps: Vec<f64> = parts
        .iter()
        .zip(&secs)
        .map(|(r, s)| r.len() as f64 / s / 1e6)
        .collect();
    Ok((mbps.iter().sum::<f64>() / mbps.len() as f64, note))
}

// Each scan is a list of ranges, some of one range.
#[allow(clippy::single_range_in_vec_init)]
fn main() -> Result<()> {
    let a = args();
    let len = a.size_mib * MIB;
    let path = a
        .dir
        .join(format!("umio-scan-halves-{}", std::process::id()));
    {
        let mut f = File::create(&path)?;
        let mut block = vec![0u8; MIB];
        for i in 0..a.size_mib {
            block.iter_mut().enumerate().for_each(|(j, b)| {
                *b = (i * 31 + j * 7) as u8;
            });
            f.write_all(&block)?;
        }
        f.sync_all()?;
    }
    let f = File::open(&path)?;
    std::fs::remove_file(&path)?;
    let cache = a.cache_mib << 20;
    let half = len / 2;
    let scans: [(&str, Vec<std::ops::Range<usize>>); 3] = [
        ("one thread, half", vec![0..half]),
        ("two threads, halves", vec![0..half, half..len]),
        ("one thread, whole", vec![0..len]),
    ];
    let mut systems = vec![Sys::Umio];
    if a.mmap {
        systems.push(Sys::Mmap);
    }
    println!(
        "file {} MiB in {}, umio cache {} MiB, {} rounds",
        a.size_mib,
        a.dir.display(),
        a.cache_mib,
        a.rounds
    );
    for round in 0..a.rounds {
        let mut one = [0.0; 2];
        for (name, parts) in &scans {
            for (k, &sys) in systems.iter().enumerate() {
                let (mbps, note) = run(&f, len, cache, sys, parts)?;
                let label = if sys == Sys::Umio { "umio" } else { "mmap" };
                print!("round {round} {label} {name:<20} {mbps:>7.0} MB/s per thread  {note}");
                if parts.len() == 1 && parts[0].len() == half {
                    one[k] = mbps;
                }
                if parts.len() == 2 {
                    print!("  two/one {:.2}", mbps / one[k]);
                }
                println!();
            }
        }
    }
    Ok(())
}
