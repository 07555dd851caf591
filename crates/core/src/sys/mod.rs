//! Raw system calls: userfaultfd ioctls, anonymous memory, epoll and
//! eventfd. Everything above this module is safe Rust.
//!
//! umio talks to userfaultfd through its own small definitions over `libc`
//! rather than the `userfaultfd` crate: that crate needs libclang at build
//! time, lacks `UFFDIO_COPY_MODE_WP`, `UFFDIO_POISON`, `UFFDIO_MOVE` and the
//! feature query, and mishandles partial copies (docs/ARCHITECTURE.md).

pub(crate) mod mm;
pub(crate) mod poller;
pub(crate) mod proc;
pub(crate) mod signal;
pub(crate) mod uffd;

/// The last OS error as a positive errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
