//! Benchmark helpers shared by `benches/workloads.rs`,
//! `benches/fault_latency.rs` and `bench report` (`examples/bench`): the data files,
//! the memory budget for Linux `mmap` (a cgroup v1 limit), the two kinds of
//! mapping side by side, and the workloads themselves.
//!
//! Where the data lives:
//!
//! - **tmpfs** (`/dev/shm`): the file's pages are memory. umio reads them
//!   with `pread`; Linux `mmap` maps them (a page-cache hit). Used where
//!   everything fits: cold faults, resident scans.
//! - **ext4 on a loop device over a `/dev/shm` image**: a fast device (its
//!   "disk" is memory) with a real page cache that a cgroup limit bounds.
//!   Used where the budget matters (out-of-core reads, scans, write-back):
//!   Linux `mmap` reads it through the page cache with the whole process
//!   in a cgroup v1 memory limit equal to umio's cache; umio reads the same
//!   file with `O_DIRECT` through io_uring, so that its only cache is its
//!   own, of that size. Needs root (mount, cgroups); without it these
//!   workloads run umio on tmpfs and skip the bounded `mmap`, saying why.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::policy_workload::{LoopFs, drop_cache, in_memory_cgroup};
use umio_backends::{UringOptions, UringStore};
use umio_core::{MapOptions, Mapping, PrefetchKind, Runtime};

/// Errors of the setup, as text.
pub type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// One mebibyte.
pub const MIB: usize = 1 << 20;
/// One system page.
pub const PAGE: usize = 4096;

/// The time stamp counter (cycles on x86-64).
#[inline]
pub fn rdtsc() -> u64 {
    umio_core::trace_clock()
}

/// Counter ticks per second, measured against the monotonic clock over
/// `ms` milliseconds.
pub fn tsc_hz(ms: u64) -> f64 {
    let (t0, c0) = (Instant::now(), rdtsc());
    std::thread::sleep(Duration::from_millis(ms));
    let (c1, t1) = (rdtsc(), Instant::now());
    (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
}

/// xorshift64: cheap reproducible randomness.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// `0..n` shuffled.
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut r = Rng(seed | 1);
    for i in (1..n).rev() {
        v.swap(i, r.below(i + 1));
    }
    v
}

/// Writes `mib` MiB of pseudo-random bytes (xorshift64, the same bytes
/// every time) to `w`, and flushes it.
pub fn write_random(w: &mut impl Write, mib: usize) -> Result<()> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut buf = vec![0u8; MIB];
    for _ in 0..mib {
        for c in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        w.write_all(&buf)?;
    }
    w.flush()?;
    Ok(())
}

/// Why the bounded Linux `mmap` runs cannot happen here, if they cannot:
/// they need root (a loop mount, cgroups) and a cgroup v1 memory controller.
pub fn cgroup_unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (needs a loop mount and a cgroup v1 memory limit)".into());
    }
    if !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        return Some("no cgroup v1 memory controller at /sys/fs/cgroup/memory".into());
    }
    None
}

/// The data of one benchmark: a file of pseudo-random bytes on tmpfs and,
/// where possible, a copy of it on a block device: ext4 over a loop
/// device ([`Data::new`]) or a directory of the caller's ([`Data::in_dir`],
/// e.g. on the machine's own disk).
pub struct Data {
    /// The file on `/dev/shm`.
    pub shm: tempfile::NamedTempFile,
    /// Its length.
    pub len: usize,
    /// The copy on a device (`None`: see `no_ext4`).
    ext4: Option<Copy>,
    /// Why there is no copy on a device.
    pub no_ext4: Option<String>,
}

/// Where [`Data`]'s copy lives.
enum Copy {
    /// On ext4 over a loop device over `/dev/shm`, made for it (kept
    /// mounted while the copy is used).
    Loop { _fs: LoopFs, path: PathBuf },
    /// In a directory of the caller's, removed when dropped.
    Dir(tempfile::TempPath, String),
}

impl Data {
    fn shm(mib: usize) -> Result<tempfile::NamedTempFile> {
        let mut shm = tempfile::Builder::new()
            .prefix("umio-bench-")
            .suffix(".bin")
            .tempfile_in("/dev/shm")
            .map_err(|e| format!("creating the data file on /dev/shm: {e}"))?;
        write_random(&mut shm, mib)?;
        Ok(shm)
    }

    /// `mib` MiB of data on `/dev/shm`, and a copy on ext4 over a loop
    /// device if `ext4` and the machine allows it.
    pub fn new(mib: usize, ext4: bool) -> Result<Data> {
        let shm = Data::shm(mib)?;
        let len = mib * MIB;
        let (ext4, no_ext4) = if !ext4 {
            (None, Some("not requested".into()))
        } else if let Some(why) = cgroup_unavailable() {
            (None, Some(why))
        } else {
            match LoopFs::new(len + len / 4 + 64 * MIB).and_then(|fs| {
                let path = fs.mount.join("data.bin");
                std::fs::copy(shm.path(), &path)?;
                Ok(Copy::Loop { _fs: fs, path })
            }) {
                Ok(x) => (Some(x), None),
                Err(e) => (None, Some(format!("ext4 on a loop device: {e}"))),
            }
        };
        Ok(Data {
            shm,
            len,
            ext4,
            no_ext4,
        })
    }

    /// `mib` MiB of data on `/dev/shm`, and a copy in a file made in `dir`
    /// (written to the device: `fsync`ed), removed with the `Data`; no
    /// copy (and `no_ext4` says why) where no block device is under `dir`.
    /// The bounded Linux `mmap` runs still need root and a cgroup v1
    /// memory controller ([`cgroup_unavailable`]).
    pub fn in_dir(mib: usize, dir: &std::path::Path) -> Result<Data> {
        let shm = Data::shm(mib)?;
        let copy = tempfile::Builder::new()
            .prefix("umio-bench-")
            .suffix(".bin")
            .tempfile_in(dir)
            .map_err(|e| format!("creating the data file in {}: {e}", dir.display()))?;
        let Some(dev) = crate::device::BlockDevice::of(copy.as_file()) else {
            return Ok(Data {
                shm,
                len: mib * MIB,
                ext4: None,
                no_ext4: Some(format!(
                    "no block device under {} (tmpfs?): umio runs on /dev/shm, Linux mmap is \
                     skipped",
                    dir.display()
                )),
            });
        };
        std::fs::copy(shm.path(), copy.path())?;
        copy.as_file().sync_all()?;
        let what = format!("{} ({})", dir.display(), dev.describe());
        Ok(Data {
            shm,
            len: mib * MIB,
            ext4: Some(Copy::Dir(copy.into_temp_path(), what)),
            no_ext4: None,
        })
    }

    /// The copy's path, if there is one.
    pub fn ext4_path(&self) -> Option<&std::path::Path> {
        self.ext4.as_ref().map(|c| match c {
            Copy::Loop { path, .. } => path.as_path(),
            Copy::Dir(p, _) => p.as_ref(),
        })
    }

    /// Opens the copy, with its pages dropped from the page cache.
    pub fn ext4_file(&self, writable: bool) -> Option<File> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(self.ext4_path()?)
            .ok()?;
        drop_cache(&f);
        Some(f)
    }

    /// Where the out-of-core runs read: "ext4 on a loop device over
    /// /dev/shm", the directory and its device, or "/dev/shm (tmpfs)".
    pub fn device(&self) -> String {
        match &self.ext4 {
            Some(Copy::Loop { .. }) => "ext4 on a loop device over /dev/shm".into(),
            Some(Copy::Dir(_, what)) => what.clone(),
            None => "/dev/shm (tmpfs)".into(),
        }
    }
}

/// How a umio runtime and region are set up.
#[derive(Clone, Copy, Debug)]
pub struct UmioSetup {
    /// Cache bound.
    pub cache: usize,
    /// Fill unit.
    pub page: usize,
    /// Read-ahead.
    pub prefetch: PrefetchKind,
    /// Filler threads (`None`: umio's default).
    pub fillers: Option<usize>,
    /// Writable mapping.
    pub writable: bool,
}

impl UmioSetup {
    /// `cache` bytes of cache, `page`-byte pages, no read-ahead, default
    /// fillers, read-only.
    pub fn new(cache: usize, page: usize) -> UmioSetup {
        UmioSetup {
            cache,
            page,
            prefetch: PrefetchKind::None,
            fillers: None,
            writable: false,
        }
    }

    /// With sequential read-ahead up to `window` bytes.
    pub fn readahead(mut self, window: usize) -> UmioSetup {
        self.prefetch = PrefetchKind::Sequential { max_window: window };
        self
    }

    /// Writable.
    pub fn writable(mut self) -> UmioSetup {
        self.writable = true;
        self
    }

    fn runtime(&self) -> Result<Runtime> {
        let mut b = Runtime::builder()
            .cache_bytes(self.cache as u64)
            .page_size(self.page)
            .prefetch(self.prefetch);
        if let Some(n) = self.fillers {
            b = b.fillers(n);
        }
        Ok(b.build()?)
    }
}

/// A mapped file: umio's or the kernel's.
pub enum Region {
    /// A umio mapping (its runtime kept alive with it).
    Umio(Mapping),
    /// A Linux `mmap`.
    Kernel(Mmap),
}

impl Region {
    /// umio over the tmpfs file, read with `pread`.
    pub fn umio_shm(data: &Data, s: UmioSetup) -> Result<Region> {
        let rt = s.runtime()?;
        let opts = MapOptions::new()
            .len(data.len)
            .page_size(s.page)
            .prefetch(s.prefetch)
            .writable(s.writable);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(s.writable)
            .open(data.shm.path())?;
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        Ok(Region::Umio(unsafe { rt.map_file(&file, opts) }?))
    }

    /// umio over the ext4 copy with `O_DIRECT` (io_uring), or over the
    /// tmpfs file where there is no ext4 copy.
    pub fn umio_device(data: &Data, s: UmioSetup) -> Result<Region> {
        let Some(path) = data.ext4_path() else {
            return Region::umio_shm(data, s);
        };
        let rt = s.runtime()?;
        let store = UringStore::open(path, s.writable, UringOptions::new().direct(true))?;
        let opts = MapOptions::new()
            .len(data.len)
            .page_size(s.page)
            .prefetch(s.prefetch)
            .writable(s.writable)
            .store(Arc::new(store));
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        Ok(Region::Umio(unsafe { rt.map(opts) }?))
    }

    /// Linux `mmap` of the tmpfs file.
    pub fn kernel_shm(data: &Data, advice: i32, writable: bool) -> Result<Region> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(data.shm.path())?;
        Ok(Region::Kernel(Mmap::new(
            &file, data.len, advice, writable,
        )?))
    }

    /// Linux `mmap` of the ext4 copy, its pages dropped from the page cache
    /// first (`None` where there is no ext4 copy).
    pub fn kernel_device(data: &Data, advice: i32, writable: bool) -> Result<Option<Region>> {
        let Some(file) = data.ext4_file(writable) else {
            return Ok(None);
        };
        Ok(Some(Region::Kernel(Mmap::new(
            &file, data.len, advice, writable,
        )?)))
    }

    /// First byte.
    pub fn ptr(&self) -> *mut u8 {
        match self {
            Region::Umio(m) => m.as_ptr(),
            Region::Kernel(m) => m.ptr,
        }
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        match self {
            Region::Umio(m) => m.len(),
            Region::Kernel(m) => m.len,
        }
    }

    /// Whether no byte is mapped (never, for a region made here).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Page faults so far: the region's fault events for umio, the
    /// process's minor and major faults for the kernel.
    pub fn faults(&self) -> u64 {
        match self {
            Region::Umio(m) => m.stats().faults,
            Region::Kernel(_) => process_faults(),
        }
    }

    /// Makes every write durable: `Mapping::flush`, or `msync` and
    /// `fdatasync`.
    pub fn flush(&self) -> Result<()> {
        match self {
            Region::Umio(m) => Ok(m.flush()?),
            Region::Kernel(m) => m.sync(),
        }
    }
}

/// Minor plus major page faults of this process.
pub fn process_faults() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    (u.ru_minflt + u.ru_majflt) as u64
}

/// A shared mapping of a whole file by the kernel.
pub struct Mmap {
    /// First byte.
    pub ptr: *mut u8,
    /// Bytes mapped.
    pub len: usize,
    file: File,
}

// SAFETY: the mapping is plain shared memory; the threads of a benchmark
// read it at once, as they would any memory.
unsafe impl Send for Mmap {}
// SAFETY: as above.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `file` shared, with `madvise` `advice`.
    pub fn new(file: &File, len: usize, advice: i32, writable: bool) -> Result<Mmap> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh mapping chosen by the kernel; the file is open.
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
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: ptr..ptr+len is the mapping just made.
        unsafe { libc::madvise(ptr, len, advice) };
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
            file: file.try_clone()?,
        })
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: the range is this mapping.
        if unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        self.file.sync_data()?;
        Ok(())
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        let r = unsafe { libc::munmap(self.ptr.cast(), self.len) };
        assert_eq!(r, 0, "munmap failed");
    }
}

/// Reads one 64-bit word (volatile: the access must happen).
///
/// # Safety
/// `base + offset` is 8-byte aligned and 8 readable bytes of a live
/// mapping follow it.
#[inline]
pub unsafe fn word(base: *const u8, offset: usize) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::read_volatile(base.add(offset).cast::<u64>()) }
}

/// Writes one 64-bit word (volatile).
///
/// # Safety
/// `base + offset` is 8-byte aligned and 8 writable bytes of a live
/// mapping follow it, which nothing else borrows.
#[inline]
pub unsafe fn put_word(base: *mut u8, offset: usize, v: u64) {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::write_volatile(base.add(offset).cast::<u64>(), v) }
}

/// Cold units: reads one word of each 4 KiB of `unit` bytes at each unit
/// index of `units` (a shuffled order, so no read-ahead helps). Returns the
/// time taken.
pub fn read_units(r: &Region, unit: usize, units: &[usize]) -> Duration {
    let base = r.ptr();
    let mut sum = 0u64;
    let t = Instant::now();
    for &u in units {
        for off in (u * unit..(u + 1) * unit).step_by(PAGE) {
            // SAFETY: an aligned word within the live mapping at `base`.
            sum = sum.wrapping_add(unsafe { word(base, off) });
        }
    }
    let e = t.elapsed();
    std::hint::black_box(sum);
    e
}

/// Reads every 64-bit word of `len` bytes (a resident scan: memory speed).
pub fn scan_words(r: &Region, len: usize) -> Duration {
    let base = r.ptr() as *const u64;
    let t = Instant::now();
    // SAFETY: the first `len` bytes of the mapping, 8-byte aligned.
    let s = unsafe { std::slice::from_raw_parts(base, len / 8) };
    let sum = s.iter().fold(0u64, |a, &w| a.wrapping_add(w));
    let e = t.elapsed();
    std::hint::black_box(sum);
    e
}

/// Reads one word per 4 KiB of `len` bytes in order (a scan where paging
/// is all the cost). Returns the time and the faults taken.
pub fn scan_pages(r: &Region, len: usize) -> (Duration, u64) {
    let base = r.ptr();
    let f0 = r.faults();
    let mut sum = 0u64;
    let t = Instant::now();
    for off in (0..len).step_by(PAGE) {
        // SAFETY: an aligned word within the live mapping at `base`.
        sum = sum.wrapping_add(unsafe { word(base, off) });
    }
    let e = t.elapsed();
    std::hint::black_box(sum);
    (e, r.faults() - f0)
}

/// `ops` reads of one word at random 4 KiB pages, split over `threads`
/// threads. Returns the wall time.
pub fn random_reads(r: &Region, ops: usize, threads: usize, seed: u64) -> Duration {
    random_reads_for(r, ops, threads, seed, Duration::MAX).1
}

/// As [`random_reads`], but each thread stops at `limit` after the start
/// if not done (a slow side on a slow disk ends anyway). Returns the reads
/// done and the wall time.
pub fn random_reads_for(
    r: &Region,
    ops: usize,
    threads: usize,
    seed: u64,
    limit: Duration,
) -> (usize, Duration) {
    let base = r.ptr() as usize;
    let pages = r.len() / PAGE;
    let t = Instant::now();
    let deadline = t.checked_add(limit);
    let done: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                let n = ops / threads + usize::from(k < ops % threads);
                s.spawn(move || {
                    let mut rng = Rng(seed ^ (0x9E37_79B9 * (k as u64 + 1)) | 1);
                    let mut sum = 0u64;
                    let mut i = 0;
                    while i < n {
                        if i % 64 == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                            break;
                        }
                        let off = rng.below(pages) * PAGE + 8 * rng.below(PAGE / 8);
                        // SAFETY: an aligned word within the live mapping at `base`.
                        sum = sum.wrapping_add(unsafe { word(base as *const u8, off) });
                        i += 1;
                    }
                    std::hint::black_box(sum);
                    i
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    (done, t.elapsed())
}

/// Writes one word in each 4 KiB page of the first `bytes` bytes, then
/// makes them durable. Returns (write time, flush time).
pub fn write_then_flush(r: &Region, bytes: usize, v: u64) -> Result<(Duration, Duration)> {
    let base = r.ptr();
    let t = Instant::now();
    for off in (0..bytes).step_by(PAGE) {
        // SAFETY: an aligned word within the live mapping at `base`.
        unsafe { put_word(base, off, v ^ off as u64) };
    }
    let w = t.elapsed();
    let t = Instant::now();
    r.flush()?;
    Ok((w, t.elapsed()))
}

/// Runs `f` inside a cgroup v1 memory limit of `limit` bytes (the whole
/// process), or returns why it cannot.
pub fn bounded<T>(limit: usize, f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    if let Some(why) = cgroup_unavailable() {
        return Err(why);
    }
    in_memory_cgroup(limit, f).map_err(|e| e.to_string())
}

/// Mean of a slice.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The `q` quantile (0 to 1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// `n` pseudo-random page numbers below `pages` (xorshift64 from `seed`,
/// scaled by multiplication: no modulo bias), repeats allowed.
pub fn random_pages(seed: u64, pages: usize, n: usize) -> Vec<usize> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((u128::from(x) * pages as u128) >> 64) as usize
        })
        .collect()
}

/// As [`random_pages`], but each page at most once (a page read again
/// would be a hit for a mapping and a read for the device), and at most
/// `pages` of them.
pub fn distinct_pages(seed: u64, pages: usize, n: usize) -> Vec<usize> {
    let want = n.min(pages);
    let mut seen = std::collections::HashSet::with_capacity(want);
    let mut out = Vec::with_capacity(want);
    let mut s = seed;
    while out.len() < want {
        for p in random_pages(s, pages, want - out.len()) {
            if seen.insert(p) {
                out.push(p);
            }
        }
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    out
}

/// Reads one byte of each page of `pages` (4 KiB pages counted from
/// `base`, volatile: each read happens); returns their sum.
///
/// # Safety
/// Every page listed is inside a live readable mapping at `base`.
pub unsafe fn touch_pages(base: *const u8, pages: &[usize]) -> u64 {
    let mut sum = 0u64;
    for &p in pages {
        // SAFETY: the caller's promise.
        sum = sum.wrapping_add(u64::from(unsafe {
            std::ptr::read_volatile(base.add(p * PAGE))
        }));
    }
    sum
}

/// The load averages, as `/proc/loadavg` gives them ("1.02 0.98 0.87").
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_pages_stay_below_the_count_and_distinct_ones_never_repeat() {
        let v = random_pages(7, 10, 1000);
        assert_eq!(v.len(), 1000);
        assert!(v.iter().all(|&p| p < 10));
        assert!((0..10).all(|p| v.contains(&p)), "{v:?}");
        let mut d = distinct_pages(7, 10, 1000);
        assert_eq!(d.len(), 10);
        d.sort();
        assert_eq!(d, (0..10).collect::<Vec<_>>());
        let d = distinct_pages(9, 1 << 20, 500);
        let set: std::collections::HashSet<_> = d.iter().collect();
        assert_eq!((d.len(), set.len()), (500, 500));
    }

    #[test]
    fn a_copy_in_a_directory_is_made_on_a_block_device_and_refused_on_tmpfs() {
        let shm = Data::in_dir(2, std::path::Path::new("/dev/shm")).unwrap();
        assert!(shm.ext4_path().is_none());
        assert!(shm.no_ext4.as_deref().unwrap().contains("no block device"));
        assert_eq!(shm.device(), "/dev/shm (tmpfs)");
        // The package's directory: on the machine's disk where it is built.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let probe = tempfile::tempfile_in(dir.path()).unwrap();
        let Some(dev) = crate::device::BlockDevice::of(&probe) else {
            eprintln!("skipped: no block device under {}", dir.path().display());
            return;
        };
        let d = Data::in_dir(2, dir.path()).unwrap();
        let path = d.ext4_path().unwrap().to_path_buf();
        assert!(path.starts_with(dir.path()));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(d.shm.path()).unwrap()
        );
        assert!(d.device().contains(&dev.describe()), "{}", d.device());
        drop(d);
        assert!(!path.exists(), "the copy outlived its Data");
    }

    #[test]
    fn touch_pages_reads_the_first_byte_of_each_page_listed() {
        let mut mem = vec![0u8; 4 * PAGE];
        for p in 0..4 {
            mem[p * PAGE] = p as u8 + 1;
        }
        // SAFETY: pages 0 to 3 of `mem`.
        assert_eq!(unsafe { touch_pages(mem.as_ptr(), &[0, 3, 3]) }, 1 + 4 + 4);
    }
}
