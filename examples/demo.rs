//! umio against Linux `mmap(2)`, on the same file, under the same memory
//! budget, with the device's own rates beside them.
//!
//! The demo writes a data file of pseudo-random bytes (each 64-bit word a
//! function of its position, so that any read can be checked without I/O),
//! measures the device it is on (4 KiB `O_DIRECT` reads one at a time and
//! 32 at a time, 2 MiB reads: about a second of each), then runs three
//! workloads through a umio mapping of the file, whose page faults umio
//! serves in user space (userfaultfd) out of a cache smaller than the file,
//! and through plain `mmap(MAP_SHARED)`s, whose faults the kernel serves
//! out of its page cache: one with the advice that suits the workload
//! (`MADV_RANDOM` for random reads and writes; the default read-ahead for
//! the scan) and one with the default advice a program gets when it does
//! not call `madvise`.
//!
//! Each run is a child process placed in a memory cgroup of its own with
//! the same limit (`--budget`; cgroup v1's `memory.limit_in_bytes` where
//! the machine mounts the v1 memory controller, else v2's `memory.max`):
//! the kernel's page cache of the file that a side causes is charged to its
//! cgroup, so mmap gets the budget as page cache and umio as its cache plus
//! whatever the kernel caches for it (by default nothing: umio reads with
//! `O_DIRECT`, or drops what it read). Both sides' memory is counted the
//! same way: umio's cache at the end plus the file's pages in the kernel's
//! page cache after the run (`mincore` of the file), and the cgroup's peak
//! usage, which includes everything the process charged (heap, page
//! tables, page cache). Without the right to make cgroups (not root), the
//! runs are children without a limit, and the demo says so. The children
//! draw their progress bars on the demo's terminal and report their
//! numbers to it on a pipe.
//!
//! 1. random reads: 8-byte reads at random offsets, checksummed;
//! 2. a sequential scan: the sum of every 64-bit word of the file;
//! 3. random writes: 4 KiB-aligned blocks of a pattern, then a flush
//!    (`Mapping::flush` for umio, `msync(MS_SYNC)` for mmap), verified by
//!    reading a sample of the blocks back with `pread`.
//!
//! Every run stops at its deadline (`--seconds`, 20 by default) if it has
//! not finished, and reports its rate and how far it got, so that the demo
//! ends within a few minutes however slow the disk (a write run's flush
//! comes after its deadline, and is bounded by the budget it dirtied).
//! Every checksum and scan sum is checked against the file's content; the
//! written blocks must be on disk. Any difference aborts the demo. Every
//! run starts cold: the file's page cache is dropped (`fdatasync` and
//! `POSIX_FADV_DONTNEED`) and the mapping, and for umio the runtime, are
//! fresh. A table of times, rates, hit ratios and memory follows.
//!
//! ```text
//! cargo run --release --example demo -- [--dir DIR] [--size MiB] [--budget MiB]
//!                                        [--cache MiB] [--page-size KiB] [--ops N]
//!                                        [--seconds S]
//! ```
//!
//! * `--dir DIR`: where the data file goes (default: the temp directory);
//!   it is removed at exit.
//! * `--size MiB`: size of the data file (default 256).
//! * `--budget MiB`: the memory limit of each side's cgroup (default: a
//!   quarter of the file).
//! * `--cache MiB`: umio's cache bound (default: the budget less 16 MiB
//!   for the process itself, at least half the budget).
//! * `--page-size KiB`: umio's fill unit, a multiple of 4 (default 4).
//! * `--ops N`: random reads (default 200000); the write workload makes
//!   N/8 writes.
//! * `--seconds S`: the deadline of each run (default 20).
//!
//! Other umio settings (filler and evictor threads, eviction policy,
//! read-ahead) come from the `UMIO_*` environment variables read by
//! `Builder::from_env`; the flags above take precedence.
//!
//! umio needs userfaultfd (full mode as root or with
//! `vm.unprivileged_userfaultfd=1`; user-mode-only faults otherwise) and,
//! for its writable mapping, write-protect faults (Linux 5.7 or later).

use std::error::Error;
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use umio_bench::cli::{self, value_parser};
use umio_bench::device::{self, BlockDevice, DeviceRates};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MIB: usize = 1 << 20;
/// Unit of the write workload.
const BLOCK: usize = 4096;
/// Seeds of the file's content, the read offsets and the written blocks.
const FILE_SEED: u64 = 0x243f_6a88_85a3_08d3;
const READ_SEED: u64 = 0x1319_8a2e_0370_7344;
const WRITE_SEED: u64 = 0xa409_3822_299f_31d0;
/// Reads or writes between two looks at the clock: few enough that a run
/// whose every access waits for the disk stops close to its deadline.
const CHECK_EVERY: u64 = 64;
/// Written blocks read back after each write run, at most.
const VERIFY_SAMPLES: u64 = 2048;
/// How long the device is measured doing each kind of read.
const DEVICE_PROBE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--child") {
        return match child() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match Args::parse().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let len = args
        .size_mib
        .checked_mul(MIB)
        .ok_or("--size is too large")?;
    let budget = match args.budget_mib {
        Some(m) => m.checked_mul(MIB).ok_or("--budget is too large")?,
        None => len / 4,
    } as u64;
    let cache = match args.cache_mib {
        Some(m) => m.checked_mul(MIB).ok_or("--cache is too large")? as u64,
        None => budget.saturating_sub(16 << 20).max(budget / 2),
    };
    let page_size = args
        .page_kib
        .checked_mul(1024)
        .ok_or("--page-size is too large")?;
    let runs_planned: usize = WORKLOADS.iter().map(|w| w.sides().len()).sum();
    println!(
        "{runs_planned} runs, each stopped after {} s if not done (--seconds): about {} minutes \
         at most, whatever the disk.",
        args.seconds,
        (runs_planned as u64 * args.seconds + 60).div_ceil(60)
    );

    let mut data = tempfile::Builder::new()
        .prefix("umio-demo-")
        .suffix(".bin")
        .tempfile_in(&args.dir)
        .map_err(|e| format!("creating the data file in {}: {e}", args.dir.display()))?;
    println!(
        "data file: {} ({} MiB), on {}",
        data.path().display(),
        args.size_mib,
        describe_filesystem(data.path())
    );
    let started = Instant::now();
    write_data_file(data.as_file_mut(), len)?;
    println!("  written in {:.1} s.", started.elapsed().as_secs_f64());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(data.path())?;

    let block_device = BlockDevice::of(&file);
    let rates = match &block_device {
        Some(d) => {
            println!("device: {}", d.describe());
            let rates = device::measure(data.path(), DEVICE_PROBE);
            match &rates {
                Ok(r) => println!(
                    "  its own rates (O_DIRECT through this file: no page cache, no umio; \
                     about a second each):\n  \
                     4 KiB reads at random offsets: {} reads/s one at a time, {} reads/s {} at a \
                     time; 2 MiB reads in order: {:.0} MB/s.",
                    si(r.random_4k_qd1),
                    si(r.random_4k_qd32),
                    device::DEPTH,
                    r.seq_2m / 1e6
                ),
                Err(e) => println!("  its own rates: not measured ({e})."),
            }
            rates.ok()
        }
        None => {
            println!(
                "device: none (the file system has no block device under it): no device rates."
            );
            None
        }
    };
    match block_device.as_ref().and_then(|d| d.read_ahead_kb) {
        Some(kb) => println!(
            "  read-ahead: with the default advice, a miss of mmap reads up to {kb} KiB around \
             the page (the kernel's window for this device): what a scan wants, and megabytes \
             read per 8-byte random read, which MADV_RANDOM turns off (the page alone). umio \
             reads ahead only where its misses are sequential (up to 2 MiB by default)."
        ),
        None => println!(
            "  read-ahead: mmap uses the kernel's window, umio its own (up to 2 MiB, only where \
             its misses are sequential)."
        ),
    }
    let cgroup = Cgroups::detect();
    match &cgroup {
        Some(c) => println!(
            "budget: each side runs in a child process in its own memory cgroup ({}) \
             limited to {} MiB.",
            c.describe(),
            budget >> 20
        ),
        None => println!(
            "budget: NOT ENFORCED: no memory cgroup could be made here (run as root on a \
             machine with the v1 or v2 memory controller); {} MiB is umio's only.",
            budget >> 20
        ),
    }
    println!(
        "umio: cache {} MiB ({:.0}% of the file), page size {} KiB, the file read and \
         written without the kernel's page cache (UMIO_PAGE_CACHE=1 to keep it).",
        cache / MIB as u64,
        100.0 * cache as f64 / len as f64,
        args.page_kib
    );
    println!(
        "mmap: MAP_SHARED of the file; its memory is the kernel page cache, bounded by the \
         cgroup. Two rows where the advice matters: `mmap RANDOM` after \
         madvise(MADV_RANDOM) (its best for random access), `mmap default` with no madvise \
         (what a program gets unless it asks); the scan's best advice is the default."
    );
    println!(
        "Every run starts cold: the file's page cache is dropped (fdatasync + \
         POSIX_FADV_DONTNEED, where the filesystem allows), the process, mapping and umio \
         runtime are fresh.\n"
    );

    let bench = Bench {
        file: &file,
        len,
        cache,
        page_size,
        read_ops: args.ops,
        write_ops: (args.ops / 8).max(1),
        deadline: Duration::from_secs(args.seconds),
    };
    let mut runs = Vec::new();
    for workload in WORKLOADS {
        for &side in workload.sides() {
            let run = bench.run_child(data.path(), workload, side, budget, cgroup.as_ref())?;
            bench.check(&run)?;
            println!(
                "{workload} · {side}: {} of {} {} in {:.2} s{}",
                run.done,
                bench.ops(workload),
                workload.unit(),
                run.seconds,
                if run.done < bench.ops(workload) {
                    " (stopped at the deadline)"
                } else {
                    ""
                }
            );
            runs.push(run);
        }
    }
    println!();
    print_table(&bench, &runs, cgroup.as_ref().map(|_| budget));
    print_beside_device(&runs, rates, block_device.as_ref());
    println!();
    for r in &runs {
        println!("{} · {}: {}", r.workload, r.side, r.detail);
    }

    drop(file);
    data.close()?;
    Ok(())
}

/// The command line.
struct Args {
    dir: PathBuf,
    size_mib: usize,
    budget_mib: Option<usize>,
    cache_mib: Option<usize>,
    page_kib: usize,
    ops: u64,
    seconds: u64,
}

impl Args {
    fn parse() -> Result<Args> {
        let positive = |v: &str| -> std::result::Result<usize, String> {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{v:?} is not a positive number"))
        };
        let m = cli::command(
            "demo",
            "umio beside Linux mmap, each under the same memory cgroup limit: random reads, a \
             scan and random writes over a file larger than the memory allowed, with the \
             device's own rates beside them; each run stops at a deadline.\n\
             Other umio settings come from UMIO_* environment variables (Builder::from_env).",
        )
        .arg(
            cli::opt_none(
                "dir",
                "DIR",
                "directory of the data file (default: the temp directory)",
            )
            .value_parser(value_parser!(PathBuf)),
        )
        .arg(cli::opt("size", "MiB", "256", "size of the data file").value_parser(positive))
        .arg(
            cli::opt_none(
                "budget",
                "MiB",
                "memory cgroup limit of each side (default: a quarter of the file)",
            )
            .value_parser(positive),
        )
        .arg(
            cli::opt_none(
                "cache",
                "MiB",
                "umio cache bound (default: the budget less 16 MiB, at least half of it)",
            )
            .value_parser(positive),
        )
        .arg(
            cli::opt("page-size", "KiB", "4", "umio fill unit, a multiple of 4")
                .value_parser(positive),
        )
        .arg(cli::opt("ops", "N", "200000", "random reads; writes are N/8").value_parser(positive))
        .arg(
            cli::opt(
                "seconds",
                "S",
                "20",
                "deadline of each run: it stops there and reports how far it got",
            )
            .value_parser(positive),
        )
        .get_matches();
        Ok(Args {
            dir: cli::get_opt(&m, "dir").unwrap_or_else(std::env::temp_dir),
            size_mib: cli::get(&m, "size"),
            budget_mib: cli::get_opt(&m, "budget"),
            cache_mib: cli::get_opt(&m, "cache"),
            page_kib: cli::get(&m, "page-size"),
            ops: cli::get::<usize>(&m, "ops") as u64,
            seconds: cli::get::<usize>(&m, "seconds") as u64,
        })
    }
}

/// xorshift64 (Marsaglia): plenty for picking offsets.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // The state must not be zero.
        XorShift(seed | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (Lemire's multiply-shift; the bias is negligible).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The data file's 64-bit word number `i` (little-endian on disk): a
/// function of `i` alone (splitmix64's finalizer), so that the expected
/// result of any run can be computed without reading the file.
fn word_at(i: u64) -> u64 {
    let mut z = i
        .wrapping_add(FILE_SEED)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8 bytes of the data file at byte `at`, as a little-endian word.
fn bytes_at(at: u64) -> u64 {
    let (i, shift) = (at / 8, 8 * (at % 8));
    if shift == 0 {
        word_at(i)
    } else {
        (word_at(i) >> shift) | (word_at(i + 1) << (64 - shift))
    }
}

/// Fills `file` with `len` bytes of [`word_at`] and syncs it.
fn write_data_file(file: &mut File, len: usize) -> Result<()> {
    let mut chunk = vec![0u8; MIB];
    let mut out = BufWriter::with_capacity(4 * MIB, &mut *file);
    let mut i = 0u64;
    for _ in 0..len / MIB {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&word_at(i).to_le_bytes());
            i += 1;
        }
        out.write_all(&chunk)?;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    Ok(())
}

/// A number with a k or M suffix, three significant digits or so.
fn si(v: f64) -> String {
    match v {
        v if !v.is_finite() => "-".to_owned(),
        v if v >= 99.95e6 => format!("{:.0} M", v / 1e6),
        v if v >= 999.5e3 => format!("{:.1} M", v / 1e6),
        v if v >= 99.95e3 => format!("{:.0} k", v / 1e3),
        v if v >= 1e3 => format!("{:.1} k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// The filesystem holding `path`, from `/proc/self/mountinfo`: the entry of
/// the longest mount point that is a prefix of the path.
fn describe_filesystem(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "an unknown filesystem".into();
    };
    let mut best: Option<(PathBuf, String, String)> = None;
    for line in mountinfo.lines() {
        // id parent major:minor root mount-point options [optional...] - fstype source super-options
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|&f| f == "-") else {
            continue;
        };
        let (Some(mount_point), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        let mount_point = PathBuf::from(unescape_mountinfo(mount_point));
        let longer = best
            .as_ref()
            .is_none_or(|(b, ..)| mount_point.as_os_str().len() >= b.as_os_str().len());
        if path.starts_with(&mount_point) && longer {
            best = Some((mount_point, fstype.to_string(), source.to_string()));
        }
    }
    match best {
        Some((mount_point, fstype, source)) => {
            let note = match fstype.as_str() {
                "tmpfs" | "ramfs" => {
                    " -- a RAM filesystem: the page cache cannot be dropped, so mmap never waits for a disk"
                }
                _ => "",
            };
            format!(
                "{fstype} ({source}, mounted at {}){note}",
                mount_point.display()
            )
        }
        None => "an unknown filesystem".into(),
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    RandomReads,
    Scan,
    Writes,
}

const WORKLOADS: [Workload; 3] = [Workload::RandomReads, Workload::Scan, Workload::Writes];

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Workload::RandomReads => "random reads",
            Workload::Scan => "sequential scan",
            Workload::Writes => "random writes",
        })
    }
}

impl Workload {
    fn key(self) -> &'static str {
        match self {
            Workload::RandomReads => "random",
            Workload::Scan => "scan",
            Workload::Writes => "writes",
        }
    }

    fn from_key(k: &str) -> Option<Workload> {
        WORKLOADS.into_iter().find(|w| w.key() == k)
    }

    /// What its operations are called.
    fn unit(self) -> &'static str {
        match self {
            Workload::RandomReads => "reads",
            Workload::Scan => "words",
            Workload::Writes => "writes",
        }
    }

    /// The sides that run it: umio, mmap with its best advice, and mmap
    /// with the default advice where that is not the best.
    fn sides(self) -> &'static [Side] {
        match self {
            Workload::RandomReads | Workload::Writes => {
                &[Side::Umio, Side::MmapRandom, Side::MmapDefault]
            }
            Workload::Scan => &[Side::Umio, Side::MmapDefault],
        }
    }
}

/// Who serves the faults: umio, or Linux `mmap` with one advice.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Umio,
    /// `madvise(MADV_RANDOM)`: a miss reads the page alone.
    MmapRandom,
    /// No `madvise`: a miss reads the kernel's read-ahead window around it.
    MmapDefault,
}

const SIDES: [Side; 3] = [Side::Umio, Side::MmapRandom, Side::MmapDefault];

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Side::Umio => "umio",
            Side::MmapRandom => "mmap RANDOM",
            Side::MmapDefault => "mmap default",
        })
    }
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Umio => "umio",
            Side::MmapRandom => "mmap-random",
            Side::MmapDefault => "mmap-default",
        }
    }

    fn from_key(k: &str) -> Option<Side> {
        SIDES.into_iter().find(|s| s.key() == k)
    }

    /// Distinguishes the blocks each side writes, so that a side's
    /// verification cannot pass on another side's writes.
    fn tag(self) -> u64 {
        match self {
            Side::Umio => 0x756d_696f,
            Side::MmapRandom => 0x6d6d_6172,
            Side::MmapDefault => 0x6d6d_6164,
        }
    }

    /// The `madvise` advice of an mmap side.
    fn advice(self) -> Option<libc::c_int> {
        match self {
            Side::MmapRandom => Some(libc::MADV_RANDOM),
            Side::Umio | Side::MmapDefault => None,
        }
    }
}

/// What one run of a workload on one side measured.
struct Run {
    workload: Workload,
    side: Side,
    /// The workload, and for writes the flush.
    seconds: f64,
    /// umio: fault events served; mmap: minor + major page faults.
    faults: u64,
    /// Faults that had to read the file: umio read and write misses, mmap
    /// major faults.
    misses: u64,
    /// Reads, words or writes done before the deadline.
    done: u64,
    /// umio: cache in use; mmap: pages of the mapping in the page cache.
    resident: u64,
    /// Bytes of the file in the kernel's page cache after the run.
    page_cache: u64,
    /// The cgroup's peak usage and how often it hit its limit; `None`
    /// without a cgroup.
    cgroup: Option<CgroupUse>,
    /// Reads: the checksum of the words read; scan: their sum.
    checksum: Option<u64>,
    /// Further counters, for the notes under the table.
    detail: String,
}

impl Run {
    /// Operations per second.
    fn rate(&self) -> f64 {
        self.done as f64 / self.seconds
    }

    /// The rate, in the workload's own unit.
    fn rate_text(&self) -> String {
        match self.workload {
            Workload::Scan => format!("{:.0} MB/s", (self.done * 8) as f64 / 1e6 / self.seconds),
            w => format!("{} {}/s", si(self.rate()), w.unit()),
        }
    }

    /// One line for the parent: the numbers, then the detail.
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.seconds,
            self.faults,
            self.misses,
            self.done,
            self.resident,
            self.page_cache,
            self.checksum.map_or("-".to_owned(), |c| c.to_string()),
            self.detail
        )
    }

    fn decode(line: &str, workload: Workload, side: Side) -> Result<Run> {
        let mut it = line.splitn(8, ' ');
        let mut next = || it.next().ok_or("a short RUN line");
        let seconds = next()?.parse()?;
        let faults = next()?.parse()?;
        let misses = next()?.parse()?;
        let done = next()?.parse()?;
        let resident = next()?.parse()?;
        let page_cache = next()?.parse()?;
        let checksum = match next()? {
            "-" => None,
            c => Some(c.parse()?),
        };
        let detail = next()?.to_owned();
        Ok(Run {
            workload,
            side,
            seconds,
            faults,
            misses,
            done,
            resident,
            page_cache,
            cgroup: None,
            checksum,
            detail,
        })
    }
}

/// The settings shared by all runs.
struct Bench<'a> {
    file: &'a File,
    len: usize,
    cache: u64,
    page_size: usize,
    read_ops: u64,
    write_ops: u64,
    deadline: Duration,
}

/// A run's progress bar and deadline.
struct Meter {
    pb: ProgressBar,
    deadline: Instant,
    drawn: Instant,
}

impl Meter {
    /// Records that `pos` operations are done; whether the deadline has
    /// passed.
    fn at(&mut self, pos: u64) -> bool {
        let now = Instant::now();
        if now.duration_since(self.drawn) >= Duration::from_millis(100) {
            self.pb.set_position(pos);
            self.drawn = now;
        }
        now >= self.deadline
    }
}

impl Bench<'_> {
    fn ops(&self, workload: Workload) -> u64 {
        match workload {
            Workload::RandomReads => self.read_ops,
            Workload::Scan => (self.len / 8) as u64,
            Workload::Writes => self.write_ops,
        }
    }

    /// A progress bar on stderr (the demo's terminal; hidden where stderr
    /// is not a terminal) that shows the deadline, and the deadline.
    fn meter(&self, workload: Workload, side: Side) -> Meter {
        let template = format!(
            "{{prefix:30}} [{{bar:30}}] {{percent:>3}}% of {{human_len}} {}, \
             {{elapsed:>3}} of {} s max",
            workload.unit(),
            self.deadline.as_secs()
        );
        let style = ProgressStyle::with_template(&template)
            .expect("a valid progress template")
            .progress_chars("=> ");
        let pb = ProgressBar::new(self.ops(workload))
            .with_style(style)
            .with_prefix(format!("{workload} · {side}"));
        // The elapsed time moves on while an access waits for the disk.
        pb.enable_steady_tick(Duration::from_millis(250));
        let now = Instant::now();
        Meter {
            pb,
            deadline: now + self.deadline,
            drawn: now,
        }
    }

    /// Runs `workload` on the bytes of a mapping until done or the
    /// deadline; the operations done and the checksum (none for writes).
    fn workload(&self, workload: Workload, side: Side, bytes: Bytes<'_>) -> (u64, Option<u64>) {
        let mut meter = self.meter(workload, side);
        let (done, sum) = match (workload, bytes) {
            (Workload::RandomReads, Bytes::Read(data)) => {
                let (done, sum) = random_reads(data, self.read_ops, &mut meter);
                (done, Some(sum))
            }
            (Workload::Scan, Bytes::Read(data)) => {
                let (done, sum) = scan(data, &mut meter);
                (done, Some(sum))
            }
            (Workload::Writes, Bytes::Write(data)) => (
                random_writes(data, self.write_ops, side.tag(), &mut meter),
                None,
            ),
            _ => unreachable!("writes take a writable mapping, reads a readable one"),
        };
        meter.pb.set_position(done);
        meter.pb.abandon();
        (done, sum)
    }

    fn run_umio(&self, workload: Workload) -> Result<Run> {
        drop_page_cache(self.file)?;
        let rt = umio::Runtime::builder()
            .from_env()?
            .cache_bytes(self.cache)
            .page_size(self.page_size)
            .build()?;
        let writable = workload == Workload::Writes;
        // SAFETY: the demo's file is its own: nothing else changes it while
        // a slice of the mapping lives.
        let mut map =
            unsafe { rt.map_file(self.file, umio::MapOptions::new().writable(writable)) }?;
        let store_name = map.store_name().to_owned();
        let start = Instant::now();
        let (done, checksum) = if writable {
            let mut w = map.into_mut()?;
            let r = self.workload(workload, Side::Umio, Bytes::Write(w.as_mut_slice()));
            w.flush()?;
            map = w.into_mapping();
            r
        } else {
            self.workload(workload, Side::Umio, Bytes::Read(map.as_slice()))
        };
        let seconds = start.elapsed().as_secs_f64();
        let s = rt.stats();
        map.unmap()?;
        drop(rt);
        // Before the verification below reads blocks through the cache.
        let page_cache = FileMap::new(self.file, self.len, false)?.resident_bytes()?;
        if writable {
            self.verify_writes(Side::Umio, done)?;
        }
        Ok(Run {
            workload,
            side: Side::Umio,
            seconds,
            faults: s.faults,
            misses: s.read_misses + s.write_misses,
            done,
            resident: s.resident_bytes,
            page_cache,
            cgroup: None,
            checksum,
            detail: format!(
                "{} read + {} write misses, {} write-protect faults, {} coalesced; \
                 {} store reads ({} MiB), {} pages prefetched; {} pages evicted ({} dirty), \
                 {} MiB written back, {} direct reclaims; store: {}",
                s.read_misses,
                s.write_misses,
                s.wp_faults,
                s.coalesced,
                s.store_reads,
                s.bytes_read >> 20,
                s.prefetched_pages,
                s.evicted_pages,
                s.evicted_dirty_pages,
                s.bytes_written >> 20,
                s.direct_reclaims,
                store_name,
            ),
        })
    }

    fn run_mmap(&self, workload: Workload, side: Side) -> Result<Run> {
        drop_page_cache(self.file)?;
        let writable = workload == Workload::Writes;
        let mut map = FileMap::new(self.file, self.len, writable)?;
        if let Some(advice) = side.advice() {
            map.advise(advice)?;
        }
        let warm = map.resident_bytes()?;
        let before = thread_faults();
        let start = Instant::now();
        let (done, checksum) = if writable {
            let r = self.workload(workload, side, Bytes::Write(map.as_mut_slice()));
            map.sync()?;
            r
        } else {
            self.workload(workload, side, Bytes::Read(map.as_slice()))
        };
        let seconds = start.elapsed().as_secs_f64();
        let after = thread_faults();
        let resident = map.resident_bytes()?;
        drop(map);
        if writable {
            self.verify_writes(side, done)?;
        }
        let (minor, major) = (after.0 - before.0, after.1 - before.1);
        let mut detail = format!(
            "{minor} minor + {major} major faults; advice: {}",
            match side.advice() {
                Some(_) => "MADV_RANDOM",
                None => "none (the default, read-around)",
            }
        );
        if warm > 0 {
            detail += &format!(
                "; {} KiB of the file were still cached at the start",
                warm >> 10
            );
        }
        Ok(Run {
            workload,
            side,
            seconds,
            faults: minor + major,
            misses: major,
            done,
            resident,
            page_cache: resident,
            cgroup: None,
            checksum,
            detail,
        })
    }

    /// Reads a sample of the first `done` blocks `side` wrote back with
    /// `pread`.
    fn verify_writes(&self, side: Side, done: u64) -> Result<()> {
        let stride = (done / VERIFY_SAMPLES).max(1) as usize;
        let mut expected = [0u8; BLOCK];
        let mut actual = [0u8; BLOCK];
        for block in write_targets(self.len, done).step_by(stride) {
            fill_pattern(&mut expected, block, side.tag());
            self.file.read_exact_at(&mut actual, block * BLOCK as u64)?;
            if actual != expected {
                return Err(format!(
                    "random writes: block {block} written through {side} is not in the file"
                )
                .into());
            }
        }
        Ok(())
    }

    /// Errors unless `run` read what the file holds: the checksum of its
    /// first `done` random reads, or the sum of the words it scanned,
    /// computed from the file's definition ([`word_at`]).
    fn check(&self, run: &Run) -> Result<()> {
        let expected = match run.workload {
            Workload::RandomReads => {
                let mut rng = XorShift::new(READ_SEED);
                let offsets = (self.len - 8 + 1) as u64;
                (0..run.done).fold(0u64, |sum, _| {
                    sum.rotate_left(5) ^ bytes_at(rng.below(offsets))
                })
            }
            Workload::Scan => (0..run.done).fold(0u64, |s, i| s.wrapping_add(word_at(i))),
            Workload::Writes => return Ok(()),
        };
        if run.checksum != Some(expected) {
            return Err(format!(
                "{} · {}: read bytes the file does not hold (checksum {:?}, expected {expected})",
                run.workload, run.side, run.checksum
            )
            .into());
        }
        Ok(())
    }

    /// Runs `workload` on `side` in a child process (this program with
    /// `--child`), in a fresh memory cgroup limited to `budget` when
    /// `cgroups` allows; the child draws its progress on the terminal
    /// (stderr, inherited) and reports its [`Run`] on its stdout.
    fn run_child(
        &self,
        path: &Path,
        workload: Workload,
        side: Side,
        budget: u64,
        cgroups: Option<&Cgroups>,
    ) -> Result<Run> {
        drop_page_cache(self.file)?;
        let group = cgroups
            .map(|c| {
                c.make(
                    &format!("umio-demo-{}-{}", std::process::id(), side.key()),
                    budget,
                )
            })
            .transpose()?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("--child")
            .arg(path)
            .arg(workload.key())
            .arg(side.key())
            .arg(self.cache.to_string())
            .arg(self.page_size.to_string())
            .arg(self.read_ops.to_string())
            .arg(self.write_ops.to_string())
            .arg(self.deadline.as_millis().to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        if let Some(g) = &group {
            let procs = std::ffi::CString::new(g.procs_path())?;
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and
            // calls only open, write and close (async-signal-safe) on a
            // path prepared before the fork; writing "0" to cgroup.procs
            // moves the writing process into the cgroup (v1 and v2).
            unsafe {
                cmd.pre_exec(move || {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if ok { Ok(()) } else { Err(err) }
                });
            }
        }
        let out = cmd.spawn()?.wait_with_output()?;
        let usage = group.as_ref().map(Cgroup::usage);
        if let Some(g) = group {
            g.remove();
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("RUN "));
        let (Some(line), true) = (line, out.status.success()) else {
            let killed = usage.as_ref().is_some_and(|u| u.oom_kills > 0);
            return Err(format!(
                "{workload} · {side}: the child failed ({}){}",
                out.status,
                if killed {
                    ", killed by the cgroup's OOM killer"
                } else {
                    " (its message, if any, is above)"
                }
            )
            .into());
        };
        let mut run = Run::decode(line, workload, side)?;
        run.cgroup = usage;
        Ok(run)
    }
}

/// The child side of [`Bench::run_child`]: `--child FILE WORKLOAD SIDE
/// CACHE PAGE_SIZE READ_OPS WRITE_OPS DEADLINE_MS`.
fn child() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(2).collect();
    let [
        path,
        workload,
        side,
        cache,
        page_size,
        read_ops,
        write_ops,
        deadline_ms,
    ] = &a[..]
    else {
        return Err("--child takes 8 arguments".into());
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = usize::try_from(file.metadata()?.len())?;
    let bench = Bench {
        file: &file,
        len,
        cache: cache.parse()?,
        page_size: page_size.parse()?,
        read_ops: read_ops.parse()?,
        write_ops: write_ops.parse()?,
        deadline: Duration::from_millis(deadline_ms.parse()?),
    };
    let workload = Workload::from_key(workload).ok_or("unknown workload")?;
    let run = match Side::from_key(side).ok_or("unknown side")? {
        Side::Umio => bench.run_umio(workload)?,
        side => bench.run_mmap(workload, side)?,
    };
    println!("RUN {}", run.encode());
    Ok(())
}

/// The bytes a workload runs on.
enum Bytes<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
}

/// Up to `ops` 8-byte reads at pseudo-random offsets, until the deadline;
/// the reads done and an order-sensitive checksum of the words read.
fn random_reads(data: &[u8], ops: u64, meter: &mut Meter) -> (u64, u64) {
    let mut rng = XorShift::new(READ_SEED);
    let offsets = (data.len() - 8 + 1) as u64;
    let mut sum = 0u64;
    for i in 1..=ops {
        let at = rng.below(offsets) as usize;
        let word: [u8; 8] = data[at..at + 8].try_into().expect("8 bytes");
        sum = sum.rotate_left(5) ^ u64::from_le_bytes(word);
        if i % CHECK_EVERY == 0 && meter.at(i) {
            return (i, sum);
        }
    }
    (ops, sum)
}

/// The wrapping sum of the little-endian 64-bit words of `data`, a MiB at
/// a time until the deadline; the words summed and their sum.
fn scan(data: &[u8], meter: &mut Meter) -> (u64, u64) {
    let mut sum = 0u64;
    let mut words = 0u64;
    for chunk in data.chunks(MIB) {
        sum = chunk.chunks_exact(8).fold(sum, |s, w| {
            s.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")))
        });
        words += (chunk.len() / 8) as u64;
        if meter.at(words) {
            break;
        }
    }
    (words, sum)
}

/// Up to `ops` writes of whole 4 KiB blocks at pseudo-random block
/// offsets, until the deadline; the writes done.
fn random_writes(data: &mut [u8], ops: u64, tag: u64, meter: &mut Meter) -> u64 {
    let mut block = [0u8; BLOCK];
    for (i, target) in (1..).zip(write_targets(data.len(), ops)) {
        fill_pattern(&mut block, target, tag);
        let at = target as usize * BLOCK;
        data[at..at + BLOCK].copy_from_slice(&block);
        if i % CHECK_EVERY == 0 && meter.at(i) {
            return i;
        }
    }
    ops
}

/// The blocks the write workload writes, in order (the same for every run).
fn write_targets(len: usize, ops: u64) -> impl Iterator<Item = u64> {
    let blocks = (len / BLOCK) as u64;
    let mut rng = XorShift::new(WRITE_SEED);
    (0..ops).map(move |_| rng.below(blocks))
}

/// The content of block `block` as written by the side tagged `tag`: a
/// function of both only, so that rewriting a block changes nothing.
fn fill_pattern(buf: &mut [u8; BLOCK], block: u64, tag: u64) {
    let base = (block ^ (tag << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, word) in (0u64..).zip(buf.chunks_exact_mut(8)) {
        word.copy_from_slice(&(base + i).to_le_bytes());
    }
}

/// What the columns of the table mean.
const NOTES: &str = "\
done:        how much of the workload ran before the run's deadline (--seconds).
seconds:     the workload alone (writes: including the flush), not setup or checks.
rate:        reads, 8-byte words or 4 KiB writes per second; the scan in 10^6 bytes/s.
faults/s:    umio: fault events it served (misses, write-protect faults, coalesced and
             stale ones); mmap: minor + major faults of the thread (getrusage).
hit ratio:   1 - faults that read the file / operations done. umio: read + write
             misses (a page read ahead is a hit); mmap: major faults (pages brought in
             by the kernel's read-around are hits).
cache:       umio's cache in use at the end of the run; mmap has none of its own.
page cache:  the file's pages in the kernel's page cache after the run (mincore of the
             file): for mmap all of its cache, for umio what the kernel kept for it.
peak:        the cgroup's peak usage over the run: everything the process was charged
             (heap and binary, page tables, umio's cache, the page cache it caused).
limit hits:  how often the side asked for memory with its cgroup full, so that the
             kernel first had to evict some of its page cache; 0: it stayed under the
             budget on its own (umio evicts from its cache before it fills).
";

fn print_table(bench: &Bench<'_>, runs: &[Run], budget: Option<u64>) {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / MIB as f64);
    let header = format!(
        "{:<15}  {:<12}  {:>4}  {:>7}  {:>15}  {:>8}  {:>9}  {:>9}  {:>10}  {:>9}  {:>10}",
        "workload",
        "side",
        "done",
        "seconds",
        "rate",
        "faults/s",
        "hit ratio",
        "cache",
        "page cache",
        "peak",
        "limit hits"
    );
    println!("{header}\n{}", "-".repeat(header.len()));
    for r in runs {
        let hit = 1.0 - (r.misses as f64 / r.done.max(1) as f64).min(1.0);
        let own = if r.side == Side::Umio { r.resident } else { 0 };
        let (peak, at_limit) = match r.cgroup {
            Some(u) => (mib(u.peak), si(u.at_limit as f64)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let done = 100.0 * r.done as f64 / bench.ops(r.workload) as f64;
        println!(
            "{:<15}  {:<12}  {:>4}  {:>7.2}  {:>15}  {:>8}  {:>9.4}  {:>9}  {:>10}  {:>9}  {:>10}",
            r.workload,
            r.side,
            format!("{:.0}%", done.floor()),
            r.seconds,
            r.rate_text(),
            si(r.faults as f64 / r.seconds),
            hit,
            mib(own),
            mib(r.page_cache),
            peak,
            at_limit,
        );
    }
    print!("\n{NOTES}");
    match budget {
        Some(b) => println!(
            "budget:      {} per side (cgroup limit); umio's cache bound {}.",
            mib(b),
            mib(bench.cache)
        ),
        None => println!(
            "budget:      none enforced (no cgroup); umio's cache bound {}.",
            mib(bench.cache)
        ),
    }
}

/// The runs beside what the device does on its own.
fn print_beside_device(runs: &[Run], rates: Option<DeviceRates>, dev: Option<&BlockDevice>) {
    let Some(d) = rates else {
        return;
    };
    let of = |w: Workload, what: &dyn Fn(&Run) -> String| -> String {
        runs.iter()
            .filter(|r| r.workload == w)
            .map(|r| format!("{} {}", r.side, what(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let window = dev
        .and_then(|d| d.read_ahead_kb)
        .map_or("its read-ahead window".to_owned(), |kb| format!("{kb} KiB"));
    println!(
        "\nBeside the device ({} 4 KiB reads/s one at a time, {} with {} in flight, {:.0} MB/s \
         in 2 MiB reads):",
        si(d.random_4k_qd1),
        si(d.random_4k_qd32),
        device::DEPTH,
        d.seq_2m / 1e6
    );
    println!(
        "  random reads, misses/s (each a read of the device; mmap default's of up to {window}): {}.",
        of(Workload::RandomReads, &|r| si(r.misses as f64 / r.seconds))
    );
    println!(
        "  sequential scan: {}; the device alone: {:.0} MB/s.",
        of(Workload::Scan, &|r| r.rate_text()),
        d.seq_2m / 1e6
    );
}

/// Writes the file's dirty pages and drops its pages from the page cache,
/// so that the next run reads it from the disk.
fn drop_page_cache(file: &File) -> Result<()> {
    file.sync_data()?;
    // SAFETY: posix_fadvise takes a descriptor we own and touches no memory.
    let err = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if err != 0 {
        return Err(std::io::Error::from_raw_os_error(err).into());
    }
    Ok(())
}

/// Page faults taken by the calling thread so far: (minor, major).
fn thread_faults() -> (u64, u64) {
    // SAFETY: rusage is plain data, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is a valid rusage for getrusage to fill.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD) failed");
    (usage.ru_minflt as u64, usage.ru_majflt as u64)
}

/// A Linux `mmap(MAP_SHARED)` of a whole file.
struct FileMap {
    ptr: *mut u8,
    len: usize,
}

impl FileMap {
    fn new(file: &File, len: usize, writable: bool) -> Result<FileMap> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a new shared mapping of a descriptor we own, at an
        // address of the kernel's choosing: no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()).into());
        }
        Ok(FileMap {
            ptr: ptr.cast(),
            len,
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: [ptr, ptr+len) is mapped readable until drop, and the file
        // is not truncated while mapped.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// # Panics
    /// If the mapping is read-only, at the first write (SIGSEGV).
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; `&mut self` makes the slice exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// `madvise(advice)` on the whole mapping.
    fn advise(&self, advice: libc::c_int) -> Result<()> {
        // SAFETY: the range is our mapping; the advice changes how the
        // kernel reads it ahead, not its contents.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, advice) } != 0 {
            return Err(format!("madvise: {}", std::io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// `msync(MS_SYNC)`: writes the dirty pages back and waits.
    fn sync(&self) -> Result<()> {
        // SAFETY: the range is our mapping.
        if unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) } != 0 {
            return Err(format!("msync: {}", std::io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// Bytes of the mapping whose pages are in the page cache (`mincore`).
    fn resident_bytes(&self) -> Result<u64> {
        // SAFETY: sysconf reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut vec = vec![0u8; self.len.div_ceil(page)];
        // SAFETY: the range is our mapping and vec has a byte per page.
        if unsafe { libc::mincore(self.ptr.cast(), self.len, vec.as_mut_ptr()) } != 0 {
            return Err(format!("mincore: {}", std::io::Error::last_os_error()).into());
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the range is our mapping, and no slice of it outlives self.
        let rc = unsafe { libc::munmap(self.ptr.cast(), self.len) };
        debug_assert_eq!(rc, 0, "munmap failed");
    }
}

/// The memory controller of this machine: cgroup v1 or v2.
struct Cgroups {
    root: PathBuf,
    v2: bool,
}

/// What a run's cgroup recorded.
#[derive(Clone, Copy)]
struct CgroupUse {
    /// Peak usage in bytes (v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak`).
    peak: u64,
    /// Times usage hit the limit (v1 `memory.failcnt`, v2 `max` events).
    at_limit: u64,
    /// Processes the cgroup's OOM killer killed.
    oom_kills: u64,
}

/// One run's cgroup.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// The v1 memory controller at /sys/fs/cgroup/memory, else the v2
    /// hierarchy at /sys/fs/cgroup with the memory controller; `None`
    /// where neither is writable.
    fn detect() -> Option<Cgroups> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let probe = |c: Cgroups| -> Option<Cgroups> {
            let g = c
                .make(&format!("umio-demo-{}-probe", std::process::id()), 64 << 20)
                .ok()?;
            g.remove();
            Some(c)
        };
        if v1.join("memory.limit_in_bytes").exists() {
            return probe(Cgroups {
                root: v1,
                v2: false,
            });
        }
        let v2 = PathBuf::from("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return None;
        }
        // Children of the root get the memory controller.
        let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
        probe(Cgroups { root: v2, v2: true })
    }

    fn describe(&self) -> String {
        if self.v2 {
            format!("cgroup v2, memory.max under {}", self.root.display())
        } else {
            format!(
                "cgroup v1, memory.limit_in_bytes under {}",
                self.root.display()
            )
        }
    }

    fn make(&self, name: &str, limit: u64) -> Result<Cgroup> {
        let dir = self.root.join(name);
        std::fs::create_dir(&dir)
            .map_err(|e| format!("making the cgroup {}: {e}", dir.display()))?;
        let g = Cgroup { dir, v2: self.v2 };
        let r = if self.v2 {
            std::fs::write(g.dir.join("memory.max"), limit.to_string())
                .and_then(|()| std::fs::write(g.dir.join("memory.swap.max"), "0").or(Ok(())))
        } else {
            std::fs::write(g.dir.join("memory.limit_in_bytes"), limit.to_string())
        };
        if let Err(e) = r {
            g.remove();
            return Err(format!("setting the cgroup's limit: {e}").into());
        }
        Ok(g)
    }
}

impl Cgroup {
    fn procs_path(&self) -> String {
        self.dir.join("cgroup.procs").display().to_string()
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    fn field(text: &str, key: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    }

    fn usage(&self) -> CgroupUse {
        let num = |f: &str| self.read(f).trim().parse().unwrap_or(0);
        if self.v2 {
            let events = self.read("memory.events");
            CgroupUse {
                peak: num("memory.peak"),
                at_limit: Self::field(&events, "max "),
                oom_kills: Self::field(&events, "oom_kill "),
            }
        } else {
            CgroupUse {
                peak: num("memory.max_usage_in_bytes"),
                at_limit: num("memory.failcnt"),
                oom_kills: Self::field(&self.read("memory.oom_control"), "oom_kill "),
            }
        }
    }

    /// Removes the (empty) cgroup; the page cache still charged to it is
    /// moved to the parent by the kernel.
    fn remove(self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("demo: could not remove the cgroup {}", self.dir.display());
    }
}
