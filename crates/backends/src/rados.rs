//! A Ceph RADOS object set as a store (cargo feature `rados`).
//!
//! # Layout in the pool
//!
//! A store named by prefix `P` is:
//! - `P.meta`: an empty object whose extended attributes hold the store's
//!   length (`umio.len`) and object size (`umio.object_size`), both as
//!   decimal ASCII. It is created atomically with both attributes
//!   ([`RadosStore::create`]); [`RadosStore::open`] reads them.
//! - `P.<index>`, `<index>` 16 lower-case hex digits: bytes
//!   `index * object_size .. (index + 1) * object_size` of the store.
//!   Objects are sparse: a missing object, or the part of one past its
//!   end, reads as zeros, so a new store of any length costs one object.
//!
//! No object holds bytes past the store's length: a write past the end
//! records the new length before its data, and a shrink removes and
//! truncates objects before it records the shorter length, so a crash in
//! between leaves at worst a longer store whose tail reads as zeros.

mod sys;

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use sys::{Cluster, Completion, IoCtx};

use crate::{IoRequest, Store, StoreError, StoreOp};

/// Default size of the objects a store is striped over: 4 MiB, RBD's and
/// CephFS's default.
pub const DEFAULT_OBJECT_SIZE: u64 = 4 << 20;

/// Longest object prefix, in bytes.
const MAX_PREFIX: usize = 200;

/// Largest object size: under the OSD's default `osd_max_write_size`
/// (90 MiB), so that one write never exceeds it.
const MAX_OBJECT_SIZE: u64 = 64 << 20;

/// Largest queue depth accepted.
const MAX_QUEUE_DEPTH: usize = 1024;

const LEN_XATTR: &CStr = c"umio.len";
const OBJECT_SIZE_XATTR: &CStr = c"umio.object_size";

/// Marks a failure on the `.meta` object in the last-failure record.
const META_INDEX: u64 = u64::MAX;

/// How to reach a RADOS object set: the cluster (a ceph.conf), the pool,
/// the objects' name prefix, and how to talk to it.
///
/// ```
/// use std::time::Duration;
/// use umio_backends::RadosOptions;
/// let opts = RadosOptions::new("umio", "datasets/graph")
///     .conf("/etc/ceph/ceph.conf")
///     .object_size(4 << 20)
///     .queue_depth(32)
///     .op_timeout(Duration::from_secs(30));
/// assert_eq!(opts.object_name(5), "datasets/graph.0000000000000005");
/// ```
#[derive(Clone, Debug)]
pub struct RadosOptions {
    conf: Option<PathBuf>,
    client: Option<String>,
    pool: String,
    prefix: String,
    object_size: u64,
    queue_depth: usize,
    writable: bool,
    op_timeout: Duration,
    connect_timeout: Duration,
    config: Vec<(String, String)>,
}

impl RadosOptions {
    /// The object set `prefix` in `pool`, with every other setting at its
    /// default: librados's default ceph.conf search, 4 MiB objects, 32
    /// requests in flight, writable, 30 s operation and connect timeouts.
    pub fn new(pool: impl Into<String>, prefix: impl Into<String>) -> Self {
        RadosOptions {
            conf: None,
            client: None,
            pool: pool.into(),
            prefix: prefix.into(),
            object_size: DEFAULT_OBJECT_SIZE,
            queue_depth: 32,
            writable: true,
            op_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            config: Vec::new(),
        }
    }

    /// The ceph.conf to read (default: librados's search of `$CEPH_CONF`,
    /// `/etc/ceph/ceph.conf`, `~/.ceph/config`, `./ceph.conf`).
    pub fn conf(mut self, path: impl Into<PathBuf>) -> Self {
        self.conf = Some(path.into());
        self
    }

    /// Size of the objects the store is striped over, a multiple of 4 KiB
    /// up to 64 MiB (default 4 MiB). Used by [`RadosStore::create`]; an
    /// existing store keeps the size it was created with.
    pub fn object_size(mut self, bytes: u64) -> Self {
        self.object_size = bytes;
        self
    }

    /// Requests in flight at once in one [`Store::submit`] (1 to 1024;
    /// default 32). umio sizes its prefetch and write-back batches by it.
    pub fn queue_depth(mut self, depth: usize) -> Self {
        self.queue_depth = depth;
        self
    }

    /// Whether writes and length changes are allowed (default true).
    pub fn writable(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }

    /// How long one read or write may wait for the cluster before it fails
    /// with `ETIMEDOUT` (librados's `rados_osd_op_timeout`, rounded up to
    /// whole seconds; default 30 s). Zero waits forever: with no OSD
    /// serving an object, a fault on one of its pages then blocks until
    /// one does, and so does a flush.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// How long opening waits for the monitors (`client_mount_timeout`,
    /// rounded up to whole seconds; default 30 s; zero keeps librados's
    /// 300 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The client's id: `client.<id>` is the name the cluster
    /// authenticates (its key comes from the `keyring` the ceph.conf
    /// names). Default `admin`.
    pub fn client(mut self, id: impl Into<String>) -> Self {
        self.client = Some(id.into());
        self
    }

    /// Sets any other librados option (`rados_conf_set`) after the
    /// ceph.conf is read, for example `("keyring", "/path/keyring")` or
    /// `("ms_crc_data", "false")`.
    pub fn set(mut self, option: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((option.into(), value.into()));
        self
    }

    /// The name of the object holding byte `index * object_size` onwards.
    pub fn object_name(&self, index: u64) -> String {
        format!("{}.{index:016x}", self.prefix)
    }

    fn meta_name(&self) -> String {
        format!("{}.meta", self.prefix)
    }
}

/// A failed RADOS operation while opening, creating or removing a store:
/// what, on which object (or pool, or file), and librados's errno.
///
/// Failures of reads and writes are [`StoreError`]s, whose offset names
/// the object ([`RadosStore::object_name`]); [`RadosStore::last_failure`]
/// gives the latest one with its object's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rados {op} of {object} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
pub struct RadosError {
    /// The operation (`"connect"`, `"open pool"`, `"read"`, ...).
    pub op: &'static str,
    /// The object, pool or configuration file it concerned.
    pub object: String,
    /// The positive errno librados returned.
    pub errno: i32,
}

impl RadosError {
    fn new(op: &'static str, object: impl Into<String>, errno: i32) -> Self {
        RadosError {
            op,
            object: object.into(),
            errno,
        }
    }
}

impl From<RadosError> for std::io::Error {
    fn from(e: RadosError) -> Self {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno).kind(), e)
    }
}

/// What a [`RadosStore`] has done, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RadosStats {
    /// [`Store::submit`] calls (`read_at` and `write_at` are batches of one).
    pub batches: u64,
    /// Object reads completed (a request spanning objects is one per object).
    pub reads: u64,
    /// Object writes completed.
    pub writes: u64,
    /// Bytes read from objects (holes read as zeros not counted).
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Most object operations in flight at once in one batch.
    pub max_in_flight: u64,
    /// Largest single object write, in bytes.
    pub largest_write: u64,
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
}

/// An object name built on the stack (the fault path does not allocate
/// for it): prefix, `.`, 16 hex digits, NUL.
struct ObjectName {
    buf: [u8; MAX_PREFIX + 18],
}

impl ObjectName {
    fn new(prefix: &[u8], index: u64) -> ObjectName {
        let mut buf = [0u8; MAX_PREFIX + 18];
        buf[..prefix.len()].copy_from_slice(prefix);
        buf[prefix.len()] = b'.';
        for i in 0..16 {
            let digit = (index >> ((15 - i) * 4)) & 0xF;
            buf[prefix.len() + 1 + i] = b"0123456789abcdef"[digit as usize];
        }
        ObjectName { buf }
    }

    fn as_cstr(&self) -> &CStr {
        // The prefix has no NUL (checked when the store is built) and the
        // buffer ends in one, so this never falls back to "".
        CStr::from_bytes_until_nul(&self.buf).unwrap_or_default()
    }
}

/// A region's bytes striped over RADOS objects of one pool, read and
/// written with librados's asynchronous operations.
///
/// [`submit`](Store::submit) splits each request at object boundaries and
/// keeps up to [`RadosOptions::queue_depth`] object operations in flight,
/// waiting for them all before it returns; `read_at` and `write_at` are
/// batches of one. A write completes once every replica of its placement
/// group has committed it (librados's "complete", which since Luminous is
/// also "safe"), so [`sync`](Store::sync) has nothing left to wait for
/// beyond `rados_aio_flush`: durable means on the OSDs' object stores
/// (on disk with BlueStore; in the OSD's memory with MemStore).
///
/// The length is read when the store is opened and kept in this process:
/// several processes may read and write one object set, but only one at a
/// time should change its length.
///
/// ```no_run
/// use std::sync::Arc;
/// use umio_backends::{RadosOptions, RadosStore, Store};
/// let opts = RadosOptions::new("umio", "example").conf("/tmp/cluster/ceph.conf");
/// let store = RadosStore::create(&opts, 1 << 30)?; // 1 GiB, 256 objects of 4 MiB
/// store.write_at(4 << 20, b"hello")?; // object example.0000000000000001
/// let mut buf = [0u8; 5];
/// store.read_at(4 << 20, &mut buf)?;
/// assert_eq!(&buf, b"hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RadosStore {
    io: IoCtx,
    pool: String,
    prefix: String,
    object_size: u64,
    len: AtomicU64,
    /// Serializes length changes (the `.meta` attribute and `len`).
    len_lock: Mutex<()>,
    writable: bool,
    depth: usize,
    name: String,
    counters: Counters,
    /// The latest failed object operation: op, object index, errno.
    last_failure: Mutex<Option<(StoreOp, u64, i32)>>,
}

impl std::fmt::Debug for RadosStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RadosStore")
            .field("pool", &self.pool)
            .field("prefix", &self.prefix)
            .field("object_size", &self.object_size)
            .field("len", &self.len.load(Relaxed))
            .field("writable", &self.writable)
            .field("depth", &self.depth)
            .finish()
    }
}

fn check_options(o: &RadosOptions) -> Result<(), RadosError> {
    let bad = |what: &str| Err(RadosError::new("check options", what, libc::EINVAL));
    if o.prefix.is_empty() || o.prefix.len() > MAX_PREFIX || o.prefix.contains('\0') {
        return bad("the prefix (1 to 200 bytes, no NUL)");
    }
    if o.pool.is_empty() || o.pool.contains('\0') {
        return bad("the pool name");
    }
    if o.object_size == 0 || !o.object_size.is_multiple_of(4096) || o.object_size > MAX_OBJECT_SIZE
    {
        return bad("the object size (a multiple of 4 KiB up to 64 MiB)");
    }
    if o.queue_depth == 0 || o.queue_depth > MAX_QUEUE_DEPTH {
        return bad("the queue depth (1 to 1024)");
    }
    Ok(())
}

fn cstring(s: &str, what: &str) -> Result<CString, RadosError> {
    CString::new(s).map_err(|_| RadosError::new("check options", what, libc::EINVAL))
}

/// Whole seconds, rounded up, as librados's duration options take them.
fn secs(d: Duration) -> CString {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    CString::new(s.to_string()).unwrap_or_default()
}

/// Connects to the cluster and opens the pool.
fn connect(o: &RadosOptions) -> Result<IoCtx, RadosError> {
    check_options(o)?;
    let conf_name = o.conf.as_ref().map_or_else(
        || "the default ceph.conf".to_string(),
        |p| p.display().to_string(),
    );
    let client = match &o.client {
        Some(id) => Some(cstring(id, "the client id")?),
        None => None,
    };
    let mut cluster = Cluster::create(client.as_deref())
        .map_err(|e| RadosError::new("create", "a cluster handle", e))?;
    let conf = match &o.conf {
        Some(p) => Some(
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| RadosError::new("check options", &conf_name, libc::EINVAL))?,
        ),
        None => None,
    };
    cluster
        .conf_read_file(conf.as_deref())
        .map_err(|e| RadosError::new("read configuration", &conf_name, e))?;
    let mut set = |k: &str, v: CString| {
        cluster
            .conf_set(&cstring(k, k)?, &v)
            .map_err(|e| RadosError::new("set option", k, e))
    };
    set("rados_osd_op_timeout", secs(o.op_timeout))?;
    if !o.connect_timeout.is_zero() {
        set("client_mount_timeout", secs(o.connect_timeout))?;
        set("rados_mon_op_timeout", secs(o.connect_timeout))?;
    }
    for (k, v) in &o.config {
        set(k, cstring(v, k)?)?;
    }
    cluster
        .connect()
        .map_err(|e| RadosError::new("connect", format!("the cluster of {conf_name}"), e))?;
    let pool = cstring(&o.pool, "the pool name")?;
    IoCtx::new(cluster, &pool)
        .map_err(|e| RadosError::new("open pool", format!("pool {}", o.pool), e))
}

/// Reads a decimal `u64` extended attribute.
fn get_u64(io: &IoCtx, oid: &CStr, name: &CStr, object: &str) -> Result<u64, RadosError> {
    let mut buf = [0u8; 32];
    let n = io
        .getxattr(oid, name, &mut buf)
        .map_err(|e| RadosError::new("read attribute", object, e))?;
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RadosError::new("parse attribute", object, libc::EINVAL))
}

impl RadosStore {
    /// Opens an existing object set ([`create`](RadosStore::create) made
    /// it): connects, opens the pool and reads the length and object size
    /// from `<prefix>.meta`. Fails with `ENOENT` if there is no such set,
    /// `EINVAL` for bad options, and librados's errno otherwise
    /// (`ETIMEDOUT` when no monitor answered within the connect timeout).
    pub fn open(options: &RadosOptions) -> Result<RadosStore, RadosError> {
        let io = connect(options)?;
        let meta = options.meta_name();
        let meta_c = cstring(&meta, "the prefix")?;
        let len = get_u64(&io, &meta_c, LEN_XATTR, &meta)?;
        let object_size = get_u64(&io, &meta_c, OBJECT_SIZE_XATTR, &meta)?;
        if object_size == 0 || !object_size.is_multiple_of(4096) || object_size > MAX_OBJECT_SIZE {
            return Err(RadosError::new("parse attribute", meta, libc::EINVAL));
        }
        Ok(Self::build(io, options, len, object_size))
    }

    /// Creates a new object set of `len` zero bytes (only its `.meta`
    /// object is written: data objects appear as they are written). Fails
    /// with `EEXIST`, changing nothing, if the set exists.
    pub fn create(options: &RadosOptions, len: u64) -> Result<RadosStore, RadosError> {
        let io = connect(options)?;
        let meta = options.meta_name();
        let meta_c = cstring(&meta, "the prefix")?;
        let len_s = len.to_string();
        let osz_s = options.object_size.to_string();
        io.create_exclusive(
            &meta_c,
            &[
                (LEN_XATTR, len_s.as_bytes()),
                (OBJECT_SIZE_XATTR, osz_s.as_bytes()),
            ],
        )
        .map_err(|e| RadosError::new("create", meta, e))?;
        Ok(Self::build(io, options, len, options.object_size))
    }

    /// Deletes an object set: its data objects, then its `.meta` object.
    /// Fails with `ENOENT` if there is none.
    pub fn remove(options: &RadosOptions) -> Result<(), RadosError> {
        let store = Self::open(options)?;
        let objects = store.len.load(Relaxed).div_ceil(store.object_size);
        for index in 0..objects {
            store
                .remove_object(index)
                .map_err(|e| RadosError::new("remove", store.object_name_at(index), e))?;
        }
        let meta = options.meta_name();
        store
            .io
            .remove(&cstring(&meta, "the prefix")?)
            .map_err(|e| RadosError::new("remove", meta, e))
    }

    fn build(io: IoCtx, o: &RadosOptions, len: u64, object_size: u64) -> RadosStore {
        RadosStore {
            io,
            pool: o.pool.clone(),
            prefix: o.prefix.clone(),
            object_size,
            len: AtomicU64::new(len),
            len_lock: Mutex::new(()),
            writable: o.writable,
            depth: o.queue_depth,
            name: format!("rados:{}/{}", o.pool, o.prefix),
            counters: Counters::default(),
            last_failure: Mutex::new(None),
        }
    }

    /// The size of the objects the store is striped over.
    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    /// The name of the object holding byte `offset` of the store: where a
    /// [`StoreError`] at that offset happened.
    pub fn object_name(&self, offset: u64) -> String {
        self.object_name_at(offset / self.object_size)
    }

    fn object_name_at(&self, index: u64) -> String {
        if index == META_INDEX {
            format!("{}.meta", self.prefix)
        } else {
            format!("{}.{index:016x}", self.prefix)
        }
    }

    /// The latest failed read, write or length change, with its object's
    /// name and librados's errno.
    pub fn last_failure(&self) -> Option<RadosError> {
        let f = *self.last_failure.lock().unwrap_or_else(|e| e.into_inner());
        f.map(|(op, index, errno)| {
            let op = match op {
                StoreOp::Read => "read",
                StoreOp::Write => "write",
                StoreOp::Sync => "flush",
                StoreOp::Len => "length change",
                StoreOp::PunchHole => "hole punch",
            };
            RadosError::new(op, self.object_name_at(index), errno)
        })
    }

    /// What the store has done so far.
    pub fn stats(&self) -> RadosStats {
        let c = &self.counters;
        RadosStats {
            batches: c.batches.load(Relaxed),
            reads: c.reads.load(Relaxed),
            writes: c.writes.load(Relaxed),
            bytes_read: c.bytes_read.load(Relaxed),
            bytes_written: c.bytes_written.load(Relaxed),
            max_in_flight: c.max_in_flight.load(Relaxed),
            largest_write: c.largest_write.load(Relaxed),
        }
    }

    fn fail(&self, op: StoreOp, offset: u64, index: u64, errno: i32) -> StoreError {
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some((op, index, errno));
        StoreError::new(op, offset, errno)
    }

    fn data_name(&self, index: u64) -> ObjectName {
        ObjectName::new(self.prefix.as_bytes(), index)
    }

    fn remove_object(&self, index: u64) -> Result<(), i32> {
        match self.io.remove(self.data_name(index).as_cstr()) {
            Err(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// Records `len` in `.meta`; the caller holds `len_lock`.
    fn record_len(&self, len: u64) -> Result<(), StoreError> {
        let meta = format!("{}.meta", self.prefix);
        let meta =
            CString::new(meta).map_err(|_| StoreError::new(StoreOp::Len, 0, libc::EINVAL))?;
        self.io
            .setxattr(&meta, LEN_XATTR, len.to_string().as_bytes())
            .map_err(|e| self.fail(StoreOp::Len, 0, META_INDEX, e))?;
        self.len.store(len, Relaxed);
        Ok(())
    }

    /// Makes the store at least `end` bytes long, before data is written
    /// there.
    fn extend_to(&self, end: u64) -> Result<(), StoreError> {
        let _g = self.len_lock.lock().unwrap_or_else(|e| e.into_inner());
        if end > self.len.load(Relaxed) {
            self.record_len(end)?;
        }
        Ok(())
    }

    /// Waits for the oldest operation in flight and accounts for it.
    fn reap(&self, window: &mut Window, progress: &mut [Progress]) {
        let Some(op) = window.ops.pop_front() else {
            return;
        };
        let r = op.completion.wait();
        let p = &mut progress[op.request];
        let c = &self.counters;
        match (op.write, r) {
            (false, Ok(n)) => {
                let n = n.min(op.len);
                if n < op.len {
                    // Short object: the rest of the piece is a hole.
                    // SAFETY: op.buf..op.buf+op.len is within the request's
                    // buffer, which nothing else touches until submit
                    // returns, and the read has completed.
                    unsafe { std::ptr::write_bytes(op.buf.add(n), 0, op.len - n) };
                }
                c.reads.fetch_add(1, Relaxed);
                c.bytes_read.fetch_add(n as u64, Relaxed);
            }
            (false, Err(libc::ENOENT)) => {
                // No object: all of the piece is a hole.
                // SAFETY: as above.
                unsafe { std::ptr::write_bytes(op.buf, 0, op.len) };
                c.reads.fetch_add(1, Relaxed);
            }
            (true, Ok(_)) => {
                c.writes.fetch_add(1, Relaxed);
                c.bytes_written.fetch_add(op.len as u64, Relaxed);
                c.largest_write.fetch_max(op.len as u64, Relaxed);
            }
            (write, Err(e)) => {
                let what = if write { StoreOp::Write } else { StoreOp::Read };
                let err = self.fail(what, op.offset, op.offset / self.object_size, e);
                // The error of a request is its lowest failed offset.
                if p.error.is_none_or(|prev| prev.offset > op.offset) {
                    p.error = Some(err);
                }
            }
        }
    }

    /// Starts one object operation of request `request`; on failure to
    /// start, records the error on the request.
    ///
    /// # Safety
    ///
    /// `buf..buf+len` must be the request's buffer (or part of it), valid
    /// until `window` has been drained, and touched by nothing else
    /// meanwhile.
    unsafe fn start(
        &self,
        window: &mut Window,
        progress: &mut [Progress],
        request: usize,
        (write, offset, buf, len): (bool, u64, *mut u8, usize),
    ) -> bool {
        while window.ops.len() >= self.depth {
            self.reap(window, progress);
        }
        let index = offset / self.object_size;
        let within = offset % self.object_size;
        let name = self.data_name(index);
        let op = StoreOp::from_write(write);
        let completion = match Completion::new() {
            Ok(c) => c,
            Err(e) => {
                progress[request].error = Some(self.fail(op, offset, index, e));
                return false;
            }
        };
        let started = if write {
            // SAFETY: the caller keeps buf valid and unchanged until the
            // window is drained, which waits for this completion.
            unsafe {
                self.io
                    .aio_write(name.as_cstr(), &completion, buf, len, within)
            }
        } else {
            // SAFETY: as above, and nothing else reads or writes buf.
            unsafe {
                self.io
                    .aio_read(name.as_cstr(), &completion, buf, len, within)
            }
        };
        if let Err(e) = started {
            progress[request].error = Some(self.fail(op, offset, index, e));
            return false;
        }
        window.ops.push_back(InFlight {
            completion,
            request,
            write,
            offset,
            buf,
            len,
        });
        self.counters
            .max_in_flight
            .fetch_max(window.ops.len() as u64, Relaxed);
        true
    }
}

impl StoreOp {
    fn from_write(write: bool) -> StoreOp {
        if write { StoreOp::Write } else { StoreOp::Read }
    }
}

/// One object operation in flight.
struct InFlight {
    completion: Completion,
    request: usize,
    write: bool,
    /// Store offset of the piece.
    offset: u64,
    buf: *mut u8,
    len: usize,
}

/// The operations in flight of one `submit`. Dropping it (also when
/// unwinding) waits for all of them, so that no buffer is released while
/// librados may still write into it.
struct Window {
    ops: VecDeque<InFlight>,
}

impl Drop for Window {
    fn drop(&mut self) {
        for op in self.ops.drain(..) {
            // The result is irrelevant here: only the wait matters.
            let _ = op.completion.wait();
        }
    }
}

/// The outcome so far of one request of a batch.
#[derive(Clone, Copy, Default)]
struct Progress {
    /// Whether the store works on it (false: it came with a result).
    active: bool,
    /// Bytes it moves once all its pieces succeed.
    bytes: usize,
    error: Option<StoreError>,
}

impl Store for RadosStore {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.len.load(Relaxed))
    }

    fn set_len(&self, new: u64) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::new(StoreOp::Len, 0, libc::EBADF));
        }
        let _g = self.len_lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.len.load(Relaxed);
        if new < old {
            // Data first, so that no object holds bytes past the length.
            let first_gone = new.div_ceil(self.object_size);
            for index in first_gone..old.div_ceil(self.object_size) {
                self.remove_object(index)
                    .map_err(|e| self.fail(StoreOp::Len, 0, index, e))?;
            }
            if !new.is_multiple_of(self.object_size) {
                let index = new / self.object_size;
                match self
                    .io
                    .trunc(self.data_name(index).as_cstr(), new % self.object_size)
                {
                    Ok(()) | Err(libc::ENOENT) => {}
                    Err(e) => return Err(self.fail(StoreOp::Len, 0, index, e)),
                }
            }
        }
        if new != old {
            self.record_len(new)?;
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        crate::request::read_one(self, offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        crate::request::write_one(self, offset, buf)
    }

    fn sync(&self) -> Result<(), StoreError> {
        // Every write this store started was waited for until the cluster
        // committed it; this also covers writes of other users of the
        // context, should there be any.
        self.io
            .aio_flush()
            .map_err(|e| self.fail(StoreOp::Sync, 0, META_INDEX, e))
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    /// Zeroes the range within the store (objects are written with zeros,
    /// 1 MiB per request, a batch in flight at a time); the length is
    /// unchanged.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::new(StoreOp::PunchHole, offset, libc::EBADF));
        }
        const CHUNK: u64 = 1 << 20;
        let end = offset.saturating_add(len).min(self.len.load(Relaxed));
        let zeros = vec![0u8; CHUNK.min(end.saturating_sub(offset)) as usize];
        let mut at = offset;
        while at < end {
            let mut batch: Vec<IoRequest<'_>> = Vec::new();
            while at < end && batch.len() < self.depth.max(1) {
                let n = CHUNK.min(end - at) as usize;
                batch.push(IoRequest::write(at, &zeros[..n]));
                at += n as u64;
            }
            self.submit(&mut batch);
            for r in &batch {
                r.result().unwrap_or(Err(StoreError::new(
                    StoreOp::Write,
                    r.offset(),
                    libc::EIO,
                )))?;
            }
        }
        Ok(())
    }

    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        self.counters.batches.fetch_add(1, Relaxed);
        // Writes past the end record the new length first.
        let end = batch
            .iter()
            .filter(|r| r.is_write() && r.result().is_none())
            .map(|r| r.offset().saturating_add(r.len() as u64))
            .max();
        let extend_error = match end {
            Some(end) if self.writable && end > self.len.load(Relaxed) => self.extend_to(end).err(),
            _ => None,
        };
        let len = self.len.load(Relaxed);
        let mut progress = vec![Progress::default(); batch.len()];
        let mut window = Window {
            ops: VecDeque::with_capacity(self.depth),
        };
        for (i, req) in batch.iter_mut().enumerate() {
            if req.result().is_some() {
                continue;
            }
            let offset = req.offset();
            let write = req.is_write();
            if write && !self.writable {
                req.complete(Err(StoreError::new(StoreOp::Write, offset, libc::EBADF)));
                continue;
            }
            let (buf, bytes) = if write {
                if offset.saturating_add(req.len() as u64) > len {
                    let e = extend_error.unwrap_or(StoreError::new(
                        StoreOp::Write,
                        offset,
                        libc::EFBIG,
                    ));
                    req.complete(Err(e));
                    continue;
                }
                let b = req.write_buf().unwrap_or_default();
                // Only read through: aio_write takes a const pointer.
                (b.as_ptr().cast_mut(), b.len())
            } else {
                let n = len.saturating_sub(offset).min(req.len() as u64) as usize;
                let b = req.read_buf().unwrap_or_default();
                (b.as_mut_ptr(), n)
            };
            progress[i] = Progress {
                active: true,
                bytes,
                error: None,
            };
            let mut done = 0;
            while done < bytes {
                let at = offset + done as u64;
                let room = (self.object_size - at % self.object_size) as usize;
                let take = room.min(bytes - done);
                // SAFETY: buf+done..buf+done+take lies in the request's
                // buffer, which the batch borrows until this function
                // returns, after `window` is drained; no two requests of a
                // batch overlap, and this function touches a buffer only
                // through these pointers until then.
                let ok = unsafe {
                    self.start(
                        &mut window,
                        &mut progress,
                        i,
                        (write, at, buf.add(done), take),
                    )
                };
                if !ok {
                    break;
                }
                done += take;
            }
        }
        while !window.ops.is_empty() {
            self.reap(&mut window, &mut progress);
        }
        drop(window);
        for (req, p) in batch.iter_mut().zip(&progress) {
            if p.active {
                req.complete(p.error.map_or(Ok(p.bytes), Err));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_prefix_dot_16_hex_digits() {
        let n = ObjectName::new(b"set/a", 0x1f);
        assert_eq!(n.as_cstr(), c"set/a.000000000000001f");
        let long = "p".repeat(MAX_PREFIX);
        let n = ObjectName::new(long.as_bytes(), u64::MAX - 1);
        let want = format!("{long}.fffffffffffffffe");
        assert_eq!(n.as_cstr().to_str().unwrap(), want);
        let o = RadosOptions::new("pool", "set/a");
        assert_eq!(o.object_name(0x1f), "set/a.000000000000001f");
    }

    #[test]
    fn bad_options_are_einval_before_any_connection() {
        let cases = [
            RadosOptions::new("pool", ""),
            RadosOptions::new("pool", "a\0b"),
            RadosOptions::new("pool", "p".repeat(MAX_PREFIX + 1)),
            RadosOptions::new("", "x"),
            RadosOptions::new("pool", "x").object_size(1000),
            RadosOptions::new("pool", "x").object_size(0),
            RadosOptions::new("pool", "x").object_size(128 << 20),
            RadosOptions::new("pool", "x").queue_depth(0),
            RadosOptions::new("pool", "x").client("a\0b"),
        ];
        for o in cases {
            let e = RadosStore::open(&o).unwrap_err();
            assert_eq!((e.op, e.errno), ("check options", libc::EINVAL), "{o:?}");
        }
    }

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(secs(Duration::ZERO).as_bytes(), b"0");
        assert_eq!(secs(Duration::from_millis(1500)).as_bytes(), b"2");
        assert_eq!(secs(Duration::from_secs(30)).as_bytes(), b"30");
    }
}
