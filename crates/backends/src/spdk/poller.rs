//! The polling thread: the one SPDK thread of the process. It owns the
//! staging buffers, issues every bdev read, write and flush, polls their
//! completions, and wakes the callers.
//!
//! Callers hand it [`Cmd`]s through a mutex-guarded queue and a flag it
//! checks on every turn of its loop; an I/O command points at a [`Job`] on
//! the caller's stack, which the caller keeps alive until the job's `done`
//! flag is set.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CString, c_int, c_void};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::sys;
use super::{Opened, SpdkEnvOptions, SpdkError, hugepages_free};
use crate::sys::thread;
use crate::{StoreError, StoreOp};

/// What callers ask of the polling thread.
pub(crate) enum Cmd {
    Io(JobPtr),
    LoadConfig {
        json: Vec<u8>,
        reply: mpsc::Sender<Result<(), SpdkError>>,
    },
    Open {
        name: CString,
        writable: bool,
        removed: Arc<AtomicBool>,
        reply: mpsc::Sender<Result<Opened, SpdkError>>,
    },
    Close {
        desc: usize,
        ch: usize,
        event_ctx: usize,
        reply: mpsc::Sender<()>,
    },
}

/// A job on a caller's stack.
pub(crate) struct JobPtr(*const Job);

// SAFETY: the pointer is only dereferenced by the polling thread while the
// caller waits for the job (see `Shared::run`).
unsafe impl Send for JobPtr {}

/// The state shared by callers and the polling thread.
pub(crate) struct Shared {
    queue: Mutex<Vec<Cmd>>,
    pending: AtomicBool,
    /// Set at process exit: the polling thread stops touching SPDK.
    stop: AtomicBool,
    /// Set by the polling thread once it has stopped.
    stopped: AtomicBool,
    poller: Thread,
    pub slots: usize,
    /// Whether DPDK runs on hugepages (not `--no-huge`).
    pub hugepages: bool,
    pub max_in_flight: AtomicU64,
    /// The CPU the polling thread is pinned to (-1 until known).
    poller_cpu: AtomicI32,
    /// Nanoseconds without work before the polling thread sleeps
    /// (`u64::MAX`: never).
    pub park_after_ns: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("slots", &self.slots)
            .finish()
    }
}

impl Shared {
    pub fn send(&self, cmd: Cmd) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cmd);
        self.pending.store(true, Release);
        self.poller.unpark();
    }

    /// Wakes the polling thread if it sleeps.
    pub fn wake(&self) {
        self.poller.unpark();
    }

    /// Hands `job` to the polling thread and waits until it is done.
    ///
    /// # Safety
    ///
    /// The buffers of `job`'s operations must be valid for the operation
    /// (writable for reads, readable for writes) until this returns.
    pub unsafe fn run(&self, job: &Job) {
        // The device may answer within a microsecond: spin briefly before
        // sleeping. On the polling thread's CPU spinning would delay the
        // very answer it waits for: there the caller yields the CPU to the
        // polling thread, which yields it back once the job is done. The
        // bound is time, not turns: a `pause` costs from 10 to 140 cycles
        // depending on the CPU.
        let poller_cpu = self.poller_cpu.load(Relaxed);
        let on_poller_cpu = || thread::current_cpu() == poller_cpu;
        let same_cpu = on_poller_cpu();
        job.same_cpu.set(same_cpu);
        self.send(Cmd::Io(JobPtr(job)));
        if same_cpu {
            let start = Instant::now();
            while start.elapsed() < YIELDING && on_poller_cpu() {
                std::thread::yield_now();
                if job.done.load(Acquire) {
                    return;
                }
            }
        } else {
            let start = Instant::now();
            while start.elapsed() < SPIN {
                if job.done.load(Acquire) {
                    return;
                }
                std::hint::spin_loop();
            }
        }
        while !job.done.load(Acquire) {
            std::thread::park();
        }
    }
}

/// How long a caller spins for its job before it sleeps: a malloc bdev
/// answers a 4 KiB read in about a microsecond.
const SPIN: Duration = Duration::from_micros(10);

/// How long a caller on the polling thread's CPU yields to it before it
/// sleeps.
const YIELDING: Duration = Duration::from_micros(100);

/// What a job does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobKind {
    Rw,
    Flush,
}

/// One batch of a store: its operations and how to wake its caller.
pub(crate) struct Job {
    desc: *mut sys::spdk_bdev_desc,
    ch: *mut sys::spdk_io_channel,
    kind: JobKind,
    ops: *mut Op,
    n_ops: usize,
    /// Operations not finished (polling thread only).
    remaining: std::cell::Cell<usize>,
    /// Next operation to issue (polling thread only).
    next: std::cell::Cell<usize>,
    done: AtomicBool,
    waiter: Thread,
    /// Whether the caller sleeps on the polling thread's CPU: the polling
    /// thread then yields that CPU once the job is done.
    same_cpu: std::cell::Cell<bool>,
}

impl Job {
    pub fn new(desc: usize, ch: usize, kind: JobKind, ops: &mut [Op]) -> Job {
        Job {
            desc: desc as *mut _,
            ch: ch as *mut _,
            kind,
            ops: ops.as_mut_ptr(),
            n_ops: ops.len(),
            remaining: ops.len().into(),
            next: 0.into(),
            done: AtomicBool::new(false),
            waiter: std::thread::current(),
            same_cpu: false.into(),
        }
    }
}

/// One read or write (or flush) of a job, over the block-aligned device
/// range `start..stop` that covers `offset..offset + len`.
pub(crate) struct Op {
    offset: u64,
    buf: *mut u8,
    len: usize,
    pub write: bool,
    start: u64,
    stop: u64,
    /// Device bytes from `start` issued so far.
    issued: u64,
    in_flight: u32,
    error: Option<(u64, i32)>,
}

impl Op {
    pub fn new(offset: u64, buf: *mut u8, len: usize, write: bool, start: u64, stop: u64) -> Op {
        Op {
            offset,
            buf,
            len,
            write,
            start,
            stop,
            issued: 0,
            in_flight: 0,
            error: None,
        }
    }

    /// The outcome, once the job is done.
    pub fn result(&self) -> Result<usize, StoreError> {
        match self.error {
            None => Ok(self.len),
            Some((offset, errno)) => {
                let op = if self.write {
                    StoreOp::Write
                } else {
                    StoreOp::Read
                };
                Err(StoreError::new(op, offset, errno))
            }
        }
    }

    fn fail(&mut self, kind: JobKind, at: u64, errno: i32) {
        if self.error.is_none() {
            let at = if kind == JobKind::Flush {
                0
            } else {
                at.max(self.offset)
            };
            self.error = Some((at, errno));
        }
    }

    fn all_issued(&self) -> bool {
        self.start + self.issued >= self.stop
    }
}

/// A staging buffer and the chunk of an operation using it.
struct Slot {
    buf: *mut u8,
    chunk: Option<Chunk>,
}

#[derive(Clone, Copy)]
struct Chunk {
    job: *const Job,
    op: usize,
    /// Device range of the chunk.
    at: u64,
    len: u64,
}

thread_local! {
    /// Completions reported by SPDK during a poll: (slot, success).
    static DONE: RefCell<Vec<(usize, bool)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn io_done(io: *mut sys::spdk_bdev_io, success: bool, arg: *mut c_void) {
    // SAFETY: SPDK hands back the I/O it completed, once.
    unsafe { sys::spdk_bdev_free_io(io) };
    DONE.with(|d| d.borrow_mut().push((arg as usize, success)));
}

unsafe extern "C" fn rc_done(rc: c_int, arg: *mut c_void) {
    // SAFETY: `arg` is the `RcCell` the caller of the SPDK function passed,
    // alive until it has seen the result (`wait_rc`).
    let cell = unsafe { &*(arg as *const RcCell) };
    cell.set(Some(rc));
}

type RcCell = std::cell::Cell<Option<c_int>>;

unsafe extern "C" fn bdev_event(kind: c_int, _bdev: *mut sys::spdk_bdev, ctx: *mut c_void) {
    if kind == sys::SPDK_BDEV_EVENT_REMOVE {
        // SAFETY: `ctx` is the `Arc<AtomicBool>` leaked at open and freed
        // only after the descriptor is closed, so SPDK no longer calls here.
        let removed = unsafe { &*(ctx as *const AtomicBool) };
        removed.store(true, Release);
    }
}

fn errno_of(rc: c_int) -> i32 {
    if rc < 0 {
        -rc
    } else if rc > 0 {
        rc
    } else {
        libc::EIO
    }
}

/// The running environment's shared state, for `stop_at_exit`.
static SHARED: std::sync::OnceLock<Arc<Shared>> = std::sync::OnceLock::new();

/// Runs at `exit`, before DPDK's and SPDK's destructors free the memory
/// the polling thread works on: stops the polling thread (waiting at most
/// a second for it). Requests still in flight are abandoned with the
/// process.
extern "C" fn stop_at_exit() {
    let Some(shared) = SHARED.get() else {
        return;
    };
    shared.stop.store(true, Release);
    shared.poller.unpark();
    let deadline = Instant::now() + Duration::from_secs(1);
    while !shared.stopped.load(Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Starts the polling thread and waits until SPDK is up (or failed).
pub(crate) fn spawn(
    options: &SpdkEnvOptions,
    config: Option<Vec<u8>>,
) -> Result<Arc<Shared>, SpdkError> {
    let no_huge = options
        .no_huge
        .unwrap_or_else(|| !hugepages_free(options.mem_mib));
    let opts = options.clone();
    let (tx, rx) = mpsc::channel::<Result<Arc<Shared>, SpdkError>>();
    std::thread::Builder::new()
        .name("umio-spdk".into())
        .spawn(move || {
            let shared = Arc::new(Shared {
                queue: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                stopped: AtomicBool::new(false),
                poller: std::thread::current(),
                slots: opts.slots,
                hugepages: !no_huge,
                max_in_flight: AtomicU64::new(0),
                park_after_ns: AtomicU64::new(super::park_ns(opts.park_after)),
                poller_cpu: AtomicI32::new(-1),
            });
            match Poller::start(&opts, no_huge, config, shared.clone()) {
                Ok(mut p) => {
                    let _ = SHARED.set(shared.clone());
                    thread::at_exit(stop_at_exit);
                    let _ = tx.send(Ok(shared));
                    p.run();
                    // Stopped for the process's exit: SPDK and DPDK tear
                    // down their memory from here on; never touch it.
                    p.shared.stopped.store(true, Release);
                    loop {
                        std::thread::park();
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })
        .map_err(|e| SpdkError::Start {
            stage: "spawning the polling thread",
            errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
        })?;
    rx.recv().map_err(|_| SpdkError::PollerGone)?
}

struct Poller {
    shared: Arc<Shared>,
    thread: *mut sys::spdk_thread,
    slots: Vec<Slot>,
    slot_bytes: u64,
    free: Vec<usize>,
    in_flight: u64,
    /// Jobs with operations not yet issued, oldest first.
    active: VecDeque<*const Job>,
}

impl Poller {
    fn start(
        o: &SpdkEnvOptions,
        no_huge: bool,
        config: Option<Vec<u8>>,
        shared: Arc<Shared>,
    ) -> Result<Poller, SpdkError> {
        let fail = |stage, rc| SpdkError::Start {
            stage,
            errno: errno_of(rc),
        };
        let name = c"umio";
        let mask = CString::new(format!("{:#x}", 1u64 << o.core.unwrap_or(0)))
            .map_err(|_| SpdkError::InvalidOption("core"))?;
        // SAFETY: an all-zero spdk_env_opts is valid (pointers null);
        // spdk_env_opts_init fills in the defaults up to opts_size.
        let mut env: sys::spdk_env_opts = unsafe { std::mem::zeroed() };
        env.opts_size = std::mem::size_of::<sys::spdk_env_opts>();
        // SAFETY: `env` is a valid, writable spdk_env_opts of opts_size.
        unsafe { sys::spdk_env_opts_init(&mut env) };
        env.name = name.as_ptr();
        env.core_mask = mask.as_ptr();
        env.no_pci = !o.pci;
        env.no_huge = no_huge;
        env.mem_size = o.mem_mib as c_int;
        // SAFETY: `env` and the strings it points to outlive the call;
        // SPDK copies what it keeps.
        let rc = unsafe { sys::spdk_env_init(&env) };
        if rc != 0 {
            return Err(fail("spdk_env_init", rc));
        }
        // DPDK has pinned this thread to its main core.
        shared.poller_cpu.store(thread::current_cpu(), Relaxed);
        // SAFETY: plain setters and constructors of SPDK's thread library,
        // called once, on this thread, after the environment is up.
        let thread = unsafe {
            sys::spdk_log_set_print_level(sys::SPDK_LOG_WARN);
            let rc = sys::spdk_thread_lib_init(std::ptr::null(), 0);
            if rc != 0 {
                return Err(fail("spdk_thread_lib_init", rc));
            }
            let t = sys::spdk_thread_create(c"umio_spdk".as_ptr(), std::ptr::null());
            if t.is_null() {
                return Err(fail("spdk_thread_create", -libc::ENOMEM));
            }
            sys::spdk_set_thread(t);
            t
        };
        let mut p = Poller {
            shared,
            thread,
            slots: Vec::with_capacity(o.slots),
            slot_bytes: o.slot_bytes as u64,
            free: Vec::with_capacity(o.slots),
            in_flight: 0,
            active: VecDeque::new(),
        };
        // As SPDK's applications do: the configuration's startup-only
        // methods (bdev_set_options...) run before the subsystems start,
        // the others once they run.
        let config_err = |e| match e {
            SpdkError::Config { errno } => SpdkError::Start {
                stage: "loading the JSON configuration",
                errno,
            },
            e => e,
        };
        if let Some(json) = &config {
            p.load_config(json.clone()).map_err(config_err)?;
        }
        let done = RcCell::new(None);
        // SAFETY: `done` outlives the call: wait_rc polls until it is set.
        unsafe { sys::spdk_subsystem_init(rc_done, (&raw const done).cast_mut().cast()) };
        let rc = p.wait_rc(&done);
        if rc != 0 {
            return Err(fail("spdk_subsystem_init", rc));
        }
        // SAFETY: a plain setter; RUNTIME methods (bdev creation) are
        // refused, silently, until it is called.
        unsafe { sys::spdk_rpc_set_state(sys::SPDK_RPC_RUNTIME) };
        for i in 0..o.slots {
            // SAFETY: plain allocation from SPDK's DMA-able memory.
            let buf = unsafe { sys::spdk_dma_malloc(o.slot_bytes, 4096, std::ptr::null_mut()) };
            if buf.is_null() {
                return Err(fail("spdk_dma_malloc (staging buffers)", -libc::ENOMEM));
            }
            p.slots.push(Slot {
                buf: buf.cast(),
                chunk: None,
            });
            p.free.push(o.slots - 1 - i);
        }
        if let Some(json) = config {
            p.load_config(json).map_err(config_err)?;
        }
        Ok(p)
    }

    /// Polls SPDK until `cell` holds a result.
    fn wait_rc(&mut self, cell: &RcCell) -> c_int {
        loop {
            if let Some(rc) = cell.get() {
                return rc;
            }
            self.poll_once();
        }
    }

    fn load_config(&mut self, mut json: Vec<u8>) -> Result<(), SpdkError> {
        let done = RcCell::new(None);
        // SAFETY: SPDK copies the JSON before returning; `done` outlives
        // the call (wait_rc).
        unsafe {
            sys::spdk_subsystem_load_config(
                json.as_mut_ptr().cast(),
                json.len() as isize,
                rc_done,
                (&raw const done).cast_mut().cast(),
                true,
            )
        };
        match self.wait_rc(&done) {
            0 => Ok(()),
            rc => Err(SpdkError::Config {
                errno: errno_of(rc),
            }),
        }
    }

    fn run(&mut self) {
        let mut last_work = Instant::now();
        while !self.shared.stop.load(Acquire) {
            let got = self.take_commands();
            let busy = self.poll_once();
            if got || busy || self.in_flight > 0 || !self.active.is_empty() {
                last_work = Instant::now();
            } else if last_work.elapsed().as_nanos()
                >= u128::from(self.shared.park_after_ns.load(Relaxed))
            {
                std::thread::park_timeout(Duration::from_millis(1));
            }
        }
    }

    /// Runs the commands callers queued; whether there were any.
    fn take_commands(&mut self) -> bool {
        if !self.shared.pending.swap(false, Acquire) {
            return false;
        }
        let cmds =
            std::mem::take(&mut *self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()));
        for cmd in cmds {
            match cmd {
                Cmd::Io(JobPtr(job)) => self.active.push_back(job),
                Cmd::LoadConfig { json, reply } => {
                    let _ = reply.send(self.load_config(json));
                }
                Cmd::Open {
                    name,
                    writable,
                    removed,
                    reply,
                } => {
                    let _ = reply.send(self.open(&name, writable, removed));
                }
                Cmd::Close {
                    desc,
                    ch,
                    event_ctx,
                    reply,
                } => {
                    // SAFETY: the store that owned these is being dropped:
                    // no job of it is in flight (its calls all returned).
                    // The channel is put before its descriptor is closed,
                    // as SPDK requires; SPDK calls the event callback no
                    // more once the descriptor is closed, so its context
                    // can be freed.
                    unsafe {
                        sys::spdk_put_io_channel(ch as *mut _);
                        sys::spdk_bdev_close(desc as *mut _);
                        drop(Arc::from_raw(event_ctx as *const AtomicBool));
                    }
                    let _ = reply.send(());
                }
            }
        }
        self.issue();
        true
    }

    fn open(
        &mut self,
        name: &CString,
        writable: bool,
        removed: Arc<AtomicBool>,
    ) -> Result<Opened, SpdkError> {
        let err = |rc| SpdkError::Open {
            name: name.to_string_lossy().into_owned(),
            errno: errno_of(rc),
        };
        let ctx = Arc::into_raw(removed);
        let mut desc = std::ptr::null_mut();
        // SAFETY: `name` is a C string; `ctx` stays valid until the
        // descriptor is closed (Close) or the open fails (below).
        let rc = unsafe {
            sys::spdk_bdev_open_ext(
                name.as_ptr(),
                writable,
                bdev_event,
                ctx.cast_mut().cast(),
                &mut desc,
            )
        };
        if rc != 0 {
            // SAFETY: the open failed, SPDK keeps no reference to `ctx`.
            drop(unsafe { Arc::from_raw(ctx) });
            return Err(err(rc));
        }
        // SAFETY: `desc` is the open descriptor just returned.
        unsafe {
            let bdev = sys::spdk_bdev_desc_get_bdev(desc);
            let ch = sys::spdk_bdev_get_io_channel(desc);
            if ch.is_null() {
                sys::spdk_bdev_close(desc);
                drop(Arc::from_raw(ctx));
                return Err(err(-libc::ENOMEM));
            }
            let block_size = u64::from(sys::spdk_bdev_get_block_size(bdev));
            let align = sys::spdk_bdev_get_buf_align(bdev);
            if block_size == 0 || align > 4096 || !self.slot_bytes.is_multiple_of(block_size) {
                sys::spdk_put_io_channel(ch);
                sys::spdk_bdev_close(desc);
                drop(Arc::from_raw(ctx));
                return Err(err(-libc::EINVAL));
            }
            Ok(Opened {
                desc: desc as usize,
                ch: ch as usize,
                block_size,
                blocks: sys::spdk_bdev_get_num_blocks(bdev),
                flush: sys::spdk_bdev_io_type_supported(bdev, sys::SPDK_BDEV_IO_TYPE_FLUSH),
                event_ctx: ctx as usize,
            })
        }
    }

    /// One poll of the SPDK thread, then the completions it reported;
    /// whether anything happened.
    fn poll_once(&mut self) -> bool {
        // SAFETY: the thread was created by this polling thread, which is
        // the only one that polls it.
        let busy = unsafe { sys::spdk_thread_poll(self.thread, 0, 0) } > 0;
        let done = DONE.with(|d| std::mem::take(&mut *d.borrow_mut()));
        let any = !done.is_empty();
        for (slot, ok) in done.iter().copied() {
            self.complete(slot, ok);
        }
        // Give the vector's allocation back for the next poll.
        DONE.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_empty() {
                let mut v = done;
                v.clear();
                *d = v;
            }
        });
        if any {
            self.issue();
        }
        busy || any
    }

    /// Issues what it can of the waiting jobs, oldest first.
    fn issue(&mut self) {
        while let Some(&job) = self.active.front() {
            // SAFETY: a job in `active` is not done, so its caller waits
            // and keeps it alive.
            if unsafe { self.issue_job(job) } {
                self.active.pop_front();
            } else {
                break;
            }
        }
    }

    /// Issues the job's remaining operations; whether all are issued (the
    /// job may then be done, and must not be touched again).
    ///
    /// # Safety
    ///
    /// `job` is a live job not yet done.
    unsafe fn issue_job(&mut self, job: *const Job) -> bool {
        // SAFETY: live (the caller's contract).
        let j = unsafe { &*job };
        while j.next.get() < j.n_ops {
            let i = j.next.get();
            // SAFETY: i < n_ops; the polling thread alone touches the ops
            // while the job is not done.
            let op = unsafe { &mut *j.ops.add(i) };
            while !op.all_issued() {
                let Some(slot) = self.free.pop() else {
                    return false;
                };
                let at = op.start + op.issued;
                let len = if j.kind == JobKind::Flush {
                    op.stop - at
                } else {
                    self.slot_bytes.min(op.stop - at)
                };
                let buf = self.slots[slot].buf;
                if op.write {
                    // SAFETY: a write is block-aligned (SpdkStore::plan), so
                    // at - offset + len lies within the caller's buffer,
                    // which the caller keeps readable; the slot holds
                    // slot_bytes >= len.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            op.buf.add((at - op.offset) as usize),
                            buf,
                            len as usize,
                        )
                    };
                }
                let arg = slot as *mut c_void;
                // SAFETY: desc and ch belong to an open store (it waits for
                // this job); buf is a DMA-able buffer of at least len bytes
                // that stays reserved until the completion.
                let rc = unsafe {
                    match (j.kind, op.write) {
                        (JobKind::Flush, _) => {
                            sys::spdk_bdev_flush(j.desc, j.ch, at, len, io_done, arg)
                        }
                        (_, true) => {
                            sys::spdk_bdev_write(j.desc, j.ch, buf.cast(), at, len, io_done, arg)
                        }
                        (_, false) => {
                            sys::spdk_bdev_read(j.desc, j.ch, buf.cast(), at, len, io_done, arg)
                        }
                    }
                };
                if rc == -libc::ENOMEM {
                    // SPDK's pool of bdev_io is empty: retry after
                    // completions free some.
                    self.free.push(slot);
                    return false;
                }
                op.issued += len;
                if rc != 0 {
                    self.free.push(slot);
                    op.fail(j.kind, at, errno_of(rc));
                    op.issued = op.stop - op.start;
                    break;
                }
                self.slots[slot].chunk = Some(Chunk {
                    job,
                    op: i,
                    at,
                    len,
                });
                op.in_flight += 1;
                self.in_flight += 1;
                self.shared.max_in_flight.fetch_max(self.in_flight, Relaxed);
            }
            j.next.set(i + 1);
            if op.in_flight == 0 {
                // Failed to issue, with nothing in flight: finished now.
                // SAFETY: live until finish_op signals the last op.
                if unsafe { finish_op(job) } {
                    return true;
                }
            }
        }
        true
    }

    fn complete(&mut self, slot: usize, ok: bool) {
        let Some(c) = self.slots[slot].chunk.take() else {
            return;
        };
        self.free.push(slot);
        self.in_flight -= 1;
        // SAFETY: the chunk's job is live: it is not done while one of its
        // chunks is in flight.
        let j = unsafe { &*c.job };
        // SAFETY: c.op < n_ops, polling thread only.
        let op = unsafe { &mut *j.ops.add(c.op) };
        if !ok {
            op.fail(j.kind, c.at, libc::EIO);
        } else if !op.write && j.kind == JobKind::Rw {
            // The part of the chunk inside the caller's range.
            let from = c.at.max(op.offset);
            let to = (c.at + c.len).min(op.offset + op.len as u64);
            if from < to {
                // SAFETY: from..to lies within both the chunk's staging
                // buffer and the caller's buffer (offset..offset + len),
                // which the caller keeps writable until the job is done.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.slots[slot].buf.add((from - c.at) as usize),
                        op.buf.add((from - op.offset) as usize),
                        (to - from) as usize,
                    )
                };
            }
        }
        op.in_flight -= 1;
        if op.in_flight == 0 && op.all_issued() && j.next.get() > c.op {
            // SAFETY: the job is live; this may finish it.
            unsafe { finish_op(c.job) };
        }
    }
}

/// Counts one operation of `job` finished; wakes the caller when it was
/// the last, and says so (the job is then gone).
///
/// # Safety
///
/// `job` is live and the operation was not counted before.
unsafe fn finish_op(job: *const Job) -> bool {
    // SAFETY: live (the caller's contract).
    let j = unsafe { &*job };
    let left = j.remaining.get() - 1;
    j.remaining.set(left);
    if left > 0 {
        return false;
    }
    let waiter = j.waiter.clone();
    let same_cpu = j.same_cpu.get();
    j.done.store(true, Release);
    // `j` may be gone from here on.
    waiter.unpark();
    if same_cpu {
        // Let the caller run now rather than at the end of this thread's
        // time slice.
        std::thread::yield_now();
    }
    true
}
