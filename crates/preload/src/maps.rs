//! File mappings served by umio: the table of what the application has
//! mapped through the shim, and the `mmap` family's semantics over it.
//!
//! The table holds *segments*: address ranges, each of one umio region
//! (an [`Entry`]), sorted and disjoint. A visible segment is mapped as far
//! as the application knows, with its protection; an invisible one is
//! memory umio still holds that the application no longer sees: the
//! padding after a mapping's last 4 KiB page up to its last umio page, and
//! the edges of a partial `munmap` that do not cover whole umio pages.
//! An entry's region is unmapped once it has no visible segment left.
//! Addresses in no segment are the kernel's.

use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::c_int;
use umio_backends::Store;
use umio_core::{Advice, FaultService, MapOptions, Mapping, UncheckedAdvice};

use crate::runtime::{Errno, config, runtime};
use crate::stores::{SharedFile, copy_on_write};
use crate::sys;
use umio_backends::CopyOnWrite;

pub(crate) const PAGE: usize = 4096;

/// One umio region made for an `mmap` call.
pub(crate) struct Entry {
    /// Shared by the table and the calls under way (`Arc<Entry>`), so
    /// partial unmaps (`munmap`, `MAP_FIXED`) go through
    /// [`Mapping::unmap_range_shared`]. That is sound here because the shim
    /// never makes a Rust slice (`as_slice`, deref) of a mapping: the
    /// application holds raw addresses and the shim passes ranges and
    /// pointers to umio and to the kernel, so nothing borrows memory that
    /// an unmap takes away; the application touching a range it unmapped
    /// is its own error, as with the kernel's `munmap`.
    pub mapping: Mapping,
    /// A duplicate of the application's descriptor: a fork child maps the
    /// file through it.
    pub file: File,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes the application mapped, rounded up to 4 KiB.
    pub len: usize,
    pub shared: bool,
    /// Whether the region takes writes (`PROT_WRITE` may be granted).
    pub writable: bool,
    pub store: Arc<dyn Store>,
    pub cow: Option<Arc<CopyOnWrite>>,
    /// The file's identity (`st_dev`, `st_ino`): writes and reads of it
    /// through any descriptor are kept coherent with the mapping
    /// (`coherence.rs`).
    pub file_id: FileId,
}

/// The identity and size of the file open as `fd`, if it is a regular
/// file or a block device (anything else is never mapped by umio).
pub(crate) fn file_of(fd: c_int) -> Option<(FileId, u64)> {
    // SAFETY: fstat writes the struct we pass; a bad descriptor fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } != 0 {
        return None;
    }
    let fmt = st.st_mode & libc::S_IFMT;
    (fmt == libc::S_IFREG || fmt == libc::S_IFBLK).then(|| (FileId::of(&st), st.st_size as u64))
}

/// A file's identity: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub(crate) fn of(st: &libc::stat) -> FileId {
        FileId {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

impl Entry {
    fn base(&self) -> usize {
        self.mapping.as_ptr() as usize
    }
}

#[derive(Clone)]
pub(crate) struct Segment {
    pub range: Range<usize>,
    pub entry: Arc<Entry>,
    pub visible: bool,
    pub prot: c_int,
}

/// The segments, sorted by address.
pub(crate) struct Table {
    pub segs: Vec<Segment>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { segs: Vec::new() });
/// Segments in the table: calls on other memory skip the lock while 0.
static SEGMENTS: AtomicUsize = AtomicUsize::new(0);
/// Mappings made and their total bytes, for `UMIO_STATS`.
pub(crate) static MAPPED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Of those, mappings served in the faulting thread (for `UMIO_STATS`).
pub(crate) static MAPPED_IN_THREAD: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn lock() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether any umio mapping exists (a racy hint for fast paths).
pub(crate) fn any() -> bool {
    SEGMENTS.load(Ordering::Acquire) != 0
}

impl Table {
    fn publish(&self) {
        SEGMENTS.store(self.segs.len(), Ordering::Release);
    }

    fn insert(&mut self, seg: Segment) {
        if seg.range.is_empty() {
            return;
        }
        let at = self
            .segs
            .partition_point(|s| s.range.start < seg.range.start);
        self.segs.insert(at, seg);
        self.publish();
    }

    /// Copies of the parts of segments within `range`.
    fn overlapping(&self, range: &Range<usize>) -> Vec<Segment> {
        self.segs
            .iter()
            .filter(|s| s.range.start < range.end && range.start < s.range.end)
            .map(|s| Segment {
                range: s.range.start.max(range.start)..s.range.end.min(range.end),
                ..s.clone()
            })
            .collect()
    }

    /// Removes and returns the parts of segments within `range`, leaving
    /// the parts outside it in place.
    fn take(&mut self, range: &Range<usize>) -> Vec<Segment> {
        let mut taken = Vec::new();
        let mut kept = Vec::with_capacity(self.segs.len() + 2);
        for s in self.segs.drain(..) {
            if s.range.end <= range.start || range.end <= s.range.start {
                kept.push(s);
                continue;
            }
            if s.range.start < range.start {
                kept.push(Segment {
                    range: s.range.start..range.start,
                    ..s.clone()
                });
            }
            if range.end < s.range.end {
                kept.push(Segment {
                    range: range.end..s.range.end,
                    ..s.clone()
                });
            }
            taken.push(Segment {
                range: s.range.start.max(range.start)..s.range.end.min(range.end),
                ..s
            });
        }
        kept.sort_by_key(|s| s.range.start);
        self.segs = kept;
        self.publish();
        taken
    }

    /// Removes the parts of `entry`'s segments within `range`.
    fn take_of(&mut self, entry: &Arc<Entry>, range: &Range<usize>) {
        let mut kept = Vec::with_capacity(self.segs.len() + 2);
        for s in self.segs.drain(..) {
            if !Arc::ptr_eq(&s.entry, entry)
                || s.range.end <= range.start
                || range.end <= s.range.start
            {
                kept.push(s);
                continue;
            }
            for part in [s.range.start..range.start, range.end..s.range.end] {
                let part = part.start.max(s.range.start)..part.end.min(s.range.end);
                if part.start < part.end {
                    kept.push(Segment {
                        range: part,
                        ..s.clone()
                    });
                }
            }
        }
        kept.sort_by_key(|s| s.range.start);
        self.segs = kept;
        self.publish();
    }

    /// The parts of visible segments within `range`.
    pub(crate) fn visible_in(&self, range: &Range<usize>) -> Vec<Segment> {
        let mut out = self.overlapping(range);
        out.retain(|s| s.visible);
        out
    }

    /// The entries with a segment overlapping `range`.
    fn entries_in(&self, range: &Range<usize>) -> Vec<Arc<Entry>> {
        let mut entries: Vec<Arc<Entry>> = Vec::new();
        for s in self.overlapping(range) {
            if !entries.iter().any(|e| Arc::ptr_eq(e, &s.entry)) {
                entries.push(s.entry);
            }
        }
        entries
    }

    fn has_visible(&self, entry: &Arc<Entry>) -> bool {
        self.segs
            .iter()
            .any(|s| s.visible && Arc::ptr_eq(&s.entry, entry))
    }

    fn remove_entry(&mut self, entry: &Arc<Entry>) {
        self.segs.retain(|s| !Arc::ptr_eq(&s.entry, entry));
        self.publish();
    }

    /// The entries mapping the file `id` whose mapped part overlaps the
    /// file's bytes `[from, to)`, each with that overlap relative to its
    /// mapping.
    pub(crate) fn mapping_file(
        &self,
        id: FileId,
        from: u64,
        to: u64,
    ) -> Vec<(Arc<Entry>, Range<usize>)> {
        let mut out: Vec<(Arc<Entry>, Range<usize>)> = Vec::new();
        for s in &self.segs {
            let e = &s.entry;
            if e.file_id != id || out.iter().any(|(o, _)| Arc::ptr_eq(o, e)) {
                continue;
            }
            let (start, end) = (e.offset, e.offset + e.mapping.len() as u64);
            let (a, b) = (from.max(start), to.min(end));
            if a < b {
                out.push((e.clone(), (a - start) as usize..(b - start) as usize));
            }
        }
        out
    }

    /// Takes out every segment (a fork child's start).
    pub(crate) fn drain(&mut self) -> Vec<Segment> {
        let segs = std::mem::take(&mut self.segs);
        self.publish();
        segs
    }
}

/// The parts of `range` that no segment in `segs` covers.
fn gaps(range: &Range<usize>, segs: &[Segment]) -> Vec<Range<usize>> {
    uncovered(range, segs.iter().map(|s| s.range.clone()).collect())
}

/// The parts of `range` outside every range of `covered`.
fn uncovered(range: &Range<usize>, mut covered: Vec<Range<usize>>) -> Vec<Range<usize>> {
    covered.sort_by_key(|r| r.start);
    let mut out = Vec::new();
    let mut at = range.start;
    for r in covered {
        if r.start > at {
            out.push(at..r.start);
        }
        at = at.max(r.end);
    }
    if at < range.end {
        out.push(at..range.end);
    }
    out
}

/// Checks an address range the way the kernel does: start 4 KiB-aligned,
/// length > 0; returns it with the length rounded up to 4 KiB.
fn checked_range(addr: usize, len: usize) -> Result<Range<usize>, Errno> {
    if !addr.is_multiple_of(PAGE) || len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let end = len
        .checked_next_multiple_of(PAGE)
        .and_then(|l| addr.checked_add(l))
        .ok_or(Errno(libc::EINVAL))?;
    Ok(addr..end)
}

/// Whether `mmap(fd)` is one for umio: the file's identity if so, and
/// whether its path is opted in to the in-thread service
/// (`UMIO_PRELOAD_IN_THREAD_PATHS`).
fn selected(len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> Option<(FileId, bool)> {
    let cfg = config();
    if cfg.paths.is_empty()
        || flags & libc::MAP_ANONYMOUS != 0
        || fd < 0
        || len == 0
        || len < cfg.min_size
        || off < 0
        || !(off as usize).is_multiple_of(PAGE)
        || prot & libc::PROT_EXEC != 0
        || prot & (libc::PROT_READ | libc::PROT_WRITE) == 0
        || flags & (libc::MAP_FIXED_NOREPLACE | libc::MAP_HUGETLB | libc::MAP_GROWSDOWN) != 0
    {
        return None;
    }
    let kind = flags & 0x0f;
    if kind != libc::MAP_SHARED && kind != libc::MAP_PRIVATE && kind != libc::MAP_SHARED_VALIDATE {
        return None;
    }
    // SAFETY: fstat writes the struct we pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; a bad descriptor makes it fail.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let fmt = st.st_mode & libc::S_IFMT;
    if fmt != libc::S_IFREG && fmt != libc::S_IFBLK {
        return None;
    }
    let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
        return None;
    };
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return None;
    };
    cfg.selects(&path)
        .then(|| (FileId::of(&st), cfg.in_thread(&path)))
}

/// `mmap` of a file: `Ok(None)` if the shim leaves it to the kernel.
pub(crate) fn map(
    addr: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> Result<Option<usize>, Errno> {
    let Some((file_id, in_thread)) = selected(len, prot, flags, fd, off) else {
        return Ok(None);
    };
    let shared = flags & 0x0f != libc::MAP_PRIVATE;
    if shared && kernel_serves(file_id) {
        return Ok(None);
    }
    let Ok(rt) = runtime() else {
        return Ok(None);
    };
    // SAFETY: F_GETFL reads the descriptor's flags.
    let mode = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_ACCMODE;
    if mode == libc::O_WRONLY || (shared && prot & libc::PROT_WRITE != 0 && mode != libc::O_RDWR) {
        return Err(Errno(libc::EACCES));
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor we then own.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(Errno(sys::errno()));
    }
    // SAFETY: `dup` is a fresh descriptor owned by nothing else.
    let file = unsafe { File::from_raw_fd(dup) };
    let len_r = len.next_multiple_of(PAGE);
    let (store, cow, writable): (Arc<dyn Store>, _, bool) = if shared {
        let s = SharedFile::new(&file, runtime()?.page_cache())?;
        let w = s.is_writable();
        (Arc::new(s), None, w)
    } else {
        let c = Arc::new(copy_on_write(
            &file,
            off as u64,
            len_r as u64,
            config().scratch_dir.as_deref(),
            runtime()?.page_cache(),
        )?);
        (c.clone(), Some(c), true)
    };
    let mut opts = MapOptions::new()
        .store(store.clone())
        .offset(off as u64)
        .len(len)
        .writable(writable);
    if shared && writable && config().keeper {
        // Its writes reach the file even if the process is killed, as the
        // kernel's page cache would keep them.
        match file.try_clone() {
            Ok(f) => opts = opts.survive_process_death_file(Arc::new(f)),
            Err(e) => log::warn!("umio: no keeper for a mapping: dup failed ({e})"),
        }
    }
    // The C library may read into the mapping with its own system calls
    // (stdio), which fail with `EFAULT` on non-resident memory served
    // in-thread: the fillers serve it unless its path is opted in.
    opts = if in_thread {
        opts.user_access_only(true)
    } else {
        opts.fault_service(FaultService::Fillers)
    };
    let fixed = flags & libc::MAP_FIXED != 0;
    let mapping = if fixed {
        let range = checked_range(addr, len)?;
        release_edges_for_fixed(&range)?;
        // Pages that fit the range: the region then reserves no memory
        // past it, and later fixed mappings at its 4 KiB boundaries split
        // none of its pages where the default page size allows.
        let mut ps = rt.page_size();
        while ps > PAGE && !(addr.is_multiple_of(ps) && len_r.is_multiple_of(ps)) {
            ps = if ps.is_power_of_two() { ps / 2 } else { PAGE };
        }
        // SAFETY: MAP_FIXED: the application gives up what it had mapped
        // in the range, as the kernel's MAP_FIXED would take it; umio
        // replaces its own mappings there (their dirty pages written back).
        opts = unsafe { opts.page_size(ps).fixed_address(addr) };
        // SAFETY: the application reaches the mapping through pointers only,
        // as it would a kernel mmap; no Rust slice of it is ever made, so
        // a file that changes under it breaks no reference.
        let mapped = unsafe { rt.map(opts) };
        // Older umio mappings lose what was replaced, even on failure
        // (mmap's MAP_FIXED may remove the old mapping when it fails).
        drop(forget_replaced(&range));
        mapped?
    } else {
        // SAFETY: as above.
        unsafe { rt.map(opts) }?
    };
    let base = mapping.as_ptr() as usize;
    let span = len.next_multiple_of(mapping.page_size());
    if writable && prot & libc::PROT_WRITE == 0 {
        // Whole umio pages, the padding past `len_r` included (an invisible
        // segment with the same protection): one VMA per umio page, as a
        // fill installs a page with one copy that must not cross VMAs.
        // SAFETY: the region is ours, just made; read-only for now.
        if unsafe { sys::mprotect(base, span, prot) } != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    if flags & libc::MAP_POPULATE != 0 {
        mapping.prefetch(0..len)?;
    }
    let entry = Arc::new(Entry {
        mapping,
        file,
        offset: off as u64,
        len: len_r,
        shared,
        writable,
        store,
        cow,
        file_id,
    });
    MAPPED.fetch_add(1, Ordering::Relaxed);
    MAPPED_BYTES.fetch_add(len_r, Ordering::Relaxed);
    if entry.mapping.fault_service() == FaultService::InThread {
        MAPPED_IN_THREAD.fetch_add(1, Ordering::Relaxed);
        crate::runtime::in_thread_mapped();
    }
    let mut t = lock();
    t.insert(Segment {
        range: base..base + len_r,
        entry: entry.clone(),
        visible: true,
        prot,
    });
    t.insert(Segment {
        range: base + len_r..base + span,
        entry: entry.clone(),
        visible: false,
        prot,
    });
    // Checked after the insertion, so that of two threads mapping the
    // file at once, the second sees the first.
    if shared && t.shared_overlapping(&entry) {
        drop(t);
        share_through_kernel(file_id);
    }
    Ok(Some(base))
}

/// Files whose shared mappings the kernel serves in this process: a file
/// mapped `MAP_SHARED` twice over the same bytes (or once by umio and once
/// by the kernel) goes to the kernel, whose page cache makes the two
/// mappings one. Never emptied (the shim does not see the kernel's
/// mappings go).
static KERNEL_FILES: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

fn kernel_serves(id: FileId) -> bool {
    KERNEL_FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&id)
}

impl Table {
    /// Whether another shared entry of `e`'s file overlaps `e`'s umio
    /// pages of the file.
    fn shared_overlapping(&self, e: &Arc<Entry>) -> bool {
        let span = |x: &Entry| {
            let ps = x.mapping.page_size() as u64;
            let start = x.offset / ps * ps;
            start..(x.offset + x.len as u64).next_multiple_of(ps)
        };
        let mine = span(e);
        self.segs.iter().any(|s| {
            let o = &s.entry;
            if Arc::ptr_eq(o, e) || !o.shared || o.file_id != e.file_id {
                return false;
            }
            let theirs = span(o);
            theirs.start < mine.end && mine.start < theirs.end
        })
    }
}

/// A `MAP_SHARED` mapping of a file succeeded in the kernel: if umio has
/// shared mappings of the same file, they go to the kernel too (see
/// [`share_through_kernel`]), and so does every later one.
pub(crate) fn kernel_mapped_shared(fd: c_int) {
    if config().paths.is_empty() {
        // No file mapping is ever umio's.
        return;
    }
    let Some((id, _)) = file_of(fd) else {
        return;
    };
    if kernel_serves(id) {
        return;
    }
    let umio_has_it = lock()
        .segs
        .iter()
        .any(|s| s.entry.shared && s.entry.file_id == id);
    if umio_has_it {
        share_through_kernel(id);
    } else {
        KERNEL_FILES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id);
    }
}

/// Hands every shared umio mapping of file `id` over to the kernel, at the
/// same addresses with the same protections (`Mapping::hand_over`: dirty
/// pages written back first; a thread touching the mapping meanwhile waits
/// and then meets the kernel's mapping), and marks the file the kernel's
/// for the rest of the process. One page cache for the file then holds
/// every mapping's writes: each mapping sees the others' at once, and
/// nothing is lost at write-back, as under the kernel alone.
fn share_through_kernel(id: FileId) {
    {
        let mut k = KERNEL_FILES.lock().unwrap_or_else(|e| e.into_inner());
        if !k.contains(&id) {
            k.push(id);
        }
    }
    let mut t = lock();
    let mut entries: Vec<Arc<Entry>> = Vec::new();
    for s in &t.segs {
        if s.entry.shared
            && s.entry.file_id == id
            && !entries.iter().any(|e| Arc::ptr_eq(e, &s.entry))
        {
            entries.push(s.entry.clone());
        }
    }
    let mut gone = Vec::new();
    for e in entries {
        let segs: Vec<Segment> = t
            .segs
            .iter()
            .filter(|s| Arc::ptr_eq(&s.entry, &e))
            .cloned()
            .collect();
        let prot = libc::PROT_READ | if e.writable { libc::PROT_WRITE } else { 0 };
        let fd = e.file.as_raw_fd();
        let mut parts: Vec<Range<usize>> = Vec::new();
        let mut replace = |addr: usize, len: usize, off: u64| {
            parts.push(addr..addr + len);
            // SAFETY: `addr..addr + len` is umio memory of this mapping,
            // handed over: the kernel's mapping of the same file replaces
            // it at once (MAP_FIXED).
            let p = unsafe {
                sys::mmap(
                    addr as *mut libc::c_void,
                    len,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    off as i64,
                )
            };
            if p == libc::MAP_FAILED {
                Err(sys::errno())
            } else {
                Ok(())
            }
        };
        // SAFETY: the shim makes no slice of its mappings; `replace` maps
        // exactly the range it is given.
        if let Err(err) = unsafe { e.mapping.hand_over(&mut replace) } {
            sys::eprint(&format!(
                "umio-preload: error: giving a file mapped twice to the kernel: {err}
"
            ));
            if e.mapping.mapped_bytes() != 0 {
                // Still umio's, in part at least: left as it is.
                continue;
            }
        }
        let visible: Vec<Range<usize>> = segs
            .iter()
            .filter(|s| s.visible)
            .map(|s| s.range.clone())
            .collect();
        for part in &parts {
            // Memory the application unmapped or never had (the padding
            // past its length in the last umio page, the part of the first
            // before its offset): the kernel's mapping goes there too.
            for gap in uncovered(part, visible.clone()) {
                // SAFETY: part of the range just handed over, unknown to
                // the application.
                unsafe { sys::munmap(gap.start, gap.len()) };
            }
        }
        for s in segs.iter().filter(|s| s.visible && s.prot != prot) {
            // SAFETY: the application's own mapping, at the protection it
            // asked for.
            unsafe { sys::mprotect(s.range.start, s.range.len(), s.prot) };
        }
        t.remove_entry(&e);
        gone.push(e);
    }
    drop(t);
    log::info!("a file mapped shared twice is the kernel's from now on in this process");
    // Dropping an entry handed over unmaps nothing: its region holds no
    // memory any more. With the in-thread fault service the region is kept
    // for the life of the process: its entry in the service's table stays,
    // so that a fault on the old memory that reaches the handler late
    // retries (and meets the kernel's mapping) rather than kill its thread
    // (`umio_core`, `Take::Replace`). The cost: its page table and a
    // descriptor of the file, and a fault at those addresses that the
    // kernel's mapping raises (past the end of the file) retries instead.
    let (keep, drop_now): (Vec<_>, Vec<_>) = gone
        .into_iter()
        .partition(|e| e.mapping.runtime().fault_service() == umio_core::FaultService::InThread);
    HANDED_OVER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(keep);
    drop(drop_now);
}

/// Entries handed over to the kernel under the in-thread fault service,
/// kept (see [`share_through_kernel`]).
static HANDED_OVER: Mutex<Vec<Arc<Entry>>> = Mutex::new(Vec::new());

/// Unmaps the umio part of `range`: whole umio pages are unmapped at once;
/// the edges of umio pages it only partly covers stay as invisible
/// segments. Returns the entries that lost their last visible segment:
/// dropping them (after the lock is released) writes back and unmaps
/// their regions.
fn unmap_locked(t: &mut Table, range: &Range<usize>) -> Vec<Arc<Entry>> {
    let taken = t.take(range);
    let mut entries: Vec<Arc<Entry>> = Vec::new();
    for s in &taken {
        if !entries.iter().any(|e| Arc::ptr_eq(e, &s.entry)) {
            entries.push(s.entry.clone());
        }
    }
    let mut gone = Vec::new();
    for e in entries {
        let mut runs: Vec<(Range<usize>, c_int)> = taken
            .iter()
            .filter(|s| Arc::ptr_eq(&s.entry, &e))
            .map(|s| (s.range.clone(), s.prot))
            .collect();
        runs.sort_by_key(|r| r.0.start);
        // Merge adjacent runs.
        let mut merged: Vec<(Range<usize>, c_int)> = Vec::new();
        for (r, p) in runs {
            match merged.last_mut() {
                Some((last, _)) if last.end == r.start => last.end = r.end,
                _ => merged.push((r, p)),
            }
        }
        let base = e.base();
        let ps = e.mapping.page_size();
        let mlen = e.mapping.len();
        for (r, prot) in merged {
            let (rs, re) = (r.start - base, r.end - base);
            let a = rs.next_multiple_of(ps);
            let b = if re >= mlen { mlen } else { re / ps * ps };
            let cut = if a < b {
                // SAFETY: the shim never makes a Rust slice of a mapping
                // (see `Entry::mapping`); the application unmaps the range.
                match unsafe { e.mapping.unmap_range_shared(a..b) } {
                    Ok(()) => Some((base + a, base + b.next_multiple_of(ps))),
                    Err(err) => {
                        log::warn!("umio-preload: unmapping part of a mapping: {err}");
                        None
                    }
                }
            } else {
                None
            };
            let keep: Vec<Range<usize>> = match cut {
                Some((ca, cb)) => vec![r.start..ca, cb.min(r.end)..r.end],
                None => vec![r.clone()],
            };
            for k in keep {
                if k.start < k.end {
                    t.insert(Segment {
                        range: k,
                        entry: e.clone(),
                        visible: false,
                        prot,
                    });
                }
            }
        }
        if !t.has_visible(&e) {
            t.remove_entry(&e);
            gone.push(e);
        }
    }
    gone
}

/// `munmap`.
pub(crate) fn unmap(addr: usize, len: usize) -> Result<(), Errno> {
    let range = checked_range(addr, len)?;
    let (gone, gaps) = {
        let mut t = lock();
        let gaps = gaps(&range, &t.overlapping(&range));
        (unmap_locked(&mut t, &range), gaps)
    };
    // Write-back and unmap of whole regions happen here, outside the lock.
    drop(gone);
    for g in gaps {
        // SAFETY: the application unmaps memory that is not umio's.
        if unsafe { sys::munmap(g.start, g.len()) } != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    Ok(())
}

/// Before a kernel `MAP_FIXED` mapping replaces `[addr, addr + len)`:
/// umio's part of the range is unmapped (written back first), the rest is
/// left for the kernel's `MAP_FIXED` to replace.
///
/// A umio page is the fill unit of its region and cannot be split. A page
/// cut by the range's edge goes whole if its bytes outside the range are
/// not the application's (the padding past a mapping's last 4 KiB page,
/// or what an earlier partial `munmap` left); if the application still
/// maps bytes of it outside the range, the call fails with `EINVAL` and
/// nothing changes: unmapping them would take memory from under the
/// application (its next access would crash, or silently reach whatever
/// the kernel maps there next), and mapping over part of a umio page
/// would leave a page umio can no longer fill. This happens only with a
/// range not aligned to the older mapping's umio pages, which are larger
/// than 4 KiB only where `UMIO_PAGE_SIZE` asks (the default, 4096, avoids
/// it).
pub(crate) fn release_for_fixed(addr: usize, len: usize) -> Result<(), Errno> {
    let range = checked_range(addr, len)?;
    release_edges_for_fixed(&range)?;
    let (gone, leftover) = {
        let mut t = lock();
        let gone = unmap_locked(&mut t, &range);
        (gone, !t.overlapping(&range).is_empty())
    };
    drop(gone);
    if leftover {
        // A page the edge check let through (a race with another
        // thread's munmap or mmap of the same range).
        return Err(Errno(libc::EINVAL));
    }
    Ok(())
}

/// The first step of a `MAP_FIXED` over umio memory (see
/// [`release_for_fixed`]): checks every umio page the range cuts at its
/// edges, refusing (`EINVAL`, nothing changed) if the application maps
/// bytes of it outside the range, and otherwise unmaps those pages whole
/// (written back first). The pages wholly inside the range are left for
/// the caller.
fn release_edges_for_fixed(range: &Range<usize>) -> Result<(), Errno> {
    let gone = {
        let mut t = lock();
        let mut edges: Vec<(Arc<Entry>, Range<usize>)> = Vec::new();
        for e in t.entries_in(range) {
            let base = e.base();
            let ps = e.mapping.page_size();
            let mlen = e.mapping.len();
            let span = mlen.next_multiple_of(ps);
            let rs = range.start.max(base) - base;
            let re = range.end.min(base + span) - base;
            let mut pages: Vec<usize> = Vec::new();
            if !rs.is_multiple_of(ps) {
                pages.push(rs / ps);
            }
            if !re.is_multiple_of(ps) && !pages.contains(&(re / ps)) {
                pages.push(re / ps);
            }
            for p in pages {
                if !e.mapping.is_mapped_at(p * ps) {
                    continue;
                }
                let page = base + p * ps..base + (p + 1) * ps;
                // The page's bytes outside the range.
                let outside = [page.start..range.start, range.end..page.end];
                let in_use = t.segs.iter().any(|s| {
                    s.visible
                        && Arc::ptr_eq(&s.entry, &e)
                        && outside
                            .iter()
                            .any(|o| s.range.start < o.end && o.start < s.range.end)
                });
                if in_use {
                    log::warn!(
                        "umio-preload: MAP_FIXED at {:#x}..{:#x} would split a {ps}-byte umio \
                         page at {:#x} whose bytes outside the range are mapped; refused \
                         (EINVAL). Map at umio page boundaries, or set UMIO_PAGE_SIZE=4096",
                        range.start,
                        range.end,
                        page.start
                    );
                    return Err(Errno(libc::EINVAL));
                }
                edges.push((e.clone(), page));
            }
        }
        // Everything checked: take the edge pages out.
        let mut touched: Vec<Arc<Entry>> = Vec::new();
        for (e, page) in edges {
            let base = e.base();
            let mlen = e.mapping.len();
            let rel = page.start - base..(page.end - base).min(mlen);
            // SAFETY: as in `unmap_locked`: no Rust slice of the mapping exists;
            // the application's MAP_FIXED replaces the range.
            if let Err(err) = unsafe { e.mapping.unmap_range_shared(rel) } {
                log::warn!("umio-preload: unmapping a umio page for MAP_FIXED: {err}");
            }
            t.take_of(&e, &page);
            if !touched.iter().any(|x| Arc::ptr_eq(x, &e)) {
                touched.push(e);
            }
        }
        let mut gone = Vec::new();
        for e in touched {
            if !t.has_visible(&e) {
                t.remove_entry(&e);
                gone.push(e);
            }
        }
        gone
    };
    drop(gone);
    Ok(())
}

/// After umio mapped at a fixed address over `range`: takes the segments
/// of umio pages that are no longer mapped (replaced) out of the table.
/// Returns the entries left with no visible segment, to drop once the
/// table's lock is released.
fn forget_replaced(range: &Range<usize>) -> Vec<Arc<Entry>> {
    let mut t = lock();
    let mut gone = Vec::new();
    for e in t.entries_in(range) {
        let base = e.base();
        let ps = e.mapping.page_size();
        let span = e.mapping.len().next_multiple_of(ps);
        let rs = range.start.max(base) - base;
        let re = range.end.min(base + span) - base;
        for p in rs / ps..re.div_ceil(ps) {
            if !e.mapping.is_mapped_at(p * ps) {
                t.take_of(&e, &(base + p * ps..base + (p + 1) * ps));
            }
        }
        if !t.has_visible(&e) {
            t.remove_entry(&e);
            gone.push(e);
        }
    }
    gone
}

/// Byte range of segment `s` relative to its mapping, clamped to it.
fn relative(s: &Segment) -> Range<usize> {
    let base = s.entry.base();
    let mlen = s.entry.mapping.len();
    (s.range.start - base).min(mlen)..(s.range.end - base).min(mlen)
}

/// `msync`: `MS_SYNC` and `MS_ASYNC` both write a shared mapping's dirty
/// pages back and sync the file before returning; a private mapping has
/// nothing to write.
pub(crate) fn sync(addr: usize, len: usize, flags: c_int) -> Result<(), Errno> {
    let known = libc::MS_SYNC | libc::MS_ASYNC | libc::MS_INVALIDATE;
    if flags & !known != 0 || flags & libc::MS_SYNC != 0 && flags & libc::MS_ASYNC != 0 {
        return Err(Errno(libc::EINVAL));
    }
    let range = checked_range(addr, len)?;
    let segs = lock().overlapping(&range);
    let mut result = Ok(());
    for s in &segs {
        if !s.visible {
            result = Err(Errno(libc::ENOMEM));
        } else if s.entry.shared {
            let r = relative(s);
            if !r.is_empty() {
                s.entry.mapping.flush_range(r)?;
            }
        }
    }
    for g in gaps(&range, &segs) {
        if sys::msync(g.start, g.len(), flags) != 0 {
            result = Err(Errno(sys::errno()));
        }
    }
    result
}

/// `madvise` (and `posix_madvise`, which passes `dontneed_is_noop`).
pub(crate) fn advise(
    addr: usize,
    len: usize,
    advice: c_int,
    dontneed_is_noop: bool,
) -> Result<(), Errno> {
    let range = checked_range(addr, len)?;
    let segs = lock().overlapping(&range);
    // Refuse before changing anything.
    for s in &segs {
        if !s.visible {
            return Err(Errno(libc::ENOMEM));
        }
    }
    match advice {
        // As the kernel: only shared mappings of a file open for writing
        // can free file space; MADV_FREE is for private anonymous memory.
        libc::MADV_REMOVE if segs.iter().any(|s| !s.entry.shared || !s.entry.writable) => {
            return Err(Errno(libc::EACCES));
        }
        libc::MADV_FREE => return Err(Errno(libc::EINVAL)),
        _ => {}
    }
    for s in &segs {
        let r = relative(s);
        if r.is_empty() {
            continue;
        }
        let m = &s.entry.mapping;
        match advice {
            libc::MADV_NORMAL => m.advise(r, Advice::Normal)?,
            libc::MADV_SEQUENTIAL => m.advise(r, Advice::Sequential)?,
            libc::MADV_RANDOM => m.advise(r, Advice::Random)?,
            // MADV_POPULATE_READ / _WRITE (22, 23) fetch as WILLNEED does.
            libc::MADV_WILLNEED | 22 | 23 => m.prefetch(r)?,
            libc::MADV_DONTNEED if dontneed_is_noop => {}
            libc::MADV_DONTNEED => discard(&s.entry, r)?,
            // SAFETY: the shim makes no slice of its mappings; the
            // application sees the bytes change, as under the kernel's
            // madvise.
            libc::MADV_REMOVE => unsafe { m.advise_shared(r, UncheckedAdvice::Remove) }?,
            libc::MADV_COLD | libc::MADV_PAGEOUT => {
                // SAFETY: as above.
                unsafe { m.advise_shared(r, UncheckedAdvice::PageOut) }?
            }
            libc::MADV_HUGEPAGE
            | libc::MADV_NOHUGEPAGE
            | libc::MADV_MERGEABLE
            | libc::MADV_UNMERGEABLE
            | libc::MADV_DONTFORK
            | libc::MADV_DOFORK
            | libc::MADV_DONTDUMP
            | libc::MADV_DODUMP
            | libc::MADV_WIPEONFORK
            | libc::MADV_KEEPONFORK
            | libc::MADV_COLLAPSE => {}
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    for g in gaps(&range, &segs) {
        let r = if dontneed_is_noop && advice == libc::MADV_DONTNEED {
            0
        } else {
            // SAFETY: the application's advice on memory that is not umio's.
            unsafe { sys::madvise(g.start, g.len(), advice) }
        };
        if r != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    Ok(())
}

/// `MADV_DONTNEED` on a umio mapping. Shared: the pages' changes are kept
/// (written back first, as the kernel keeps them in the page cache), then
/// the pages are dropped. Private: the whole umio pages within the range
/// lose their changes and read the file again.
fn discard(e: &Entry, r: Range<usize>) -> Result<(), Errno> {
    let ps = e.mapping.page_size();
    let mlen = e.mapping.len();
    if e.shared {
        e.mapping.flush_range(r.clone())?;
        let a = r.start / ps * ps;
        let b = r.end.next_multiple_of(ps).min(mlen);
        // SAFETY: the shim makes no slice of its mappings.
        unsafe { e.mapping.advise_shared(a..b, UncheckedAdvice::DontNeed) }?;
    } else {
        let a = r.start.next_multiple_of(ps);
        let b = if r.end >= mlen { mlen } else { r.end / ps * ps };
        if a < b {
            // SAFETY: the shim makes no slice of its mappings.
            unsafe { e.mapping.advise_shared(a..b, UncheckedAdvice::DontNeed) }?;
            if let Some(c) = &e.cow {
                c.forget(a as u64, b as u64);
            }
        }
    }
    Ok(())
}

/// `mprotect`. On umio mappings: any mix of `PROT_READ`, `PROT_WRITE`
/// and `PROT_EXEC` that includes reading; `PROT_WRITE` needs a mapping
/// that can take writes (private, or shared over a descriptor open for
/// writing). `PROT_NONE` is refused with `EACCES`: umio's own threads
/// read the pages to write them back.
pub(crate) fn protect(addr: usize, len: usize, prot: c_int) -> Result<(), Errno> {
    let range = checked_range(addr, len)?;
    let all = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
    let mut t = lock();
    let segs = t.overlapping(&range);
    for s in &segs {
        if !s.visible {
            return Err(Errno(libc::ENOMEM));
        }
        if prot & !all != 0 {
            return Err(Errno(libc::EINVAL));
        }
        if prot & libc::PROT_READ == 0 || (prot & libc::PROT_WRITE != 0 && !s.entry.writable) {
            return Err(Errno(libc::EACCES));
        }
    }
    // A range that reaches the end of a mapping takes the padding of its
    // last umio page along (an invisible segment), so that the page stays
    // one VMA. (Part of a umio page elsewhere splits it, as the
    // application asked; umio then fills it in pieces.)
    let mut umio_range = range.clone();
    for s in &segs {
        let end = s.entry.base() + s.entry.len;
        if s.range.end == end
            && let Some(pad) = t
                .segs
                .iter()
                .find(|p| !p.visible && p.range.start == end && Arc::ptr_eq(&p.entry, &s.entry))
        {
            umio_range.end = umio_range.end.max(pad.range.end);
        }
    }
    let segs = t.overlapping(&umio_range);
    for s in &segs {
        // SAFETY: the range is a visible part of a umio region, or the
        // padding after one, whose region is writable whenever PROT_WRITE
        // is asked.
        if unsafe { sys::mprotect(s.range.start, s.range.len(), prot) } != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    if !segs.is_empty() {
        for mut s in t.take(&umio_range) {
            s.prot = prot;
            t.insert(s);
        }
    }
    drop(t);
    for g in gaps(&range, &segs) {
        // SAFETY: the application's own memory, not umio's.
        if unsafe { sys::mprotect(g.start, g.len(), prot) } != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    Ok(())
}

/// `mremap` of a umio mapping: `Ok(None)` if `old` is not umio's. A whole
/// mapping can shrink in place, or grow by moving (`MREMAP_MAYMOVE`) to a
/// new umio mapping of the same file; growing in place fails with
/// `ENOMEM`; part of a mapping, `MREMAP_FIXED` and `MREMAP_DONTUNMAP`
/// fail with `EINVAL`.
pub(crate) fn remap(
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: usize,
) -> Result<Option<usize>, Errno> {
    let range = checked_range(old, old_len.max(1))?;
    let segs = lock().overlapping(&range);
    if segs.is_empty() {
        if flags & libc::MREMAP_FIXED != 0 {
            // The target is replaced: umio's part of it must go first.
            let target = checked_range(new_addr, new_len)?;
            let gone = unmap_locked(&mut lock(), &target);
            drop(gone);
        }
        return Ok(None);
    }
    let e = segs[0].entry.clone();
    let whole = old_len != 0
        && old == e.base()
        && old_len.next_multiple_of(PAGE) == e.len
        && segs.len() == 1
        && segs[0].visible
        && segs[0].range == (old..old + e.len);
    if !whole || flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0 || new_len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let new_r = new_len.next_multiple_of(PAGE);
    if new_r <= e.len {
        if new_r < e.len {
            unmap(old + new_r, e.len - new_r)?;
        }
        return Ok(Some(old));
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        return Err(Errno(libc::ENOMEM));
    }
    let rt = runtime()?;
    let (store, cow): (Arc<dyn Store>, _) = match &e.cow {
        Some(old_cow) => {
            let c = Arc::new(copy_on_write(
                &e.file,
                e.offset,
                new_r as u64,
                config().scratch_dir.as_deref(),
                rt.page_cache(),
            )?);
            // The old mapping's changes move with it: written back to its
            // scratch file first, then copied to the new one.
            e.mapping.flush()?;
            c.copy_written(old_cow)?;
            (c.clone(), Some(c))
        }
        None => {
            e.mapping.flush()?;
            (e.store.clone(), None)
        }
    };
    // SAFETY: the application reaches the mapping through pointers only;
    // the shim makes no slice of it.
    let mapping = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .offset(e.offset)
                .len(new_len)
                .writable(e.writable)
                .fault_service(e.mapping.fault_service()),
        )
    }?;
    let base = mapping.as_ptr() as usize;
    let span = new_len.next_multiple_of(mapping.page_size());
    let prot = segs[0].prot;
    if e.writable && prot & libc::PROT_WRITE == 0 {
        // Whole umio pages, as in `map`.
        // SAFETY: our fresh region.
        if unsafe { sys::mprotect(base, span, prot) } != 0 {
            return Err(Errno(sys::errno()));
        }
    }
    let file = e.file.try_clone()?;
    let entry = Arc::new(Entry {
        mapping,
        file,
        offset: e.offset,
        len: new_r,
        shared: e.shared,
        writable: e.writable,
        store,
        cow,
        file_id: e.file_id,
    });
    {
        let mut t = lock();
        t.insert(Segment {
            range: base..base + new_r,
            entry: entry.clone(),
            visible: true,
            prot,
        });
        t.insert(Segment {
            range: base + new_r..base + span,
            entry,
            visible: false,
            prot,
        });
    }
    unmap(old, e.len)?;
    Ok(Some(base))
}

/// Writes back every shared mapping (at exit, and before `fork`).
pub(crate) fn flush_all(t: &Table, private_too: bool) -> bool {
    let mut all = true;
    let mut done: Vec<*const Entry> = Vec::new();
    for s in &t.segs {
        let p = Arc::as_ptr(&s.entry);
        if done.contains(&p) || !(s.entry.shared || private_too) {
            continue;
        }
        done.push(p);
        if let Err(e) = s.entry.mapping.flush() {
            sys::eprint(&format!("umio-preload: write-back failed: {e}\n"));
            all = false;
        }
    }
    all
}

/// In a fork child: the parent's umio regions are not inherited (their
/// memory is `MADV_DONTFORK`), so each visible segment is mapped again by
/// the kernel, from the same file at the same address with the same
/// protection: shared mappings as `MAP_SHARED` (the parent wrote its
/// changes back before forking), private ones as `MAP_PRIVATE` with the
/// pages the parent had written copied in from its scratch file. The
/// parent's runtime is forgotten, never dropped.
pub(crate) fn adopt_in_child(segs: Vec<Segment>) {
    for s in segs.iter().filter(|s| s.visible) {
        let e = &s.entry;
        let rel = s.range.start - e.base();
        let kind = if e.shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        let prot = if e.shared {
            s.prot
        } else {
            s.prot | libc::PROT_WRITE
        };
        // SAFETY: the range was the parent's umio memory, absent here.
        let p = unsafe {
            sys::mmap(
                s.range.start as *mut libc::c_void,
                s.range.len(),
                prot,
                kind | libc::MAP_FIXED,
                e.file.as_raw_fd(),
                (e.offset + rel as u64) as i64,
            )
        };
        if p == libc::MAP_FAILED {
            sys::eprint("umio-preload: fork child: cannot map a parent's mapping again\n");
            continue;
        }
        if let Some(c) = &e.cow {
            for page in c.written_pages() {
                let at = page as usize * PAGE;
                if at < rel || at >= rel + s.range.len() {
                    continue;
                }
                let dst = s.range.start + (at - rel);
                // SAFETY: dst is a page of the private mapping just made,
                // writable; pread fills it from the scratch file.
                unsafe {
                    libc::pread(
                        c.scratch().as_raw_fd(),
                        dst as *mut libc::c_void,
                        PAGE,
                        at as i64,
                    )
                };
            }
            if prot != s.prot {
                // SAFETY: our mapping, back to the protection it had.
                unsafe { sys::mprotect(s.range.start, s.range.len(), s.prot) };
            }
        }
    }
    // The entries hold the parent's runtime: never dropped here.
    std::mem::forget(segs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_what_segments_leave() {
        let covered = vec![0x6000..0xa000, 0x2000..0x3000, 0x3000..0x4000];
        assert_eq!(
            uncovered(&(0x1000..0x9000), covered),
            vec![0x1000..0x2000, 0x4000..0x6000]
        );
        assert_eq!(uncovered(&(0x1000..0x2000), vec![]), vec![0x1000..0x2000]);
        assert_eq!(checked_range(0x1000, 1).unwrap(), 0x1000..0x2000);
        assert_eq!(checked_range(0x1001, 1), Err(Errno(libc::EINVAL)));
        assert_eq!(checked_range(0x1000, 0), Err(Errno(libc::EINVAL)));
    }
}
