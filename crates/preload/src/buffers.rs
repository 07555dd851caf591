//! User buffers in umio memory passed to system calls.
//!
//! In a mapping served in the faulting thread (a file opted in with
//! `UMIO_PRELOAD_IN_THREAD_PATHS`), or anywhere under a user-mode-only
//! userfaultfd, the kernel's own accesses to umio memory are not served: a `read(2)` into a non-resident mapped page (or a
//! clean one, which is write-protected) fails with `EFAULT`, and so does a
//! `write(2)` from a non-resident one. Programs written for `mmap` pass
//! mapped memory and heap allocations to system calls all the time, so the
//! shim faults the parts of their buffers that lie in umio memory in
//! before it calls the kernel: for reading (the kernel reads the buffer:
//! `write`, `send`) or for writing (the kernel writes it: `read`, `recv`,
//! which dirties the pages, as the kernel's write would).
//!
//! The pages may be evicted again before the kernel gets to them (another
//! thread's misses under a full cache): a call that fails with `EFAULT` and
//! has such a buffer is faulted in and made again, a few times, with less
//! faulted in each time (the kernel stops where the resident part ends and
//! returns a short count). At most half the cache is faulted in per call.
//! A short count that comes of this is made up for where a program
//! expects none: `read`, `pread`, `write` and `pwrite` on a regular file
//! or block device go on with the rest; the vectored and socket calls
//! return it, as they may. Calls glibc makes internally (`fread`
//! into a large buffer, say) do not reach the shim: that is why the heap
//! and the files not opted in are served by the fillers whatever
//! `UMIO_FAULT_SERVICE` says (`heap.rs`, `maps.rs`), whose full-mode
//! userfaultfd serves the kernel's accesses; in an opted-in mapping, or
//! under a user-mode-only userfaultfd, such a call fails with `EFAULT` on
//! non-resident memory (README, "Faults served in the faulting thread").
//!
//! While no mapping is served in-thread and the userfaultfd is in full
//! mode (the default) none of this runs: one atomic load per call.

use std::ops::Range;
use std::sync::Arc;

use libc::c_int;
use umio_core::{FaultService, Mapping};

use crate::maps::{self, Entry, PAGE};
use crate::runtime::{self, needed};
use crate::{heap, sys};

/// How many times a call is made while it fails with `EFAULT`, each time
/// with a quarter of the bytes faulted in before (down to one page).
const ATTEMPTS: usize = 8;

/// Whether the kernel's own accesses to `m` fail on non-resident pages.
fn unserved(m: &Mapping) -> bool {
    m.fault_service() == FaultService::InThread || runtime::user_mode_only()
}

/// What the kernel does with a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// It reads the buffer (`write`, `send`).
    Reads,
    /// It writes the buffer (`read`, `recv`).
    Writes,
}

/// Who holds the umio memory under part of a buffer.
enum Owner {
    Mapping(Arc<Entry>),
    Heap(&'static heap::Heap),
}

impl Owner {
    fn mapping(&self) -> &Mapping {
        match self {
            Owner::Mapping(e) => &e.mapping,
            Owner::Heap(h) => h.mapping(),
        }
    }
}

/// A part of a buffer in umio memory: its owner, the range relative to
/// the owner's mapping, and whether to fault it in for writing.
struct Part {
    owner: Owner,
    range: Range<usize>,
    write: bool,
}

/// The parts of `bufs` (address, length) in umio memory, in order, up to
/// `limit` bytes in all.
fn parts(bufs: &[(usize, usize)], access: Access, limit: usize) -> Vec<Part> {
    let mut out = Vec::new();
    let mut left = limit;
    let heap = heap::made();
    let table = maps::any().then(maps::lock);
    for &(addr, len) in bufs {
        if len == 0 || left == 0 {
            continue;
        }
        let Some(end) = addr.checked_add(len) else {
            continue;
        };
        let range = addr..end;
        let mut found: Vec<(Owner, Range<usize>, bool)> = Vec::new();
        if let Some(table) = &table {
            for s in table.visible_in(&range) {
                let base = s.entry.mapping.as_ptr() as usize;
                let write = access == Access::Writes && s.prot & libc::PROT_WRITE != 0;
                let rel = s.range.start - base..s.range.end - base;
                found.push((Owner::Mapping(s.entry), rel, write));
            }
        }
        if let Some(h) = heap {
            let base = h.mapping().as_ptr() as usize;
            let (a, b) = (addr.max(base), end.min(base + h.mapping().len()));
            if a < b {
                found.push((Owner::Heap(h), a - base..b - base, access == Access::Writes));
            }
        }
        found.retain(|(o, _, _)| unserved(o.mapping()));
        found.sort_by_key(|(o, r, _)| o.mapping().as_ptr() as usize + r.start);
        for (owner, range, write) in found {
            if left == 0 {
                break;
            }
            let take = range.len().min(left);
            left -= take;
            out.push(Part {
                owner,
                range: range.start..range.start + take,
                write,
            });
        }
    }
    out
}

/// Faults `parts` in; a part that cannot be (a store error, unmapped
/// meanwhile) is left to the kernel, which fails the call with `EFAULT` as
/// it would for an `mmap` whose page cannot be read.
fn populate(parts: &[Part]) {
    for p in parts {
        if let Err(e) = p.owner.mapping().populate(p.range.clone(), p.write) {
            log::debug!("umio-preload: faulting a system call's buffer in: {e}");
        }
    }
}

/// Makes `call`, a system call whose buffers are `bufs` (address, length)
/// and which the kernel accesses as `access`, after faulting their parts
/// in umio memory in (see the module's documentation). Returns what the
/// last attempt returned, errno as it set it.
pub(crate) fn around(bufs: &[(usize, usize)], access: Access, call: impl Fn() -> isize) -> isize {
    if !needed() {
        return call();
    }
    let mut limit = runtime::fault_in_limit();
    let mut r = -1;
    for _ in 0..ATTEMPTS {
        let parts = parts(bufs, access, limit);
        if parts.is_empty() {
            return call();
        }
        populate(&parts);
        r = call();
        if r >= 0 || sys::errno() != libc::EFAULT {
            return r;
        }
        // The first page was evicted again before the kernel reached it
        // (other threads' misses under a full cache): fault in less, so
        // that what is faulted in stays, and the call returns short.
        limit = (limit / 4).max(PAGE);
    }
    r
}

/// [`around`] for a call with one buffer of `len` bytes at `buf` on `fd`:
/// `call(done)` makes the call for the bytes from `done` on (at the offset
/// advanced as much, where it takes one). On a regular file or a block
/// device, where a short count can only come of umio's faulting in less
/// than the whole buffer, the call is made again for the rest until all is
/// done, the kernel returns 0 (the end of the file) or fails; elsewhere
/// (pipes, sockets) once, as a short count is theirs to give.
pub(crate) fn around_one(
    fd: c_int,
    buf: usize,
    len: usize,
    access: Access,
    call: impl Fn(usize) -> isize,
) -> isize {
    if !needed() {
        return call(0);
    }
    let mut done = 0usize;
    loop {
        let r = around(&[(buf + done, len - done)], access, || call(done));
        if r <= 0 {
            return if done > 0 { done as isize } else { r };
        }
        done += r as usize;
        if done >= len || maps::file_of(fd).is_none() {
            return done as isize;
        }
    }
}

/// The buffers of an `iovec` array, as `(address, length)`.
///
/// # Safety
/// `iov` points to `cnt` entries, or is null, or `cnt` is out of the
/// kernel's range (then the kernel fails the call, and there is nothing).
pub(crate) unsafe fn of_iovecs(iov: *const libc::iovec, cnt: c_int) -> Vec<(usize, usize)> {
    if iov.is_null() || cnt <= 0 || cnt > libc::UIO_MAXIOV {
        return Vec::new();
    }
    // SAFETY: the caller's array of `cnt` entries, as the kernel reads it.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    v.iter().map(|e| (e.iov_base as usize, e.iov_len)).collect()
}

/// The buffers of a `msghdr`: its `iovec`s, and its control data, which
/// the kernel reads (`sendmsg`) or writes (`recvmsg`) too.
///
/// # Safety
/// `msg` is null or points to a `msghdr` whose arrays are as it says.
pub(crate) unsafe fn of_msghdr(msg: *const libc::msghdr) -> Vec<(usize, usize)> {
    if msg.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's message header, as the kernel reads it.
    let m = unsafe { &*msg };
    let cnt = c_int::try_from(m.msg_iovlen).unwrap_or(c_int::MAX);
    // SAFETY: the header's own array.
    let mut bufs = unsafe { of_iovecs(m.msg_iov, cnt) };
    if !m.msg_control.is_null() {
        // `size_t` in glibc, `socklen_t` in musl.
        #[allow(clippy::unnecessary_cast)]
        bufs.push((m.msg_control as usize, m.msg_controllen as usize));
    }
    if !m.msg_name.is_null() {
        bufs.push((m.msg_name as usize, m.msg_namelen as usize));
    }
    bufs
}

/// The buffers of `vlen` `mmsghdr`s (`sendmmsg`, `recvmmsg`).
///
/// # Safety
/// `msgs` is null or points to `vlen` headers, each as [`of_msghdr`] needs.
pub(crate) unsafe fn of_mmsghdrs(msgs: *const libc::mmsghdr, vlen: u32) -> Vec<(usize, usize)> {
    if msgs.is_null() {
        return Vec::new();
    }
    // The kernel takes at most UIO_MAXIOV messages.
    let n = vlen.min(libc::UIO_MAXIOV as u32) as usize;
    // SAFETY: the caller's array of `vlen` headers.
    let v = unsafe { std::slice::from_raw_parts(msgs, n) };
    v.iter()
        // SAFETY: each header as the kernel reads it.
        .flat_map(|h| unsafe { of_msghdr(&h.msg_hdr) })
        .collect()
}
