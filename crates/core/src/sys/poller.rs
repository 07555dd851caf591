//! Waiting for fault messages: epoll sets per handler thread with the
//! userfaultfd (added `EPOLLEXCLUSIVE`, one handler woken per event; and
//! for a filler that may run pinned to a CPU, a second set without it:
//! see `threads.rs`) and an eventfd that signals shutdown.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::errno;

/// An eventfd used to wake every handler thread at shutdown.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> Result<EventFd, i32> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: fd is fresh and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes the eventfd readable for good (it is never drained).
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What woke a handler.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    Faults,
    Shutdown,
}

/// One handler thread's epoll sets: the userfaultfd registered
/// `EPOLLEXCLUSIVE` in one (an event wakes one idle handler of those
/// waiting so), and, for a filler that may be pinned, without it in a
/// second (every event wakes every handler waiting so). Which one a wait
/// uses is the waiter's choice at each wait: no registration changes,
/// nothing that can fail between waits. An idle set costs a callback per
/// event (no thread to wake).
pub(crate) struct Poller {
    exclusive: OwnedFd,
    shared: Option<OwnedFd>,
    shutdown_fd: RawFd,
}

/// A new epoll set holding `uffd` (with `flags` beside `EPOLLIN`) and the
/// shutdown eventfd.
fn epoll_set(uffd: RawFd, flags: i32, shutdown: RawFd) -> Result<OwnedFd, i32> {
    // SAFETY: epoll_create1 returns a new descriptor or -1.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epfd < 0 {
        return Err(errno());
    }
    // SAFETY: epfd is fresh and ours.
    let epfd = unsafe { OwnedFd::from_raw_fd(epfd) };
    let add = |fd: RawFd, events: u32| -> Result<(), i32> {
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: ev is a valid epoll_event; both descriptors are open.
        let r = unsafe { libc::epoll_ctl(epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 { Err(errno()) } else { Ok(()) }
    };
    add(uffd, (libc::EPOLLIN | flags) as u32)?;
    add(shutdown, libc::EPOLLIN as u32)?;
    Ok(epfd)
}

impl Poller {
    /// `shared_too`: a second set, for waits woken by every event.
    pub(crate) fn new(uffd: RawFd, shutdown: &EventFd, shared_too: bool) -> Result<Poller, i32> {
        let shutdown_fd = shutdown.as_raw_fd();
        Ok(Poller {
            exclusive: epoll_set(uffd, libc::EPOLLEXCLUSIVE, shutdown_fd)?,
            shared: match shared_too {
                true => Some(epoll_set(uffd, 0, shutdown_fd)?),
                false => None,
            },
            shutdown_fd,
        })
    }

    /// Blocks until faults are pending or shutdown is signalled: woken
    /// as one idle handler of those waiting exclusively, or (`exclusive`
    /// false, where the second set exists) by every event.
    pub(crate) fn wait(&self, exclusive: bool) -> Wake {
        let epfd = match (&self.shared, exclusive) {
            (Some(shared), false) => shared,
            _ => &self.exclusive,
        };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        loop {
            // SAFETY: evs is writable for 2 events.
            let n = unsafe { libc::epoll_wait(epfd.as_raw_fd(), evs.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                // epoll_wait fails only on programming errors; treat as
                // shutdown rather than spin.
                return Wake::Shutdown;
            }
            if evs[..n as usize]
                .iter()
                .any(|e| e.u64 == self.shutdown_fd as u64)
            {
                return Wake::Shutdown;
            }
            return Wake::Faults;
        }
    }
}

/// `poll(2)`: waits at most `timeout_ms` (-1: no limit) for events on
/// `fds` (a negative descriptor is skipped) and returns how many have
/// some (their `revents` set), or the errno.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, i32> {
    // SAFETY: `fds` is `fds.len()` live pollfd structs, which the kernel
    // reads and writes back.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 { Err(errno()) } else { Ok(n as usize) }
}
