//! The limits of a sequential scan of an `O_DIRECT` file, with no umio in
//! them: the device's own rate (one thread, 2 MiB `O_DIRECT` reads into one
//! buffer, summed there), and the floor of a user-space runtime that feeds
//! a scan through userfaultfd (a reader thread reads each 2 MiB window with
//! one `O_DIRECT` `pread` into a staging buffer and installs it with one
//! `UFFDIO_COPY` while the scanning thread sums the window before; behind
//! the scan it drops windows with `MADV_DONTNEED` to stay within a budget).
//! The floor has no faults, no page table of its own, no policy: only the
//! read, the copy, the eviction and one hand-off per window.
//!
//! Both run one scanner or several at once, each over its own part of the
//! file ([`device_scan_rates`], [`copy_floor_rates`]): the floor gives each
//! scanner its own registered mapping, one reader thread or more, each
//! with its own staging buffer, and a share of the budget. `bench scan-limits` (`examples/bench`) runs one scanner
//! beside umio and Linux `mmap`; `bench scan-halves` runs one and
//! two, over halves of the file.

use std::fs::{File, OpenOptions};
use std::ops::Range;
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

/// What a scanning thread does with each window it is handed: it reads
/// the bytes and returns a checksum of them (so the reads stay).
pub type Work = fn(&[u8]) -> u64;

/// `work` on the window at `window`.
fn do_work(work: Work, window: usize) -> u64 {
    // SAFETY: callers pass the address of WINDOW readable bytes, aligned to
    // WINDOW, that nothing writes while the work runs.
    work(unsafe { std::slice::from_raw_parts(window as *const u8, WINDOW) })
}

/// The length of the file at `path` that the scans cover: whole windows.
pub fn scan_len(path: &Path) -> Result<usize> {
    Ok(open_direct(path)?.1)
}

/// Errors unless every part is a non-empty run of whole windows within
/// the first `len` bytes.
fn check_parts(parts: &[Range<usize>], len: usize) -> Result<()> {
    if parts.is_empty() {
        return Err("scan_floor: no parts to scan".into());
    }
    for p in parts {
        if p.start >= p.end || p.end > len || p.start % WINDOW != 0 || p.end % WINDOW != 0 {
            return Err(format!(
                "scan_floor: part {p:?} is not whole {WINDOW}-byte windows within {len} bytes"
            )
            .into());
        }
    }
    Ok(())
}

/// Runs `scan` on every part at once, one thread each; every part's bytes
/// per second (timed in its own thread, as each of several scanning
/// threads would time itself) and the wrapping sum of the scans' sums.
fn each_at_once<T: Sync>(
    parts: &[Range<usize>],
    state: &[T],
    scan: impl Fn(&Range<usize>, &T) -> std::result::Result<u64, String> + Sync,
) -> Result<(Vec<f64>, u64)> {
    let runs = std::thread::scope(|s| {
        let hs: Vec<_> = parts
            .iter()
            .zip(state)
            .map(|(part, st)| {
                let scan = &scan;
                s.spawn(move || {
                    let t = Instant::now();
                    let total = scan(part, st)?;
                    Ok::<_, String>((part.len() as f64 / t.elapsed().as_secs_f64(), total))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "a scanning thread panicked".to_string())?
            })
            .collect::<std::result::Result<Vec<_>, String>>()
    })?;
    let total = runs.iter().fold(0u64, |s, r| s.wrapping_add(r.1));
    Ok((runs.into_iter().map(|r| r.0).collect(), total))
}

/// Bytes per second of one thread reading the file at `path` from start
/// to end in 2 MiB `O_DIRECT` reads into one buffer, summing each; and
/// the sum.
pub fn device_scan_rate(path: &Path) -> Result<(f64, u64)> {
    let len = scan_len(path)?;
    let (rates, total) = device_scan_rates(path, std::slice::from_ref(&(0..len)), sum_words)?;
    Ok((rates[0], total))
}

/// The device's rate with one reading thread per part of the file at
/// `path`, all at once: each reads its part from start to end in 2 MiB
/// `O_DIRECT` reads into a buffer of its own and does `work` on each
/// window. Every part's bytes per second and the sum of `work`'s sums.
/// Parts are byte ranges of whole windows ([`WINDOW`]) within
/// [`scan_len`].
pub fn device_scan_rates(
    path: &Path,
    parts: &[Range<usize>],
    work: Work,
) -> Result<(Vec<f64>, u64)> {
    let (file, len) = open_direct(path)?;
    check_parts(parts, len)?;
    let bufs = parts
        .iter()
        .map(|_| Aligned::new(WINDOW))
        .collect::<Result<Vec<_>>>()?;
    let ats: Vec<usize> = bufs.iter().map(|b| b.at).collect();
    each_at_once(parts, &ats, |part, &at| {
        let mut total = 0u64;
        for off in part.clone().step_by(WINDOW) {
            pread_exact(&file, at as *mut u8, off).map_err(|e| e.to_string())?;
            total = total.wrapping_add(do_work(work, at));
        }
        Ok(total)
    })
}

/// One scan's progress: which windows are installed, how many the scan
/// has done, whether a reader failed; and the condition the scanning
/// thread and the readers wait on.
struct Progress {
    state: Mutex<Done>,
    changed: Condvar,
}

struct Done {
    installed: Vec<bool>,
    scanned: usize,
    failed: bool,
}

impl Progress {
    fn new(windows: usize) -> Progress {
        Progress {
            state: Mutex::new(Done {
                installed: vec![false; windows],
                scanned: 0,
                failed: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Waits until `ready` or a reader failed; whether `ready`.
    fn wait(&self, ready: impl Fn(&Done) -> bool) -> bool {
        let mut d = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !ready(&d) && !d.failed {
            d = self.changed.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        ready(&d)
    }

    fn update(&self, f: impl FnOnce(&mut Done)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.notify_all();
    }
}

/// Bytes per second of the userfaultfd scan floor described in the module
/// documentation over the file at `path`, holding at most `budget` bytes
/// of it installed (at least two windows); and the sum.
pub fn copy_floor_rate(path: &Path, budget: usize) -> Result<(f64, u64)> {
    let len = scan_len(path)?;
    let (rates, total) =
        copy_floor_rates(path, std::slice::from_ref(&(0..len)), budget, 1, sum_words)?;
    Ok((rates[0], total))
}

/// One scanner's part of the floor: its registered mapping (the length of
/// its part) and a staging buffer per reader.
struct FloorScanner {
    region: Aligned,
    staging: Vec<Aligned>,
}

/// The userfaultfd scan floor with one scanner per part of the file at
/// `path`, all at once. Each scanner has a mapping of its own registered
/// with one userfaultfd and `readers` reader threads of its own (reader
/// `r` of `R` reads and installs windows `r`, `r + R`, ... through a
/// staging buffer of its own, so that one scan can keep several CPUs
/// busy, as a runtime's prefetch threads do), and keeps at most its share
/// of `budget` installed (at least two windows); its scanning thread does
/// `work` on each window once it is installed. Every part's bytes per
/// second and the sum of `work`'s sums. Parts are byte ranges of whole
/// windows ([`WINDOW`]) within [`scan_len`].
pub fn copy_floor_rates(
    path: &Path,
    parts: &[Range<usize>],
    budget: usize,
    readers: usize,
    work: Work,
) -> Result<(Vec<f64>, u64)> {
    let (file, len) = open_direct(path)?;
    check_parts(parts, len)?;
    let readers = readers.max(1);
    let keep = (budget / parts.len() / WINDOW).max(2);
    let uffd = userfaultfd(0)?;
    let mut scanners = Vec::new();
    for part in parts {
        let region = Aligned::new(part.len())?;
        register_missing(uffd.as_raw_fd(), region.at, part.len())?;
        let mut staging = Vec::new();
        for _ in 0..readers {
            let buf = Aligned::new(WINDOW)?;
            // One transparent huge page where the kernel allows it: an
            // O_DIRECT read into it is cheaper than into 512 small pages.
            // SAFETY: advice on the staging mapping just made.
            unsafe { libc::madvise(buf.at as *mut _, WINDOW, libc::MADV_HUGEPAGE) };
            staging.push(buf);
        }
        scanners.push(FloorScanner { region, staging });
    }
    let at: Vec<(usize, Vec<usize>)> = scanners
        .iter()
        .map(|s| (s.region.at, s.staging.iter().map(|b| b.at).collect()))
        .collect();
    let copy_fd = uffd.as_raw_fd();
    each_at_once(parts, &at, |part, (base, stages)| {
        let base = *base;
        let windows = part.len() / WINDOW;
        let progress = Progress::new(windows);
        let read_windows = |r: usize| -> std::result::Result<(), String> {
            let stage = stages[r];
            for i in (r..windows).step_by(readers) {
                if i >= keep {
                    if !progress.wait(|d| d.scanned > i - keep) {
                        return Ok(()); // another reader failed
                    }
                    let old = base + (i - keep) * WINDOW;
                    // SAFETY: a window of this scanner's region that its scan
                    // has passed.
                    if unsafe { libc::madvise(old as *mut _, WINDOW, libc::MADV_DONTNEED) } != 0 {
                        return Err(format!("madvise: {}", errno()));
                    }
                }
                pread_exact(&file, stage as *mut u8, part.start + i * WINDOW)
                    .map_err(|e| e.to_string())?;
                let mut c = UffdioCopy {
                    dst: (base + i * WINDOW) as u64,
                    src: stage as u64,
                    len: WINDOW as u64,
                    mode: 0,
                    copy: 0,
                };
                // SAFETY: copies this reader's staging window into the
                // registered, empty window i of its scanner's region.
                if unsafe { libc::ioctl(copy_fd, UFFDIO_COPY, &mut c) } != 0 {
                    return Err(format!("UFFDIO_COPY: {}", errno()));
                }
                progress.update(|d| d.installed[i] = true);
            }
            Ok(())
        };
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..readers)
                .map(|r| {
                    let (read_windows, progress) = (&read_windows, &progress);
                    s.spawn(move || {
                        let read = read_windows(r);
                        if read.is_err() {
                            progress.update(|d| d.failed = true);
                        }
                        read
                    })
                })
                .collect();
            let mut total = 0u64;
            for i in 0..windows {
                if !progress.wait(|d| d.installed[i]) {
                    break;
                }
                total = total.wrapping_add(do_work(work, base + i * WINDOW));
                progress.update(|d| d.scanned = i + 1);
            }
            for h in hs {
                h.join()
                    .map_err(|_| "a reader thread panicked".to_string())??;
            }
            Ok(total)
        })
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `windows` windows of varied bytes in the temporary
    /// directory (a file system with `O_DIRECT`), and the sum of its words.
    fn data(windows: usize) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let bytes: Vec<u8> = (0..windows * WINDOW)
            .map(|i| (i * 7 + i / 4093) as u8)
            .collect();
        f.write_all(&bytes).unwrap();
        f.as_file().sync_all().unwrap();
        (f, sum_words(&bytes))
    }

    #[test]
    fn one_scanner_and_two_over_halves_read_the_whole_file() {
        let (f, want) = data(16);
        let len = scan_len(f.path()).unwrap();
        assert_eq!(len, 16 * WINDOW);
        let halves = [0..len / 2, len / 2..len];
        assert_eq!(device_scan_rate(f.path()).unwrap().1, want);
        let (rates, got) = device_scan_rates(f.path(), &halves, sum_words).unwrap();
        assert_eq!((rates.len(), got), (2, want));
        // Four windows of budget: each of two scanners keeps two and drops
        // the rest behind its scan.
        assert_eq!(copy_floor_rate(f.path(), 4 * WINDOW).unwrap().1, want);
        for readers in [1, 2, 3] {
            let (rates, got) =
                copy_floor_rates(f.path(), &halves, 4 * WINDOW, readers, sum_words).unwrap();
            assert_eq!((rates.len(), got), (2, want), "{readers} readers");
            assert!(rates.iter().all(|r| r.is_finite() && *r > 0.0));
        }
    }

    #[test]
    fn parts_must_be_whole_windows_within_the_file() {
        let (f, _) = data(2);
        for bad in [0..WINDOW / 2, WINDOW..3 * WINDOW, WINDOW..WINDOW] {
            let e = copy_floor_rates(f.path(), std::slice::from_ref(&bad), WINDOW, 1, sum_words)
                .unwrap_err();
            assert!(e.to_string().contains("whole"), "{bad:?}: {e}");
            assert!(device_scan_rates(f.path(), &[bad], sum_words).is_err());
        }
    }
}
