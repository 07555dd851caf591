//! The limits of a sequential scan of an `O_DIRECT` file, with no umio in
//! them: the device's own rate (one thread, 2 MiB `O_DIRECT` reads into one
//! buffer, summed there), and the floor of a user-space runtime that feeds
//! a scan through userfaultfd (a reader thread reads each 2 MiB window with
//! one `O_DIRECT` `pread` into a staging buffer and installs it with one
//! `UFFDIO_COPY` while the scanning thread sums the window before; behind
//! the scan it drops windows with `MADV_DONTNEED` to stay within a budget).
//! The floor has no faults, no page table of its own, no policy: only the
//! read, the copy, the eviction and one hand-off per window.
//! `examples/scan_limits.rs` runs both beside umio and Linux `mmap`.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::bench::Result;
use crate::fault_path::{UFFDIO_COPY, UffdioCopy, errno, register_missing, userfaultfd};

/// The window each read and copy moves.
pub const WINDOW: usize = 2 << 20;

/// Anonymous memory aligned to `WINDOW`, unmapped when dropped.
struct Aligned {
    base: *mut u8,
    span: usize,
    at: usize,
}

impl Aligned {
    fn new(len: usize) -> Result<Aligned> {
        let span = len + WINDOW;
        // SAFETY: a fresh private anonymous mapping, owned by this value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", errno()).into());
        }
        let at = (p as usize).next_multiple_of(WINDOW);
        Ok(Aligned {
            base: p.cast(),
            span,
            at,
        })
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.base.cast(), self.span) };
    }
}

fn open_direct(path: &Path) -> Result<(File, usize)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let len = usize::try_from(file.metadata()?.len())? / WINDOW * WINDOW;
    if len == 0 {
        return Err("scan_floor: the file is smaller than one window".into());
    }
    Ok((file, len))
}

fn pread_exact(file: &File, buf: *mut u8, offset: usize) -> Result<()> {
    // SAFETY: `buf` is WINDOW writable bytes owned by the caller.
    let n = unsafe { libc::pread(file.as_raw_fd(), buf.cast(), WINDOW, offset as i64) };
    if n != WINDOW as isize {
        return Err(format!("O_DIRECT pread at {offset}: {n} ({})", errno()).into());
    }
    Ok(())
}

/// The scan's own work: the sum of every 64-bit word of `data` (8-byte
/// aligned, a whole number of words).
pub fn sum_words(data: &[u8]) -> u64 {
    // SAFETY: any bytes are valid u64s; the slice is only read.
    let (head, words, tail) = unsafe { data.align_to::<u64>() };
    assert!(head.is_empty() && tail.is_empty(), "whole aligned words");
    words.iter().fold(0u64, |s, &w| s.wrapping_add(w))
}

/// [`sum_words`] of the window at `window`.
fn sum(window: *const u8) -> u64 {
    // SAFETY: callers pass WINDOW readable bytes, 8-byte aligned.
    sum_words(unsafe { std::slice::from_raw_parts(window, WINDOW) })
}

/// Bytes per second of one thread reading the file at `path` from start
/// to end in 2 MiB `O_DIRECT` reads into one buffer, summing each; and
/// the sum.
pub fn device_scan_rate(path: &Path) -> Result<(f64, u64)> {
    let (file, len) = open_direct(path)?;
    let buf = Aligned::new(WINDOW)?;
    let at = buf.at as *mut u8;
    let mut total = 0u64;
    let t = Instant::now();
    for off in (0..len).step_by(WINDOW) {
        pread_exact(&file, at, off)?;
        total = total.wrapping_add(sum(at));
    }
    Ok((len as f64 / t.elapsed().as_secs_f64(), total))
}

/// Windows installed, windows summed, whether the reader has stopped,
/// and the condition both threads wait on.
struct Progress {
    counts: Mutex<(usize, usize, bool)>,
    changed: Condvar,
}

impl Progress {
    fn wait(&self, ready: impl Fn(&(usize, usize, bool)) -> bool) -> (usize, usize, bool) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        while !ready(&c) {
            c = self.changed.wait(c).unwrap_or_else(|e| e.into_inner());
        }
        *c
    }

    fn update(&self, f: impl FnOnce(&mut (usize, usize, bool))) {
        f(&mut self.counts.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.notify_all();
    }
}

/// Bytes per second of the userfaultfd scan floor described in the module
/// documentation over the file at `path`, holding at most `budget` bytes
/// of it installed (at least two windows); and the sum.
pub fn copy_floor_rate(path: &Path, budget: usize) -> Result<(f64, u64)> {
    let (file, len) = open_direct(path)?;
    let keep = (budget / WINDOW).max(2);
    let windows = len / WINDOW;
    let uffd = userfaultfd(0)?;
    let region = Aligned::new(len)?;
    register_missing(uffd.as_raw_fd(), region.at, len)?;
    let staging = Aligned::new(WINDOW)?;
    // One transparent huge page where the kernel allows it: an O_DIRECT
    // read into it is cheaper than into 512 small pages.
    // SAFETY: advice on the staging mapping made above.
    unsafe { libc::madvise(staging.at as *mut _, WINDOW, libc::MADV_HUGEPAGE) };
    let progress = Progress {
        counts: Mutex::new((0, 0, false)),
        changed: Condvar::new(),
    };
    let (base, stage) = (region.at, staging.at);
    let read_windows = || -> std::result::Result<(), String> {
        for i in 0..windows {
            if i >= keep {
                progress.wait(|&(_, summed, _)| summed > i - keep);
                let old = base + (i - keep) * WINDOW;
                // SAFETY: a window of the region the scan has passed.
                if unsafe { libc::madvise(old as *mut _, WINDOW, libc::MADV_DONTNEED) } != 0 {
                    return Err(format!("madvise: {}", errno()));
                }
            }
            pread_exact(&file, stage as *mut u8, i * WINDOW).map_err(|e| e.to_string())?;
            let mut c = UffdioCopy {
                dst: (base + i * WINDOW) as u64,
                src: stage as u64,
                len: WINDOW as u64,
                mode: 0,
                copy: 0,
            };
            // SAFETY: copies the staging window into the registered, empty
            // window i of the region.
            if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_COPY, &mut c) } != 0 {
                return Err(format!("UFFDIO_COPY: {}", errno()));
            }
            progress.update(|c| c.0 = i + 1);
        }
        Ok(())
    };
    let t = Instant::now();
    let total = std::thread::scope(|s| -> Result<u64> {
        let reader = s.spawn(|| {
            let read = read_windows();
            progress.update(|c| c.2 = true);
            read
        });
        let mut total = 0u64;
        for i in 0..windows {
            let (installed, _, _) =
                progress.wait(|&(installed, _, stopped)| installed > i || stopped);
            if installed <= i {
                break;
            }
            total = total.wrapping_add(sum((base + i * WINDOW) as *const u8));
            progress.update(|c| c.1 = i + 1);
        }
        reader.join().map_err(|_| "the reader thread panicked")??;
        Ok(total)
    })?;
    Ok((len as f64 / t.elapsed().as_secs_f64(), total))
}
