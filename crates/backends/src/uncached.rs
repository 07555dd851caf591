//! A file store that leaves nothing behind in the kernel's page cache.
//!
//! umio keeps the pages it reads in its own bounded cache; a buffered
//! `pread` would leave a second copy of each in the kernel's page cache,
//! charged to the same memory budget. [`UncachedFileStore`] avoids it:
//! - where the file system supports direct I/O (`statx` reports
//!   `STATX_DIOALIGN`), whole aligned blocks go through an `O_DIRECT`
//!   [`UringStore`]; the partial block at the end of a request (the last
//!   page of a file) is read through an aligned bounce block with
//!   `O_DIRECT` too, and written with a buffered `pwrite` of exactly its
//!   bytes, so a write-back never extends the file;
//! - elsewhere (many network and FUSE file systems) it reads and writes
//!   with `pread`/`pwrite` and then drops what it read from the page cache
//!   (`posix_fadvise(POSIX_FADV_DONTNEED)`); written ranges are dropped
//!   once [`sync`](Store::sync) has written them back;
//! - on tmpfs and ramfs, whose page cache is the file itself (there is no
//!   second copy, and the kernel ignores the advice), plain
//!   `pread`/`pwrite`.
//!
//! Durability is that of [`FileStore`]: a write is durable after
//! [`sync`](Store::sync) (`fdatasync`, which covers direct and buffered
//! writes of the file alike).

use std::alloc::Layout;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, OnceLock};

use crate::sys::{fd, mm};
use crate::{FileStore, IoRequest, Store, StoreError, StoreOp, UringOptions, UringStore};

/// Largest direct I/O alignment umio's page-granular requests satisfy.
const MAX_DIO_ALIGN: u32 = 4096;

/// How an [`UncachedFileStore`] keeps out of the kernel's page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// `O_DIRECT` through io_uring for aligned blocks.
    Direct,
    /// Buffered `pread`/`pwrite`, then `POSIX_FADV_DONTNEED`.
    DropBehind,
    /// Buffered `pread`/`pwrite` and nothing more: the file lives in
    /// memory (tmpfs, ramfs), its page cache is the file itself, and
    /// `POSIX_FADV_DONTNEED` would be a system call that drops nothing.
    MemoryFs,
}

/// What an [`UncachedFileStore`] has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UncachedStats {
    /// Bytes read with `O_DIRECT`.
    pub direct_read: u64,
    /// Bytes written with `O_DIRECT`.
    pub direct_written: u64,
    /// Bytes read through the page cache (then dropped from it).
    pub buffered_read: u64,
    /// Bytes written through the page cache (dropped after write-back).
    pub buffered_written: u64,
    /// `POSIX_FADV_DONTNEED` calls made.
    pub fadvise_calls: u64,
}

#[derive(Default)]
struct Counters {
    direct_read: AtomicU64,
    direct_written: AtomicU64,
    buffered_read: AtomicU64,
    buffered_written: AtomicU64,
    fadvise_calls: AtomicU64,
}

/// The direct I/O alignment `statx` reports for `file`: `Some(align)` (the
/// larger of the memory and offset alignments) where the file system
/// supports `O_DIRECT`, `None` where it does not or does not say.
pub fn dio_alignment(file: &File) -> Option<u32> {
    let (mem_align, offset_align) = fd::dio_align(file)?;
    if offset_align == 0 {
        return None;
    }
    Some(mem_align.max(offset_align))
}

/// Bytes of `file` the kernel's page cache holds now (`mincore` of a
/// shared mapping of it, which itself brings no page in), and the file's
/// length. For tests, reports and the demo.
pub fn cached_bytes(file: &File) -> std::io::Result<(u64, u64)> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok((0, 0));
    }
    let span = usize::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    let pages = span.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    mm::file_residency(file, span, &mut vec)?;
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
    Ok(((resident * 4096).min(len), len))
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` of `[offset, offset + len)`; a
/// failure is ignored (the advice is only advice).
fn drop_cached(file: &File, offset: u64, len: u64) {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    fd::drop_cached(file, off, len);
}

/// One block of memory aligned for `O_DIRECT`.
struct AlignedBlock {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBlock {
    fn new(len: usize) -> Option<AlignedBlock> {
        let layout = Layout::from_size_align(len, len).ok()?;
        // SAFETY: the layout has a non-zero size (len >= 512).
        let ptr = unsafe { std::alloc::alloc(layout) };
        (!ptr.is_null()).then_some(AlignedBlock { ptr, layout })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the allocation holds layout.size() bytes and is owned by
        // this value; u8 has no invalid values (the bytes are only read
        // after the kernel wrote them).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Default io_uring depth of the direct mode ([`UncachedFileStore::with_queue_depth`]).
const DEFAULT_DEPTH: u32 = 64;

/// A file read and written without leaving pages in the kernel's page
/// cache, so that umio's bounded cache is the only copy.
///
/// - [`CacheMode::Direct`], where the file system supports direct I/O
///   (`statx` reports `STATX_DIOALIGN`): whole aligned blocks go through
///   an `O_DIRECT` [`UringStore`]; the partial block at the end of a
///   request (the last page of a file) is read through an aligned bounce
///   block with `O_DIRECT` too, and written with a buffered `pwrite` of
///   exactly its bytes, so a write-back never extends the file.
/// - [`CacheMode::DropBehind`] elsewhere (many network and FUSE file
///   systems): `pread`/`pwrite`, then what was read is dropped from the
///   page cache (`POSIX_FADV_DONTNEED`); written ranges are dropped once
///   [`sync`](Store::sync) has written them back.
/// - [`CacheMode::MemoryFs`] on tmpfs and ramfs: `pread`/`pwrite` only
///   (the page cache is the file; there is nothing to drop).
///
/// Requests whose offset or buffer is not aligned take the drop-behind
/// path in either mode, and so does the partial last block of a single
/// read (a miss's, which may be served in a signal handler: no bounce
/// block is allocated for it). Durability is that of [`FileStore`]: a write is
/// durable after [`sync`](Store::sync) (`fdatasync`, which covers direct
/// and buffered writes of the file alike). Built by
/// [`UncachedFileStore::new`], which picks [`CacheMode::Direct`] where
/// `statx` reports direct I/O support.
pub struct UncachedFileStore {
    /// The buffered descriptor: length, sync, the unaligned rest.
    file: FileStore,
    /// In [`CacheMode::Direct`]: the `O_DIRECT` io_uring store, made at
    /// the first transfer (making it maps a ring and staging buffers: not
    /// at map time, where a new mapping could land on the very address a
    /// caller is about to map at); `Some(None)` once io_uring was refused,
    /// after which the store drops behind.
    direct: Option<OnceLock<Option<UringStore>>>,
    /// In [`CacheMode::Direct`]: an `O_DIRECT` descriptor of the file, open
    /// from the start. A single aligned request (a miss's: it may be served
    /// in a signal handler, which must not allocate or map anything) is a
    /// plain `pread`/`pwrite` on it, whether or not the ring exists yet.
    direct_file: Option<File>,
    /// Whether what goes through the page cache is dropped from it after
    /// (not in [`CacheMode::MemoryFs`]).
    drop_behind: bool,
    /// The `O_DIRECT` alignment used (4096 in direct mode).
    align: usize,
    /// Bytes written through the page cache since the last sync, as one
    /// covering range: dropped from the cache after the sync.
    dirty: Mutex<Option<(u64, u64)>>,
    /// Requests in flight at once on the io_uring store (direct mode).
    depth: u32,
    counters: Counters,
}

impl std::fmt::Debug for UncachedFileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UncachedFileStore")
            .field("mode", &self.mode())
            .field("writable", &self.file.is_writable())
            .finish()
    }
}

impl UncachedFileStore {
    /// Wraps a duplicate of `file` (open for reading, or reading and
    /// writing): `O_DIRECT` through io_uring where `statx` reports direct
    /// I/O with an alignment of at most 4096 and io_uring and `O_DIRECT`
    /// are available, drop-behind buffered I/O otherwise.
    pub fn new(file: &File) -> std::io::Result<Self> {
        let mode = match dio_alignment(file) {
            _ if fd::in_memory_fs(file) => CacheMode::MemoryFs,
            Some(a) if a <= MAX_DIO_ALIGN => CacheMode::Direct,
            _ => CacheMode::DropBehind,
        };
        // Where O_DIRECT or io_uring is refused after all: drop-behind.
        Self::with_mode(file, mode).or_else(|e| match mode {
            CacheMode::Direct => Self::with_mode(file, CacheMode::DropBehind),
            CacheMode::DropBehind | CacheMode::MemoryFs => Err(e),
        })
    }

    /// Wraps a duplicate of `file` in the given mode. [`CacheMode::Direct`]
    /// fails where the file system refuses `O_DIRECT` (`EINVAL`); where
    /// io_uring turns out to be unavailable at the first transfer, the
    /// store drops behind instead.
    pub fn with_mode(file: &File, mode: CacheMode) -> std::io::Result<Self> {
        let buffered = FileStore::new(file)?;
        let (direct, direct_file) = match mode {
            CacheMode::Direct => {
                // O_DIRECT, with the buffered descriptor's access mode (a
                // descriptor, no mapping: the ring waits for a batch).
                use std::os::unix::fs::OpenOptionsExt;
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(buffered.is_writable())
                    .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
                    .open(format!("/proc/self/fd/{}", buffered.file().as_raw_fd()))?;
                (Some(OnceLock::new()), Some(f))
            }
            CacheMode::DropBehind | CacheMode::MemoryFs => (None, None),
        };
        Ok(UncachedFileStore {
            file: buffered,
            direct,
            direct_file,
            drop_behind: mode != CacheMode::MemoryFs,
            align: MAX_DIO_ALIGN as usize,
            dirty: Mutex::new(None),
            depth: DEFAULT_DEPTH,
            counters: Counters::default(),
        })
    }

    /// Sets how many requests the direct mode's io_uring store keeps in
    /// flight at once (its [`queue_depth`](Store::queue_depth)), 1 to
    /// 4096 (clamped); default 64. No effect in drop-behind mode (depth
    /// 1), nor once the store has made its first batched transfer.
    pub fn with_queue_depth(mut self, depth: u32) -> Self {
        self.depth = depth.clamp(1, 4096);
        self
    }

    /// How the store keeps out of the page cache.
    pub fn mode(&self) -> CacheMode {
        match &self.direct {
            Some(d) if !matches!(d.get(), Some(None)) => CacheMode::Direct,
            _ if !self.drop_behind => CacheMode::MemoryFs,
            _ => CacheMode::DropBehind,
        }
    }

    /// The `O_DIRECT` store, made at the first call; `None` in drop-behind
    /// mode or where io_uring is refused.
    fn direct(&self) -> Option<&UringStore> {
        self.direct
            .as_ref()?
            .get_or_init(|| {
                UringStore::new(
                    self.file.file(),
                    UringOptions::new().direct(true).depth(self.depth),
                )
                .ok()
            })
            .as_ref()
    }

    /// The underlying (buffered) file.
    pub fn file(&self) -> &File {
        self.file.file()
    }

    /// What the store has done so far.
    pub fn stats(&self) -> UncachedStats {
        let c = &self.counters;
        UncachedStats {
            direct_read: c.direct_read.load(Relaxed),
            direct_written: c.direct_written.load(Relaxed),
            buffered_read: c.buffered_read.load(Relaxed),
            buffered_written: c.buffered_written.load(Relaxed),
            fadvise_calls: c.fadvise_calls.load(Relaxed),
        }
    }

    fn drop_range(&self, offset: u64, len: u64) {
        if len > 0 && self.drop_behind {
            self.counters.fadvise_calls.fetch_add(1, Relaxed);
            drop_cached(self.file.file(), offset, len);
        }
    }

    /// A buffered read, then the range dropped from the page cache.
    fn read_buffered(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let n = self.file.read_at(offset, buf)?;
        self.counters.buffered_read.fetch_add(n as u64, Relaxed);
        self.drop_range(offset, buf.len() as u64);
        Ok(n)
    }

    /// A buffered write of exactly `buf`; the range is dropped from the
    /// page cache now (clean pages go, dirty ones start write-back) and
    /// again after the next sync.
    fn write_buffered(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        self.file.write_at(offset, buf)?;
        let end = offset + buf.len() as u64;
        self.counters
            .buffered_written
            .fetch_add(buf.len() as u64, Relaxed);
        {
            let mut d = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
            *d = Some(match *d {
                Some((s, e)) => (s.min(offset), e.max(end)),
                None => (offset, end),
            });
        }
        self.drop_range(offset, buf.len() as u64);
        Ok(())
    }

    /// Reads the partial block at `offset` (aligned) through an aligned
    /// bounce block with `O_DIRECT`: short only at the end of the file.
    fn read_tail(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let Some(direct) = self.direct() else {
            return self.read_buffered(offset, buf);
        };
        let Some(mut block) = AlignedBlock::new(self.align) else {
            return self.read_buffered(offset, buf);
        };
        let n = direct.read_at(offset, block.bytes())?;
        let got = n.min(buf.len());
        buf[..got].copy_from_slice(&block.bytes()[..got]);
        self.counters.direct_read.fetch_add(got as u64, Relaxed);
        Ok(got)
    }

    /// Whether a request can go straight to the `O_DIRECT` descriptor
    /// (its aligned head at least): offset and buffer address aligned.
    fn direct_capable(&self, req: &mut IoRequest<'_>) -> bool {
        self.direct().is_some() && self.aligned(req)
    }

    /// Whether a request's offset and buffer address are aligned for
    /// `O_DIRECT`.
    fn aligned(&self, req: &mut IoRequest<'_>) -> bool {
        let addr = match req.read_buf() {
            Some(b) => b.as_ptr() as usize,
            None => req.write_buf().map_or(1, |b| b.as_ptr() as usize),
        };
        req.offset().is_multiple_of(self.align as u64) && addr.is_multiple_of(self.align)
    }

    /// One read at an aligned offset into an aligned buffer (a miss's: it
    /// may be served in a signal handler, which must not allocate or map
    /// anything): its whole blocks with one `O_DIRECT` `pread` on the
    /// descriptor kept for it, a partial last block (the end of a file)
    /// buffered and dropped from the page cache after. No ring, no bounce
    /// block.
    fn read_direct_one(&self, f: &File, req: &mut IoRequest<'_>) {
        let offset = req.offset();
        let Some(buf) = req.read_buf() else { return };
        let head = buf.len() / self.align * self.align;
        let r = crate::file::read_full_at(f, offset, &mut buf[..head]).inspect(|&n| {
            self.counters.direct_read.fetch_add(n as u64, Relaxed);
        });
        let r = match r {
            Ok(n) if n == head && head < buf.len() => self
                .read_buffered(offset + head as u64, &mut buf[head..])
                .map(|m| head + m),
            r => r,
        };
        req.complete(r);
    }

    fn perform_buffered(&self, req: &mut IoRequest<'_>) {
        let offset = req.offset();
        let r = if let Some(buf) = req.read_buf() {
            self.read_buffered(offset, buf)
        } else {
            let buf = req.write_buf().unwrap_or(&[]);
            self.write_buffered(offset, buf).map(|()| buf.len())
        };
        req.complete(r);
    }

    /// Direct mode: aligned heads of the requests in one io_uring batch,
    /// then the partial tails one by one.
    fn submit_direct(&self, direct: &UringStore, batch: &mut [IoRequest<'_>]) {
        let a = self.align;
        // One aligned request (the fault path's: it may run in a signal
        // handler, which must not allocate): straight to the descriptor.
        if let [req] = batch
            && req.result().is_none()
            && self.direct_capable(req)
            && req.len().is_multiple_of(a)
        {
            let write = req.is_write();
            direct.perform_one(req);
            if let Some(Ok(n)) = req.result() {
                let c = if write {
                    &self.counters.direct_written
                } else {
                    &self.counters.direct_read
                };
                c.fetch_add(n as u64, Relaxed);
            }
            return;
        }
        let capable: Vec<bool> = batch
            .iter_mut()
            .map(|r| r.result().is_none() && self.direct_capable(r))
            .collect();
        // (head result, tail) per capable request, in batch order.
        let mut outcome: Vec<Option<Result<usize, StoreError>>> = vec![None; batch.len()];
        {
            let mut heads = Vec::new();
            let mut which = Vec::new();
            let mut tails: Vec<(usize, u64, usize, TailBuf<'_>)> = Vec::new();
            for (i, req) in batch.iter_mut().enumerate() {
                if !capable[i] {
                    continue;
                }
                let offset = req.offset();
                let head = req.len() / a * a;
                if !req.is_write() {
                    let Some(buf) = req.read_buf() else { continue };
                    let (h, t) = buf.split_at_mut(head);
                    if !h.is_empty() {
                        heads.push(IoRequest::read(offset, h));
                        which.push(i);
                    }
                    if !t.is_empty() {
                        tails.push((i, offset + head as u64, head, TailBuf::Read(t)));
                    }
                } else if let Some(buf) = req.write_buf() {
                    let (h, t) = buf.split_at(head);
                    if !h.is_empty() {
                        heads.push(IoRequest::write(offset, h));
                        which.push(i);
                    }
                    if !t.is_empty() {
                        tails.push((i, offset + head as u64, head, TailBuf::Write(t)));
                    }
                }
            }
            if !heads.is_empty() {
                direct.submit(&mut heads);
            }
            for (h, &i) in heads.iter().zip(&which) {
                let r = h.result().unwrap_or(Err(StoreError::new(
                    if h.is_write() {
                        StoreOp::Write
                    } else {
                        StoreOp::Read
                    },
                    h.offset(),
                    libc::EIO,
                )));
                if let Ok(n) = r {
                    let c = if h.is_write() {
                        &self.counters.direct_written
                    } else {
                        &self.counters.direct_read
                    };
                    c.fetch_add(n as u64, Relaxed);
                }
                outcome[i] = Some(r);
            }
            for (i, at, head_len, tail) in tails {
                match outcome[i] {
                    // The head failed, or ended short at the end of the
                    // file: nothing more to read.
                    Some(Err(_)) => continue,
                    Some(Ok(n)) if n < head_len => continue,
                    _ => {}
                }
                let r = match tail {
                    TailBuf::Read(t) => self.read_tail(at, t),
                    TailBuf::Write(t) => self.write_buffered(at, t).map(|()| t.len()),
                };
                outcome[i] = Some(match (outcome[i], r) {
                    (_, Err(e)) => Err(e),
                    (Some(Ok(n)), Ok(m)) => Ok(n + m),
                    (_, Ok(m)) => Ok(m),
                });
            }
        }
        for (i, req) in batch.iter_mut().enumerate() {
            if capable[i] {
                req.complete(outcome[i].unwrap_or(Ok(0)));
            } else if req.result().is_none() {
                self.perform_buffered(req);
            }
        }
    }
}

/// The unaligned end of a request.
enum TailBuf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl Store for UncachedFileStore {
    fn len(&self) -> Result<u64, StoreError> {
        self.file.len()
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.file.set_len(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        crate::request::read_one(self, offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        crate::request::write_one(self, offset, buf)
    }

    fn sync(&self) -> Result<(), StoreError> {
        let dirty = self.dirty.lock().unwrap_or_else(|e| e.into_inner()).take();
        let r = self.file.sync();
        if let Some((s, e)) = dirty {
            if r.is_ok() {
                // Written back: now the pages are clean and can go.
                self.drop_range(s, e - s);
            } else {
                let mut d = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
                *d = Some(d.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
            }
        }
        r
    }

    fn is_writable(&self) -> bool {
        self.file.is_writable()
    }

    fn name(&self) -> &str {
        match self.mode() {
            CacheMode::Direct => "file (O_DIRECT, io_uring)",
            CacheMode::DropBehind => "file (drop-behind)",
            CacheMode::MemoryFs => "file (in memory)",
        }
    }

    fn submit(&self, batch: &mut [IoRequest<'_>]) {
        if let [req] = batch
            && let Some(f) = &self.direct_file
            && req.result().is_none()
            && !req.is_write()
            && self.aligned(req)
        {
            self.read_direct_one(f, req);
            return;
        }
        match self.direct() {
            Some(d) => self.submit_direct(d, batch),
            None => {
                for req in batch.iter_mut().filter(|r| r.result().is_none()) {
                    self.perform_buffered(req);
                }
            }
        }
    }

    /// Direct mode, every open request aligned (the fill path's batches):
    /// the io_uring store's `submit_each`, each request handed to `done`
    /// as it completes. Otherwise [`submit`](Store::submit), then `done`
    /// for each.
    fn submit_each(
        &self,
        batch: &mut [IoRequest<'_>],
        done: &mut dyn FnMut(usize, &mut IoRequest<'_>),
    ) {
        if let Some(d) = self.direct()
            && batch.len() > 1
            && batch.iter_mut().all(|r| {
                r.result().is_some()
                    || (self.direct_capable(r) && r.len().is_multiple_of(self.align))
            })
        {
            let c = &self.counters;
            d.submit_each(batch, &mut |i, req| {
                if let Some(Ok(n)) = req.result() {
                    let cell = if req.is_write() {
                        &c.direct_written
                    } else {
                        &c.direct_read
                    };
                    cell.fetch_add(n as u64, Relaxed);
                }
                done(i, req);
            });
            return;
        }
        self.submit(batch);
        for (i, req) in batch.iter_mut().enumerate() {
            done(i, req);
        }
    }

    fn queue_depth(&self) -> usize {
        self.direct().map_or(1, |d| d.queue_depth())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        // The same inode: one descriptor serves both paths.
        self.file.punch_hole(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `len` patterned bytes in `dir`, written back and dropped
    /// from the page cache.
    fn file_in(dir: &std::path::Path, len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
        tmp.write_all(&data).unwrap();
        tmp.as_file().sync_all().unwrap();
        drop_cached(tmp.as_file(), 0, 0);
        (tmp, data)
    }

    /// A directory whose file system supports direct I/O, or `None`
    /// (the caller prints SKIPPED).
    fn dio_dir() -> Option<std::path::PathBuf> {
        [
            std::env::temp_dir(),
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        ]
        .into_iter()
        .find(|d| {
            tempfile::tempfile_in(d)
                .ok()
                .and_then(|f| dio_alignment(&f))
                .is_some_and(|a| a <= MAX_DIO_ALIGN)
        })
    }

    /// Page-aligned memory, as umio's staging buffers and mappings are.
    struct Aligned(Vec<u64>, usize);
    impl Aligned {
        fn new(len: usize) -> Self {
            let v = vec![0u64; (len + 8192) / 8];
            let skip = (v.as_ptr() as usize).next_multiple_of(4096) - v.as_ptr() as usize;
            Aligned(v, skip)
        }
        fn bytes(&mut self, len: usize) -> &mut [u8] {
            // SAFETY: skip + len lies within the vector's bytes.
            unsafe {
                std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>().add(self.1), len)
            }
        }
    }

    #[test]
    fn direct_partial_last_page_reads_and_writes_back_without_growing() {
        let Some(dir) = dio_dir() else {
            eprintln!("SKIPPED: no directory here on a file system with direct I/O");
            return;
        };
        // Three pages and 1000 bytes.
        let len = 3 * 4096 + 1000;
        let (tmp, data) = file_in(&dir, len);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp.path())
            .unwrap();
        let s = UncachedFileStore::new(&f).unwrap();
        assert_eq!(s.mode(), CacheMode::Direct);
        // The last page alone, as the fault path reads it (valid bytes
        // only), and a run of two pages plus the tail in a batch.
        let mut mem = Aligned::new(4 * 4096);
        let buf = mem.bytes(4 * 4096);
        let (one, run) = buf.split_at_mut(4096);
        let mut batch = [
            IoRequest::read(3 * 4096, &mut one[..1000]),
            IoRequest::read(4096, &mut run[..2 * 4096 + 1000]),
        ];
        s.submit(&mut batch);
        assert_eq!(batch[0].result(), Some(Ok(1000)));
        assert_eq!(batch[1].result(), Some(Ok(2 * 4096 + 1000)));
        assert_eq!(&buf[..1000], &data[3 * 4096..]);
        assert_eq!(&buf[4096..4096 + 2 * 4096 + 1000], &data[4096..]);
        // The read_at path (one request, a miss's) too: its partial block
        // is read buffered and dropped (no bounce block, which a signal
        // handler could not allocate).
        let one = &mut buf[..1000];
        one.fill(0);
        assert_eq!(s.read_at(3 * 4096, one).unwrap(), 1000);
        assert_eq!(&one[..], &data[3 * 4096..]);
        let st = s.stats();
        assert_eq!(st.buffered_read, 1000, "{st:?}");
        assert_eq!(st.direct_read, 1000 + 2 * 4096 + 1000, "{st:?}");
        let (cached, _) = cached_bytes(&f).unwrap();
        assert_eq!(cached, 0, "the partial block left in the page cache");
        // Write-back of the last two pages, the last partial.
        let w = mem.bytes(4096 + 1000);
        w.fill(0xEE);
        s.write_at(2 * 4096, w).unwrap();
        s.sync().unwrap();
        assert_eq!(f.metadata().unwrap().len(), len as u64, "the file grew");
        let st = s.stats();
        assert_eq!(
            (st.direct_written, st.buffered_written),
            (4096, 1000),
            "{st:?}"
        );
        // Nothing of the file is left in the page cache (checked before
        // the buffered read below brings it in).
        let (cached, _) = cached_bytes(&f).unwrap();
        assert_eq!(cached, 0, "{st:?}");
        let back = std::fs::read(tmp.path()).unwrap();
        assert_eq!(&back[..2 * 4096], &data[..2 * 4096]);
        assert!(back[2 * 4096..].iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn drop_behind_reads_right_and_leaves_no_pages() {
        // Forced on a file system with a page cache that can be dropped
        // (tmpfs pages are the file itself: there the test can check only
        // the bytes and the advice given).
        let dir = dio_dir().unwrap_or_else(std::env::temp_dir);
        let len = 64 * 4096 + 123;
        let (tmp, data) = file_in(&dir, len);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(tmp.path())
            .unwrap();
        let s = UncachedFileStore::with_mode(&f, CacheMode::DropBehind).unwrap();
        let mut buf = vec![0u8; 8 * 4096];
        for at in (0..len as u64).step_by(8 * 4096) {
            let n = s.read_at(at, &mut buf).unwrap();
            assert_eq!(&buf[..n], &data[at as usize..(at as usize + n)]);
        }
        s.write_at(4096, &[5u8; 4096]).unwrap();
        s.sync().unwrap();
        let st = s.stats();
        assert_eq!(st.buffered_read, len as u64);
        assert!(st.fadvise_calls >= 10, "{st:?}");
        let (cached, _) = cached_bytes(&f).unwrap();
        if dio_dir().is_some() {
            assert_eq!(cached, 0, "bytes left in the page cache");
        }
        let mut page = [0u8; 4096];
        assert_eq!(s.read_at(4096, &mut page).unwrap(), 4096);
        assert_eq!(page, [5u8; 4096]);
    }

    #[test]
    fn tmpfs_is_read_in_place() {
        let dir = std::path::Path::new("/dev/shm");
        if !dir.is_dir() {
            eprintln!("SKIPPED: no /dev/shm");
            return;
        }
        let (tmp, data) = file_in(dir, 10_000);
        let s = UncachedFileStore::new(tmp.as_file()).unwrap();
        assert_eq!(s.mode(), CacheMode::MemoryFs);
        let mut buf = [0u8; 8192];
        assert_eq!(s.read_at(8192, &mut buf).unwrap(), 10_000 - 8192);
        assert_eq!(&buf[..10_000 - 8192], &data[8192..]);
        s.write_at(0, &[9u8; 100]).unwrap();
        s.sync().unwrap();
        assert_eq!(s.read_at(0, &mut buf).unwrap(), 8192);
        assert_eq!(&buf[..100], &[9u8; 100]);
        assert_eq!(&buf[100..8192], &data[100..8192]);
        let st = s.stats();
        assert_eq!(st.buffered_read, 2 * 8192 - (8192 - (10_000 - 8192)) as u64);
        // The file's pages are its storage: no advice to drop them.
        assert_eq!(st.fadvise_calls, 0, "{st:?}");
    }
}
