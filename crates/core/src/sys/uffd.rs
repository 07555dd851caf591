//! userfaultfd: the descriptor, its ioctls and its messages
//! (`include/uapi/linux/userfaultfd.h`).

use std::cell::Cell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::errno;

// The ioctl numbers below use the asm-generic `_IOC` encoding (2 direction
// bits at 30, 14 size bits at 16, `_IOC_WRITE` 1, `_IOC_READ` 2). Alpha,
// MIPS, PowerPC and SPARC encode differently: refuse to build there rather
// than send the kernel wrong numbers.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "riscv32",
    target_arch = "s390x",
    target_arch = "loongarch64",
)))]
compile_error!(
    "umio's userfaultfd ioctl numbers use the asm-generic _IOC encoding, which this architecture does not"
);

const UFFD_API: u64 = 0xAA;
const UFFDIO: u64 = 0xAA;

const fn ioc(dir: u64, nr: u64, size: usize) -> libc::c_ulong {
    ((dir << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr) as libc::c_ulong
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const IOWR: u64 = IOC_READ | IOC_WRITE;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioPoison {
    range: UffdioRange,
    mode: u64,
    updated: i64,
}

const UFFDIO_API: libc::c_ulong = ioc(IOWR, 0x3F, size_of::<UffdioApi>());
const UFFDIO_REGISTER: libc::c_ulong = ioc(IOWR, 0x00, size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: libc::c_ulong = ioc(IOC_READ, 0x01, size_of::<UffdioRange>());
const UFFDIO_WAKE: libc::c_ulong = ioc(IOC_READ, 0x02, size_of::<UffdioRange>());
const UFFDIO_COPY: libc::c_ulong = ioc(IOWR, 0x03, size_of::<UffdioCopy>());
const UFFDIO_WRITEPROTECT: libc::c_ulong = ioc(IOWR, 0x06, size_of::<UffdioWriteprotect>());
const UFFDIO_POISON: libc::c_ulong = ioc(IOWR, 0x08, size_of::<UffdioPoison>());
const UFFDIO_MOVE: libc::c_ulong = ioc(IOWR, 0x05, size_of::<UffdioMove>());
// The structs as `include/uapi/linux/userfaultfd.h` lays them out, and
// the ioctl numbers the kernel's headers give (`_IOWR(UFFDIO, ...)`).
const _: () = {
    assert!(size_of::<UffdioApi>() == 24);
    assert!(size_of::<UffdioRange>() == 16);
    assert!(size_of::<UffdioRegister>() == 32);
    assert!(size_of::<UffdioCopy>() == 40);
    assert!(size_of::<UffdioWriteprotect>() == 24);
    assert!(size_of::<UffdioPoison>() == 32);
    assert!(UFFDIO_API == 0xc018_aa3f);
    assert!(UFFDIO_REGISTER == 0xc020_aa00);
    assert!(UFFDIO_UNREGISTER == 0x8010_aa01);
    assert!(UFFDIO_WAKE == 0x8010_aa02);
    assert!(UFFDIO_COPY == 0xc028_aa03);
    assert!(UFFDIO_WRITEPROTECT == 0xc018_aa06);
    assert!(UFFDIO_POISON == 0xc020_aa08);
    assert!(size_of::<UffdioMove>() == 40);
    assert!(UFFDIO_MOVE == 0xc028_aa05);
    assert!(USERFAULTFD_IOC_NEW == 0xaa00);
};
/// `USERFAULTFD_IOC_NEW` on `/dev/userfaultfd`: `_IO(0xAA, 0x00)`.
const USERFAULTFD_IOC_NEW: libc::c_ulong = ioc(0, 0x00, 0);
/// `userfaultfd(2)` flag: only faults raised in user mode are delivered.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;

const REGISTER_MODE_MISSING: u64 = 1 << 0;
const REGISTER_MODE_WP: u64 = 1 << 1;
const COPY_MODE_DONTWAKE: u64 = 1 << 0;
const COPY_MODE_WP: u64 = 1 << 1;
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

/// Bits of `UFFDIO_API`'s feature mask that umio uses or reports.
pub(crate) mod feature {
    pub const PAGEFAULT_FLAG_WP: u64 = 1 << 0;
    pub const EVENT_FORK: u64 = 1 << 1;
    pub const EVENT_REMAP: u64 = 1 << 2;
    pub const EVENT_REMOVE: u64 = 1 << 3;
    pub const MISSING_HUGETLBFS: u64 = 1 << 4;
    pub const MISSING_SHMEM: u64 = 1 << 5;
    pub const EVENT_UNMAP: u64 = 1 << 6;
    pub const SIGBUS: u64 = 1 << 7;
    pub const THREAD_ID: u64 = 1 << 8;
    pub const MINOR_HUGETLBFS: u64 = 1 << 9;
    pub const MINOR_SHMEM: u64 = 1 << 10;
    pub const EXACT_ADDRESS: u64 = 1 << 11;
    pub const WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
    pub const WP_UNPOPULATED: u64 = 1 << 13;
    pub const POISON: u64 = 1 << 14;
    pub const WP_ASYNC: u64 = 1 << 15;
    pub const MOVE: u64 = 1 << 16;

    /// Names of the feature bits, for reports.
    pub const NAMES: [(u64, &str); 17] = [
        (PAGEFAULT_FLAG_WP, "WP"),
        (EVENT_FORK, "EVENT_FORK"),
        (EVENT_REMAP, "EVENT_REMAP"),
        (EVENT_REMOVE, "EVENT_REMOVE"),
        (MISSING_HUGETLBFS, "MISSING_HUGETLBFS"),
        (MISSING_SHMEM, "MISSING_SHMEM"),
        (EVENT_UNMAP, "EVENT_UNMAP"),
        (SIGBUS, "SIGBUS"),
        (THREAD_ID, "THREAD_ID"),
        (MINOR_HUGETLBFS, "MINOR_HUGETLBFS"),
        (MINOR_SHMEM, "MINOR_SHMEM"),
        (EXACT_ADDRESS, "EXACT_ADDRESS"),
        (WP_HUGETLBFS_SHMEM, "WP_HUGETLBFS_SHMEM"),
        (WP_UNPOPULATED, "WP_UNPOPULATED"),
        (POISON, "POISON"),
        (WP_ASYNC, "WP_ASYNC"),
        (MOVE, "MOVE"),
    ];
}

/// `uffd_msg.event` of a page fault.
const EVENT_PAGEFAULT: u8 = 0x12;
/// `uffd_msg.event` of `madvise(MADV_DONTNEED/MADV_FREE/MADV_REMOVE)` on a
/// registered range, with `UFFD_FEATURE_EVENT_REMOVE`.
const EVENT_REMOVE: u8 = 0x15;
/// `uffd_msg.arg.pagefault.flags` bits.
pub(crate) const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub(crate) const PAGEFAULT_FLAG_WP: u64 = 1 << 1;

/// `struct uffd_msg`: 32 bytes, the event tag then a union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UffdMsg {
    event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    arg: [u64; 3],
}

const _: () = assert!(size_of::<UffdMsg>() == 32);

impl UffdMsg {
    /// The page fault this message reports: (address, flags).
    pub(crate) fn pagefault(&self) -> Option<(usize, u64)> {
        (self.event == EVENT_PAGEFAULT).then_some((self.arg[1] as usize, self.arg[0]))
    }

    /// The range `[start, end)` this message says is being removed
    /// (`UFFD_EVENT_REMOVE`). The `madvise` caller waits until the message
    /// is read, then drops the pages.
    pub(crate) fn remove(&self) -> Option<(usize, usize)> {
        (self.event == EVENT_REMOVE).then_some((self.arg[0] as usize, self.arg[1] as usize))
    }

    /// The faulting thread's id, with `UFFD_FEATURE_THREAD_ID` (0
    /// without).
    pub(crate) fn thread_id(&self) -> u32 {
        self.arg[2] as u32
    }
}

/// Why no userfaultfd could be opened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenFailure {
    pub syscall_errno: i32,
    pub device_errno: i32,
}

/// A userfaultfd descriptor, non-blocking and close-on-exec.
#[derive(Debug)]
pub(crate) struct Uffd {
    fd: OwnedFd,
    /// Messages a reader took off the descriptor while one of its own
    /// ioctls was refused with `EAGAIN` (see [`mark_reader`]), returned
    /// first by the next [`read_messages`](Uffd::read_messages).
    stash: Mutex<Vec<UffdMsg>>,
    stashed: AtomicBool,
    /// [`EAGAIN_TIMEOUT`]; shorter in tests.
    eagain_timeout: Duration,
}

thread_local! {
    /// This thread reads the descriptor's messages (a filler).
    static READER: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread a reader of its runtime's messages. While a
/// remove event is pending (`UFFD_FEATURE_EVENT_REMOVE`), every
/// `UFFDIO_COPY`, `UFFDIO_WRITEPROTECT` and `UFFDIO_POISON` fails with
/// `EAGAIN` until someone reads it; a reader retrying its own ioctl reads
/// the pending messages itself (into the stash) rather than wait for
/// another reader that may be retrying too.
pub(crate) fn mark_reader() {
    READER.with(|r| r.set(true));
}

/// Whether the calling thread reads its runtime's messages.
pub(crate) fn is_reader() -> bool {
    READER.with(|r| r.get())
}

/// How long an ioctl waits out `EAGAIN` before it gives up: readers never
/// block, so this is only reached if the threads that read the descriptor
/// are gone (see [`EagainWait`]).
const EAGAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long, and how many times at most, a thread that reads no events
/// only yields between retries before it sleeps.
const EAGAIN_YIELD_FOR: Duration = Duration::from_micros(200);
const EAGAIN_YIELDS: u32 = 256;
/// The first sleep between two retries (about the kernel's default timer
/// slack: shorter sleeps last as long); it doubles up to
/// [`EAGAIN_SLEEP_MAX`].
const EAGAIN_SLEEP_MIN: Duration = Duration::from_micros(50);
const EAGAIN_SLEEP_MAX: Duration = Duration::from_millis(1);

/// Waiting out `EAGAIN` from `UFFDIO_COPY`, `UFFDIO_WRITEPROTECT` and
/// `UFFDIO_POISON`: one per ioctl call, told of each refusal.
///
/// The kernel refuses these ioctls with `EAGAIN` while the mm is changing
/// (`ctx->mmap_changing`): with remove events on (the only event umio
/// asks for), from the moment a `UFFD_EVENT_REMOVE` is queued until a
/// reader has read it and its `madvise` caller, woken by the read, has run
/// again (the caller lowers the count itself when it resumes). So:
///
/// - **A reader reads; it never waits for another.** The event its ioctl
///   waits for may be one only it would read (the only filler, or every
///   filler retrying at once): sleeping until another reader comes would
///   deadlock, and sleeping at all starves the callers (events queue up
///   unread meanwhile, each holding the count up: every retry right after
///   a read then finds the callers just woken not yet run; measured with
///   `tests/remove_events.rs`' evictions-with-`madvise` test, 5 s became
///   25 s to minutes). A reader (a filler) reads the pending messages on
///   every refusal, into the stash its next read returns first
///   ([`Uffd::read_messages`]); after a read that took some it retries at
///   once, else it yields: the callers it woke are runnable, usually on
///   its own CPU (the kernel wakes them there), and yielding runs them.
///   Its retries last as long as the callers take to run, and no longer:
///   nothing else holds the refusal up.
/// - **Everyone else backs off.** An evictor, a prefetch thread, an
///   application thread or an in-thread handler only waits for the
///   readers and the callers: it yields for [`EAGAIN_YIELD_FOR`] (at most
///   [`EAGAIN_YIELDS`] times: the usual refusal, a caller's wake-up, ends
///   within it), then sleeps, [`EAGAIN_SLEEP_MIN`] doubling to
///   [`EAGAIN_SLEEP_MAX`], so that a long refusal costs about a
///   thousand retries a second, not a CPU. Sleeping is safe in the
///   in-thread service's signal handler (`nanosleep`).
/// - **The bound is the readers, not the region.** Every caller is inside
///   its region and holds the range's pages busy, which an unmap waits
///   for, so the range outlives the call; and a range no longer mapped
///   would not end the refusal (the kernel checks `mmap_changing` first).
///   What ends it is a reader reading the event and its caller running,
///   and readers run as long as any region does. Should none be left, the
///   wait gives up after [`EAGAIN_TIMEOUT`] with `EAGAIN`, which the
///   callers report as the ioctl's failure (a page left dirty, a fill
///   failed).
struct EagainWait {
    retries: u32,
    since: Option<Instant>,
}

impl EagainWait {
    const fn new() -> EagainWait {
        EagainWait {
            retries: 0,
            since: None,
        }
    }

    /// The ioctl was refused with `EAGAIN`: reads the pending messages if
    /// this thread is a reader, then waits a little. False once the caller
    /// should give up.
    fn wait(&mut self, uffd: &Uffd) -> bool {
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > uffd.eagain_timeout {
            return false;
        }
        #[cfg(test)]
        tests::EAGAIN_RETRIES.with(|n| n.set(n.get() + 1));
        if is_reader() {
            if !uffd.stash_pending() {
                std::thread::yield_now();
            }
            return true;
        }
        self.retries += 1;
        if self.retries <= EAGAIN_YIELDS && since.elapsed() < EAGAIN_YIELD_FOR {
            std::thread::yield_now();
        } else {
            self.retries = self.retries.max(EAGAIN_YIELDS + 1);
            let doublings = (self.retries - EAGAIN_YIELDS - 1).min(16);
            std::thread::sleep((EAGAIN_SLEEP_MIN * (1 << doublings)).min(EAGAIN_SLEEP_MAX));
        }
        true
    }
}

impl AsRawFd for Uffd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Result of a range ioctl that is not a plain success.
pub(crate) type Errno = i32;

impl Uffd {
    /// Opens a descriptor, by the system call first and `/dev/userfaultfd`
    /// second. In full mode it also receives faults raised by the kernel
    /// (a mapped buffer passed to `read(2)`), which needs privilege (root,
    /// `CAP_SYS_PTRACE`, `vm.unprivileged_userfaultfd=1` or access to the
    /// device); with `user_mode_only` (`UFFD_USER_MODE_ONLY`, Linux 5.11+,
    /// allowed to everyone) the kernel's own accesses fail with `EFAULT`.
    pub(crate) fn open(user_mode_only: bool) -> Result<Uffd, OpenFailure> {
        let flags = libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | if user_mode_only {
                UFFD_USER_MODE_ONLY
            } else {
                0
            };
        // SAFETY: userfaultfd(2) takes a flags word and returns a new
        // descriptor or -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as RawFd;
        if fd >= 0 {
            // SAFETY: fd is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            return Ok(Uffd::from_fd(fd));
        }
        let syscall_errno = errno();
        let dev = c"/dev/userfaultfd";
        // SAFETY: dev is a NUL-terminated path; open returns a descriptor or -1.
        let devfd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if devfd < 0 {
            return Err(OpenFailure {
                syscall_errno,
                device_errno: errno(),
            });
        }
        // SAFETY: devfd is ours; wrapping it closes it on every path.
        let devfd = unsafe { OwnedFd::from_raw_fd(devfd) };
        // SAFETY: USERFAULTFD_IOC_NEW takes the flags by value and returns a
        // new descriptor or -1.
        let fd = unsafe { libc::ioctl(devfd.as_raw_fd(), USERFAULTFD_IOC_NEW, flags) };
        if fd < 0 {
            return Err(OpenFailure {
                syscall_errno,
                device_errno: errno(),
            });
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Uffd::from_fd(fd))
    }

    fn from_fd(fd: OwnedFd) -> Uffd {
        Uffd {
            fd,
            stash: Mutex::new(Vec::new()),
            stashed: AtomicBool::new(false),
            eagain_timeout: EAGAIN_TIMEOUT,
        }
    }

    /// A reader's ioctl was refused with `EAGAIN`: takes the pending
    /// messages off the descriptor, so that the event's `madvise` caller
    /// goes on (see [`EagainWait`]). Whether there were any.
    fn stash_pending(&self) -> bool {
        let mut buf = [UffdMsg::default(); 16];
        let mut any = false;
        while let Ok(n) = self.read_raw(&mut buf)
            && n > 0
        {
            any = true;
            let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
            stash.extend_from_slice(&buf[..n]);
            self.stashed.store(true, Ordering::Release);
            if n < buf.len() {
                break;
            }
        }
        any
    }

    /// Whether a reader stashed messages that no one has read yet.
    pub(crate) fn has_stashed(&self) -> bool {
        self.stashed.load(Ordering::Acquire)
    }

    /// `UFFDIO_API`: enables `features` and returns every feature the
    /// kernel supports. Allowed once per descriptor.
    pub(crate) fn api(&self, features: u64) -> Result<u64, Errno> {
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        // SAFETY: api is a valid UffdioApi that the kernel reads and writes.
        let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_API, &mut api) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(api.features)
        }
    }

    /// Registers `[start, start+len)` for missing faults, and write-protect
    /// faults if `wp`.
    pub(crate) fn register(&self, start: usize, len: usize, wp: bool) -> Result<(), Errno> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: REGISTER_MODE_MISSING | if wp { REGISTER_MODE_WP } else { 0 },
            ioctls: 0,
        };
        // SAFETY: reg is a valid UffdioRegister; registering only changes
        // how faults in the range are handled.
        let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_REGISTER, &mut reg) };
        if r < 0 { Err(errno()) } else { Ok(()) }
    }

    /// Unregisters a range; threads blocked on faults in it are woken.
    pub(crate) fn unregister(&self, start: usize, len: usize) -> Result<(), Errno> {
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: range is a valid UffdioRange.
        let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_UNREGISTER, &mut range) };
        if r < 0 { Err(errno()) } else { Ok(()) }
    }

    /// Wakes threads waiting on faults in a range.
    pub(crate) fn wake(&self, start: usize, len: usize) {
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: range is a valid UffdioRange. A failure (range gone) leaves
        // nobody to wake, so it is ignored.
        unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_WAKE, &mut range) };
    }

    /// Atomically copies `src` into missing pages at `dst`, installing
    /// them write-protected if `wp`, and wakes waiters unless `dontwake`.
    /// Retries partial copies interrupted by `EAGAIN`. `Err(EEXIST)` means
    /// a page of the range was already present. The kernel fills missing
    /// pages of a range registered with this descriptor only: no memory
    /// the process can see changes under it.
    pub(crate) fn copy(
        &self,
        dst: usize,
        src: &[u8],
        wp: bool,
        dontwake: bool,
    ) -> Result<(), Errno> {
        let len = src.len();
        let src = src.as_ptr();
        let mode =
            if wp { COPY_MODE_WP } else { 0 } | if dontwake { COPY_MODE_DONTWAKE } else { 0 };
        let mut done = 0usize;
        let mut eagain = EagainWait::new();
        while done < len {
            let mut c = UffdioCopy {
                dst: (dst + done) as u64,
                src: src as u64 + done as u64,
                len: (len - done) as u64,
                mode,
                copy: 0,
            };
            // SAFETY: c is a valid UffdioCopy; its source lies in `src`,
            // a live slice; the kernel only fills missing pages of a range
            // registered with this descriptor.
            let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_COPY, &mut c) };
            if r == 0 {
                return Ok(());
            }
            let e = errno();
            if c.copy > 0 {
                done += c.copy as usize;
            }
            if e != libc::EAGAIN || !eagain.wait(self) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// `UFFDIO_MOVE` (Linux 6.8+): moves the pages of `src..src+len` (a
    /// range of private anonymous memory, every page present and not
    /// shared) to `dst..dst+len` (anonymous memory registered with this
    /// descriptor, no page present), atomically page by page: from the
    /// move on, an access to `src` faults as missing. Wakes nobody.
    /// `Err((moved, errno))`: the first `moved` bytes were moved.
    pub(crate) fn move_pages(
        &self,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<(), (usize, Errno)> {
        const MOVE_MODE_DONTWAKE: u64 = 1 << 0;
        let mut done = 0usize;
        let mut eagain = EagainWait::new();
        while done < len {
            let mut m = UffdioMove {
                dst: (dst + done) as u64,
                src: (src + done) as u64,
                len: (len - done) as u64,
                mode: MOVE_MODE_DONTWAKE,
                moved: 0,
            };
            // SAFETY: m is a valid UffdioMove. The kernel moves pages of
            // this process's own anonymous memory between two ranges the
            // caller owns (the source held busy by umio, so that nothing
            // else maps or fills it meanwhile; the destination umio's
            // scratch); it changes no memory that Rust code holds a
            // reference to.
            let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_MOVE, &mut m) };
            if r == 0 {
                return Ok(());
            }
            let e = errno();
            if m.moved > 0 {
                done += m.moved as usize;
            }
            if e != libc::EAGAIN || !eagain.wait(self) {
                return Err((done, e));
            }
        }
        Ok(())
    }

    /// Sets (`wp`) or clears write protection on a range. Clearing wakes
    /// the threads waiting on the range unless `dontwake`.
    pub(crate) fn writeprotect(
        &self,
        start: usize,
        len: usize,
        wp: bool,
        dontwake: bool,
    ) -> Result<(), Errno> {
        let mut w = UffdioWriteprotect {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: if wp { WRITEPROTECT_MODE_WP } else { 0 }
                | if dontwake {
                    WRITEPROTECT_MODE_DONTWAKE
                } else {
                    0
                },
        };
        let mut eagain = EagainWait::new();
        loop {
            // SAFETY: w is a valid UffdioWriteprotect; it changes page
            // protection of a registered range only.
            let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut w) };
            if r == 0 {
                return Ok(());
            }
            // The whole range is refused or done: `EAGAIN` comes before
            // any page is changed.
            match errno() {
                libc::EAGAIN if eagain.wait(self) => {}
                e => return Err(e),
            }
        }
    }

    /// Marks missing pages of a range poisoned: their next access raises
    /// SIGBUS, as a failed read of a mapped file does. Wakes waiters.
    pub(crate) fn poison(&self, start: usize, len: usize) -> Result<(), Errno> {
        let mut p = UffdioPoison {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: 0,
            updated: 0,
        };
        let mut eagain = EagainWait::new();
        loop {
            // SAFETY: p is a valid UffdioPoison on a registered range.
            let r = unsafe { libc::ioctl(self.as_raw_fd(), UFFDIO_POISON, &mut p) };
            if r == 0 {
                return Ok(());
            }
            match errno() {
                libc::EAGAIN if eagain.wait(self) => {
                    if p.updated > 0 {
                        p.range.start += p.updated as u64;
                        p.range.len -= p.updated as u64;
                        p.updated = 0;
                    }
                }
                e => return Err(e),
            }
        }
    }

    /// Reads up to `buf.len()` pending messages, those a reader stashed
    /// first; 0 if none is pending.
    pub(crate) fn read_messages(&self, buf: &mut [UffdMsg]) -> Result<usize, Errno> {
        if self.has_stashed() {
            let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
            let n = stash.len().min(buf.len());
            buf[..n].copy_from_slice(&stash[..n]);
            stash.drain(..n);
            if stash.is_empty() {
                self.stashed.store(false, Ordering::Release);
            }
            if n > 0 {
                return Ok(n);
            }
        }
        self.read_raw(buf)
    }

    fn read_raw(&self, buf: &mut [UffdMsg]) -> Result<usize, Errno> {
        loop {
            // SAFETY: buf is writable memory of buf.len() messages; the
            // kernel writes whole messages only.
            let n = unsafe {
                libc::read(
                    self.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(buf),
                )
            };
            if n >= 0 {
                return Ok(n as usize / size_of::<UffdMsg>());
            }
            match errno() {
                libc::EAGAIN => return Ok(0),
                libc::EINTR => continue,
                e => return Err(e),
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::Cell;
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::thread::JoinHandle;

    use super::*;
    use crate::sys::mm;

    thread_local! {
        /// Retries after `EAGAIN` this thread made ([`EagainWait::wait`]).
        pub(in crate::sys) static EAGAIN_RETRIES: Cell<u64> = const { Cell::new(0) };
    }

    const PAGE: usize = 4096;

    /// A descriptor with remove events and write-protection, two resident
    /// pages registered with it, and a thread in `madvise(MADV_DONTNEED)`
    /// of the second page, waiting for its remove event to be read: until
    /// then the mm is changing, and ioctls on the descriptor get `EAGAIN`.
    struct Pending {
        uffd: Arc<Uffd>,
        base: usize,
        madvise: Option<JoinHandle<Result<(), i32>>>,
    }

    impl Pending {
        fn new(eagain_timeout: Duration) -> Pending {
            let mut uffd = Uffd::open(false)
                .or_else(|_| Uffd::open(true))
                .expect("a userfaultfd (the tests need it: run as root)");
            uffd.eagain_timeout = eagain_timeout;
            uffd.api(feature::EVENT_REMOVE | feature::PAGEFAULT_FLAG_WP)
                .expect("UFFDIO_API with remove events");
            let base = mm::map_anonymous(2 * PAGE, PAGE, true).unwrap();
            uffd.register(base, 2 * PAGE, true).unwrap();
            uffd.copy(base, &[7u8; 2 * PAGE], false, false).unwrap();
            let uffd = Arc::new(uffd);
            let madvise = Some(std::thread::spawn(move || {
                mm::advise(base + PAGE, PAGE, libc::MADV_DONTNEED)
            }));
            // Queued: the descriptor is readable (the message stays).
            let mut fds = [libc::pollfd {
                fd: uffd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            assert_eq!(crate::sys::poller::poll(&mut fds, 10_000), Ok(1));
            Pending {
                uffd,
                base,
                madvise,
            }
        }

        /// Reads the remove event (from `read_messages`: the stash first)
        /// and waits for the `madvise` to return.
        fn finish(&mut self) {
            let mut msgs = [UffdMsg::default(); 4];
            let n = self.uffd.read_messages(&mut msgs).unwrap();
            assert_eq!(n, 1, "one message: the remove event");
            assert_eq!(
                msgs[0].remove(),
                Some((self.base + PAGE, self.base + 2 * PAGE))
            );
            let madvise = self.madvise.take().unwrap();
            assert_eq!(madvise.join().unwrap(), Ok(()));
        }
    }

    impl Drop for Pending {
        fn drop(&mut self) {
            let _ = self.uffd.unregister(self.base, 2 * PAGE);
            let _ = mm::unmap(self.base, 2 * PAGE);
        }
    }

    /// `UFFDIO_WRITEPROTECT` of the first page on a thread of its own:
    /// the outcome, the retries after `EAGAIN` and how long it took.
    fn writeprotect_on_a_thread(
        p: &Pending,
        reader: bool,
    ) -> mpsc::Receiver<(Result<(), Errno>, u64, Duration)> {
        let (tx, rx) = mpsc::channel();
        let (uffd, base) = (p.uffd.clone(), p.base);
        std::thread::spawn(move || {
            if reader {
                mark_reader();
            }
            let begin = Instant::now();
            let r = uffd.writeprotect(base, PAGE, true, false);
            let _ = tx.send((r, EAGAIN_RETRIES.with(Cell::get), begin.elapsed()));
        });
        rx
    }

    /// A thread that reads no events waits for a reader without spinning:
    /// past a few yields it sleeps, so it retries at most about once a
    /// millisecond, and succeeds once the event is read.
    #[test]
    fn eagain_is_waited_out_asleep() {
        let mut p = Pending::new(EAGAIN_TIMEOUT);
        let rx = writeprotect_on_a_thread(&p, false);
        std::thread::sleep(Duration::from_millis(200));
        assert!(rx.try_recv().is_err(), "refused while the mm changes");
        p.finish();
        let (r, retries, took) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(r, Ok(()));
        assert!(retries > 0, "it was refused");
        // The yields (256 at most), the sleeps growing to a millisecond
        // (5), then one retry per millisecond: a spin retries many times
        // more.
        let most = 256 + 8 + took.as_millis() as u64;
        assert!(
            retries <= most,
            "{retries} retries in {took:?}: a spin, not a sleep (at most {most})"
        );
    }

    /// A reader waits for no one: it reads the event itself (into the
    /// stash, which its next read returns), so the `madvise` goes on and
    /// its own ioctl succeeds, with nobody else reading.
    #[test]
    fn a_reader_reads_the_event_it_waits_for() {
        let mut p = Pending::new(EAGAIN_TIMEOUT);
        let rx = writeprotect_on_a_thread(&p, true);
        let (r, retries, _) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no deadlock");
        assert_eq!(r, Ok(()));
        assert!(retries > 0, "it was refused");
        assert!(p.uffd.has_stashed());
        p.finish();
        assert!(!p.uffd.has_stashed());
    }

    /// With no reader left, the wait is bounded: the ioctl gives up with
    /// `EAGAIN`.
    #[test]
    fn without_a_reader_the_wait_gives_up() {
        let mut p = Pending::new(Duration::from_millis(300));
        let rx = writeprotect_on_a_thread(&p, false);
        let (r, _, took) = rx.recv_timeout(Duration::from_secs(10)).expect("bounded");
        assert_eq!(r, Err(libc::EAGAIN));
        assert!(took >= Duration::from_millis(300));
        p.finish();
    }
}
