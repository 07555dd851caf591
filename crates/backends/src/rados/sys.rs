//! The part of librados's C API the RADOS store uses, declared by hand
//! (that API has been stable since librados 3.0; no bindgen, no libclang),
//! and thin safe owners of its handles. Everything `unsafe` about librados
//! is in this file.
//!
//! librados returns negative errnos; the wrappers return them as positive
//! values in `Err`.

use std::ffi::{CStr, c_char, c_int, c_void};

type RadosT = *mut c_void;
type IoCtxT = *mut c_void;
type CompletionT = *mut c_void;
type WriteOpT = *mut c_void;
type Callback = Option<unsafe extern "C" fn(CompletionT, *mut c_void)>;

/// `LIBRADOS_CREATE_EXCLUSIVE`: fail with `EEXIST` if the object exists.
const CREATE_EXCLUSIVE: c_int = 1;

#[link(name = "rados")]
unsafe extern "C" {
    fn rados_create(cluster: *mut RadosT, id: *const c_char) -> c_int;
    fn rados_conf_read_file(cluster: RadosT, path: *const c_char) -> c_int;
    fn rados_conf_set(cluster: RadosT, option: *const c_char, value: *const c_char) -> c_int;
    fn rados_connect(cluster: RadosT) -> c_int;
    fn rados_shutdown(cluster: RadosT);
    fn rados_ioctx_create(cluster: RadosT, pool: *const c_char, io: *mut IoCtxT) -> c_int;
    fn rados_ioctx_destroy(io: IoCtxT);

    fn rados_aio_create_completion2(
        arg: *mut c_void,
        complete: Callback,
        pc: *mut CompletionT,
    ) -> c_int;
    fn rados_aio_wait_for_complete(c: CompletionT) -> c_int;
    fn rados_aio_get_return_value(c: CompletionT) -> c_int;
    fn rados_aio_release(c: CompletionT);
    fn rados_aio_read(
        io: IoCtxT,
        oid: *const c_char,
        c: CompletionT,
        buf: *mut c_char,
        len: usize,
        off: u64,
    ) -> c_int;
    fn rados_aio_write(
        io: IoCtxT,
        oid: *const c_char,
        c: CompletionT,
        buf: *const c_char,
        len: usize,
        off: u64,
    ) -> c_int;
    fn rados_aio_flush(io: IoCtxT) -> c_int;

    fn rados_trunc(io: IoCtxT, oid: *const c_char, size: u64) -> c_int;
    fn rados_remove(io: IoCtxT, oid: *const c_char) -> c_int;
    fn rados_getxattr(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;
    fn rados_setxattr(
        io: IoCtxT,
        oid: *const c_char,
        name: *const c_char,
        buf: *const c_char,
        len: usize,
    ) -> c_int;

    fn rados_create_write_op() -> WriteOpT;
    fn rados_release_write_op(op: WriteOpT);
    fn rados_write_op_create(op: WriteOpT, exclusive: c_int, category: *const c_char);
    fn rados_write_op_setxattr(op: WriteOpT, name: *const c_char, value: *const c_char, len: usize);
    fn rados_write_op_operate(
        op: WriteOpT,
        io: IoCtxT,
        oid: *const c_char,
        mtime: *mut libc::time_t,
        flags: c_int,
    ) -> c_int;
}

/// A librados return value: negative errno, or a count.
fn check(r: c_int) -> Result<usize, i32> {
    if r < 0 { Err(-r) } else { Ok(r as usize) }
}

/// A cluster handle (`rados_t`), shut down on drop.
pub struct Cluster(RadosT);

// SAFETY: librados's cluster handle is thread-safe once connected (its
// calls lock internally); before connecting only the thread that created
// it configures it (`&mut self` methods).
unsafe impl Send for Cluster {}
// SAFETY: as above; shared access only issues thread-safe calls.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// A handle for the client `client.<id>` (`None`: librados's default,
    /// `client.admin`), not yet connected.
    pub fn create(id: Option<&CStr>) -> Result<Cluster, i32> {
        let mut h: RadosT = std::ptr::null_mut();
        let id = id.map_or(std::ptr::null(), CStr::as_ptr);
        // SAFETY: h is a valid out-pointer; id is null (the default) or a
        // C string.
        check(unsafe { rados_create(&mut h, id) })?;
        Ok(Cluster(h))
    }

    /// Reads a ceph.conf; `None` searches librados's default places
    /// (`$CEPH_CONF`, `/etc/ceph/ceph.conf`, `~/.ceph/config`, `./ceph.conf`).
    pub fn conf_read_file(&mut self, path: Option<&CStr>) -> Result<(), i32> {
        let p = path.map_or(std::ptr::null(), CStr::as_ptr);
        // SAFETY: self.0 is a live handle; p is null or a C string.
        check(unsafe { rados_conf_read_file(self.0, p) }).map(drop)
    }

    /// Sets one configuration option.
    pub fn conf_set(&mut self, option: &CStr, value: &CStr) -> Result<(), i32> {
        // SAFETY: a live handle and two C strings.
        check(unsafe { rados_conf_set(self.0, option.as_ptr(), value.as_ptr()) }).map(drop)
    }

    /// Connects to the monitors (waits up to `client_mount_timeout`).
    pub fn connect(&mut self) -> Result<(), i32> {
        // SAFETY: a live, configured handle.
        check(unsafe { rados_connect(self.0) }).map(drop)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle is live and no I/O context of it is (IoCtx
        // owns its Cluster and destroys itself first). rados_shutdown
        // returns nothing to check.
        unsafe { rados_shutdown(self.0) }
    }
}

/// An I/O context (`rados_ioctx_t`) on one pool, owning its cluster handle.
pub struct IoCtx {
    io: IoCtxT,
    // Dropped after `io` is destroyed (Drop::drop runs before fields drop).
    _cluster: Cluster,
}

// SAFETY: librados I/O contexts are thread-safe for I/O (reads, writes,
// xattrs, completions); this type never changes the context's state
// (snapshot, locator, namespace) after creation.
unsafe impl Send for IoCtx {}
// SAFETY: as above.
unsafe impl Sync for IoCtx {}

impl IoCtx {
    /// An I/O context on `pool` of a connected cluster.
    pub fn new(cluster: Cluster, pool: &CStr) -> Result<IoCtx, i32> {
        let mut io: IoCtxT = std::ptr::null_mut();
        // SAFETY: a connected handle, a C string and a valid out-pointer.
        check(unsafe { rados_ioctx_create(cluster.0, pool.as_ptr(), &mut io) })?;
        Ok(IoCtx {
            io,
            _cluster: cluster,
        })
    }

    /// Starts an asynchronous read of `len` bytes at `off` of `oid` into
    /// `buf`; `c` completes with the bytes read or `-errno`.
    ///
    /// # Safety
    ///
    /// `buf..buf+len` must be writable and stay valid, and not be accessed
    /// otherwise, until `c` has completed ([`Completion::wait`]).
    pub unsafe fn aio_read(
        &self,
        oid: &CStr,
        c: &Completion,
        buf: *mut u8,
        len: usize,
        off: u64,
    ) -> Result<(), i32> {
        // SAFETY: the caller keeps buf valid until completion; oid is
        // copied by librados before the call returns.
        check(unsafe { rados_aio_read(self.io, oid.as_ptr(), c.0, buf.cast(), len, off) }).map(drop)
    }

    /// Starts an asynchronous write of `len` bytes from `buf` at `off` of
    /// `oid`; `c` completes with 0 or `-errno` once every replica of the
    /// object's placement group has committed it.
    ///
    /// # Safety
    ///
    /// `buf..buf+len` must be readable and stay valid and unchanged until
    /// `c` has completed ([`Completion::wait`]).
    pub unsafe fn aio_write(
        &self,
        oid: &CStr,
        c: &Completion,
        buf: *const u8,
        len: usize,
        off: u64,
    ) -> Result<(), i32> {
        // SAFETY: the caller keeps buf valid until completion; librados
        // references it (no copy) until then.
        check(unsafe { rados_aio_write(self.io, oid.as_ptr(), c.0, buf.cast(), len, off) })
            .map(drop)
    }

    /// Waits until every asynchronous write started on this context has
    /// completed.
    pub fn aio_flush(&self) -> Result<(), i32> {
        // SAFETY: a live context.
        check(unsafe { rados_aio_flush(self.io) }).map(drop)
    }

    /// Truncates (or extends with zeros) `oid` to `size` bytes.
    pub fn trunc(&self, oid: &CStr, size: u64) -> Result<(), i32> {
        // SAFETY: a live context and a C string.
        check(unsafe { rados_trunc(self.io, oid.as_ptr(), size) }).map(drop)
    }

    /// Deletes `oid`.
    pub fn remove(&self, oid: &CStr) -> Result<(), i32> {
        // SAFETY: a live context and a C string.
        check(unsafe { rados_remove(self.io, oid.as_ptr()) }).map(drop)
    }

    /// Reads the extended attribute `name` of `oid` into `buf`; returns
    /// its length (`ERANGE` if `buf` is too small).
    pub fn getxattr(&self, oid: &CStr, name: &CStr, buf: &mut [u8]) -> Result<usize, i32> {
        // SAFETY: buf is a writable slice of the given length.
        check(unsafe {
            rados_getxattr(
                self.io,
                oid.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        })
    }

    /// Sets the extended attribute `name` of `oid` (creating the object).
    pub fn setxattr(&self, oid: &CStr, name: &CStr, value: &[u8]) -> Result<(), i32> {
        // SAFETY: value is a readable slice of the given length.
        check(unsafe {
            rados_setxattr(
                self.io,
                oid.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
            )
        })
        .map(drop)
    }

    /// Creates `oid` with extended attributes `attrs`, atomically: fails
    /// with `EEXIST` (and changes nothing) if the object exists.
    pub fn create_exclusive(&self, oid: &CStr, attrs: &[(&CStr, &[u8])]) -> Result<(), i32> {
        // SAFETY: no arguments; returns a new operation or null.
        let op = unsafe { rados_create_write_op() };
        if op.is_null() {
            return Err(libc::ENOMEM);
        }
        // SAFETY: op is a live write operation; the strings and values
        // outlive rados_write_op_operate, which runs it synchronously; the
        // operation is released exactly once, after it ran.
        unsafe {
            rados_write_op_create(op, CREATE_EXCLUSIVE, std::ptr::null());
            for (name, value) in attrs {
                rados_write_op_setxattr(op, name.as_ptr(), value.as_ptr().cast(), value.len());
            }
            let r = rados_write_op_operate(op, self.io, oid.as_ptr(), std::ptr::null_mut(), 0);
            rados_release_write_op(op);
            check(r).map(drop)
        }
    }
}

impl Drop for IoCtx {
    fn drop(&mut self) {
        // SAFETY: the context is live, and no operation on it is pending:
        // every aio operation is waited for before the call that started
        // it returns.
        unsafe { rados_ioctx_destroy(self.io) }
    }
}

/// An asynchronous operation's completion, released on drop.
pub struct Completion(CompletionT);

impl Completion {
    /// A completion with no callback: its owner waits for it.
    pub fn new() -> Result<Completion, i32> {
        let mut c: CompletionT = std::ptr::null_mut();
        // SAFETY: no callback, a valid out-pointer.
        check(unsafe { rados_aio_create_completion2(std::ptr::null_mut(), None, &mut c) })?;
        Ok(Completion(c))
    }

    /// Waits for the operation and returns its result: a count, or the
    /// positive errno.
    pub fn wait(&self) -> Result<usize, i32> {
        // SAFETY: a live completion of a started operation.
        unsafe { rados_aio_wait_for_complete(self.0) };
        // SAFETY: as above; the operation has completed.
        check(unsafe { rados_aio_get_return_value(self.0) })
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // SAFETY: a live completion, released once. librados keeps its own
        // reference while an operation is pending, so releasing early is
        // allowed (the store never does: it waits first).
        unsafe { rados_aio_release(self.0) }
    }
}
