//! `bench scan-limits`: a sequential scan of an existing file (the sum of every 64-bit word) by
//! one thread, four ways, in interleaved rounds, each cold: the device's
//! own rate (2 MiB `O_DIRECT` reads into one buffer), the floor of a scan
//! fed through userfaultfd (`umio_bench::scan_floor`: a reader thread, one
//! `O_DIRECT` read and one `UFFDIO_COPY` per 2 MiB window, nothing else),
//! umio (read-only `map_file` with its defaults: 4 KiB pages, read-ahead;
//! with 2 MiB pages of ordinary memory; and, where the hugetlbfs pool holds
//! the cache, with 2 MiB hugetlbfs pages, `MapOptions::hugetlb`), and Linux
//! `mmap` (`MAP_SHARED`, its default read-ahead). Rates in GB/s, and each
//! over `mmap`'s in the same round; the table is written as
//! `scan-limits.csv`.
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
//! cargo run --release --example bench -- scan-limits --file /mnt/fast/data --cache 192
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use umio::{MapOptions, Runtime};
use umio_bench::bench::{MIB, Mmap, drop_cache, load};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::scan_floor;
use umio_bench::table::{Table, num};

use crate::{Result, emit};

pub fn command() -> Command {
    cli::command(
        "scan-limits",
        "A sequential scan of a file four ways, interleaved: the device's own O_DIRECT rate, \
         the floor of a scan fed through userfaultfd, umio (4 KiB and 2 MiB pages) and Linux \
         mmap. Run it in a memory cgroup to compare at one budget.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf))
            .required(true),
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

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let file: PathBuf = cli::get(m, "file");
    let cache_mib: usize = cli::get(m, "cache");
    let rounds = cli::get::<usize>(m, "rounds").max(1);
    let cache = cache_mib * MIB;
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
        "{} ({} MiB), umio cache and floor budget {cache_mib} MiB; GB/s, and umio / mmap in the \
         same round",
        file.display(),
        std::fs::metadata(&file)?.len() >> 20,
    );
    let names = [
        "device",
        "uffd floor",
        "umio 4 KiB",
        "umio 2 MiB",
        "umio 2 MiB hugetlb",
        "mmap",
    ];
    let mut cols: Vec<String> = vec!["round".into()];
    cols.extend(names.iter().map(|n| n.to_string()));
    cols.extend(names[2..5].iter().map(|n| format!("{n} / mmap")));
    cols.push("load".into());
    let mut t = Table::new("scan-limits", cols);
    for round in 1..=rounds {
        let mut rates = Vec::new();
        let mut sums = Vec::new();
        let sides: [&dyn Fn() -> Result<(f64, u64)>; 6] = [
            &|| scan_floor::device_scan_rate(&file),
            &|| scan_floor::copy_floor_rate(&file, cache),
            &|| umio_scan(&file, cache, 4096, false),
            &|| umio_scan(&file, cache, 2 * MIB, false),
            &|| umio_scan(&file, cache, 2 * MIB, true),
            &|| mmap_scan(&file),
        ];
        for (k, side) in sides.into_iter().enumerate() {
            if k == 4 && !hugetlb {
                rates.push(f64::NAN);
                continue;
            }
            drop_cache(&File::open(&file)?);
            let (rate, total) = side()?;
            rates.push(rate / 1e9);
            sums.push(total);
        }
        if sums.iter().any(|&s| s != sums[0]) {
            return Err(format!("the sides' sums differ: {sums:x?}").into());
        }
        let mmap = rates[5];
        let mut row = vec![num(round as f64, 0)];
        row.extend(rates.iter().map(|&r| num(r, 2)));
        row.extend(rates[2..5].iter().map(|&r| num(r / mmap, 2)));
        row.push(load());
        t.push(row);
        eprintln!("round {round} of {rounds} done");
    }
    emit(&t, "one sequential scan, one thread (GB/s):", out)
}
