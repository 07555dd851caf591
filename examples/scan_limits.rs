//! A sequential scan of an existing file (the sum of every 64-bit word) by
//! one thread, four ways, in interleaved rounds, each cold: the device's
//! own rate (2 MiB `O_DIRECT` reads into one buffer), the floor of a scan
//! fed through userfaultfd (`umio_bench::scan_floor`: a reader thread, one
//! `O_DIRECT` read and one `UFFDIO_COPY` per 2 MiB window, nothing else),
//! umio (read-only `map_file` with its defaults: 4 KiB pages, read-ahead;
//! with 2 MiB pages of ordinary memory; and, where the hugetlbfs pool holds
//! the cache, with 2 MiB hugetlbfs pages, `MapOptions::hugetlb`), and Linux
//! `mmap` (`MAP_SHARED`, its default read-ahead). Rates in GB/s, and each
//! over `mmap`'s in the same round.
//!
//! The hugetlbfs pool is memory of its own, outside a memory cgroup's
//! limit: its column holds the cache in huge pages beside the limit, and
//! says so.
//!
//! Put the process in a memory cgroup to compare at one budget, with
//! `--cache` below the limit (the floor holds at most `--cache` MiB of the
//! file too):
//!
//! ```text
//! mkdir /sys/fs/cgroup/memory/umio-bench
//! echo 256M > /sys/fs/cgroup/memory/umio-bench/memory.limit_in_bytes
//! echo $$ > /sys/fs/cgroup/memory/umio-bench/tasks
//! cargo run --release --example scan_limits -- --file /mnt/fast/data --cache 192
//! ```

use std::error::Error;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use umio::{MapOptions, Runtime};
use umio_bench::bench::{Mmap, drop_cache};
use umio_bench::cli::{self, value_parser};
use umio_bench::scan_floor;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MIB: usize = 1 << 20;

struct Args {
    file: PathBuf,
    cache_mib: usize,
    rounds: usize,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "scan_limits",
        "A sequential scan of a file four ways, interleaved: the device's own O_DIRECT rate, \
         the floor of a scan fed through userfaultfd, umio (4 KiB and 2 MiB pages) and Linux \
         mmap. Run it in a memory cgroup to compare at one budget.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf)),
    )
    .arg(
        cli::opt(
            "cache",
            "MiB",
            "192",
            "umio's cache, and what the floor keeps",
        )
        .value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .get_matches();
    Ok(Args {
        file: cli::get_opt(&m, "file").ok_or("--file is required")?,
        cache_mib: cli::get(&m, "cache"),
        rounds: cli::get::<usize>(&m, "rounds").max(1),
    })
}

/// umio's scan: bytes per second and the sum.
fn umio_scan(path: &Path, cache: usize, page_size: usize, hugetlb: bool) -> Result<(f64, u64)> {
    let rt = Runtime::builder()
        .cache_bytes(cache as u64)
        .page_size(page_size)
        .build()?;
    let opts = if hugetlb {
        MapOptions::new().hugetlb(false)
    } else {
        MapOptions::new()
    };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&File::open(path)?, opts) }?;
    let len = map.len() / scan_floor::WINDOW * scan_floor::WINDOW;
    let t = Instant::now();
    let total = scan_floor::sum_words(&map[..len]);
    Ok((len as f64 / t.elapsed().as_secs_f64(), total))
}

/// Linux `mmap`'s scan: bytes per second and the sum.
fn mmap_scan(path: &Path) -> Result<(f64, u64)> {
    let f = File::open(path)?;
    let len = usize::try_from(f.metadata()?.len())? / scan_floor::WINDOW * scan_floor::WINDOW;
    let map = Mmap::new(&f, len, libc::MADV_NORMAL, false)?;
    let t = Instant::now();
    // SAFETY: the mapping, len bytes, read only here and alive until the
    // end of this function.
    let total = scan_floor::sum_words(unsafe { std::slice::from_raw_parts(map.ptr, map.len) });
    Ok((len as f64 / t.elapsed().as_secs_f64(), total))
}

/// Free pages of the hugetlbfs pool (2 MiB pages).
fn free_huge_pages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<()> {
    let a = args()?;
    let cache = a.cache_mib * MIB;
    // The cache, and two pages of slack for fills in flight.
    let hugetlb = free_huge_pages() * 2 * MIB >= cache + 4 * MIB;
    if !hugetlb {
        println!(
            "(no hugetlbfs column: the pool holds {} free 2 MiB pages; raise vm.nr_hugepages to {} or more)",
            free_huge_pages(),
            cache / (2 * MIB) + 2
        );
    }
    println!(
        "{} ({} MiB), umio cache and floor budget {} MiB; GB/s, and / mmap in the same round",
        a.file.display(),
        std::fs::metadata(&a.file)?.len() >> 20,
        a.cache_mib
    );
    println!(
        "{:>5} | {:>13} | {:>13} | {:>13} | {:>13} | {:>13} | {:>6}",
        "round", "device", "uffd floor", "umio 4 KiB", "umio 2 MiB", "2 MiB hugetlb", "mmap"
    );
    for round in 1..=a.rounds {
        let mut rates = Vec::new();
        let mut sums = Vec::new();
        let sides: [&dyn Fn() -> Result<(f64, u64)>; 6] = [
            &|| scan_floor::device_scan_rate(&a.file),
            &|| scan_floor::copy_floor_rate(&a.file, cache),
            &|| umio_scan(&a.file, cache, 4096, false),
            &|| umio_scan(&a.file, cache, 2 * MIB, false),
            &|| umio_scan(&a.file, cache, 2 * MIB, true),
            &|| mmap_scan(&a.file),
        ];
        for (k, side) in sides.into_iter().enumerate() {
            if k == 4 && !hugetlb {
                rates.push(f64::NAN);
                continue;
            }
            drop_cache(&File::open(&a.file)?);
            let (rate, total) = side()?;
            rates.push(rate / 1e9);
            sums.push(total);
        }
        if sums.iter().any(|&s| s != sums[0]) {
            return Err(format!("the sides' sums differ: {sums:x?}").into());
        }
        let mmap = rates[5];
        let cell = |r: f64| {
            if r.is_nan() {
                "-".to_string()
            } else {
                format!("{r:.2} ({:.2}x)", r / mmap)
            }
        };
        println!(
            "{round:>5} | {:>13} | {:>13} | {:>13} | {:>13} | {:>13} | {:>6.2}",
            cell(rates[0]),
            cell(rates[1]),
            cell(rates[2]),
            cell(rates[3]),
            cell(rates[4]),
            mmap
        );
    }
    Ok(())
}
