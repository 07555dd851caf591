//! The floor of a random 4 KiB miss served in the faulting thread from an
//! `O_DIRECT` file, with no umio in it: only the mechanism umio's
//! in-thread service is built on (`UFFD_FEATURE_SIGBUS`: the kernel raises
//! SIGBUS in the faulting thread, whose handler reads the page with one
//! `O_DIRECT` `pread` into an aligned buffer, installs it with one
//! `UFFDIO_COPY` and returns), as `sigbus-fault.c` of the kernel notes
//! measures it with a `pread` from tmpfs. `bench direct-io` (`examples/bench`) runs it
//! beside the device's own `pread` and beside umio.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crate::bench::{PAGE, Result};
use crate::fault_path::{UFFDIO_COPY, UffdioCopy, errno, register_missing, userfaultfd};

/// `UFFD_FEATURE_SIGBUS` (Linux 4.14).
const FEATURE_SIGBUS: u64 = 1 << 7;

// What the handler needs, set while one measurement runs (`RUNNING`).
static UFFD: AtomicI32 = AtomicI32::new(-1);
static FILE: AtomicI32 = AtomicI32::new(-1);
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static BUF: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static RUNNING: Mutex<()> = Mutex::new(());

#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// Writes `msg` to stderr and exits: a handler that cannot install the
/// page must not return (the access would fault again, forever).
fn die(msg: &[u8]) -> ! {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(3)
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize & !(PAGE - 1);
    let base = BASE.load(Relaxed);
    if !(base..END.load(Relaxed)).contains(&addr) {
        die(b"sigbus_floor: SIGBUS outside the measured range\n");
    }
    let buf = BUF.load(Relaxed);
    // SAFETY: `buf` is a live, aligned page (set before the region is
    // touched, cleared after); the descriptor is open meanwhile.
    let n = unsafe { libc::pread(FILE.load(Relaxed), buf.cast(), PAGE, (addr - base) as i64) };
    if n != PAGE as isize {
        die(b"sigbus_floor: O_DIRECT pread failed\n");
    }
    let mut c = UffdioCopy {
        dst: addr as u64,
        src: buf as u64,
        len: PAGE as u64,
        mode: 0,
        copy: 0,
    };
    // SAFETY: copies one page from our buffer into the registered range.
    if unsafe { libc::ioctl(UFFD.load(Relaxed), UFFDIO_COPY, &mut c) } != 0
        && errno().raw_os_error() != Some(libc::EEXIST)
    {
        die(b"sigbus_floor: UFFDIO_COPY failed\n");
    }
}

/// Faults per second: one byte read from each page of `pages` (indices of
/// 4 KiB pages of the file at `path`) through an anonymous mapping of the
/// file's size registered with userfaultfd in SIGBUS mode, each miss served
/// by the handler above. Each page should be read once (a page read twice
/// is a hit). The process's SIGBUS disposition is restored after; calls
/// are serialized.
pub fn sigbus_direct_rate(path: &Path, pages: &[u64]) -> Result<f64> {
    let _one = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let len = usize::try_from(file.metadata()?.len())? / PAGE * PAGE;
    if len == 0 || pages.iter().any(|&p| p as usize >= len / PAGE) {
        return Err("sigbus_floor: a page beyond the file".into());
    }
    let uffd = userfaultfd(FEATURE_SIGBUS)?;
    // SAFETY: a new anonymous mapping, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!("mmap: {}", errno()).into());
    }
    let unmap = || {
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(base, len) };
    };
    if let Err(e) = register_missing(uffd.as_raw_fd(), base as usize, len) {
        unmap();
        return Err(e);
    }
    let mut buf = Box::new(Page([0; PAGE]));
    UFFD.store(uffd.as_raw_fd(), Relaxed);
    FILE.store(file.as_raw_fd(), Relaxed);
    BASE.store(base as usize, Relaxed);
    END.store(base as usize + len, Relaxed);
    BUF.store(buf.0.as_mut_ptr(), Relaxed);
    // SAFETY: an all-zero sigaction is a valid value (no handler, no flags).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the handler set below is async-signal-safe
    // (atomics, pread, ioctl, write, _exit).
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigbus as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO;
    // SAFETY: installs our handler, keeping the old one to restore.
    if unsafe { libc::sigaction(libc::SIGBUS, &sa, &mut old) } != 0 {
        let e = errno();
        unmap();
        return Err(format!("sigaction: {e}").into());
    }
    let p = base as *const u8;
    let mut sum = 0u64;
    let t = Instant::now();
    for &pg in pages {
        // SAFETY: inside the mapping; a miss is served by the handler.
        sum = sum.wrapping_add(u64::from(unsafe {
            std::ptr::read_volatile(p.add(pg as usize * PAGE + 17))
        }));
    }
    let rate = pages.len() as f64 / t.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    // SAFETY: restores the disposition saved above.
    unsafe { libc::sigaction(libc::SIGBUS, &old, std::ptr::null_mut()) };
    BUF.store(std::ptr::null_mut(), Relaxed);
    unmap();
    drop(uffd);
    drop(buf);
    Ok(rate)
}
