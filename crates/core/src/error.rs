use umio_backends::StoreError;

/// Errors of umio's runtime and mappings.
///
/// Each keeps the errno it stands for ([`Error::errno`]), which is what the
/// C ABI reports. New variants may be added in any release
/// (`#[non_exhaustive]`): match with a wildcard arm, or on the errno.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),

    /// No userfaultfd could be opened, not even one for user-mode faults
    /// only (which needs Linux 5.11 and no seccomp filter against
    /// `userfaultfd(2)`).
    #[error(
        "userfaultfd is not available to this process (userfaultfd(2): {}; /dev/userfaultfd: {}): \
         run as root, grant read-write access to /dev/userfaultfd, or set the sysctl \
         vm.unprivileged_userfaultfd=1",
        std::io::Error::from_raw_os_error(*syscall_errno),
        std::io::Error::from_raw_os_error(*device_errno)
    )]
    UffdUnavailable {
        /// errno of the `userfaultfd(2)` system call.
        syscall_errno: i32,
        /// errno of opening `/dev/userfaultfd`.
        device_errno: i32,
    },

    /// Full-mode userfaultfd (faults raised by the kernel delivered too)
    /// was required ([`UffdMode::Full`](crate::UffdMode::Full),
    /// `UMIO_UFFD_MODE=full`) and this process may not open one.
    #[error(
        "userfaultfd in full mode was required but is not available to this process \
         (userfaultfd(2): {}; /dev/userfaultfd: {}): run as root, grant read-write access to \
         /dev/userfaultfd, or set the sysctl vm.unprivileged_userfaultfd=1; or accept \
         user-mode-only faults (UMIO_UFFD_MODE=auto)",
        std::io::Error::from_raw_os_error(*syscall_errno),
        std::io::Error::from_raw_os_error(*device_errno)
    )]
    FullModeUnavailable {
        /// errno of the `userfaultfd(2)` system call.
        syscall_errno: i32,
        /// errno of opening `/dev/userfaultfd`.
        device_errno: i32,
    },

    /// The kernel lacks a userfaultfd feature the request needs.
    #[error("this kernel's userfaultfd lacks {0}")]
    Unsupported(&'static str),

    /// A writable mapping of a store opened read-only, or a write
    /// ([`Mapping::write_at`](crate::Mapping::write_at)) to one.
    #[error("the store is read-only; open the file read-write or map it read-only")]
    ReadOnlyStore,

    /// A system call failed.
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Os {
        /// What was being done.
        op: &'static str,
        /// The positive errno.
        errno: i32,
    },

    /// The backing store failed.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// A fixed address refusing replacement
    /// ([`MapOptions::fixed_address_noreplace`](crate::MapOptions::fixed_address_noreplace),
    /// `MAP_FIXED_NOREPLACE`) overlaps an existing mapping.
    #[error("the address range overlaps an existing mapping")]
    Overlap,

    /// The range is not (or no longer) mapped.
    #[error("the range is not mapped")]
    NotMapped,

    /// Pinning would hold more than half of the cache.
    #[error("pinning these pages would hold more than half of the cache")]
    PinLimit,

    /// A cache bound too small for the pinned pages, which may hold at
    /// most half of the cache: unpin first.
    #[error(
        "pinned pages ({pinned} bytes) would hold more than half of a cache of {requested} bytes; unpin first"
    )]
    BelowPinned {
        /// Bytes pinned now.
        pinned: u64,
        /// The bound asked for.
        requested: u64,
    },

    /// The runtime was shut down; it maps nothing more.
    #[error("the runtime is shut down")]
    ShutDown,

    /// A hugetlbfs region was asked for and the system's pool has no free
    /// 2 MiB page.
    #[error(
        "no free 2 MiB huge page: raise vm.nr_hugepages (sysctl, or \
         /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages), or map with fallback"
    )]
    HugePagesUnavailable,
}

impl Error {
    /// The positive errno this error stands for.
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::UffdUnavailable { syscall_errno, .. } => *syscall_errno,
            Error::FullModeUnavailable { syscall_errno, .. } => *syscall_errno,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::ReadOnlyStore => libc::EACCES,
            Error::Os { errno, .. } => *errno,
            Error::Store(e) => e.errno,
            Error::ShutDown => libc::ESHUTDOWN,
            Error::Overlap => libc::EEXIST,
            Error::NotMapped => libc::EINVAL,
            Error::PinLimit => libc::ENOMEM,
            Error::BelowPinned { .. } => libc::EBUSY,
            Error::HugePagesUnavailable => libc::ENOMEM,
        }
    }

    pub(crate) fn os(op: &'static str, errno: i32) -> Error {
        Error::Os { op, errno }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = std::io::Error::from_raw_os_error(e.errno()).kind();
        std::io::Error::new(kind, e)
    }
}

/// Result with umio's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A positive errno: the error type of the code behind umio's C exports
/// (libumio's functions and the preload shim's interposed calls), which
/// report failures the C way. Built from an [`Error`] (its
/// [`errno`](Error::errno), the error logged at debug level), a
/// [`StoreError`] or an [`std::io::Error`] (`EIO` when it has no errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl From<Error> for Errno {
    fn from(e: Error) -> Self {
        log::debug!("umio: {e}");
        Errno(e.errno())
    }
}

impl From<StoreError> for Errno {
    fn from(e: StoreError) -> Self {
        Errno(e.errno)
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}
