//! Remove events (`Builder::remove_events`): the application's own
//! `madvise(MADV_DONTNEED)`, `MADV_FREE` or `MADV_REMOVE` on umio memory,
//! called directly rather than through `Mapping::advise`.
//!
//! With `UFFD_FEATURE_EVENT_REMOVE` the kernel queues a `UFFD_EVENT_REMOVE`
//! (start, end) on the userfaultfd before it touches the pages, and the
//! `madvise` caller sleeps until a reader has read the message; it then
//! goes on, on its own time (umio cannot see when): `MADV_DONTNEED` drops
//! the pages, `MADV_FREE` only marks them free, and the kernel takes them
//! later under memory pressure, or never if the program writes them first.
//! The event does not say which. So a reader only notes the pages umio
//! holds resident in the range, and an evictor settles them a moment
//! later ([`SETTLE`]): a page whose memory is gone (`mincore`) is dropped
//! from umio's cache as `Advice::DontNeed` drops it (Empty, its dirty
//! state and cache space released, no write-back): its next access is an
//! ordinary miss that reads the store. A page still there (`MADV_FREE`)
//! stays as it is, bytes and state: a write after `MADV_FREE` keeps the
//! page, as the kernel keeps it. Meanwhile a thread that faults on a
//! noted page waits for it to be settled. A page the kernel takes later
//! (a freed page under memory pressure) is found by the fault path as
//! before (`progress.rs`), and dropped and read again whether clean or
//! dirty: with remove events on, only the program's own `madvise` drops
//! umio pages behind umio's back.
//!
//! umio's own drops are `madvise` calls too, and raise the same events.
//! They are recognised by their pages: a thread that drops pages holds
//! every one of them busy (evicting, dropping, unmapping), and a reader
//! hands on only pages it finds resident and unlocked. What keeps a
//! `madvise` caller from waiting forever is that no reader ever waits on
//! one: a reader (a filler; in-thread, the `umio-events` thread) never
//! drops pages itself (no direct reclaim: a miss that finds the cache
//! full lets the thread fault again once the evictors made room), and a
//! reader whose ioctl is refused with `EAGAIN` while an event is pending
//! reads the pending messages itself (`sys/uffd.rs`, `EagainWait`).

use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use umio_cache::{Observed, PageState};

use crate::region::Region;
use crate::removals::Removal;
use crate::shared::Shared;
use crate::sys::mm;
use crate::sys::poller::{Poller, Wake};
use crate::sys::uffd::{UffdMsg, is_reader};

/// How long after its event a noted page is settled: time for the
/// `madvise` caller, woken by the read, to drop the pages.
pub(crate) const SETTLE: Duration = Duration::from_millis(2);

/// How many times settling looks at a page another thread holds before it
/// leaves the page to that thread (yielding in between).
const SETTLE_TRIES: usize = 10_000;

impl Shared {
    /// Whether the calling thread must not drop pages itself: it reads
    /// the userfaultfd while remove events are on, and its own
    /// `madvise` would wait for a reader, maybe itself.
    pub(crate) fn reader_must_not_drop(&self) -> bool {
        self.cfg().remove_events && is_reader()
    }

    /// A reader read `UFFD_EVENT_REMOVE` for `[start, end)`: the pages umio
    /// holds resident there, unlocked (pages umio is dropping itself are
    /// held busy), are noted for the evictors to settle. A page only
    /// partly in the range is settled whole. Never blocks.
    pub(crate) fn handle_remove(&self, start: usize, end: usize) {
        self.counters().remove_events.fetch_add(1, Relaxed);
        if start >= end {
            return;
        }
        let table = self.regions();
        let mut queued = false;
        let due = Instant::now() + SETTLE;
        for (mapped, region) in table.overlapping(&(start..end)) {
            let (lo, hi) = (start.max(mapped.start), end.min(mapped.end));
            let (first, last) = (region.page_of(lo), region.page_of(hi - 1) + 1);
            let mut run: Option<Range<usize>> = None;
            for p in first..last {
                let resident = matches!(
                    region.pages.get(p),
                    Observed::Stable(PageState::Clean | PageState::Dirty)
                );
                match (&mut run, resident) {
                    (Some(r), true) => r.end = p + 1,
                    (None, true) => run = Some(p..p + 1),
                    (Some(_), false) => {
                        self.queue_removal(&region, run.take().unwrap_or_default(), due, false);
                        queued = true;
                    }
                    (None, false) => {}
                }
            }
            if let Some(r) = run {
                self.queue_removal(&region, r, due, false);
                queued = true;
            }
        }
        if queued {
            self.kick_evictors();
        }
    }

    /// Hands the pages of `[start, end)` to the evictors to be settled at
    /// once, whatever their state: a reader found a page present that umio
    /// holds empty, and may not drop it itself. Until the evictors have
    /// settled it, faults on it wait ([`stale_removal_pending`]): filling
    /// it again would find it present again.
    ///
    /// [`stale_removal_pending`]: Shared::stale_removal_pending
    pub(crate) fn drop_later(&self, start: usize, end: usize) {
        let table = self.regions();
        let now = Instant::now();
        for (mapped, region) in table.overlapping(&(start..end)) {
            let (lo, hi) = (start.max(mapped.start), end.min(mapped.end));
            let pages = region.page_of(lo)..region.page_of(hi - 1) + 1;
            self.queue_removal(&region, pages, now, true);
        }
        self.kick_evictors();
    }

    /// Settles the pages whose time has come: noted by remove events at
    /// least [`SETTLE`] ago, or found present where umio holds them empty
    /// (an evictor's work, before each round). Returns whether others
    /// wait.
    pub(crate) fn serve_removals(&self) -> bool {
        let now = Instant::now();
        let (due, more) = {
            let mut q = self.removals().lock();
            let (due, later): (Vec<_>, Vec<_>) = q.drain(..).partition(|r| now >= r.due);
            *q = later;
            let stale = due.iter().filter(|r| r.stale).count();
            self.removals().stale.fetch_sub(stale, Release);
            (due, !q.is_empty())
        };
        for r in due {
            // A region being unmapped is left alone: unregistering it
            // wakes its threads.
            if let Some(_g) = r.region.enter() {
                self.settle(&r.region, r.pages);
            }
        }
        more
    }

    /// Whether `page` of `region` waits to be settled after a remove event
    /// (its fault waits).
    pub(crate) fn removal_pending(&self, region: &Region, page: usize) -> bool {
        self.removals()
            .lock()
            .iter()
            .any(|r| r.region.id == region.id && r.pages.contains(&page))
    }

    /// Whether `page` of `region`, which umio holds empty, was found
    /// present and waits for the evictors to drop it
    /// ([`drop_later`](Shared::drop_later)): a fault on it waits for that
    /// rather than fill it again, which would find it present again (and
    /// again, a tight loop of store reads until the evictors come). One
    /// atomic load while no such page waits.
    pub(crate) fn stale_removal_pending(&self, region: &Region, page: usize) -> bool {
        self.removals().stale.load(Acquire) > 0
            && self
                .removals()
                .lock()
                .iter()
                .any(|r| r.stale && r.region.id == region.id && r.pages.contains(&page))
    }

    /// Drops the pages of `pages` whose memory the kernel dropped (in part:
    /// the rest is dropped here), keeps those it kept, then wakes the
    /// threads that faulted on them meanwhile.
    fn settle(&self, region: &Region, pages: Range<usize>) {
        let ps = region.page_size;
        self.demote_range(region, &pages);
        let mut locked = Vec::with_capacity(pages.len());
        for p in pages.clone() {
            for _ in 0..SETTLE_TRIES {
                match region.pages.get(p) {
                    Observed::Stable(s) => {
                        if region.pages.try_lock(p, s) {
                            locked.push((p, s));
                            break;
                        }
                    }
                    Observed::Busy(_) => std::thread::yield_now(),
                }
            }
            // Not locked: another thread holds the page for long, or for
            // good (a range unmapped from the region stays busy). Its
            // holder decides the page's fate; a thread that faults on it
            // meanwhile falls back to `progress.rs` once woken below.
        }
        let (addr, len) = (region.page_addr(pages.start), pages.len() * ps);
        let mut present = Vec::new();
        if let Err(e) = mm::resident(addr, len, &mut present) {
            log::error!("umio: mincore failed: errno {e}");
            present = vec![true; len.div_ceil(4096)];
        }
        let per_page = ps.div_ceil(4096);
        let mut freed = 0u64;
        for (p, s) in locked {
            let sub = &present[(p - pages.start) * per_page..][..per_page];
            let whole = sub.iter().all(|&x| x);
            let any = sub.iter().any(|&x| x);
            if (s == PageState::Empty && !any) || (s != PageState::Empty && whole) {
                // Nothing to drop, or kept (`MADV_FREE`): as it was.
                let _ = region.pages.unlock(p, s);
                continue;
            }
            let at = region.page_addr(p);
            if any && let Err(e) = mm::advise(at, ps, libc::MADV_DONTNEED) {
                log::error!("umio: MADV_DONTNEED after a remove event failed: errno {e}");
                let _ = region.pages.unlock(p, s);
                continue;
            }
            if s == PageState::Dirty {
                self.count_undirty(region, 1);
            }
            if s != PageState::Empty {
                freed += ps as u64;
                self.counters().removed_pages.fetch_add(1, Relaxed);
            }
            let _ = region.pages.unlock(p, PageState::Empty);
        }
        self.budget_of(region).release(freed);
        // Threads that faulted on these pages meanwhile were left waiting
        // (`handle_fault`): they retry now.
        self.wake(region, addr, len);
    }
}

/// The `umio-events` thread of an in-thread runtime: no fault is ever
/// queued on its userfaultfd (`UFFD_FEATURE_SIGBUS`), but remove events
/// are, and their `madvise` callers wait until they are read.
pub(crate) fn events_main(shared: Arc<Shared>) {
    let Some(uffd) = shared.in_thread_uffd() else {
        return;
    };
    let poller = match Poller::new(uffd.as_raw_fd(), shared.shutdown_fd(), false) {
        Ok(p) => p,
        Err(e) => {
            log::error!("umio events thread cannot poll: errno {e}");
            return;
        }
    };
    let mut msgs = [UffdMsg::default(); 64];
    while poller.wait(true) == Wake::Faults {
        loop {
            let n = match uffd.read_messages(&mut msgs) {
                Ok(n) => n,
                Err(e) => {
                    log::error!("umio: reading userfaultfd events failed: errno {e}");
                    0
                }
            };
            for m in &msgs[..n] {
                if let Some((start, end)) = m.remove() {
                    shared.handle_remove(start, end);
                }
            }
            if n < msgs.len() {
                break;
            }
        }
    }
}

impl Shared {
    fn queue_removal(&self, region: &Arc<Region>, pages: Range<usize>, due: Instant, stale: bool) {
        if pages.is_empty() {
            return;
        }
        let mut q = self.removals().lock();
        if stale {
            // Under the lock: `serve_removals` counts the stale entries it
            // takes under it too.
            self.removals().stale.fetch_add(1, Release);
        }
        q.push(Removal {
            region: region.clone(),
            pages,
            due,
            stale,
        });
    }
}

#[cfg(test)]
mod tests {
    use umio_backends::MemoryStore;

    use super::*;
    use crate::{FaultService, MapOptions, PrefetchKind, Runtime};

    /// A page umio holds empty but finds present in part (here made so by
    /// hand: umio forgets a resident page without dropping it, as `unstick`
    /// does on a reader, then the program drops part of it): a filler may
    /// not drop it (it reads remove events), so the evictors do, and the
    /// faulting thread waits for them instead of faulting again and again,
    /// a store read and a failed copy each time, until they come.
    #[test]
    fn a_page_present_where_umio_holds_it_empty_waits_for_the_evictors() {
        const PS: usize = 16 << 10;
        let rt = Runtime::builder()
            .cache_bytes(1 << 20)
            .page_size(PS)
            .fillers(1)
            .evictors(1)
            .remove_events(true)
            // The fillers' case: a thread serving its own fault drops such
            // a page itself.
            .fault_service(FaultService::Fillers)
            .build()
            .expect("a runtime (the tests need userfaultfd: run as root)");
        if !rt.shared().cfg().remove_events {
            eprintln!("skipped: the kernel has no remove events");
            return;
        }
        // Each 4 KiB of the store holds its index + 1.
        let bytes: Vec<u8> = (0..4 * PS).map(|i| (i / 4096) as u8 + 1).collect();
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let map = unsafe {
            rt.map(
                MapOptions::new()
                    .store(Arc::new(MemoryStore::new(bytes)))
                    .len(4 * PS)
                    .prefetch(PrefetchKind::None),
            )
        }
        .unwrap();
        let base = map.as_ptr() as usize;
        let read = |at: usize| {
            // SAFETY: inside the mapping, which lives until the end.
            unsafe { std::ptr::read_volatile((base + at) as *const u8) }
        };
        assert_eq!(read(0), 1);
        let region = rt.shared().regions().find(base).unwrap().clone();
        assert!(region.pages.try_lock(0, PageState::Clean));
        let _ = region.pages.unlock(0, PageState::Empty);
        rt.shared().budget_of(&region).release(PS as u64);
        // The remove event finds the page empty: nothing is noted.
        mm::advise(base, 4096, libc::MADV_DONTNEED).unwrap();
        let faults = rt.stats().faults;
        // The fill finds 12 KiB present; the evictors drop the page and
        // wake the thread, whose next fault fills it.
        assert_eq!(read(0), 1);
        assert_eq!(read(PS - 1), 4);
        let faults = rt.stats().faults - faults;
        assert!(
            faults <= 3,
            "{faults} faults on one page: the thread faulted again and again"
        );
        assert_eq!(region.pages.get(0), Observed::Stable(PageState::Clean));
        assert_eq!(rt.stats().resident_bytes, PS as u64);
    }
}
