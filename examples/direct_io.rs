//! Random 4 KiB reads, one thread: umio with its defaults (4 KiB pages,
//! the file read with `O_DIRECT` where the file system allows) beside the
//! device's own `O_DIRECT` one-at-a-time random read rate, in interleaved
//! rounds; and how much of the file the kernel's page cache holds after
//! umio's reads (`mincore`), against umio with `MapOptions::page_cache(true)`.
//! umio runs with each fault service: the filler threads (the default) and
//! the faulting thread itself (`FaultService::InThread`); beside them the
//! floor of the in-thread mechanism without umio (a SIGBUS handler that
//! reads the page with `O_DIRECT` and installs it with `UFFDIO_COPY`:
//! `umio_bench::sigbus_floor`).
//!
//! ```text
//! cargo run --release --example direct_io -- [--dir DIR] [--size MiB] [--cache MiB]
//!                                             [--reads N] [--rounds N]
//! ```
//!
//! Defaults: the temporary directory, a 1024 MiB file, a 256 MiB umio cache,
//! 20000 reads per run, 3 rounds. For a fast device, point `--dir` at ext4
//! on a loop device over a tmpfs file.

use std::error::Error;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

use umio::backends::{cached_bytes, dio_alignment};
use umio::{FaultService, MapOptions, Runtime};
use umio_bench::cli::{self, value_parser};
use umio_bench::sigbus_floor::sigbus_direct_rate;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

struct Args {
    dir: PathBuf,
    size_mib: u64,
    cache_mib: u64,
    reads: usize,
    rounds: usize,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "direct_io",
        "Random 4 KiB reads: umio with its defaults (O_DIRECT where allowed) beside the \
         device's own O_DIRECT reads, and what the kernel's page cache holds afterwards.",
    )
    .arg(
        cli::opt_none(
            "dir",
            "DIR",
            "directory of the test file (default: the temporary directory)",
        )
        .value_parser(value_parser!(PathBuf)),
    )
    .arg(cli::opt("size", "MiB", "1024", "size of the test file").value_parser(value_parser!(u64)))
    .arg(cli::opt("cache", "MiB", "256", "umio's cache").value_parser(value_parser!(u64)))
    .arg(cli::opt("reads", "N", "20000", "reads per run").value_parser(value_parser!(usize)))
    .arg(cli::opt("rounds", "N", "3", "rounds").value_parser(value_parser!(usize)))
    .get_matches();
    Ok(Args {
        dir: cli::get_opt(&m, "dir").unwrap_or_else(std::env::temp_dir),
        size_mib: cli::get(&m, "size"),
        cache_mib: cli::get(&m, "cache"),
        reads: cli::get(&m, "reads"),
        rounds: cli::get(&m, "rounds"),
    })
}

/// xorshift64: the pages of the reads, each page once (a page read again
/// would be a hit for the mappings and a read for the device).
fn offsets(seed: u64, pages: u64, n: usize) -> Vec<u64> {
    let mut x = seed | 1;
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n.min(pages as usize) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = ((u128::from(x) * u128::from(pages)) >> 64) as u64;
        if seen.insert(p) {
            out.push(p);
        }
    }
    out
}

fn drop_cache(f: &File) {
    // SAFETY: advice on a descriptor we own.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

fn share(f: &File) -> Result<f64> {
    let (c, l) = cached_bytes(f)?;
    Ok(c as f64 / l as f64)
}

/// The device's own rate: `pread` with `O_DIRECT`, one 4 KiB read at a time.
fn direct_rate(path: &std::path::Path, pages: &[u64]) -> Result<f64> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let layout = std::alloc::Layout::from_size_align(4096, 4096)?;
    // SAFETY: a non-zero-sized layout.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return Err("out of memory".into());
    }
    // SAFETY: p is 4096 bytes we own until the dealloc below.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, 4096) };
    let t = Instant::now();
    for &pg in pages {
        f.read_exact_at(buf, pg * 4096)?;
    }
    let rate = pages.len() as f64 / t.elapsed().as_secs_f64();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(p, layout) };
    Ok(rate)
}

/// umio: one byte read from each random page of a mapping made with
/// `opts` (each access one miss while the cache is cold: the reads are
/// spread over a file four times the cache). Returns the rate, the share
/// of the file in the page cache after, and the store's name.
fn umio_rate(
    f: &File,
    cache: u64,
    pages: &[u64],
    opts: MapOptions,
    service: FaultService,
) -> Result<(f64, f64, String)> {
    drop_cache(f);
    let rt = Runtime::builder()
        .cache_bytes(cache)
        .fault_service(service)
        .build()?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(f, opts) }?;
    let name = map.store_name().to_owned();
    let m = map.as_slice();
    let mut sum = 0u64;
    let t = Instant::now();
    for &pg in pages {
        sum = sum.wrapping_add(u64::from(m[(pg * 4096) as usize + 17]));
    }
    let rate = pages.len() as f64 / t.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    let s = rt.stats();
    drop(map);
    let shr = share(f)?;
    eprintln!(
        "    umio: {} misses, {} MiB read from the store",
        s.read_misses,
        s.bytes_read >> 20
    );
    Ok((rate, shr, name))
}

fn main() -> Result<()> {
    let a = args()?;
    let len = a.size_mib << 20;
    let mut tmp = tempfile::Builder::new()
        .prefix("umio-dio-")
        .tempfile_in(&a.dir)?;
    {
        let mut chunk = vec![0u8; 1 << 20];
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        for _ in 0..a.size_mib {
            tmp.write_all(&chunk)?;
        }
        tmp.as_file().sync_all()?;
    }
    let f = tmp.reopen()?;
    println!(
        "file: {} MiB in {} (statx STATX_DIOALIGN: {:?}); umio cache {} MiB; {} reads per run",
        a.size_mib,
        a.dir.display(),
        dio_alignment(&f),
        a.cache_mib,
        a.reads
    );
    let pages = len / 4096;
    println!(
        "| round | device O_DIRECT pread, 1 at a time (reads/s) | floor: SIGBUS + O_DIRECT pread + UFFDIO_COPY (faults/s) | ratio | umio defaults (reads/s) | ratio | umio in-thread (reads/s) | ratio | page cache share after umio | umio page_cache(true) (reads/s) | its page cache share |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in 0..a.rounds {
        let seed = 0x9e37_79b9 + r as u64;
        // Each run reads its own offsets: none is warm from another.
        let dev = {
            drop_cache(&f);
            direct_rate(tmp.path(), &offsets(seed, pages, a.reads))?
        };
        let floor = sigbus_direct_rate(tmp.path(), &offsets(seed + 400, pages, a.reads))?;
        let (umio, shr, name) = umio_rate(
            &f,
            a.cache_mib << 20,
            &offsets(seed + 100, pages, a.reads),
            MapOptions::new(),
            FaultService::Fillers,
        )?;
        let (in_thread, _, _) = umio_rate(
            &f,
            a.cache_mib << 20,
            &offsets(seed + 300, pages, a.reads),
            MapOptions::new(),
            FaultService::InThread,
        )?;
        let (cached, cshr, _) = umio_rate(
            &f,
            a.cache_mib << 20,
            &offsets(seed + 200, pages, a.reads),
            MapOptions::new().page_cache(true),
            FaultService::Fillers,
        )?;
        if r == 0 {
            eprintln!("    umio's store with defaults: {name}");
        }
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} | {:.2}% | {:.0} | {:.2}% |",
            r + 1,
            dev,
            floor,
            floor / dev,
            umio,
            umio / dev,
            in_thread,
            in_thread / dev,
            shr * 100.0,
            cached,
            cshr * 100.0
        );
    }
    Ok(())
}
