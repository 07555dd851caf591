//! Waiting for fault messages: an epoll set per handler thread with the
//! userfaultfd (added `EPOLLEXCLUSIVE`, one handler woken per event, unless
//! the handler is pinned to a CPU: see `threads.rs`) and an eventfd that
//! signals shutdown.

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

/// One handler thread's epoll set.
pub(crate) struct Poller {
    epfd: OwnedFd,
    uffd: RawFd,
    shutdown_fd: RawFd,
}

impl Poller {
    /// `exclusive`: an event wakes one idle handler of those waiting
    /// exclusively, not every one.
    pub(crate) fn new(uffd: RawFd, shutdown: &EventFd, exclusive: bool) -> Result<Poller, i32> {
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
        let exclusive = if exclusive { libc::EPOLLEXCLUSIVE } else { 0 };
        add(uffd, (libc::EPOLLIN | exclusive) as u32)?;
        add(shutdown.as_raw_fd(), libc::EPOLLIN as u32)?;
        Ok(Poller {
            epfd,
            uffd,
            shutdown_fd: shutdown.as_raw_fd(),
        })
    }

    /// Registers the userfaultfd again, `EPOLLEXCLUSIVE` or not (the flag
    /// cannot be changed in place: `EPOLL_CTL_MOD` refuses it). Called
    /// between waits; an event pending meanwhile is seen by the next wait
    /// (`EPOLL_CTL_ADD` looks at the descriptor's readiness).
    pub(crate) fn set_exclusive(&self, exclusive: bool) -> Result<(), i32> {
        // SAFETY: both descriptors are open; DEL takes no event.
        let r = unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                self.uffd,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(errno());
        }
        let flag = if exclusive { libc::EPOLLEXCLUSIVE } else { 0 };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | flag) as u32,
            u64: self.uffd as u64,
        };
        // SAFETY: ev is a valid epoll_event; both descriptors are open.
        let r = unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                self.uffd,
                &mut ev,
            )
        };
        if r < 0 { Err(errno()) } else { Ok(()) }
    }

    /// Blocks until faults are pending or shutdown is signalled.
    pub(crate) fn wait(&self) -> Wake {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        loop {
            // SAFETY: evs is writable for 2 events.
            let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), 2, -1) };
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
