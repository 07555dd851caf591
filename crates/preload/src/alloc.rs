//! The interposed allocator (heap mode) and the shim's own Rust allocator.
//!
//! Allocations of at least `UMIO_HEAP_MIN_ALLOC` bytes come from the umio
//! heap; smaller ones, and every allocation before the library's
//! constructor ran or while heap mode is off, go to glibc through its
//! `__libc_*` entry points. The shim's own Rust code (umio included)
//! allocates through [`LibcAllocator`], straight from glibc: it never
//! reaches the interposed `malloc`.

use std::alloc::{GlobalAlloc, Layout};
use std::panic::{AssertUnwindSafe, catch_unwind};

use libc::{c_int, c_void, size_t};

use crate::{heap, sys};

/// glibc's `malloc` guarantees this alignment on 64-bit targets.
const MALLOC_ALIGN: usize = 16;

/// Rust's allocations in the shim: glibc's allocator, directly.
pub(crate) struct LibcAllocator;

// SAFETY: glibc's allocator returns blocks of at least the size asked,
// aligned as asked (memalign for alignments above malloc's), valid until
// freed; realloc keeps the contents.
unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            sys::libc_malloc(layout.size()).cast()
        } else {
            sys::libc_memalign(layout.align(), layout.size()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            return sys::libc_calloc(1, layout.size()).cast();
        }
        let p = sys::libc_memalign(layout.align(), layout.size()).cast::<u8>();
        if !p.is_null() {
            // SAFETY: a fresh block of layout.size() bytes.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: GlobalAlloc's contract: ptr came from this allocator.
        unsafe { sys::libc_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: ptr came from this allocator, hence from glibc.
            return unsafe { sys::libc_realloc(ptr.cast(), new_size) }.cast();
        }
        // SAFETY: the new layout has a valid alignment, as the old one.
        let new =
            unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
        if !new.is_null() {
            // SAFETY: both blocks are live and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Runs an allocator body; a panic returns `failed` with errno ENOMEM.
fn guarded<T>(failed: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        sys::set_errno(libc::ENOMEM);
        failed
    })
}

/// A heap block of `size` bytes aligned to `align`, if the heap takes it:
/// (pointer, reads as zeros).
fn heap_alloc(size: usize, align: usize) -> Option<(*mut c_void, bool)> {
    if !heap::wants(size) {
        return None;
    }
    let h = heap::get()?;
    match h.alloc(size, align) {
        Some((p, zero)) => Some((p.cast(), zero)),
        None => {
            h.lock().stats.fallbacks += 1;
            None
        }
    }
}

/// `malloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: size_t) -> *mut c_void {
    guarded(std::ptr::null_mut(), || match heap_alloc(size, 1) {
        Some((p, _)) => p,
        None => sys::libc_malloc(size),
    })
}

/// `calloc(3)`: heap blocks read as zeros (cleared only when their file
/// range could not be punched).
#[unsafe(no_mangle)]
pub extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        let Some(total) = n.checked_mul(size) else {
            sys::set_errno(libc::ENOMEM);
            return std::ptr::null_mut();
        };
        match heap_alloc(total, 1) {
            Some((p, true)) => p,
            Some((p, false)) => {
                // SAFETY: a fresh heap block of at least `total` bytes.
                unsafe { p.cast::<u8>().write_bytes(0, total) };
                p
            }
            None => sys::libc_calloc(n, size),
        }
    })
}

/// `free(3)`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    guarded((), || {
        if p.is_null() {
            return;
        }
        if heap::owns(p as usize) {
            // In a fork child the parent's heap is a copy, never reused.
            if let (false, Some(h)) = (heap::inherited(), heap::made()) {
                // umio's madvise and fallocate calls go to the kernel.
                let _guard = sys::enter();
                h.free(p as usize);
            }
            return;
        }
        // SAFETY: not the heap's, so glibc's (the caller's contract).
        unsafe { sys::libc_free(p) }
    })
}

/// Bytes usable at `p` (any block of this allocator).
///
/// # Safety
/// `p` is null or a live block from this allocator.
unsafe fn usable(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else if heap::owns(p as usize) {
        heap::made().map_or(0, |h| h.usable(p as usize))
    } else {
        // SAFETY: glibc's block (the caller's contract).
        unsafe { sys::libc_usable_size(p) }
    }
}

/// `realloc(3)`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        if p.is_null() {
            return malloc(size);
        }
        let in_heap = heap::owns(p as usize);
        if in_heap && !heap::inherited() {
            if size == 0 {
                // SAFETY: p is live (the caller's contract).
                unsafe { free(p) };
                return std::ptr::null_mut();
            }
            if heap::made().is_some_and(|h| h.resize_in_place(p as usize, size)) {
                return p;
            }
        } else if !in_heap && !heap::wants(size) {
            // SAFETY: glibc's block.
            return unsafe { sys::libc_realloc(p, size) };
        }
        // Move: to the heap or to glibc, as `size` decides.
        // SAFETY: p is live.
        let old = unsafe { usable(p) };
        let new = malloc(size);
        if !new.is_null() {
            // SAFETY: both blocks are live and hold at least this much.
            unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), new.cast(), old.min(size)) };
            // SAFETY: p is live and no longer used.
            unsafe { free(p) };
        }
        new
    })
}

/// `reallocarray(3)`.
///
/// # Safety
/// As `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: the caller's contract is realloc's.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            sys::set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// An aligned block (`align` a power of two), or null with errno set.
fn aligned(align: usize, size: usize) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        if !align.is_power_of_two() {
            sys::set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        match heap_alloc(size, align) {
            Some((p, _)) => p,
            None => sys::libc_memalign(align, size),
        }
    })
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's contract.
    unsafe { *out = p };
    0
}

/// `aligned_alloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    aligned(align, size)
}

/// `memalign(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    aligned(align, size)
}

/// `valloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn valloc(size: size_t) -> *mut c_void {
    aligned(4096, size)
}

/// `pvalloc(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    aligned(4096, size.next_multiple_of(4096))
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    // SAFETY: the caller's contract.
    guarded(0, || unsafe { usable(p) })
}
