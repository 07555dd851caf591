//! The fault-path microbenchmark, shared by `examples/fault_path.rs` and
//! `bench report` (`examples/bench`): one fault at a time from one thread, timed with
//! the time stamp counter, for umio (its filler's steps recorded with
//! `Builder::trace_faults`), for a minimal userfaultfd handler of our own
//! (the floor: one thread, blocking `read(2)`, one `UFFDIO_COPY` per fault,
//! as `uffd-floor.c` of the kernel notes does), and for Linux's own faults.
//!
//! Every access touches one 4 KiB page in each 64 KiB, so that the kernel's
//! fault-around (up to 16 cached pages mapped per fault) never turns an
//! access into a hit: each timed access is one fault.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use umio_core::{MapOptions, Mapping, PrefetchKind, Runtime};

use crate::bench::{Data, PAGE, Result, mean, quantile, rdtsc, word};

/// Accesses are this far apart.
pub const STRIDE: usize = 64 << 10;

/// One way of serving a fault, measured.
#[derive(Clone, Debug)]
pub struct PathRow {
    /// What was measured.
    pub name: String,
    /// Cycles of each access, sorted.
    pub cycles: Vec<f64>,
    /// Mean cycles of each phase, in order (empty if not broken down).
    pub phases: Vec<(&'static str, f64)>,
}

impl PathRow {
    /// Median cycles.
    pub fn median(&self) -> f64 {
        quantile(&self.cycles, 0.5)
    }
    /// Mean cycles.
    pub fn mean(&self) -> f64 {
        mean(&self.cycles)
    }
}

/// Everything the fault-path benchmark measured in one run.
#[derive(Clone, Debug)]
pub struct FaultPath {
    /// Counter ticks per second.
    pub tsc_hz: f64,
    /// Faults per row.
    pub faults: usize,
    /// umio with its defaults (fillers poll or sleep, whichever the
    /// runtime measures to be faster), reading the page from the tmpfs
    /// file with `pread`.
    pub umio: PathRow,
    /// umio over the tmpfs file mapped into the process (`DaxStore`): the
    /// fill copies straight from the file's pages, no store read, as the
    /// floor copies from a buffer.
    pub umio_mapped: PathRow,
    /// umio with fillers that always sleep as soon as no event is pending
    /// (`Builder::filler_spin(0)`).
    pub umio_sleep: PathRow,
    /// umio with fillers that poll for 50 us after each event before they
    /// sleep (`Builder::filler_spin`).
    pub umio_spin: PathRow,
    /// umio serving each fault in the faulting thread
    /// (`FaultService::InThread`: SIGBUS handler, no hand-off), reading
    /// the page with `pread` as the defaults row does.
    pub umio_in_thread: PathRow,
    /// Our own minimal handler.
    pub floor: PathRow,
    /// The same handler, `pread`ing the page from the tmpfs file first
    /// (what a file-backed fill adds).
    pub floor_pread: PathRow,
    /// Linux: first read of a page-cache-resident (tmpfs) file page.
    pub kernel_minor: PathRow,
    /// Linux: first write to anonymous memory.
    pub kernel_anon: PathRow,
    /// Linux: first read of an ext4 file page not in the page cache
    /// (`None`: no ext4 here).
    pub kernel_major: Option<PathRow>,
}

impl FaultPath {
    /// Cycles to microseconds.
    pub fn us(&self, cycles: f64) -> f64 {
        cycles / self.tsc_hz * 1e6
    }

    /// All measured rows, umio first.
    pub fn rows(&self) -> Vec<&PathRow> {
        let mut v = vec![
            &self.umio,
            &self.umio_mapped,
            &self.umio_sleep,
            &self.umio_spin,
            &self.umio_in_thread,
            &self.floor,
            &self.floor_pread,
            &self.kernel_minor,
            &self.kernel_anon,
        ];
        v.extend(self.kernel_major.as_ref());
        v
    }
}

/// Published figures (Aquila, EuroSys'21: Xeon E5-2630 v3 at 2.4 GHz).
pub const PUBLISHED: [(&str, f64); 4] = [
    (
        "Linux mmap page-cache-hit fault (published, Aquila paper)",
        2724.0,
    ),
    ("  of which the ring 3 to ring 0 trap (published)", 1287.0),
    ("Linux mmap fault with I/O (published)", 5380.0),
    ("Aquila trap, non-root ring 0 (published)", 552.0),
];

/// Runs every row with `faults` faults each; `progress` is told each row's
/// name as it starts.
pub fn run(data: &Data, faults: usize, progress: &mut dyn FnMut(&str)) -> Result<FaultPath> {
    let tsc_hz = crate::bench::tsc_hz(200);
    let faults = faults.min(data.len / STRIDE - 1 - LEARNING);
    // umio's rows and the floor's take turns, a fifth of the faults each
    // time: on a shared machine the cost of a fault swings with where the
    // scheduler puts the handler thread (the faulting thread's CPU or the
    // other one), and alternating gives every row the same conditions.
    let fillers = umio_core::default_fillers();
    let names = [
        format!(
            "umio (defaults: {fillers} fillers, polling or sleeping as measured; pread from the tmpfs file)"
        ),
        "umio, tmpfs file mapped in (DaxStore: no store read, like the floor)".to_string(),
        format!("umio, {fillers} fillers always sleeping between events"),
        format!("umio, {fillers} fillers polling 50 us after each event"),
        "umio in-thread (SIGBUS handler in the faulting thread, no hand-off; pread from the tmpfs file)"
            .to_string(),
        "floor: own handler, blocking read + UFFDIO_COPY".to_string(),
        "floor + pread of the page (tmpfs)".to_string(),
    ];
    let f = File::open(data.shm.path())?;
    let per_round = faults.div_ceil(ROUNDS);
    let mut rows: Vec<PathRow> = names
        .iter()
        .map(|n| PathRow {
            name: n.clone(),
            cycles: Vec::new(),
            phases: Vec::new(),
        })
        .collect();
    for round in 1..=ROUNDS {
        progress(&format!("umio and the floor, round {round} of {ROUNDS}"));
        let measured = [
            umio_row(data, per_round, Setup::Defaults, &names[0])?,
            umio_row(data, per_round, Setup::Mapped, &names[1])?,
            umio_row(data, per_round, Setup::Sleeping, &names[2])?,
            umio_row(data, per_round, Setup::Polling, &names[3])?,
            umio_row(data, per_round, Setup::InThread, &names[4])?,
            floor_row(per_round, None, &names[5])?,
            floor_row(per_round, Some((&f, data.len)), &names[6])?,
        ];
        for (row, m) in rows.iter_mut().zip(measured) {
            row.absorb(m, ROUNDS);
        }
    }
    for row in &mut rows {
        row.cycles.sort_by(f64::total_cmp);
    }
    let mut rows = rows.into_iter();
    let mut next = || rows.next().expect("seven rows");
    let (umio, umio_mapped, umio_sleep, umio_spin, umio_in_thread, floor, floor_pread) =
        (next(), next(), next(), next(), next(), next(), next());
    progress("Linux faults");
    let kernel_minor = kernel_row(
        &f,
        faults,
        false,
        "Linux mmap: page-cache hit (tmpfs file), minor fault",
    )?;
    let kernel_anon = anon_row(faults, "Linux: anonymous first touch")?;
    let kernel_major = match data.ext4_file(false) {
        Some(ext4) => Some(kernel_row(
            &ext4,
            faults,
            true,
            "Linux mmap: ext4 on loop over tmpfs, pages dropped (MADV_RANDOM), major fault",
        )?),
        None => None,
    };
    Ok(FaultPath {
        tsc_hz,
        faults,
        umio,
        umio_mapped,
        umio_sleep,
        umio_spin,
        umio_in_thread,
        floor,
        floor_pread,
        kernel_minor,
        kernel_anon,
        kernel_major,
    })
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Turns each compared row takes.
const ROUNDS: usize = 5;

impl PathRow {
    /// Adds one round's measurements (one of `rounds` equal rounds).
    fn absorb(&mut self, round: PathRow, rounds: usize) {
        self.cycles.extend(round.cycles);
        if self.phases.is_empty() {
            self.phases = round.phases.iter().map(|&(k, _)| (k, 0.0)).collect();
        }
        for (mine, (_, c)) in self.phases.iter_mut().zip(round.phases) {
            mine.1 += c / rounds as f64;
        }
    }
}

/// Faults handled before timing starts (code and tables warm).
pub const WARMUP: usize = 16;
/// Faults handled before timing starts with umio's defaults: the
/// runtime's first eight windows of 32 events, in which it measures both
/// ways of waiting for events (`crates/core/src/spin.rs`), and the
/// warm-up.
const LEARNING: usize = 8 * 32 + WARMUP;

/// How a umio row is set up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// umio's defaults over the file, read with `pread`.
    Defaults,
    /// The file mapped into the process: fills copy from its pages.
    Mapped,
    /// Fillers sleeping as soon as no event is pending.
    Sleeping,
    /// Fillers polling 50 us after each event.
    Polling,
    /// Faults served in the faulting thread.
    InThread,
}

fn umio_row(data: &Data, faults: usize, setup: Setup, name: &str) -> Result<PathRow> {
    let mut b = Runtime::builder()
        .cache_bytes(data.len as u64 + (16 << 20))
        .page_size(PAGE)
        .prefetch(PrefetchKind::None)
        .trace_faults(true);
    match setup {
        Setup::Polling => b = b.filler_spin(Duration::from_micros(50)),
        Setup::Sleeping => b = b.filler_spin(Duration::ZERO),
        Setup::InThread => b = b.fault_service(umio_core::FaultService::InThread),
        Setup::Defaults | Setup::Mapped => {}
    }
    let rt = b.build()?;
    let opts = MapOptions::new().len(data.len);
    let map = if setup == Setup::Mapped {
        use umio_backends::Store as _;
        let store = umio_backends::DaxStore::open(data.shm.path(), false)?;
        // The file's pages are mapped before timing, as the floor's source
        // buffer is: the row measures umio, not the kernel's minor faults.
        if let Some(bytes) = store.as_mapped() {
            let sum = bytes.iter().step_by(PAGE).fold(0u8, |a, &b| a ^ b);
            std::hint::black_box(sum);
        }
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map(opts.store(Arc::new(store))) }?
    } else {
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        unsafe { rt.map_file(&File::open(data.shm.path())?, opts) }?
    };
    let store_read = if setup == Setup::Mapped {
        "(no store read: copy from the mapping)"
    } else {
        "store read (pread)"
    };
    // The defaults measure polling against sleeping over their first
    // windows of events: those are left out, as the code's warm-up is.
    let warmup = match setup {
        Setup::Defaults | Setup::Mapped => LEARNING,
        Setup::Sleeping | Setup::Polling | Setup::InThread => WARMUP,
    };
    let (mut row, _) = traced_faults(&rt, &map, faults, warmup, store_read)?;
    if setup == Setup::InThread {
        // The same stamps, taken in the faulting thread's SIGBUS handler:
        // no event, no wake-up; the last phase is the handler's return.
        for (k, _) in &mut row.phases {
            *k = match *k {
                "trap + delivery to the filler" => "trap + SIGBUS delivery to umio's handler",
                "event read" => "(no event to read)",
                "UFFDIO_WAKE + wake-up until the thread resumes" => {
                    "return from the handler until the access resumes"
                }
                other => other,
            };
        }
    }
    row.name = name.into();
    row.cycles = sorted(row.cycles);
    Ok(row)
}

/// Touches one 4 KiB page in each [`STRIDE`] of the umio mapping at `base`
/// (`faults` timed faults after a warm-up), each timed with the time stamp
/// counter and broken into phases by umio's trace (`rt` built with
/// `trace_faults`). Returns the row (no name; cycles in fault order) and
/// each fault's store-read cycles; `store_read` names that phase.
pub fn traced_faults(
    rt: &Runtime,
    map: &Mapping,
    faults: usize,
    warmup: usize,
    store_read: &'static str,
) -> Result<(PathRow, Vec<f64>)> {
    let names = [
        "trap + delivery to the filler",
        "event read",
        "region + page lookup",
        "cache reservation",
        store_read,
        "install (UFFDIO_COPY)",
        "page state update",
        "UFFDIO_WAKE + wake-up until the thread resumes",
    ];
    let mut sums = [0f64; 8];
    let mut cycles = Vec::with_capacity(faults);
    let mut reads = Vec::with_capacity(faults);
    let last_end = (faults + warmup)
        .checked_sub(1)
        .map_or(0, |n| n.saturating_mul(STRIDE).saturating_add(8));
    if last_end > map.len() {
        return Err("the mapping is shorter than the faults asked for".into());
    }
    let base = map.as_ptr().cast_const();
    let mut seq = rt.last_fault_trace().map_or(0, |t| t.seq);
    for i in 0..faults + warmup {
        let t0 = rdtsc();
        // SAFETY: an aligned word within `map` (its length checked above),
        // which lives for the call.
        let v = unsafe { word(base, i * STRIDE) };
        let t1 = rdtsc();
        std::hint::black_box(v);
        // The filler publishes its trace just after the wake-up.
        let deadline = Instant::now() + Duration::from_secs(1);
        let tr = loop {
            match rt.last_fault_trace() {
                Some(t) if t.seq > seq => break t,
                _ if Instant::now() > deadline => return Err("no fault trace from umio".into()),
                _ => std::hint::spin_loop(),
            }
        };
        seq = tr.seq;
        if i < warmup {
            continue;
        }
        cycles.push((t1 - t0) as f64);
        reads.push(tr.store_read.wrapping_sub(tr.reserved) as f64);
        let stamps = [
            t0,
            tr.read_begin,
            tr.read_end,
            tr.filling,
            tr.reserved,
            tr.store_read,
            tr.installed,
            // Not `woken`: UFFDIO_WAKE may return to the filler after the
            // thread resumed (the filler preempted on a busy CPU).
            tr.waking,
            t1,
        ];
        for k in 0..8 {
            sums[k] += stamps[k + 1] as f64 - stamps[k] as f64;
        }
    }
    let n = faults as f64;
    let row = PathRow {
        name: String::new(),
        cycles,
        phases: names.iter().zip(sums).map(|(&k, s)| (k, s / n)).collect(),
    };
    Ok((row, reads))
}

fn kernel_row(file: &File, faults: usize, major: bool, name: &str) -> Result<PathRow> {
    let len = (faults + WARMUP) * STRIDE;
    let advice = if major {
        libc::MADV_RANDOM
    } else {
        libc::MADV_NORMAL
    };
    let m = crate::bench::Mmap::new(file, len, advice, false)?;
    let mut cycles = Vec::with_capacity(faults);
    for i in 0..faults + WARMUP {
        let t0 = rdtsc();
        // SAFETY: an aligned word within the live mapping.
        let v = unsafe { word(m.ptr, i * STRIDE) };
        let t1 = rdtsc();
        std::hint::black_box(v);
        if i >= WARMUP {
            cycles.push((t1 - t0) as f64);
        }
    }
    Ok(PathRow {
        name: name.into(),
        cycles: sorted(cycles),
        phases: Vec::new(),
    })
}

fn anon_row(faults: usize, name: &str) -> Result<PathRow> {
    let len = (faults + WARMUP) * STRIDE;
    let a = Anon::new(len)?;
    // SAFETY: the range is this mapping; THP would fill 2 MiB per fault.
    unsafe { libc::madvise(a.ptr.cast(), len, libc::MADV_NOHUGEPAGE) };
    let mut cycles = Vec::with_capacity(faults);
    for i in 0..faults + WARMUP {
        let t0 = rdtsc();
        // SAFETY: an aligned word within the live mapping.
        unsafe { crate::bench::put_word(a.ptr, i * STRIDE, 1) };
        let t1 = rdtsc();
        if i >= WARMUP {
            cycles.push((t1 - t0) as f64);
        }
    }
    Ok(PathRow {
        name: name.into(),
        cycles: sorted(cycles),
        phases: Vec::new(),
    })
}

/// Private anonymous memory, unmapped when dropped.
struct Anon {
    ptr: *mut u8,
    len: usize,
}

impl Anon {
    fn new(len: usize) -> Result<Anon> {
        // SAFETY: a fresh anonymous mapping chosen by the kernel.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Anon { ptr: p.cast(), len })
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        let r = unsafe { libc::munmap(self.ptr.cast(), self.len) };
        assert_eq!(r, 0, "munmap failed");
    }
}

// The minimal handler speaks to the kernel directly (the ioctl numbers as
// in crates/core/src/sys/uffd.rs, in the asm-generic `_IOC` encoding,
// which Alpha, MIPS, PowerPC and SPARC do not use: refuse to build there).
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "riscv32",
    target_arch = "s390x",
    target_arch = "loongarch64",
)))]
compile_error!(
    "umio-bench's userfaultfd ioctl numbers use the asm-generic _IOC encoding, which this architecture does not"
);
const fn ioc(dir: u64, nr: u64, size: usize) -> libc::c_ulong {
    ((dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr) as libc::c_ulong
}
const IOWR: u64 = 3;
const UFFDIO_API: libc::c_ulong = ioc(IOWR, 0x3F, 24);
const UFFDIO_REGISTER: libc::c_ulong = ioc(IOWR, 0x00, 32);
pub(crate) const UFFDIO_COPY: libc::c_ulong = ioc(IOWR, 0x03, 40);
const EVENT_PAGEFAULT: u8 = 0x12;

#[repr(C)]
pub(crate) struct UffdioCopy {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) mode: u64,
    pub(crate) copy: i64,
}

// As the kernel's header lays it out and numbers the ioctls (x86_64 and
// every asm-generic architecture).
const _: () = {
    assert!(size_of::<UffdioCopy>() == 40);
    assert!(UFFDIO_API == 0xc018_aa3f);
    assert!(UFFDIO_REGISTER == 0xc020_aa00);
    assert!(UFFDIO_COPY == 0xc028_aa03);
};

/// What the handler thread records per fault.
#[derive(Default)]
struct FloorStamps {
    seq: AtomicU64,
    read_end: AtomicU64,
    filled: AtomicU64,
}

pub(crate) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A new userfaultfd with `features` (`UFFDIO_API` done), for the minimal
/// handlers of this crate.
pub(crate) fn userfaultfd(features: u64) -> Result<std::os::fd::OwnedFd> {
    // SAFETY: plain system call; the descriptor is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) } as i32;
    if fd < 0 {
        return Err(format!("userfaultfd: {} (root needed)", errno()).into());
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut api = [0xAAu64, features, 0];
    // SAFETY: UFFDIO_API reads and writes a 24-byte struct.
    if unsafe { libc::ioctl(fd, UFFDIO_API, api.as_mut_ptr()) } != 0 {
        return Err(format!("UFFDIO_API (features {features:#x}): {}", errno()).into());
    }
    Ok(owned)
}

/// Registers `addr..addr + len`, memory of the caller's own, for missing
/// faults (`UFFDIO_REGISTER_MODE_MISSING`).
pub(crate) fn register_missing(uffd: i32, addr: usize, len: usize) -> Result<()> {
    let mut reg = [addr as u64, len as u64, 1u64, 0];
    // SAFETY: UFFDIO_REGISTER reads and writes a 32-byte struct; the caller
    // owns the range.
    if unsafe { libc::ioctl(uffd, UFFDIO_REGISTER, reg.as_mut_ptr()) } != 0 {
        return Err(format!("UFFDIO_REGISTER: {}", errno()).into());
    }
    Ok(())
}

fn floor_row(faults: usize, pread_from: Option<(&File, usize)>, name: &str) -> Result<PathRow> {
    let owned = userfaultfd(0)?;
    let uffd = owned.as_raw_fd();
    let pages = faults + WARMUP + 1;
    let len = pages * STRIDE;
    let a = Anon::new(len)?;
    register_missing(uffd, a.ptr as usize, len)?;
    let stamps = Arc::new(FloorStamps::default());
    let file = pread_from.map(|(f, len)| (f.as_raw_fd(), len as i64));
    let handler = {
        let stamps = stamps.clone();
        std::thread::spawn(move || floor_handler(uffd, file, pages as u64, &stamps))
    };
    let mut cycles = Vec::with_capacity(faults);
    let mut sums = [0f64; 3];
    for i in 0..pages {
        let t0 = rdtsc();
        // SAFETY: an aligned word within the live mapping.
        let v = unsafe { word(a.ptr, i * STRIDE) };
        let t1 = rdtsc();
        std::hint::black_box(v);
        while stamps.seq.load(Ordering::Acquire) <= i as u64 {
            std::hint::spin_loop();
        }
        if !(WARMUP..pages - 1).contains(&i) {
            continue;
        }
        cycles.push((t1 - t0) as f64);
        // Not `copied`: UFFDIO_COPY wakes the thread, which may run (and
        // stamp t1) before the handler is back from the ioctl.
        let s = [
            t0,
            stamps.read_end.load(Ordering::Relaxed),
            stamps.filled.load(Ordering::Relaxed),
            t1,
        ];
        for k in 0..3 {
            sums[k] += s[k + 1] as f64 - s[k] as f64;
        }
    }
    handler
        .join()
        .map_err(|_| "floor handler panicked")?
        .map_err(|e| format!("floor handler: {e}"))?;
    drop(owned);
    let n = faults as f64;
    let names = [
        "trap + delivery + event read",
        if pread_from.is_some() {
            "store read (pread)"
        } else {
            "(no store read)"
        },
        "install (UFFDIO_COPY, wakes the thread) until the thread resumes",
    ];
    Ok(PathRow {
        name: name.into(),
        cycles: sorted(cycles),
        phases: names.iter().zip(sums).map(|(&k, s)| (k, s / n)).collect(),
    })
}

/// One thread, blocking `read(2)` of one event, one `UFFDIO_COPY`.
/// Returns after serving `faults` faults.
fn floor_handler(
    uffd: i32,
    file: Option<(i32, i64)>,
    faults: u64,
    stamps: &FloorStamps,
) -> std::io::Result<()> {
    #[repr(C, align(4096))]
    struct Page([u8; PAGE]);
    let mut src = Box::new(Page([7; PAGE]));
    let mut msg = [0u8; 32];
    let mut at = 0i64;
    loop {
        // SAFETY: reads at most 32 bytes into `msg`.
        let n = unsafe { libc::read(uffd, msg.as_mut_ptr().cast(), 32) };
        if n != 32 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        stamps.read_end.store(rdtsc(), Ordering::Relaxed);
        if msg[0] != EVENT_PAGEFAULT {
            continue;
        }
        let addr = u64::from_ne_bytes(msg[16..24].try_into().expect("8 bytes"));
        if let Some((fd, len)) = file {
            // SAFETY: reads at most PAGE bytes into our page.
            let r = unsafe { libc::pread(fd, src.0.as_mut_ptr().cast(), PAGE, at) };
            if r < 0 {
                return Err(errno());
            }
            at = (at + STRIDE as i64) % len;
        }
        stamps.filled.store(rdtsc(), Ordering::Relaxed);
        let mut c = UffdioCopy {
            dst: addr & !(PAGE as u64 - 1),
            src: src.0.as_ptr() as u64,
            len: PAGE as u64,
            mode: 0,
            copy: 0,
        };
        // SAFETY: copies one page from our buffer into the registered range.
        if unsafe { libc::ioctl(uffd, UFFDIO_COPY, &mut c) } != 0 {
            let e = errno();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        if stamps.seq.fetch_add(1, Ordering::Release) + 1 == faults {
            return Ok(());
        }
    }
}

/// umio's median 4 KiB miss over the floor's, like for like: umio with
/// its defaults (which `pread` the page) over the floor that `pread`s it
/// too, and umio over the mapped file (no store read) over the bare floor.
pub fn ratio_to_floor(fp: &FaultPath) -> (f64, f64) {
    (
        fp.umio.median() / fp.floor_pread.median(),
        fp.umio_mapped.median() / fp.floor.median(),
    )
}

/// The run as Markdown tables: every row beside the floor and the
/// published ring-0 figures, then umio's and the floor's phases.
pub fn markdown(fp: &FaultPath) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let floor = fp.floor.median();
    let _ = writeln!(
        s,
        "Time stamp counter: {:.3} GHz (calibrated against CLOCK_MONOTONIC). \
         {} faults per row, one 4 KiB page touched per 64 KiB, one thread; \
         files on /dev/shm (tmpfs) unless stated.\n",
        fp.tsc_hz / 1e9,
        fp.faults
    );
    let _ = writeln!(
        s,
        "| fault path | median cycles | median us | mean cycles | p90 cycles | x floor (median) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for r in fp.rows() {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} |",
            r.name,
            r.median(),
            fp.us(r.median()),
            r.mean(),
            quantile(&r.cycles, 0.9),
            r.median() / floor
        );
    }
    for (name, c) in PUBLISHED {
        let _ = writeln!(
            s,
            "| {name} | {c:.0} | {:.2} (2.4 GHz) | | | {:.2} |",
            c / 2.4e3,
            c / floor
        );
    }
    let _ = writeln!(
        s,
        "| Hardware demand paging (published, ISCA'20): no exception, the MMU fetches the page | - | - | | | - |"
    );
    let _ = writeln!(
        s,
        "\nThe published figures were taken on another machine (bare metal, Xeon E5-2630 v3); \
         compare them by order of magnitude only. Hardware demand paging cuts a page miss's \
         latency by 37% and removes the OS's share (76% of a 10 us device's time) from the \
         critical path: it has no trap to count.\n"
    );
    for r in [
        &fp.umio,
        &fp.umio_mapped,
        &fp.umio_sleep,
        &fp.umio_spin,
        &fp.umio_in_thread,
        &fp.floor,
        &fp.floor_pread,
    ] {
        let _ = writeln!(s, "**{}** (mean cycles per phase)\n", r.name);
        let _ = writeln!(s, "| phase | cycles | us | share |");
        let _ = writeln!(s, "|---|---:|---:|---:|");
        let total: f64 = r.phases.iter().map(|p| p.1).sum();
        for (k, c) in &r.phases {
            let _ = writeln!(
                s,
                "| {k} | {c:.0} | {:.2} | {:.0}% |",
                fp.us(*c),
                100.0 * c / total
            );
        }
        let _ = writeln!(s, "| total | {total:.0} | {:.2} | |\n", fp.us(total));
    }
    s
}
