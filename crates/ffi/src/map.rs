//! `mmap`-style arguments translated to a [`MapOptions`], shared by
//! `umap` and `umio_map`.

use std::ffi::{c_int, c_void};
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::Arc;

use umio_backends::{DaxStore, UringOptions, UringStore};
use umio_core::{
    FaultService, MIN_PAGE_SIZE, MapOptions, PrefetchKind, Prefetcher, PromoteKind, Promoter,
};

use crate::boundary::Errno;
use crate::store::CStore;
use crate::{config, registry};

/// How a file is read and written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `FileStore`: `pread`/`pwrite`.
    Pread,
    /// `UringStore`, optionally `O_DIRECT`.
    Uring { direct: bool },
    /// `DaxStore`: the file mapped shared.
    Dax,
}

/// Where the mapped bytes live.
pub(crate) enum Source {
    /// A file or block device, and how to reach it.
    Fd(c_int, Backend),
    /// A store written in C.
    Store(CStore),
    /// A Ceph RADOS object set (`backend = "rados:..."`).
    Rados(crate::rados::RadosSpec),
}

/// A map request with `mmap`'s arguments.
pub(crate) struct Request {
    pub addr: *mut c_void,
    /// Bytes to map; `None`: from the offset to the end of the store.
    pub len: Option<usize>,
    pub prot: c_int,
    pub flags: c_int,
    pub offset: libc::off_t,
    pub page_size: Option<usize>,
    pub prefetch: Option<PrefetchKind>,
    /// A prefetcher of the caller's own (then `prefetch` is `None`).
    pub prefetcher: Option<Arc<dyn Prefetcher>>,
    pub promote: Option<PromoteKind>,
    /// A promotion policy of the caller's own (then `promote` is `None`).
    pub promoter: Option<Arc<dyn Promoter>>,
    /// `Some(fallback)`: hugetlbfs pages.
    pub hugetlb: Option<bool>,
    /// `umio_map_options.fault_service`; `None`: the runtime's.
    pub fault_service: Option<FaultService>,
    /// `umio_map_options.user_access_only`.
    pub user_access_only: bool,
    /// `umio_map_options.survive_process_death`.
    pub survive_process_death: bool,
}

impl Request {
    /// A request with the call's own arguments and umio's defaults for the
    /// rest (page size, prefetch), as `umap` makes and `umio_map` starts.
    pub fn new(
        addr: *mut c_void,
        len: Option<usize>,
        prot: c_int,
        flags: c_int,
        offset: libc::off_t,
    ) -> Request {
        Request {
            addr,
            len,
            prot,
            flags,
            offset,
            page_size: None,
            prefetch: None,
            prefetcher: None,
            promote: None,
            promoter: None,
            hugetlb: None,
            fault_service: None,
            user_access_only: false,
            survive_process_death: false,
        }
    }
}

/// Flags a mapping may have, each with `mmap`'s meaning where umio can
/// give it one:
///
/// | flag | meaning |
/// |---|---|
/// | `MAP_SHARED`, `MAP_PRIVATE` | one of them; the same here: writes reach the store either way |
/// | `MAP_FIXED` | replace what is mapped at the address (umio mappings included) |
/// | `MAP_FIXED_NOREPLACE` | map at the address, `EEXIST` if anything is mapped there |
/// | `MAP_NORESERVE` | accepted: umio reserves no swap |
/// | `MAP_POPULATE` | read every page in before returning (the cache bounds what stays) |
/// | `MAP_LOCKED` | read every page in and pin it (`ENOMEM` beyond half of the cache) |
/// | `MAP_HUGETLB` (`MAP_HUGE_2MB` or no size) | hugetlbfs 2 MiB pages (`ENOMEM` without free ones) |
/// | `MAP_ANONYMOUS` (fd -1) | zero-filled memory backed by a nameless scratch file |
///
/// Any other flag (`MAP_GROWSDOWN`, `MAP_SYNC`, `MAP_32BIT`, other huge
/// page sizes...) is `EINVAL`, with the reason logged.
const KNOWN_FLAGS: c_int = libc::MAP_PRIVATE
    | libc::MAP_SHARED
    | libc::MAP_FIXED
    | libc::MAP_FIXED_NOREPLACE
    | libc::MAP_NORESERVE
    | libc::MAP_POPULATE
    | libc::MAP_LOCKED
    | libc::MAP_HUGETLB
    | libc::MAP_ANONYMOUS;

/// `MAP_HUGE_2MB`: the huge page size field of the flags (log2 of the
/// size, shifted by `MAP_HUGE_SHIFT`).
const MAP_HUGE_2MB: c_int = 21 << libc::MAP_HUGE_SHIFT;
const MAP_HUGE_MASK: c_int = 0x3f << libc::MAP_HUGE_SHIFT;

/// Validates the request and maps it; returns the mapping's address.
pub(crate) fn map(req: Request, source: Source) -> Result<*mut c_void, Errno> {
    let einval = Errno(libc::EINVAL);
    if req.prot == 0 || req.prot & !(libc::PROT_READ | libc::PROT_WRITE) != 0 {
        return Err(einval);
    }
    let sharing = req.flags & (libc::MAP_PRIVATE | libc::MAP_SHARED);
    let huge_size = req.flags & MAP_HUGE_MASK;
    let unknown = req.flags & !(KNOWN_FLAGS | MAP_HUGE_MASK);
    if unknown != 0 {
        log::warn!("umio: mapping refused: flags {unknown:#x} are not supported (see umio.h)");
        return Err(einval);
    }
    if sharing != libc::MAP_PRIVATE && sharing != libc::MAP_SHARED {
        log::warn!("umio: mapping refused: one of MAP_SHARED and MAP_PRIVATE is needed");
        return Err(einval);
    }
    let hugetlb_flag = req.flags & libc::MAP_HUGETLB != 0;
    if huge_size != 0 && (!hugetlb_flag || huge_size != MAP_HUGE_2MB) {
        log::warn!("umio: mapping refused: only 2 MiB huge pages (MAP_HUGETLB | MAP_HUGE_2MB)");
        return Err(einval);
    }
    let anonymous = req.flags & libc::MAP_ANONYMOUS != 0;
    if anonymous && (!matches!(source, Source::Fd(-1, _)) || req.len.is_none() || req.offset != 0) {
        log::warn!("umio: mapping refused: MAP_ANONYMOUS takes fd -1, offset 0 and a length");
        return Err(einval);
    }
    let fixed = req.flags & libc::MAP_FIXED != 0;
    let noreplace = req.flags & libc::MAP_FIXED_NOREPLACE != 0;
    if (fixed || noreplace)
        && (req.addr.is_null() || !(req.addr as usize).is_multiple_of(MIN_PAGE_SIZE))
    {
        return Err(einval);
    }
    let offset = u64::try_from(req.offset).map_err(|_| einval)?;
    // mmap's rule (umio-core itself takes any offset).
    if !offset.is_multiple_of(MIN_PAGE_SIZE as u64) {
        return Err(einval);
    }
    if let Some(p) = req.page_size {
        umio_core::Builder::check_page_size(p)?;
    }
    let mut opts = MapOptions::new()
        .offset(offset)
        .writable(req.prot & libc::PROT_WRITE != 0);
    if let Some(len) = req.len {
        opts = opts.len(len);
    }
    if let Some(p) = req.page_size {
        opts = opts.page_size(p);
    }
    if let Some(k) = req.prefetch {
        opts = opts.prefetch(k);
    }
    if let Some(p) = req.prefetcher {
        opts = opts.prefetcher(p);
    }
    if let Some(k) = req.promote {
        opts = opts.promote(k);
    }
    if let Some(p) = req.promoter {
        opts = opts.promoter(p);
    }
    if let Some(s) = req.fault_service {
        opts = opts.fault_service(s);
    }
    opts = opts
        .user_access_only(req.user_access_only)
        .survive_process_death(req.survive_process_death);
    let hugetlb = req.hugetlb.or(hugetlb_flag.then_some(false));
    if let Some(fallback) = hugetlb {
        if req
            .page_size
            .is_some_and(|p| p != umio_core::HUGE_PAGE_SIZE)
        {
            return Err(einval);
        }
        opts = opts.hugetlb(fallback);
    }
    if noreplace {
        // MAP_FIXED_NOREPLACE wins over MAP_FIXED, as in mmap.
        opts = opts.fixed_address_noreplace(req.addr as usize);
    } else if fixed {
        // SAFETY: the C caller asked for MAP_FIXED, whose contract (as for
        // mmap) is that whatever it had mapped at [addr, addr + len) is
        // replaced, umio mappings included.
        opts = unsafe { opts.fixed_address(req.addr as usize) };
    }
    // SAFETY (of each `map` and `map_file` below): a C program reaches the
    // mapping through raw pointers only, as with mmap(MAP_SHARED), and no
    // Rust slice of a C API mapping is ever made, so a store that changes
    // under it (another process writing the file, ...) breaks no
    // reference; C sees the bytes change, as under a shared mmap.
    let mapping = match source {
        Source::Fd(-1, _) if anonymous => {
            let len = req.len.unwrap_or(0) as u64;
            let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
            let scratch = umio_backends::FileStore::scratch(None, len).map_err(io)?;
            let rt = config::runtime()?;
            // SAFETY: see above.
            unsafe { rt.map(opts.store(Arc::new(scratch))) }?
        }
        Source::Fd(fd, backend) => {
            let file = dup(fd)?;
            let rt = config::runtime()?;
            let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
            let opts = match backend {
                // Whatever the backend, the bytes are the file's.
                Backend::Uring { .. } | Backend::Dax if req.survive_process_death => {
                    opts.survive_process_death_file(Arc::new(file.try_clone().map_err(io)?))
                }
                _ => opts,
            };
            match backend {
                // SAFETY: see above.
                Backend::Pread => unsafe { rt.map_file(&file, opts) }?,
                Backend::Uring { direct } => {
                    let store =
                        UringStore::new(&file, UringOptions::new().direct(direct)).map_err(io)?;
                    // SAFETY: see above.
                    unsafe { rt.map(opts.store(Arc::new(store))) }?
                }
                Backend::Dax => {
                    let store = Arc::new(DaxStore::new(&file).map_err(io)?);
                    // SAFETY: see above.
                    unsafe { rt.map(opts.store(store)) }?
                }
            }
        }
        Source::Rados(spec) => {
            let store = spec.open(req.len, req.prot & libc::PROT_WRITE != 0)?;
            let rt = config::runtime()?;
            // SAFETY: see above.
            unsafe { rt.map(opts.store(store)) }?
        }
        Source::Store(store) => {
            store.check().map_err(|_| einval)?;
            let rt = config::runtime()?;
            // SAFETY: see above.
            unsafe { rt.map(opts.store(Arc::new(store))) }?
        }
    };
    if fixed {
        // Older mappings the new one replaced in whole.
        registry::forget_unmapped();
    }
    if req.flags & libc::MAP_LOCKED != 0 {
        // Read in and pinned, or refused (the mapping goes with the error).
        if let Err(e) = mapping.pin(0..mapping.len()) {
            log::warn!("umio: MAP_LOCKED mapping refused: {e}");
            return Err(e.into());
        }
    } else if req.flags & libc::MAP_POPULATE != 0 {
        populate(&mapping);
    }
    let addr = registry::insert(mapping);
    log::debug!(
        "umio: mapped {:?} bytes at {addr:#x}, offset {offset}, prot {:#x}, flags {:#x}",
        req.len,
        req.prot,
        req.flags
    );
    Ok(addr as *mut c_void)
}

/// `MAP_POPULATE`: reads every page in before the call returns, a chunk of
/// a quarter of the cache at a time (pinned while it is read, so that a
/// failed read is an error here rather than a SIGBUS in the caller). With
/// a cache smaller than the mapping, the last chunks read stay. A read
/// that fails stops it, logged, as the kernel's populate fails silently:
/// the page's next access reports it.
fn populate(mapping: &umio_core::Mapping) {
    let ps = mapping.page_size();
    let chunk = usize::try_from(mapping.runtime().cache_bytes() / 4)
        .unwrap_or(usize::MAX)
        .max(ps)
        / ps
        * ps;
    let mut at = 0;
    while at < mapping.len() {
        let end = at.saturating_add(chunk).min(mapping.len());
        let filled = mapping.pin(at..end);
        if let Err(e) = mapping.unpin(at..end).and(filled) {
            log::warn!("umio: MAP_POPULATE stopped at byte {at}: {e}");
            return;
        }
        at = end;
    }
}

/// A duplicate of the caller's descriptor, so that the caller keeps its
/// own; `EBADF` if it is not open.
fn dup(fd: c_int) -> Result<File, Errno> {
    if fd < 0 {
        return Err(Errno(libc::EBADF));
    }
    // SAFETY: F_DUPFD_CLOEXEC takes no pointer; on a descriptor that is
    // not open it fails with EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EBADF),
        ));
    }
    // SAFETY: `new` is a descriptor this function just created and that
    // nothing else owns.
    Ok(unsafe { File::from_raw_fd(new) })
}

/// Unmaps `[addr, addr + len)`: `addr` on a page boundary of the mapping
/// containing it, `len` rounded up to whole pages, as `munmap` does.
pub(crate) fn unmap(addr: *mut c_void, len: usize) -> Result<(), Errno> {
    if addr.is_null() || len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let mapping = registry::get(addr)?;
    let range = registry::relative(&mapping, addr, len)?;
    let ps = mapping.page_size();
    if !range.start.is_multiple_of(ps) {
        return Err(Errno(libc::EINVAL));
    }
    let end = range.end.next_multiple_of(ps).min(mapping.len());
    // SAFETY: the C API never makes a Rust slice of a mapping: its
    // callers hold raw addresses, and touching an unmapped range is the C
    // program's error as it is after `munmap` (umio.h, "Threads").
    let result = unsafe { mapping.unmap_range_shared(range.start..end) };
    registry::forget_if_unmapped(&mapping);
    result?;
    log::debug!("umio: unmapped {len} bytes at {addr:p}");
    Ok(())
}

/// UMap's `uunmap`, which removes the region starting at `addr` whatever
/// the length: `addr` the first byte of a mapping and `len` 0 or at least
/// its length unmaps all of it that is still mapped; any other range is
/// [`unmap`]'s.
pub(crate) fn unmap_region_or_range(addr: *mut c_void, len: usize) -> Result<(), Errno> {
    let mapping = registry::get(addr)?;
    if addr.cast() != mapping.as_ptr() || (len != 0 && len < mapping.len()) {
        return unmap(addr, len);
    }
    let mut first_error = Ok(());
    for part in mapped_parts(&mapping) {
        // SAFETY: as in `unmap`.
        let result = unsafe { mapping.unmap_range_shared(part) };
        first_error = first_error.and(result);
    }
    registry::forget_if_unmapped(&mapping);
    first_error?;
    log::debug!("umio: unmapped the region at {addr:p}");
    Ok(())
}

/// The runs of whole pages of `mapping` still mapped, as byte ranges of
/// the mapping (its first page starts at 0 however far into the page the
/// mapping's offset puts its first byte).
fn mapped_parts(mapping: &umio_core::Mapping) -> Vec<std::ops::Range<usize>> {
    let len = mapping.len();
    let mut parts: Vec<std::ops::Range<usize>> = Vec::new();
    if mapping.mapped_bytes() == len {
        parts.push(0..len);
        return parts;
    }
    let ps = mapping.page_size();
    // Bytes of the first page before the mapping's first byte.
    let skew = mapping.offset() as usize % umio_core::MIN_PAGE_SIZE;
    let mut page_start = 0;
    while page_start < len {
        let page_end = ((page_start + skew) / ps + 1) * ps - skew;
        let page_end = page_end.min(len);
        if mapping.is_mapped_at(page_start) {
            match parts.last_mut() {
                Some(last) if last.end == page_start => last.end = page_end,
                _ => parts.push(page_start..page_end),
            }
        }
        page_start = page_end;
    }
    parts
}
