//! The runtime's threads: what each one loops on, how they start, and how
//! they stop.
//!
//! | thread | loop | owns |
//! |---|---|---|
//! | `umio-filler-N` | [`filler_main`]: read fault events, resolve each (`fault.rs`) | its scratch and cache credit |
//! | `umio-evictor-N` | [`evictor_main`]: keep each pool between its watermarks (`evict.rs`) | its scratch |
//! | `umio-prefetch`, `umio-prefetch-1` | [`prefetch_main`]: serve the job queue: read-ahead and explicit prefetch (jobs queued together merged into one batch of reads), promote (`fill.rs`, `promote.rs`) | its scratch |
//! | `umio-autosize` | [`autosize_main`]: follow the memory left (`autosize.rs`) | nothing |
//! | `umio-watch` | [`watch_main`]: log, once each, waits for cache space or write-back that last (`evict.rs`, `report_stalls`) | nothing |
//! | `umio-events` (in-thread service, with remove events) | `remove::events_main`: read remove events (`remove.rs`) | nothing |
//!
//! The fillers start with the first region they serve, `umio-events` with
//! the first in-thread region ([`spawn_service`]); the others with the
//! runtime ([`spawn_all`]).

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::autosize::{MemoryView, PERIOD, next_bound, psi_trigger};
use crate::error::{Error, Result};
use crate::kernel::FaultService;
use crate::scratch::Scratch;
use crate::shared::Shared;
use crate::spin::{ADAPTIVE_SPIN, FillerWait};
use crate::sys::poller::{Poller, Wake};
use crate::sys::uffd::UffdMsg;

thread_local! {
    /// Set on every thread a runtime starts (`spawn_all`).
    static RUNTIME_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of a runtime's own (a filler, an
/// evictor, a prefetch thread...), whatever its name: code that would wait
/// for umio's threads (a write-back at exit, say) must not run on one of
/// them, since the thread may hold the page it would wait for. A thread
/// the application names `umio-*` is not one of them.
pub fn on_runtime_thread() -> bool {
    // A `const` thread-local without a destructor: readable at any time,
    // during thread exit included.
    RUNTIME_THREAD.with(|t| t.get())
}

/// Starts one thread of a runtime, into `threads`.
fn spawn(
    shared: &Arc<Shared>,
    name: String,
    f: fn(Arc<Shared>),
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<()> {
    let s = shared.clone();
    spawn_fn(name, threads, move || f(s))
}

/// Starts a runtime thread running `f`.
fn spawn_fn(
    name: String,
    threads: &mut Vec<JoinHandle<()>>,
    f: impl FnOnce() + Send + 'static,
) -> Result<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            RUNTIME_THREAD.with(|t| t.set(true));
            f()
        })
        .map(|h| threads.push(h))
        .map_err(|e| {
            Error::os(
                "spawning a thread",
                e.raw_os_error().unwrap_or(libc::EAGAIN),
            )
        })
}

/// Starts the threads that read the userfaultfd of `service`, just opened:
/// the fillers; in-thread, the `umio-events` thread if remove events are
/// on (no fault is queued there, but remove events are).
pub(crate) fn spawn_service(
    shared: &Arc<Shared>,
    service: FaultService,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<()> {
    match service {
        FaultService::InThread => {
            if shared.cfg().remove_events {
                spawn(
                    shared,
                    "umio-events".into(),
                    crate::remove::events_main,
                    threads,
                )?;
            }
        }
        _ => {
            let allowed = crate::sys::proc::allowed_cpus();
            let cfg = shared.cfg();
            let pinning =
                Pinning::choose(cfg.pin_fillers, cfg.filler_wait, cfg.fillers, allowed.len());
            if pinning == Pinning::Measured {
                shared.spin().set_pinnable();
            }
            let cpus: Vec<Option<usize>> = (0..cfg.fillers)
                .map(|i| match pinning {
                    Pinning::Never => None,
                    _ => allowed.get(i).copied(),
                })
                .collect();
            shared.set_filler_cpus(cpus.clone());
            for (i, &cpu) in cpus.iter().enumerate() {
                let pin = FillerPin {
                    index: i,
                    cpu,
                    pinning,
                    saved: Vec::new(),
                };
                let s = shared.clone();
                spawn_fn(format!("umio-filler-{i}"), threads, move || {
                    filler_main(s, pin)
                })?;
            }
        }
    }
    Ok(())
}

/// Starts the threads every runtime has (the services' start with their
/// first region: [`spawn_service`]). On failure the threads already
/// started are in `threads`, to be stopped by [`stop`].
pub(crate) fn spawn_all(
    shared: &Arc<Shared>,
    evictors: usize,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<()> {
    let spawn = |name: String, f: fn(Arc<Shared>), threads: &mut Vec<JoinHandle<()>>| {
        spawn(shared, name, f, threads)
    };
    for i in 0..evictors {
        spawn(format!("umio-evictor-{i}"), evictor_main, threads)?;
    }
    if shared.cfg().cache_auto.is_some() {
        spawn("umio-autosize".into(), autosize_main, threads)?;
    }
    spawn("umio-watch".into(), watch_main, threads)?;
    for i in 0..PREFETCH_THREADS {
        let name = match i {
            0 => "umio-prefetch".to_string(),
            i => format!("umio-prefetch-{i}"),
        };
        spawn(name, prefetch_main, threads)?;
    }
    Ok(())
}

/// Threads serving the job queue: two, so that one installs a batch (its
/// `UFFDIO_COPY`s) while the other's reads are in flight, and two streams'
/// windows are read and installed side by side.
const PREFETCH_THREADS: usize = 2;

/// Tells every thread to stop and waits for them.
pub(crate) fn stop(shared: &Shared, threads: Vec<JoinHandle<()>>) {
    shared.begin_shutdown();
    for h in threads.into_iter().chain(shared.take_service_threads()) {
        if h.join().is_err() {
            log::error!("a umio thread panicked");
        }
    }
}

/// Whether fillers are pinned one per CPU (see `Builder::pin_fillers` and
/// `spin.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pinning {
    Never,
    Always,
    /// A mode of the spin tuner's, run when it measures fastest.
    Measured,
}

impl Pinning {
    /// From the configuration and the CPUs the mapping thread may run on:
    /// by default, measured where there is a filler for each of at least
    /// two CPUs and the fillers' waiting is measured too.
    fn choose(asked: Option<bool>, wait: FillerWait, fillers: usize, cpus: usize) -> Pinning {
        match asked {
            Some(true) if cpus > 0 => Pinning::Always,
            Some(_) => Pinning::Never,
            None if cpus >= 2 && fillers >= cpus && wait == FillerWait::Adaptive => {
                Pinning::Measured
            }
            None => Pinning::Never,
        }
    }
}

/// Where one filler runs.
struct FillerPin {
    /// Its index among the fillers.
    index: usize,
    /// Its CPU when pinned (`None`: never pinned).
    cpu: Option<usize>,
    pinning: Pinning,
    /// The CPUs it ran on before it pinned itself, to go back to.
    saved: Vec<usize>,
}

impl FillerPin {
    /// Pins the calling filler to its CPU, or puts back the CPUs it ran
    /// on before. Pinning keeps the CPUs the thread may run on now (the
    /// application's later `sched_setaffinity` or `taskset -a`, a cpuset),
    /// and does not pin to a CPU no longer among them.
    fn apply(&mut self, pin: bool, shared: &Shared) {
        let Some(c) = self.cpu else {
            return;
        };
        if !pin {
            // Not pinned (it could not be): nothing to put back.
            let saved = std::mem::take(&mut self.saved);
            if !saved.is_empty()
                && let Err(e) = crate::sys::proc::set_affinity(&saved)
            {
                log::debug!("umio: unpinning a filler failed: errno {e}");
            }
            return;
        }
        let now = crate::sys::proc::allowed_cpus();
        if !now.contains(&c) {
            return;
        }
        match crate::sys::proc::set_affinity(&[c]) {
            Ok(()) => self.saved = now,
            Err(e) => {
                log::warn!("umio: pinning a filler to CPU {c} failed: errno {e}");
                if self.pinning == Pinning::Always {
                    shared.clear_filler_cpu(self.index);
                }
            }
        }
    }
}

/// A filler: reads fault events and serves them until shutdown, pinned
/// to its CPU or not as `pin` says.
fn filler_main(shared: Arc<Shared>, mut pin: FillerPin) {
    let Some(uffd) = shared.fillers_uffd() else {
        return;
    };
    // Pinned (or switching to it), the filler waits on the set that every
    // event wakes, so that the filler of the faulting thread's CPU is
    // among those woken.
    if pin.pinning == Pinning::Always {
        pin.apply(true, &shared);
    }
    let switches = pin.pinning == Pinning::Measured;
    let poller = match Poller::new(
        uffd.as_raw_fd(),
        shared.shutdown_fd(),
        pin.pinning != Pinning::Never,
    ) {
        Ok(p) => p,
        Err(e) => {
            log::error!("umio filler cannot poll: errno {e}");
            return;
        }
    };
    crate::sys::uffd::mark_reader();
    let mut w = Scratch::new();
    let mut msgs = vec![UffdMsg::default(); shared.cfg().max_fault_events];
    // After handling what one read returned, a filler either goes back to
    // `epoll_wait` (which returns at once if more events are pending: a
    // second, empty `read` per fault would be one system call more) or
    // polls for the next event for a while (`Builder::filler_spin`; by
    // default the runtime measures which is faster, see `spin.rs`).
    let mut polling = false;
    // Pinned as the tuner asked when this filler last looked (a filler
    // that could not pin itself waits on the shared set all the same).
    let mut asked = pin.pinning == Pinning::Always;
    loop {
        if switches && shared.spin().pinned() != asked {
            asked = !asked;
            pin.apply(asked, &shared);
        }
        if poller.wait(!asked) != Wake::Faults {
            break;
        }
        let mut idle_since: Option<Instant> = None;
        loop {
            let read_begin = shared.trace_read_begin();
            let n = match uffd.read_messages(&mut msgs) {
                Ok(n) => n,
                Err(e) => {
                    log::error!("umio: reading fault events failed: errno {e}");
                    0
                }
            };
            if n == 0 {
                let t = *idle_since.get_or_insert_with(Instant::now);
                let spin = match shared.cfg().filler_wait {
                    FillerWait::Fixed(d) => d,
                    FillerWait::Adaptive if polling => ADAPTIVE_SPIN,
                    FillerWait::Adaptive => Duration::ZERO,
                };
                if t.elapsed() >= spin || shared.is_shutting_down() {
                    break;
                }
                // Yield rather than spin: a polling filler that shares a
                // CPU with the faulting thread (the scheduler has not
                // moved it away) must not keep that thread from running.
                std::thread::yield_now();
                continue;
            }
            idle_since = None;
            shared.trace_read(read_begin);
            let read_done = Instant::now();
            // Several events: their misses are set aside while the rest
            // are resolved, then read from the store together
            // (`misses.rs`). One: filled at once, as always.
            w.defer_misses = n > 1;
            let mut deferred_faults = 0;
            for m in &msgs[..n] {
                if let Some((addr, flags)) = m.pagefault() {
                    w.thread = m.thread_id();
                    let before = w.deferred.len();
                    shared.handle_fault(&mut w, addr, flags);
                    if w.deferred.len() > before {
                        deferred_faults += 1;
                    } else {
                        shared.counters().fault_latency.record(read_done.elapsed());
                    }
                } else if let Some((start, end)) = m.remove() {
                    // The misses before it first: the range removed may
                    // hold their pages.
                    shared.fill_deferred(&mut w);
                    shared.handle_remove(start, end);
                }
            }
            w.defer_misses = false;
            shared.fill_deferred(&mut w);
            for _ in 0..deferred_faults {
                shared.counters().fault_latency.record(read_done.elapsed());
            }
            let poll_next = match shared.cfg().filler_wait {
                FillerWait::Fixed(d) => !d.is_zero(),
                FillerWait::Adaptive => {
                    shared.spin().record(n as u32);
                    polling = shared.spin().start(polling);
                    polling
                }
            };
            // Messages this filler took off the descriptor while an ioctl
            // of its own waited for a remove event to be read are served
            // before it sleeps.
            if !poll_next && n < msgs.len() && !uffd.has_stashed() {
                break;
            }
        }
        if polling {
            shared.spin().stop();
            polling = false;
        }
    }
    // Credit (at most `credit_batch` bytes) is kept across wake-ups so that
    // most misses touch no shared counter; it goes back at exit.
    w.credit.release_all(&shared.pool().budget);
}

/// Most bytes of queued jobs the prefetch thread merges into one batch.
const MAX_MERGED_BYTES: usize = 8 << 20;

fn prefetch_main(shared: Arc<Shared>) {
    let mut w = Scratch::new();
    loop {
        let Some(mut job) = shared.jobs().next(|| shared.is_shutting_down()) else {
            // Hints' pages locked busy are released, not left busy.
            for job in shared.jobs().take_all() {
                if job.locked {
                    shared.release_locked(&job.region, &job.pages);
                }
            }
            return;
        };
        let region = job.region.clone();
        if let Some(_g) = region.enter() {
            match job.promote {
                Some(chunk) => shared.promote(&mut w, &region, chunk),
                None if job.locked => shared.fill_locked(&mut w, &region, &job.pages),
                None => {
                    // The windows of every stream queued meanwhile go in
                    // flight together (with what signal handlers asked
                    // for, queued as fetch lists: no allocation there).
                    let max = (MAX_MERGED_BYTES / region.page_size).max(1);
                    shared.jobs().merge_following(&mut job, max);
                    shared.fill_hint(&mut w, &region, &job.pages);
                }
            }
        } else if let (Some(chunk), Some(h)) = (job.promote, &region.huge) {
            // Being unmapped: give the claim back.
            h.abandon(chunk);
        } else if job.locked {
            // Being unmapped: the hint's pages are released.
            shared.release_locked(&region, &job.pages);
        }
        w.credit.release_all(&shared.pool().budget);
    }
}

fn evictor_main(shared: Arc<Shared>) {
    let mut w = Scratch::new();
    // Pages noted by remove events are settled a moment later.
    let mut removals_wait = false;
    while !shared.is_shutting_down() {
        shared.wait_for_eviction_work(if removals_wait {
            crate::remove::SETTLE
        } else {
            Duration::from_millis(100)
        });
        removals_wait = shared.serve_removals();
        shared.evict_round(&mut w);
        // What in-thread fault handlers could not log.
        crate::report::drain();
    }
}

/// The `umio-watch` thread: once a second, logs the waits that have lasted
/// (the waiting threads may be signal handlers, and the evictors may be
/// held by the store that stalls), until the runtime shuts down.
fn watch_main(shared: Arc<Shared>) {
    while !shared.is_shutting_down() {
        let mut fds = [libc::pollfd {
            fd: shared.shutdown_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = crate::sys::poller::poll(&mut fds, 1000);
        shared.report_all_stalls();
    }
}

/// The `umio-autosize` thread: keeps the regular pool's bound at `share`
/// of what the process may use, until the runtime shuts down.
fn autosize_main(shared: Arc<Shared>) {
    let Some(share) = shared.cfg().cache_auto else {
        return;
    };
    let trigger = psi_trigger();
    while !shared.is_shutting_down() {
        let budget = &shared.pool().budget;
        let floor = (4 * shared.largest_page(false) as u64).max(2 * shared.pinned_bytes());
        let view = MemoryView::read();
        if let Some(target) = next_bound(&view, share, budget.used(), budget.limit(), floor)
            && let Err(e) = shared.set_pool_limit(false, target)
        {
            log::debug!("umio: automatic cache bound {target}: {e}");
        }
        let mut fds = [
            libc::pollfd {
                fd: shared.shutdown_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: trigger.as_ref().map_or(-1, |t| t.as_raw_fd()),
                events: libc::POLLPRI,
                revents: 0,
            },
        ];
        let _ = crate::sys::poller::poll(&mut fds, PERIOD.as_millis() as i32);
    }
}
