//! Huge pages beside Linux `mmap`: a sequential scan and a locality-heavy
//! random workload over a file four times the cache, with umio at 4 KiB
//! pages, 4 KiB pages promoted to 2 MiB huge pages in the background,
//! 2 MiB fill units in ordinary memory, and hugetlbfs 2 MiB pages; and
//! Linux `mmap` of the same data under a cgroup v1 memory limit of the
//! cache's size (a copy on ext4 over a loop device over /dev/shm: tmpfs
//! pages are not charged to a cgroup).
//!
//! For each: page faults taken (umio: fault events; mmap: minor + major
//! faults from `getrusage`), bytes per store read, and throughput. Then
//! one cache pool against two (xmap's: `Builder::huge_cache_bytes`): how
//! many pages of a hot set of small pages scans through huge pages evict.
//!
//! ```text
//! cargo run --release --example huge -- [--size MiB] [--cache MiB] [--ops N]
//! ```
//!
//! Root is needed (userfaultfd; reserving hugetlbfs pages, restored at
//! exit; the cgroup and the loop device). Without them the rows that need
//! them are skipped, saying why.

use umio_bench::cli::{self, value_parser};
use umio_bench::policy_workload;

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use policy_workload::{LoopFs, Mmap, Result, drop_cache, in_memory_cgroup};
use umio::backends::FileStore;
use umio::{MapOptions, PrefetchKind, PromoteKind, Runtime};

const MIB: usize = 1 << 20;

#[derive(Clone, Copy)]
struct Params {
    size: usize,
    cache: usize,
    ops: usize,
}

/// One workload's outcome.
#[derive(Clone, Copy, Default)]
struct Outcome {
    time: Duration,
    faults: u64,
    reads: u64,
    bytes: u64,
    sum: u64,
}

/// Reads one word every 4 KiB from start to end.
fn scan(base: *const u8, len: usize) -> u64 {
    let mut sum = 0u64;
    for off in (0..len).step_by(4096) {
        // SAFETY: off < len, within the mapping.
        sum = sum.wrapping_add(unsafe { base.add(off).cast::<u64>().read_volatile() });
    }
    sum
}

/// `ops` reads: a random 2 MiB range, then 64 random 4 KiB pages in it
/// (what graph and index workloads look like: clusters of nearby pages).
fn clustered(base: *const u8, len: usize, ops: usize) -> u64 {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as usize
    };
    let ranges = len / (2 * MIB);
    let mut sum = 0u64;
    for _ in 0..ops / 64 {
        let r = next() % ranges * 2 * MIB;
        for _ in 0..64 {
            let off = r + next() % 512 * 4096;
            // SAFETY: off < ranges * 2 MiB <= len.
            sum = sum.wrapping_add(unsafe { base.add(off).cast::<u64>().read_volatile() });
        }
    }
    sum
}

fn minor_major_faults() -> u64 {
    // SAFETY: getrusage writes one struct rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_minflt + ru.ru_majflt) as u64
}

#[derive(Clone, Copy)]
enum Config {
    Small,
    SmallReadAhead,
    Promote,
    Large,
    LargeReadAhead,
    Hugetlb,
    HugetlbReadAhead,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Small => "umio 4 KiB, no read-ahead",
            Config::SmallReadAhead => "umio 4 KiB, read-ahead",
            Config::Promote => "umio 4 KiB, promote-sequential",
            Config::Large => "umio 2 MiB fill unit",
            Config::LargeReadAhead => "umio 2 MiB fill unit, read-ahead 8 MiB",
            Config::Hugetlb => "umio hugetlbfs 2 MiB",
            Config::HugetlbReadAhead => "umio hugetlbfs 2 MiB, read-ahead 8 MiB",
        }
    }
}

fn run_umio(p: &Params, file: &File, config: Config, clustered_ops: bool) -> Result<Outcome> {
    let rt = Runtime::builder()
        .cache_bytes(p.cache as u64)
        .fillers(2)
        .build()?;
    let ahead = PrefetchKind::Sequential {
        max_window: 8 * MIB,
    };
    let mut opts = MapOptions::new()
        .store(Arc::new(FileStore::new(file)?))
        .page_size(4096)
        .prefetch(PrefetchKind::None);
    opts = match config {
        Config::Small => opts,
        Config::SmallReadAhead => opts.prefetch(PrefetchKind::Sequential {
            max_window: 2 * MIB,
        }),
        Config::Promote => opts.promote(PromoteKind::Sequential),
        Config::Large => opts.page_size(2 * MIB),
        Config::LargeReadAhead => opts.page_size(2 * MIB).prefetch(ahead),
        Config::Hugetlb | Config::HugetlbReadAhead => MapOptions::new()
            .store(Arc::new(FileStore::new(file)?))
            .hugetlb(false)
            .prefetch(if matches!(config, Config::Hugetlb) {
                PrefetchKind::None
            } else {
                ahead
            }),
    };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map(opts) }?;
    let t = Instant::now();
    let sum = if clustered_ops {
        clustered(m.as_ptr(), m.len(), p.ops)
    } else {
        scan(m.as_ptr(), m.len())
    };
    let time = t.elapsed();
    let st = rt.stats();
    Ok(Outcome {
        time,
        faults: st.faults,
        reads: st.store_reads,
        bytes: st.bytes_read,
        sum,
    })
}

fn run_mmap(p: &Params, file: &File, clustered_ops: bool) -> Outcome {
    drop_cache(file);
    let advice = if clustered_ops {
        libc::MADV_RANDOM
    } else {
        libc::MADV_SEQUENTIAL
    };
    let m = Mmap::new(file, 0, p.size, advice).expect("mmap");
    let f0 = minor_major_faults();
    let t = Instant::now();
    let sum = if clustered_ops {
        clustered(m.ptr, m.len, p.ops)
    } else {
        scan(m.ptr, m.len)
    };
    Outcome {
        time: t.elapsed(),
        faults: minor_major_faults() - f0,
        reads: 0,
        bytes: 0,
        sum,
    }
}

/// Raises `vm.nr_hugepages` to `n` for its lifetime.
struct HugePool(Option<String>);

impl HugePool {
    fn reserve(n: usize) -> HugePool {
        const NR: &str = "/proc/sys/vm/nr_hugepages";
        let was = std::fs::read_to_string(NR).ok();
        if std::fs::write(NR, n.to_string()).is_err() {
            return HugePool(None);
        }
        HugePool(was)
    }
}

impl Drop for HugePool {
    fn drop(&mut self) {
        if let Some(was) = &self.0 {
            let _ = std::fs::write("/proc/sys/vm/nr_hugepages", was.trim());
        }
    }
}

fn row(name: &str, p: &Params, o: &Outcome, base: Option<&Outcome>, clustered_ops: bool) {
    let touched = if clustered_ops {
        p.ops / 64 * 64
    } else {
        p.size / 4096
    };
    let per_sec = touched as f64 / o.time.as_secs_f64();
    let per_io = o
        .bytes
        .checked_div(o.reads)
        .map_or("-".into(), |b| format!("{} KiB", b / 1024));
    let vs = base.map_or("-".into(), |b| {
        format!("{:.2}x", b.time.as_secs_f64() / o.time.as_secs_f64())
    });
    println!(
        "| {name} | {:.1} | {:.0} | {} | {per_io} | {vs} |",
        o.time.as_secs_f64() * 1e3,
        per_sec,
        o.faults,
    );
}

fn main() -> Result<()> {
    let m = cli::command(
        "huge",
        "Huge pages beside Linux mmap: 4 KiB pages, promotion to 2 MiB, 2 MiB fill units and \
         hugetlbfs pages on a scan and a random workload over a file four times the cache.",
    )
    .arg(
        cli::opt(
            "size",
            "MiB",
            "256",
            "size of the file, a multiple of 2, at least 16",
        )
        .value_parser(value_parser!(usize)),
    )
    .arg(
        cli::opt("cache", "MiB", "64", "cache size, at least 8").value_parser(value_parser!(usize)),
    )
    .arg(cli::opt("ops", "N", "200000", "random operations").value_parser(value_parser!(usize)))
    .get_matches();
    let p = Params {
        size: cli::get::<usize>(&m, "size") * MIB,
        cache: cli::get::<usize>(&m, "cache") * MIB,
        ops: cli::get(&m, "ops"),
    };
    if p.size < 16 * MIB || p.cache < 8 * MIB || !p.size.is_multiple_of(2 * MIB) {
        return Err("--size must be a multiple of 2 (MiB), at least 16; --cache at least 8".into());
    }
    // The data: on tmpfs for umio (a fast device), and a copy on ext4 over
    // a loop device for Linux mmap under a cgroup limit.
    let tmp = tempfile::NamedTempFile::new_in("/dev/shm")?;
    {
        let mut x = 7u64;
        let data: Vec<u8> = (0..p.size)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        std::fs::write(tmp.path(), data)?;
    }
    let file = File::open(tmp.path())?;
    let fs = LoopFs::new(p.size + p.size / 4 + 64 * MIB);
    let ext4 = match &fs {
        Ok(fs) => {
            let copy = fs.mount.join("data.bin");
            std::fs::copy(tmp.path(), &copy)?;
            Some(File::open(&copy)?)
        }
        Err(e) => {
            eprintln!("mmap under a cgroup limit skipped: {e}");
            None
        }
    };
    let pool = HugePool::reserve(p.cache / (2 * MIB) + 4);
    println!(
        "{} MiB file (umio: tmpfs; mmap: ext4 on a loop device over tmpfs, cgroup limit {} MiB), cache {} MiB, 2 fillers",
        p.size / MIB,
        p.cache / MIB,
        p.cache / MIB
    );
    for clustered_ops in [false, true] {
        println!();
        if clustered_ops {
            println!(
                "Clustered random reads: {} reads, 64 random 4 KiB pages per random 2 MiB range",
                p.ops / 64 * 64
            );
        } else {
            println!("Sequential scan: one 8-byte read per 4 KiB");
        }
        println!();
        println!("| configuration | ms | pages/s | faults | bytes per store read | vs mmap |");
        println!("|---|---|---|---|---|---|");
        let base = match &ext4 {
            Some(f) => {
                let o = in_memory_cgroup(p.cache, || run_mmap(&p, f, clustered_ops))?;
                row(
                    &format!("Linux mmap, cgroup {} MiB", p.cache / MIB),
                    &p,
                    &o,
                    None,
                    clustered_ops,
                );
                Some(o)
            }
            None => None,
        };
        let tmpfs = run_mmap(&p, &file, clustered_ops);
        row(
            "Linux mmap, tmpfs, no limit",
            &p,
            &tmpfs,
            base.as_ref(),
            clustered_ops,
        );
        let mut sums = vec![tmpfs.sum];
        for c in [
            Config::Small,
            Config::SmallReadAhead,
            Config::Promote,
            Config::Large,
            Config::LargeReadAhead,
            Config::Hugetlb,
            Config::HugetlbReadAhead,
        ] {
            if matches!(c, Config::Hugetlb | Config::HugetlbReadAhead) && pool.0.is_none() {
                eprintln!("hugetlbfs skipped: cannot raise vm.nr_hugepages");
                continue;
            }
            match run_umio(&p, &file, c, clustered_ops) {
                Ok(o) => {
                    row(c.name(), &p, &o, base.as_ref(), clustered_ops);
                    sums.push(o.sum);
                }
                Err(e) => eprintln!("{} skipped: {e}", c.name()),
            }
        }
        if sums.iter().any(|&s| s != sums[0]) {
            return Err(format!("checksums differ: {sums:?}").into());
        }
    }
    two_pools(&p, &file)?;
    drop(ext4);
    drop(fs);
    Ok(())
}

/// One pool or two (`Builder::huge_cache_bytes`), with the same memory:
/// a hot set of 4 KiB pages (40% of the cache) is read whole, then each
/// round scans the whole file through 2 MiB pages and reads random pages
/// of the hot set. With one pool the scans evict the hot set; with two,
/// the small pages keep half the cache and the scans the other half.
fn two_pools(p: &Params, file: &File) -> Result<()> {
    let hot_len = (p.cache * 2 / 5) & !(2 * MIB - 1);
    let rounds = 4;
    let reads = 20_000;
    println!();
    println!(
        "Two pools: a {} MiB hot set of 4 KiB pages, then {rounds} rounds of a {} MiB scan \
         through 2 MiB pages and {reads} random reads of the hot set; {} MiB of cache in all",
        hot_len / MIB,
        p.size / MIB,
        p.cache / MIB
    );
    println!();
    println!("| configuration | hot-set misses per round | hot reads/s | scan ms per round |");
    println!("|---|---|---|---|");
    for split in [false, true] {
        let mut b = Runtime::builder().fillers(2);
        b = if split {
            b.cache_bytes((p.cache / 2) as u64)
                .huge_cache_bytes((p.cache / 2) as u64)
        } else {
            b.cache_bytes(p.cache as u64)
        };
        let rt = b.build()?;
        let store = Arc::new(FileStore::new(file)?);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let hot = unsafe {
            rt.map(
                MapOptions::new()
                    .store(store.clone())
                    .len(hot_len)
                    .page_size(4096)
                    .prefetch(PrefetchKind::None),
            )
        }?;
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let scanned = unsafe {
            rt.map(
                MapOptions::new()
                    .store(store)
                    .page_size(2 * MIB)
                    .prefetch(PrefetchKind::None),
            )
        }?;
        std::hint::black_box(scan(hot.as_ptr(), hot.len()));
        let (mut misses, mut hot_time, mut scan_time) = (0u64, Duration::ZERO, Duration::ZERO);
        let mut x = 11u64;
        for _ in 0..rounds {
            let t = Instant::now();
            std::hint::black_box(scan(scanned.as_ptr(), scanned.len()));
            scan_time += t.elapsed();
            let before = hot.stats().fills;
            let t = Instant::now();
            let mut sum = 0u64;
            for _ in 0..reads {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let page = (x >> 33) as usize % (hot_len / 4096);
                // SAFETY: page * 4096 < hot_len, within the mapping.
                sum = sum.wrapping_add(unsafe {
                    hot.as_ptr().add(page * 4096).cast::<u64>().read_volatile()
                });
            }
            std::hint::black_box(sum);
            hot_time += t.elapsed();
            misses += hot.stats().fills - before;
        }
        println!(
            "| {} | {} | {:.0} | {:.1} |",
            if split {
                format!(
                    "two pools: {} MiB small pages + {} MiB huge pages",
                    p.cache / 2 / MIB,
                    p.cache / 2 / MIB
                )
            } else {
                format!("one pool of {} MiB", p.cache / MIB)
            },
            misses / rounds as u64,
            (reads * rounds) as f64 / hot_time.as_secs_f64(),
            scan_time.as_secs_f64() * 1e3 / rounds as f64
        );
    }
    Ok(())
}
