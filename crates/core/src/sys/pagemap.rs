//! `PAGEMAP_SCAN` (Linux 6.7+): an ioctl on `/proc/self/pagemap` that
//! reports which pages of a range were written since they were last
//! write-protected through a userfaultfd with `UFFD_FEATURE_WP_ASYNC`
//! (`PAGE_IS_WRITTEN`: the page's uffd-wp bit is clear), and, with
//! `PM_SCAN_WP_MATCHING`, write-protects again exactly the pages it
//! reports, atomically with the report (under the page-table lock): a
//! write after the scan clears the bit again and shows in the next scan.
//! The dirty tracking of `dirty.rs`.
//!
//! No allocation: the reports go through a fixed array on the stack, so
//! that a signal handler (the in-thread service's eviction) may scan.

use std::fs::File;
use std::os::fd::AsRawFd;

use super::errno;

/// `struct pm_scan_arg` (include/uapi/linux/fs.h).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16) | (0x66 << 8) | 16;
/// Write-protect the pages reported.
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Fail (`EPERM`) on a VMA without asynchronous write-protection instead
/// of skipping it silently.
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
/// The page was written since it was last write-protected.
const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// The page is present (mapped to memory).
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// Reports per call, at most (on the stack).
const BATCH: usize = 256;

/// `/proc/self/pagemap`, opened once per runtime.
#[derive(Debug)]
pub(crate) struct Pagemap {
    file: File,
}

impl Pagemap {
    /// Opens `/proc/self/pagemap` and checks that it takes `PAGEMAP_SCAN`
    /// (a scan of one page of this thread's stack): `Err` with the errno
    /// otherwise (`ENOTTY` or `EINVAL` before Linux 6.7).
    pub(crate) fn open() -> Result<Pagemap, i32> {
        let file =
            File::open("/proc/self/pagemap").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let pm = Pagemap { file };
        let probe = 0u64;
        let page = (&probe as *const u64 as usize) & !4095;
        pm.scan(page, page + 4096, false, |_, _| {})?;
        Ok(pm)
    }

    /// Calls `f(start, end)` for each run of pages of `start..end`
    /// (page-aligned addresses) written since they were last
    /// write-protected; with `reprotect`, write-protects each run it
    /// reports, atomically with the report, and fails with `EPERM` on
    /// memory not registered for asynchronous write-protection. Returns
    /// the number of `PAGEMAP_SCAN` calls made.
    pub(crate) fn scan(
        &self,
        start: usize,
        end: usize,
        reprotect: bool,
        mut f: impl FnMut(usize, usize),
    ) -> Result<u64, i32> {
        self.scan_with(start, end, reprotect, PAGE_IS_WRITTEN, |s, e, _| f(s, e))
    }

    /// Calls `f(start, end, written)` for each run of present pages of
    /// `start..end`, `written` whether they were written since they were
    /// last write-protected. Returns the number of calls made.
    pub(crate) fn scan_present(
        &self,
        start: usize,
        end: usize,
        mut f: impl FnMut(usize, usize, bool),
    ) -> Result<u64, i32> {
        self.scan_with(start, end, false, PAGE_IS_PRESENT, |s, e, c| {
            f(s, e, c & PAGE_IS_WRITTEN != 0)
        })
    }

    fn scan_with(
        &self,
        mut start: usize,
        end: usize,
        reprotect: bool,
        must: u64,
        mut f: impl FnMut(usize, usize, u64),
    ) -> Result<u64, i32> {
        let mut out = [PageRegion::default(); BATCH];
        let mut calls = 0;
        while start < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: if reprotect {
                    PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC
                } else {
                    0
                },
                start: start as u64,
                end: end as u64,
                vec: out.as_mut_ptr() as u64,
                vec_len: BATCH as u64,
                category_mask: must,
                // Pages that hold data only: the kernel reports a page
                // never filled, dropped or moved away (a none PTE, which
                // carries no uffd-wp bit) as written.
                category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                return_mask: PAGE_IS_WRITTEN | PAGE_IS_PRESENT,
                ..PmScanArg::default()
            };
            // SAFETY: `arg` is a valid `pm_scan_arg` whose `vec` points at
            // `out`, `BATCH` writable `page_region`s that outlive the call;
            // the kernel writes only `arg.walk_end` and `out[..n]`. The scan
            // reads page tables and write-protects pages of our own
            // address space, which changes no memory's contents.
            let n = unsafe { libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
            calls += 1;
            if n < 0 {
                match errno() {
                    libc::EINTR => continue,
                    e => return Err(e),
                }
            }
            for r in &out[..(n as usize).min(BATCH)] {
                f(r.start as usize, r.end as usize, r.categories);
            }
            let walked = arg.walk_end as usize;
            if walked <= start {
                // The kernel made no progress: do not loop.
                break;
            }
            start = walked;
        }
        Ok(calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::uffd::{Uffd, feature};

    /// Every other page of 4 MiB written: more runs than one call reports,
    /// all found, and found again (the scan only reads the bits); written
    /// back with `UFFDIO_WRITEPROTECT`, found clean.
    #[test]
    fn finds_every_written_page_across_calls() {
        const PAGE: usize = 4096;
        const PAGES: usize = 1024;
        let Ok(pm) = Pagemap::open() else {
            eprintln!("no PAGEMAP_SCAN on this kernel: skipped");
            return;
        };
        let uffd = Uffd::open(false).or_else(|_| Uffd::open(true)).unwrap();
        let bits = uffd
            .api(feature::PAGEFAULT_FLAG_WP | feature::WP_ASYNC | feature::WP_UNPOPULATED)
            .unwrap();
        assert!(bits & feature::WP_ASYNC != 0);
        let base = crate::sys::mm::map_anonymous(PAGES * PAGE, PAGE, true).unwrap();
        uffd.register(base, PAGES * PAGE, true).unwrap();
        uffd.copy(base, &[1u8; PAGES * PAGE], true, false).unwrap();
        let count = |pm: &Pagemap| {
            let mut n = 0;
            pm.scan(base, base + PAGES * PAGE, false, |s, e| n += (e - s) / PAGE)
                .unwrap();
            n
        };
        assert_eq!(count(&pm), 0, "installed write-protected");
        for p in (0..PAGES).step_by(2) {
            // SAFETY: a page of the mapping made above.
            unsafe { ((base + p * PAGE) as *mut u8).write_volatile(2) };
        }
        assert_eq!(count(&pm), PAGES / 2);
        assert_eq!(count(&pm), PAGES / 2, "reading the bits clears none");
        uffd.writeprotect(base, PAGES * PAGE, true, false).unwrap();
        assert_eq!(count(&pm), 0, "protected again");
        crate::sys::mm::unmap(base, PAGES * PAGE).unwrap();
    }
}

#[cfg(test)]
mod absent_tests {
    use super::*;
    use crate::sys::uffd::{Uffd, feature};

    /// A page that holds no data (never filled, dropped, moved away) is
    /// never reported written: the kernel's own answer for such a page
    /// (a none PTE has no uffd-wp bit) is "written", and an eviction
    /// that took it for a written page kept it "dirty" while it was gone,
    /// then write-protected it (a marker) and wrote it back from the
    /// mapping: a userfault of the writing filler's own.
    #[test]
    fn absent_pages_are_not_written() {
        const PAGE: usize = 4096;
        let Ok(pm) = Pagemap::open() else {
            eprintln!("no PAGEMAP_SCAN on this kernel: skipped");
            return;
        };
        let uffd = Uffd::open(false).or_else(|_| Uffd::open(true)).unwrap();
        let bits = uffd
            .api(
                feature::PAGEFAULT_FLAG_WP
                    | feature::WP_ASYNC
                    | feature::WP_UNPOPULATED
                    | feature::MOVE,
            )
            .unwrap();
        let base = crate::sys::mm::map_anonymous(8 * PAGE, PAGE, true).unwrap();
        uffd.register(base, 8 * PAGE, true).unwrap();
        let scratch = crate::sys::mm::map_anonymous(8 * PAGE, PAGE, true).unwrap();
        uffd.register(scratch, 8 * PAGE, false).unwrap();
        uffd.copy(base, &[1u8; 4 * PAGE], true, false).unwrap();
        // Page 0: present, protected; 1: dropped; 2: moved out (where the
        // kernel can); 3: present, written; 4 to 7: never filled.
        crate::sys::mm::advise(base + PAGE, PAGE, libc::MADV_DONTNEED).unwrap();
        if bits & feature::MOVE != 0 {
            uffd.move_pages(scratch + 2 * PAGE, base + 2 * PAGE, PAGE)
                .unwrap();
        }
        // SAFETY: a page of the mapping made above.
        unsafe { ((base + 3 * PAGE) as *mut u8).write_volatile(2) };
        let written = |pm: &Pagemap| {
            let mut w = Vec::new();
            pm.scan(base, base + 8 * PAGE, false, |s, e| {
                w.push(((s - base) / PAGE, (e - base) / PAGE))
            })
            .unwrap();
            w
        };
        assert_eq!(written(&pm), [(3, 4)]);
        // Protected whole (markers on the absent pages): none written.
        uffd.writeprotect(base, 8 * PAGE, true, false).unwrap();
        assert_eq!(written(&pm), []);
        crate::sys::mm::unmap(base, 8 * PAGE).unwrap();
        crate::sys::mm::unmap(scratch, 8 * PAGE).unwrap();
    }
}
