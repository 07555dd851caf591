//! `bench direct-io`: random 4 KiB reads, one thread: umio with its
//! defaults (4 KiB pages, the file read with `O_DIRECT` where the file
//! system allows), with each fault service (the filler threads, the
//! faulting thread itself), and with `MapOptions::page_cache(true)`,
//! beside the device's own `O_DIRECT` rates (`umio_bench::device`) and the
//! floor of the in-thread mechanism without umio (a SIGBUS handler that
//! reads the page with `O_DIRECT` and installs it with `UFFDIO_COPY`:
//! `umio_bench::sigbus_floor`), in interleaved rounds; and how much of the
//! file the kernel's page cache holds after umio's reads (`mincore`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use umio::backends::{cached_bytes, dio_alignment};
use umio::{FaultService, MapOptions, Runtime};
use umio_bench::bench::{distinct_pages, drop_cache, load, touch_pages};
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::sigbus_floor::sigbus_direct_rate;
use umio_bench::table::{Table, num};

use crate::{Result, emit};

pub fn command() -> Command {
    cli::command(
        "direct-io",
        "Random 4 KiB reads by one thread: umio (filler threads, in-thread, with the page \
         cache) beside the device's own O_DIRECT rates and the in-thread floor, and what the \
         kernel's page cache holds afterwards.",
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
}

/// umio: one byte read from each page of `pages` through a mapping made
/// with `opts` (each one a miss: the pages are distinct and the file is
/// larger than the cache). Returns the rate and the share of the file in
/// the page cache after.
fn umio_rate(
    f: &File,
    cache: u64,
    pages: &[usize],
    opts: MapOptions,
    service: FaultService,
) -> Result<(f64, f64)> {
    drop_cache(f);
    let rt = Runtime::builder()
        .cache_bytes(cache)
        .fault_service(service)
        .build()?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(f, opts) }?;
    let t = std::time::Instant::now();
    // SAFETY: the pages are below the file's page count, all mapped.
    std::hint::black_box(unsafe { touch_pages(map.as_ptr(), pages) });
    let rate = pages.len() as f64 / t.elapsed().as_secs_f64();
    drop(map);
    let (cached, len) = cached_bytes(f)?;
    Ok((rate, cached as f64 / len as f64))
}

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let dir: PathBuf = cli::get_opt(m, "dir").unwrap_or_else(std::env::temp_dir);
    let (size_mib, cache_mib): (u64, u64) = (cli::get(m, "size"), cli::get(m, "cache"));
    let (reads, rounds): (usize, usize) = (cli::get(m, "reads"), cli::get(m, "rounds"));
    let mut tmp = tempfile::Builder::new()
        .prefix("umio-dio-")
        .tempfile_in(&dir)?;
    let mut chunk = vec![0u8; 1 << 20];
    for (i, b) in chunk.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    for _ in 0..size_mib {
        tmp.write_all(&chunk)?;
    }
    tmp.as_file().sync_all()?;
    let f = tmp.reopen()?;
    println!(
        "file: {size_mib} MiB in {} (statx STATX_DIOALIGN: {:?}); umio cache {cache_mib} MiB; \
         {reads} reads per run, each page once; reads per second",
        dir.display(),
        dio_alignment(&f),
    );
    let pages = (size_mib << 20) as usize / 4096;
    let cache = cache_mib << 20;
    let mut t = Table::new(
        "direct-io",
        [
            "round",
            "device qd1",
            "device qd32",
            "floor (SIGBUS+O_DIRECT)",
            "umio fillers",
            "umio in-thread",
            "page cache % after umio",
            "umio page_cache(true)",
            "its page cache %",
            "in-thread / device qd1",
            "load",
        ],
    );
    for r in 0..rounds {
        let seed = 0x9e37_79b9 + r as u64;
        // Each run reads its own pages: none is warm from another.
        let dev = umio_bench::device::measure(tmp.path(), Duration::from_secs(1))?;
        let floor_pages: Vec<u64> = distinct_pages(seed + 400, pages, reads)
            .into_iter()
            .map(|p| p as u64)
            .collect();
        let floor = sigbus_direct_rate(tmp.path(), &floor_pages)?;
        let (fillers, share) = umio_rate(
            &f,
            cache,
            &distinct_pages(seed + 100, pages, reads),
            MapOptions::new(),
            FaultService::Fillers,
        )?;
        let (in_thread, _) = umio_rate(
            &f,
            cache,
            &distinct_pages(seed + 300, pages, reads),
            MapOptions::new(),
            FaultService::InThread,
        )?;
        let (cached, cached_share) = umio_rate(
            &f,
            cache,
            &distinct_pages(seed + 200, pages, reads),
            MapOptions::new().page_cache(true),
            FaultService::Fillers,
        )?;
        t.push([
            num((r + 1) as f64, 0),
            num(dev.random_4k_qd1, 0),
            num(dev.random_4k_qd32, 0),
            num(floor, 0),
            num(fillers, 0),
            num(in_thread, 0),
            num(share * 100.0, 2),
            num(cached, 0),
            num(cached_share * 100.0, 2),
            num(in_thread / dev.random_4k_qd1, 2),
            load(),
        ]);
        eprintln!("round {} of {rounds} done", r + 1);
    }
    emit(&t, "random 4 KiB reads, one thread (reads/s):", out)
}
