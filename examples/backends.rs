//! The storage backends side by side: pread/pwrite (`FileStore`), io_uring
//! buffered and `O_DIRECT` (`UringStore`), and DAX emulated on a tmpfs file
//! (`DaxStore`), on the same file and the same umio settings.
//!
//! Three workloads, each on a fresh runtime and mapping:
//! 1. random 4 KiB faults from two threads, two fillers, cache a quarter of
//!    the file: the cost of one fill through each store;
//! 2. a vectored prefetch of 512 disjoint 64 KiB ranges: how many requests
//!    each store has in flight and what that buys;
//! 3. write-back: 64 MiB dirtied, then one flush: the write sizes issued.
//!
//! Rounds alternate the stores, so that each round's ratios compare runs
//! made under the same machine load; the table shows the median round.
//!
//! ```text
//! cargo run --release --example backends -- [--dir DIR] [--size MiB] [--faults N] [--rounds N]
//! ```
//!
//! The file goes to `/dev/shm` by default (tmpfs: a fast device, so the
//! numbers measure the software path, not the disk). With `--dir` on a
//! disk, each store starts with the file dropped from the kernel's page
//! cache, and the requests io_uring keeps in flight overlap the device's
//! latency.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::{
    DaxStore, FileStore, UringOptions, UringStats, UringStore, WRITE_SIZE_BUCKETS,
};
use umio::{MapOptions, PrefetchKind, Runtime, Store};
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Pread,
    Uring,
    UringDirect,
    Dax,
}

const KINDS: [Kind; 4] = [Kind::Pread, Kind::Uring, Kind::UringDirect, Kind::Dax];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pread => "pread/pwrite",
            Kind::Uring => "io_uring",
            Kind::UringDirect => "io_uring O_DIRECT",
            Kind::Dax => "DAX (shared mapping, msync)",
        }
    }
}

/// A store, and the io_uring store behind it (for its counters) if any.
type Opened = (Arc<dyn Store>, Option<Arc<UringStore>>);

/// A store of one kind, and the io_uring store behind it for its counters.
/// The file's pages are dropped from the kernel's page cache first
/// (`fdatasync`, `POSIX_FADV_DONTNEED`; nothing to drop on tmpfs), so that
/// on a disk every store starts cold.
fn open(kind: Kind, path: &PathBuf) -> Result<Opened> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    f.sync_data()?;
    use std::os::fd::AsRawFd;
    // SAFETY: advice on a descriptor we own; no memory is touched.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    Ok(match kind {
        Kind::Pread => (Arc::new(FileStore::new(&f)?), None),
        Kind::Uring | Kind::UringDirect => {
            let u = Arc::new(UringStore::new(
                &f,
                UringOptions::new().direct(kind == Kind::UringDirect),
            )?);
            (u.clone(), Some(u))
        }
        Kind::Dax => (Arc::new(DaxStore::new(&f)?), None),
    })
}

fn runtime(cache: u64) -> Result<Runtime> {
    Ok(Runtime::builder()
        .cache_bytes(cache)
        .page_size(4096)
        .fillers(2)
        .build()?)
}

#[derive(Clone, Copy, Default)]
struct Sample {
    fault_us: f64,
    prefetch_ms: f64,
    prefetch_in_flight: u64,
    flush_ms: f64,
    uring: Option<UringStats>,
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn measure(kind: Kind, path: &PathBuf, size: usize, faults: usize) -> Result<Sample> {
    let mut out = Sample::default();
    // 1. Random 4 KiB faults, two threads.
    {
        let (store, _) = open(kind, path)?;
        let rt = runtime(size as u64 / 4)?;
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let m = unsafe { rt.map(MapOptions::new().store(store).prefetch(PrefetchKind::None)) }?;
        let s = m.as_slice();
        let t = Instant::now();
        let sum: u64 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2u64)
                .map(|i| {
                    sc.spawn(move || {
                        let mut x = 0x9E37_79B9_7F4A_7C15 ^ (i + 1);
                        let mut sum = 0u64;
                        for _ in 0..faults / 2 {
                            sum += u64::from(s[xorshift(&mut x) as usize % s.len()]);
                        }
                        sum
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let el = t.elapsed();
        std::hint::black_box(sum);
        let st = m.stats();
        out.fault_us = el.as_secs_f64() * 1e6 / st.fills.max(1) as f64;
    }
    // 2. Vectored prefetch of 512 disjoint 64 KiB ranges.
    {
        let (store, uring) = open(kind, path)?;
        let rt = runtime(size as u64 / 2)?;
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let m = unsafe { rt.map(MapOptions::new().store(store).prefetch(PrefetchKind::None)) }?;
        let stride = size / 512;
        let ranges: Vec<_> = (0..512).map(|i| i * stride..i * stride + 65536).collect();
        let t = Instant::now();
        m.prefetch_ranges(&ranges)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ranges.iter().all(|r| m.is_resident(r.end - 1)) {
            if Instant::now() > deadline {
                return Err("prefetch did not finish in 60 s".into());
            }
            std::thread::yield_now();
        }
        out.prefetch_ms = t.elapsed().as_secs_f64() * 1e3;
        out.prefetch_in_flight = uring.map_or(1, |u| u.stats().max_in_flight);
    }
    // 3. Write-back of 64 MiB.
    {
        let (store, uring) = open(kind, path)?;
        let rt = runtime(256 << 20)?;
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let mut m = unsafe {
            rt.map(
                MapOptions::new()
                    .store(store)
                    .writable(true)
                    .prefetch(PrefetchKind::None),
            )
        }?
        .into_mut()?;
        let dirty = (64 << 20).min(size);
        m.as_mut_slice()[..dirty].fill(0x5A);
        let before = uring.as_ref().map(|u| u.stats());
        let t = Instant::now();
        m.flush()?;
        out.flush_ms = t.elapsed().as_secs_f64() * 1e3;
        out.uring = match (uring, before) {
            (Some(u), Some(b)) => {
                let a = u.stats();
                let mut by_size = a.writes_by_size;
                for (x, y) in by_size.iter_mut().zip(b.writes_by_size) {
                    *x -= y;
                }
                Some(UringStats {
                    writes: a.writes - b.writes,
                    writes_by_size: by_size,
                    ..a
                })
            }
            _ => None,
        };
        m.unmap()?;
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn size_label(bucket: usize) -> String {
    let kib = 4usize << bucket;
    if kib >= 1024 {
        format!("{} MiB", kib / 1024)
    } else {
        format!("{kib} KiB")
    }
}

fn main() -> Result<()> {
    let m = cli::command(
        "backends",
        "The storage backends side by side (pread, io_uring buffered and O_DIRECT, DAX): \
         random faults, a vectored prefetch and write-back on one file.",
    )
    .arg(
        cli::opt("dir", "DIR", "/dev/shm", "directory of the test file")
            .value_parser(value_parser!(PathBuf)),
    )
    .arg(
        cli::opt("size", "MiB", "256", "size of the test file, at least 64")
            .value_parser(value_parser!(usize)),
    )
    .arg(
        cli::opt("faults", "N", "40000", "random faults per run")
            .value_parser(value_parser!(usize)),
    )
    .arg(
        cli::opt("rounds", "N", "3", "rounds, the stores taking turns")
            .value_parser(value_parser!(usize)),
    )
    .get_matches();
    let dir: PathBuf = cli::get(&m, "dir");
    let (size_mib, faults, rounds): (usize, usize, usize) = (
        cli::get(&m, "size"),
        cli::get(&m, "faults"),
        cli::get(&m, "rounds"),
    );
    if size_mib < 64 || rounds == 0 {
        return Err("--size must be at least 64 (MiB) and --rounds at least 1".into());
    }
    let size = size_mib << 20;
    let file = tempfile::NamedTempFile::new_in(&dir)?;
    {
        let mut x = 12345u64;
        let data: Vec<u8> = (0..size).map(|_| xorshift(&mut x) as u8).collect();
        std::fs::write(file.path(), data)?;
    }
    let path = file.path().to_path_buf();
    println!(
        "umio backends: {size_mib} MiB file in {} ({}), 4 KiB pages, 2 fillers, {rounds} rounds",
        dir.display(),
        if dir.starts_with("/dev/shm") {
            "tmpfs"
        } else {
            "not tmpfs"
        }
    );
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); KINDS.len()];
    for round in 0..rounds {
        for k in 0..KINDS.len() {
            // Rotate the order so no store always runs first.
            let i = (k + round) % KINDS.len();
            let s = measure(KINDS[i], &path, size, faults)?;
            samples[i].push(s);
            eprint!(".");
        }
    }
    eprintln!();
    println!();
    println!(
        "| store | random 4 KiB fault, us | vs pread | prefetch 512 x 64 KiB, ms | in flight | flush 64 MiB, ms | MiB/s |"
    );
    println!("|---|---|---|---|---|---|---|");
    let base = median(samples[0].iter().map(|s| s.fault_us).collect());
    for (i, kind) in KINDS.iter().enumerate() {
        let s = &samples[i];
        let fault = median(s.iter().map(|x| x.fault_us).collect());
        let pre = median(s.iter().map(|x| x.prefetch_ms).collect());
        let flush = median(s.iter().map(|x| x.flush_ms).collect());
        let inflight = s.iter().map(|x| x.prefetch_in_flight).max().unwrap_or(1);
        println!(
            "| {} | {fault:.1} | {:.2}x | {pre:.1} | {inflight} | {flush:.1} | {:.0} |",
            kind.name(),
            fault / base,
            64.0 / (flush / 1e3),
        );
    }
    println!();
    println!("Write-back requests issued by io_uring for one flush of 64 MiB (last round):");
    for (i, kind) in KINDS.iter().enumerate() {
        if let Some(u) = samples[i].last().and_then(|s| s.uring) {
            let sizes: Vec<String> = (0..WRITE_SIZE_BUCKETS)
                .filter(|&b| u.writes_by_size[b] > 0)
                .map(|b| format!("{} x {}", u.writes_by_size[b], size_label(b)))
                .collect();
            println!(
                "- {}: {} writes ({}), largest {} KiB, at most {} requests in flight",
                kind.name(),
                u.writes,
                sizes.join(", "),
                u.largest_write >> 10,
                u.max_in_flight
            );
        }
    }
    Ok(())
}
