use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::{IoRequest, Store, StoreError, StoreOp};

/// `pread`s into `buf` from `offset` until it is full or the file ends
/// (`EINTR` retried); the bytes read.
pub(crate) fn read_full_at(file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StoreError::from_io(StoreOp::Read, offset + done as u64, &e)),
        }
    }
    Ok(done)
}

/// A file or block device accessed with `pread`, `pwrite` and `fdatasync`.
///
/// The store owns its own duplicate of the descriptor, so the caller may
/// close the `File` it was built from.
#[derive(Debug)]
pub struct FileStore {
    file: File,
    writable: bool,
    block_device: bool,
}

impl FileStore {
    /// Wraps a duplicate of `file`. Whether writes are allowed follows the
    /// descriptor's access mode (`O_RDONLY` makes a read-only store).
    pub fn new(file: &File) -> std::io::Result<Self> {
        let file = file.try_clone()?;
        let kind = FileKind::inspect(&file)?;
        Ok(FileStore {
            file,
            writable: kind.writable,
            block_device: kind.block_device,
        })
    }

    /// A scratch store of `len` zero bytes: an unnamed file in `dir` (or
    /// the temporary directory), gone when the store is dropped. For
    /// anonymous, heap-style regions larger than memory: their pages spill
    /// to it when evicted.
    pub fn scratch(dir: Option<&std::path::Path>, len: u64) -> std::io::Result<Self> {
        let dir = dir.map_or_else(std::env::temp_dir, |d| d.to_path_buf());
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(&dir)?;
        file.set_len(len)?;
        Self::new(&file)
    }

    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Store for FileStore {
    fn len(&self) -> Result<u64, StoreError> {
        file_len(&self.file, self.block_device)
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        file_set_len(&self.file, self.writable, self.block_device, len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        read_full_at(&self.file, offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EBADF));
        }
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| StoreError::from_io(StoreOp::Write, offset, &e))
    }

    fn sync(&self) -> Result<(), StoreError> {
        file_sync(&self.file, self.writable)
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn name(&self) -> &str {
        "file"
    }

    /// One request after another (`pread` and `pwrite` are synchronous),
    /// each handed to `done` as soon as it is done.
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        for (i, req) in batch.iter_mut().enumerate() {
            if req.result().is_none() {
                req.perform(self);
            }
            done(i, req);
        }
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        file_punch_hole(&self.file, self.writable, self.block_device, offset, len)
    }
}

/// What a descriptor given to a file-backed store allows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileKind {
    pub(crate) writable: bool,
    pub(crate) block_device: bool,
}

impl FileKind {
    /// Checks that `file` is a regular file or block device open for
    /// reading, and whether it is open for writing too.
    pub(crate) fn inspect(file: &File) -> std::io::Result<FileKind> {
        let flags = crate::sys::fd::status_flags(file)?;
        let mode = flags & libc::O_ACCMODE;
        if mode == libc::O_WRONLY {
            return Err(std::io::Error::from_raw_os_error(libc::EACCES));
        }
        let meta = file.metadata()?;
        use std::os::unix::fs::FileTypeExt;
        let block_device = meta.file_type().is_block_device();
        if !meta.is_file() && !block_device {
            return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
        }
        Ok(FileKind {
            writable: mode == libc::O_RDWR,
            block_device,
        })
    }
}

/// A file's length, or a block device's size.
pub(crate) fn file_len(file: &File, block_device: bool) -> Result<u64, StoreError> {
    if block_device {
        use std::io::{Seek, SeekFrom};
        let mut f = file;
        return f
            .seek(SeekFrom::End(0))
            .map_err(|e| StoreError::from_io(StoreOp::Len, 0, &e));
    }
    file.metadata()
        .map(|m| m.len())
        .map_err(|e| StoreError::from_io(StoreOp::Len, 0, &e))
}

/// Sets a file's length; a block device only "grows" within its size.
pub(crate) fn file_set_len(
    file: &File,
    writable: bool,
    block_device: bool,
    len: u64,
) -> Result<(), StoreError> {
    if !writable {
        return Err(StoreError::new(StoreOp::Len, len, libc::EBADF));
    }
    if block_device {
        return if file_len(file, true)? >= len {
            Ok(())
        } else {
            Err(StoreError::new(StoreOp::Len, len, libc::EFBIG))
        };
    }
    file.set_len(len)
        .map_err(|e| StoreError::from_io(StoreOp::Len, len, &e))
}

/// `fallocate(PUNCH_HOLE | KEEP_SIZE)` of a regular file open for writing;
/// on a block device, `BLKDISCARD`-like zeroing is not attempted
/// (`EOPNOTSUPP`). A file system without hole punching gives its own
/// `EOPNOTSUPP`.
pub(crate) fn file_punch_hole(
    file: &File,
    writable: bool,
    block_device: bool,
    offset: u64,
    len: u64,
) -> Result<(), StoreError> {
    if !writable {
        return Err(StoreError::new(StoreOp::PunchHole, offset, libc::EBADF));
    }
    if block_device {
        return Err(StoreError::new(
            StoreOp::PunchHole,
            offset,
            libc::EOPNOTSUPP,
        ));
    }
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(StoreError::new(StoreOp::PunchHole, offset, libc::EINVAL));
    };
    if n == 0 {
        return Ok(());
    }
    crate::sys::fd::punch_hole(file, off, n)
        .map_err(|e| StoreError::from_io(StoreOp::PunchHole, offset, &e))
}

/// `fdatasync`, for a descriptor open for writing.
pub(crate) fn file_sync(file: &File, writable: bool) -> Result<(), StoreError> {
    if !writable {
        return Ok(());
    }
    file.sync_data()
        .map_err(|e| StoreError::from_io(StoreOp::Sync, 0, &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn reads_short_at_end_and_writes_extend() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[1u8; 6000]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp.path())
            .unwrap();
        let s = FileStore::new(&f).unwrap();
        drop(f);
        assert!(s.is_writable());
        let mut buf = [9u8; 4096];
        assert_eq!(s.read_at(4096, &mut buf).unwrap(), 6000 - 4096);
        assert!(buf[..6000 - 4096].iter().all(|&b| b == 1));
        assert!(buf[6000 - 4096..].iter().all(|&b| b == 9));
        s.write_at(8192, &[2u8; 100]).unwrap();
        assert_eq!(s.len().unwrap(), 8292);
        s.sync().unwrap();
        assert_eq!(s.read_at(100_000, &mut buf).unwrap(), 0);
    }

    #[test]
    fn scratch_is_zeroed_writable_and_nameless() {
        let s = FileStore::scratch(None, 10_000).unwrap();
        assert_eq!(s.len().unwrap(), 10_000);
        let mut buf = [1u8; 100];
        assert_eq!(s.read_at(9_950, &mut buf).unwrap(), 50);
        assert!(buf[..50].iter().all(|&b| b == 0));
        s.write_at(0, b"spill").unwrap();
        assert_eq!(s.file().metadata().unwrap().nlink(), 0);
    }

    #[test]
    fn read_only_descriptor_refuses_writes() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let f = std::fs::File::open(tmp.path()).unwrap();
        let s = FileStore::new(&f).unwrap();
        assert!(!s.is_writable());
        let e = s.write_at(0, b"x").unwrap_err();
        assert_eq!((e.op, e.errno), (StoreOp::Write, libc::EBADF));
        assert_eq!(s.set_len(10).unwrap_err().errno, libc::EBADF);
    }

    #[test]
    fn write_only_descriptor_is_refused() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(tmp.path())
            .unwrap();
        let e = FileStore::new(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    }
}
