//! `Mapping`: the RAII handle of a mapped region.

use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use umio_backends::Store;
use umio_cache::{Observed, PageState};

use crate::error::{Error, Result};
use crate::huge::{PromoteKind, Promoter};
use crate::kernel::FaultService;
use crate::prefetch::{Advice, FetchList, PrefetchKind, Prefetcher, UncheckedAdvice};
use crate::region::Region;
use crate::runtime::Runtime;
use crate::shared::PrefetchJob;
use crate::stats::RegionStats;

/// A fixed address, and whether mapping there replaces what is there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fixed {
    pub addr: usize,
    pub replace: bool,
}

/// How to map a store; see [`Runtime::map_file`] and [`Runtime::map`].
#[derive(Clone, Default)]
pub struct MapOptions {
    pub(crate) offset: u64,
    pub(crate) len: Option<usize>,
    pub(crate) writable: bool,
    pub(crate) page_size: Option<usize>,
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) prefetch: Option<PrefetchKind>,
    pub(crate) prefetcher: Option<Arc<dyn Prefetcher>>,
    pub(crate) fixed_address: Option<Fixed>,
    /// `Some(fallback)`: hugetlbfs pages.
    pub(crate) hugetlb: Option<bool>,
    pub(crate) promote: Option<PromoteKind>,
    pub(crate) promoter: Option<Arc<dyn Promoter>>,
    /// `Some(on)`: [`MapOptions::page_cache`].
    pub(crate) page_cache: Option<bool>,
    /// [`MapOptions::copy_on_write`].
    pub(crate) copy_on_write: bool,
    /// [`MapOptions::fault_service`]; `None`: the runtime's.
    pub(crate) fault_service: Option<FaultService>,
    /// [`MapOptions::user_access_only`].
    pub(crate) user_access_only: bool,
    /// [`MapOptions::survive_process_death`].
    pub(crate) survive_death: bool,
    /// [`MapOptions::survive_process_death_file`]; `None` with
    /// `survive_death`: [`Runtime::map_file`]'s file.
    pub(crate) keep_file: Option<Arc<std::fs::File>>,
}

impl std::fmt::Debug for MapOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapOptions")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .field("page_size", &self.page_size)
            .field("store", &self.store.as_ref().map(|s| s.name().to_owned()))
            .field("prefetch", &self.prefetch)
            .field("custom_prefetcher", &self.prefetcher.is_some())
            .field("fixed_address", &self.fixed_address)
            .field("hugetlb", &self.hugetlb)
            .field("promote", &self.promote)
            .field("custom_promoter", &self.promoter.is_some())
            .field("page_cache", &self.page_cache)
            .field("copy_on_write", &self.copy_on_write)
            .field("fault_service", &self.fault_service)
            .field("user_access_only", &self.user_access_only)
            .field("survive_death", &self.survive_death)
            .finish()
    }
}

impl MapOptions {
    /// Read-only, from offset 0 to the end of the store, with the runtime's
    /// page size and prefetch policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Store offset of the first mapped byte. Any offset: as memmap2 does,
    /// umio maps from the offset rounded down to a multiple of 4096 and
    /// presents the mapping from `offset` on ([`Mapping::as_ptr`] is then
    /// not page-aligned, by `offset % 4096`; every byte offset a
    /// [`Mapping`] takes counts from `offset`). The C API and the
    /// `LD_PRELOAD` shim keep `mmap`'s rule (a multiple of 4096, else
    /// `EINVAL`), as does [`fixed_address`](MapOptions::fixed_address).
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// Bytes to map (any size > 0). Default: from the offset to the end of
    /// the store.
    pub fn len(mut self, len: usize) -> Self {
        self.len = Some(len);
        self
    }

    /// Whether the mapping may be written. A writable mapping reaching past
    /// the end of the store extends the store at map time; a read-only one
    /// reads zeros there.
    pub fn writable(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }

    /// Fill unit of this region: a multiple of 4 KiB up to 1 GiB, at most a
    /// quarter of the cache.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = Some(bytes);
        self
    }

    /// For [`Runtime::map_file`]: whether the file is read and written
    /// through the kernel's page cache too (buffered `pread`/`pwrite`).
    /// Default: the runtime's ([`Builder::page_cache`](crate::Builder::page_cache),
    /// off unless `UMIO_PAGE_CACHE=1`): umio's cache is then the only copy
    /// of the pages it reads (`O_DIRECT` where the file system supports
    /// it, else the pages read and written are dropped from the kernel's
    /// cache with `POSIX_FADV_DONTNEED`). Durability is the same either
    /// way: writes are durable after a flush. Ignored by [`Runtime::map`].
    pub fn page_cache(mut self, on: bool) -> Self {
        self.page_cache = Some(on);
        self
    }

    /// A private, copy-on-write mapping, as `MAP_PRIVATE` (memmap2's
    /// `map_copy`): writable, its writes never reach the store. Written
    /// pages go to a nameless scratch file ([`umio_backends::CopyOnWrite`])
    /// and are read from there ever after, also once evicted; flush writes
    /// them there. The store may be read-only. See [`Runtime::map_copy`].
    pub fn copy_on_write(mut self, on: bool) -> Self {
        self.copy_on_write = on;
        if on {
            self.writable = true;
        }
        self
    }

    /// For a writable (not copy-on-write) [`Runtime::map_file`] mapping:
    /// its writes reach the file even if the process is killed (`SIGKILL`,
    /// a crash) before they were written back, as a kernel `MAP_SHARED`
    /// mapping's do (its page cache outlives the process). The first such
    /// mapping starts a keeper process that shares the address space and,
    /// once the process is gone, writes every page of these mappings still
    /// in memory whose bytes differ from the file's (see
    /// [`keeper`](crate::keeper)). Default off; the `LD_PRELOAD` shim turns
    /// it on for its shared mappings. If the keeper cannot be started the
    /// mapping is made without it (logged).
    pub fn survive_process_death(mut self, on: bool) -> Self {
        self.survive_death = on;
        self
    }

    /// As [`survive_process_death`](MapOptions::survive_process_death), for
    /// [`Runtime::map`]: the store's bytes are `file`'s at the same
    /// offsets (the keeper writes `file`).
    pub fn survive_process_death_file(mut self, file: Arc<std::fs::File>) -> Self {
        self.survive_death = true;
        self.keep_file = Some(file);
        self
    }

    /// The options with the offset rounded down to 4096 and the length
    /// grown by as much, and the bytes rounded off (see
    /// [`offset`](MapOptions::offset)).
    pub(crate) fn split_offset(&self) -> Result<(MapOptions, usize)> {
        let skew = (self.offset % crate::MIN_PAGE_SIZE as u64) as usize;
        let mut aligned = self.clone();
        if skew == 0 {
            return Ok((aligned, 0));
        }
        if self.fixed_address.is_some() {
            return Err(Error::InvalidArgument(
                "a fixed address needs an offset that is a multiple of 4096",
            ));
        }
        aligned.offset -= skew as u64;
        if let Some(len) = self.len {
            if len == 0 {
                return Err(Error::InvalidArgument("length must be greater than zero"));
            }
            aligned.len = Some(
                len.checked_add(skew)
                    .ok_or(Error::InvalidArgument("length too large"))?,
            );
        }
        Ok((aligned, skew))
    }

    /// The store to map, for [`Runtime::map`].
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Built-in prefetch policy of this region.
    pub fn prefetch(mut self, kind: PrefetchKind) -> Self {
        self.prefetch = Some(kind);
        self.prefetcher = None;
        self
    }

    /// Maps the region exactly at `addr` (a multiple of 4096), replacing
    /// whatever the process has mapped there, as `MAP_FIXED` does. The
    /// range replaced is `[addr, addr + len)` with `len` rounded up to the
    /// region's page size (the memory the region reserves).
    ///
    /// Other umio regions in the range are replaced too, as `mmap`
    /// replaces a mapping: first their dirty pages there are written back
    /// and synced (if that fails, the error is returned and nothing is
    /// replaced), then those pages are taken out of their regions, as by
    /// [`Mapping::unmap_range`], and the new region takes their place with
    /// no moment in between where the kernel could put another mapping
    /// there. The older [`Mapping`]s stay valid for the rest of their
    /// regions (they now have a hole, as after `unmap_range`); one whose
    /// every page was replaced has nothing left mapped
    /// ([`Mapping::mapped_bytes`] is 0).
    ///
    /// A region's page is its fill unit and cannot be split, so the range
    /// must not cut through a page of an older region that holds bytes of
    /// that mapping outside the range: such a call fails with
    /// [`Error::InvalidArgument`] (`EINVAL`) and changes nothing.
    /// Unmapping the whole page instead would take bytes from under the
    /// older mapping that its user did not ask to give up, and would turn
    /// its next access to them into a crash, or into a silent access to
    /// whatever the kernel maps there next. Cutting through the part of
    /// an older region's last page past its length (rounded up to 4 KiB)
    /// is allowed: that part maps no bytes of it, and goes with the page.
    ///
    /// Keep other threads off the replaced range while the call runs: as
    /// with `mmap`, they race with the replacement, and here an access
    /// during the call may see zeros, and a write may be lost.
    ///
    /// Whatever memory was mapped in the range is discarded, so the caller
    /// must own it and hold no references into it; this is why the method
    /// is `unsafe`. See
    /// [`fixed_address_noreplace`](MapOptions::fixed_address_noreplace) to
    /// be refused instead.
    ///
    /// # Safety
    /// Nothing in the process may use memory of the range as anything
    /// else once the mapping is made, and nothing may borrow bytes of an
    /// older umio region in the range (a slice from
    /// [`Mapping::as_slice`]).
    pub unsafe fn fixed_address(mut self, addr: usize) -> Self {
        self.fixed_address = Some(Fixed {
            addr,
            replace: true,
        });
        self
    }

    /// Maps the region exactly at `addr` (a multiple of 4096), as
    /// `MAP_FIXED_NOREPLACE` does: if anything is mapped in the range
    /// (`[addr, addr + len)` with `len` rounded up to the page size),
    /// a umio region or any other mapping of the process, mapping fails
    /// with [`Error::Overlap`] (`EEXIST`) and nothing changes. Safe, since
    /// it replaces nothing.
    pub fn fixed_address_noreplace(mut self, addr: usize) -> Self {
        self.fixed_address = Some(Fixed {
            addr,
            replace: false,
        });
        self
    }

    /// A prefetch policy of the application's own for this region.
    pub fn prefetcher(mut self, prefetcher: Arc<dyn Prefetcher>) -> Self {
        self.prefetcher = Some(prefetcher);
        self
    }

    /// Backs the region with real 2 MiB pages from the hugetlbfs pool
    /// (`MAP_HUGETLB`; available once `vm.nr_hugepages` is raised): its
    /// page size is 2 MiB, one fault fills a whole huge page with one
    /// `UFFDIO_COPY`, and the TLB maps it with one entry. With no free huge
    /// page in the pool, mapping fails with [`Error::HugePagesUnavailable`],
    /// or, with `fallback`, maps ordinary memory with 2 MiB fill units.
    /// The pool must hold the region's share of the cache: a fill that
    /// finds it empty raises SIGBUS, as a hugetlbfs mapping does.
    ///
    /// [`Error::HugePagesUnavailable`]: crate::Error::HugePagesUnavailable
    pub fn hugetlb(mut self, fallback: bool) -> Self {
        self.hugetlb = Some(fallback);
        self
    }

    /// Huge-page promotion policy of the region (page size dividing 2 MiB):
    /// faults are served at the region's page size and return at once; the
    /// policy decides, per fault, whether to promote the aligned 2 MiB range
    /// around it in the background: fill its missing pages in one batch,
    /// then collapse them into a transparent huge page. Default: the
    /// runtime's ([`Builder::promote`](crate::Builder::promote)).
    pub fn promote(mut self, kind: PromoteKind) -> Self {
        self.promote = Some(kind);
        self.promoter = None;
        self
    }

    /// A promotion policy of the caller's own (see [`Promoter`]).
    pub fn promoter(mut self, promoter: Arc<dyn Promoter>) -> Self {
        self.promoter = Some(promoter);
        self.promote = None;
        self
    }

    /// How this region's faults are served, whatever the runtime's default
    /// ([`Builder::fault_service`](crate::Builder::fault_service),
    /// `UMIO_FAULT_SERVICE`): [`FaultService::Fillers`],
    /// [`FaultService::InThread`] (mapping fails with
    /// [`Error::Unsupported`] on a kernel without `UFFD_FEATURE_SIGBUS`),
    /// or [`FaultService::Auto`]. Unset, the runtime's setting applies.
    /// [`Mapping::fault_service`] says what the region got.
    pub fn fault_service(mut self, service: FaultService) -> Self {
        self.fault_service = Some(service);
        self
    }

    /// Declares the region private to user code: the kernel never reads or
    /// writes it on the program's behalf (no `read(2)`/`write(2)`, io_uring,
    /// AIO or `O_DIRECT` I/O into or out of it, except through
    /// [`Mapping::read_into`]/[`Mapping::write_from`]). Then
    /// [`FaultService::Auto`] (the default) serves it in-thread, which
    /// costs less per miss; without the declaration `Auto` picks the fillers
    /// wherever they also serve the kernel's accesses (full-mode
    /// userfaultfd). A declared region given to a system call directly may
    /// fail it with `EFAULT`.
    pub fn user_access_only(mut self, on: bool) -> Self {
        self.user_access_only = on;
        self
    }
}

/// A mapped region of a store: memory whose faults umio serves.
///
/// Dropping it writes back dirty pages and unmaps it; errors are logged.
/// Call [`unmap`](Mapping::unmap) to get them.
///
/// A `Mapping` reads as a byte slice, as memmap2's `Mmap` does: it
/// implements `Deref<Target = [u8]>` and `AsRef<[u8]>`, so functions taking
/// `&[u8]` take `&map` directly. A writable mapping becomes a `&mut [u8]`
/// as a [`MappingMut`] (memmap2's `MmapMut`), from
/// [`into_mut`](Mapping::into_mut) or [`Runtime::map_file_mut`].
///
/// # Aliasing
/// A slice of the mapping ([`as_slice`](Mapping::as_slice), `&*map`, a
/// [`MappingMut`]'s `&mut *map`) is a Rust reference: the bytes under it
/// must stay mapped and must not change while it lives. umio keeps this
/// rule as memmap2 does:
/// - Operations that unmap memory take the mapping by `&mut self`
///   ([`unmap_range`](Mapping::unmap_range)) or by value
///   ([`unmap`](Mapping::unmap), drop).
/// - Operations that change the bytes a slice reads take `&mut self`:
///   [`write_at`](Mapping::write_at),
///   [`invalidate_range`](Mapping::invalidate_range) and
///   [`advise_mut`](Mapping::advise_mut) (the [`UncheckedAdvice`]s, which
///   drop pages). Advice that keeps the bytes
///   ([`advise`](Mapping::advise)), prefetch, pin, populate and flush take
///   `&self`.
/// - Eviction drops pages as well, and the next access reads them from
///   the store again; dirty pages are written back first, so the bytes
///   read again are those the mapping held, as long as nothing else
///   changed the store meanwhile. That is the constructors' contract:
///   [`Runtime::map_file`], [`Runtime::map`] and [`Runtime::map_copy`] are
///   `unsafe`, as memmap2's `Mmap::map` is, because a store that something
///   else changes (another process, a `write(2)` to the file, another
///   mapping of the same file, in this process too) would change the
///   bytes under a live slice.
///
/// So the borrow checker rejects a slice held across a call that changes
/// its bytes:
///
/// ```compile_fail,E0502
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::File::open("data.bin").unwrap();
/// // SAFETY: nothing else writes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
/// let bytes: &[u8] = map.as_slice();
/// map.write_at(0, &[2])?; // `map` is borrowed by `bytes`
/// println!("{}", bytes[0]);
/// # Ok(()) }
/// ```
///
/// and one held across an unmap:
///
/// ```compile_fail,E0502
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::File::open("data.bin").unwrap();
/// // SAFETY: nothing else writes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
/// let bytes: &[u8] = map.as_slice();
/// map.unmap_range(0..map.page_size())?; // `map` is borrowed by `bytes`
/// println!("{}", bytes[0]);
/// # Ok(()) }
/// ```
///
/// while a slice that ends before the call is fine:
///
/// ```no_run
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin").unwrap();
/// // SAFETY: nothing else writes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
/// let first = map[0];
/// map.write_at(0, &[first.wrapping_add(1)])?;
/// assert_eq!(map[0], first.wrapping_add(1));
/// map.unmap_range(0..map.page_size())?;
/// # Ok(()) }
/// ```
///
/// Handles shared between threads (`Arc<Mapping>`) that never borrow the
/// bytes as slices and reach them through raw pointers only
/// ([`as_ptr`](Mapping::as_ptr)), as the C API and the `LD_PRELOAD` shim
/// do, make these calls through a shared reference with the `unsafe`
/// variants [`unmap_range_shared`](Mapping::unmap_range_shared),
/// [`write_at_shared`](Mapping::write_at_shared),
/// [`invalidate_range_shared`](Mapping::invalidate_range_shared) and
/// [`advise_shared`](Mapping::advise_shared), whose callers promise that
/// no slice of the mapping is alive. For them a umio mapping behaves as a
/// kernel `MAP_SHARED` mapping does: the bytes behind a pointer may change
/// at any time, and a pointer is valid until its range is unmapped.
///
/// # Coherence
/// A kernel `mmap` of a file is coherent with `read(2)` and `write(2)`
/// because both go through the kernel's page cache. A umio mapping caches
/// pages in umio, so the program that writes or reads a file it also maps
/// by other means says so:
/// - To write the file: [`write_at`](Mapping::write_at), which writes the
///   mapping's dirty pages in the range back first, writes the store, and
///   drops the mapping's pages there so that it shows the new bytes. Or,
///   around a write of your own (`pwrite` on the file, made while no
///   slice of the mapping lives: see the constructors' contract):
///   [`write_back_range`](Mapping::write_back_range) before it and
///   [`invalidate_range`](Mapping::invalidate_range) after it.
/// - To read the file with `read(2)` and see what was written through the
///   mapping: [`write_back_range`](Mapping::write_back_range) first.
/// - Another mapping of the same file (in this process or another) does
///   not see a write until it reads the page again: after eviction, after
///   [`invalidate_range`](Mapping::invalidate_range), or after
///   [`UncheckedAdvice::DontNeed`]. Two writable mappings of one range: the
///   last write-back wins. Since a page may be read again at any time
///   (eviction), a slice of one of them must not live while the other
///   writes back (see [aliasing](Mapping#aliasing)).
///
/// Programs run through the `LD_PRELOAD` shim get this for free: it
/// interposes the `write` and `read` families of system calls and keeps
/// every umio mapping of a file coherent with them (see the README).
///
/// # Fork
/// A region is not inherited by a child process (`MADV_DONTFORK`): in the
/// child the address range is unmapped.
pub struct Mapping {
    rt: Runtime,
    region: Arc<Region>,
    /// Bytes of the region before the mapping's first byte: the offset's
    /// remainder modulo 4096 (see [`MapOptions::offset`]).
    skew: usize,
    /// False once the whole region is unmapped (by `unmap`, or by
    /// `unmap_range` calls that covered it all).
    live: AtomicBool,
}

// SAFETY: the region's memory is shared by design (like a `Vec<u8>` behind
// `&`/`&mut` borrows); all bookkeeping in `Region` is atomic or locked.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` gives only shared reads of the bytes, and
// the `&self` methods that unmap memory or change the bytes
// (`unmap_range_shared`, `write_at_shared`, `invalidate_range_shared`,
// `advise_shared`) are `unsafe`, their callers promising that no slice of
// the mapping lives.
unsafe impl Sync for Mapping {}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("addr", &(self.region.base as *const u8))
            .field("len", &self.region.len)
            .field("page_size", &self.region.page_size)
            .field("writable", &self.region.writable)
            .field("store", &self.region.store.name())
            .finish()
    }
}

impl Mapping {
    pub(crate) fn new(rt: Runtime, region: Arc<Region>) -> Mapping {
        Mapping {
            rt,
            region,
            skew: 0,
            live: AtomicBool::new(true),
        }
    }

    /// The mapping starting `skew` bytes into its region.
    pub(crate) fn with_skew(mut self, skew: usize) -> Mapping {
        self.skew = skew;
        self
    }

    /// A byte range of the mapping as a range of its region.
    fn inner(&self, r: Range<usize>) -> Range<usize> {
        r.start.saturating_add(self.skew)..r.end.saturating_add(self.skew)
    }

    /// As [`inner`](Mapping::inner), but a range from the mapping's first
    /// byte starts at the region's (for operations on whole pages).
    fn inner_from_page(&self, r: Range<usize>) -> Range<usize> {
        let start = if r.start == 0 {
            0
        } else {
            r.start.saturating_add(self.skew)
        };
        start..r.end.saturating_add(self.skew)
    }

    /// First byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        (self.region.base + self.skew) as *mut u8
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.region.len - self.skew
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// This region's fill unit.
    pub fn page_size(&self) -> usize {
        self.region.page_size
    }

    /// The name of the store behind the mapping ([`Store::name`]), e.g.
    /// `"file (O_DIRECT, io_uring)"` for a file mapped with defaults.
    pub fn store_name(&self) -> &str {
        self.region.store.name()
    }

    /// Whether the mapping may be written.
    pub fn is_writable(&self) -> bool {
        self.region.writable
    }

    /// Store offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.region.offset + self.skew as u64
    }

    /// The mapped bytes (also `&*map`, through [`Deref`]).
    ///
    /// # Panics
    /// If part of the mapping was unmapped with
    /// [`unmap_range`](Mapping::unmap_range), or all of it: the slice would
    /// cover unmapped memory.
    pub fn as_slice(&self) -> &[u8] {
        self.assert_whole();
        // SAFETY: [base, base+len) is mapped readable (checked just above),
        // and stays so, with the same bytes, while the slice borrows
        // `self`: every safe operation that unmaps or drops pages under it
        // takes `&mut self` or `self`, the `&self` ones (`*_shared`) are
        // unsafe, forbidden while a slice lives, and eviction reads back
        // the bytes it wrote back, as the unsafe constructor's caller
        // promised that nothing else changes the store meanwhile. umio
        // fills pages atomically (UFFDIO_COPY) before a reader proceeds,
        // and `&self` excludes `&mut` access through this handle.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast_const(), self.len()) }
    }

    /// The mapped bytes, writable, for a [`MappingMut`].
    fn slice_mut(&mut self) -> &mut [u8] {
        assert!(
            self.is_whole() && self.region.writable,
            "a MappingMut whose mapping was partly unmapped (an unsafe contract was broken)"
        );
        // SAFETY: as in as_slice, and `&mut self` makes the slice exclusive:
        // the region is writable (checked), so writes are served.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len()) }
    }

    /// Writes dirty pages back and makes them durable (`fdatasync`). A
    /// failed write leaves its pages dirty and is returned with its offset.
    pub fn flush(&self) -> Result<()> {
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        // Pages taken out by `unmap_range` are skipped.
        self.rt
            .shared()
            .writeback(&self.region, 0..self.region.pages.len())
    }

    /// Writes back the dirty pages overlapping `range` (bytes) and syncs.
    pub fn flush_range(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_covering(&self.inner(range))?;
        self.rt.shared().writeback(&self.region, pages)
    }

    /// Writes the dirty pages overlapping `range` (bytes) to the store,
    /// without syncing it: once this returns, a `read(2)` of the file sees
    /// what was written through the mapping. Pages taken out by
    /// [`unmap_range`](Mapping::unmap_range) are skipped. A failed write
    /// leaves its pages dirty and is returned with its offset.
    ///
    /// Call it before reading the store behind a mapping by other means
    /// (`pread` of the mapped file); see [coherence](Mapping#coherence).
    pub fn write_back_range(&self, range: Range<usize>) -> Result<()> {
        self.write_back_at(self.inner(range))
    }

    /// Starts making the mapping's changes durable and returns without
    /// waiting for durability (memmap2's `flush_async`, `msync(MS_ASYNC)`):
    /// the dirty pages are written to the store now, as by
    /// [`write_back_range`](Mapping::write_back_range) over the whole
    /// mapping, but the store is not synced: the data is then where a
    /// `read(2)` of the file sees it, and the kernel makes it durable in
    /// its own time (or at the next [`flush`](Mapping::flush), which also
    /// syncs). A failed write leaves its pages dirty and is returned.
    pub fn flush_async(&self) -> Result<()> {
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        self.write_back_at(0..self.region.len)
    }

    /// [`write_back_range`](Mapping::write_back_range) of a range of the
    /// region.
    fn write_back_at(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_within(&range)?;
        let shared = self.rt.shared();
        for part in self.mapped_parts(&pages) {
            shared.write_dirty(&self.region, part)?;
        }
        Ok(())
    }

    /// The store changed behind `range` (bytes): writes the dirty pages
    /// overlapping it back (without syncing), then drops every page
    /// overlapping it, so that the next access reads the store again. Pages
    /// taken out by [`unmap_range`](Mapping::unmap_range) are skipped;
    /// pinned pages stay pinned and are read again on their next access.
    /// If a write-back fails, nothing is dropped and the error is returned
    /// (its pages stay dirty).
    ///
    /// Call it after writing the store behind a mapping by other means
    /// (`pwrite` of the mapped file), or use [`write_at`](Mapping::write_at),
    /// which does both; see [coherence](Mapping#coherence).
    ///
    /// It takes `&mut self` because the bytes it shows may differ from
    /// those a slice of the mapping read before (see
    /// [aliasing](Mapping#aliasing));
    /// [`invalidate_range_shared`](Mapping::invalidate_range_shared) is the
    /// same through a shared handle. A slice held across it does not
    /// compile:
    ///
    /// ```compile_fail,E0502
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let file = std::fs::File::open("data.bin").unwrap();
    /// // SAFETY: the file is written by other means only while no slice lives.
    /// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
    /// let bytes: &[u8] = map.as_slice();
    /// map.invalidate_range(0..4096)?; // `map` is borrowed by `bytes`
    /// println!("{}", bytes[0]);
    /// # Ok(()) }
    /// ```
    pub fn invalidate_range(&mut self, range: Range<usize>) -> Result<()> {
        self.invalidate_at(self.inner(range))
    }

    /// [`invalidate_range`](Mapping::invalidate_range) through a shared
    /// handle, for mappings whose users reach the bytes through raw
    /// pointers only ([`as_ptr`](Mapping::as_ptr)), as the C API and the
    /// `LD_PRELOAD` shim do.
    ///
    /// # Safety
    /// No slice of this mapping ([`as_slice`](Mapping::as_slice), deref, a
    /// [`MappingMut`]'s) may be alive, in any thread, while the call runs:
    /// the bytes it covers may change.
    pub unsafe fn invalidate_range_shared(&self, range: Range<usize>) -> Result<()> {
        self.invalidate_at(self.inner(range))
    }

    /// [`invalidate_range`](Mapping::invalidate_range) of a range of the
    /// region.
    fn invalidate_at(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_within(&range)?;
        let shared = self.rt.shared();
        let parts = self.mapped_parts(&pages);
        for part in &parts {
            shared.write_dirty(&self.region, part.clone())?;
        }
        for part in parts {
            shared
                .drop_pages(&self.region, part)
                .map_err(|e| Error::os("madvise(MADV_DONTNEED)", e))?;
        }
        Ok(())
    }

    /// Writes `buf` to the store at byte `offset` of the mapping, as
    /// `pwrite(2)` of a kernel-mapped file does: dirty pages overlapping
    /// the range are written back first (nothing written through the
    /// mapping is lost), then `buf` goes to the store, then the pages
    /// overlapping the range are dropped, so that the mapping shows the
    /// new bytes on its next access. The store is not synced (call
    /// [`flush`](Mapping::flush) for durability).
    ///
    /// The mapping itself need not be writable; the store must be
    /// ([`Error::ReadOnlyStore`]). The range must lie within the mapping.
    ///
    /// Other mappings of the same file do not see the write until they
    /// [`invalidate_range`](Mapping::invalidate_range) it (and no slice of
    /// theirs may be alive meanwhile: see [aliasing](Mapping#aliasing)).
    ///
    /// It takes `&mut self` so that no slice of the mapping lives across
    /// the change; [`write_at_shared`](Mapping::write_at_shared) is the
    /// same through a shared handle.
    pub fn write_at(&mut self, offset: usize, buf: &[u8]) -> Result<()> {
        self.write_at_inner(offset, buf)
    }

    /// [`write_at`](Mapping::write_at) through a shared handle, for
    /// mappings whose users reach the bytes through raw pointers only
    /// ([`as_ptr`](Mapping::as_ptr)), as the C API (`umio_pwrite`) and the
    /// `LD_PRELOAD` shim (`pwrite` of a mapped file) do.
    ///
    /// # Safety
    /// No slice of this mapping ([`as_slice`](Mapping::as_slice), deref, a
    /// [`MappingMut`]'s) may be alive, in any thread, while the call runs:
    /// the bytes it covers change.
    pub unsafe fn write_at_shared(&self, offset: usize, buf: &[u8]) -> Result<()> {
        self.write_at_inner(offset, buf)
    }

    /// The store's bytes at byte `offset` of the mapping were just written
    /// with `buf` by other means (`pwrite(2)` of the mapped file): copies
    /// them into the pages of the range that are resident, each held busy
    /// meanwhile, so that the mapping shows them without a fault or a store
    /// read. Clean pages stay clean (they hold what the store holds), dirty
    /// ones dirty; pages not resident are left alone (their next access
    /// reads the store). Use it in place of
    /// [`invalidate_range_shared`](Mapping::invalidate_range_shared) when
    /// the written bytes are at hand.
    ///
    /// # Safety
    /// As [`invalidate_range_shared`](Mapping::invalidate_range_shared):
    /// no slice of this mapping may be alive, in any thread, while the call
    /// runs: the bytes it covers change.
    pub unsafe fn update_resident_shared(
        &self,
        offset: usize,
        buf: &[u8],
    ) -> Result<crate::update::Updated> {
        let end = offset
            .checked_add(buf.len())
            .ok_or(Error::InvalidArgument("range outside the mapping"))?;
        let range = self.inner(offset..end);
        self.pages_within(&range)?;
        self.rt
            .shared()
            .update_resident(&self.region, range.start, buf)
    }

    /// Hands the mapping's memory over to `replace(addr, len,
    /// store_offset)`, called for each part still mapped (the whole
    /// region, less what [`unmap_range`](Mapping::unmap_range) took out,
    /// in whole pages: the last one may reach past [`len`](Mapping::len)),
    /// which must map something else at exactly `addr..addr + len` with
    /// `MAP_FIXED` and return 0 or an errno (`store_offset`: the store's
    /// offset of `addr`). Dirty pages are written back first and the store
    /// synced; threads that access the mapping meanwhile wait and then meet
    /// the new mapping. Afterwards the mapping holds nothing
    /// ([`mapped_bytes`](Mapping::mapped_bytes) is 0) and dropping it
    /// leaves the new mappings alone. The `LD_PRELOAD` shim gives a file
    /// mapped twice to the kernel this way.
    ///
    /// # Safety
    /// No slice of this mapping may be alive, and `replace` must map
    /// exactly the range it is given (anything else there is lost).
    pub unsafe fn hand_over(
        &self,
        replace: &mut dyn FnMut(usize, usize, u64) -> std::result::Result<(), i32>,
    ) -> Result<()> {
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        self.rt.shared().hand_over(&self.region, replace)
    }

    fn write_at_inner(&self, offset: usize, buf: &[u8]) -> Result<()> {
        let end = offset
            .checked_add(buf.len())
            .ok_or(Error::InvalidArgument("range outside the mapping"))?;
        let range = self.inner(offset..end);
        let pages = self.pages_within(&range)?;
        if buf.is_empty() {
            return Ok(());
        }
        if !self.region.store.is_writable() {
            return Err(Error::ReadOnlyStore);
        }
        if self.region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        self.write_back_at(range.clone())?;
        self.region
            .store
            .write_at(self.region.offset + range.start as u64, buf)?;
        self.invalidate_at(range)
    }

    /// Turns a writable mapping into a [`MappingMut`], a `&mut [u8]`
    /// ([`DerefMut`], [`AsMut`]), as memmap2's `Mmap::make_mut`. Fails if
    /// the mapping is read-only ([`Error::InvalidArgument`]) or partly
    /// unmapped ([`Error::NotMapped`]): the check is made here, once, so
    /// that a `MappingMut` derefs mutably without a way to fail. The error
    /// converts into [`Error`] (and [`std::io::Error`]), so `?` propagates
    /// it, and gives the mapping back with
    /// [`into_mapping`](IntoMutError::into_mapping).
    ///
    /// ```no_run
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin").unwrap();
    /// let opts = umio_core::MapOptions::new().writable(true);
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let mut map = unsafe { rt.map_file(&file, opts) }?.into_mut()?;
    /// map[0] = 1;
    /// map.flush()?;
    /// # Ok(()) }
    /// ```
    pub fn into_mut(self) -> std::result::Result<MappingMut, IntoMutError> {
        let error = if !self.is_whole() {
            Error::NotMapped
        } else if !self.region.writable {
            Error::InvalidArgument("the mapping is read-only: map it with MapOptions::writable")
        } else {
            return Ok(MappingMut(self));
        };
        Err(IntoMutError {
            mapping: self,
            error,
        })
    }

    /// Writes back, unmaps, and returns the write-back's error if any. The
    /// region is unmapped either way.
    pub fn unmap(self) -> Result<()> {
        if !self.live.swap(false, Ordering::AcqRel) {
            return Err(Error::NotMapped);
        }
        self.rt.shared().unmap(&self.region)
    }

    /// Writes back and unmaps part of the mapping, as `munmap` of a part
    /// of a mapping does; the rest stays mapped. `range` (bytes from the
    /// start of the mapping) must start on a page boundary and end on one
    /// or at the end of the mapping. A range that is already unmapped, in
    /// whole or in part, is [`Error::NotMapped`]. Unmapping the last mapped
    /// pages unmaps the whole region; dropping the `Mapping` then does
    /// nothing more.
    ///
    /// It takes `&mut self` so that no slice of the mapping can outlive the
    /// memory it covers (see [aliasing](Mapping#aliasing)); afterwards
    /// [`as_slice`](Mapping::as_slice) and deref panic, since the mapping
    /// has a hole.
    pub fn unmap_range(&mut self, range: Range<usize>) -> Result<()> {
        self.unmap_range_inner(range)
    }

    /// [`unmap_range`](Mapping::unmap_range) through a shared handle, for
    /// mappings shared between threads (`Arc<Mapping>`) whose users reach
    /// the bytes through raw pointers only ([`as_ptr`](Mapping::as_ptr)),
    /// as a C program does with `munmap`: the C API and the `LD_PRELOAD`
    /// shim unmap this way.
    ///
    /// # Safety
    /// No slice of this mapping ([`as_slice`](Mapping::as_slice), deref,
    /// a [`MappingMut`]'s) may be alive, in any thread,
    /// while the call runs or afterwards over the range unmapped; nor may
    /// any reference be made from a pointer into the range once it is
    /// unmapped. Raw-pointer accesses to the range racing with the call are
    /// the caller's error as they are with `munmap` (they may fault, or
    /// reach whatever is mapped there next), but not to the rest of the
    /// mapping, which stays mapped and served.
    pub unsafe fn unmap_range_shared(&self, range: Range<usize>) -> Result<()> {
        self.unmap_range_inner(range)
    }

    fn unmap_range_inner(&self, range: Range<usize>) -> Result<()> {
        let range = self.inner_from_page(range);
        let ps = self.region.page_size;
        if range.start >= range.end
            || !range.start.is_multiple_of(ps)
            || (!range.end.is_multiple_of(ps) && range.end != self.region.len)
        {
            return Err(Error::InvalidArgument(
                "unmap range must be non-empty and start and end on page boundaries",
            ));
        }
        let pages = self.pages_covering(&range)?;
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        let mapped: usize = self.region.mapped_ranges().iter().map(|r| r.len()).sum();
        if mapped == pages.len() && !self.region.intersects_hole(&pages) {
            // Everything that is left: unmap the region itself.
            if !self.live.swap(false, Ordering::AcqRel) {
                return Err(Error::NotMapped);
            }
            return self.rt.shared().unmap(&self.region);
        }
        self.rt.shared().unmap_range(&self.region, pages)
    }

    /// Bytes still mapped: [`len`](Mapping::len) less what
    /// [`unmap_range`](Mapping::unmap_range) took out; 0 once unmapped.
    pub fn mapped_bytes(&self) -> usize {
        if !self.live.load(Ordering::Acquire) {
            return 0;
        }
        self.region
            .mapped_ranges()
            .iter()
            .map(|r| {
                let bytes = self.region.valid_bytes(r.start, r.len());
                // The bytes before the mapping's first are not its own.
                if r.start == 0 {
                    bytes - self.skew
                } else {
                    bytes
                }
            })
            .sum()
    }

    /// Whether the byte at `offset` is mapped still: within the mapping,
    /// not taken out by [`unmap_range`](Mapping::unmap_range) or replaced
    /// by a fixed mapping ([`MapOptions::fixed_address`]), and not
    /// unmapped.
    pub fn is_mapped_at(&self, offset: usize) -> bool {
        let offset = offset.saturating_add(self.skew);
        if offset >= self.region.len || !self.live.load(Ordering::Acquire) {
            return false;
        }
        let page = offset / self.region.page_size;
        !self.region.intersects_hole(&(page..page + 1))
    }

    /// Reads the pages overlapping `range` (bytes) and pins them: eviction
    /// leaves them in memory until [`unpin`](Mapping::unpin); flush and
    /// unmap write them back like any page. Pinned pages count against the
    /// cache and may hold at most half of it ([`Error::PinLimit`]). A page
    /// dropped with [`UncheckedAdvice::DontNeed`] stays pinned and is read again on
    /// its next access.
    ///
    /// Under user-mode-only faults ([`Runtime::user_mode_only`]) pin a
    /// range before passing it to a system call, which otherwise fails with
    /// `EFAULT` on its non-resident pages; if the call writes into the
    /// range (`read(2)` into a writable mapping), also store a byte to each
    /// of its pages first, since clean pages are write-protected.
    pub fn pin(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_covering(&self.inner(range))?;
        if pages.is_empty() {
            return Ok(());
        }
        self.rt.shared().pin(&self.region, pages)
    }

    /// Faults the pages overlapping `range` (bytes) in now, on the calling
    /// thread, in batches of store reads, as `MAP_POPULATE` or
    /// `MADV_POPULATE_READ` do; with `write` (a writable mapping), also
    /// takes each page's first-write fault (`MADV_POPULATE_WRITE`), without
    /// changing a byte.
    ///
    /// This is how to pass a mapped buffer to a system call where the
    /// kernel's own accesses are not served: under
    /// [`FaultService::InThread`](crate::FaultService::InThread) or
    /// user-mode-only faults ([`Runtime::user_mode_only`](crate::Runtime::user_mode_only)),
    /// a non-resident page fails the call with `EFAULT`, and so does a
    /// clean page of a writable mapping that the call writes into
    /// (`read(2)` into it): populate with `write` for those. The pages may
    /// be evicted again under memory pressure; [`pin`](Mapping::pin) them
    /// to keep them. An error if a page could not be read (then none of
    /// the range is dirtied).
    pub fn populate(&self, range: Range<usize>, write: bool) -> Result<()> {
        if write && !self.region.writable {
            return Err(Error::InvalidArgument(
                "populate for write on a read-only mapping",
            ));
        }
        let pages = self.pages_covering(&self.inner(range))?;
        if pages.is_empty() {
            return Ok(());
        }
        self.rt.shared().populate(&self.region, pages, write)
    }

    /// `file.read(&mut map[range])` that works under either fault
    /// service: one `read(2)` from `fd` (at its position, `at` `None`) or
    /// `pread(2)` (at file offset `at`) into the mapping's bytes `range`.
    /// Returns the bytes read, which may be fewer than asked, as from
    /// `read(2)` (call again for the rest); a range larger than an eighth
    /// of the cache is read in part. The pages are faulted in first where
    /// the kernel's own access would not be served (an in-thread region,
    /// a user-mode-only userfaultfd), made writable, and faulted in again
    /// should one be evicted before the call: the kernel never meets a
    /// page it cannot write. The mapping must be writable; what is read
    /// is written back as any write to the mapping.
    ///
    /// Errors: [`Error::InvalidArgument`] (a range outside the mapping, a
    /// read-only mapping), the store's (a page could not be read), or
    /// `read(2)`'s own ([`Error::Os`]: `EBADF`, `EISDIR`...).
    ///
    /// ```no_run
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let data = std::fs::OpenOptions::new().read(true).write(true).open("data.bin").unwrap();
    /// let input = std::fs::File::open("input.bin").unwrap();
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let mut map = unsafe { rt.map_file(&data, umio_core::MapOptions::new().writable(true)) }?;
    /// let n = map.read_into(&input, Some(0), 0..4096)?;
    /// # let _ = n;
    /// # Ok(()) }
    /// ```
    pub fn read_into(
        &mut self,
        fd: impl std::os::fd::AsFd,
        at: Option<u64>,
        range: Range<usize>,
    ) -> Result<usize> {
        self.syscall_on(fd.as_fd(), true, at, range)
    }

    /// [`read_into`](Mapping::read_into) through a shared handle, for
    /// mappings whose users reach the bytes through raw pointers only, as
    /// the C API does (`umio_read_into`).
    ///
    /// # Safety
    /// No slice of this mapping may be alive, in any thread, while the
    /// call runs: the bytes it covers change.
    pub unsafe fn read_into_shared(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        at: Option<u64>,
        range: Range<usize>,
    ) -> Result<usize> {
        self.syscall_on(fd, true, at, range)
    }

    /// `file.write(&map[range])` that works under either fault service:
    /// one `write(2)` to `fd` (at its position, `at` `None`) or
    /// `pwrite(2)` (at file offset `at`) of the mapping's bytes `range`,
    /// its pages faulted in first where the kernel's own access would not
    /// be served, as for [`read_into`](Mapping::read_into). Returns the
    /// bytes written, which may be fewer than asked.
    pub fn write_from(
        &self,
        fd: impl std::os::fd::AsFd,
        at: Option<u64>,
        range: Range<usize>,
    ) -> Result<usize> {
        self.syscall_on(fd.as_fd(), false, at, range)
    }

    /// The body of [`read_into`](Mapping::read_into) (`into_map`) and
    /// [`write_from`](Mapping::write_from).
    fn syscall_on(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        into_map: bool,
        at: Option<u64>,
        range: Range<usize>,
    ) -> Result<usize> {
        use std::os::fd::AsRawFd;
        /// Tries before a page that keeps being evicted between the
        /// fault-in and the call is given up on (`EFAULT`).
        const ATTEMPTS: usize = 8;
        if range.start > range.end || range.end > self.len() {
            return Err(Error::InvalidArgument("range outside the mapping"));
        }
        if into_map && !self.region.writable {
            return Err(Error::InvalidArgument(
                "read_into a read-only mapping: the kernel cannot write it",
            ));
        }
        if range.is_empty() {
            return Ok(0);
        }
        // At most an eighth of the cache at once, so that faulting the
        // range in does not evict the start of it.
        let shared = self.rt.shared();
        let most = ((shared.budget_of(&self.region).limit() / 8) as usize)
            .max(self.region.page_size)
            .next_multiple_of(self.region.page_size);
        let len = range.len().min(most);
        let range = range.start..range.start + len;
        let addr = self.as_ptr() as usize + range.start;
        let fd = fd.as_raw_fd();
        let served = !self.region.in_thread && !shared.features().user_mode_only();
        let mut result = Err(libc::EFAULT);
        for attempt in 0..ATTEMPTS {
            if !served || attempt > 0 {
                self.populate(range.clone(), into_map)?;
            }
            result = if into_map {
                crate::sys::mm::read_fd(fd, addr, len, at)
            } else {
                crate::sys::mm::write_fd(fd, addr, len, at)
            };
            if result != Err(libc::EFAULT) {
                break;
            }
        }
        result.map_err(|e| {
            Error::os(
                if into_map {
                    "read(2) into the mapping"
                } else {
                    "write(2) from the mapping"
                },
                e,
            )
        })
    }

    /// Unpins the pages overlapping `range` (bytes).
    pub fn unpin(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_covering(&self.inner(range))?;
        self.rt.shared().unpin(&self.region, pages)
    }

    /// Counters of this region since it was mapped, and how its faults
    /// are served ([`RegionStats::fault_service`]).
    pub fn stats(&self) -> RegionStats {
        let mut s = self.region.stats.snapshot();
        s.fault_service = self.fault_service();
        s
    }

    /// How this region's faults are served: [`FaultService::Fillers`] or
    /// [`FaultService::InThread`] (what [`MapOptions::fault_service`], the
    /// runtime's default and [`FaultService::Auto`] made of it).
    pub fn fault_service(&self) -> FaultService {
        if self.region.in_thread {
            FaultService::InThread
        } else {
            FaultService::Fillers
        }
    }

    /// Whether every byte is mapped still: live and no hole. One
    /// uncontended lock, no allocation (it runs on every deref).
    fn is_whole(&self) -> bool {
        self.live.load(Ordering::Acquire)
            && !self.region.intersects_hole(&(0..self.region.pages.len()))
    }

    fn assert_whole(&self) {
        assert!(
            self.is_whole(),
            "a slice of a umio mapping that is partly or wholly unmapped"
        );
    }

    /// Starts filling the pages overlapping `range` (bytes) in the
    /// background and returns at once, their reads in batches of up to
    /// the store's [`queue_depth`](umio_backends::Store::queue_depth), all
    /// in flight at once. Pages that do not fit in the cache evict older
    /// ones; one hint fills at most half of the cache, so that the pages
    /// the application is using stay (the rest is read when touched). A
    /// thread that touches a page whose read is in flight waits for that
    /// read.
    pub fn prefetch(&self, range: Range<usize>) -> Result<()> {
        self.prefetch_at(self.inner(range))
    }

    /// [`prefetch`](Mapping::prefetch) of a range of the region.
    fn prefetch_at(&self, range: Range<usize>) -> Result<()> {
        let pages = self.pages_covering(&range)?;
        self.hint(vec![pages]);
        Ok(())
    }

    /// The one path of every hint ([`prefetch`](Mapping::prefetch),
    /// [`prefetch_ranges`](Mapping::prefetch_ranges),
    /// [`Advice::WillNeed`], the C API's `umap_prefetch` and
    /// `umio_prefetch`): the page ranges, sorted and merged, go to the
    /// prefetch threads as one job, whose missing pages' reads go to the
    /// store in batches of up to its depth (`Shared::fill_hint`).
    fn hint(&self, mut pages: Vec<Range<usize>>) {
        pages.retain(|p| !p.is_empty());
        if pages.is_empty() {
            return;
        }
        pages.sort_unstable_by_key(|p| p.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(pages.len());
        for p in pages {
            match merged.last_mut() {
                Some(last) if p.start <= last.end => last.end = last.end.max(p.end),
                _ => merged.push(p),
            }
        }
        // Locked busy here, before the hint is queued: a thread touching
        // one of these pages before its read completes waits for that
        // read, whether the read is in flight yet or not.
        let shared = self.rt.shared();
        let locked = shared.lock_hint(&self.region, &merged);
        if locked.is_empty() {
            return;
        }
        shared.jobs().push(PrefetchJob {
            region: self.region.clone(),
            pages: locked,
            fetch: FetchList::new(),
            promote: None,
            locked: true,
        });
    }

    /// Starts filling the pages overlapping each of `ranges` (bytes) in the
    /// background and returns at once: a vectored [`prefetch`](Mapping::prefetch),
    /// as UMap's `umap_prefetch` takes a list. Every range is checked first;
    /// if one lies outside the mapping nothing is queued. The ranges are
    /// filled in offset order, overlapping and adjacent ones merged, in
    /// batches: each run of consecutive missing pages costs one store read
    /// and one `UFFDIO_COPY` (up to 2 MiB, and a quarter of the cache), and
    /// the reads of many runs go to the store together
    /// ([`Store::submit`](umio_backends::Store::submit)), so a store such
    /// as io_uring has them all in flight at once.
    /// Pages already resident are skipped; pages that do not fit in the
    /// cache evict older ones, up to half of the cache, as for
    /// [`prefetch`](Mapping::prefetch).
    ///
    /// ```no_run
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let file = std::fs::File::open("data.bin").unwrap();
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
    /// // The index blocks a query will read next.
    /// map.prefetch_ranges(&[0..4096, 1 << 20..(1 << 20) + 65536, 8192..12288])?;
    /// # Ok(()) }
    /// ```
    pub fn prefetch_ranges(&self, ranges: &[Range<usize>]) -> Result<()> {
        let pages = ranges
            .iter()
            .map(|r| self.pages_covering(&self.inner(r.clone())))
            .collect::<Result<Vec<_>>>()?;
        self.hint(pages);
        Ok(())
    }

    /// Advice for a byte range, as with `madvise(2)`; the range is rounded
    /// out to whole pages. The [`Advice`]s keep the bytes as they are; the
    /// advice that drops pages ([`UncheckedAdvice`]) is given with
    /// [`advise_mut`](Mapping::advise_mut).
    pub fn advise(&self, range: Range<usize>, advice: Advice) -> Result<()> {
        let range = self.inner(range);
        let pages = self.pages_covering(&range)?;
        match advice {
            Advice::WillNeed => self.prefetch_at(range),
            Advice::Normal | Advice::Sequential | Advice::Random => {
                self.region
                    .set_advice(pages.start as u64..pages.end as u64, advice);
                Ok(())
            }
            Advice::Huge | Advice::NoHuge => {
                if self.region.hugetlb {
                    return Ok(());
                }
                let Some(h) = &self.region.huge else {
                    return Err(Error::InvalidArgument(
                        "huge-page advice needs a page size that divides 2 MiB",
                    ));
                };
                let huge = advice == Advice::Huge;
                if huge {
                    // Let the kernel back collapsed ranges with huge pages
                    // (the region is THP-eligible only where advised).
                    let (addr, len) = (
                        self.region.page_addr(pages.start),
                        pages.len() * self.region.page_size,
                    );
                    crate::sys::mm::advise(addr, len, libc::MADV_HUGEPAGE)
                        .map_err(|e| Error::os("madvise(MADV_HUGEPAGE)", e))?;
                }
                h.set_advice(pages, huge);
                Ok(())
            }
        }
    }

    /// Advice that drops the pages of a byte range, as with `madvise(2)`:
    /// the next access reads the store again
    /// ([`UncheckedAdvice::PageOut`]), or reads zeros
    /// ([`UncheckedAdvice::Remove`]), or loses what was not written back
    /// ([`UncheckedAdvice::DontNeed`]). [`UncheckedAdvice::DontNeed`] needs
    /// a range starting on a page boundary and ending on one or at the end
    /// of the mapping (it discards whole pages); [`UncheckedAdvice::Remove`]
    /// whole 4 KiB pages; [`UncheckedAdvice::PageOut`] rounds the range out
    /// to whole pages.
    ///
    /// It takes `&mut self` because the bytes may change under a slice (see
    /// [aliasing](Mapping#aliasing)); memmap2 gives this advice through its
    /// `unsafe` `unchecked_advise`, umio through
    /// [`advise_shared`](Mapping::advise_shared) to a shared handle. A
    /// slice held across it does not compile:
    ///
    /// ```compile_fail,E0502
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// # let file = std::fs::File::open("data.bin").unwrap();
    /// use umio_core::UncheckedAdvice;
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
    /// let bytes: &[u8] = map.as_slice();
    /// map.advise_mut(0..map.page_size(), UncheckedAdvice::DontNeed)?; // borrowed
    /// println!("{}", bytes[0]);
    /// # Ok(()) }
    /// ```
    pub fn advise_mut(&mut self, range: Range<usize>, advice: UncheckedAdvice) -> Result<()> {
        self.advise_unchecked(range, advice)
    }

    /// [`advise_mut`](Mapping::advise_mut) through a shared handle (memmap2's
    /// `unchecked_advise`), for mappings whose users reach the bytes through
    /// raw pointers only ([`as_ptr`](Mapping::as_ptr)), as the C API
    /// (`umio_advise`) and the `LD_PRELOAD` shim (`madvise`) do.
    ///
    /// # Safety
    /// No slice of this mapping ([`as_slice`](Mapping::as_slice), deref, a
    /// [`MappingMut`]'s) may be alive, in any thread, while the call runs:
    /// the bytes it covers may change.
    pub unsafe fn advise_shared(&self, range: Range<usize>, advice: UncheckedAdvice) -> Result<()> {
        self.advise_unchecked(range, advice)
    }

    fn advise_unchecked(&self, range: Range<usize>, advice: UncheckedAdvice) -> Result<()> {
        match advice {
            UncheckedAdvice::DontNeed => {
                let range = self.inner_from_page(range);
                let pages = self.pages_covering(&range)?;
                let ps = self.region.page_size;
                if !range.start.is_multiple_of(ps)
                    || (!range.end.is_multiple_of(ps) && range.end != self.region.len)
                {
                    return Err(Error::InvalidArgument(
                        "DontNeed range must start and end on page boundaries",
                    ));
                }
                if pages.is_empty() {
                    return Ok(());
                }
                self.rt
                    .shared()
                    .drop_pages(&self.region, pages)
                    .map_err(|e| Error::os("madvise(MADV_DONTNEED)", e))
            }
            UncheckedAdvice::PageOut => {
                let range = self.inner(range);
                self.pages_covering(&range)?;
                self.invalidate_at(range)
            }
            UncheckedAdvice::Remove => {
                let range = self.inner_from_page(range);
                self.pages_covering(&range)?;
                self.remove(range)
            }
        }
    }

    /// [`UncheckedAdvice::Remove`].
    fn remove(&self, range: Range<usize>) -> Result<()> {
        if !range.start.is_multiple_of(crate::MIN_PAGE_SIZE)
            || (!range.end.is_multiple_of(crate::MIN_PAGE_SIZE) && range.end != self.region.len)
        {
            return Err(Error::InvalidArgument(
                "Remove needs a range of whole 4 KiB pages",
            ));
        }
        if !self.region.writable {
            return Err(Error::InvalidArgument("Remove needs a writable mapping"));
        }
        let pages = self.pages_covering(&range)?;
        if range.is_empty() {
            return Ok(());
        }
        let shared = self.rt.shared();
        shared.write_dirty(&self.region, pages.clone())?;
        self.region
            .store
            .punch_hole(self.region.offset + range.start as u64, range.len() as u64)?;
        shared
            .drop_pages(&self.region, pages)
            .map_err(|e| Error::os("madvise(MADV_DONTNEED)", e))
    }

    /// Whether the page holding byte `offset` is resident now (a cheap,
    /// racy answer: the page may be evicted or filled right after).
    pub fn is_resident(&self, offset: usize) -> bool {
        let offset = offset.saturating_add(self.skew);
        offset < self.region.len
            && matches!(
                self.region.pages.get(offset / self.region.page_size),
                Observed::Stable(PageState::Clean | PageState::Dirty)
            )
    }

    /// The region's aligned 2 MiB ranges now promoted to huge pages.
    pub fn promoted_ranges(&self) -> usize {
        self.region.huge.as_ref().map_or(0, |h| h.promoted())
    }

    /// Whether the region is backed by hugetlbfs 2 MiB pages (see
    /// [`MapOptions::hugetlb`]; false after a fallback).
    pub fn is_hugetlb(&self) -> bool {
        self.region.hugetlb
    }

    /// Resident pages of this region now.
    pub fn resident_pages(&self) -> usize {
        self.region.pages.count_resident()
    }

    /// Dirty pages of this region now. With asynchronous dirty tracking
    /// ([`DirtyTracking::Async`](crate::DirtyTracking::Async)) it first
    /// looks for pages written since umio last did (one `PAGEMAP_SCAN`).
    pub fn dirty_pages(&self) -> usize {
        if let Some(_g) = self.region.enter() {
            self.rt
                .shared()
                .harvest(&self.region, 0..self.region.pages.len());
        }
        self.region.dirty.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The runtime this mapping belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Pages overlapping a byte range within the mapping, holes left by
    /// [`unmap_range`](Mapping::unmap_range) included.
    fn pages_within(&self, range: &Range<usize>) -> Result<Range<usize>> {
        if range.start > range.end || range.end > self.region.len {
            return Err(Error::InvalidArgument("range outside the mapping"));
        }
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        let ps = self.region.page_size;
        Ok(range.start / ps..range.end.div_ceil(ps))
    }

    /// The parts of `pages` still mapped.
    fn mapped_parts(&self, pages: &Range<usize>) -> Vec<Range<usize>> {
        self.region
            .mapped_ranges()
            .into_iter()
            .map(|r| r.start.max(pages.start)..r.end.min(pages.end))
            .filter(|r| !r.is_empty())
            .collect()
    }

    /// Pages overlapping a byte range, which must lie within the mapping
    /// and be mapped still.
    fn pages_covering(&self, range: &Range<usize>) -> Result<Range<usize>> {
        if range.start > range.end || range.end > self.region.len {
            return Err(Error::InvalidArgument("range outside the mapping"));
        }
        if !self.live.load(Ordering::Acquire) {
            return Err(Error::NotMapped);
        }
        let ps = self.region.page_size;
        let pages = range.start / ps..range.end.div_ceil(ps);
        if self.region.intersects_hole(&pages) {
            return Err(Error::NotMapped);
        }
        Ok(pages)
    }
}

impl Runtime {
    /// Maps a file privately, copy-on-write (memmap2's `map_copy`,
    /// `MAP_PRIVATE`): as [`map_file`](Runtime::map_file) with
    /// [`MapOptions::copy_on_write`]. The mapping is writable even over a
    /// read-only file; its writes never reach the file.
    ///
    /// # Safety
    /// As for [`map_file`](Runtime::map_file): pages the mapping has not
    /// written are read from the file, so nothing else may change the
    /// file's mapped bytes while a slice of the mapping lives.
    pub unsafe fn map_copy(&self, file: &std::fs::File, opts: MapOptions) -> Result<Mapping> {
        // SAFETY: the caller keeps map_file's contract.
        unsafe { self.map_file(file, opts.copy_on_write(true)) }
    }

    /// Maps a file writable, as a [`MappingMut`] (memmap2's
    /// `MmapMut::map_mut`): [`map_file`](Runtime::map_file) with
    /// [`MapOptions::writable`], then [`Mapping::into_mut`]. The file must
    /// be open for reading and writing.
    ///
    /// ```no_run
    /// # fn main() -> umio_core::Result<()> {
    /// # let rt = umio_core::Runtime::builder().build()?;
    /// let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin").unwrap();
    /// // SAFETY: nothing else changes data.bin while the mapping lives.
    /// let mut map = unsafe { rt.map_file_mut(&file, umio_core::MapOptions::new()) }?;
    /// map[..5].copy_from_slice(b"hello");
    /// map.flush()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As for [`map_file`](Runtime::map_file).
    pub unsafe fn map_file_mut(
        &self,
        file: &std::fs::File,
        opts: MapOptions,
    ) -> Result<MappingMut> {
        // SAFETY: the caller keeps map_file's contract.
        Ok(unsafe { self.map_file(file, opts.writable(true)) }?.into_mut()?)
    }

    /// The store a region of `opts` maps: `store`, or a copy-on-write view
    /// of it ([`MapOptions::copy_on_write`]) covering the region rounded up
    /// to whole pages. A copy-on-write view reports a length of at least
    /// that, so `opts` gets the length the store gives it now if it has
    /// none.
    pub(crate) fn region_store(
        &self,
        store: Arc<dyn Store>,
        opts: &mut MapOptions,
    ) -> Result<Arc<dyn Store>> {
        if !opts.copy_on_write {
            return Ok(store);
        }
        let len = match opts.len {
            Some(len) => len,
            None => {
                let rest = store
                    .len()?
                    .checked_sub(opts.offset)
                    .ok_or(Error::InvalidArgument(
                        "offset is past the end of the store",
                    ))?;
                let len = usize::try_from(rest)
                    .map_err(|_| Error::InvalidArgument("length too large"))?;
                opts.len = Some(len);
                len
            }
        };
        // Write-back writes whole pages: of the region's size, 2 MiB for
        // huge pages.
        let unit = opts
            .page_size
            .unwrap_or_else(|| self.page_size())
            .max(crate::HUGE_PAGE_SIZE);
        let len = len
            .checked_next_multiple_of(unit)
            .ok_or(Error::InvalidArgument("length too large"))?;
        let cow = umio_backends::CopyOnWrite::new(Box::new(store), opts.offset, len as u64, None)
            .map_err(|e| {
            Error::os(
                "creating the copy-on-write scratch file",
                e.raw_os_error().unwrap_or(libc::EIO),
            )
        })?;
        Ok(Arc::new(cow))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.live.swap(false, Ordering::AcqRel)
            && let Err(e) = self.rt.shared().unmap(&self.region)
        {
            log::error!("umio: unmapping on drop: {e}");
        }
    }
}

/// The bytes of the mapping; `map[i]`, `&map[a..b]` and `&*map` work as on
/// a slice, and functions taking `&[u8]` or `impl AsRef<[u8]>` take a
/// `&Mapping`.
///
/// # Panics
/// As [`Mapping::as_slice`]: if the mapping was partly or wholly unmapped
/// with [`unmap_range`](Mapping::unmap_range). Each deref checks this (one
/// uncontended lock): in a hot loop, take the slice once.
impl Deref for Mapping {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// As [`Deref`], with the same panics.
impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A writable [`Mapping`] as a mutable byte slice ([`DerefMut`] and
/// [`AsMut`]), as memmap2's `MmapMut`: from [`Mapping::into_mut`] or
/// [`Runtime::map_file_mut`].
///
/// A read-only `Mapping` has no `DerefMut` and no `as_mut_slice`, so
/// writing to it is a compile error rather than a runtime panic:
///
/// ```compile_fail,E0596
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::File::open("data.bin").unwrap();
/// // SAFETY: nothing else changes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
/// map[0] = 1; // `Mapping` is `Deref` only
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0599
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::File::open("data.bin").unwrap();
/// // SAFETY: nothing else changes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, umio_core::MapOptions::new()) }?;
/// map.as_mut_slice()[0] = 1; // only a `MappingMut` has it
/// # Ok(()) }
/// ```
///
/// ```no_run
/// # fn main() -> umio_core::Result<()> {
/// # let rt = umio_core::Runtime::builder().build()?;
/// # let file = std::fs::OpenOptions::new().read(true).write(true).open("data.bin").unwrap();
/// let opts = umio_core::MapOptions::new().writable(true);
/// // SAFETY: nothing else changes data.bin while the mapping lives.
/// let mut map = unsafe { rt.map_file(&file, opts) }?.into_mut()?;
/// map[0] = 1;
/// map[1..].fill(7);
/// map.flush()?;
/// # Ok(()) }
/// ```
///
/// It is whole and writable for its whole life: it gives the
/// [`Mapping`]'s `&self` methods through [`mapping`](MappingMut::mapping),
/// and those of its `&mut self` methods that keep it whole
/// ([`write_at`](MappingMut::write_at),
/// [`invalidate_range`](MappingMut::invalidate_range),
/// [`advise_mut`](MappingMut::advise_mut)) as its own, but not
/// `&mut Mapping`, so [`unmap_range`](Mapping::unmap_range) needs
/// [`into_mapping`](MappingMut::into_mapping) first. Dropping it unmaps, as
/// dropping a `Mapping` does.
pub struct MappingMut(Mapping);

impl MappingMut {
    /// The mapping, for its `&self` methods (advice, prefetch, pin,
    /// counters).
    pub fn mapping(&self) -> &Mapping {
        &self.0
    }

    /// Back to a [`Mapping`], e.g. to unmap part of it (memmap2's
    /// `make_read_only`, except that the region stays writable: its
    /// bytes can then be written through [`Mapping::as_ptr`] only).
    pub fn into_mapping(self) -> Mapping {
        self.0
    }

    /// The mapped bytes (also `&*map`, through [`Deref`]).
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }

    /// The mapped bytes, writable (also `&mut *map`, through [`DerefMut`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.0.slice_mut()
    }

    /// First byte of the mapping.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// Writes dirty pages back and makes them durable: [`Mapping::flush`].
    pub fn flush(&self) -> Result<()> {
        self.0.flush()
    }

    /// Writes back the dirty pages overlapping `range` (bytes) and syncs:
    /// [`Mapping::flush_range`].
    pub fn flush_range(&self, range: Range<usize>) -> Result<()> {
        self.0.flush_range(range)
    }

    /// Writes the dirty pages to the store without waiting for durability:
    /// [`Mapping::flush_async`].
    pub fn flush_async(&self) -> Result<()> {
        self.0.flush_async()
    }

    /// One `read(2)`/`pread(2)` from `fd` into the bytes `range`, under
    /// either fault service: [`Mapping::read_into`].
    pub fn read_into(
        &mut self,
        fd: impl std::os::fd::AsFd,
        at: Option<u64>,
        range: Range<usize>,
    ) -> Result<usize> {
        self.0.read_into(fd, at, range)
    }

    /// Writes `buf` to the store at byte `offset`, then shows it:
    /// [`Mapping::write_at`].
    pub fn write_at(&mut self, offset: usize, buf: &[u8]) -> Result<()> {
        self.0.write_at(offset, buf)
    }

    /// Writes back and drops the pages overlapping `range`, so that the
    /// next access reads the store again: [`Mapping::invalidate_range`].
    pub fn invalidate_range(&mut self, range: Range<usize>) -> Result<()> {
        self.0.invalidate_range(range)
    }

    /// Advice that drops pages: [`Mapping::advise_mut`].
    pub fn advise_mut(&mut self, range: Range<usize>, advice: UncheckedAdvice) -> Result<()> {
        self.0.advise_mut(range, advice)
    }

    /// Writes back, unmaps, and returns the write-back's error if any (see
    /// [`Mapping::unmap`]).
    pub fn unmap(self) -> Result<()> {
        self.0.unmap()
    }
}

impl std::fmt::Debug for MappingMut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MappingMut").field(&self.0).finish()
    }
}

impl From<MappingMut> for Mapping {
    fn from(m: MappingMut) -> Mapping {
        m.0
    }
}

impl Deref for MappingMut {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl DerefMut for MappingMut {
    fn deref_mut(&mut self) -> &mut [u8] {
        // Writable and whole since `into_mut`: only `&self` of the mapping
        // and the `&mut self` methods that keep it whole are reachable (an
        // unsafe `unmap_range_shared` or a fixed mapping replacing its
        // pages would break their contracts). Checked anyway, with a clear
        // panic.
        self.0.slice_mut()
    }
}

impl AsRef<[u8]> for MappingMut {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for MappingMut {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// The error of [`Mapping::into_mut`]: why the mapping cannot be written
/// as a slice, with the mapping itself, to be taken back with
/// [`into_mapping`](IntoMutError::into_mapping). Converts into [`Error`]
/// and [`std::io::Error`], so `?` propagates it (the mapping is then
/// dropped: unmapped).
pub struct IntoMutError {
    mapping: Mapping,
    error: Error,
}

impl IntoMutError {
    /// Why: [`Error::InvalidArgument`] for a read-only mapping,
    /// [`Error::NotMapped`] for one partly or wholly unmapped.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The mapping, unchanged.
    pub fn into_mapping(self) -> Mapping {
        self.mapping
    }
}

impl std::fmt::Debug for IntoMutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntoMutError")
            .field("mapping", &self.mapping)
            .field("error", &self.error)
            .finish()
    }
}

impl std::fmt::Display for IntoMutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write the mapping as a slice: {}", self.error)
    }
}

impl std::error::Error for IntoMutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<IntoMutError> for Error {
    fn from(e: IntoMutError) -> Error {
        e.error
    }
}

impl From<IntoMutError> for std::io::Error {
    fn from(e: IntoMutError) -> std::io::Error {
        e.error.into()
    }
}
