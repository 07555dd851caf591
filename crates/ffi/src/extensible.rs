//! Structures that may grow: the convention of Linux's extensible
//! system-call structures (`clone3`, `openat2`, `sched_setattr`,
//! `perf_event_attr`). The first member of such a structure is a `size_t
//! size` that the caller sets to `sizeof` its own copy of the structure;
//! umio never touches a byte past `size`.
//!
//! - A structure umio reads (`umio_map_options`): the first
//!   `min(size, sizeof)` bytes are read, fields the caller's (older, smaller)
//!   structure lacks are zero, which is each field's default. A caller's
//!   (newer, larger) structure whose bytes past umio's are not all zero asks
//!   for something this library does not know: `E2BIG`.
//! - A structure umio writes (`umio_stats`, `umio_runtime_stats`): the
//!   first `min(size, sizeof)` bytes are written, the caller's bytes past
//!   umio's structure are zeroed, and `size` is set to the bytes umio
//!   filled (so a newer caller learns which fields an older library left
//!   out).
//! - `size` smaller than `sizeof(size_t)` (0: not set) is `EINVAL`.

use std::mem::size_of;

use crate::boundary::{Errno, check_ptr};

/// A `#[repr(C)]` structure whose first member is `size: usize`.
///
/// # Safety
/// The type is `#[repr(C)]`, its first field is a `usize` at offset 0, and
/// every bit pattern of all zeros, and every byte sequence made of a valid
/// value's bytes cut at any length followed by zeros, is a valid value
/// (integers, floating-point numbers and raw pointers only).
pub(crate) unsafe trait Extensible: Copy {}

/// The caller's `size` member, checked: at least `sizeof(size_t)`.
///
/// # Safety
/// `p` is non-null, aligned and points to at least `sizeof(size_t)`
/// readable bytes.
unsafe fn caller_size<T>(p: *const T) -> Result<usize, Errno> {
    // SAFETY: by the caller's promise, the first member is readable.
    let size = unsafe { p.cast::<usize>().read() };
    if size < size_of::<usize>() {
        return Err(Errno(libc::EINVAL));
    }
    Ok(size)
}

/// Reads the caller's structure at `p` as described in the module
/// documentation: `EINVAL` for a NULL or misaligned pointer or a `size`
/// below `sizeof(size_t)`, `E2BIG` for non-zero bytes past umio's fields.
///
/// # Safety
/// `p` is NULL, or points to a structure whose first `size` bytes are
/// readable.
pub(crate) unsafe fn read<T: Extensible>(p: *const T) -> Result<T, Errno> {
    check_ptr(p)?;
    // SAFETY: non-null and aligned; the first member is readable by the
    // caller's promise.
    let size = unsafe { caller_size(p) }?;
    let bytes = p.cast::<u8>();
    let ours = size_of::<T>();
    if size > ours {
        // SAFETY: the caller promised `size` readable bytes.
        let tail = unsafe { std::slice::from_raw_parts(bytes.add(ours), size - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(Errno(libc::E2BIG));
        }
    }
    // SAFETY: all zeros is a valid `T` (the trait's contract).
    let mut value: T = unsafe { std::mem::zeroed() };
    // SAFETY: `min(size, ours)` bytes are readable at `bytes` (the
    // caller's promise) and writable at `value`; the two do not overlap;
    // the result is a valid `T` by the trait's contract.
    unsafe { std::ptr::copy_nonoverlapping(bytes, (&raw mut value).cast::<u8>(), size.min(ours)) };
    Ok(value)
}

/// Writes `value` to the caller's structure at `out` as described in the
/// module documentation (its `size` member is ignored in `value`).
///
/// # Safety
/// `out` is NULL, or points to a structure whose first member is readable
/// and whose first `size` bytes are writable.
pub(crate) unsafe fn write<T: Extensible>(out: *mut T, value: T) -> Result<(), Errno> {
    check_ptr(out)?;
    // SAFETY: non-null and aligned; the first member is readable by the
    // caller's promise.
    let size = unsafe { caller_size(out) }?;
    let ours = size_of::<T>();
    let n = size.min(ours);
    let bytes = out.cast::<u8>();
    // SAFETY: `n` bytes are readable at `value` and writable at `bytes`
    // (the caller's promise); no overlap. The zeroed tail and the size
    // member are within the caller's `size` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), bytes, n);
        if size > ours {
            std::ptr::write_bytes(bytes.add(ours), 0, size - ours);
        }
        out.cast::<usize>().write(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct New {
        size: usize,
        a: u64,
        b: u64,
    }
    // SAFETY: repr(C), `size` first, integers only.
    unsafe impl Extensible for New {}

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Old {
        size: usize,
        a: u64,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Newer {
        size: usize,
        a: u64,
        b: u64,
        c: u64,
    }

    #[test]
    fn an_older_struct_is_read_with_zeros_for_the_rest() {
        let old = Old {
            size: size_of::<Old>(),
            a: 7,
        };
        // SAFETY: `old` has `size` readable bytes.
        let v = unsafe { read((&raw const old).cast::<New>()) }.unwrap();
        assert_eq!((v.a, v.b), (7, 0));
    }

    #[test]
    fn a_newer_struct_with_unknown_fields_set_is_e2big() {
        let mut newer = Newer {
            size: size_of::<Newer>(),
            a: 1,
            b: 2,
            c: 0,
        };
        // SAFETY: `newer` has `size` readable bytes.
        let v = unsafe { read((&raw const newer).cast::<New>()) }.unwrap();
        assert_eq!((v.a, v.b), (1, 2));
        newer.c = 3;
        // SAFETY: as above.
        let e = unsafe { read((&raw const newer).cast::<New>()) };
        assert_eq!(e, Err(Errno(libc::E2BIG)));
    }

    #[test]
    fn size_zero_and_null_are_einval() {
        let unset = New {
            size: 0,
            a: 0,
            b: 0,
        };
        // SAFETY: readable.
        assert_eq!(unsafe { read(&raw const unset) }, Err(Errno(libc::EINVAL)));
        // SAFETY: NULL is allowed.
        let null = unsafe { read(std::ptr::null::<New>()) };
        assert_eq!(null, Err(Errno(libc::EINVAL)));
    }

    #[test]
    fn writes_stop_at_the_callers_size_and_zero_a_newer_tail() {
        let mut buf = [u64::MAX; 4];
        buf[0] = size_of::<Old>() as u64;
        let value = New {
            size: 999,
            a: 5,
            b: 6,
        };
        // SAFETY: `buf` has 32 writable bytes, more than `size`.
        unsafe { write(buf.as_mut_ptr().cast::<New>(), value) }.unwrap();
        assert_eq!(
            buf,
            [16, 5, u64::MAX, u64::MAX],
            "nothing past the old size"
        );
        buf[0] = 32;
        // SAFETY: as above.
        unsafe { write(buf.as_mut_ptr().cast::<New>(), value) }.unwrap();
        assert_eq!(
            buf,
            [24, 5, 6, 0],
            "size says what umio filled; the tail is zero"
        );
    }
}
