//! [`OwnedOps`]: the one owner of a C callback table (`struct
//! umio_store_ops`, `umio_eviction_ops`, `umio_prefetch_ops`,
//! `umio_promote_ops`) and of its `user` pointer, which it releases
//! exactly once.

use std::ffi::c_void;
use std::ops::Deref;

use crate::boundary::Errno;

/// A `release` callback of a C table.
pub(crate) type ReleaseFn = unsafe extern "C" fn(user: *mut c_void);

/// A C callback table: `#[repr(C)]` function pointers, a `user` pointer
/// passed to each, and a `release` that gives `user` back.
///
/// # Safety
/// The table's documented contract (on its C struct) must say that its
/// callbacks may be called from any thread, several at once, with `user`,
/// until `release`: [`OwnedOps`] is `Send` and `Sync` on that promise.
pub(crate) unsafe trait CallbackTable: Copy {
    /// The pointer passed to every callback.
    fn user(&self) -> *mut c_void;
    /// Called once when umio no longer needs `user`; may be NULL.
    fn release(&self) -> Option<ReleaseFn>;
    /// Whether the callbacks the table requires are set.
    fn is_complete(&self) -> bool;
}

/// A copy of a C callback table that owns its `user`: created when the C
/// caller hands the table over, it calls `release(user)` exactly once,
/// when dropped (after umio's last callback), including when the call that
/// took it fails. Share it with `Arc` where several owners need it.
pub(crate) struct OwnedOps<T: CallbackTable>(T);

// SAFETY: `T: CallbackTable` promises that the callbacks may be called
// from any thread, concurrently, with `user`; the copy itself is plain
// data, never written after it is made.
unsafe impl<T: CallbackTable> Send for OwnedOps<T> {}
// SAFETY: as above; `&OwnedOps` gives only reads of the table.
unsafe impl<T: CallbackTable> Sync for OwnedOps<T> {}

impl<T: CallbackTable> OwnedOps<T> {
    /// Takes ownership of `ops.user` (released on drop).
    pub(crate) fn new(ops: &T) -> OwnedOps<T> {
        OwnedOps(*ops)
    }

    /// `EINVAL` unless the required callbacks are set (the table is still
    /// owned, and released when dropped).
    pub(crate) fn check(&self) -> Result<(), Errno> {
        if self.0.is_complete() {
            Ok(())
        } else {
            Err(Errno(libc::EINVAL))
        }
    }
}

impl<T: CallbackTable> Deref for OwnedOps<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: CallbackTable> Drop for OwnedOps<T> {
    fn drop(&mut self) {
        if let Some(release) = self.0.release() {
            // SAFETY: `release` is called once (this drop; the table is not
            // `Clone`), with the `user` given with it, after umio's last
            // callback: every caller borrows `self`.
            unsafe { release(self.0.user()) };
        }
    }
}

/// Implements [`CallbackTable`] for a C table with `user` and `release`
/// fields and the named required callbacks.
macro_rules! callback_table {
    ($table:ty, required: $($field:ident),+) => {
        // SAFETY: the struct's documentation (its C contract) says its
        // callbacks may be called from any thread, concurrently, with
        // `user`.
        unsafe impl $crate::ops::CallbackTable for $table {
            fn user(&self) -> *mut ::std::ffi::c_void {
                self.user
            }
            fn release(&self) -> Option<$crate::ops::ReleaseFn> {
                self.release
            }
            fn is_complete(&self) -> bool {
                $(self.$field.is_some())&&+
            }
        }
    };
}
pub(crate) use callback_table;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Clone, Copy)]
    struct Table {
        required: Option<unsafe extern "C" fn(user: *mut c_void) -> i32>,
        release: Option<ReleaseFn>,
        user: *mut c_void,
    }
    callback_table!(Table, required: required);

    unsafe extern "C" fn count(user: *mut c_void) {
        // SAFETY: the tests pass a live AtomicUsize as `user`.
        unsafe { &*(user as *const AtomicUsize) }.fetch_add(1, Ordering::Relaxed);
    }

    unsafe extern "C" fn one(_: *mut c_void) -> i32 {
        1
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn release_runs_once_on_drop_and_required_callbacks_are_checked() {
        assert_send_sync::<OwnedOps<Table>>();
        let n = AtomicUsize::new(0);
        let user = &n as *const AtomicUsize as *mut c_void;
        let t = Table {
            required: Some(one),
            release: Some(count),
            user,
        };
        let ops = OwnedOps::new(&t);
        assert_eq!(ops.check(), Ok(()));
        assert_eq!(ops.user, user, "the table reads through");
        assert_eq!(n.load(Ordering::Relaxed), 0);
        drop(ops);
        assert_eq!(n.load(Ordering::Relaxed), 1);

        let ops = OwnedOps::new(&Table {
            required: None,
            ..t
        });
        assert_eq!(ops.check(), Err(Errno(libc::EINVAL)));
        drop(ops);
        assert_eq!(
            n.load(Ordering::Relaxed),
            2,
            "an incomplete table is released too"
        );

        drop(OwnedOps::new(&Table { release: None, ..t }));
        assert_eq!(n.load(Ordering::Relaxed), 2, "NULL release: nothing called");
    }
}
