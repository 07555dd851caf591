//! Out-of-core random 4 KiB reads by N threads over an existing file:
//! umio (each fault service) beside Linux `mmap` with `MADV_RANDOM`, in one
//! process, one after the other, as many rounds as asked, alternating.
//!
//! Put the process in a memory cgroup to compare at one budget (both
//! sides' memory is then counted by the kernel: umio's cache, and the page
//! cache `mmap` fills):
//!
//! ```text
//! mkdir /sys/fs/cgroup/memory/umio-bench
//! echo 256M > /sys/fs/cgroup/memory/umio-bench/memory.limit_in_bytes
//! echo $$ > /sys/fs/cgroup/memory/umio-bench/tasks
//! cargo run --release --example random_threads -- --file /mnt/fast/data --threads 2 --cache 192
//! ```

use std::error::Error;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

struct Args {
    file: PathBuf,
    threads: usize,
    reads: usize,
    cache_mib: u64,
    rounds: usize,
    only: Option<String>,
    remove_events: bool,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "random_threads",
        "Random 4 KiB reads by N threads over a file: umio with filler threads, umio in-thread, \
         and Linux mmap with MADV_RANDOM, alternating; accesses per second. Run it in a memory \
         cgroup to compare at one budget.",
    )
    .arg(
        cli::opt_none("file", "PATH", "the data file (read only; required)")
            .value_parser(value_parser!(PathBuf)),
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
    .get_matches();
    Ok(Args {
        file: cli::get_opt(&m, "file").ok_or("--file is required")?,
        threads: cli::get::<usize>(&m, "threads").max(1),
        reads: cli::get(&m, "reads"),
        cache_mib: cli::get(&m, "cache"),
        rounds: cli::get::<usize>(&m, "rounds").max(1),
        only: cli::get_opt(&m, "only"),
        remove_events: cli::get::<String>(&m, "remove-events") == "on",
    })
}

/// `threads` threads each read one byte of `reads` random pages of
/// `base..base+len`; returns accesses per second.
fn run(base: usize, len: usize, threads: usize, reads: usize, seed: u64) -> f64 {
    let pages = (len / 4096) as u64;
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            s.spawn(move || {
                let mut x = (seed + k as u64 * 0x9E37_79B9) | 1;
                let mut sum = 0u64;
                for _ in 0..reads {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = ((u128::from(x) * u128::from(pages)) >> 64) as usize;
                    // SAFETY: inside the mapping of `len` bytes at `base`.
                    sum += u64::from(unsafe {
                        std::ptr::read_volatile((base + p * 4096) as *const u8)
                    });
                }
                std::hint::black_box(sum);
            });
        }
    });
    (threads * reads) as f64 / t.elapsed().as_secs_f64()
}

fn umio(a: &Args, service: FaultService, seed: u64) -> Result<f64> {
    let rt = Runtime::builder()
        .cache_bytes(a.cache_mib << 20)
        .page_size(4096)
        .fault_service(service)
        .remove_events(a.remove_events)
        .build()?;
    let f = File::open(&a.file)?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }?;
    let rate = run(map.as_ptr() as usize, map.len(), a.threads, a.reads, seed);
    let s = rt.stats();
    eprintln!(
        "  {}: {} faults ({} in-thread), {} evicted, {} remove events",
        service.name(),
        s.faults,
        s.in_thread_faults,
        s.evicted_pages,
        s.remove_events
    );
    Ok(rate)
}

fn mmap(a: &Args, seed: u64) -> Result<f64> {
    let f = File::open(&a.file)?;
    let len = f.metadata()?.len() as usize;
    // SAFETY: the file's pages drop out of the page cache; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
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
    // SAFETY: advice on the mapping just made.
    unsafe { libc::madvise(p, len, libc::MADV_RANDOM) };
    let rate = run(p as usize, len, a.threads, a.reads, seed);
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(p, len) };
    Ok(rate)
}

fn main() -> Result<()> {
    let a = args()?;
    println!(
        "random 4 KiB reads, {} thread(s), {} reads each, umio cache {} MiB; accesses/s",
        a.threads, a.reads, a.cache_mib
    );
    println!("round | umio fillers | umio in-thread | mmap MADV_RANDOM | in-thread/mmap");
    for r in 0..a.rounds {
        let seed = 7 + r as u64;
        let want = |side: &str| a.only.as_deref().is_none_or(|o| o == side);
        let fillers = if want("fillers") {
            umio(&a, FaultService::Fillers, seed)?
        } else {
            f64::NAN
        };
        let in_thread = if want("in-thread") {
            umio(&a, FaultService::InThread, seed)?
        } else {
            f64::NAN
        };
        let kernel = if want("mmap") {
            mmap(&a, seed)?
        } else {
            f64::NAN
        };
        println!(
            "{} | {:.0} | {:.0} | {:.0} | {:.2}",
            r + 1,
            fillers,
            in_thread,
            kernel,
            in_thread / kernel
        );
    }
    Ok(())
}
