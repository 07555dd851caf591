//! Remove events (`Builder::remove_events`): the application's own
//! `madvise(MADV_DONTNEED)`, `MADV_FREE` or `MADV_REMOVE` on umio memory,
//! called directly rather than through `Mapping::advise`.
//!
//! With `UFFD_FEATURE_EVENT_REMOVE` the kernel queues a `UFFD_EVENT_REMOVE`
//! (start, end) on the userfaultfd before it drops the pages, and the
//! `madvise` caller sleeps until a reader has read the message; it then
//! drops the pages on its own time (umio cannot see when). So a reader
//! only notes the pages umio holds resident in the range and hands them to
//! the evictors, which drop them as `Advice::DontNeed` does (`drop_pages`:
//! wait for busy pages, `MADV_DONTNEED`, Empty, dirty state and cache
//! space released): the next access is an ordinary miss that reads the
//! store. `MADV_FREE` (whose pages the kernel may keep) is made a
//! `MADV_DONTNEED` this way.
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
//! reads the pending messages itself (`sys/uffd.rs`, `on_eagain`).

use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use umio_cache::{Observed, PageState};

use crate::region::Region;
use crate::shared::Shared;
use crate::sys::poller::{Poller, Wake};
use crate::sys::uffd::{UffdMsg, is_reader};

impl Shared {
    /// Whether the calling thread must not drop pages itself: it reads
    /// the userfaultfd while remove events are on, and its own
    /// `madvise` would wait for a reader, maybe itself.
    pub(crate) fn reader_must_not_drop(&self) -> bool {
        self.cfg().remove_events && is_reader()
    }

    /// A reader read `UFFD_EVENT_REMOVE` for `[start, end)`: the pages umio
    /// holds resident there, unlocked (pages umio is dropping itself are
    /// held busy), go to the evictors to be dropped. A page only partly in
    /// the range is dropped whole. Never blocks.
    pub(crate) fn handle_remove(&self, start: usize, end: usize) {
        self.counters().remove_events.fetch_add(1, Relaxed);
        if start >= end {
            return;
        }
        let table = self.regions();
        let mut queued = false;
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
                        self.queue_removal(&region, run.take().unwrap_or_default());
                        queued = true;
                    }
                    (None, false) => {}
                }
            }
            if let Some(r) = run {
                self.queue_removal(&region, r);
                queued = true;
            }
        }
        if queued {
            self.kick_evictors();
        }
    }

    /// Hands the pages of `[start, end)` to the evictors to be dropped,
    /// whatever their state: a reader found a page present that umio
    /// holds empty (the application's `MADV_FREE` leaves pages in place).
    pub(crate) fn drop_later(&self, start: usize, end: usize) {
        let table = self.regions();
        for (mapped, region) in table.overlapping(&(start..end)) {
            let (lo, hi) = (start.max(mapped.start), end.min(mapped.end));
            self.queue_removal(&region, region.page_of(lo)..region.page_of(hi - 1) + 1);
        }
        self.kick_evictors();
    }

    /// Drops the pages remove events handed on (an evictor's work, before
    /// each round).
    pub(crate) fn serve_removals(&self) {
        while let Some((region, pages)) = self.next_removal() {
            let Some(_g) = region.enter() else {
                continue;
            };
            let n = pages.len() as u64;
            if let Err(e) = self.drop_pages(&region, pages) {
                log::error!("umio: MADV_DONTNEED after a remove event failed: errno {e}");
                continue;
            }
            self.counters().removed_pages.fetch_add(n, Relaxed);
        }
    }
}

/// The `umio-events` thread of an in-thread runtime: no fault is ever
/// queued on its userfaultfd (`UFFD_FEATURE_SIGBUS`), but remove events
/// are, and their `madvise` callers wait until they are read.
pub(crate) fn events_main(shared: Arc<Shared>) {
    let poller = match Poller::new(shared.uffd().as_raw_fd(), shared.shutdown_fd()) {
        Ok(p) => p,
        Err(e) => {
            log::error!("umio events thread cannot poll: errno {e}");
            return;
        }
    };
    let mut msgs = [UffdMsg::default(); 64];
    while poller.wait() == Wake::Faults {
        loop {
            let n = match shared.uffd().read_messages(&mut msgs) {
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
    fn queue_removal(&self, region: &Arc<Region>, pages: Range<usize>) {
        if !pages.is_empty() {
            self.removals()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((region.clone(), pages));
        }
    }

    fn next_removal(&self) -> Option<(Arc<Region>, Range<usize>)> {
        self.removals()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }
}
