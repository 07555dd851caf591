//! Heap mode: large allocations from one umio region over a file.
//!
//! The region (`UMIO_HEAP_SIZE` bytes of address space, the file as large
//! and sparse) is carved into extents of whole umio pages: a bump pointer,
//! and a free list of freed extents (first fit, coalesced). `free` discards
//! an extent's pages without writing them back (`UncheckedAdvice::DontNeed`) and
//! punches a hole in the file, so the extent reads as zeros again and
//! `calloc` can hand it out without clearing it.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use umio_backends::FileStore;
use umio_core::{FaultService, MapOptions, Mapping, UncheckedAdvice};

use crate::config::Config;
use crate::heap_store::HeapStore;
use crate::runtime::runtime;
use crate::sys;

/// Heap mode is not configured yet (the library's constructor has not run).
const UNCONFIGURED: u8 = 0;
/// No `UMIO_HEAP_FILE`: every allocation goes to glibc.
const OFF: u8 = 1;
/// Configured; the region is made on the first large allocation.
const PENDING: u8 = 2;
const READY: u8 = 3;
/// The region could not be made: everything goes to glibc.
const FAILED: u8 = 4;
/// A fork child: the parent's heap is mapped from its file, copy-on-write;
/// its extents are never reused and new allocations go to glibc.
const INHERITED: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(UNCONFIGURED);
/// Allocations at least this large use the heap (usize::MAX: none).
static MIN_ALLOC: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The region's bounds, for `free`'s test without a lock (0..0 before).
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

static HEAP: OnceLock<Heap> = OnceLock::new();
/// The heap's error when the runtime could not start (already reported).
const RUNTIME_FAILED: &str = "umio cannot start";
/// Held while the region is made (and across `fork`).
pub(crate) static INIT: Mutex<()> = Mutex::new(());

pub(crate) struct Heap {
    mapping: Mapping,
    file: File,
    /// The file, with what of it was ever written: fresh parts read as
    /// zeros without a file read.
    store: Arc<HeapStore>,
    base: usize,
    size: usize,
    page: usize,
    extents: Mutex<Extents>,
}

#[derive(Default)]
pub(crate) struct Extents {
    /// Offset of the first never-used byte.
    bump: usize,
    /// Free extents by offset: (length, reads as zeros).
    free: BTreeMap<usize, (usize, bool)>,
    /// Live allocations by offset: length.
    live: BTreeMap<usize, usize>,
    pub stats: HeapStats,
}

/// Counters of heap mode, for `UMIO_STATS`.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct HeapStats {
    pub allocations: u64,
    pub frees: u64,
    pub live_bytes: usize,
    pub peak_bytes: usize,
    /// Large allocations that went to glibc (the heap was full).
    pub fallbacks: u64,
}

/// Reads heap mode's settings (from the library's constructor).
pub(crate) fn configure(cfg: &Config) {
    if cfg.heap_file.is_some() {
        MIN_ALLOC.store(cfg.heap_min_alloc, Ordering::Release);
        STATE.store(PENDING, Ordering::Release);
    } else {
        STATE.store(OFF, Ordering::Release);
    }
}

/// Whether an allocation of `size` bytes is the heap's.
#[inline]
pub(crate) fn wants(size: usize) -> bool {
    size >= MIN_ALLOC.load(Ordering::Relaxed)
        && matches!(STATE.load(Ordering::Acquire), PENDING | READY)
}

/// Whether `p` lies in the heap region.
#[inline]
pub(crate) fn owns(p: usize) -> bool {
    p.wrapping_sub(BASE.load(Ordering::Relaxed))
        < END.load(Ordering::Relaxed) - BASE.load(Ordering::Relaxed)
}

/// The heap, made on first use; `None` if heap mode is off or failed, in
/// a fork child, or on a thread that must not start it (umio's own, or
/// one already inside the shim).
pub(crate) fn get() -> Option<&'static Heap> {
    match STATE.load(Ordering::Acquire) {
        READY => return HEAP.get(),
        PENDING => {}
        _ => return None,
    }
    let _guard = sys::enter()?;
    let _init = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if STATE.load(Ordering::Acquire) != PENDING {
        return HEAP
            .get()
            .filter(|_| STATE.load(Ordering::Acquire) == READY);
    }
    match Heap::new(crate::runtime::config()) {
        Ok(h) => {
            let h = HEAP.get_or_init(|| h);
            BASE.store(h.base, Ordering::Relaxed);
            END.store(h.base + h.size, Ordering::Relaxed);
            STATE.store(READY, Ordering::Release);
            Some(h)
        }
        Err(e) => {
            if e.to_string() != RUNTIME_FAILED {
                sys::eprint(&format!(
                    "umio-preload: heap mode cannot start ({e}); allocations stay with glibc\n"
                ));
            }
            STATE.store(FAILED, Ordering::Release);
            None
        }
    }
}

/// The heap if it was made, whatever its state.
pub(crate) fn made() -> Option<&'static Heap> {
    HEAP.get()
}

/// Whether this process is a fork child holding its parent's heap.
pub(crate) fn inherited() -> bool {
    STATE.load(Ordering::Acquire) == INHERITED
}

fn open_file(path: &std::path::Path, size: usize) -> std::io::Result<File> {
    if path.is_dir() {
        return FileStore::scratch(Some(path), size as u64)?
            .file()
            .try_clone();
    }
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    // The file holds nothing worth keeping after exit, and another process
    // started with the same environment must not truncate it under us.
    std::fs::remove_file(path)?;
    file.set_len(size as u64)?;
    Ok(file)
}

impl Heap {
    fn new(cfg: &Config) -> Result<Heap, Box<dyn std::error::Error>> {
        let path = cfg.heap_file.as_deref().ok_or("no UMIO_HEAP_FILE")?;
        let file = open_file(path, cfg.heap_size)
            .map_err(|e| format!("UMIO_HEAP_FILE {}: {e}", path.display()))?;
        // Its failure is reported once, by `runtime`, saying that
        // allocations stay with glibc.
        let rt = runtime().map_err(|_| RUNTIME_FAILED)?;
        let store = Arc::new(HeapStore::new(FileStore::new(&file)?, cfg.heap_size as u64));
        // SAFETY: the heap file is the shim's own; the application reaches
        // the heap through pointers only, and no Rust slice of it is made.
        let mapping = unsafe {
            rt.map(
                MapOptions::new()
                    .store(store.clone())
                    .len(cfg.heap_size)
                    .writable(true)
                    // The C library reads into heap buffers with its own
                    // system calls (stdio, `getdelim`), which the shim
                    // cannot fault in first: served in-thread, a
                    // non-resident buffer would fail them with `EFAULT`.
                    .fault_service(FaultService::Fillers),
            )
        }?;
        Ok(Heap {
            base: mapping.as_ptr() as usize,
            size: cfg.heap_size / mapping.page_size() * mapping.page_size(),
            page: mapping.page_size(),
            mapping,
            file,
            store,
            extents: Mutex::new(Extents::default()),
        })
    }

    /// Bytes of fresh heap memory filled with zeros without a file read.
    pub(crate) fn zeroed_bytes(&self) -> u64 {
        self.store.zeroed_bytes()
    }

    /// The region the heap's extents are carved from.
    pub(crate) fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Extents> {
        self.extents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `size` bytes aligned to `align` (a power of two); the pointer and
    /// whether its bytes read as zeros. `None` when the heap is full.
    pub(crate) fn alloc(&self, size: usize, align: usize) -> Option<(*mut u8, bool)> {
        let len = size.max(1).checked_next_multiple_of(self.page)?;
        let mut x = self.lock();
        let (off, zero) = x.carve(self.base, self.size, len, align)?;
        x.live.insert(off, len);
        x.stats.allocations += 1;
        x.stats.live_bytes += len;
        x.stats.peak_bytes = x.stats.peak_bytes.max(x.stats.live_bytes);
        Some(((self.base + off) as *mut u8, zero))
    }

    /// Bytes usable at `p` (0 if `p` is not a live allocation).
    pub(crate) fn usable(&self, p: usize) -> usize {
        self.lock().live.get(&(p - self.base)).copied().unwrap_or(0)
    }

    /// Grows or shrinks the allocation at `p` in place if it can.
    pub(crate) fn resize_in_place(&self, p: usize, size: usize) -> bool {
        let Some(len) = size.max(1).checked_next_multiple_of(self.page) else {
            return false;
        };
        let off = p - self.base;
        let mut x = self.lock();
        let Some(&old) = x.live.get(&off) else {
            return false;
        };
        if len <= old {
            return true;
        }
        let (end, need) = (off + old, len - old);
        if x.bump == end && end + need <= self.size {
            x.bump += need;
        } else if let Some(&(flen, z)) = x.free.get(&end)
            && flen >= need
        {
            x.free.remove(&end);
            if flen > need {
                x.free.insert(end + need, (flen - need, z));
            }
        } else {
            return false;
        }
        x.live.insert(off, len);
        x.stats.live_bytes += need;
        x.stats.peak_bytes = x.stats.peak_bytes.max(x.stats.live_bytes);
        true
    }

    /// Frees the allocation at `p`: its pages are discarded without
    /// write-back and its file range punched, then it is reusable.
    pub(crate) fn free(&self, p: usize) {
        let off = p - self.base;
        let Some(len) = self.lock().live.remove(&off) else {
            sys::eprint("umio-preload: free() of a heap pointer that is not allocated\n");
            return;
        };
        // Discard (no dirty page is left), punch (the file reads zero),
        // discard again (read-ahead may have filled pages from the file
        // between the two).
        let range = off..off + len;
        // SAFETY: no Rust slice of the heap is made; the freed range is no
        // longer the application's.
        let dropped = unsafe {
            self.mapping
                .advise_shared(range.clone(), UncheckedAdvice::DontNeed)
        }
        .is_ok();
        // SAFETY: fallocate on our own descriptor, within the file.
        let punched = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as i64,
                len as i64,
            )
        } == 0;
        if punched {
            self.store.forget(off as u64, len as u64);
        }
        let zero = dropped
            && punched
            // SAFETY: as above.
            && unsafe { self.mapping.advise_shared(range, UncheckedAdvice::DontNeed) }.is_ok();
        let mut x = self.lock();
        x.stats.frees += 1;
        x.stats.live_bytes -= len;
        x.release(off, len, zero);
    }

    /// Writes the heap's dirty pages to its file (before `fork`).
    pub(crate) fn flush(&self) {
        if let Err(e) = self.mapping.flush() {
            sys::eprint(&format!("umio-preload: heap write-back failed: {e}\n"));
        }
    }

    /// In a fork child: maps the heap file copy-on-write where the region
    /// was (the parent wrote its pages back before forking), so the child
    /// reads the parent's allocations; the heap is then left alone.
    pub(crate) fn adopt_in_child(&self) {
        // SAFETY: the range was the parent's heap region, absent here.
        let p = unsafe {
            sys::mmap(
                self.base as *mut libc::c_void,
                self.size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE,
                self.file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            sys::eprint("umio-preload: fork child: cannot map the parent's heap\n");
        }
        STATE.store(INHERITED, Ordering::Release);
    }
}

impl Extents {
    /// Takes `len` bytes aligned to `align` from the free list (first fit)
    /// or the bump pointer: (offset, reads as zeros).
    fn carve(
        &mut self,
        base: usize,
        size: usize,
        len: usize,
        align: usize,
    ) -> Option<(usize, bool)> {
        let aligned = |off: usize| (base + off).next_multiple_of(align) - base;
        let fit = self
            .free
            .iter()
            .find(|&(&s, &(flen, _))| aligned(s) + len <= s + flen)
            .map(|(&s, &(flen, z))| (s, flen, z));
        if let Some((s, flen, z)) = fit {
            self.free.remove(&s);
            let at = aligned(s);
            if at > s {
                self.free.insert(s, (at - s, z));
            }
            if at + len < s + flen {
                self.free.insert(at + len, (s + flen - at - len, z));
            }
            return Some((at, z));
        }
        let at = aligned(self.bump);
        if at.checked_add(len)? > size {
            return None;
        }
        if at > self.bump {
            self.free.insert(self.bump, (at - self.bump, true));
        }
        self.bump = at + len;
        Some((at, true))
    }

    /// Returns an extent to the free list, merged with its neighbours.
    fn release(&mut self, mut off: usize, mut len: usize, mut zero: bool) {
        if let Some((&s, &(l, z))) = self.free.range(..off).next_back()
            && s + l == off
        {
            self.free.remove(&s);
            (off, len, zero) = (s, len + l, zero && z);
        }
        if let Some(&(l, z)) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += l;
            zero = zero && z;
        }
        if zero && off + len == self.bump {
            self.bump = off;
        } else {
            self.free.insert(off, (len, zero));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_reused_and_coalesced() {
        let mut x = Extents::default();
        let page = 65536;
        let a = x.carve(0, 1 << 30, 2 * page, page).unwrap();
        let b = x.carve(0, 1 << 30, page, page).unwrap();
        let c = x.carve(0, 1 << 30, page, page).unwrap();
        assert_eq!((a, b, c), ((0, true), (2 * page, true), (3 * page, true)));
        // Freed without punching: not zero; reused first fit.
        x.release(0, 2 * page, false);
        assert_eq!(x.carve(0, 1 << 30, page, page), Some((0, false)));
        x.release(0, page, false);
        x.release(2 * page, page, true);
        // 0..3 pages coalesced, not all zero.
        assert_eq!(x.free.get(&0), Some(&(3 * page, false)));
        // Freeing the last extent (zeroed) coalesces and lowers the bump
        // pointer only when the whole run reads zero.
        x.release(3 * page, page, true);
        assert_eq!(x.free.get(&0), Some(&(4 * page, false)));
        assert_eq!(x.bump, 4 * page);
        // Alignment beyond the page: the skipped part stays free.
        let (at, _) = x.carve(0, 1 << 30, page, 8 * page).unwrap();
        assert_eq!(at % (8 * page), 0);
        assert_eq!(x.carve(0, 8 * page, 16 * page, page), None, "full");
    }
}
