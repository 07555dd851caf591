//! The workload where the eviction policy matters, shared by
//! `examples/policies.rs` and `benches/policies.rs`.
//!
//! A data file on `/dev/shm` (tmpfs: reads cost memory copies, not device
//! time, so the numbers measure the caching software) is read two ways:
//!
//! 1. **hot set + scan**: a hot set (the first `hot_mib` of the file, a
//!    quarter of the cache) read at random, 8 bytes at a time, while a scan
//!    of the rest of the file runs alongside: after each hot read, the scan
//!    reads the next `scan_per_op` pages (one 8-byte word per 4 KiB), and
//!    starts over at the end (a periodic full scan). The hot set fits in the
//!    cache; the scan does not. Hit ratio is counted on the hot reads after
//!    a warm-up.
//! 2. **sequential scan**: one cold pass over the whole file.
//!
//! umio maps the hot set and the rest as two regions of one runtime (one
//! shared cache of `cache_mib`), so the hot set's misses are its region's
//! fills. Linux `mmap` runs the same workload under a cgroup v1 memory
//! limit of the same size. Pages of a tmpfs file created outside the
//! cgroup are neither charged to it nor reclaimable without swap, so a
//! limit would not bind on `/dev/shm`; the mmap runs therefore read a copy
//! of the file on an ext4 file system on a loop device over a `/dev/shm`
//! image: storage in memory as for umio, and a page cache the limit
//! bounds. Root is needed (userfaultfd, cgroups, mount).

use std::error::Error;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use umio_cache::PolicyKind;
use umio_core::{MapOptions, PrefetchKind, Runtime};

/// Any error, boxed.
pub type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MIB: usize = 1 << 20;
const WORD_STEP: usize = 4096;

/// Sizes of the workload.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Size of the data file, MiB.
    pub file_mib: usize,
    /// umio's cache, and the `mmap` runs' memory limit, MiB.
    pub cache_mib: usize,
    /// umio's page size, KiB.
    pub page_kib: usize,
    /// The hot set: the first `hot_mib` of the file.
    pub hot_mib: usize,
    /// umio pages of scan after each hot read.
    pub scan_per_op: usize,
    /// Hot reads.
    pub steps: usize,
    /// Hot reads before counting starts.
    pub warmup: usize,
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// What ran: a policy's name, or Linux `mmap`.
    pub name: String,
    /// Hits over hot reads after the warm-up.
    pub hot_hit_ratio: f64,
    /// Hot reads (each with its share of the scan) per second.
    pub steps_per_s: f64,
    /// Bytes the hot-set + scan phase went over, per second.
    pub mixed_mib_s: f64,
    /// Cold sequential scan of the whole file.
    pub scan_mib_s: f64,
}

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Reads one 64-bit word (volatile: the access must happen).
fn word(base: *const u8, offset: usize) -> u64 {
    // SAFETY: callers pass offsets within a live mapping of `base`, 8-byte
    // aligned and at least 8 bytes before its end.
    unsafe { std::ptr::read_volatile(base.add(offset).cast::<u64>()) }
}

/// Outcome of the hot-set + scan phase.
struct Mixed {
    elapsed: Duration,
    /// Misses on hot reads after the warm-up, if the caller's probe counts
    /// them (Linux mmap); umio counts them from its region's stats.
    probed_misses: u64,
    sum: u64,
}

/// The hot-set + scan phase. `resident(offset)` is asked before each
/// measured hot read (for mmap: `mincore`); `at_warmup` runs once when the
/// measurement starts.
fn hot_and_scan(
    p: &Params,
    hot: (*const u8, usize),
    scan: (*const u8, usize),
    resident: &mut dyn FnMut(usize) -> bool,
    at_warmup: &mut dyn FnMut(),
) -> Mixed {
    let page = p.page_kib * 1024;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut at = 0usize;
    let mut sum = 0u64;
    let mut misses = 0;
    let mut start = Instant::now();
    for step in 0..p.steps {
        if step == p.warmup {
            at_warmup();
            start = Instant::now();
        }
        let off = rng.below(hot.1 / 8) * 8;
        if step >= p.warmup && !resident(off) {
            misses += 1;
        }
        sum = sum.wrapping_add(word(hot.0, off));
        for _ in 0..p.scan_per_op {
            for w in (0..page).step_by(WORD_STEP) {
                sum = sum.wrapping_add(word(scan.0, at + w));
            }
            at += page;
            if at + page > scan.1 {
                at = 0;
            }
        }
    }
    Mixed {
        elapsed: start.elapsed(),
        probed_misses: misses,
        sum,
    }
}

fn sequential(base: *const u8, len: usize) -> (Duration, u64) {
    let start = Instant::now();
    let mut sum = 0u64;
    for off in (0..len).step_by(WORD_STEP) {
        sum = sum.wrapping_add(word(base, off));
    }
    (start.elapsed(), sum)
}

fn row(name: String, p: &Params, mixed: &Mixed, misses: u64, scan: Duration) -> Row {
    let measured = (p.steps - p.warmup) as f64;
    let secs = mixed.elapsed.as_secs_f64();
    let bytes = measured * (8 + p.scan_per_op * p.page_kib * 1024) as f64;
    Row {
        name,
        hot_hit_ratio: 1.0 - misses as f64 / measured,
        steps_per_s: measured / secs,
        mixed_mib_s: bytes / secs / MIB as f64,
        scan_mib_s: (p.file_mib * MIB) as f64 / scan.as_secs_f64() / MIB as f64,
    }
}

/// The data file, on /dev/shm; removed when dropped.
pub struct DataFile {
    /// The file.
    pub tmp: tempfile::NamedTempFile,
    /// Its length in bytes.
    pub len: usize,
}

/// Writes the data file of `p`.
pub fn make_data_file(p: &Params) -> Result<DataFile> {
    let mut tmp = tempfile::Builder::new()
        .prefix("umio-policies-")
        .suffix(".bin")
        .tempfile_in("/dev/shm")
        .map_err(|e| format!("creating the data file on /dev/shm: {e}"))?;
    let len = p.file_mib * MIB;
    crate::bench::write_random(&mut tmp, p.file_mib)?;
    Ok(DataFile { tmp, len })
}

/// One umio run: a fresh runtime with `kind`, the two phases.
pub fn run_umio(p: &Params, data: &DataFile, kind: PolicyKind) -> Result<Row> {
    let hot_len = p.hot_mib * MIB;
    let file = data.tmp.as_file();
    let rt = Runtime::builder()
        .cache_bytes((p.cache_mib * MIB) as u64)
        .page_size(p.page_kib * 1024)
        .eviction(kind)
        .build()?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let hot = unsafe {
        rt.map_file(
            file,
            MapOptions::new().len(hot_len).prefetch(PrefetchKind::None),
        )
    }?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let scan = unsafe {
        rt.map_file(
            file,
            MapOptions::new()
                .offset(hot_len as u64)
                .len(data.len - hot_len),
        )
    }?;
    let mut fills_at_warmup = 0;
    let mixed = hot_and_scan(
        p,
        (hot.as_ptr(), hot.len()),
        (scan.as_ptr(), scan.len()),
        &mut |_| true,
        &mut || fills_at_warmup = hot.stats().fills,
    );
    let misses = hot.stats().fills - fills_at_warmup;
    drop((hot, scan));
    drop(rt);
    // Cold sequential scan: a fresh runtime and mapping.
    let rt = Runtime::builder()
        .cache_bytes((p.cache_mib * MIB) as u64)
        .page_size(p.page_kib * 1024)
        .eviction(kind)
        .build()?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let all = unsafe { rt.map_file(file, MapOptions::new()) }?;
    let (scan_time, _) = sequential(all.as_ptr(), all.len());
    std::hint::black_box(mixed.sum);
    Ok(row(format!("umio {kind}"), p, &mixed, misses, scan_time))
}

/// Runs `f` with the process in a cgroup v1 memory cgroup limited to
/// `limit` bytes, then moves the process back and removes the cgroup.
///
/// The whole process moves: memory is charged to the cgroup of the
/// process's memory map owner (its main thread), so moving one thread
/// would change nothing. Call it while no other thread allocates.
pub fn in_memory_cgroup<T>(limit: usize, f: impl FnOnce() -> T) -> Result<T> {
    let root = Path::new("/sys/fs/cgroup/memory");
    let cg = root.join(format!("umio-policies-{}", std::process::id()));
    std::fs::create_dir(&cg).map_err(|e| format!("creating {}: {e}", cg.display()))?;
    let pid = std::process::id().to_string();
    let result = (|| -> Result<T> {
        std::fs::write(cg.join("memory.limit_in_bytes"), limit.to_string())?;
        std::fs::write(cg.join("cgroup.procs"), &pid)
            .map_err(|e| format!("joining the cgroup: {e}"))?;
        let out = f();
        std::fs::write(root.join("cgroup.procs"), &pid)
            .map_err(|e| format!("leaving the cgroup: {e}"))?;
        Ok(out)
    })();
    // Charges left in the cgroup move to its parent when it is removed.
    if let Err(e) = std::fs::remove_dir(&cg) {
        eprintln!("warning: removing {}: {e}", cg.display());
    }
    result
}

/// An ext4 file system on a loop device over a /dev/shm image, mounted at
/// a temporary directory; unmounted and removed when dropped.
pub struct LoopFs {
    image: PathBuf,
    /// Where the file system is mounted.
    pub mount: PathBuf,
    mounted: bool,
}

impl LoopFs {
    /// An ext4 file system of `bytes` bytes, mounted.
    pub fn new(bytes: usize) -> Result<LoopFs> {
        let id = std::process::id();
        let mut fs = LoopFs {
            image: PathBuf::from(format!("/dev/shm/umio-policies-{id}.ext4")),
            mount: std::env::temp_dir().join(format!("umio-policies-{id}")),
            mounted: false,
        };
        File::create(&fs.image)?.set_len(bytes as u64)?;
        std::fs::create_dir_all(&fs.mount)?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&fs.image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&fs.image)
            .arg(&fs.mount))?;
        fs.mounted = true;
        Ok(fs)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted
            && let Err(e) = run(Command::new("umount").arg(&self.mount))
        {
            eprintln!("warning: {e}");
        }
        let _ = std::fs::remove_dir(&self.mount);
        let _ = std::fs::remove_file(&self.image);
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// A read-only shared mapping of `len` bytes of `file` at `offset`.
pub struct Mmap {
    /// First byte.
    pub ptr: *mut u8,
    /// Bytes mapped.
    pub len: usize,
}

impl Mmap {
    /// Maps `len` bytes of `file` at `offset` with `madvise` `advice`.
    pub fn new(file: &File, offset: usize, len: usize, advice: i32) -> Result<Mmap> {
        // SAFETY: a fresh mapping chosen by the kernel; the file is open.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: ptr..ptr+len is the mapping just made.
        unsafe { libc::madvise(ptr, len, advice) };
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Whether the page holding `offset` is in the page cache.
    fn resident(&self, offset: usize) -> bool {
        let page = offset & !4095;
        let mut v = 0u8;
        // SAFETY: the page lies within the mapping; `v` receives one byte.
        let r = unsafe { libc::mincore(self.ptr.add(page).cast(), 4096, &mut v) };
        r == 0 && v & 1 != 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        let r = unsafe { libc::munmap(self.ptr.cast(), self.len) };
        assert_eq!(r, 0, "munmap failed");
    }
}

/// Drops the file's pages from the page cache, so the next run starts cold.
pub fn drop_cache(file: &File) {
    // SAFETY: plain system calls on an open descriptor.
    unsafe {
        libc::fdatasync(file.as_raw_fd());
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

fn mmap_phases(p: &Params, file: &File, len: usize) -> Result<(Mixed, Duration)> {
    let hot_len = p.hot_mib * MIB;
    drop_cache(file);
    let hot = Mmap::new(file, 0, hot_len, libc::MADV_RANDOM)?;
    let scan = Mmap::new(file, hot_len, len - hot_len, libc::MADV_SEQUENTIAL)?;
    let mixed = hot_and_scan(
        p,
        (hot.ptr, hot.len),
        (scan.ptr, scan.len),
        &mut |off| hot.resident(off),
        &mut || {},
    );
    drop((hot, scan));
    drop_cache(file);
    let all = Mmap::new(file, 0, len, libc::MADV_SEQUENTIAL)?;
    let (t, _) = sequential(all.ptr, all.len);
    Ok((mixed, t))
}

/// Linux mmap under a cgroup memory limit of the cache's size, reading a
/// copy of the data on ext4 over a loop device over /dev/shm.
pub fn run_mmap_limited(p: &Params, data: &DataFile) -> Result<Row> {
    let fs = LoopFs::new(data.len + data.len / 4 + 64 * MIB)?;
    let copy = fs.mount.join("data.bin");
    std::fs::copy(data.tmp.path(), &copy)?;
    let file = File::open(&copy)?;
    let limit = p.cache_mib * MIB;
    let (mixed, scan) = in_memory_cgroup(limit, || mmap_phases(p, &file, data.len))??;
    drop(file);
    drop(fs);
    Ok(row(
        format!("mmap, cgroup {} MiB", p.cache_mib),
        p,
        &mixed,
        mixed.probed_misses,
        scan,
    ))
}

/// Linux mmap of the /dev/shm file itself, no limit: the page cache holds
/// the whole file (tmpfs), so every read hits. The ceiling.
pub fn run_mmap_unbounded(p: &Params, data: &DataFile) -> Result<Row> {
    let (mixed, scan) = mmap_phases(p, data.tmp.as_file(), data.len)?;
    Ok(row(
        "mmap, tmpfs, no limit".into(),
        p,
        &mixed,
        mixed.probed_misses,
        scan,
    ))
}

/// Prints the rows as a table.
pub fn print_table(p: &Params, rows: &[Row]) {
    println!(
        "hot set {} MiB read at random, {} x {} KiB of scan after each hot read, \
         in a {} MiB file on /dev/shm; cache {} MiB; {} hot reads measured after {} warm-up",
        p.hot_mib,
        p.scan_per_op,
        p.page_kib,
        p.file_mib,
        p.cache_mib,
        p.steps - p.warmup,
        p.warmup
    );
    println!(
        "{:<24} {:>13} {:>15} {:>14} {:>16}",
        "", "hot hit ratio", "hot reads/s", "hot+scan MiB/s", "cold scan MiB/s"
    );
    for r in rows {
        println!(
            "{:<24} {:>13.3} {:>15.0} {:>14.0} {:>16.0}",
            r.name, r.hot_hit_ratio, r.steps_per_s, r.mixed_mib_s, r.scan_mib_s
        );
    }
}

/// Every umio policy, then Linux mmap limited and unbounded. A failure of
/// the mmap setup (no root, no loop device) is reported and skipped.
pub fn run_all(p: &Params) -> Result<Vec<Row>> {
    let data = make_data_file(p)?;
    let mut rows = Vec::new();
    for kind in PolicyKind::ALL {
        rows.push(run_umio(p, &data, kind)?);
    }
    match run_mmap_limited(p, &data) {
        Ok(r) => rows.push(r),
        Err(e) => eprintln!("Linux mmap under a cgroup limit skipped: {e}"),
    }
    rows.push(run_mmap_unbounded(p, &data)?);
    Ok(rows)
}
