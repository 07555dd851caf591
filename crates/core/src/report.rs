//! Errors met on the fault path, logged where logging is safe.
//!
//! The in-thread fault service runs the fault path in a SIGBUS handler,
//! where logging could deadlock (the interrupted code may hold the
//! logger's lock, or the allocator's, which formatting takes). So an
//! error met in signal context ([`in_fault_handler`]) is recorded as a
//! small `Copy` value in a fixed ring of atomics (no lock, no allocation)
//! and logged later by a thread that may: the evictors, every round
//! (at least every 100 ms), and the next map ([`drain`]). Elsewhere it is
//! logged at once. A full ring drops the newest reports and counts them.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use umio_backends::{StoreError, StoreOp};

use crate::handler_stacks::in_fault_handler;

/// An error of the fault path, as a value: formatted only when logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Report {
    /// A miss found no cache space in time.
    NoCacheSpace { region: u64, page: u64 },
    /// `UFFDIO_COPY` failed: the faulting thread gets SIGBUS.
    CopyFailed { region: u64, page: u64, errno: i32 },
    /// A store read failed.
    StoreRead { region: u64, err: StoreError },
    /// The staging buffer could not be allocated.
    StagingBuffer { errno: i32 },
    /// `UFFDIO_POISON` failed.
    Poison { errno: i32 },
    /// The kernel has no `UFFDIO_POISON`.
    NoPoison,
    /// `MADV_DONTNEED` failed.
    Madvise { errno: i32 },
    /// Clearing write protection failed.
    WriteProtect { errno: i32 },
    /// The region's prefetcher panicked.
    PrefetchPanicked,
    /// A thread kept faulting on a page umio holds resident: its mapping
    /// was dropped behind umio's back.
    Stuck { region: u64, page: u64, dirty: bool },
    /// An in-thread fault taken while serving `depth` others on the same
    /// thread, more than the service nests.
    NestedTooDeep { depth: u64 },
    /// An in-thread fault on a page its own thread holds busy, a frame
    /// below (a signal handler that interrupted the fill touched the page
    /// being filled): it cannot be served.
    OwnPage { region: u64, page: u64 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Level {
    Error,
    Warn,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Report::NoCacheSpace { region, page } => write!(
                f,
                "no cache space for a miss on page {page} of region {region} in time; \
                 the faulting thread gets SIGBUS"
            ),
            Report::CopyFailed {
                region,
                page,
                errno,
            } => write!(
                f,
                "UFFDIO_COPY of page {page} of region {region} failed: errno {errno}; \
                 the faulting thread gets SIGBUS"
            ),
            Report::StoreRead { region, err } => write!(f, "region {region}'s store: {err}"),
            Report::StagingBuffer { errno } => {
                write!(f, "staging buffer allocation failed: errno {errno}")
            }
            Report::Poison { errno } => write!(f, "UFFDIO_POISON failed: errno {errno}"),
            Report::NoPoison => f.write_str(
                "this kernel has no UFFDIO_POISON; a failed read is retried on the next fault",
            ),
            Report::Madvise { errno } => write!(f, "MADV_DONTNEED failed: errno {errno}"),
            Report::WriteProtect { errno } => {
                write!(f, "UFFDIO_WRITEPROTECT (clear) failed: errno {errno}")
            }
            Report::PrefetchPanicked => {
                f.write_str("the prefetch policy panicked; nothing prefetched")
            }
            Report::NestedTooDeep { depth } => write!(
                f,
                "an in-thread fault nested too deep ({depth} levels: a store or callback \
                 reading umio memory that reads umio memory...), more than the service \
                 serves; the faulting thread gets SIGBUS"
            ),
            Report::Stuck {
                region,
                page,
                dirty,
            } => write!(
                f,
                "a thread faulted {} times in a row on page {page} of region {region}, which \
                 umio holds resident ({}): its mapping was dropped behind umio's back (madvise \
                 MADV_DONTNEED or MADV_FREE on umio memory?); {}",
                crate::progress::STUCK_AFTER,
                if dirty { "dirty" } else { "clean" },
                if dirty {
                    "its unwritten changes are lost: the page is poisoned and the thread gets SIGBUS"
                } else {
                    "the page is dropped and filled again"
                }
            ),
            Report::OwnPage { region, page } => write!(
                f,
                "page {page} of region {region} was touched by code that interrupted its own \
                 thread's fill of it (a signal handler): it cannot be served; the thread gets SIGBUS"
            ),
        }
    }
}

/// Logs `r` as an error, now or (in signal context) later.
pub(crate) fn error(r: Report) {
    report(Level::Error, r)
}

/// Logs `r` as a warning, now or (in signal context) later.
pub(crate) fn warn(r: Report) {
    report(Level::Warn, r)
}

fn report(level: Level, r: Report) {
    if in_fault_handler() {
        RING.push(level, r);
    } else {
        log_now(level, &r);
    }
}

fn log_now(level: Level, r: &Report) {
    match level {
        Level::Error => log::error!("umio: {r}"),
        Level::Warn => log::warn!("umio: {r}"),
    }
}

/// Logs what signal handlers recorded. Not from a signal handler; a call
/// while another drains returns at once.
pub(crate) fn drain() {
    RING.drain(
        |level, r| log_now(level, &r),
        |lost| log::error!("umio: {lost} more errors met in signal handlers were not recorded"),
    );
}

/// Writes what signal handlers recorded to standard error, from a signal
/// handler: for a SIGBUS about to end the process (the default action),
/// before any thread could log the reason.
/// Async-signal-safe: each line is formatted into a buffer on the stack
/// (no allocation: a store error's errno is written as a number, not
/// through `io::Error`, whose text allocates) and written with one
/// `write(2)`. What it writes is not logged again.
pub(crate) fn drain_to_stderr() {
    RING.drain(
        |level, r| {
            let mut line = StackLine::default();
            let tag = match level {
                Level::Error => "ERROR",
                Level::Warn => "WARN",
            };
            let _ = match r {
                Report::StoreRead { region, err } => fmt::Write::write_fmt(
                    &mut line,
                    format_args!(
                        "[umio {tag}] umio: region {region}'s store: {} at offset {} failed: errno {}\n",
                        err.op, err.offset, err.errno
                    ),
                ),
                r => fmt::Write::write_fmt(&mut line, format_args!("[umio {tag}] umio: {r}\n")),
            };
            crate::sys::signal::write_stderr(line.bytes());
        },
        |lost| {
            let mut line = StackLine::default();
            let _ = fmt::Write::write_fmt(
                &mut line,
                format_args!("[umio ERROR] umio: {lost} more errors in signal handlers were not recorded\n"),
            );
            crate::sys::signal::write_stderr(line.bytes());
        },
    );
}

/// A line formatted on the stack, cut at its capacity (ending in a
/// newline all the same).
struct StackLine {
    buf: [u8; 512],
    len: usize,
}

impl Default for StackLine {
    fn default() -> Self {
        StackLine {
            buf: [0; 512],
            len: 0,
        }
    }
}

impl StackLine {
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Write for StackLine {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            // Cut: keep the line a line.
            self.buf[self.buf.len() - 1] = b'\n';
        }
        Ok(())
    }
}

/// In a fork child: a drain or a report the parent's other threads were
/// in the middle of is over (those threads are not in the child). The
/// ring starts empty; a slot left half-written is free again. Otherwise a
/// drain left marked running would keep the child from logging anything
/// its handlers record.
pub(crate) fn after_fork() {
    for slot in &RING.slots {
        if slot.seq.load(Ordering::Relaxed) % 2 == 1 {
            slot.seq.store(0, Ordering::Relaxed);
        }
    }
    let head = RING.head.load(Ordering::Relaxed);
    RING.tail.store(head, Ordering::Relaxed);
    RING.lost.store(0, Ordering::Relaxed);
    RING.draining.store(false, Ordering::Release);
}

const SLOTS: usize = 64;
const WORDS: usize = 5;

/// The ring: report `i` lives in slot `i % SLOTS`, whose `seq` is
/// `2i + 1` while it is written and `2i + 2` once written. A writer claims
/// a slot only from an even `seq` (a slot being written is skipped and
/// the report counted lost); a reader takes a report only if `seq` says
/// it was written and is the same after it reads the words (else it was
/// overwritten, or never written: lost).
struct Ring {
    head: AtomicU64,
    tail: AtomicU64,
    draining: AtomicBool,
    lost: AtomicU64,
    slots: [RingSlot; SLOTS],
}

struct RingSlot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: RingSlot = RingSlot {
    seq: AtomicU64::new(0),
    words: [const { AtomicU64::new(0) }; WORDS],
};

static RING: Ring = Ring {
    head: AtomicU64::new(0),
    tail: AtomicU64::new(0),
    draining: AtomicBool::new(false),
    lost: AtomicU64::new(0),
    slots: [EMPTY_SLOT; SLOTS],
};

impl Ring {
    /// Async-signal-safe: atomic operations only.
    fn push(&self, level: Level, r: Report) {
        let i = self.head.fetch_add(1, Ordering::AcqRel);
        let slot = &self.slots[(i % SLOTS as u64) as usize];
        let cur = slot.seq.load(Ordering::Acquire);
        if cur % 2 == 1
            || cur > 2 * i
            || slot
                .seq
                .compare_exchange(cur, 2 * i + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        for (w, v) in slot.words.iter().zip(encode(level, r)) {
            w.store(v, Ordering::Relaxed);
        }
        slot.seq.store(2 * i + 2, Ordering::Release);
    }

    fn drain(&self, mut each: impl FnMut(Level, Report), lost: impl FnOnce(u64)) {
        if self.draining.swap(true, Ordering::Acquire) {
            return;
        }
        let head = self.head.load(Ordering::Acquire);
        let mut tail = self.tail.load(Ordering::Relaxed);
        if head > tail + SLOTS as u64 {
            // Overwritten before anyone read them.
            self.lost
                .fetch_add(head - SLOTS as u64 - tail, Ordering::Relaxed);
            tail = head - SLOTS as u64;
        }
        while tail < head {
            let slot = &self.slots[(tail % SLOTS as u64) as usize];
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 == 2 * tail + 1 {
                // Being written: read it next time.
                break;
            }
            let mut words = [0u64; WORDS];
            for (v, w) in words.iter_mut().zip(&slot.words) {
                *v = w.load(Ordering::Relaxed);
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if s1 == 2 * tail + 2
                && slot.seq.load(Ordering::Relaxed) == s1
                && let Some((level, r)) = decode(words)
            {
                each(level, r);
            } else {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            tail += 1;
        }
        self.tail.store(tail, Ordering::Relaxed);
        let n = self.lost.swap(0, Ordering::Relaxed);
        self.draining.store(false, Ordering::Release);
        if n > 0 {
            lost(n);
        }
    }
}

fn op_code(op: StoreOp) -> u64 {
    match op {
        StoreOp::Read => 0,
        StoreOp::Write => 1,
        StoreOp::Sync => 2,
        StoreOp::Len => 3,
        StoreOp::PunchHole => 4,
    }
}

fn op_of(code: u64) -> StoreOp {
    match code {
        1 => StoreOp::Write,
        2 => StoreOp::Sync,
        3 => StoreOp::Len,
        4 => StoreOp::PunchHole,
        _ => StoreOp::Read,
    }
}

/// Word 0: the level (bit 8) and the kind (low byte); then the fields.
fn encode(level: Level, r: Report) -> [u64; WORDS] {
    let e = |errno: i32| errno as u32 as u64;
    let (kind, a, b, c, d) = match r {
        Report::NoCacheSpace { region, page } => (1, region, page, 0, 0),
        Report::CopyFailed {
            region,
            page,
            errno,
        } => (2, region, page, e(errno), 0),
        Report::StoreRead { region, err } => (3, region, err.offset, e(err.errno), op_code(err.op)),
        Report::StagingBuffer { errno } => (4, e(errno), 0, 0, 0),
        Report::Poison { errno } => (5, e(errno), 0, 0, 0),
        Report::NoPoison => (6, 0, 0, 0, 0),
        Report::Madvise { errno } => (7, e(errno), 0, 0, 0),
        Report::WriteProtect { errno } => (8, e(errno), 0, 0, 0),
        Report::PrefetchPanicked => (9, 0, 0, 0, 0),
        Report::NestedTooDeep { depth } => (10, depth, 0, 0, 0),
        Report::OwnPage { region, page } => (11, region, page, 0, 0),
        Report::Stuck {
            region,
            page,
            dirty,
        } => (12, region, page, dirty as u64, 0),
    };
    let lvl = match level {
        Level::Error => 0,
        Level::Warn => 1 << 8,
    };
    [kind | lvl, a, b, c, d]
}

fn decode(w: [u64; WORDS]) -> Option<(Level, Report)> {
    let level = if w[0] & (1 << 8) != 0 {
        Level::Warn
    } else {
        Level::Error
    };
    let errno = |v: u64| v as u32 as i32;
    let r = match w[0] & 0xff {
        1 => Report::NoCacheSpace {
            region: w[1],
            page: w[2],
        },
        2 => Report::CopyFailed {
            region: w[1],
            page: w[2],
            errno: errno(w[3]),
        },
        3 => Report::StoreRead {
            region: w[1],
            err: StoreError::new(op_of(w[4]), w[2], errno(w[3])),
        },
        4 => Report::StagingBuffer { errno: errno(w[1]) },
        5 => Report::Poison { errno: errno(w[1]) },
        6 => Report::NoPoison,
        7 => Report::Madvise { errno: errno(w[1]) },
        8 => Report::WriteProtect { errno: errno(w[1]) },
        9 => Report::PrefetchPanicked,
        10 => Report::NestedTooDeep { depth: w[1] },
        11 => Report::OwnPage {
            region: w[1],
            page: w[2],
        },
        12 => Report::Stuck {
            region: w[1],
            page: w[2],
            dirty: w[3] != 0,
        },
        _ => return None,
    };
    Some((level, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_through_the_ring_and_overflow_is_counted() {
        let ring = Ring {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            lost: AtomicU64::new(0),
            slots: [EMPTY_SLOT; SLOTS],
        };
        let sample = [
            Report::NoCacheSpace { region: 3, page: 9 },
            Report::StoreRead {
                region: 2,
                err: StoreError::new(StoreOp::Read, 4096, libc::EIO),
            },
            Report::CopyFailed {
                region: 1,
                page: 5,
                errno: libc::ENOMEM,
            },
            Report::NestedTooDeep { depth: 4 },
        ];
        for r in sample {
            ring.push(Level::Warn, r);
        }
        let mut got = Vec::new();
        let mut lost = 0;
        ring.drain(|l, r| got.push((l, r)), |n| lost = n);
        assert_eq!(got, sample.map(|r| (Level::Warn, r)).to_vec());
        assert_eq!(lost, 0);
        // More than the ring holds: the oldest are overwritten, counted.
        for page in 0..(SLOTS as u64 + 10) {
            ring.push(Level::Error, Report::OwnPage { region: 1, page });
        }
        got.clear();
        ring.drain(|l, r| got.push((l, r)), |n| lost = n);
        assert_eq!(got.len(), SLOTS);
        assert_eq!(lost, 10);
        assert_eq!(
            got[0].1,
            Report::OwnPage {
                region: 1,
                page: 10
            }
        );
    }
}
