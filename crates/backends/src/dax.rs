//! Byte-addressable storage: a DAX device or file, or any file mapped
//! shared.

use std::fs::File;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::file::{FileKind, file_len};
use crate::sys::{fd, mm};
use crate::{Store, StoreError, StoreOp};

/// How a [`DaxStore`] makes written bytes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// The mapping is `MAP_SYNC` on real persistent memory: bytes are
    /// durable once out of the CPU caches. Writes use non-temporal stores
    /// (which bypass the caches) and flush the cache lines of their
    /// unaligned edges; `sync` is a store fence.
    CacheFlush,
    /// An ordinary shared file mapping (no DAX here, or a filesystem that
    /// refuses `MAP_SYNC`): writes use non-temporal stores too, and `sync`
    /// is `msync(MS_SYNC)` of the mapping.
    Msync,
}

/// A store that lives in memory the process maps: a device-dax character
/// device, a file on a DAX filesystem, or (for testing, and as the
/// fallback) any file mapped `MAP_SHARED`.
///
/// umio fills pages by copying straight from the mapping into place
/// ([`Store::as_mapped`]): no staging buffer, no intermediate copy. Only
/// the partial page at the end of the store goes through
/// [`read_at`](Store::read_at), whose bytes [`DaxStore::copied_bytes`]
/// counts. Write-back copies with non-temporal stores; `sync` makes the
/// data durable (see [`Persistence`]).
///
/// The length is fixed when the store is opened, as for a block device:
/// [`set_len`](Store::set_len) succeeds only for lengths it already has,
/// so a writable region must lie within the store.
pub struct DaxStore {
    map: mm::SharedMapping,
    len: usize,
    writable: bool,
    persistence: Persistence,
    copied: AtomicU64,
    _file: File,
}

impl std::fmt::Debug for DaxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaxStore")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .field("persistence", &self.persistence)
            .finish()
    }
}

impl DaxStore {
    /// Maps all of `file` (open for reading, or reading and writing).
    /// Tries `MAP_SYNC` first (real persistent memory), then falls back to
    /// an ordinary shared mapping.
    pub fn new(file: &File) -> std::io::Result<Self> {
        let file = file.try_clone()?;
        let kind = FileKind::inspect(&file).or_else(|e| Self::char_device(&file).ok_or(e))?;
        let len = file_len(&file, kind.block_device)?;
        let len =
            usize::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let map = |flags: i32| mm::SharedMapping::new(&file, len, kind.writable, flags);
        let (map, persistence) = if len == 0 {
            (mm::SharedMapping::empty(), Persistence::Msync)
        } else if let Some(m) = kind
            .writable
            .then(|| map(mm::MAP_SHARED_VALIDATE | mm::MAP_SYNC).ok())
            .flatten()
        {
            (m, Persistence::CacheFlush)
        } else {
            (map(libc::MAP_SHARED)?, Persistence::Msync)
        };
        Ok(DaxStore {
            map,
            len,
            writable: kind.writable,
            persistence,
            copied: AtomicU64::new(0),
            _file: file,
        })
    }

    /// Opens `path` for reading (and writing when `writable`) and maps it.
    pub fn open(path: impl AsRef<std::path::Path>, writable: bool) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)?;
        Self::new(&f)
    }

    /// A device-dax character device's access mode, if `file` is one.
    fn char_device(file: &File) -> Option<FileKind> {
        use std::os::unix::fs::FileTypeExt;
        let meta = file.metadata().ok()?;
        if !meta.file_type().is_char_device() {
            return None;
        }
        let flags = fd::status_flags(file).ok()?;
        Some(FileKind {
            writable: flags & libc::O_ACCMODE == libc::O_RDWR,
            block_device: true,
        })
    }

    /// How written bytes are made durable.
    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    /// Bytes copied out by [`read_at`](Store::read_at): fills that did not
    /// copy straight from the mapping.
    pub fn copied_bytes(&self) -> u64 {
        self.copied.load(Relaxed)
    }

    fn range(
        &self,
        op: StoreOp,
        offset: u64,
        len: usize,
    ) -> Result<std::ops::Range<usize>, StoreError> {
        let start =
            usize::try_from(offset).map_err(|_| StoreError::new(op, offset, libc::EINVAL))?;
        let end = start
            .checked_add(len)
            .ok_or(StoreError::new(op, offset, libc::EINVAL))?;
        Ok(start..end)
    }
}

impl Store for DaxStore {
    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.len as u64)
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::new(StoreOp::Len, len, libc::EBADF));
        }
        if len == self.len as u64 {
            Ok(())
        } else {
            // Fixed size, like a block device: a mapping cannot grow or
            // shrink under regions that use it.
            Err(StoreError::new(StoreOp::Len, len, libc::EFBIG))
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        if offset >= self.len as u64 {
            return Ok(0);
        }
        let r = self.range(StoreOp::Read, offset, buf.len())?;
        let end = r.end.min(self.len);
        let n = end - r.start;
        buf[..n].copy_from_slice(&self.map.as_slice()[r.start..end]);
        self.copied.fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EBADF));
        }
        let r = self.range(StoreOp::Write, offset, buf.len())?;
        if r.end > self.len {
            return Err(StoreError::new(StoreOp::Write, offset, libc::EFBIG));
        }
        // SAFETY: r lies within the writable mapping; the caller does not
        // write overlapping ranges at once (Store's contract).
        unsafe {
            nt::copy(
                self.map.as_mut_ptr().add(r.start),
                buf,
                self.persistence == Persistence::CacheFlush,
            )
        };
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        if !self.writable || self.len == 0 {
            return Ok(());
        }
        match self.persistence {
            Persistence::CacheFlush => {
                nt::fence();
                Ok(())
            }
            Persistence::Msync => self
                .map
                .sync()
                .map_err(|e| StoreError::from_io(StoreOp::Sync, 0, &e)),
        }
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn name(&self) -> &str {
        match self.persistence {
            Persistence::CacheFlush => "dax",
            Persistence::Msync => "dax (msync)",
        }
    }

    fn as_mapped(&self) -> Option<&[u8]> {
        Some(self.map.as_slice())
    }
}

/// Non-temporal copies: stores that bypass the CPU caches, as Aquila does
/// for DAX write-back, so that written pages do not evict the cache's
/// working set and, on persistent memory, need no cache-line flush.
mod nt {
    /// Copies `src` to `dst` with non-temporal stores for the 16-byte
    /// aligned middle and ordinary stores for the edges (flushed from the
    /// cache when `flush_edges`), then fences.
    ///
    /// # Safety
    /// `dst..dst + src.len()` must be valid for writes and not overlap
    /// `src`.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn copy(dst: *mut u8, src: &[u8], flush_edges: bool) {
        use core::arch::x86_64::{
            __m128i, _mm_clflush, _mm_loadu_si128, _mm_sfence, _mm_stream_si128,
        };
        let n = src.len();
        let head = dst.align_offset(16).min(n);
        let body = (n - head) / 16 * 16;
        // SAFETY: the caller guarantees dst..dst+n is writable and
        // disjoint from src; every offset below is < n.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
            let mut i = head;
            while i < head + body {
                let v = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                i += 16;
            }
            std::ptr::copy_nonoverlapping(src.as_ptr().add(i), dst.add(i), n - i);
            if flush_edges {
                if head > 0 {
                    _mm_clflush(dst);
                }
                if i < n {
                    _mm_clflush(dst.add(i));
                }
            }
            _mm_sfence();
        }
    }

    /// Portable fallback: an ordinary copy.
    ///
    /// # Safety
    /// As for the x86_64 version.
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) unsafe fn copy(dst: *mut u8, src: &[u8], _flush_edges: bool) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Orders every earlier store before later ones (SFENCE).
    pub(super) fn fence() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SFENCE has no memory operands.
        unsafe {
            core::arch::x86_64::_mm_sfence()
        };
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_writes_and_syncs_through_the_mapping() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[3u8; 10_000]).unwrap();
        let s = DaxStore::open(tmp.path(), true).unwrap();
        assert_eq!(s.len().unwrap(), 10_000);
        assert_eq!(s.as_mapped().unwrap().len(), 10_000);
        // Unaligned edges and an aligned middle.
        let data: Vec<u8> = (0..5003).map(|i| (i % 251) as u8).collect();
        s.write_at(13, &data).unwrap();
        s.sync().unwrap();
        let on_disk = std::fs::read(tmp.path()).unwrap();
        assert_eq!(&on_disk[13..13 + 5003], &data[..]);
        assert_eq!(on_disk[12], 3);
        assert_eq!(on_disk[13 + 5003], 3);
        let mut buf = [0u8; 100];
        assert_eq!(s.read_at(9_950, &mut buf).unwrap(), 50);
        assert_eq!(s.copied_bytes(), 50);
        let e = s.write_at(9_990, &[0u8; 20]).unwrap_err();
        assert_eq!(
            (e.op, e.offset, e.errno),
            (StoreOp::Write, 9_990, libc::EFBIG)
        );
        assert_eq!(s.set_len(20_000).unwrap_err().errno, libc::EFBIG);
        s.set_len(10_000).unwrap();
    }

    #[test]
    fn read_only_mapping_refuses_writes() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[1u8; 4096]).unwrap();
        let s = DaxStore::open(tmp.path(), false).unwrap();
        assert!(!s.is_writable());
        assert_eq!(s.write_at(0, b"x").unwrap_err().errno, libc::EBADF);
        assert_eq!(s.persistence(), Persistence::Msync);
    }
}
