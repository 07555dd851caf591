//! Faults served by the thread that takes them ([`FaultService::InThread`]).
//!
//! The runtime's userfaultfd is opened with `UFFD_FEATURE_SIGBUS`: the
//! kernel queues no event for a fault on a registered range but sends
//! SIGBUS to the faulting thread. Umio's process-wide handler
//! ([`on_sigbus`]) finds the region in a table readable from a signal
//! handler ([`Table`], under [`rcu`]), takes a service slot (a stack and a
//! [`Scratch`] made in advance), switches to the slot's stack and serves
//! the fault there with the same code a filler runs (`fault.rs`,
//! `fill.rs`): reservation, store read, `UFFDIO_COPY`. Then it returns and
//! the access is retried, on the same thread and CPU: no hand-off.
//!
//! A SIGBUS that is not umio's (another address, or a poisoned page's
//! `BUS_MCEERR_AR`, which is how a failed read reaches the thread in both
//! modes) goes to the handler that was there before umio's, or to the
//! default action.
//!
//! Signal-context rules kept here: no allocation (slots and their scratch
//! are made when the first in-thread runtime starts), no lock that code
//! outside the handler holds while touching mapped memory, no lazily
//! initialised thread-local, every signal blocked while a fault is served.

use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::rcu::{self, RcuCell};
use crate::region::{Region, RegionLookup};
use crate::scratch::Scratch;
use crate::shared::Shared;
use crate::sys::signal::{self, BusFault, ServiceStack};

/// How a runtime serves its faults: see [`Builder::fault_service`](crate::Builder::fault_service).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FaultService {
    /// Filler threads read fault events from the userfaultfd and resolve
    /// them; the faulting thread sleeps in the kernel meanwhile (two
    /// hand-offs per miss). Faults raised by the kernel on a mapping's
    /// behalf (a mapped buffer passed to `read(2)`) are served too, in full
    /// userfaultfd mode.
    #[default]
    Fillers,
    /// The faulting thread serves its own fault in a SIGBUS handler
    /// (`UFFD_FEATURE_SIGBUS`): no hand-off, and every application thread
    /// has its own miss in flight. Its one rule: a non-resident mapped
    /// buffer passed to a system call fails it with `EFAULT` (the kernel
    /// raises no signal for its own accesses); fault the buffer in first
    /// ([`Mapping::populate`](crate::Mapping::populate)). A thread that blocks
    /// SIGBUS is killed by the kernel on its first miss.
    InThread,
    /// [`InThread`](FaultService::InThread) where nothing is lost by it
    /// (the runtime's userfaultfd is user-mode-only, so system calls on
    /// non-resident buffers fail either way) and the kernel offers
    /// `UFFD_FEATURE_SIGBUS`; [`Fillers`](FaultService::Fillers) otherwise.
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

/// Service slots: faults served at once in the whole process; a fault
/// beyond them waits for one.
fn slot_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .saturating_mul(8)
        .clamp(64, 1024)
}
/// Each slot's stack: ample for a debug build's fill path.
const STACK_BYTES: usize = 512 << 10;
/// Capacity reserved in each slot's scratch lists, so that they do not
/// grow in a handler.
const SCRATCH_CAPACITY: usize = 512;

struct Slot {
    busy: AtomicBool,
    stack: ServiceStack,
    scratch: UnsafeCell<Scratch>,
}

// SAFETY: a slot's scratch is used only by the thread that set `busy`.
unsafe impl Sync for Slot {}
// SAFETY: the scratch's raw pointers (iovecs) point to nothing it owns.
unsafe impl Send for Slot {}

/// One address range of a region, and its runtime.
struct Entry {
    start: usize,
    end: usize,
    region: Arc<Region>,
    shared: *const Shared,
}

// SAFETY: `shared` points to a runtime's shared state, which outlives its
// regions' entries (a region leaves the table before its runtime can
// drop); it is only read.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

/// The in-thread runtimes' regions, as a signal handler reads them.
#[derive(Default)]
struct Table {
    /// The [`FORKS`] count the table was made in: a fork child's table
    /// from before the fork is its parent's, whose regions, runtimes and
    /// userfaultfd the child must not use (its regions are not inherited,
    /// so a child's own mapping could take their addresses).
    forks: u32,
    /// Mapped ranges, sorted by address.
    by_addr: Vec<Entry>,
    /// Regions, by id (ids are unique across runtimes: see
    /// `Shared::next_region_id`).
    by_id: Vec<Arc<Region>>,
}

impl RegionLookup for Table {
    fn region(&self, id: u64) -> Option<&Arc<Region>> {
        let i = self.by_id.binary_search_by_key(&id, |r| r.id).ok()?;
        Some(&self.by_id[i])
    }
}

/// Forks this process has made since the service was installed (counted
/// in each child by [`after_fork`]).
static FORKS: AtomicU32 = AtomicU32::new(0);

/// In a fork child: the tables made before the fork describe the
/// parent's regions and go unread (see [`Table::forks`]); slots that the
/// parent's other threads held serve nothing here and are free again.
extern "C" fn after_fork() {
    FORKS.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = service() {
        for slot in s.slots.iter() {
            slot.busy.store(false, Ordering::Release);
        }
    }
}

/// The table's entries if it was made in this process (not a fork's
/// parent).
fn entries(t: &Table) -> &[Entry] {
    if t.forks == FORKS.load(Ordering::Acquire) {
        &t.by_addr
    } else {
        &[]
    }
}

/// Runs `f` on the in-thread regions (in a signal handler too).
pub(crate) fn with_regions<R>(f: impl FnOnce(&dyn RegionLookup) -> R) -> R {
    match service() {
        Some(s) => s.table.with(|t| {
            if t.forks == FORKS.load(Ordering::Acquire) {
                f(t)
            } else {
                f(&Table::default())
            }
        }),
        None => f(&Table::default()),
    }
}

/// The process-wide state of the in-thread service, made when the first
/// in-thread runtime starts.
struct Service {
    /// Every in-thread runtime's mapped ranges and regions.
    table: RcuCell<Table>,
    slots: Box<[Slot]>,
    /// Serialises table updates with the reads they start from.
    writer: Mutex<()>,
}

static SERVICE: OnceLock<std::result::Result<Service, i32>> = OnceLock::new();

/// Makes the slots and installs the SIGBUS handler, once per process.
/// Stays installed for the life of the process: uninstalling it could
/// break the chain of a handler installed after it.
pub(crate) fn ensure_installed() -> Result<()> {
    let s = SERVICE.get_or_init(|| {
        let mut slots = Vec::new();
        for _ in 0..slot_count() {
            let mut scratch = Scratch::new();
            scratch.reserve(SCRATCH_CAPACITY);
            scratch.in_signal = true;
            slots.push(Slot {
                busy: AtomicBool::new(false),
                stack: ServiceStack::new(STACK_BYTES)?,
                scratch: UnsafeCell::new(scratch),
            });
        }
        // Installed last, once everything the handler reads exists; the
        // handler reads `SERVICE`, which is set when this closure
        // returns: a SIGBUS in between finds it unset and chains to
        // `previous` through `PREVIOUS`.
        signal::at_fork_child(after_fork)?;
        let previous = signal::install_sigbus(on_sigbus)?;
        let _ = PREVIOUS.set(previous);
        Ok(Service {
            table: RcuCell::new(Table::default()),
            slots: slots.into_boxed_slice(),
            writer: Mutex::new(()),
        })
    });
    match s {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::os("installing the SIGBUS handler", *e)),
    }
}

static PREVIOUS: OnceLock<signal::Action> = OnceLock::new();

fn service() -> Option<&'static Service> {
    SERVICE.get().and_then(|s| s.as_ref().ok())
}

/// Sets the table's entries for `region` of `shared` to its mapped
/// ranges (none once it is unmapped), then waits until no handler can
/// see the entries replaced.
pub(crate) fn set_ranges(shared: &Shared, region: &Arc<Region>, mapped: bool) {
    let Some(s) = service() else { return };
    let _w = s.writer.lock().unwrap_or_else(|e| e.into_inner());
    let ranges = if mapped {
        region.mapped_ranges()
    } else {
        Vec::new()
    };
    let forks = FORKS.load(Ordering::Acquire);
    s.table.update(|old| {
        // A table from before a fork (the parent's) is dropped whole, its
        // regions leaked: their stores and page tables are the parent's
        // state, copied into this child, which never uses them.
        let current = old.forks == forks;
        if !current {
            for r in &old.by_id {
                std::mem::forget(r.clone());
            }
        }
        let mut by_addr: Vec<Entry> = entries(old)
            .iter()
            .filter(|e| !Arc::ptr_eq(&e.region, region))
            .map(|e| Entry {
                start: e.start,
                end: e.end,
                region: e.region.clone(),
                shared: e.shared,
            })
            .collect();
        by_addr.extend(ranges.iter().map(|r| Entry {
            start: region.page_addr(r.start),
            end: region.page_addr(r.start) + r.len() * region.page_size,
            region: region.clone(),
            shared: shared as *const Shared,
        }));
        by_addr.sort_unstable_by_key(|e| e.start);
        let mut by_id: Vec<Arc<Region>> = old
            .by_id
            .iter()
            .filter(|r| current && !Arc::ptr_eq(r, region))
            .cloned()
            .collect();
        if mapped {
            by_id.push(region.clone());
        }
        by_id.sort_unstable_by_key(|r| r.id);
        Table {
            forks,
            by_addr,
            by_id,
        }
    });
}

/// Whether the calling thread blocks SIGBUS: it would be killed on its
/// first miss in an in-thread runtime.
pub(crate) fn caller_blocks_sigbus() -> bool {
    signal::sigbus_blocked()
}

/// What the service made of a SIGBUS.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Served (or being served by another thread): retry the access.
    Retry,
    /// Not umio's: chain.
    NotOurs,
    /// Umio's, and its read failed: the thread gets SIGBUS as an `mmap`
    /// user's would (chained, like a foreign one).
    Failed,
}

struct Call {
    fault: BusFault,
    /// The faulting thread's id.
    thread: u32,
    slot: *const Slot,
    verdict: Verdict,
}

/// The SIGBUS handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // The kernel's `errno` of this thread, saved and restored so that the
    // interrupted code does not see ours.
    let saved_errno = signal::errno_value();
    // SAFETY: the handler's own arguments.
    let fault = unsafe { signal::bus_fault(info, ctx) };
    let verdict = if fault.code == libc::BUS_ADRERR {
        serve(fault)
    } else {
        Verdict::NotOurs
    };
    if verdict != Verdict::Retry {
        // SAFETY: the handler's own arguments.
        unsafe { chain(sig, info, ctx) };
    }
    signal::set_errno(saved_errno);
}

/// Serves a fault at `fault.addr` if it is umio's, on a slot's stack.
fn serve(fault: BusFault) -> Verdict {
    let Some(s) = service() else {
        return Verdict::NotOurs;
    };
    // Cheap refusal of foreign faults, before taking a slot.
    {
        let g = rcu::read();
        if find(entries(s.table.load(&g)), fault.addr).is_none() {
            return Verdict::NotOurs;
        }
    }
    // The one system call of the handler's own (besides the fill's): the
    // thread id, which picks the slot and keys the fault path's per-thread
    // records.
    let thread = signal::gettid();
    let slot = take_slot(s, thread);
    let mut call = Call {
        fault,
        thread,
        slot,
        verdict: Verdict::NotOurs,
    };
    // SAFETY: the slot is ours until released below, so no other thread
    // runs on its stack; `serve_on_slot` catches panics.
    unsafe {
        signal::call_on_stack(
            &(*slot).stack,
            serve_on_slot,
            &mut call as *mut Call as *mut u8,
        )
    };
    // SAFETY: taken above.
    unsafe { (*slot).busy.store(false, Ordering::Release) };
    call.verdict
}

/// Whether the calling thread is inside umio's in-thread fault handler,
/// serving a fault: the store reads it makes there call the C library
/// (`pread`, say), and a library that interposes those calls (an
/// `LD_PRELOAD` shim such as `libumio_preload.so`) must send them straight
/// to the kernel: a signal handler may take none of its locks. Signal-safe,
/// with no system call and no thread-local storage: the handler runs on
/// stacks of its own, and this asks whether the caller's stack is one of
/// them. Always `false` where no runtime serves faults in-thread.
pub fn in_fault_handler() -> bool {
    let Some(s) = service() else {
        return false;
    };
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    s.slots.iter().any(|slot| slot.stack.contains(sp))
}

fn find(table: &[Entry], addr: usize) -> Option<&Entry> {
    let i = table.partition_point(|e| e.start <= addr);
    let e = table.get(i.checked_sub(1)?)?;
    (addr < e.end).then_some(e)
}

/// Takes a free slot, waiting for one if every slot serves a fault.
fn take_slot(s: &Service, thread: u32) -> *const Slot {
    let n = s.slots.len();
    let first = thread as usize % n;
    loop {
        for k in 0..n {
            let slot = &s.slots[(first + k) % n];
            if !slot.busy.load(Ordering::Relaxed)
                && slot
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return slot;
            }
        }
        std::thread::yield_now();
    }
}

/// Runs on a slot's stack.
unsafe extern "C" fn serve_on_slot(arg: *mut u8) {
    // SAFETY: `serve` passes its `Call`, alive until we return.
    let call = unsafe { &mut *(arg as *mut Call) };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(s) = service() else {
            return Verdict::NotOurs;
        };
        let g = rcu::read();
        let Some(e) = find(entries(s.table.load(&g)), call.fault.addr) else {
            return Verdict::NotOurs;
        };
        // SAFETY: entries outlive the read section; their runtime outlives
        // them (and, below, the region outlives the section).
        let shared = unsafe { &*e.shared };
        // The table's handle of the region, borrowed past the read section
        // without a count of its own, so that nothing here can drop the
        // last one (a drop frees memory: not in a signal handler).
        // SAFETY: `e.region` is a live `Arc` while `g` lives; the handle
        // is never dropped (`ManuallyDrop`), and is used after `g` only
        // while the region is entered (see below).
        let region = ManuallyDrop::new(unsafe { Arc::from_raw(Arc::as_ptr(&e.region)) });
        let Some(_entered) = region.enter() else {
            // Counted while the read section keeps the runtime alive; then
            // a moment for the unmap to unregister the range (the retry
            // then fails as an access to unmapped memory does), outside it.
            shared.count_in_thread_fault_while_unmapping();
            drop(g);
            std::thread::sleep(crate::fault::IN_THREAD_WAIT);
            return Verdict::Retry;
        };
        // The fault is served outside the read section. Serving may wait
        // long (for cache space, as long as the store takes), and every RCU
        // writer in the process (a map, an unmap, new advice) waits for
        // every read section: an unmap that frees its cache space only
        // after its grace period (`Shared::unmap`) would wait for this
        // fault, which waits for that space: for ever. Entered, the region needs no read section to stay
        // alive: its unmap waits for `_entered` (`Region::close`) before
        // it takes the region out of the table, which until then holds an
        // `Arc` of it; its runtime outlives it.
        drop(g);
        // SAFETY: the slot is this thread's until `serve` releases it.
        let w = unsafe { &mut *(*call.slot).scratch.get() };
        if shared.serve_in_thread(w, &region, call.fault.addr, call.fault.write, call.thread) {
            Verdict::Retry
        } else {
            Verdict::Failed
        }
    }));
    // A panic in the fault path (a bug) leaves the access to the previous
    // handler or the default action rather than abort the process here.
    call.verdict = run.unwrap_or(Verdict::NotOurs);
}

/// Passes a SIGBUS on to the handler umio's replaced, as the kernel would
/// have: its own function, or the default action (restored, so that the
/// retried access raises it).
///
/// # Safety
/// `sig`, `info` and `ctx` are the arguments of the SIGBUS handler
/// running now.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREVIOUS.get() else {
        return;
    };
    if !prev.is_handler() {
        // The access is retried and faults again: now the kernel's default
        // action for SIGBUS (it cannot be ignored for a fault) ends the
        // process, as it would have without umio.
        prev.restore_sigbus();
        return;
    }
    // The application's handler runs with the mask it asked for, added to
    // the interrupted code's.
    // SAFETY: a function of the application's; the arguments are
    // forwarded from the caller.
    unsafe { prev.call(sig, info, ctx) };
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
