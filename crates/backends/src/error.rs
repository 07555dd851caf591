use std::fmt;

/// Which store operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// [`Store::read_at`](crate::Store::read_at).
    Read,
    /// [`Store::write_at`](crate::Store::write_at).
    Write,
    /// [`Store::sync`](crate::Store::sync).
    Sync,
    /// [`Store::len`](crate::Store::len) or [`Store::set_len`](crate::Store::set_len).
    Len,
    /// [`Store::punch_hole`](crate::Store::punch_hole).
    PunchHole,
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreOp::Read => "read",
            StoreOp::Write => "write",
            StoreOp::Sync => "sync",
            StoreOp::Len => "length change",
            StoreOp::PunchHole => "punch hole",
        })
    }
}

/// A failed store operation: what, where, and the errno.
///
/// Small and `Copy` so that it can travel on the fault path without
/// allocating. Stores whose failures have no errno use `EIO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("store {op} at offset {offset} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
pub struct StoreError {
    /// The operation.
    pub op: StoreOp,
    /// The byte offset in the store (0 for sync and length operations).
    pub offset: u64,
    /// The positive errno describing the failure.
    pub errno: i32,
}

impl StoreError {
    /// Builds an error from an `io::Error`, keeping its errno (or `EIO`).
    pub fn from_io(op: StoreOp, offset: u64, err: &std::io::Error) -> Self {
        StoreError {
            op,
            offset,
            errno: err.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// Builds an error with an explicit errno.
    pub fn new(op: StoreOp, offset: u64, errno: i32) -> Self {
        StoreError { op, offset, errno }
    }

    /// The error as an `io::Error` with the same errno.
    pub fn to_io(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno).kind(), e)
    }
}
