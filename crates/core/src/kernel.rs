//! The kernel's userfaultfd: which faults a runtime receives ([`UffdMode`]),
//! what the kernel offers ([`KernelFeatures`], probed once per process), and
//! opening a descriptor in a mode.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::sys::pagemap::Pagemap;
use crate::sys::uffd::{OpenFailure, Uffd, feature};

/// How a region's faults are served: per region
/// ([`MapOptions::fault_service`](crate::MapOptions::fault_service)), with
/// the runtime's setting ([`Builder::fault_service`](crate::Builder::fault_service),
/// `UMIO_FAULT_SERVICE`) as the default of regions that do not choose. A
/// runtime opens one userfaultfd per service it uses, the first time a
/// region of that service is mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FaultService {
    /// Filler threads read fault events from the userfaultfd and resolve
    /// them; the faulting thread sleeps in the kernel meanwhile (two
    /// hand-offs per miss). Faults raised by the kernel on a mapping's
    /// behalf (a mapped buffer passed to `read(2)`) are served too, in full
    /// userfaultfd mode.
    Fillers,
    /// The faulting thread serves its own fault in a SIGBUS handler
    /// (`UFFD_FEATURE_SIGBUS`): no hand-off, and every application thread
    /// has its own miss in flight. Its one rule: a non-resident mapped
    /// buffer passed to a system call fails it with `EFAULT` (the kernel
    /// raises no signal for its own accesses); pass it through
    /// [`Mapping::read_into`](crate::Mapping::read_into) and
    /// [`Mapping::write_from`](crate::Mapping::write_from), or fault it in
    /// first ([`Mapping::populate`](crate::Mapping::populate)). A map is
    /// refused while a thread of the process blocks SIGBUS; a thread that
    /// blocks it later is killed by the kernel on its first miss.
    InThread,
    /// The default: [`InThread`](FaultService::InThread) where nothing is
    /// lost by it, [`Fillers`](FaultService::Fillers) otherwise. Nothing is
    /// lost where the runtime's userfaultfd is user-mode-only (system calls
    /// on non-resident buffers fail either way), or where the program
    /// declares the region private to user code
    /// ([`MapOptions::user_access_only`](crate::MapOptions::user_access_only));
    /// it also takes a kernel with `UFFD_FEATURE_SIGBUS`, an evictor, and
    /// no thread blocking SIGBUS when the region is mapped.
    #[default]
    Auto,
}

impl FaultService {
    /// By name, any case: `fillers`, `in-thread` (also `in_thread`,
    /// `inthread`, `sigbus`) or `auto`, as `UMIO_FAULT_SERVICE` takes them.
    pub fn from_name(name: &str) -> Option<FaultService> {
        match name.trim().to_ascii_lowercase().as_str() {
            "fillers" | "filler" | "threads" => Some(FaultService::Fillers),
            "in-thread" | "in_thread" | "inthread" | "sigbus" => Some(FaultService::InThread),
            "auto" => Some(FaultService::Auto),
            _ => None,
        }
    }

    /// The name [`from_name`](FaultService::from_name) takes back.
    pub fn name(&self) -> &'static str {
        match self {
            FaultService::Fillers => "fillers",
            FaultService::InThread => "in-thread",
            FaultService::Auto => "auto",
        }
    }
}

impl std::str::FromStr for FaultService {
    type Err = Error;
    fn from_str(s: &str) -> Result<FaultService> {
        FaultService::from_name(s).ok_or(Error::InvalidArgument(
            "a fault service is fillers, in-thread or auto",
        ))
    }
}

/// Which page faults a runtime's userfaultfd receives: see
/// [`Builder::uffd_mode`](crate::Builder::uffd_mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UffdMode {
    /// Full mode where this process may open a full-mode userfaultfd,
    /// user-mode-only otherwise. The default.
    #[default]
    Auto,
    /// Full mode, or [`Runtime::build`](crate::Builder::build) fails with
    /// [`Error::FullModeUnavailable`], which says what to change.
    Full,
    /// User-mode-only (`UFFD_USER_MODE_ONLY`) even where full mode is
    /// allowed: faults raised by the kernel on a mapping's behalf (a
    /// non-resident mapped buffer passed to `read(2)` or `write(2)`) fail
    /// the system call with `EFAULT` instead of being served.
    UserModeOnly,
}

impl UffdMode {
    /// By name, any case: `auto`, `full`, or `user` (also `user-mode-only`,
    /// `user_mode_only`), as `UMIO_UFFD_MODE` takes them.
    pub fn from_name(name: &str) -> Option<UffdMode> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(UffdMode::Auto),
            "full" => Some(UffdMode::Full),
            "user" | "user-mode-only" | "user_mode_only" => Some(UffdMode::UserModeOnly),
            _ => None,
        }
    }

    /// The name [`from_name`](UffdMode::from_name) takes back.
    pub fn name(&self) -> &'static str {
        match self {
            UffdMode::Auto => "auto",
            UffdMode::Full => "full",
            UffdMode::UserModeOnly => "user",
        }
    }
}

/// How a runtime learns which pages were written: see
/// [`Builder::dirty_tracking`](crate::Builder::dirty_tracking).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirtyTracking {
    /// [`Sync`](DirtyTracking::Sync) for now, the default: asynchronous
    /// tracking does not yet keep every guarantee of the synchronous path
    /// (see [`Async`](DirtyTracking::Async)), so it is asked for by name.
    #[default]
    Auto,
    /// Clean pages are write-protected, and the first write to one is a
    /// write-protect fault served by umio (fillers or in-thread), which
    /// counts the page dirty before the write goes on.
    Sync,
    /// `UFFD_FEATURE_WP_ASYNC`: the kernel resolves the first write to a
    /// clean page itself, as it does for `mmap` (no round trip to user
    /// space), and umio learns which pages were written with
    /// `PAGEMAP_SCAN` when it needs to: before a flush or write-back, before
    /// it evicts or unmaps pages, and on each evictor round (the dirty
    /// count, and so the dirty limit, lags the writes by up to a round).
    /// [`Builder::build`](crate::Builder::build) fails with
    /// [`Error::Unsupported`] where the kernel lacks it.
    ///
    /// Not yet the default, because of what it does not keep: after a
    /// failed write-back a write to a resident clean page is let through
    /// (it stays dirty and the next flush reports the error) instead of
    /// failing with SIGBUS; a store that keeps failing can fill the cache
    /// with dirty pages readers then wait behind; and where an eviction
    /// cannot take its victims out with `UFFDIO_MOVE` (hugetlb regions,
    /// promoted 2 MiB ranges, runtimes with remove events, kernels before
    /// 6.8) a write landing between the last scan and the drop is lost, as
    /// is one landing while the preload shim hands a file mapped twice to
    /// the kernel.
    Async,
}

impl DirtyTracking {
    /// By name, any case: `auto`, `sync` or `async`, as
    /// `UMIO_DIRTY_TRACKING` takes them.
    pub fn from_name(name: &str) -> Option<DirtyTracking> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(DirtyTracking::Auto),
            "sync" => Some(DirtyTracking::Sync),
            "async" => Some(DirtyTracking::Async),
            _ => None,
        }
    }

    /// The name [`from_name`](DirtyTracking::from_name) takes back.
    pub fn name(&self) -> &'static str {
        match self {
            DirtyTracking::Auto => "auto",
            DirtyTracking::Sync => "sync",
            DirtyTracking::Async => "async",
        }
    }
}

/// What the kernel's userfaultfd offers, probed once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    bits: u64,
    user_mode_only: bool,
}

impl KernelFeatures {
    /// These features as a descriptor opened user-mode-only (or not) has them.
    pub(crate) fn with_user_mode_only(self, user_mode_only: bool) -> KernelFeatures {
        KernelFeatures {
            user_mode_only,
            ..self
        }
    }
    /// The raw `UFFDIO_API` feature mask.
    pub fn bits(&self) -> u64 {
        self.bits
    }
    /// From [`kernel_features`]: this process may not open a full-mode
    /// userfaultfd, so runtimes in [`UffdMode::Auto`] serve user-mode
    /// faults only. From [`Runtime::kernel_features`](crate::Runtime::kernel_features): this runtime's
    /// userfaultfd is user-mode-only. Then a non-resident page of a
    /// mapping passed to a system call (`read(2)` into it, `write(2)` from
    /// it) fails the call with `EFAULT` (or shortens it), and so does a
    /// system call writing into a clean page of a writable mapping; see
    /// [`Mapping::pin`](crate::Mapping::pin) for the way around it.
    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }
    /// Write-protect faults on anonymous memory: needed by writable mappings.
    pub fn write_protect(&self) -> bool {
        self.bits & feature::PAGEFAULT_FLAG_WP != 0
    }
    /// `UFFDIO_POISON`: failed reads raise SIGBUS in the faulting thread.
    pub fn poison(&self) -> bool {
        self.bits & feature::POISON != 0
    }
    /// Asynchronous write-protection (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7+)
    /// and `PAGEMAP_SCAN` to read it: what [`DirtyTracking::Async`] needs.
    pub fn async_dirty_tracking(&self) -> bool {
        self.bits & feature::WP_ASYNC != 0 && pagemap_scan_works()
    }
    /// Names of the features present.
    pub fn names(&self) -> Vec<&'static str> {
        feature::NAMES
            .iter()
            .filter(|(b, _)| self.bits & b != 0)
            .map(|&(_, n)| n)
            .collect()
    }
}

/// Probes the kernel once (on a throw-away descriptor: `UFFDIO_API` may be
/// called once per descriptor) and remembers the answer.
///
/// It tries a full-mode descriptor first and a user-mode-only one second
/// ([`KernelFeatures::user_mode_only`] says which it got); it fails only
/// if neither can be opened.
pub fn kernel_features() -> Result<KernelFeatures> {
    static PROBE: OnceLock<Result<KernelFeatures>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let (fd, user_mode_only) = open_uffd(UffdMode::Auto)?;
            let bits = fd.api(0).map_err(|e| Error::os("UFFDIO_API", e))?;
            Ok(KernelFeatures {
                bits,
                user_mode_only,
            })
        })
        .clone()
}

/// The `UFFDIO_API` features a runtime asks for on the userfaultfd of
/// `service` (one descriptor per service: `Shared::service_uffd`), of
/// those the kernel offers (`offered`): write-protect faults, poison and
/// thread ids for both, remove events if on, and `UFFD_FEATURE_SIGBUS`
/// for the in-thread service's only (a fault on its ranges raises SIGBUS
/// in the faulting thread; a kernel access to one fails with `EFAULT`).
pub(crate) fn service_features(
    service: FaultService,
    offered: u64,
    remove_events: bool,
    wp_async: bool,
) -> u64 {
    let mut wanted = feature::PAGEFAULT_FLAG_WP | feature::POISON | feature::THREAD_ID;
    if service == FaultService::InThread {
        wanted |= feature::SIGBUS;
    }
    if remove_events {
        wanted |= feature::EVENT_REMOVE;
    }
    if wp_async {
        // The kernel needs `UFFD_FEATURE_WP_UNPOPULATED` beside it for
        // asynchronous write-protection of anonymous memory.
        wanted |= feature::WP_ASYNC | feature::WP_UNPOPULATED;
    }
    offered & wanted
}

/// Opens a userfaultfd (user-mode-only or not) and enables `features` on
/// it (`UFFDIO_API`, once per descriptor): the one place a runtime's
/// descriptors are made and configured.
pub(crate) fn open_configured(user_mode_only: bool, features: u64) -> Result<Uffd> {
    let (uffd, _) = open_uffd(if user_mode_only {
        UffdMode::UserModeOnly
    } else {
        UffdMode::Full
    })?;
    configure(&uffd, features)?;
    Ok(uffd)
}

/// `UFFDIO_API` with `features` on a descriptor just opened.
pub(crate) fn configure(uffd: &Uffd, features: u64) -> Result<()> {
    uffd.api(features)
        .map(|_| ())
        .map_err(|e| Error::os("UFFDIO_API", e))
}

/// Opens a userfaultfd in `mode`; returns it and whether it is
/// user-mode-only.
pub(crate) fn open_uffd(mode: UffdMode) -> Result<(Uffd, bool)> {
    let unavailable = |f: OpenFailure| Error::UffdUnavailable {
        syscall_errno: f.syscall_errno,
        device_errno: f.device_errno,
    };
    match mode {
        UffdMode::UserModeOnly => Uffd::open(true).map(|u| (u, true)).map_err(unavailable),
        UffdMode::Full => {
            Uffd::open(false)
                .map(|u| (u, false))
                .map_err(|f| Error::FullModeUnavailable {
                    syscall_errno: f.syscall_errno,
                    device_errno: f.device_errno,
                })
        }
        UffdMode::Auto => match Uffd::open(false) {
            Ok(u) => Ok((u, false)),
            // The errnos of full mode say what to change; those of
            // user-mode-only (EINVAL before Linux 5.11) say less.
            Err(full) => Uffd::open(true)
                .map(|u| (u, true))
                .map_err(|_| unavailable(full)),
        },
    }
}

/// Whether `/proc/self/pagemap` takes `PAGEMAP_SCAN` (Linux 6.7+), probed
/// once per process.
fn pagemap_scan_works() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| Pagemap::open().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            FaultService::Fillers,
            FaultService::InThread,
            FaultService::Auto,
        ] {
            assert_eq!(FaultService::from_name(s.name()), Some(s));
            assert_eq!(s.name().parse::<FaultService>().unwrap(), s);
        }
        assert_eq!(
            FaultService::from_name(" In_Thread "),
            Some(FaultService::InThread)
        );
        assert!(FaultService::from_name("threadz").is_none());
    }
}
