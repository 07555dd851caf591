//! The boundary between C and Rust: every export runs its body through
//! [`ffi_boundary!`], which catches panics, turns errors into a positive
//! `errno` and returns the function's C sentinel.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

pub(crate) use umio_core::Errno;

/// errno reported when umio itself has a bug (a caught panic).
pub(crate) const PANIC_ERRNO: i32 = libc::ENOTRECOVERABLE;

pub(crate) fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid and exclusive to this thread for its whole life.
    unsafe { *libc::__errno_location() = errno };
}

/// Runs the body of an export: `Ok(v)` returns `v`; `Err(Errno(e))` sets
/// errno to `e` and returns `failed`; a panic sets errno to
/// `ENOTRECOVERABLE` and returns `failed`. Nothing unwinds into C.
pub(crate) fn run<T>(failed: T, body: impl FnOnce() -> Result<T, Errno>) -> T {
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(Errno(e))) => {
            set_errno(if e > 0 { e } else { libc::EIO });
            failed
        }
        Err(_) => {
            set_errno(PANIC_ERRNO);
            failed
        }
    }
}

/// A C library must not print on its own: panics (bugs) are reported
/// through errno and logged, and the log prints at `UMAP_LOG_LEVEL`'s
/// level (errors by default).
/// The hook belongs to this library's own copy of std, so it does not
/// change the panic output of a Rust program that loads libumio.
fn quiet_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            log::error!("umio: internal error: {info}");
        }));
    });
}

/// The body of every export: `ffi_boundary!(SENTINEL, { ... Ok(value) })`.
/// Inside, `?` converts umio's errors to their errno and `return
/// Err(Errno(..))` fails with a chosen one.
macro_rules! ffi_boundary {
    ($failed:expr, $body:block) => {
        $crate::boundary::run(
            $failed,
            || -> ::std::result::Result<_, $crate::boundary::Errno> { $body },
        )
    };
}
pub(crate) use ffi_boundary;

/// Fails with `EINVAL` unless `ptr` is non-null and aligned for `T`.
pub(crate) fn check_ptr<T>(ptr: *const T) -> Result<(), Errno> {
    if ptr.is_null() || !ptr.is_aligned() {
        return Err(Errno(libc::EINVAL));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        // SAFETY: reads this thread's errno slot.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn errors_set_errno_and_return_the_sentinel() {
        set_errno(0);
        let r: i32 = ffi_boundary!(-1, { Err(Errno(libc::EBADF)) });
        assert_eq!((r, errno()), (-1, libc::EBADF));
    }

    #[test]
    fn success_leaves_errno_alone() {
        set_errno(1234);
        let r: i32 = ffi_boundary!(-1, { Ok(7) });
        assert_eq!((r, errno()), (7, 1234));
    }

    #[test]
    fn panics_are_caught() {
        let r: i32 = ffi_boundary!(-1, {
            if errno() != -5 {
                panic!("a bug");
            }
            Ok(0)
        });
        assert_eq!((r, errno()), (-1, PANIC_ERRNO));
    }

    #[test]
    fn core_errors_keep_their_errno() {
        let r: i32 = ffi_boundary!(-1, {
            Err(umio_core::Error::ReadOnlyStore)?;
            Ok(0)
        });
        assert_eq!((r, errno()), (-1, libc::EACCES));
    }

    #[test]
    fn null_and_misaligned_pointers_are_refused() {
        let x = 0u64;
        assert!(check_ptr(&x as *const u64).is_ok());
        assert_eq!(check_ptr(std::ptr::null::<u64>()), Err(Errno(libc::EINVAL)));
        let odd = (&x as *const u64 as usize + 1) as *const u64;
        assert_eq!(check_ptr(odd), Err(Errno(libc::EINVAL)));
    }
}
