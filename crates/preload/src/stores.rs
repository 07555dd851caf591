//! The stores behind `mmap`'d files, shaped to the kernel's semantics.
//!
//! - [`SharedFile`] (`MAP_SHARED`): the file itself, but a mapping never
//!   changes the file's size: bytes past the end of the file read as zero
//!   and writes past it are dropped, as the kernel drops writes to the tail
//!   of a file's last page.
//! - [`CopyOnWrite`] (`MAP_PRIVATE`): reads come from the file until a page
//!   is written; written pages go to a nameless scratch file and are read
//!   from there ever after. The file is never written.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use umio_backends::{FileStore, Store, StoreError, StoreOp, UncachedFileStore};

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

/// Granule of the copy-on-write bitmap: umio's smallest page.
const GRANULE: u64 = 4096;

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

/// A `MAP_PRIVATE` file: the file below, a scratch file of written pages
/// above, and a bitmap of which 4 KiB pages were written.
///
/// Store offsets are the file's. Only `[base, base + len)` (the mapped
/// part of the file) is ever written; the scratch file holds it at
/// `offset - base`.
pub(crate) struct CopyOnWrite {
    file: Box<dyn Store>,
    scratch: FileStore,
    base: u64,
    len: u64,
    /// One bit per 4 KiB page of the mapped part: set once written.
    written: Vec<AtomicU64>,
}

impl CopyOnWrite {
    pub(crate) fn new(
        file: &File,
        base: u64,
        len: u64,
        scratch_dir: Option<&std::path::Path>,
        page_cache: bool,
    ) -> std::io::Result<CopyOnWrite> {
        let pages = len.div_ceil(GRANULE);
        Ok(CopyOnWrite {
            file: file_store(file, page_cache)?,
            scratch: FileStore::scratch(scratch_dir, pages * GRANULE)?,
            base,
            len,
            written: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn is_written(&self, page: u64) -> bool {
        self.written[(page / 64) as usize].load(Ordering::Acquire) & (1 << (page % 64)) != 0
    }

    /// The 4 KiB pages (relative to `base`) that hold written bytes.
    pub(crate) fn written_pages(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len.div_ceil(GRANULE)).filter(|&p| self.is_written(p))
    }

    /// Forgets what was written to the bytes `[from, to)` of the mapped
    /// part (relative to `base`, whole pages): they read from the file
    /// again, as a private page does after `MADV_DONTNEED`.
    pub(crate) fn forget(&self, from: u64, to: u64) {
        for p in from / GRANULE..to.div_ceil(GRANULE).min(self.len.div_ceil(GRANULE)) {
            self.written[(p / 64) as usize].fetch_and(!(1 << (p % 64)), Ordering::AcqRel);
        }
    }

    /// Copies the pages `old` has written (a mapping of the same file at
    /// the same offset, being moved by `mremap`).
    pub(crate) fn copy_written(&self, old: &CopyOnWrite) -> Result<(), StoreError> {
        let mut page = vec![0u8; GRANULE as usize];
        for p in old.written_pages() {
            let at = p * GRANULE;
            if at >= self.len {
                break;
            }
            let n = old.scratch.read_at(at, &mut page)?;
            page[n..].fill(0);
            self.write_at(self.base + at, &page)?;
        }
        Ok(())
    }

    /// The scratch file, for a fork child that copies the written pages.
    pub(crate) fn scratch(&self) -> &File {
        self.scratch.file()
    }
}

impl Store for CopyOnWrite {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.file.len()?.max(self.base + self.len))
    }

    fn set_len(&self, _len: u64) -> Result<(), StoreError> {
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        // Runs of pages from one source: the scratch file or the file.
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let page = at.checked_sub(self.base).map(|r| r / GRANULE);
            let in_range = |p: u64| p < self.len.div_ceil(GRANULE);
            let from_scratch = page.is_some_and(|p| in_range(p) && self.is_written(p));
            // Extend the run while the source stays the same.
            let mut end = (at / GRANULE + 1) * GRANULE;
            while end < offset + buf.len() as u64 {
                let p = end.checked_sub(self.base).map(|r| r / GRANULE);
                if p.is_some_and(|p| in_range(p) && self.is_written(p)) != from_scratch {
                    break;
                }
                end += GRANULE;
            }
            let end = end.min(offset + buf.len() as u64);
            let chunk = &mut buf[done..(end - offset) as usize];
            let n = if from_scratch {
                self.scratch.read_at(at - self.base, chunk)?
            } else {
                self.file.read_at(at, chunk)?
            };
            // Past the end of the file (or of the scratch copy): zeros, as
            // the rest of a file's last page reads.
            chunk[n..].fill(0);
            done += chunk.len();
        }
        let total = self.len()?;
        Ok(buf.len().min(total.saturating_sub(offset) as usize))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        let rel = offset
            .checked_sub(self.base)
            .filter(|r| r + buf.len() as u64 <= self.len.div_ceil(GRANULE) * GRANULE)
            .ok_or(StoreError::new(StoreOp::Write, offset, libc::EINVAL))?;
        // The bytes first, then the bits: a reader that sees a bit finds
        // the bytes in place.
        self.scratch.write_at(rel, buf)?;
        for p in rel / GRANULE..(rel + buf.len() as u64).div_ceil(GRANULE) {
            self.written[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::AcqRel);
        }
        Ok(())
    }

    /// A private mapping's pages are never made durable.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn is_writable(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "copy-on-write file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(bytes).unwrap();
        let f = File::open(tmp.path()).unwrap();
        (tmp, f)
    }

    #[test]
    fn private_writes_stay_in_scratch() {
        let (tmp, f) = file_of(&[1u8; 5 * 4096]);
        let cow = CopyOnWrite::new(&f, 4096, 3 * 4096, None, false).unwrap();
        cow.write_at(2 * 4096, &[9u8; 4096]).unwrap();
        let mut buf = vec![0u8; 3 * 4096];
        assert_eq!(cow.read_at(4096, &mut buf).unwrap(), 3 * 4096);
        assert!(buf[..4096].iter().all(|&b| b == 1));
        assert!(buf[4096..8192].iter().all(|&b| b == 9));
        assert!(buf[8192..].iter().all(|&b| b == 1));
        assert_eq!(std::fs::read(tmp.path()).unwrap(), vec![1u8; 5 * 4096]);
        assert_eq!(cow.written_pages().collect::<Vec<_>>(), vec![1]);
        cow.forget(4096, 8192);
        assert_eq!(cow.read_at(2 * 4096, &mut buf[..4096]).unwrap(), 4096);
        assert!(buf[..4096].iter().all(|&b| b == 1));
        assert!(
            cow.write_at(0, &[0u8; 1]).is_err(),
            "outside the mapped part"
        );
    }

    #[test]
    fn private_reads_past_the_file_are_zero() {
        let (_tmp, f) = file_of(&[3u8; 6000]);
        let cow = CopyOnWrite::new(&f, 0, 3 * 4096, None, false).unwrap();
        let mut buf = vec![7u8; 3 * 4096];
        assert_eq!(cow.read_at(0, &mut buf).unwrap(), 3 * 4096);
        assert!(buf[..6000].iter().all(|&b| b == 3));
        assert!(buf[6000..].iter().all(|&b| b == 0));
    }

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
