//! umio against Linux `mmap(2)`, on the same file, under the same memory
//! budget.
//!
//! The demo writes a data file of deterministic pseudo-random bytes, then
//! runs three workloads through two mappings of it: a umio mapping, whose
//! page faults umio serves in user space (userfaultfd) out of a cache
//! smaller than the file, and a plain `mmap(MAP_SHARED)`, whose faults the
//! kernel serves out of its page cache.
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
//! runs are children without a limit, and the demo says so.
//!
//! 1. random reads: 8-byte reads at random offsets, checksummed;
//! 2. a sequential scan: the sum of every 64-bit word of the file;
//! 3. random writes: 4 KiB-aligned blocks of a pattern, then a flush
//!    (`Mapping::flush` for umio, `msync(MS_SYNC)` for mmap), verified by
//!    reading a sample of the blocks back with `pread`.
//!
//! umio and mmap must produce the same checksums (and the scan the sum
//! computed when the file was written); the written blocks must be on disk.
//! Any difference aborts the demo. Every run starts cold: the file's page
//! cache is dropped (`fdatasync` and `POSIX_FADV_DONTNEED`) and the mapping,
//! and for umio the runtime, are fresh. A table of times, fault rates,
//! throughput, hit ratios and resident memory follows.
//!
//! ```text
//! cargo run --release --example demo -- [--dir DIR] [--size MiB] [--budget MiB]
//!                                        [--cache MiB] [--page-size KiB] [--ops N]
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
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MIB: usize = 1 << 20;
/// Unit of the write workload.
const BLOCK: usize = 4096;
/// Seeds of the file's content, the read offsets and the written blocks.
const FILE_SEED: u64 = 0x243f_6a88_85a3_08d3;
const READ_SEED: u64 = 0x1319_8a2e_0370_7344;
const WRITE_SEED: u64 = 0xa409_3822_299f_31d0;
/// Operations between two progress-bar updates.
const TICK: u64 = 4096;
/// Written blocks read back after each write run, at most.
const VERIFY_SAMPLES: u64 = 2048;

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
    let expected_sum = write_data_file(data.as_file_mut(), len)?;
    println!(
        "  written in {:.2} s. umio and Linux mmap run every workload on this same file.",
        started.elapsed().as_secs_f64()
    );
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(data.path())?;
    if let Some(kb) = read_ahead_kb(&file) {
        println!(
            "  the kernel reads ahead up to {kb} KiB on this device (mmap benefits; umio does its own)."
        );
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
        "Linux mmap: MAP_SHARED of the file; its memory is the kernel page cache, \
         bounded by the cgroup."
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
    };
    let mut runs = Vec::new();
    for workload in [Workload::RandomReads, Workload::Scan, Workload::Writes] {
        let umio = bench.run_child(data.path(), workload, System::Umio, budget, cgroup.as_ref())?;
        let mmap = bench.run_child(data.path(), workload, System::Mmap, budget, cgroup.as_ref())?;
        match workload {
            Workload::RandomReads => assert_eq!(
                umio.checksum, mmap.checksum,
                "random reads: umio and mmap read different bytes"
            ),
            Workload::Scan => {
                assert_eq!(
                    umio.checksum,
                    Some(expected_sum),
                    "scan: umio's sum differs from the file's"
                );
                assert_eq!(
                    mmap.checksum,
                    Some(expected_sum),
                    "scan: mmap's sum differs from the file's"
                );
            }
            Workload::Writes => {}
        }
        runs.push(umio);
        runs.push(mmap);
    }
    println!();
    print_table(&runs, cache, cgroup.as_ref().map(|_| budget));

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
             scan and random writes over a file larger than the memory allowed.\n\
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
        .get_matches();
        Ok(Args {
            dir: cli::get_opt(&m, "dir").unwrap_or_else(std::env::temp_dir),
            size_mib: cli::get(&m, "size"),
            budget_mib: cli::get_opt(&m, "budget"),
            cache_mib: cli::get_opt(&m, "cache"),
            page_kib: cli::get(&m, "page-size"),
            ops: cli::get::<usize>(&m, "ops") as u64,
        })
    }
}

/// xorshift64 (Marsaglia): plenty for picking offsets and making bytes.
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

/// Fills `file` with `len` pseudo-random bytes and syncs it. Returns the
/// wrapping sum of its little-endian 64-bit words.
fn write_data_file(file: &mut File, len: usize) -> Result<u64> {
    let mut rng = XorShift::new(FILE_SEED);
    let mut sum = 0u64;
    let mut chunk = vec![0u8; MIB];
    let mut out = BufWriter::with_capacity(4 * MIB, &mut *file);
    for _ in 0..len / MIB {
        for word in chunk.chunks_exact_mut(8) {
            let v = rng.next_u64();
            sum = sum.wrapping_add(v);
            word.copy_from_slice(&v.to_le_bytes());
        }
        out.write_all(&chunk)?;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    Ok(sum)
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

/// The kernel's read-ahead window of the block device holding `file`.
fn read_ahead_kb(file: &File) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = file.metadata().ok()?.dev();
    let device = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    // A partition has no queue of its own: its disk's is one level up.
    ["queue", "../queue"].iter().find_map(|q| {
        std::fs::read_to_string(format!("{device}/{q}/read_ahead_kb"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
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

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Workload::RandomReads => "random reads",
            Workload::Scan => "sequential scan",
            Workload::Writes => "random writes",
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum System {
    Umio,
    Mmap,
}

impl System {
    /// Distinguishes the blocks each system writes.
    fn tag(self) -> u64 {
        match self {
            System::Umio => 0x756d_696f,
            System::Mmap => 0x6d6d_6170,
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            System::Umio => "umio",
            System::Mmap => "mmap",
        })
    }
}

/// What one run of a workload on one system measured.
struct Run {
    workload: Workload,
    system: System,
    seconds: f64,
    /// umio: fault events served; mmap: minor + major page faults.
    faults: u64,
    /// Faults that had to read the file: umio read and write misses, mmap
    /// major faults.
    misses: u64,
    /// Reads, words or writes done.
    ops: u64,
    /// Bytes the workload read or wrote through the mapping.
    bytes: u64,
    /// umio: cache in use; mmap: pages of the mapping in the page cache.
    resident: u64,
    /// Bytes of the file in the kernel's page cache after the run.
    page_cache: u64,
    /// The cgroup's peak usage and whether it hit its limit (failcnt > 0)
    /// or killed the process; `None` without a cgroup.
    cgroup: Option<CgroupUse>,
    checksum: Option<u64>,
    /// Further counters, for the notes under the table.
    detail: String,
}

/// The settings shared by all runs.
struct Bench<'a> {
    file: &'a File,
    len: usize,
    cache: u64,
    page_size: usize,
    read_ops: u64,
    write_ops: u64,
}

impl Bench<'_> {
    fn ops(&self, workload: Workload) -> u64 {
        match workload {
            Workload::RandomReads => self.read_ops,
            Workload::Scan => (self.len / 8) as u64,
            Workload::Writes => self.write_ops,
        }
    }

    fn bytes(&self, workload: Workload) -> u64 {
        match workload {
            Workload::RandomReads => self.read_ops * 8,
            Workload::Scan => self.len as u64,
            Workload::Writes => self.write_ops * BLOCK as u64,
        }
    }

    fn progress_bar(&self, workload: Workload, system: System) -> ProgressBar {
        let (len, template) = match workload {
            Workload::Scan => (
                self.len as u64,
                "{prefix:24} [{bar:40}] {binary_bytes}/{binary_total_bytes} {elapsed_precise}",
            ),
            _ => (
                self.ops(workload),
                "{prefix:24} [{bar:40}] {human_pos}/{human_len} ops {elapsed_precise}",
            ),
        };
        let style = ProgressStyle::with_template(template)
            .expect("a valid progress template")
            .progress_chars("=> ");
        ProgressBar::new(len)
            .with_style(style)
            .with_prefix(format!("{workload} · {system}"))
    }

    /// Runs `workload` on the bytes of a mapping; returns its checksum
    /// (none for writes).
    fn workload(&self, workload: Workload, system: System, bytes: Bytes<'_>) -> Option<u64> {
        let pb = self.progress_bar(workload, system);
        let sum = match (workload, bytes) {
            (Workload::RandomReads, Bytes::Read(data)) => {
                Some(random_reads(data, self.read_ops, &pb))
            }
            (Workload::Scan, Bytes::Read(data)) => Some(scan(data, &pb)),
            (Workload::Writes, Bytes::Write(data)) => {
                random_writes(data, self.write_ops, system.tag(), &pb);
                None
            }
            _ => unreachable!("writes take a writable mapping, reads a readable one"),
        };
        pb.finish();
        sum
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
        let checksum = if writable {
            let mut w = map.into_mut()?;
            let sum = self.workload(workload, System::Umio, Bytes::Write(w.as_mut_slice()));
            w.flush()?;
            map = w.into_mapping();
            sum
        } else {
            self.workload(workload, System::Umio, Bytes::Read(map.as_slice()))
        };
        let seconds = start.elapsed().as_secs_f64();
        let s = rt.stats();
        map.unmap()?;
        drop(rt);
        // Before the verification below reads blocks through the cache.
        let page_cache = FileMap::new(self.file, self.len, false)?.resident_bytes()?;
        if writable {
            self.verify_writes(System::Umio)?;
        }
        Ok(Run {
            workload,
            system: System::Umio,
            seconds,
            faults: s.faults,
            misses: s.read_misses + s.write_misses,
            ops: self.ops(workload),
            bytes: self.bytes(workload),
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

    fn run_mmap(&self, workload: Workload) -> Result<Run> {
        drop_page_cache(self.file)?;
        let writable = workload == Workload::Writes;
        let mut map = FileMap::new(self.file, self.len, writable)?;
        let warm = map.resident_bytes()?;
        let before = thread_faults();
        let start = Instant::now();
        let checksum = if writable {
            let sum = self.workload(workload, System::Mmap, Bytes::Write(map.as_mut_slice()));
            map.sync()?;
            sum
        } else {
            self.workload(workload, System::Mmap, Bytes::Read(map.as_slice()))
        };
        let seconds = start.elapsed().as_secs_f64();
        let after = thread_faults();
        let resident = map.resident_bytes()?;
        drop(map);
        if writable {
            self.verify_writes(System::Mmap)?;
        }
        let (minor, major) = (after.0 - before.0, after.1 - before.1);
        let mut detail = format!("{minor} minor + {major} major faults");
        if warm > 0 {
            detail += &format!(
                "; {} KiB of the file were still cached at the start",
                warm >> 10
            );
        }
        Ok(Run {
            workload,
            system: System::Mmap,
            seconds,
            faults: minor + major,
            misses: major,
            ops: self.ops(workload),
            bytes: self.bytes(workload),
            resident,
            page_cache: resident,
            cgroup: None,
            checksum,
            detail,
        })
    }

    /// Reads a sample of the blocks `system` wrote back with `pread`.
    fn verify_writes(&self, system: System) -> Result<()> {
        let stride = (self.write_ops / VERIFY_SAMPLES).max(1) as usize;
        let mut expected = [0u8; BLOCK];
        let mut actual = [0u8; BLOCK];
        for block in write_targets(self.len, self.write_ops).step_by(stride) {
            fill_pattern(&mut expected, block, system.tag());
            self.file.read_exact_at(&mut actual, block * BLOCK as u64)?;
            if actual != expected {
                return Err(format!(
                    "random writes: block {block} written through {system} is not in the file"
                )
                .into());
            }
        }
        Ok(())
    }
}

impl Bench<'_> {
    /// Runs `workload` on `system` in a child process (this program with
    /// `--child`), in a fresh memory cgroup limited to `budget` when
    /// `cgroups` allows; the child reports its [`Run`] on its stdout.
    fn run_child(
        &self,
        path: &Path,
        workload: Workload,
        system: System,
        budget: u64,
        cgroups: Option<&Cgroups>,
    ) -> Result<Run> {
        drop_page_cache(self.file)?;
        let group = cgroups
            .map(|c| {
                c.make(
                    &format!("umio-demo-{}-{system}", std::process::id()),
                    budget,
                )
            })
            .transpose()?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("--child")
            .arg(path)
            .arg(workload.key())
            .arg(system.to_string())
            .arg(self.cache.to_string())
            .arg(self.page_size.to_string())
            .arg(self.read_ops.to_string())
            .arg(self.write_ops.to_string())
            .stdout(std::process::Stdio::piped());
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
        let out = cmd.output()?;
        let usage = group.as_ref().map(Cgroup::usage);
        if let Some(g) = group {
            g.remove();
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("RUN "));
        let (Some(line), true) = (line, out.status.success()) else {
            let killed = usage.as_ref().is_some_and(|u| u.oom_kills > 0);
            return Err(format!(
                "{workload} · {system}: the child failed ({}){}",
                out.status,
                if killed {
                    ", killed by the cgroup's OOM killer"
                } else {
                    ""
                }
            )
            .into());
        };
        let mut run = Run::decode(line, workload, system)?;
        run.cgroup = usage;
        Ok(run)
    }
}

/// The child side of [`Bench::run_child`]: `--child FILE WORKLOAD SYSTEM
/// CACHE PAGE_SIZE READ_OPS WRITE_OPS`.
fn child() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(2).collect();
    let [
        path,
        workload,
        system,
        cache,
        page_size,
        read_ops,
        write_ops,
    ] = &a[..]
    else {
        return Err("--child takes 7 arguments".into());
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
    };
    let workload = Workload::from_key(workload).ok_or("unknown workload")?;
    let run = match system.as_str() {
        "umio" => bench.run_umio(workload)?,
        "mmap" => bench.run_mmap(workload)?,
        _ => return Err("unknown system".into()),
    };
    println!("RUN {}", run.encode());
    Ok(())
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
        [Workload::RandomReads, Workload::Scan, Workload::Writes]
            .into_iter()
            .find(|w| w.key() == k)
    }
}

impl Run {
    /// One line for the parent: the numbers, then the detail.
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {} {}",
            self.seconds,
            self.faults,
            self.misses,
            self.ops,
            self.bytes,
            self.resident,
            self.page_cache,
            self.checksum.map_or("-".to_owned(), |c| c.to_string()),
            self.detail
        )
    }

    fn decode(line: &str, workload: Workload, system: System) -> Result<Run> {
        let mut it = line.splitn(9, ' ');
        let mut next = || it.next().ok_or("a short RUN line");
        let seconds = next()?.parse()?;
        let faults = next()?.parse()?;
        let misses = next()?.parse()?;
        let ops = next()?.parse()?;
        let bytes = next()?.parse()?;
        let resident = next()?.parse()?;
        let page_cache = next()?.parse()?;
        let checksum = match next()? {
            "-" => None,
            c => Some(c.parse()?),
        };
        let detail = next()?.to_owned();
        Ok(Run {
            workload,
            system,
            seconds,
            faults,
            misses,
            ops,
            bytes,
            resident,
            page_cache,
            cgroup: None,
            checksum,
            detail,
        })
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

/// The bytes a workload runs on.
enum Bytes<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
}

/// `ops` 8-byte reads at pseudo-random offsets; an order-sensitive checksum
/// of the words read.
fn random_reads(data: &[u8], ops: u64, pb: &ProgressBar) -> u64 {
    let mut rng = XorShift::new(READ_SEED);
    let offsets = (data.len() - 8 + 1) as u64;
    let mut sum = 0u64;
    for i in 1..=ops {
        let at = rng.below(offsets) as usize;
        let word: [u8; 8] = data[at..at + 8].try_into().expect("8 bytes");
        sum = sum.rotate_left(5) ^ u64::from_le_bytes(word);
        if i % TICK == 0 {
            pb.inc(TICK);
        }
    }
    pb.set_position(ops);
    sum
}

/// The wrapping sum of the little-endian 64-bit words of `data`.
fn scan(data: &[u8], pb: &ProgressBar) -> u64 {
    let mut sum = 0u64;
    for chunk in data.chunks(MIB) {
        sum = chunk.chunks_exact(8).fold(sum, |s, w| {
            s.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")))
        });
        pb.inc(chunk.len() as u64);
    }
    sum
}

/// `ops` writes of whole 4 KiB blocks at pseudo-random block offsets.
fn random_writes(data: &mut [u8], ops: u64, tag: u64, pb: &ProgressBar) {
    let mut block = [0u8; BLOCK];
    for (i, target) in (1..).zip(write_targets(data.len(), ops)) {
        fill_pattern(&mut block, target, tag);
        let at = target as usize * BLOCK;
        data[at..at + BLOCK].copy_from_slice(&block);
        if i % TICK == 0 {
            pb.inc(TICK);
        }
    }
    pb.set_position(ops);
}

/// The blocks the write workload writes, in order (the same for every run).
fn write_targets(len: usize, ops: u64) -> impl Iterator<Item = u64> {
    let blocks = (len / BLOCK) as u64;
    let mut rng = XorShift::new(WRITE_SEED);
    (0..ops).map(move |_| rng.below(blocks))
}

/// The content of block `block` as written by the system tagged `tag`: a
/// function of both only, so that rewriting a block changes nothing.
fn fill_pattern(buf: &mut [u8; BLOCK], block: u64, tag: u64) {
    let base = (block ^ (tag << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, word) in (0u64..).zip(buf.chunks_exact_mut(8)) {
        word.copy_from_slice(&(base + i).to_le_bytes());
    }
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

/// What the columns of the table mean.
const NOTES: &str = "\
seconds:   the workload alone (writes: including the flush), not setup or verification.
faults/s:  umio: fault events it served (misses, write-protect faults, coalesced
           and stale ones); mmap: minor + major faults of the thread (getrusage).
MB/s:      bytes the workload read or wrote through the mapping (random reads: 8 per
           read; scan: the file; writes: 4 KiB per write), in 10^6 bytes per second.
hit ratio: 1 - faults that read the file / operations (reads, 64-bit words, writes).
           umio: misses = read + write misses (a page read ahead is a hit); mmap:
           misses = major faults (pages brought in by the kernel's read-around are hits).
cache:     umio: its cache in use at the end of the run; mmap: none of its own.
+ kernel:  the file's pages in the kernel's page cache after the run (mincore of the
           file): the copy each side caused. For mmap this is all of its cache.
= memory:  the two added: the file's bytes held in memory, counted the same way for both.
peak:      the cgroup's peak usage over the run: everything the process was charged
           (its heap and binary, page tables, umio's cache, the page cache it caused).
at limit:  times the cgroup's usage hit the limit (the kernel then reclaimed);
           a side that goes over is reclaimed or killed, never allowed past it.
";

fn print_table(runs: &[Run], cache: u64, budget: Option<u64>) {
    let mib = |b: u64| b as f64 / MIB as f64;
    let header = format!(
        "{:<15} | {:<4} | {:>7} | {:>9} | {:>8} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8}",
        "workload",
        "side",
        "seconds",
        "faults/s",
        "MB/s",
        "hit ratio",
        "cache",
        "+ kernel",
        "= memory",
        "peak",
        "at limit"
    );
    println!("{header}\n{}", "-".repeat(header.len()));
    for r in runs {
        let hit = 1.0 - (r.misses as f64 / r.ops as f64).min(1.0);
        let own = if r.system == System::Umio {
            r.resident
        } else {
            0
        };
        let (peak, at_limit) = match r.cgroup {
            Some(u) => (format!("{:.1} MiB", mib(u.peak)), u.at_limit.to_string()),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!(
            "{:<15} | {:<4} | {:>7.3} | {:>9.0} | {:>8.1} | {:>9.4} | {:>5.1} MiB | {:>5.1} MiB | {:>5.1} MiB | {:>9} | {:>8}",
            r.workload,
            r.system,
            r.seconds,
            r.faults as f64 / r.seconds,
            r.bytes as f64 / 1e6 / r.seconds,
            hit,
            mib(own),
            mib(r.page_cache),
            mib(own + r.page_cache),
            peak,
            at_limit,
        );
    }
    print!("\n{NOTES}");
    match budget {
        Some(b) => println!(
            "budget:    {:.1} MiB per side (cgroup limit); umio's cache bound {:.1} MiB.",
            mib(b),
            mib(cache)
        ),
        None => println!(
            "budget:    none enforced (no cgroup); umio's cache bound {:.1} MiB.",
            mib(cache)
        ),
    }
    println!();
    for r in runs {
        println!("{} · {}: {}", r.workload, r.system, r.detail);
    }
}
