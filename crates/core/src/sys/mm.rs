//! Anonymous memory for regions and staging buffers, and system calls
//! that read or write a region's memory (`read_fd`, `write_fd`).

use std::os::fd::RawFd;

use super::errno;

/// Reserves `len` bytes of private anonymous memory aligned to `align` (a
/// power of two), not inherited by `fork` children. Returns the address.
pub(crate) fn map_anonymous(len: usize, align: usize, writable: bool) -> Result<usize, i32> {
    let base = map_aligned(len, align, writable)?;
    if let Err(e) = advise(base, len, libc::MADV_DONTFORK) {
        let _ = unmap(base, len);
        return Err(e);
    }
    Ok(base)
}

/// Reserves `len` bytes of private anonymous memory aligned to `align` (a
/// power of two), inherited by `fork` children as any memory is. Returns
/// the address.
fn map_aligned(len: usize, align: usize, writable: bool) -> Result<usize, i32> {
    let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let span = len.checked_add(align - 1).ok_or(libc::ENOMEM)?;
    // SAFETY: a fresh anonymous mapping at an address the kernel picks
    // aliases nothing.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), span, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    let start = p as usize;
    let base = (start + align - 1) & !(align - 1);
    // Trim the slack on both sides so that only [base, base+len) stays.
    if base > start {
        unmap(start, base - start)?;
    }
    let tail = start + span - (base + len);
    if tail > 0 {
        unmap(base + len, tail)?;
    }
    Ok(base)
}

/// Maps `len` bytes (a multiple of 2 MiB) of private anonymous memory
/// backed by 2 MiB hugetlbfs pages (`MAP_HUGETLB | MAP_HUGE_2MB`), not
/// reserved up front (`MAP_NORESERVE`: pages come from the pool as they
/// are filled) and not inherited by `fork` children. The kernel aligns it
/// to 2 MiB.
pub(crate) fn map_hugetlb(len: usize, writable: bool) -> Result<usize, i32> {
    const MAP_HUGE_2MB: i32 = 21 << libc::MAP_HUGE_SHIFT;
    // SAFETY: a fresh mapping chosen by the kernel aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 },
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_HUGETLB
                | MAP_HUGE_2MB,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    let addr = p as usize;
    if let Err(e) = advise(addr, len, libc::MADV_DONTFORK) {
        let _ = unmap(addr, len);
        return Err(e);
    }
    Ok(addr)
}

/// Maps `len` bytes of private anonymous memory exactly at `addr`,
/// replacing whatever the process had mapped there (`MAP_FIXED`), not
/// inherited by `fork` children.
///
/// # Safety
/// Nothing in the process may use memory of `[addr, addr+len)` as anything
/// else: it is replaced.
pub(crate) unsafe fn map_anonymous_fixed(
    addr: usize,
    len: usize,
    writable: bool,
) -> Result<usize, i32> {
    let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
    // SAFETY: the caller gives up whatever was mapped in the range.
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    if let Err(e) = advise(addr, len, libc::MADV_DONTFORK) {
        let _ = unmap(addr, len);
        return Err(e);
    }
    Ok(p as usize)
}

/// Maps `len` bytes of private anonymous memory exactly at `addr` if
/// nothing is mapped in the range (`MAP_FIXED_NOREPLACE`), not inherited
/// by `fork` children; `EEXIST` if something is.
pub(crate) fn map_anonymous_noreplace(
    addr: usize,
    len: usize,
    writable: bool,
) -> Result<usize, i32> {
    let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE replaces nothing: the kernel refuses a
    // range that holds a mapping.
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    if p as usize != addr {
        // A kernel older than 4.17 takes the flag as a hint.
        let _ = unmap(p as usize, len);
        return Err(libc::EEXIST);
    }
    if let Err(e) = advise(addr, len, libc::MADV_DONTFORK) {
        let _ = unmap(addr, len);
        return Err(e);
    }
    Ok(addr)
}

/// Unmaps `[addr, addr+len)`.
pub(crate) fn unmap(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: callers pass ranges they mapped themselves and no longer
    // reference.
    let r = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// `madvise` on a range this crate mapped.
pub(crate) fn advise(addr: usize, len: usize, advice: libc::c_int) -> Result<(), i32> {
    // SAFETY: the range belongs to a region of ours; the advice values used
    // (DONTNEED on registered anonymous memory, DONTFORK) discard or keep
    // pages, never map new memory.
    let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// Which 4 KiB pages of `[addr, addr+len)` (a range of a region of ours,
/// 4 KiB-aligned) have memory behind them now (`mincore`): one entry per
/// 4 KiB page into `out`, cleared first.
pub(crate) fn resident(addr: usize, len: usize, out: &mut Vec<bool>) -> Result<(), i32> {
    let n = len.div_ceil(4096);
    let mut vec = vec![0u8; n];
    // SAFETY: mincore writes one byte per page of the range into `vec`,
    // which has room for `n`; it reads no memory of the range.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if r != 0 {
        return Err(errno());
    }
    out.clear();
    out.extend(vec.iter().map(|b| b & 1 != 0));
    Ok(())
}

/// `PIDFD_SELF` (Linux 6.14): a pidfd meaning the calling process.
const PIDFD_SELF: libc::c_int = -10000;
/// Most ranges one `process_madvise` takes (`UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// Whether `process_madvise(PIDFD_SELF, .., MADV_DONTNEED)` works here:
/// unknown (0), yes (1), no (2).
static VECTORED_DONTNEED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// `MADV_DONTNEED` on many ranges this crate mapped with as few system
/// calls as possible: one `process_madvise` per 1024 ranges, which recent
/// kernels serve with one TLB flush for all of them, where one `madvise`
/// per range flushes (and interrupts every other CPU running the process)
/// once per range. Measured here (Linux 6.18, 2 vCPUs, another thread of
/// the process running): 512 single-page ranges took 6-16 ms as 512
/// `madvise` calls and 0.43 ms as one `process_madvise`. Returns how many
/// leading bytes of `ranges`, in order, were discarded; the caller
/// discards the rest one range at a time (all of them where the kernel
/// lacks the call).
pub(crate) fn discard_many(ranges: &[libc::iovec]) -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    if ranges.len() < 2 || VECTORED_DONTNEED.load(Relaxed) == 2 {
        return 0;
    }
    let mut done = 0;
    for chunk in ranges.chunks(MAX_IOV) {
        let want: usize = chunk.iter().map(|v| v.iov_len).sum();
        // SAFETY: the iovecs name ranges of our regions; MADV_DONTNEED on
        // them discards pages, as `advise` does, and maps nothing new.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF,
                chunk.as_ptr(),
                chunk.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if r < 0 {
            if VECTORED_DONTNEED.load(Relaxed) == 0 {
                // No PIDFD_SELF, or no MADV_DONTNEED through it: use
                // madvise from now on.
                VECTORED_DONTNEED.store(2, Relaxed);
            }
            return done;
        }
        VECTORED_DONTNEED.store(1, Relaxed);
        done += r as usize;
        if r as usize != want {
            return done;
        }
    }
    done
}

/// 2 MiB, the size of a transparent huge page on x86-64 and arm64 with
/// 4 KiB base pages.
const HUGE: usize = 2 << 20;

/// Staging buffers at least this large are made of 2 MiB pages.
const HUGE_STAGING_FROM: usize = 1 << 20;

/// A page-aligned buffer of anonymous memory, for staging reads.
pub(crate) struct StagingBuffer {
    addr: usize,
    len: usize,
}

impl StagingBuffer {
    /// An empty buffer.
    pub(crate) const fn new() -> Self {
        StagingBuffer { addr: 0, len: 0 }
    }

    /// The buffer as a slice of at least `len` bytes, growing it if needed.
    pub(crate) fn get(&mut self, len: usize) -> Result<&mut [u8], i32> {
        if len == 0 {
            return Ok(&mut []);
        }
        if self.len < len {
            // A buffer of 1 MiB or more is made of whole 2 MiB transparent
            // huge pages where the kernel allows them: `O_DIRECT` reads
            // into a huge page run faster than into 512 small ones (the
            // kernel pins one folio, and builds larger segments), and the
            // scans that read 2 MiB windows gain from it (BENCHMARKS.md).
            let (new_len, align) = if len >= HUGE_STAGING_FROM {
                (len.next_multiple_of(HUGE), HUGE)
            } else {
                (len.next_multiple_of(4096), 4096)
            };
            // Inherited by a fork child, as it always was: the in-thread
            // service's slots, and their staging buffers, outlive a fork.
            let addr = map_aligned(new_len, align, true)?;
            if align == HUGE {
                // Only a hint: without transparent huge pages (disabled, or
                // none free) the buffer is made of small pages, as before.
                let _ = advise(addr, new_len, libc::MADV_HUGEPAGE);
            }
            self.release();
            self.addr = addr;
            self.len = new_len;
        }
        // SAFETY: [addr, addr+len) is a private read-write mapping owned by
        // this buffer, and &mut self makes the slice exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, len) })
    }

    fn release(&mut self) {
        if self.len > 0 {
            let r = unmap(self.addr, self.len);
            assert!(r.is_ok(), "munmap of a staging buffer failed: {r:?}");
            self.len = 0;
        }
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        self.release();
    }
}

// SAFETY: the buffer is plain memory owned by one StagingBuffer; moving it
// to another thread moves that ownership.
unsafe impl Send for StagingBuffer {}

/// One `read(2)` (`at` `None`: at the descriptor's position) or
/// `pread(2)` (at `at`) from `fd` into `len` bytes of a live mapping of
/// the caller's at `addr`. The kernel writes the bytes itself and checks
/// the range: an address it cannot write fails the call with `EFAULT`
/// (or shortens it). Retries `EINTR`.
pub(crate) fn read_fd(fd: RawFd, addr: usize, len: usize, at: Option<u64>) -> Result<usize, i32> {
    loop {
        // SAFETY: the caller passes a range of a mapping of its own that
        // stays mapped for the call; the kernel writes at most `len` bytes
        // there and faults (`EFAULT`) rather than touch anything else.
        let n = unsafe {
            match at {
                None => libc::read(fd, addr as *mut libc::c_void, len),
                Some(off) => libc::pread(fd, addr as *mut libc::c_void, len, off as libc::off_t),
            }
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        match errno() {
            libc::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// One `write(2)` (`at` `None`) or `pwrite(2)` (at `at`) to `fd` of `len`
/// bytes of a live mapping of the caller's at `addr`; as [`read_fd`].
pub(crate) fn write_fd(fd: RawFd, addr: usize, len: usize, at: Option<u64>) -> Result<usize, i32> {
    loop {
        // SAFETY: as in `read_fd`; the kernel only reads the range.
        let n = unsafe {
            match at {
                None => libc::write(fd, addr as *const libc::c_void, len),
                Some(off) => libc::pwrite(fd, addr as *const libc::c_void, len, off as libc::off_t),
            }
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        match errno() {
            libc::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// Writes the byte at `addr` without changing it, atomically with any
/// other thread's write: a page that is write-protected takes its write
/// fault now.
///
/// In assembly: the compiler may drop an atomic read-modify-write that
/// changes nothing (LLVM turns a relaxed `fetch_or(0)` into a load, then
/// drops the unused load), and in an optimised build the page would then
/// never fault.
pub(crate) fn touch_for_write(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: callers pass an address inside a live writable mapping of
    // theirs; a locked OR of 0 writes the byte back unchanged, atomically
    // with any other thread's write.
    unsafe {
        std::arch::asm!("lock or byte ptr [{a}], 0", a = in(reg) addr, options(nostack));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above: an exclusive load and store of the same byte,
    // retried until no other write came in between.
    unsafe {
        std::arch::asm!(
            "2:",
            "ldxrb {v:w}, [{a}]",
            "stxrb {s:w}, {v:w}, [{a}]",
            "cbnz {s:w}, 2b",
            a = in(reg) addr,
            v = out(reg) _,
            s = out(reg) _,
            options(nostack),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
        // SAFETY: as above. A compare-and-swap of the value it found,
        // until it succeeds: a store of the same value.
        let b = unsafe { &*(addr as *const AtomicU8) };
        let mut v = b.load(Relaxed);
        while let Err(now) = b.compare_exchange_weak(v, v, Relaxed, Relaxed) {
            v = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the page at `addr` maps a file's page (`/proc/self/pagemap`
    /// bit 61: file page or shared anonymous), as opposed to a private
    /// copy of the process's own.
    fn maps_file_page(addr: usize) -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start((addr / 4096) as u64 * 8)).unwrap();
        let mut b = [0u8; 8];
        f.read_exact(&mut b).unwrap();
        let v = u64::from_le_bytes(b);
        assert!(v >> 63 == 1, "page not present");
        v >> 61 & 1 == 1
    }

    #[test]
    fn touch_for_write_writes_the_byte_back_unchanged() {
        // A private mapping of a file: read, it maps the file's page; a
        // write (even of the same value) makes the process's own copy. In
        // an optimised build too (the test runs in both profiles).
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 4096]).unwrap();
        // SAFETY: a new private mapping of the file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap: {}", errno());
        let addr = p as usize + 100;
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { (addr as *const u8).read_volatile() }, 7);
        assert!(maps_file_page(addr), "read: the file's page");
        touch_for_write(addr);
        let copied = !maps_file_page(addr);
        // SAFETY: inside the mapping.
        let v = unsafe { (addr as *const u8).read_volatile() };
        // SAFETY: mapped above, not used after.
        unsafe { libc::munmap(p, 4096) };
        assert!(copied, "touch_for_write did not write (no copy on write)");
        assert_eq!(v, 7, "the byte changed");
    }

    #[test]
    fn large_staging_buffers_are_whole_aligned_huge_pages() {
        let mut small = StagingBuffer::new();
        let b = small.get(64 << 10).unwrap();
        assert_eq!((b.len(), b.as_ptr() as usize % 4096), (64 << 10, 0));
        assert_eq!(small.len, 64 << 10);
        let mut large = StagingBuffer::new();
        let b = large.get(3 << 20).unwrap();
        b.fill(5);
        assert_eq!(b.len(), 3 << 20);
        assert_eq!(large.addr % HUGE, 0, "aligned to 2 MiB");
        assert_eq!(large.len, 4 << 20, "whole 2 MiB pages");
        // A fork child has the buffer (the in-thread service's slots keep
        // theirs across a fork).
        let last = large.addr + (3 << 20) - 1;
        // SAFETY: the child only reads its copy of the buffer and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: inside the child's copy of the buffer.
            let v = unsafe { (last as *const u8).read_volatile() };
            // SAFETY: _exit ends the child without running the harness.
            unsafe { libc::_exit(if v == 5 { 0 } else { 1 }) };
        }
        assert!(pid > 0, "fork: {}", errno());
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child could not read the buffer: status {status:#x}"
        );
        // Growing keeps the rule; a smaller request reuses the buffer.
        assert_eq!(large.get(1 << 20).unwrap().len(), 1 << 20);
        assert_eq!(large.len, 4 << 20);
    }

    #[test]
    fn discard_many_drops_exactly_the_ranges_it_reports() {
        const PAGE: usize = 4096;
        let len = 64 * PAGE;
        let base = map_anonymous(len, PAGE, true).unwrap();
        // SAFETY: base..base+len is the fresh mapping above.
        let mem = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len) };
        mem.fill(7);
        // Every other page, in 32 ranges.
        let ranges: Vec<libc::iovec> = (0..32)
            .map(|i| libc::iovec {
                iov_base: (base + 2 * i * PAGE) as *mut libc::c_void,
                iov_len: PAGE,
            })
            .collect();
        let done = discard_many(&ranges);
        assert!(done == 0 || done == 32 * PAGE, "{done} bytes");
        for i in 0..64 {
            let want = if i % 2 == 0 && (i / 2) * PAGE < done {
                0
            } else {
                7
            };
            assert!(
                mem[i * PAGE..(i + 1) * PAGE].iter().all(|&b| b == want),
                "page {i}: expected {want} ({done} bytes discarded)"
            );
        }
        // Linux 6.14 and later have PIDFD_SELF; older kernels report 0 and
        // eviction uses madvise.
        if done == 0 {
            eprintln!("process_madvise(PIDFD_SELF, MADV_DONTNEED) is not available here");
        }
        unmap(base, len).unwrap();
    }
}
