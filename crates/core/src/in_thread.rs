//! Faults served by the thread that takes them
//! ([`FaultService::InThread`](crate::FaultService::InThread)).
//!
//! The runtime's in-thread userfaultfd is opened with `UFFD_FEATURE_SIGBUS`: the
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
//! modes) goes to the action that was there before umio's: its handler,
//! or the default action. An asynchronous one (`kill`, `raise`: `si_code
//! <= 0`) is sent again under that action (so that, by default, the
//! process ends as it would without umio), and umio's handler stays.
//!
//! Signal-context rules kept here: no allocation (slots and their scratch
//! are made when the first in-thread region is mapped), no lock that code
//! outside the handler holds while touching mapped memory, no lazily
//! initialised thread-local, no logging (errors go to `report.rs`'s ring),
//! no unwinding (a panic in the handler aborts the process).
//!
//! Signals: the handler runs with every signal blocked, except while it
//! waits ([`let_signals_in`]: the store's read, a wait for cache space or
//! for a page another thread fills): then it lets in what the interrupted
//! code let in, SIGBUS included. So other signals are not held up by a
//! slow store, and a fault taken while serving one (a store whose
//! `read_at` reads another umio mapping) is served in turn, nested, on a
//! slot of its own; yet no application handler runs while the service
//! holds a lock it could need again (a policy's, say). On a slot's stack
//! the thread's alternate signal stack is off: a signal taken there would
//! otherwise be put at the top of the alternate stack, over the handler's
//! own frames (on a thread's first fault the handler turns it off, then
//! puts it back with `SS_AUTODISARM`, so that the kernel turns it off
//! itself from then on, while a handler runs on it). Nesting is
//! bounded ([`MAX_NESTING`]) and each depth has slots of its own, which
//! cannot all wait for each other: the deepest level needs no further
//! slot. A nested fault on a page its own thread holds busy a frame below
//! (a signal handler that interrupted that very fill) cannot be served
//! and fails (SIGBUS, with a message).

use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::rcu::{self, RcuCell};
use crate::region::{Region, RegionLookup};
use crate::report::{self, Report};
use crate::scratch::Scratch;
use crate::sys::signal::{self, BusFault, ServiceStacks};

/// Service slots: faults served at once in the whole process; a fault
/// beyond them waits for one.
fn slot_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .saturating_mul(8)
        .clamp(64, 1024)
}
/// Faults served inside the service of another on the same thread, at
/// most (a store reading umio memory is one level).
const MAX_NESTING: usize = 3;
/// Slots for each level of nesting.
const NESTED_SLOTS: usize = 8;
/// Each slot's stack: ample for a debug build's fill path.
const STACK_BYTES: usize = 512 << 10;
/// Capacity reserved in each slot's scratch lists, so that they do not
/// grow in a handler.
const SCRATCH_CAPACITY: usize = 512;

struct Slot {
    busy: AtomicBool,
    /// While busy: the faults under this one on its thread, and the slot
    /// of the one right under it (`usize::MAX`: none).
    depth: AtomicUsize,
    under: AtomicUsize,
    /// While busy and serving: the region and page it holds (0 for none).
    region: AtomicU64,
    page: AtomicUsize,
    /// While busy: the signal mask of the code the handler interrupted,
    /// which [`let_signals_in`] puts back while the service waits.
    mask: UnsafeCell<libc::sigset_t>,
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
    /// The largest end of this entry and those before it (see [`find`]).
    reach: usize,
    region: Arc<Region>,
    shared: *const dyn Runtime,
}

/// What the handler asks of the runtime whose region faulted: its shared
/// state's (`Shared`, served in `fault.rs`), named here by what it does.
pub(crate) trait Runtime: Sync {
    /// Counts a fault met while its region is being unmapped.
    fn count_in_thread_fault_while_unmapping(&self);
    /// Serves the fault at `addr` of `region`; false if it failed.
    fn serve_in_thread(
        &self,
        w: &mut Scratch,
        region: &Arc<Region>,
        addr: usize,
        write: Option<bool>,
        thread: u32,
    ) -> bool;
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
    /// Mapped ranges, sorted by start. Runtimes update their regions'
    /// entries on their own, so an entry may be stale (its memory unmapped,
    /// and a region of another runtime mapped there, before its runtime
    /// took it out): see [`find`].
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

/// In a fork child (`fork.rs`): the tables made before the fork describe
/// the parent's regions and go unread (see [`Table::forks`]); slots that
/// the parent's other threads held serve nothing here and are free again.
pub(crate) fn after_fork() {
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
    /// Slots for faults not nested in another (`0..top_slots`), then
    /// [`NESTED_SLOTS`] for each level of nesting.
    slots: Box<[Slot]>,
    top_slots: usize,
    /// Slot `i`'s stack is stack `i` (kept by `handler_stacks.rs`).
    stacks: &'static ServiceStacks,
}

static SERVICE: OnceLock<std::result::Result<Service, i32>> = OnceLock::new();

/// Makes the slots and installs the SIGBUS handler, once per process.
/// Stays installed for the life of the process: uninstalling it could
/// break the chain of a handler installed after it.
pub(crate) fn ensure_installed() -> Result<()> {
    let s = SERVICE.get_or_init(|| {
        let top_slots = slot_count();
        let count = top_slots + MAX_NESTING * NESTED_SLOTS;
        let stacks = crate::handler_stacks::set(ServiceStacks::new(count, STACK_BYTES)?);
        let mut slots = Vec::new();
        for _ in 0..count {
            let mut scratch = Scratch::new();
            scratch.reserve(SCRATCH_CAPACITY);
            scratch.in_signal = true;
            slots.push(Slot {
                busy: AtomicBool::new(false),
                depth: AtomicUsize::new(0),
                under: AtomicUsize::new(usize::MAX),
                region: AtomicU64::new(0),
                page: AtomicUsize::new(0),
                // SAFETY: an all-zero sigset_t is a valid (empty) set.
                mask: UnsafeCell::new(unsafe { std::mem::zeroed() }),
                scratch: UnsafeCell::new(scratch),
            });
        }
        // Installed last, once everything the handler reads exists; the
        // handler reads `SERVICE`, which is set when this closure
        // returns: a SIGBUS in between finds it unset and chains to
        // `previous` through `PREVIOUS`.
        crate::fork::on_child(crate::fork::Slot::InThread, |_, _| after_fork());
        crate::fork::install();
        let previous = signal::install_sigbus(on_sigbus)?;
        let _ = PREVIOUS.set(previous);
        Ok(Service {
            table: RcuCell::new(Table::default()),
            slots: slots.into_boxed_slice(),
            top_slots,
            stacks,
        })
    });
    match s {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::os("installing the SIGBUS handler", *e)),
    }
}

static PREVIOUS: OnceLock<signal::Action> = OnceLock::new();

/// Longest wait of the in-thread service for a page another thread holds
/// busy before it lets the access retry.
pub(crate) const IN_THREAD_WAIT: Duration = Duration::from_millis(1);

fn service() -> Option<&'static Service> {
    SERVICE.get().and_then(|s| s.as_ref().ok())
}

/// Sets the table's entries for `region` of `shared` to its mapped
/// ranges (none once it is unmapped), then waits until no handler can
/// see the entries replaced.
pub(crate) fn set_ranges(shared: &(dyn Runtime + 'static), region: &Arc<Region>, mapped: bool) {
    let Some(s) = service() else { return };
    // Held from reading the region's ranges to publishing them, so that
    // two updates of one region publish in the order they read.
    let w = rcu::writer();
    // A fillers' region is in the table by id only (a handler's eviction
    // may pick its pages); its faults are not the handler's.
    let ranges = if mapped && region.in_thread {
        region.mapped_ranges()
    } else {
        Vec::new()
    };
    let forks = FORKS.load(Ordering::Acquire);
    s.table.update_locked(&w, |old| {
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
                reach: 0,
                region: e.region.clone(),
                shared: e.shared,
            })
            .collect();
        by_addr.extend(ranges.iter().map(|r| Entry {
            start: region.page_addr(r.start),
            end: region.page_addr(r.start) + r.len() * region.page_size,
            reach: 0,
            region: region.clone(),
            shared: shared as *const dyn Runtime,
        }));
        by_addr.sort_unstable_by_key(|e| e.start);
        let mut far = 0;
        for e in &mut by_addr {
            far = far.max(e.end);
            e.reach = far;
        }
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

/// Whether the calling thread, or any other thread of the process now,
/// blocks SIGBUS: it would be killed on its first miss in an in-thread
/// runtime. Other threads are read from `/proc/self/task/*/status`
/// (`SigBlk`); a thread started later is not seen.
///
/// A thread being started or ending blocks every signal for a moment (the
/// C library's `pthread_create` and thread exit), a moment that lasts
/// while it waits for a CPU; so does one running a signal handler whose
/// mask is full (umio's own). Those masks block signal 32 too, one of the
/// C library's own signals, which its `pthread_sigmask` and `sigprocmask`
/// never block (glibc's `SIGCANCEL`): a thread whose mask blocks it is
/// passing, and not counted.
pub(crate) fn a_thread_blocks_sigbus() -> bool {
    signal::sigbus_blocked() || other_thread_blocks_sigbus()
}

fn other_thread_blocks_sigbus() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    let bus = 1u64 << (libc::SIGBUS - 1);
    let internal = 1u64 << (32 - 1);
    tasks
        .flatten()
        .any(|t| signal::blocked_mask(&t.path()).is_some_and(|m| m & bus != 0 && m & internal == 0))
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
    /// The handler's context (the interrupted code's mask and alternate
    /// stack).
    ctx: *mut libc::c_void,
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
        serve(fault, ctx)
    } else {
        Verdict::NotOurs
    };
    if verdict != Verdict::Retry {
        // Sent (`kill`, `raise`, `sigqueue`: `si_code <= 0`), or an
        // action-optional memory error: no access is retried. A write a
        // filler refused (a region of the fillers' in this process) is
        // sent too, but stands for that write's fault, retried on return:
        // ignoring it must not let the write fault for ever.
        // SAFETY: the handler's own `info`.
        let refused = unsafe { signal::is_refused_write(info) };
        let asynchronous = !refused && (fault.code <= 0 || fault.code == libc::BUS_MCEERR_AO);
        // SAFETY: the handler's own arguments.
        unsafe { chain(sig, info, ctx, asynchronous) };
    }
    signal::set_errno(saved_errno);
}

/// Serves a fault at `fault.addr` if it is umio's, on a slot's stack.
fn serve(fault: BusFault, ctx: *mut libc::c_void) -> Verdict {
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
    // Nested in the service of another fault of this thread (whose slot's
    // stack we run on) or not.
    let under = s.stacks.index_of(signal::stack_pointer());
    let depth = under.map_or(0, |u| s.slots[u].depth.load(Ordering::Relaxed) + 1);
    if depth > MAX_NESTING {
        return refuse(Report::NestedTooDeep {
            depth: depth as u64,
        });
    }
    // The one system call of the handler's own (besides the fill's): the
    // thread id, which picks the slot and keys the fault path's per-thread
    // records.
    let thread = signal::gettid();
    let (i, slot) = take_slot(s, thread, depth);
    slot.depth.store(depth, Ordering::Relaxed);
    slot.under
        .store(under.unwrap_or(usize::MAX), Ordering::Relaxed);
    let mut call = Call {
        fault,
        ctx,
        thread,
        slot,
        verdict: Verdict::NotOurs,
    };
    // SAFETY: the slot is ours until released below, so no other code
    // runs on its stack; `serve_on_slot` does not unwind (a panic aborts).
    unsafe {
        signal::call_on_stack(
            s.stacks.top(i),
            serve_on_slot,
            &mut call as *mut Call as *mut u8,
        )
    };
    slot.region.store(0, Ordering::Relaxed);
    slot.busy.store(false, Ordering::Release);
    call.verdict
}

/// A fault the service cannot serve: recorded and failed (`on_sigbus`
/// writes the record to standard error before the thread gets SIGBUS).
fn refuse(r: Report) -> Verdict {
    report::error(r);
    Verdict::Failed
}

/// The entry for `addr`: of those that cover it, the newest region's (an
/// older one's is stale, as the runtime's own table decides:
/// `region::newest_covering`).
fn find(table: &[Entry], addr: usize) -> Option<&Entry> {
    let i = table.partition_point(|e| e.start <= addr);
    crate::region::newest_covering(i, addr, |k| {
        let e = &table[k];
        (e.end, e.reach, e.region.id)
    })
    .map(|k| &table[k])
}

/// Takes a free slot for a fault nested `depth` deep, waiting for one if
/// every slot of that level serves a fault.
fn take_slot(s: &Service, thread: u32, depth: usize) -> (usize, &Slot) {
    let (from, n) = match depth {
        0 => (0, s.top_slots),
        d => (s.top_slots + (d - 1) * NESTED_SLOTS, NESTED_SLOTS),
    };
    let first = thread as usize % n;
    loop {
        for k in 0..n {
            let i = from + (first + k) % n;
            let slot = &s.slots[i];
            if !slot.busy.load(Ordering::Relaxed)
                && slot
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return (i, slot);
            }
        }
        std::thread::yield_now();
    }
}

/// Whether a fault of this thread under the one in `slot` holds `page` of
/// `region` busy.
fn held_below(s: &Service, slot: &Slot, region: u64, page: usize) -> bool {
    let mut under = slot.under.load(Ordering::Relaxed);
    while let Some(u) = s.slots.get(under) {
        if u.region.load(Ordering::Relaxed) == region && u.page.load(Ordering::Relaxed) == page {
            return true;
        }
        under = u.under.load(Ordering::Relaxed);
    }
    false
}

/// Runs on a slot's stack, with the thread's alternate signal stack off
/// (see the module's docs), and serves. The stack is turned off here for
/// a thread's first fault only: it is put back with `SS_AUTODISARM`.
unsafe extern "C" fn serve_on_slot(arg: *mut u8) {
    // SAFETY: `serve` passes its `Call`, alive until we return.
    let call = unsafe { &mut *(arg as *mut Call) };
    // SAFETY: the handler's context, passed on by `serve`.
    let alt = unsafe { signal::alt_stack_of(call.ctx) };
    if alt.is_some() {
        signal::set_alt_stack(&signal::no_alt_stack());
    }
    // SAFETY: the slot is this thread's until `serve` releases it; the
    // context, as above.
    unsafe {
        *(*call.slot).mask.get() = if call.ctx.is_null() {
            signal::full_set()
        } else {
            signal::interrupted_mask(call.ctx)
        };
    }
    call.verdict = serve_here(call);
    if let Some(st) = alt {
        // Back, with `SS_AUTODISARM`: from now on the kernel turns the
        // stack off itself while a handler runs on it (and back on at its
        // return), and this thread's faults need neither call.
        // SAFETY: the handler's context and the stack saved there.
        unsafe { signal::rearm_alt_stack(call.ctx, st) };
    }
}

/// Runs `f` (a wait: a store read, a sleep) with the signals that the code
/// the in-thread handler interrupted let in, if called from the handler;
/// as is otherwise. See the module's docs.
pub(crate) fn let_signals_in<R>(f: impl FnOnce() -> R) -> R {
    let Some(s) = service() else { return f() };
    let Some(i) = s.stacks.index_of(signal::stack_pointer()) else {
        return f();
    };
    // SAFETY: we run on slot `i`'s stack, so the slot is this thread's;
    // its mask was set when the service began.
    signal::set_mask(unsafe { &*s.slots[i].mask.get() });
    let r = f();
    signal::block_all();
    r
}

fn serve_here(call: &mut Call) -> Verdict {
    {
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
            std::thread::sleep(IN_THREAD_WAIT);
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
        let slot = unsafe { &*call.slot };
        let page = region.page_of(call.fault.addr);
        if held_below(s, slot, region.id, page) {
            return refuse(Report::OwnPage {
                region: region.id,
                page: page as u64,
            });
        }
        slot.page.store(page, Ordering::Relaxed);
        slot.region.store(region.id, Ordering::Relaxed);
        // SAFETY: as above.
        let w = unsafe { &mut *slot.scratch.get() };
        if shared.serve_in_thread(w, &region, call.fault.addr, call.fault.write, call.thread) {
            Verdict::Retry
        } else {
            Verdict::Failed
        }
    }
}

/// Whether the previous action, a one-shot handler (`SA_RESETHAND`), has
/// been delivered once: the kernel would have restored the default action.
static PREVIOUS_SPENT: AtomicBool = AtomicBool::new(false);

/// Passes a SIGBUS on to the action umio's replaced, as the kernel would
/// have: its handler, or the default action. A fault (`asynchronous`
/// false) is retried when the handler returns: under the default action
/// (restored) it raises SIGBUS again, which ends the process, as it would
/// have without umio. An asynchronous SIGBUS is not retried: under the
/// default action it is sent again, pending until the handler returns,
/// and ends the process; ignored, it is dropped; umio's handler stays.
///
/// # Safety
/// `sig`, `info` and `ctx` are the arguments of the SIGBUS handler
/// running now.
unsafe fn chain(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    asynchronous: bool,
) {
    let Some(prev) = PREVIOUS.get() else {
        return;
    };
    let spent = prev.resets() && PREVIOUS_SPENT.swap(true, Ordering::AcqRel);
    if prev.is_handler() && !spent {
        // The application's handler runs with the mask it asked for, added
        // to the interrupted code's.
        // SAFETY: a function of the application's; the arguments are
        // forwarded from the caller.
        unsafe { prev.call(sig, info, ctx) };
        // A handler that puts the default action back for a signal it does
        // not own (Rust's standard library's does, expecting a fault to
        // come again) means the default action for an asynchronous one:
        // it is not coming again.
        if signal::sigbus_is_default() {
            // The process ends (the access retried, or the signal sent
            // again) before any thread of umio's logs what the service
            // recorded (why the fault failed): say it now.
            report::drain_to_stderr();
            if asynchronous {
                // SAFETY: the handler's own `info`.
                unsafe { signal::redeliver_sigbus(info) };
            }
        }
        return;
    }
    if asynchronous {
        if prev.is_ignore() && !spent {
            return;
        }
        report::drain_to_stderr();
        signal::set_sigbus_default();
        // SAFETY: the handler's own `info`.
        unsafe { signal::redeliver_sigbus(info) };
        return;
    }
    // A fault cannot be ignored: the kernel's default action ends the
    // process when the access is retried; say why first.
    report::drain_to_stderr();
    signal::set_sigbus_default();
}
