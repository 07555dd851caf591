//! A store written in C: `struct umio_store_ops` as a [`Store`].

use std::ffi::{c_int, c_void};
use std::ops::Deref;

use umio_backends::{Store, StoreError, StoreOp};

use crate::ops::{OwnedOps, callback_table};

/// A store written in C: callbacks umio calls to read and write the bytes
/// of a mapping made with `umio_map_options.store`.
///
/// Callbacks are called from umio's threads and from threads calling
/// `umio_flush` or `umio_unmap`, several at once: they must be thread-safe.
/// Each gets `user` as its first argument. A callback reports failure by
/// returning a negative errno (`-EIO`, `-ENOSPC`, ...); umio passes that
/// errno on (a failed read raises SIGBUS in the thread that touched the
/// page; a failed write is returned by the next flush or unmap, and the
/// pages stay dirty).
///
/// Ownership: from the moment `umio_map` is called with these ops, umio
/// owns `user`. `release`, if set, is called exactly once for each such
/// `umio_map` call: before `umio_map` returns if it fails, otherwise once
/// umio is done with the store, after the mapping is unmapped. No other
/// callback is called after `release`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umio_store_ops {
    /// Required. Reads up to `len` bytes at `offset` into `buf`; returns the
    /// bytes read, fewer than `len` only at the end of the store (umio
    /// zeroes the rest), or a negative errno.
    pub read: Option<
        unsafe extern "C" fn(user: *mut c_void, offset: u64, buf: *mut c_void, len: usize) -> i64,
    >,
    /// Writes up to `len` bytes of `buf` at `offset`, extending the store if
    /// needed; returns the bytes written (umio calls again for the rest) or
    /// a negative errno. NULL makes the store read-only: `PROT_WRITE`
    /// mappings of it fail with `EACCES`.
    pub write: Option<
        unsafe extern "C" fn(user: *mut c_void, offset: u64, buf: *const c_void, len: usize) -> i64,
    >,
    /// Makes every write that has returned durable; returns 0 or a negative
    /// errno. Called by `umio_flush`, `umap_flush` and unmapping. NULL:
    /// nothing to do.
    pub flush: Option<unsafe extern "C" fn(user: *mut c_void) -> c_int>,
    /// Required. The store's length in bytes, or a negative errno.
    pub size: Option<unsafe extern "C" fn(user: *mut c_void) -> i64>,
    /// Sets the store's length (a `PROT_WRITE` mapping reaching past the
    /// end extends the store when it is mapped); returns 0 or a negative
    /// errno. NULL: the length cannot change, and such mappings fail with
    /// `EFBIG`.
    pub resize: Option<unsafe extern "C" fn(user: *mut c_void, size: u64) -> c_int>,
    /// Called once when umio no longer needs `user` (see above). May be
    /// NULL.
    pub release: Option<unsafe extern "C" fn(user: *mut c_void)>,
    /// Passed to every callback.
    pub user: *mut c_void,
}

/// The errno in a callback's negative result; `EIO` for a value that is
/// not one.
fn errno_of(ret: i64) -> i32 {
    match ret.checked_neg() {
        Some(e) if (1..4096).contains(&e) => e as i32,
        _ => libc::EIO,
    }
}

callback_table!(umio_store_ops, required: read, size);

/// The optional hole-punching callback of a C store,
/// `umio_map_options.store_punch_hole`: a member of the extensible options
/// rather than of [`umio_store_ops`], which has no `size` member and so
/// cannot grow without breaking programs built against an older header.
pub(crate) type PunchHoleFn =
    unsafe extern "C" fn(user: *mut c_void, offset: u64, len: u64) -> c_int;

/// [`umio_store_ops`] copied at map time, with its optional
/// `punch_hole`; releases `user` on drop.
pub(crate) struct CStore {
    ops: OwnedOps<umio_store_ops>,
    punch_hole: Option<PunchHoleFn>,
}

impl CStore {
    /// Takes ownership of `ops.user` (released on drop).
    pub(crate) fn new(ops: &umio_store_ops, punch_hole: Option<PunchHoleFn>) -> CStore {
        CStore {
            ops: OwnedOps::new(ops),
            punch_hole,
        }
    }
}

impl Deref for CStore {
    type Target = OwnedOps<umio_store_ops>;

    fn deref(&self) -> &OwnedOps<umio_store_ops> {
        &self.ops
    }
}

impl Store for CStore {
    fn len(&self) -> Result<u64, StoreError> {
        let Some(size) = self.size else {
            return Err(StoreError::new(StoreOp::Len, 0, libc::EINVAL));
        };
        // SAFETY: a callback of the ops' owner, called with its `user`
        // while the store is live, as the ops' contract allows.
        let n = unsafe { size(self.user) };
        u64::try_from(n).map_err(|_| StoreError::new(StoreOp::Len, 0, errno_of(n)))
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        let Some(resize) = self.resize else {
            return Err(StoreError::new(StoreOp::Len, len, libc::EFBIG));
        };
        // SAFETY: as in `len`.
        let r = unsafe { resize(self.user, len) };
        if r < 0 {
            return Err(StoreError::new(StoreOp::Len, len, errno_of(r.into())));
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let Some(read) = self.read else {
            return Err(StoreError::new(StoreOp::Read, offset, libc::EINVAL));
        };
        // SAFETY: as in `len`; `buf` is valid for writes of `buf.len()`
        // bytes for the duration of the call.
        let n = unsafe { read(self.user, offset, buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(n) if n <= buf.len() => Ok(n),
            Ok(_) => Err(StoreError::new(StoreOp::Read, offset, libc::EIO)),
            Err(_) => Err(StoreError::new(StoreOp::Read, offset, errno_of(n))),
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        let Some(write) = self.write else {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EBADF));
        };
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let rest = &buf[done..];
            // SAFETY: as in `len`; `rest` is valid for reads of its length
            // for the duration of the call.
            let n = unsafe { write(self.user, at, rest.as_ptr().cast(), rest.len()) };
            match usize::try_from(n) {
                Ok(n) if n > 0 && n <= rest.len() => done += n,
                // No progress, or more than asked: a broken callback.
                Ok(_) => return Err(StoreError::new(StoreOp::Write, at, libc::EIO)),
                Err(_) => return Err(StoreError::new(StoreOp::Write, at, errno_of(n))),
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        let Some(flush) = self.flush else {
            return Ok(());
        };
        // SAFETY: as in `len`.
        let r = unsafe { flush(self.user) };
        if r < 0 {
            return Err(StoreError::new(StoreOp::Sync, 0, errno_of(r.into())));
        }
        Ok(())
    }

    fn is_writable(&self) -> bool {
        self.write.is_some()
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        let Some(punch_hole) = self.punch_hole else {
            return Err(StoreError::new(
                StoreOp::PunchHole,
                offset,
                libc::EOPNOTSUPP,
            ));
        };
        // SAFETY: as in `len`.
        let r = unsafe { punch_hole(self.user, offset, len) };
        if r < 0 {
            return Err(StoreError::new(
                StoreOp::PunchHole,
                offset,
                errno_of(r.into()),
            ));
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "C store"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_results_are_errnos() {
        assert_eq!(errno_of(-libc::ENOSPC as i64), libc::ENOSPC);
        assert_eq!(errno_of(-1), libc::EPERM);
        assert_eq!(errno_of(-100_000), libc::EIO);
        assert_eq!(errno_of(i64::MIN), libc::EIO);
    }
}
