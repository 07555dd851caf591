//! The stores behind `mmap`'d files, shaped to the kernel's semantics.
//!
//! - [`SharedFile`] (`MAP_SHARED`): the file itself, but a mapping never
//!   changes the file's size: bytes past the end of the file read as zero
//!   and writes past it are dropped, as the kernel drops writes to the tail
//!   of a file's last page.
//! - [`copy_on_write`] (`MAP_PRIVATE`): umio-backends' [`CopyOnWrite`]
//!   over the file: reads come from the file until a page is written;
//!   written pages go to a nameless scratch file and are read from there
//!   ever after. The file is never written.

use std::fs::File;

use umio_backends::{CopyOnWrite, FileStore, Store, StoreError, UncachedFileStore};

/// The file under a mapping: through the kernel's page cache only when
/// the runtime says so (`UMIO_PAGE_CACHE=1`); by default umio's cache is
/// the only one (`O_DIRECT`, or drop-behind where the file system has no
/// direct I/O). The shim's coherence with `read(2)`/`write(2)` holds either
/// way: the kernel keeps `O_DIRECT` transfers coherent with its page cache
/// (a direct read writes back dirty cached pages of its range first, a
/// direct write invalidates them), and the shim writes umio's dirty pages
/// back before a `write(2)` and drops them after.
fn file_store(file: &File, page_cache: bool) -> std::io::Result<Box<dyn Store>> {
    Ok(if page_cache {
        Box::new(FileStore::new(file)?)
    } else {
        Box::new(UncachedFileStore::new(file)?)
    })
}

/// A `MAP_SHARED` file.
pub(crate) struct SharedFile {
    file: Box<dyn Store>,
}

impl SharedFile {
    pub(crate) fn new(file: &File, page_cache: bool) -> std::io::Result<SharedFile> {
        Ok(SharedFile {
            file: file_store(file, page_cache)?,
        })
    }
}

impl Store for SharedFile {
    fn len(&self) -> Result<u64, StoreError> {
        self.file.len()
    }

    /// A mapping never resizes the file: growing is accepted and ignored
    /// (the part past the end reads as zeros), as `mmap` past the end of a
    /// file does not extend it.
    fn set_len(&self, _len: u64) -> Result<(), StoreError> {
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        self.file.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        // Bytes past the current end of the file are dropped, as the kernel
        // drops them: the file keeps its size (also after an ftruncate).
        let end = self.file.len()?;
        if offset >= end {
            return Ok(());
        }
        let n = buf.len().min((end - offset) as usize);
        self.file.write_at(offset, &buf[..n])
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.file.sync()
    }

    fn is_writable(&self) -> bool {
        self.file.is_writable()
    }

    fn name(&self) -> &str {
        "shared file"
    }

    /// Within the file only: a mapping never changes the file's size.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        let end = self.file.len()?;
        if offset >= end {
            return Ok(());
        }
        self.file.punch_hole(offset, len.min(end - offset))
    }
}

/// A `MAP_PRIVATE` file: a [`CopyOnWrite`] view of the file (read as
/// [`file_store`] reads it) from `base`, `len` bytes.
pub(crate) fn copy_on_write(
    file: &File,
    base: u64,
    len: u64,
    scratch_dir: Option<&std::path::Path>,
    page_cache: bool,
) -> std::io::Result<CopyOnWrite> {
    CopyOnWrite::new(file_store(file, page_cache)?, base, len, scratch_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn shared_writes_never_grow_the_file() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[1u8; 6000]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp.path())
            .unwrap();
        let s = SharedFile::new(&f, false).unwrap();
        s.set_len(1 << 20).unwrap();
        s.write_at(4096, &[2u8; 4096]).unwrap();
        s.write_at(8192, &[2u8; 4096]).unwrap();
        let back = std::fs::read(tmp.path()).unwrap();
        assert_eq!(back.len(), 6000);
        assert!(back[4096..].iter().all(|&b| b == 2));
    }
}
