//! A file or block device through io_uring.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use io_uring::{IoUring, opcode, types};

use crate::file::{FileKind, file_len, file_punch_hole, file_set_len, file_sync};
use crate::sys::mm::AnonMapping;
use crate::sys::uring;
use crate::{IoRequest, Store, StoreError, StoreOp};

/// The alignment `O_DIRECT` requests keep: offsets, lengths and buffer
/// addresses. 4 KiB satisfies every common device and filesystem (ext4 on
/// this project's machines reports 512 through `statx`).
const DIRECT_ALIGN: usize = 4096;

/// Largest length given to one submission queue entry; longer requests
/// continue in further entries.
const MAX_SQE_LEN: usize = 1 << 30;

/// Size of each registered staging buffer of a ring.
const BOUNCE_SIZE: usize = 256 << 10;

/// Registered staging buffers per ring.
const BOUNCE_SLOTS: usize = 4;

/// Buckets of [`UringStats::writes_by_size`]: `[0]` is writes under 8 KiB,
/// `[i]` writes of `4 KiB << i` up to twice that, the last one 8 MiB and
/// more.
pub const WRITE_SIZE_BUCKETS: usize = 12;

/// How to open a [`UringStore`].
#[derive(Clone, Copy, Debug)]
pub struct UringOptions {
    direct: bool,
    depth: u32,
    rings: usize,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            direct: false,
            depth: 64,
            rings: 8,
        }
    }
}

impl UringOptions {
    /// Buffered I/O, 64 requests in flight per ring, up to 8 rings kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether aligned requests bypass the kernel's page cache
    /// (`O_DIRECT`), so that data is cached once, in umio's cache, not
    /// twice. Requests that are not 4 KiB-aligned (the partial page at the
    /// end of a file) go through a registered staging buffer (reads) or
    /// the page cache (writes).
    pub fn direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Requests in flight at once per ring (1 to 4096; default 64).
    pub fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// Rings kept for reuse (default 8). Each thread submitting at once
    /// uses its own ring; a thread that finds none idle makes one.
    pub fn rings(mut self, rings: usize) -> Self {
        self.rings = rings;
        self
    }
}

/// What a [`UringStore`] has done, for benchmarks and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringStats {
    /// Batches submitted ([`Store::submit`] calls, `read_at` and `write_at`
    /// count as batches of one).
    pub batches: u64,
    /// Read requests completed.
    pub reads: u64,
    /// Write requests completed.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Most requests in flight at once in one ring.
    pub max_in_flight: u64,
    /// Largest single write request, in bytes.
    pub largest_write: u64,
    /// Write requests by size; see [`WRITE_SIZE_BUCKETS`].
    pub writes_by_size: [u64; WRITE_SIZE_BUCKETS],
    /// Requests that went through a registered staging buffer.
    pub bounced: u64,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    max_in_flight: AtomicU64,
    largest_write: AtomicU64,
    writes_by_size: [AtomicU64; WRITE_SIZE_BUCKETS],
    bounced: AtomicU64,
}

/// Registered staging buffers of one ring, in one anonymous mapping
/// (owned by the ring that holds it and used only by the thread holding
/// that ring).
struct Bounce {
    map: AnonMapping,
    registered: bool,
}

impl Bounce {
    fn new(ring: &IoUring) -> Option<Bounce> {
        let map = AnonMapping::new(BOUNCE_SIZE * BOUNCE_SLOTS)?;
        let base = map.as_mut_ptr();
        let iovecs: Vec<libc::iovec> = (0..BOUNCE_SLOTS)
            .map(|i| libc::iovec {
                // SAFETY: within the mapping just made.
                iov_base: unsafe { base.add(i * BOUNCE_SIZE) }.cast(),
                iov_len: BOUNCE_SIZE,
            })
            .collect();
        // SAFETY: the buffers stay mapped until this Bounce is dropped,
        // which happens only after its ring is (field order in Ring); no
        // request uses them then (every submit waits for all of its
        // completions).
        let registered = unsafe { uring::register_buffers(ring, &iovecs) };
        Some(Bounce { map, registered })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: i < BOUNCE_SLOTS, within the mapping.
        unsafe { self.map.as_mut_ptr().add(i * BOUNCE_SIZE) }
    }
}

/// An io_uring instance and its staging buffers. Field order matters: the
/// ring closes before the buffers registered with it are unmapped.
struct Ring {
    ring: IoUring,
    bounce: Option<Bounce>,
}

/// Where one request goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// The `O_DIRECT` descriptor, straight into or out of the caller's
    /// buffer.
    Direct,
    /// The buffered descriptor.
    Buffered,
    /// A read of the aligned range around the request into staging slot
    /// `n` through the `O_DIRECT` descriptor, then a copy.
    Bounce(usize),
}

/// Progress of one request of a batch.
struct Pending {
    route: Route,
    done: usize,
    /// For Bounce: the aligned start and length read.
    aligned: (u64, usize),
}

/// A file or block device read and written through io_uring.
///
/// Each [`submit`](Store::submit) puts up to the ring's depth of requests
/// in flight at once and waits for them all, resubmitting the rest of
/// short transfers; `read_at` and `write_at` are batches of one. Threads
/// submitting at once use separate rings, kept in a small pool. With
/// [`UringOptions::direct`] aligned requests bypass the kernel's page
/// cache.
///
/// Errors carry the operation and the offset where the failed transfer
/// started, with the kernel's errno.
pub struct UringStore {
    file: File,
    direct: Option<File>,
    kind: FileKind,
    depth: u32,
    max_rings: usize,
    rings: Mutex<Vec<Ring>>,
    counters: Counters,
}

impl std::fmt::Debug for UringStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringStore")
            .field("fd", &self.file.as_raw_fd())
            .field("direct", &self.direct.is_some())
            .field("writable", &self.kind.writable)
            .field("depth", &self.depth)
            .finish()
    }
}

impl UringStore {
    /// Wraps a duplicate of `file` (open for reading, or reading and
    /// writing). With `options.direct`, also opens the file again with
    /// `O_DIRECT`; fails with `EINVAL` where the filesystem refuses it.
    /// Fails with the kernel's error where io_uring is unavailable
    /// (`kernel.io_uring_disabled`, seccomp).
    pub fn new(file: &File, options: UringOptions) -> std::io::Result<Self> {
        if options.depth == 0 || options.depth > 4096 || options.rings == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let file = file.try_clone()?;
        let kind = FileKind::inspect(&file)?;
        let direct = if options.direct {
            let path = format!("/proc/self/fd/{}", file.as_raw_fd());
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(kind.writable);
            use std::os::unix::fs::OpenOptionsExt;
            o.custom_flags(libc::O_DIRECT);
            Some(o.open(path)?)
        } else {
            None
        };
        let store = UringStore {
            file,
            direct,
            kind,
            depth: options.depth,
            max_rings: options.rings,
            rings: Mutex::new(Vec::new()),
            counters: Counters::default(),
        };
        // Fail now, not on the first fault, where io_uring is refused.
        let ring = store.make_ring()?;
        store.put_ring(ring);
        Ok(store)
    }

    /// Opens `path` for reading (and writing when `writable`).
    pub fn open(
        path: impl AsRef<std::path::Path>,
        writable: bool,
        options: UringOptions,
    ) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)?;
        Self::new(&f, options)
    }

    /// Whether aligned requests bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// What the store has done so far.
    pub fn stats(&self) -> UringStats {
        let c = &self.counters;
        let mut writes_by_size = [0; WRITE_SIZE_BUCKETS];
        for (o, i) in writes_by_size.iter_mut().zip(&c.writes_by_size) {
            *o = i.load(Relaxed);
        }
        UringStats {
            batches: c.batches.load(Relaxed),
            reads: c.reads.load(Relaxed),
            writes: c.writes.load(Relaxed),
            bytes_read: c.bytes_read.load(Relaxed),
            bytes_written: c.bytes_written.load(Relaxed),
            max_in_flight: c.max_in_flight.load(Relaxed),
            largest_write: c.largest_write.load(Relaxed),
            writes_by_size,
            bounced: c.bounced.load(Relaxed),
        }
    }

    fn make_ring(&self) -> std::io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_cqsize(self.depth * 2)
            .build(self.depth)?;
        let bounce = if self.direct.is_some() {
            Bounce::new(&ring)
        } else {
            None
        };
        Ok(Ring { ring, bounce })
    }

    fn take_ring(&self) -> std::io::Result<Ring> {
        let pooled = self.rings.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(r) => Ok(r),
            None => self.make_ring(),
        }
    }

    fn put_ring(&self, ring: Ring) {
        let mut pool = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < self.max_rings {
            pool.push(ring);
        }
    }

    /// Chooses each request's path; `slots` counts staging slots in use.
    fn route(
        &self,
        req: &mut IoRequest<'_>,
        bounce: Option<&Bounce>,
        slots: &mut usize,
    ) -> Pending {
        let buffered = Pending {
            route: Route::Buffered,
            done: 0,
            aligned: (0, 0),
        };
        if self.direct.is_none() {
            return buffered;
        }
        let a = DIRECT_ALIGN as u64;
        let (off, len) = (req.offset(), req.len());
        let addr = match req.read_buf() {
            Some(b) => b.as_ptr() as usize,
            None => req.write_buf().map_or(0, |b| b.as_ptr() as usize),
        };
        if off % a == 0 && len % DIRECT_ALIGN == 0 && addr % DIRECT_ALIGN == 0 {
            return Pending {
                route: Route::Direct,
                ..buffered
            };
        }
        // An unaligned read that fits a free staging slot reads the
        // aligned range around it; anything else goes through the page
        // cache.
        if req.is_write() || bounce.is_none() || *slots == BOUNCE_SLOTS {
            return buffered;
        }
        let start = off / a * a;
        let end = (off + len as u64).div_ceil(a) * a;
        let Ok(span) = usize::try_from(end - start) else {
            return buffered;
        };
        if span > BOUNCE_SIZE {
            return buffered;
        }
        *slots += 1;
        Pending {
            route: Route::Bounce(*slots - 1),
            done: 0,
            aligned: (start, span),
        }
    }

    /// The submission queue entry for the rest of request `i`.
    fn entry(
        &self,
        i: usize,
        req: &mut IoRequest<'_>,
        p: &Pending,
        bounce: Option<&Bounce>,
    ) -> io_uring::squeue::Entry {
        let fd = match p.route {
            Route::Buffered => types::Fd(self.file.as_raw_fd()),
            Route::Direct | Route::Bounce(_) => {
                types::Fd(self.direct.as_ref().map_or(-1, |f| f.as_raw_fd()))
            }
        };
        let user_data = i as u64;
        if let Route::Bounce(slot) = p.route {
            let b = bounce.expect("bounce route without staging buffers");
            let ptr = b.slot(slot);
            let len = p.aligned.1 as u32;
            return if b.registered {
                opcode::ReadFixed::new(fd, ptr, len, slot as u16)
                    .offset(p.aligned.0)
                    .build()
                    .user_data(user_data)
            } else {
                opcode::Read::new(fd, ptr, len)
                    .offset(p.aligned.0)
                    .build()
                    .user_data(user_data)
            };
        }
        let offset = req.offset() + p.done as u64;
        if let Some(buf) = req.read_buf() {
            let rest = &mut buf[p.done..];
            let len = rest.len().min(MAX_SQE_LEN) as u32;
            opcode::Read::new(fd, rest.as_mut_ptr(), len)
                .offset(offset)
                .build()
                .user_data(user_data)
        } else {
            let rest = &req.write_buf().unwrap_or(&[])[p.done..];
            let len = rest.len().min(MAX_SQE_LEN) as u32;
            opcode::Write::new(fd, rest.as_ptr(), len)
                .offset(offset)
                .build()
                .user_data(user_data)
        }
    }

    /// Pushes entries for queued requests until `depth` are in flight
    /// (`queued` in the ring, `in_kernel` taken by the kernel).
    #[allow(clippy::too_many_arguments)]
    fn top_up(
        &self,
        r: &mut Ring,
        batch: &mut [IoRequest<'_>],
        pending: &[Pending],
        queue: &mut VecDeque<usize>,
        queued: &mut usize,
        in_kernel: usize,
    ) {
        let bounce = r.bounce.as_ref();
        while *queued + in_kernel < self.depth as usize {
            let Some(i) = queue.pop_front() else { break };
            let e = self.entry(i, &mut batch[i], &pending[i], bounce);
            // SAFETY: the entry's buffer (the caller's request buffer or
            // this ring's staging slot) stays valid and unused by anything
            // else until its completion, which `run` waits for before
            // returning (the caller's `done` sees a request only once it
            // has its result, so never a buffer the kernel still holds).
            if !unsafe { uring::push(&mut r.ring, &e) } {
                queue.push_front(i);
                break;
            }
            *queued += 1;
        }
    }

    /// Runs the requests of `batch` without a result on `r`: keeps up to
    /// `depth` in flight (as each completes, the next goes in), resubmits
    /// the rest of short transfers, hands each request to `done` as soon
    /// as it has its result (after the next requests are submitted), and
    /// waits for every completion. Returns false if the ring must be
    /// discarded.
    fn run(
        &self,
        r: &mut Ring,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) -> bool {
        let mut slots = 0;
        let mut pending: Vec<Pending> = {
            let bounce = r.bounce.as_ref();
            batch
                .iter_mut()
                .map(|req| self.route(req, bounce, &mut slots))
                .collect()
        };
        let mut queue: VecDeque<usize> = VecDeque::with_capacity(batch.len());
        for (i, req) in batch.iter_mut().enumerate() {
            if req.result().is_some() {
                done(i, req);
                continue;
            }
            if req.is_empty() {
                req.complete(Ok(0));
                done(i, req);
            } else {
                queue.push_back(i);
            }
        }
        // Queued in the ring, and taken by the kernel.
        let (mut queued, mut in_kernel) = (0usize, 0usize);
        let mut broken = None;
        let mut finished: Vec<usize> = Vec::with_capacity(self.depth as usize);
        loop {
            if broken.is_none() {
                self.top_up(r, batch, &pending, &mut queue, &mut queued, in_kernel);
            }
            if queued + in_kernel == 0 || (broken.is_some() && in_kernel == 0) {
                break;
            }
            self.counters
                .max_in_flight
                .fetch_max((queued + in_kernel) as u64, Relaxed);
            let entered = if broken.is_none() {
                r.ring.submit_and_wait(1)
            } else {
                // Reap what the kernel holds; submit nothing more.
                uring::wait_completions(&r.ring, 1).map(|_| 0)
            };
            match entered {
                Ok(n) => {
                    queued -= n;
                    in_kernel += n;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // Nothing was taken: stop submitting, drain what the
                    // kernel holds, fail the rest.
                    broken.get_or_insert(e.raw_os_error().unwrap_or(libc::EIO));
                    if in_kernel == 0 {
                        break;
                    }
                    continue;
                }
            }
            let reaped: Vec<(u64, i32)> = r
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            finished.clear();
            for (i, res) in reaped {
                let i = i as usize;
                in_kernel -= 1;
                let bounce = r.bounce.as_ref();
                self.complete_one(&mut batch[i], &mut pending[i], res, bounce, &mut queue, i);
                if batch[i].result().is_some() {
                    finished.push(i);
                }
            }
            if !finished.is_empty() {
                // The next requests go to the kernel before the caller
                // works on the finished ones: the queue stays full.
                if broken.is_none() {
                    self.top_up(r, batch, &pending, &mut queue, &mut queued, in_kernel);
                    if queued > 0
                        && let Ok(n) = r.ring.submit()
                    {
                        queued -= n;
                        in_kernel += n;
                    }
                }
                for &i in &finished {
                    done(i, &mut batch[i]);
                }
            }
        }
        if let Some(errno) = broken {
            for (i, req) in batch.iter_mut().enumerate() {
                if req.result().is_none() {
                    let op = if req.is_write() {
                        StoreOp::Write
                    } else {
                        StoreOp::Read
                    };
                    let at = req.offset() + pending[i].done as u64;
                    req.complete(Err(StoreError::new(op, at, errno)));
                    done(i, req);
                }
            }
            return false;
        }
        true
    }

    /// Accounts one completion of request `i`: finished, failed, or
    /// queued again for the rest of a short transfer.
    fn complete_one(
        &self,
        req: &mut IoRequest<'_>,
        p: &mut Pending,
        res: i32,
        bounce: Option<&Bounce>,
        queue: &mut VecDeque<usize>,
        i: usize,
    ) {
        let write = req.is_write();
        let op = if write { StoreOp::Write } else { StoreOp::Read };
        if res < 0 {
            if matches!(-res, libc::EINTR | libc::EAGAIN) {
                queue.push_back(i);
                return;
            }
            let at = match p.route {
                Route::Bounce(_) => req.offset(),
                _ => req.offset() + p.done as u64,
            };
            req.complete(Err(StoreError::new(op, at, -res)));
            return;
        }
        let n = res as usize;
        if let Route::Bounce(slot) = p.route {
            // The aligned read is one transfer: short only at the end.
            let head = (req.offset() - p.aligned.0) as usize;
            let got = n.saturating_sub(head).min(req.len());
            if let (Some(b), Some(buf)) = (bounce, req.read_buf()) {
                // SAFETY: the slot holds `n` bytes the kernel just read;
                // head + got <= n, and the slot is not in use otherwise.
                let src = unsafe { std::slice::from_raw_parts(b.slot(slot).add(head), got) };
                buf[..got].copy_from_slice(src);
            }
            self.counters.bounced.fetch_add(1, Relaxed);
            self.finish(req, got);
            return;
        }
        if n == 0 {
            if write {
                req.complete(Err(StoreError::new(
                    op,
                    req.offset() + p.done as u64,
                    libc::EIO,
                )));
            } else {
                let done = p.done;
                self.finish(req, done);
            }
            return;
        }
        p.done += n;
        if p.done >= req.len() {
            let done = p.done;
            self.finish(req, done);
        } else {
            queue.push_back(i);
        }
    }

    /// One request with `pread`/`pwrite` on the descriptor its alignment
    /// allows, looping over short transfers.
    pub(crate) fn perform_one(&self, req: &mut IoRequest<'_>) {
        use std::os::unix::fs::FileExt;
        let mut slots = 0;
        // No staging slot: an unaligned request takes the buffered path.
        let route = self.route(req, None, &mut slots).route;
        let file = match (route, &self.direct) {
            (Route::Direct, Some(d)) => d,
            _ => &self.file,
        };
        let offset = req.offset();
        let r = if let Some(buf) = req.read_buf() {
            crate::file::read_full_at(file, offset, buf)
        } else {
            let buf = req.write_buf().unwrap_or(&[]);
            file.write_all_at(buf, offset)
                .map(|()| buf.len())
                .map_err(|e| StoreError::from_io(StoreOp::Write, offset, &e))
        };
        self.counters.max_in_flight.fetch_max(1, Relaxed);
        match r {
            Ok(n) => self.finish(req, n),
            Err(e) => req.complete(Err(e)),
        }
    }

    fn finish(&self, req: &mut IoRequest<'_>, n: usize) {
        let c = &self.counters;
        if req.is_write() {
            c.writes.fetch_add(1, Relaxed);
            c.bytes_written.fetch_add(n as u64, Relaxed);
            c.largest_write.fetch_max(n as u64, Relaxed);
            let bucket = (usize::BITS - (n >> 12).leading_zeros()) as usize;
            c.writes_by_size[bucket.saturating_sub(1).min(WRITE_SIZE_BUCKETS - 1)]
                .fetch_add(1, Relaxed);
        } else {
            c.reads.fetch_add(1, Relaxed);
            c.bytes_read.fetch_add(n as u64, Relaxed);
        }
        req.complete(Ok(n));
    }
}

impl Store for UringStore {
    fn len(&self) -> Result<u64, StoreError> {
        file_len(&self.file, self.kind.block_device)
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        file_set_len(&self.file, self.kind.writable, self.kind.block_device, len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        crate::request::read_one(self, offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        crate::request::write_one(self, offset, buf)
    }

    fn sync(&self) -> Result<(), StoreError> {
        file_sync(&self.file, self.kind.writable)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        file_punch_hole(
            &self.file,
            self.kind.writable,
            self.kind.block_device,
            offset,
            len,
        )
    }

    fn is_writable(&self) -> bool {
        self.kind.writable
    }

    fn alignment(&self) -> usize {
        if self.direct.is_some() {
            DIRECT_ALIGN
        } else {
            1
        }
    }

    fn name(&self) -> &str {
        if self.direct.is_some() {
            "io_uring (O_DIRECT)"
        } else {
            "io_uring"
        }
    }

    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        self.submit_each(batch, &mut |_, _| {});
    }

    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        if batch.is_empty() {
            return;
        }
        self.counters.batches.fetch_add(1, Relaxed);
        if !self.kind.writable {
            for req in batch.iter_mut().filter(|r| r.is_write()) {
                let at = req.offset();
                req.complete(Err(StoreError::new(StoreOp::Write, at, libc::EBADF)));
            }
        }
        // Found without allocating: a single request is the fault path's
        // (and may come from a signal handler, which must not allocate).
        let mut open = (0..batch.len()).filter(|&i| batch[i].result().is_none());
        if let (Some(i), None) = (open.next(), open.next()) {
            // One request gains nothing from a ring (and a buffered one
            // may be handed to an io_uring worker thread: a cross-CPU
            // wake-up): do it here.
            self.perform_one(&mut batch[i]);
            for (j, req) in batch.iter_mut().enumerate() {
                done(j, req);
            }
            return;
        }
        match self.take_ring() {
            Ok(mut ring) => {
                if self.run(&mut ring, batch, done) {
                    self.put_ring(ring);
                }
            }
            Err(e) => {
                // No ring to be had (memory, limits): fail the batch.
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                for req in batch.iter_mut().filter(|r| r.result().is_none()) {
                    let op = if req.is_write() {
                        StoreOp::Write
                    } else {
                        StoreOp::Read
                    };
                    let at = req.offset();
                    req.complete(Err(StoreError::new(op, at, errno)));
                }
                for (j, req) in batch.iter_mut().enumerate() {
                    done(j, req);
                }
            }
        }
    }

    fn queue_depth(&self) -> usize {
        self.depth as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&data).unwrap();
        (tmp, data)
    }

    /// A page-aligned buffer, as umio's staging buffers and mappings are.
    struct Aligned(Vec<u64>);
    impl Aligned {
        fn new(len: usize) -> (Self, usize) {
            let v = vec![0u64; (len + 8192) / 8];
            let skip = (v.as_ptr() as usize).next_multiple_of(4096) - v.as_ptr() as usize;
            (Aligned(v), skip)
        }
        fn bytes(&mut self, skip: usize, len: usize) -> &mut [u8] {
            // SAFETY: skip + len lies within the vector's bytes.
            unsafe {
                std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>().add(skip), len)
            }
        }
    }

    fn batches_round_trip(direct: bool) {
        let (tmp, data) = file_of(1 << 20 | 1000);
        let s = UringStore::open(
            tmp.path(),
            true,
            UringOptions::new().direct(direct).depth(8),
        )
        .unwrap();
        assert_eq!(s.is_direct(), direct);
        // 40 aligned 4 KiB reads, more than the ring's depth, and one
        // unaligned read across the end of the file.
        let (mut mem, skip) = Aligned::new(41 * 4096);
        let buf = mem.bytes(skip, 41 * 4096);
        let (pages, tail) = buf.split_at_mut(40 * 4096);
        let mut batch: Vec<IoRequest<'_>> = pages
            .chunks_mut(4096)
            .enumerate()
            .map(|(i, b)| IoRequest::read((i as u64 * 3 + 1) * 4096, b))
            .collect();
        batch.push(IoRequest::read((1 << 20) + 500, &mut tail[..3000]));
        s.submit(&mut batch);
        for (i, r) in batch.iter().take(40).enumerate() {
            assert_eq!(r.result(), Some(Ok(4096)), "request {i}");
        }
        assert_eq!(batch[40].result(), Some(Ok(500)));
        drop(batch);
        for i in 0..40 {
            let at = (i * 3 + 1) * 4096;
            assert_eq!(&buf[i * 4096..][..4096], &data[at..at + 4096], "page {i}");
        }
        assert_eq!(&buf[40 * 4096..][..500], &data[(1 << 20) + 500..]);
        let st = s.stats();
        assert!(st.max_in_flight > 1 && st.max_in_flight <= 8, "{st:?}");
        if direct {
            assert_eq!(st.bounced, 1, "{st:?}");
        }
        // Writes: one large aligned, one unaligned at the end.
        let (mut w, wskip) = Aligned::new(1 << 20);
        let wbuf = w.bytes(wskip, 1 << 20);
        wbuf.fill(0xAB);
        let mut batch = [
            IoRequest::write(0, wbuf),
            IoRequest::write((1 << 20) + 990, &[0xCD; 20]),
        ];
        s.submit(&mut batch);
        assert_eq!(batch[0].result(), Some(Ok(1 << 20)));
        assert_eq!(batch[1].result(), Some(Ok(20)));
        s.sync().unwrap();
        let back = std::fs::read(tmp.path()).unwrap();
        assert_eq!(back.len(), (1 << 20) + 1010);
        assert!(back[..1 << 20].iter().all(|&b| b == 0xAB));
        assert_eq!(
            &back[1 << 20..(1 << 20) + 990],
            &data[1 << 20..(1 << 20) + 990]
        );
        assert!(back[(1 << 20) + 990..].iter().all(|&b| b == 0xCD));
        let st = s.stats();
        assert_eq!(st.largest_write, 1 << 20);
        assert_eq!(st.writes_by_size[8], 1, "{st:?}");
        // read_at/write_at are batches of one.
        let mut one = [0u8; 10];
        assert_eq!(s.read_at(5, &mut one).unwrap(), 10);
        assert!(one.iter().all(|&b| b == 0xAB));
    }

    #[test]
    fn buffered_batches_round_trip() {
        batches_round_trip(false);
    }

    #[test]
    fn direct_batches_round_trip() {
        batches_round_trip(true);
    }

    /// `submit_each` hands every request to `done` once, with its result,
    /// before it returns, keeping the ring's depth in flight (never more)
    /// over a batch five times as long.
    #[test]
    fn submit_each_hands_over_each_request_once_as_it_completes() {
        let (tmp, data) = file_of(64 * 4096);
        let s = UringStore::open(tmp.path(), false, UringOptions::new().depth(4)).unwrap();
        let mut bufs = vec![[0u8; 4096]; 20];
        // Scattered pages, one already failed by the caller.
        let pages: Vec<usize> = (0..20).map(|k| k * 13 % 64).collect();
        let mut batch: Vec<IoRequest<'_>> = bufs
            .iter_mut()
            .zip(&pages)
            .map(|(b, &p)| IoRequest::read((p * 4096) as u64, b))
            .collect();
        batch[5].complete(Err(StoreError::new(StoreOp::Read, 0, libc::EIO)));
        let mut seen = vec![0usize; 20];
        s.submit_each(&mut batch, &mut |i, req| {
            seen[i] += 1;
            match req.result() {
                Some(Ok(n)) => {
                    assert_eq!(n, 4096);
                    let at = pages[i] * 4096;
                    assert_eq!(req.read_buf().unwrap(), &data[at..at + 4096], "request {i}");
                }
                Some(Err(_)) => assert_eq!(i, 5, "only the caller's failure"),
                None => panic!("request {i} handed over without a result"),
            }
        });
        assert_eq!(seen, vec![1; 20]);
        assert_eq!(s.stats().max_in_flight, 4);
        assert_eq!(s.stats().reads, 19);
    }

    #[test]
    fn errors_carry_operation_and_offset() {
        let (tmp, _) = file_of(8192);
        let s = UringStore::open(tmp.path(), false, UringOptions::new()).unwrap();
        assert!(!s.is_writable());
        let e = s.write_at(4096, b"x").unwrap_err();
        assert_eq!(
            (e.op, e.offset, e.errno),
            (StoreOp::Write, 4096, libc::EBADF)
        );
        // An offset past what the kernel accepts.
        let mut buf = [0u8; 16];
        let at = u64::MAX - 100;
        let e = s.read_at(at, &mut buf).unwrap_err();
        assert_eq!((e.op, e.offset), (StoreOp::Read, at));
        assert_eq!(e.errno, libc::EINVAL);
        // Reads past the end are empty, not errors.
        assert_eq!(s.read_at(100_000, &mut buf).unwrap(), 0);
        assert!(UringStore::open(tmp.path(), false, UringOptions::new().depth(0)).is_err());
    }
}
