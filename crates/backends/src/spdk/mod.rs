//! An SPDK block device (bdev) as a store: user-space NVMe, NVMe-oF,
//! malloc, aio... (cargo feature `spdk`).
//!
//! SPDK runs on one dedicated polling thread per process, started by
//! [`SpdkEnv::start`]: it initialises SPDK's environment (DPDK, without
//! PCI unless [`SpdkEnvOptions::pci`] asks for it, with hugepages or
//! `--no-huge` memory), SPDK's thread library and subsystems, loads a JSON
//! configuration (the `subsystems` file `spdk_tgt --json` takes) that
//! creates the bdevs, and then polls: it takes batches from stores, issues
//! their reads and writes with many in flight through DMA-able staging
//! buffers, polls their completions and wakes the callers.
//!
//! SPDK's environment can be initialised once per process and never
//! again, so the environment is a process-wide singleton that lives until
//! the process exits; it hosts any number of bdevs and stores. Dropping
//! an [`SpdkStore`] releases its I/O channel and closes its bdev
//! descriptor; the bdevs themselves, the polling thread and the
//! environment stay.
//!
//! ```no_run
//! use umio_backends::{SpdkEnv, SpdkEnvOptions, SpdkStore, Store};
//! let env = SpdkEnv::start(SpdkEnvOptions::new().config_file("bdevs.json"))?;
//! let store = SpdkStore::open(env, "Malloc0", true)?;
//! let mut page = vec![0u8; 4096];
//! store.read_at(0, &mut page)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod poller;
mod sys;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::Duration;

use crate::{IoRequest, Store, StoreError, StoreOp};

use poller::{Cmd, Job, JobKind, Op, Shared};

/// Why SPDK could not be started, configured, or a bdev opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpdkError {
    /// [`SpdkEnv::start`] was called when the environment was already
    /// running: SPDK's environment is initialised once per process (use
    /// [`SpdkEnv::get`] or [`SpdkEnv::get_or_start`]).
    #[error("the SPDK environment is already started in this process")]
    AlreadyStarted,
    /// A step of starting the environment failed; SPDK cannot be started
    /// again in this process.
    #[error("starting SPDK failed at {stage}: {}", std::io::Error::from_raw_os_error(*.errno))]
    Start {
        /// The step (`spdk_env_init`, `spdk_subsystem_init`, ...).
        stage: &'static str,
        /// The positive errno SPDK returned (`EIO` when it gave none).
        errno: i32,
    },
    /// An option of [`SpdkEnvOptions`] is out of range.
    #[error("invalid SPDK option: {0}")]
    InvalidOption(&'static str),
    /// The JSON configuration file could not be read.
    #[error("reading SPDK configuration {path}: {}", std::io::Error::from_raw_os_error(*.errno))]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The errno of the read.
        errno: i32,
    },
    /// SPDK refused the JSON configuration (one of its RPCs failed, or it
    /// is not `{"subsystems": [...]}`); SPDK logs which.
    #[error("SPDK rejected the JSON configuration: {}", std::io::Error::from_raw_os_error(*.errno))]
    Config {
        /// The positive errno.
        errno: i32,
    },
    /// `spdk_bdev_open_ext` failed: `ENODEV` when no bdev has the name,
    /// `EPERM` when it is claimed by another module for writing.
    #[error("opening SPDK bdev {name:?}: {}", std::io::Error::from_raw_os_error(*.errno))]
    Open {
        /// The bdev's name.
        name: String,
        /// The positive errno.
        errno: i32,
    },
    /// The bdev name contains a NUL byte.
    #[error("bdev name {0:?} contains a NUL byte")]
    BadName(String),
    /// The polling thread exited (it only does when starting failed).
    #[error("the SPDK polling thread is gone")]
    PollerGone,
}

impl SpdkError {
    /// The errno that best describes the error, for the C ABI and
    /// `io::Error`.
    pub fn errno(&self) -> i32 {
        match self {
            SpdkError::AlreadyStarted => libc::EALREADY,
            SpdkError::Start { errno, .. }
            | SpdkError::ConfigRead { errno, .. }
            | SpdkError::Config { errno }
            | SpdkError::Open { errno, .. } => *errno,
            SpdkError::InvalidOption(_) | SpdkError::BadName(_) => libc::EINVAL,
            SpdkError::PollerGone => libc::EIO,
        }
    }
}

impl From<SpdkError> for std::io::Error {
    fn from(e: SpdkError) -> Self {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno()).kind(), e)
    }
}

/// How to start the process's SPDK environment ([`SpdkEnv::start`]).
#[derive(Clone, Debug)]
pub struct SpdkEnvOptions {
    pub(crate) no_huge: Option<bool>,
    pub(crate) pci: bool,
    pub(crate) mem_mib: u32,
    pub(crate) core: Option<u32>,
    pub(crate) config: Option<Config>,
    pub(crate) slots: usize,
    pub(crate) slot_bytes: usize,
    pub(crate) park_after: Option<Duration>,
}

#[derive(Clone, Debug)]
pub(crate) enum Config {
    File(PathBuf),
    Json(String),
}

impl Default for SpdkEnvOptions {
    fn default() -> Self {
        SpdkEnvOptions {
            no_huge: None,
            pci: false,
            mem_mib: 256,
            core: None,
            config: None,
            slots: 64,
            slot_bytes: 128 << 10,
            park_after: None,
        }
    }
}

impl SpdkEnvOptions {
    /// Hugepages if enough are free, 256 MiB of memory, SPDK's default core
    /// (0), no configuration, 64 staging buffers of 128 KiB, and a polling
    /// thread that never sleeps.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether DPDK runs on ordinary memory (`--no-huge`) instead of
    /// hugepages. The default uses hugepages when `/proc/meminfo` shows
    /// enough free ones for [`mem_mib`](Self::mem_mib). Ordinary memory
    /// serves malloc, aio and NVMe-oF/TCP bdevs; a local NVMe device
    /// through VFIO needs hugepages.
    pub fn no_huge(mut self, no_huge: bool) -> Self {
        self.no_huge = Some(no_huge);
        self
    }

    /// Whether DPDK probes PCI devices (default no: malloc, aio and
    /// NVMe-oF bdevs need none). A local NVMe device needs it, with
    /// hugepages and the device bound to `vfio-pci` or `uio`; untested
    /// here, for want of a device.
    pub fn pci(mut self, pci: bool) -> Self {
        self.pci = pci;
        self
    }

    /// Memory DPDK reserves, in MiB (default 256): malloc bdevs and the
    /// staging buffers come from it.
    pub fn mem_mib(mut self, mib: u32) -> Self {
        self.mem_mib = mib;
        self
    }

    /// The CPU the polling thread is pinned to (SPDK's core mask; default
    /// core 0).
    pub fn core(mut self, core: u32) -> Self {
        self.core = Some(core);
        self
    }

    /// A JSON configuration file to load at start: SPDK's
    /// `{"subsystems": [{"subsystem": "bdev", "config": [...]}]}` format,
    /// as `spdk_tgt --json` takes. As there, methods SPDK accepts only at
    /// startup (`bdev_set_options`, `accel_assign_opc`...) run before the
    /// subsystems start, the others (bdev creation) after.
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Self {
        self.config = Some(Config::File(path.as_ref().to_path_buf()));
        self
    }

    /// The same configuration, given as text.
    pub fn config_json(mut self, json: impl Into<String>) -> Self {
        self.config = Some(Config::Json(json.into()));
        self
    }

    /// DMA-able staging buffers shared by every store of the process: how
    /// many (the most requests in flight at once; default 64) and their
    /// size (default 128 KiB; longer requests are split).
    pub fn staging(mut self, slots: usize, slot_bytes: usize) -> Self {
        self.slots = slots;
        self.slot_bytes = slot_bytes;
        self
    }

    /// How long the polling thread polls without work before it sleeps
    /// (waking when a request arrives, or after a millisecond to run
    /// SPDK's timers). The default, `None`, polls forever, as SPDK's own
    /// applications do: the lowest latency, for a whole core. Sleeping
    /// saves the core on a shared machine but puts a wake-up of the
    /// polling thread in front of the first request after a pause: on a
    /// virtual machine, where waking an idle vCPU takes tens of
    /// microseconds, `examples/spdk_fault.rs` measured cold faults 5 times
    /// slower with sleeps after 200 us.
    pub fn park_after(mut self, after: Option<Duration>) -> Self {
        self.park_after = after;
        self
    }

    fn check(&self) -> Result<(), SpdkError> {
        if self.slots == 0 || self.slots > 4096 {
            return Err(SpdkError::InvalidOption("staging slots must be 1 to 4096"));
        }
        if self.slot_bytes < 4096
            || !self.slot_bytes.is_power_of_two()
            || self.slot_bytes > 64 << 20
        {
            return Err(SpdkError::InvalidOption(
                "staging buffer size must be a power of two from 4 KiB to 64 MiB",
            ));
        }
        if self.mem_mib < 16 {
            return Err(SpdkError::InvalidOption("mem_mib must be at least 16"));
        }
        if self.core.is_some_and(|c| c >= 64) {
            return Err(SpdkError::InvalidOption("core must be below 64"));
        }
        Ok(())
    }
}

/// The process's SPDK environment and its polling thread.
///
/// Started once ([`start`](Self::start)) and kept until the process exits:
/// SPDK cannot initialise its environment twice in one process.
#[derive(Debug)]
pub struct SpdkEnv {
    shared: Arc<Shared>,
}

static ENV: OnceLock<Result<SpdkEnv, SpdkError>> = OnceLock::new();
static STARTING: Mutex<()> = Mutex::new(());

impl SpdkEnv {
    /// Starts SPDK on a new polling thread and loads the configuration, if
    /// any. Fails with [`SpdkError::AlreadyStarted`] if it is running, and
    /// with the first failure again if starting failed before.
    pub fn start(options: SpdkEnvOptions) -> Result<&'static SpdkEnv, SpdkError> {
        Self::start_inner(options, false)
    }

    /// The running environment, or a new one started with `options`
    /// (ignored when it is running).
    pub fn get_or_start(options: SpdkEnvOptions) -> Result<&'static SpdkEnv, SpdkError> {
        Self::start_inner(options, true)
    }

    /// The running environment, if started.
    pub fn get() -> Option<&'static SpdkEnv> {
        ENV.get().and_then(|r| r.as_ref().ok())
    }

    fn start_inner(options: SpdkEnvOptions, reuse: bool) -> Result<&'static SpdkEnv, SpdkError> {
        options.check()?;
        let _g = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = ENV.get() {
            return match r {
                Ok(env) if reuse => Ok(env),
                Ok(_) => Err(SpdkError::AlreadyStarted),
                Err(e) => Err(e.clone()),
            };
        }
        let config = match &options.config {
            None => None,
            Some(Config::Json(s)) => Some(s.clone().into_bytes()),
            Some(Config::File(p)) => Some(std::fs::read(p).map_err(|e| SpdkError::ConfigRead {
                path: p.clone(),
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })?),
        };
        let r = poller::spawn(&options, config).map(|shared| SpdkEnv { shared });
        let r = ENV.get_or_init(|| r);
        r.as_ref().map_err(Clone::clone)
    }

    /// Loads a further JSON configuration (see
    /// [`SpdkEnvOptions::config_file`]), creating its bdevs. Methods SPDK
    /// accepts only at startup are skipped: the subsystems run already.
    pub fn load_config_file(&self, path: impl AsRef<Path>) -> Result<(), SpdkError> {
        let path = path.as_ref();
        let json = std::fs::read(path).map_err(|e| SpdkError::ConfigRead {
            path: path.to_path_buf(),
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        })?;
        self.load(json)
    }

    /// Loads a further JSON configuration given as text.
    pub fn load_config_json(&self, json: &str) -> Result<(), SpdkError> {
        self.load(json.as_bytes().to_vec())
    }

    fn load(&self, json: Vec<u8>) -> Result<(), SpdkError> {
        let (tx, rx) = mpsc::channel();
        self.shared.send(Cmd::LoadConfig { json, reply: tx });
        rx.recv().map_err(|_| SpdkError::PollerGone)?
    }

    /// How many requests can be in flight at once across all stores (the
    /// number of staging buffers).
    pub fn queue_depth(&self) -> usize {
        self.shared.slots
    }

    /// Changes how long the polling thread polls without work before it
    /// sleeps ([`SpdkEnvOptions::park_after`]).
    pub fn set_park_after(&self, after: Option<Duration>) {
        self.shared.park_after_ns.store(park_ns(after), Relaxed);
        self.shared.wake();
    }

    /// Whether DPDK runs on hugepages (or on ordinary memory, `--no-huge`).
    pub fn hugepages(&self) -> bool {
        self.shared.hugepages
    }

    /// The most requests that were in flight at once so far.
    pub fn max_in_flight(&self) -> u64 {
        self.shared.max_in_flight.load(Relaxed)
    }
}

/// An SPDK bdev as a [`Store`].
///
/// Its length is the bdev's (block count times block size) and fixed:
/// [`set_len`](Store::set_len) fails with `EOPNOTSUPP` (unless asked for
/// that length) and writes past the end with `ENOSPC`. Reads may have any
/// offset and length (the polling thread reads whole blocks into a staging
/// buffer); writes must be aligned to the block size,
/// [`alignment`](Store::alignment), or fail with `EINVAL`. `sync` is
/// `spdk_bdev_flush`, or nothing for a bdev that has no flush (it has no
/// volatile cache to flush).
///
/// Every operation goes through the process's polling thread; a thread
/// calling [`submit`](Store::submit) waits for all of its batch.
pub struct SpdkStore {
    shared: Arc<Shared>,
    name: String,
    desc: usize,
    ch: usize,
    block_size: u64,
    len: u64,
    writable: bool,
    flush: bool,
    removed: Arc<AtomicBool>,
    event_ctx: usize,
    counters: Counters,
}

/// What an [`SpdkStore`] has done, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpdkStats {
    /// Batches sent to the polling thread (`read_at` and `write_at` are
    /// batches of one).
    pub batches: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Flushes sent to the bdev.
    pub flushes: u64,
    /// Largest batch sent.
    pub largest_batch: u64,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    largest_batch: AtomicU64,
}

impl std::fmt::Debug for SpdkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpdkStore")
            .field("bdev", &self.name)
            .field("block_size", &self.block_size)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

/// What the polling thread reports about an opened bdev.
pub(crate) struct Opened {
    pub desc: usize,
    pub ch: usize,
    pub block_size: u64,
    pub blocks: u64,
    pub flush: bool,
    pub event_ctx: usize,
}

impl SpdkStore {
    /// Opens the bdev called `name` (for writing too if `writable`) on the
    /// environment `env`.
    pub fn open(env: &SpdkEnv, name: &str, writable: bool) -> Result<SpdkStore, SpdkError> {
        let cname = CString::new(name).map_err(|_| SpdkError::BadName(name.into()))?;
        let removed = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        env.shared.send(Cmd::Open {
            name: cname,
            writable,
            removed: removed.clone(),
            reply: tx,
        });
        let o = rx.recv().map_err(|_| SpdkError::PollerGone)??;
        Ok(SpdkStore {
            shared: env.shared.clone(),
            name: format!("spdk:{name}"),
            desc: o.desc,
            ch: o.ch,
            block_size: o.block_size,
            len: o.blocks * o.block_size,
            writable,
            flush: o.flush,
            removed,
            event_ctx: o.event_ctx,
            counters: Counters::default(),
        })
    }

    /// The bdev's block size in bytes.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Whether `sync` reaches the bdev (`spdk_bdev_flush`), or does
    /// nothing because the bdev has no flush.
    pub fn flushes(&self) -> bool {
        self.flush
    }

    /// Counts of what this store has done.
    pub fn stats(&self) -> SpdkStats {
        let c = &self.counters;
        SpdkStats {
            batches: c.batches.load(Relaxed),
            reads: c.reads.load(Relaxed),
            writes: c.writes.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            largest_batch: c.largest_batch.load(Relaxed),
        }
    }

    /// The operation for a read or write of `len` bytes at `offset`, or
    /// its result when it needs no I/O or is refused.
    fn plan(
        &self,
        offset: u64,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<Op, Result<usize, StoreError>> {
        let op = if write { StoreOp::Write } else { StoreOp::Read };
        if self.removed.load(Acquire) {
            return Err(Err(StoreError::new(op, offset, libc::ENODEV)));
        }
        if write && !self.writable {
            return Err(Err(StoreError::new(op, offset, libc::EBADF)));
        }
        if len == 0 {
            return Err(Ok(0));
        }
        let bs = self.block_size;
        let end = offset.checked_add(len as u64);
        let len = if write {
            if !offset.is_multiple_of(bs) || !(len as u64).is_multiple_of(bs) {
                return Err(Err(StoreError::new(op, offset, libc::EINVAL)));
            }
            match end {
                Some(e) if e <= self.len => len,
                _ => return Err(Err(StoreError::new(op, offset.max(self.len), libc::ENOSPC))),
            }
        } else {
            if offset >= self.len {
                return Err(Ok(0));
            }
            (self.len - offset).min(len as u64) as usize
        };
        let start = offset / bs * bs;
        let stop = (offset + len as u64).div_ceil(bs) * bs;
        Ok(Op::new(offset, buf, len, write, start, stop))
    }

    /// Sends `ops` to the polling thread and waits for them all.
    fn run(&self, kind: JobKind, ops: &mut [Op]) {
        let c = &self.counters;
        c.batches.fetch_add(1, Relaxed);
        c.largest_batch.fetch_max(ops.len() as u64, Relaxed);
        let job = Job::new(self.desc, self.ch, kind, ops);
        // SAFETY: `job` and `ops` outlive the polling thread's use of them:
        // `wait` returns only once the polling thread has set `done`, after
        // which it touches neither.
        unsafe { self.shared.run(&job) };
    }

    fn one(&self, offset: u64, buf: *mut u8, len: usize, write: bool) -> Result<usize, StoreError> {
        let mut ops = match self.plan(offset, buf, len, write) {
            Ok(op) => [op],
            Err(r) => return r,
        };
        if write {
            self.counters.writes.fetch_add(1, Relaxed);
        } else {
            self.counters.reads.fetch_add(1, Relaxed);
        }
        self.run(JobKind::Rw, &mut ops);
        ops[0].result()
    }
}

impl Store for SpdkStore {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.len)
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        if len == self.len && self.writable {
            Ok(())
        } else {
            Err(StoreError::new(StoreOp::Len, len, libc::EOPNOTSUPP))
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        self.one(offset, buf.as_mut_ptr(), buf.len(), false)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        // The polling thread only reads from a write's buffer.
        self.one(offset, buf.as_ptr().cast_mut(), buf.len(), true)
            .map(|_| ())
    }

    fn sync(&self) -> Result<(), StoreError> {
        if !self.writable || !self.flush {
            return Ok(());
        }
        if self.removed.load(Acquire) {
            return Err(StoreError::new(StoreOp::Sync, 0, libc::ENODEV));
        }
        self.counters.flushes.fetch_add(1, Relaxed);
        let mut ops = [Op::new(
            0,
            std::ptr::null_mut(),
            self.len as usize,
            false,
            0,
            self.len,
        )];
        self.run(JobKind::Flush, &mut ops);
        ops[0].result().map(|_| ())
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn alignment(&self) -> usize {
        self.block_size as usize
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        let mut ops = Vec::with_capacity(batch.len());
        let mut which = Vec::with_capacity(batch.len());
        for (i, req) in batch.iter_mut().enumerate() {
            if req.result().is_some() {
                continue;
            }
            let (offset, len, write) = (req.offset(), req.len(), req.is_write());
            let buf = match req.read_buf() {
                Some(b) => b.as_mut_ptr(),
                None => req
                    .write_buf()
                    .map_or(std::ptr::null(), <[u8]>::as_ptr)
                    .cast_mut(),
            };
            match self.plan(offset, buf, len, write) {
                Ok(op) => {
                    ops.push(op);
                    which.push(i);
                }
                Err(r) => req.complete(r),
            }
        }
        if ops.is_empty() {
            return;
        }
        let writes = ops.iter().filter(|o| o.write).count() as u64;
        self.counters.writes.fetch_add(writes, Relaxed);
        self.counters
            .reads
            .fetch_add(ops.len() as u64 - writes, Relaxed);
        self.run(JobKind::Rw, &mut ops);
        for (op, i) in ops.iter().zip(which) {
            batch[i].complete(op.result());
        }
    }

    fn queue_depth(&self) -> usize {
        self.shared.slots
    }
}

impl Drop for SpdkStore {
    fn drop(&mut self) {
        let (tx, rx) = mpsc::channel();
        self.shared.send(Cmd::Close {
            desc: self.desc,
            ch: self.ch,
            event_ctx: self.event_ctx,
            reply: tx,
        });
        // Wait, so that the descriptor is closed when drop returns (a bdev
        // is deleted only once no descriptor holds it). The reply fails
        // only if the polling thread is gone, and with it the descriptor.
        let _ = rx.recv();
    }
}

fn park_ns(after: Option<Duration>) -> u64 {
    after.map_or(u64::MAX, |d| {
        d.as_nanos().min(u128::from(u64::MAX - 1)) as u64
    })
}

/// Whether `mib` MiB of hugepages are free.
fn hugepages_free(mib: u32) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/meminfo") else {
        return false;
    };
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let free_kib = field("HugePages_Free:") * field("Hugepagesize:");
    free_kib >= u64::from(mib) * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_out_of_range_are_refused() {
        let bad = [
            SpdkEnvOptions::new().staging(0, 4096),
            SpdkEnvOptions::new().staging(8, 1000),
            SpdkEnvOptions::new().staging(8, 3 << 12),
            SpdkEnvOptions::new().mem_mib(8),
            SpdkEnvOptions::new().core(64),
        ];
        for o in bad {
            assert!(
                matches!(o.check(), Err(SpdkError::InvalidOption(_))),
                "{o:?}"
            );
        }
        SpdkEnvOptions::new().check().unwrap();
        SpdkEnvOptions::new()
            .staging(1, 4096)
            .core(63)
            .check()
            .unwrap();
    }

    #[test]
    fn errors_keep_their_errno() {
        let e = SpdkError::Open {
            name: "Nvme0n1".into(),
            errno: libc::ENODEV,
        };
        assert_eq!(e.errno(), libc::ENODEV);
        assert_eq!(
            std::io::Error::from(e).kind(),
            std::io::Error::from_raw_os_error(libc::ENODEV).kind()
        );
        assert_eq!(SpdkError::AlreadyStarted.errno(), libc::EALREADY);
    }

    #[test]
    fn park_after_saturates() {
        assert_eq!(park_ns(None), u64::MAX);
        assert_eq!(park_ns(Some(Duration::from_micros(3))), 3000);
        assert_eq!(park_ns(Some(Duration::MAX)), u64::MAX - 1);
    }
}
