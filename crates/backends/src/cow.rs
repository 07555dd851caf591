//! [`CopyOnWrite`]: private (copy-on-write) views of a store, for
//! `MAP_PRIVATE`-style mappings (umio-core's `Runtime::map_copy`, the
//! `LD_PRELOAD` shim's private file mappings).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{FileStore, Store, StoreError, StoreOp};

/// Granule of the copy-on-write bitmap: umio's smallest page.
const GRANULE: u64 = 4096;

/// A copy-on-write view of a store, as a `MAP_PRIVATE` mapping of a file
/// is: the store below (never written), a scratch file of written pages
/// above, and a bitmap of which 4 KiB pages were written. Reads come from
/// the store until a page is written, from the scratch file ever after.
///
/// Store offsets are the lower store's. Only `[base, base + len)` (the
/// mapped part) may be written; the scratch file holds it at
/// `offset - base`. Bytes past the end of the lower store read as zeros,
/// up to `base + len`; the store's length never changes.
///
/// ```
/// use umio_backends::{CopyOnWrite, MemoryStore, Store};
/// let lower = MemoryStore::new(vec![1u8; 8192]);
/// let cow = CopyOnWrite::new(Box::new(lower), 0, 8192, None).unwrap();
/// cow.write_at(4096, &[9u8; 4096]).unwrap();
/// let mut page = [0u8; 4096];
/// cow.read_at(4096, &mut page).unwrap();
/// assert_eq!(page, [9u8; 4096]);
/// ```
pub struct CopyOnWrite {
    file: Box<dyn Store>,
    scratch: FileStore,
    base: u64,
    len: u64,
    /// One bit per 4 KiB page of the mapped part: set once written.
    written: Vec<AtomicU64>,
}

impl CopyOnWrite {
    /// A copy-on-write view of `lower`'s bytes `[base, base + len)`, its
    /// written pages kept in a nameless scratch file in `scratch_dir` (the
    /// system's temporary directory if `None`).
    pub fn new(
        lower: Box<dyn Store>,
        base: u64,
        len: u64,
        scratch_dir: Option<&std::path::Path>,
    ) -> std::io::Result<CopyOnWrite> {
        let pages = len.div_ceil(GRANULE);
        Ok(CopyOnWrite {
            file: lower,
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
    pub fn written_pages(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len.div_ceil(GRANULE)).filter(|&p| self.is_written(p))
    }

    /// Forgets what was written to the bytes `[from, to)` of the mapped
    /// part (relative to `base`, whole pages): they read from the file
    /// again, as a private page does after `MADV_DONTNEED`.
    pub fn forget(&self, from: u64, to: u64) {
        for p in from / GRANULE..to.div_ceil(GRANULE).min(self.len.div_ceil(GRANULE)) {
            self.written[(p / 64) as usize].fetch_and(!(1 << (p % 64)), Ordering::AcqRel);
        }
    }

    /// Copies the pages `old` has written (a view of the same store at the
    /// same base, say a mapping being moved by `mremap`).
    pub fn copy_written(&self, old: &CopyOnWrite) -> Result<(), StoreError> {
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

    /// The scratch file (a fork child of the shim copies the written pages
    /// from it).
    pub fn scratch(&self) -> &File {
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

    fn is_private_copy(&self) -> bool {
        true
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
        let cow =
            CopyOnWrite::new(Box::new(FileStore::new(&f).unwrap()), 4096, 3 * 4096, None).unwrap();
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
        let cow =
            CopyOnWrite::new(Box::new(FileStore::new(&f).unwrap()), 0, 3 * 4096, None).unwrap();
        let mut buf = vec![7u8; 3 * 4096];
        assert_eq!(cow.read_at(0, &mut buf).unwrap(), 3 * 4096);
        assert!(buf[..6000].iter().all(|&b| b == 3));
        assert!(buf[6000..].iter().all(|&b| b == 0));
    }
}
