//! umio's own C API (`umio.h`, generated from this module by cbindgen), a
//! file per C object: a mapping made and unmade ([`map`](self::map):
//! `umio_map_options`, `umio_map`, `umio_unmap`), operations on a range of
//! it ([`range`]: flush, write, advice, prefetch, pinning), its counters
//! ([`stats`]) and the process's runtime ([`runtime`]: `umio_config` and
//! its setters). The callback tables a C program hands over live in
//! [`store`](crate::store), [`policy`](crate::policy),
//! [`prefetcher`](crate::prefetcher) and [`promoter`](crate::promoter).

use std::ffi::{CStr, c_char};

use crate::boundary::Errno;

pub mod map;
pub mod range;
pub mod runtime;
pub mod stats;

pub use map::*;
pub use range::*;
pub use runtime::*;
pub use stats::*;

/// A NUL-terminated name, or `None` for NULL or `""`.
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn name<'a>(name: *const c_char) -> Result<Option<&'a str>, Errno> {
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller promised a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Errno(libc::EINVAL))?;
    Ok(Some(s).filter(|s| !s.is_empty()))
}
