//! `bench hint-batches`: batch-hinted random reads: random 4 KiB pages of
//! a file in batches of N, each batch hinted first, then touched. umio
//! hints with `Mapping::prefetch_ranges` (what `umap_prefetch` does; also
//! one `Mapping::prefetch` per page, as `umap_prefetch` did before), Linux
//! `mmap` with `madvise(MADV_WILLNEED)` per page; beside them the device's
//! own rate of 4 KiB `O_DIRECT` reads 32 at a time, measured in the same
//! round. Sides alternate, each run from cold (the file's page cache
//! dropped). Pages read per second.
//!
//! The memory budget is not enforced: run it in a memory cgroup to compare
//! at one budget, or keep `--batches` x N pages under umio's cache (then
//! neither side evicts).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};
use umio_bench::bench::{Mmap, PAGE, drop_cache, load, random_pages, touch_pages};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::table::{Table, median, num};

use crate::{Result, emit};

pub fn command() -> Command {
    cli::command(
        "hint-batches",
        "Random 4 KiB pages in batches, each batch hinted then touched: umio \
         (Mapping::prefetch_ranges, as umap_prefetch) with filler threads and in-thread, Linux \
         mmap with MADV_WILLNEED per page, and the device's O_DIRECT rate 32 at a time, \
         alternating; pages per second. Run it in a memory cgroup to compare at one budget.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf))
            .required(true),
    )
    .arg(cli::opt("batch", "N", "32", "pages per hint").value_parser(value_parser!(usize)))
    .arg(cli::opt("batches", "N", "1500", "batches per run").value_parser(value_parser!(usize)))
    .arg(cli::opt("cache", "MiB", "256", "umio's cache").value_parser(value_parser!(u64)))
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
}

/// Hints each batch of `keys` with `hint`, then touches its pages (4 KiB
/// pages from `base`); pages per second.
fn hinted(base: *const u8, keys: &[usize], batch: usize, mut hint: impl FnMut(&[usize])) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for b in keys.chunks(batch) {
        hint(b);
        // SAFETY: inside the mapping (keys are below its page count).
        sum = sum.wrapping_add(unsafe { touch_pages(base, b) });
    }
    std::hint::black_box(sum);
    keys.len() as f64 / t.elapsed().as_secs_f64()
}

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let file: PathBuf = cli::get(m, "file");
    let batch = cli::get::<usize>(m, "batch").max(1);
    let batches = cli::get::<usize>(m, "batches").max(1);
    let cache_mib: u64 = cli::get(m, "cache");
    let rounds = cli::get::<usize>(m, "rounds").max(1);
    let pages = File::open(&file)?.metadata()?.len() as usize / PAGE;
    if pages == 0 {
        return Err("the file is smaller than a page".into());
    }
    println!(
        "random 4 KiB pages of {} in {batches} batches of {batch}, hinted then touched; umio \
         cache {cache_mib} MiB; pages/s",
        file.display()
    );
    // One umio run; `per_page`: one `Mapping::prefetch` per page (what
    // `umap_prefetch` did before hints were batched) instead of one
    // `prefetch_ranges` per batch.
    let umio = |service: FaultService, per_page: bool, keys: &[usize]| -> Result<f64> {
        let rt = Runtime::builder()
            .cache_bytes(cache_mib << 20)
            .page_size(PAGE)
            .fault_service(service)
            .build()?;
        let f = File::open(&file)?;
        drop_cache(&f);
        // SAFETY: nothing changes the file while the mapping lives.
        let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }?;
        let mut ranges = Vec::with_capacity(batch);
        let rate = hinted(map.as_ptr(), keys, batch, |b| {
            ranges.clear();
            ranges.extend(b.iter().map(|&p| p * PAGE..p * PAGE + PAGE));
            if per_page {
                for r in &ranges {
                    map.prefetch(r.clone()).expect("prefetch");
                }
            } else {
                map.prefetch_ranges(&ranges).expect("prefetch_ranges");
            }
        });
        let s = rt.stats();
        eprintln!(
            "  umio {}{}: {} faults ({} coalesced), {} prefetched, {} batches: {:.1} reads in \
             flight per batch (max {}), {} evicted",
            service.name(),
            if per_page { " per page" } else { "" },
            s.faults,
            s.coalesced,
            s.prefetched_pages,
            s.read_submissions,
            s.mean_reads_in_flight(),
            s.max_reads_in_flight,
            s.evicted_pages
        );
        Ok(rate)
    };
    let mmap = |keys: &[usize]| -> Result<f64> {
        let f = File::open(&file)?;
        drop_cache(&f);
        let map = Mmap::new(&f, pages * PAGE, libc::MADV_RANDOM, false)?;
        let base = map.ptr as usize;
        Ok(hinted(map.ptr, keys, batch, |b| {
            for &k in b {
                // SAFETY: advice on a page of the mapping.
                unsafe { libc::madvise((base + k * PAGE) as *mut _, PAGE, libc::MADV_WILLNEED) };
            }
        }))
    };
    let names = [
        "umio fillers",
        "umio in-thread",
        "umio fillers per page",
        "mmap WILLNEED",
        "device O_DIRECT qd32",
    ];
    let mut cols: Vec<String> = vec!["round".into()];
    cols.extend(names.iter().map(|n| n.to_string()));
    cols.push("load".into());
    let mut t = Table::new("hint-batches", cols);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let keys = random_pages(0x9E37_79B9_7F4A_7C15 + round as u64, pages, batch * batches);
        let r = [
            umio(FaultService::Fillers, false, &keys)?,
            umio(FaultService::InThread, false, &keys)?,
            umio(FaultService::Fillers, true, &keys)?,
            mmap(&keys)?,
            umio_bench::device::measure(&file, Duration::from_secs(1))?.random_4k_qd32,
        ];
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
        sum.push([
            names[k].to_string(),
            num(*m, 0),
            num(m / med[3], 2),
            num(m / med[4], 2),
        ]);
    }
    emit(&sum, &format!("medians of {rounds} rounds:"), out)
}
