//! The pages remove events noted, waiting for the evictors to settle them
//! ([`Removals`]): a runtime's shared state holds them (`shared.rs`), the
//! remove events' handling fills and settles them (`remove.rs`).

use std::ops::Range;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::region::Region;

/// Pages handed to the evictors to be settled.
pub(crate) struct Removal {
    pub(crate) region: Arc<Region>,
    pub(crate) pages: Range<usize>,
    /// When they are settled: `SETTLE` (`remove.rs`) after a remove event
    /// noted them; at once for pages found present where umio holds them
    /// empty.
    pub(crate) due: Instant,
    /// Found present where umio holds them empty (`Shared::drop_later`),
    /// not noted by a remove event.
    pub(crate) stale: bool,
}

/// The pages waiting to be settled (`Shared::removals`).
#[derive(Default)]
pub(crate) struct Removals {
    list: Mutex<Vec<Removal>>,
    /// How many entries of `list` are stale: the fault path looks for one
    /// on every miss, and must not take the lock for it while there is
    /// none (the common case).
    pub(crate) stale: AtomicUsize,
}

impl Removals {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<Removal>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }
}
