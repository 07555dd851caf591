//! Memory mappings the stores make: a file mapped shared (`DaxStore`), a
//! private anonymous block (io_uring's registered staging buffers), and
//! `mincore` of a file's pages.

use std::fs::File;
use std::os::fd::AsRawFd;

/// `MAP_SHARED_VALIDATE` and `MAP_SYNC`, from `<linux/mman.h>`.
pub(crate) const MAP_SHARED_VALIDATE: i32 = 0x03;
pub(crate) const MAP_SYNC: i32 = 0x80000;

/// All of a file mapped shared, unmapped on drop.
pub(crate) struct SharedMapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: shared memory owned by this value; `&self` hands out a shared
// slice and a pointer whose writes are the caller's to synchronize (see
// `as_mut_ptr`).
unsafe impl Send for SharedMapping {}
// SAFETY: as for Send.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps the first `len` (non-zero) bytes of `file`, readable and, if
    /// `writable`, writable, with `flags` (`MAP_SHARED`, or
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`).
    pub(crate) fn new(
        file: &File,
        len: usize,
        writable: bool,
        flags: i32,
    ) -> std::io::Result<SharedMapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping of the file chosen by the kernel; no
        // existing memory is touched.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, file.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedMapping {
            base: p.cast(),
            len,
        })
    }

    /// No mapping: an empty file's.
    pub(crate) fn empty() -> SharedMapping {
        SharedMapping {
            base: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
        }
    }

    /// The mapped bytes, for as long as the mapping lives.
    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the mapping is readable for `len` bytes for as long as
        // this value lives; the slice borrows it.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// The first byte, to write through: writes must lie within the
    /// mapping, be writable (`new`'s `writable`), and not overlap a range
    /// another thread writes at the same time.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.base
    }

    /// `msync(MS_SYNC)` of the whole mapping.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        // SAFETY: msync of this value's own mapping.
        let rc = unsafe { libc::msync(self.base.cast(), self.len, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmaps the mapping this value made; `as_slice` slices
            // borrow it, so none outlives it.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

/// Private anonymous read-write memory, unmapped on drop.
pub(crate) struct AnonMapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by this value; what is read and written
// through its pointer is the owner's to synchronize.
unsafe impl Send for AnonMapping {}

impl AnonMapping {
    /// `len` bytes of fresh memory; `None` if the kernel refuses.
    pub(crate) fn new(len: usize) -> Option<AnonMapping> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(AnonMapping {
            base: p.cast(),
            len,
        })
    }

    /// The first byte; the mapping is `len` bytes, readable and writable.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping this value made; its owner uses no
        // pointer into it past this point.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// `mincore` of the first `span` (non-zero) bytes of `file` through a
/// shared read-only mapping of it made for the call (which itself brings
/// no page in): one byte per 4 KiB page into `vec`, bit 0 set where the
/// page cache holds the page.
pub(crate) fn file_residency(file: &File, span: usize, vec: &mut [u8]) -> std::io::Result<()> {
    assert!(vec.len() >= span.div_ceil(4096));
    // SAFETY: a fresh shared read-only mapping of the file; nothing is
    // read through it, it is only given to mincore and unmapped here.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `vec` has one byte per 4 KiB page of the mapping.
    let r = unsafe { libc::mincore(p, span, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmaps the mapping made above.
    unsafe { libc::munmap(p, span) };
    if r != 0 { Err(err) } else { Ok(()) }
}
