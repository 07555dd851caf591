use crate::{Store, StoreError};

/// The buffer of a request: filled by a read, drained by a write.
#[derive(Debug)]
enum Buf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// One read or write of a batch given to [`Store::submit`].
///
/// ```
/// use umio_backends::{IoRequest, MemoryStore, Store};
/// let store = MemoryStore::new(vec![0u8; 4]);
/// let (mut a, b) = ([0u8; 2], [9u8; 2]);
/// let mut batch = [IoRequest::read(0, &mut a), IoRequest::write(2, &b)];
/// store.submit(&mut batch);
/// assert_eq!(batch[0].result(), Some(Ok(2)));
/// assert_eq!(batch[1].result(), Some(Ok(2)));
/// ```
#[derive(Debug)]
pub struct IoRequest<'a> {
    offset: u64,
    buf: Buf<'a>,
    result: Option<Result<usize, StoreError>>,
}

impl<'a> IoRequest<'a> {
    /// A read of `buf.len()` bytes at `offset` into `buf`.
    pub fn read(offset: u64, buf: &'a mut [u8]) -> Self {
        IoRequest {
            offset,
            buf: Buf::Read(buf),
            result: None,
        }
    }

    /// A write of all of `buf` at `offset`.
    pub fn write(offset: u64, buf: &'a [u8]) -> Self {
        IoRequest {
            offset,
            buf: Buf::Write(buf),
            result: None,
        }
    }

    /// The byte offset in the store.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The request's length in bytes.
    pub fn len(&self) -> usize {
        match &self.buf {
            Buf::Read(b) => b.len(),
            Buf::Write(b) => b.len(),
        }
    }

    /// Whether the request moves no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the request is a write.
    pub fn is_write(&self) -> bool {
        matches!(self.buf, Buf::Write(_))
    }

    /// The buffer a read fills, or `None` for a write.
    pub fn read_buf(&mut self) -> Option<&mut [u8]> {
        match &mut self.buf {
            Buf::Read(b) => Some(b),
            Buf::Write(_) => None,
        }
    }

    /// The bytes a write stores, or `None` for a read.
    pub fn write_buf(&self) -> Option<&[u8]> {
        match &self.buf {
            Buf::Read(_) => None,
            Buf::Write(b) => Some(b),
        }
    }

    /// Records the request's outcome: the bytes read (fewer than
    /// [`len`](IoRequest::len) only at the end of the store) or written
    /// (all of them), or the error.
    pub fn complete(&mut self, result: Result<usize, StoreError>) {
        self.result = Some(result);
    }

    /// The outcome, once the store completed the request.
    pub fn result(&self) -> Option<Result<usize, StoreError>> {
        self.result
    }

    /// Performs the request with `store`'s `read_at` or `write_at` and
    /// records the outcome: what [`Store::submit`] does by default.
    pub fn perform<S: Store + ?Sized>(&mut self, store: &S) {
        let r = match &mut self.buf {
            Buf::Read(b) => store.read_at(self.offset, b),
            Buf::Write(b) => store.write_at(self.offset, b).map(|()| b.len()),
        };
        self.result = Some(r);
    }
}

/// `read_at` for a store whose I/O goes through [`Store::submit`]: one
/// request in a batch of its own (`EIO` if the store left it without a
/// result).
pub(crate) fn read_one<S: Store + ?Sized>(
    store: &S,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, StoreError> {
    let mut batch = [IoRequest::read(offset, buf)];
    store.submit(&mut batch);
    batch[0].result().unwrap_or(Err(StoreError::new(
        crate::StoreOp::Read,
        offset,
        libc::EIO,
    )))
}

/// `write_at` through [`Store::submit`], as [`read_one`].
pub(crate) fn write_one<S: Store + ?Sized>(
    store: &S,
    offset: u64,
    buf: &[u8],
) -> Result<(), StoreError> {
    let mut batch = [IoRequest::write(offset, buf)];
    store.submit(&mut batch);
    batch[0]
        .result()
        .unwrap_or(Err(StoreError::new(
            crate::StoreOp::Write,
            offset,
            libc::EIO,
        )))
        .map(drop)
}
