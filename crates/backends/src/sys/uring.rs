//! The io_uring operations of the `io-uring` crate that hand memory to
//! the kernel, or enter it other than through its safe calls: registering
//! buffers, queueing an entry, waiting for completions without submitting.

use io_uring::{IoUring, squeue};

/// `IORING_ENTER_GETEVENTS` of `<linux/io_uring.h>`: wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1 << 0;

/// Registers `bufs` as the ring's fixed buffers (`IORING_REGISTER_BUFFERS`).
///
/// # Safety
/// Every buffer stays mapped until the ring is dropped.
pub(crate) unsafe fn register_buffers(ring: &IoUring, bufs: &[libc::iovec]) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { ring.submitter().register_buffers(bufs) }.is_ok()
}

/// Queues `entry` in the submission queue; false if it is full.
///
/// # Safety
/// The memory the entry names (its buffer) stays valid, and unused by
/// anything else, until its completion is reaped.
pub(crate) unsafe fn push(ring: &mut IoUring, entry: &squeue::Entry) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { ring.submission().push(entry) }.is_ok()
}

/// Waits until at least `want` completions are ready, submitting nothing.
pub(crate) fn wait_completions(ring: &IoUring, want: u32) -> std::io::Result<usize> {
    // SAFETY: GETEVENTS with nothing to submit only waits; no memory is
    // handed to the kernel.
    unsafe {
        ring.submitter()
            .enter::<libc::sigset_t>(0, want, IORING_ENTER_GETEVENTS, None)
    }
}
