//! Batch-hinted random reads: random 4 KiB pages of a file in batches of
//! N, each batch hinted first, then touched. umio hints with
//! `Mapping::prefetch_ranges` (what `umap_prefetch` does; also one `Mapping::prefetch` per page, as
//! `umap_prefetch` did before), Linux `mmap`
//! with `madvise(MADV_WILLNEED)` per page; beside them the device's own
//! rate of 4 KiB `O_DIRECT` reads 32 at a time, measured in the same
//! round. Sides alternate, each run from cold (the file's page cache
//! dropped). Pages read per second.
//!
//! The memory budget is not enforced: run it in a memory cgroup to compare
//! at one budget, or keep `--batches` x N pages under umio's cache (then
//! neither side evicts).
//!
//! ```text
//! cargo run --release --example hint_batches -- --file PATH [--batch N] [--batches N]
//!                                               [--cache MiB] [--rounds N]
//! ```

use std::error::Error;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const PAGE: usize = 4096;

struct Args {
    file: PathBuf,
    batch: usize,
    batches: usize,
    cache_mib: u64,
    rounds: usize,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "hint_batches",
        "Random 4 KiB pages in batches, each batch hinted then touched: umio \
         (Mapping::prefetch_ranges, as umap_prefetch) with filler threads and in-thread, Linux \
         mmap with MADV_WILLNEED per page, and the device's O_DIRECT rate 32 at a time, \
         alternating; pages per second. Run it in a memory cgroup to compare at one budget.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf)),
    )
    .arg(cli::opt("batch", "N", "32", "pages per hint").value_parser(value_parser!(usize)))
    .arg(cli::opt("batches", "N", "1500", "batches per run").value_parser(value_parser!(usize)))
    .arg(cli::opt("cache", "MiB", "256", "umio's cache").value_parser(value_parser!(u64)))
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .get_matches();
    Ok(Args {
        file: cli::get_opt(&m, "file").ok_or("--file is required")?,
        batch: cli::get::<usize>(&m, "batch").max(1),
        batches: cli::get::<usize>(&m, "batches").max(1),
        cache_mib: cli::get(&m, "cache"),
        rounds: cli::get::<usize>(&m, "rounds").max(1),
    })
}

/// The pages of every batch, pseudo-random over `pages`.
fn keys(a: &Args, pages: usize, seed: u64) -> Vec<usize> {
    let mut x = seed | 1;
    (0..a.batch * a.batches)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((u128::from(x) * pages as u128) >> 64) as usize
        })
        .collect()
}

/// Hints each batch of `keys` with `hint`, then touches its pages; pages
/// per second.
fn run(base: usize, keys: &[usize], batch: usize, mut hint: impl FnMut(&[usize])) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for b in keys.chunks(batch) {
        hint(b);
        for &p in b {
            // SAFETY: inside the mapping (keys are below its page count).
            sum += u64::from(unsafe { std::ptr::read_volatile((base + p * PAGE) as *const u8) });
        }
    }
    std::hint::black_box(sum);
    keys.len() as f64 / t.elapsed().as_secs_f64()
}

fn drop_cache(f: &File) {
    // SAFETY: advice only: the file's clean pages leave the page cache.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// One umio run; `per_page`: one `Mapping::prefetch` per page (what
/// `umap_prefetch` did before hints were batched) instead of one
/// `prefetch_ranges` per batch.
fn umio(a: &Args, service: FaultService, per_page: bool, keys: &[usize]) -> Result<f64> {
    let rt = Runtime::builder()
        .cache_bytes(a.cache_mib << 20)
        .page_size(PAGE)
        .fault_service(service)
        .build()?;
    let f = File::open(&a.file)?;
    drop_cache(&f);
    // SAFETY: nothing changes the file while the mapping lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }?;
    let mut ranges = Vec::with_capacity(a.batch);
    let rate = run(map.as_ptr() as usize, keys, a.batch, |b| {
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
        "  umio {}{}: {} faults ({} coalesced), {} prefetched, {} batches: {:.1} reads in flight \
         per batch (max {}), {} evicted",
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
}

fn mmap(a: &Args, keys: &[usize]) -> Result<f64> {
    let f = File::open(&a.file)?;
    let len = f.metadata()?.len() as usize;
    drop_cache(&f);
    // SAFETY: a fresh read-only shared mapping of the file.
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
    let base = p as usize;
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(p, len, libc::MADV_RANDOM) };
    let rate = run(base, keys, a.batch, |b| {
        for &k in b {
            // SAFETY: advice on a page of the mapping.
            unsafe { libc::madvise((base + k * PAGE) as *mut _, PAGE, libc::MADV_WILLNEED) };
        }
    });
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(p, len) };
    Ok(rate)
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
    println!(
        "random 4 KiB pages in {} batches of {}, hinted then touched; umio cache {} MiB; pages/s",
        a.batches, a.batch, a.cache_mib
    );
    let names = [
        "umio fillers",
        "umio in-thread",
        "umio fillers per page",
        "mmap WILLNEED",
        "device O_DIRECT qd32",
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..a.rounds {
        let keys = keys(&a, pages, 0x9E37_79B9_7F4A_7C15 + round as u64);
        let r = [
            umio(&a, FaultService::Fillers, false, &keys)?,
            umio(&a, FaultService::InThread, false, &keys)?,
            umio(&a, FaultService::Fillers, true, &keys)?,
            mmap(&a, &keys)?,
            umio_bench::device::measure(&a.file, Duration::from_secs(1))?.random_4k_qd32,
        ];
        print!("round {round}:");
        for (k, v) in r.iter().enumerate() {
            rates[k].push(*v);
            print!(" {} {:.1} k/s;", names[k], v / 1e3);
        }
        println!(" load {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    }
    println!("medians of {} rounds:", a.rounds);
    let med: Vec<f64> = rates.iter_mut().map(|v| median(v)).collect();
    for (k, m) in med.iter().enumerate() {
        println!(
            "  {:<22} {:>7.1} k/s  ({:.2}x mmap, {:.2}x the device)",
            names[k],
            m / 1e3,
            m / med[3],
            m / med[4]
        );
    }
    Ok(())
}
