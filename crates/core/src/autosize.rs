//! The automatic cache bound ([`Builder::cache_bytes_auto`]): the cache
//! follows the memory the process may use.
//!
//! Every second, and at once when the kernel reports memory pressure, a
//! thread (`umio-autosize`) reads:
//! - the process's memory cgroup: its limit (v2: the least of `memory.max`
//!   and `memory.high` up the hierarchy; v1: `hierarchical_memory_limit`),
//!   its usage (`memory.current`, `memory.usage_in_bytes`) and the file
//!   cache in it (`active_file` + `inactive_file`, which the kernel
//!   reclaims under the limit);
//! - the machine's `MemAvailable`, and memory pressure (PSI:
//!   `/proc/pressure/memory`).
//!
//! What is left for umio is the limit less the cgroup's other memory (its
//! usage less umio's cache and less the file cache), and never more than
//! what the machine has available plus umio's cache; without a cgroup
//! limit, the machine's alone. The bound becomes `share` of that, at least
//! 4 pages and twice the pinned bytes. Under pressure (PSI `some avg10`
//! above 10%) it also shrinks by a quarter each time. Changes smaller than
//! a sixteenth (and than 1 MiB) are not made.
//!
//! [`Builder::cache_bytes_auto`]: crate::Builder::cache_bytes_auto

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sys::proc;

/// The share of `UMIO_CACHE_BYTES=auto`.
pub const DEFAULT_AUTO_SHARE: f64 = 0.5;

/// How often the bound is reconsidered without a pressure event.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// PSI `some avg10` (percent of time stalled) that counts as pressure.
const PRESSURED: f64 = 10.0;

/// What the process may use and what uses it, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MemoryView {
    /// The cgroup's limit, if it has one.
    pub limit: Option<u64>,
    /// The cgroup's usage (0 without a cgroup).
    pub usage: u64,
    /// File cache within that usage: the kernel reclaims it first.
    pub file_cache: u64,
    /// The machine's `MemAvailable`.
    pub available: u64,
    /// PSI `some avg10`, percent.
    pub pressure: f64,
}

impl MemoryView {
    /// Reads the process's view now.
    pub(crate) fn read() -> MemoryView {
        let mut v = MemoryView {
            available: meminfo("MemAvailable:").unwrap_or(u64::MAX),
            pressure: psi_some_avg10().unwrap_or(0.0),
            ..MemoryView::default()
        };
        if let Some(cg) = Cgroup::of_self() {
            v.limit = cg.limit();
            v.usage = cg.usage().unwrap_or(0);
            v.file_cache = cg.file_cache().unwrap_or(0);
        }
        v
    }

    /// The cache bound for `share` of what is left for umio, whose cache
    /// holds `cached` bytes now.
    pub(crate) fn target(&self, share: f64, cached: u64) -> u64 {
        let machine = self.available.saturating_add(cached);
        let room = match self.limit {
            Some(limit) => {
                let other = self
                    .usage
                    .saturating_sub(cached)
                    .saturating_sub(self.file_cache);
                limit.saturating_sub(other).min(machine)
            }
            None => machine,
        };
        (room as f64 * share) as u64
    }
}

/// The process's memory cgroup.
enum Cgroup {
    V1(PathBuf),
    V2(PathBuf),
}

impl Cgroup {
    fn of_self() -> Option<Cgroup> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut v2 = None;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "memory") {
                return mounted("/sys/fs/cgroup/memory", rel).map(Cgroup::V1);
            }
            if id == "0" && controllers.is_empty() {
                v2 = mounted("/sys/fs/cgroup", rel)
                    .filter(|d| d.join("memory.current").exists())
                    .map(Cgroup::V2);
            }
        }
        v2
    }

    fn limit(&self) -> Option<u64> {
        match self {
            // hierarchical_memory_limit: the least limit up the tree.
            Cgroup::V1(d) => stat_field(d, "hierarchical_memory_limit").filter(|&l| l < 1 << 60),
            Cgroup::V2(d) => {
                let mut least: Option<u64> = None;
                let mut dir = Some(d.as_path());
                while let Some(at) = dir {
                    for f in ["memory.max", "memory.high"] {
                        if let Some(l) = read_u64(&at.join(f)) {
                            least = Some(least.map_or(l, |x| x.min(l)));
                        }
                    }
                    dir = at.parent().filter(|p| p.join("memory.current").exists());
                }
                least
            }
        }
    }

    fn usage(&self) -> Option<u64> {
        match self {
            Cgroup::V1(d) => read_u64(&d.join("memory.usage_in_bytes")),
            Cgroup::V2(d) => read_u64(&d.join("memory.current")),
        }
    }

    fn file_cache(&self) -> Option<u64> {
        let (d, active, inactive) = match self {
            Cgroup::V1(d) => (d, "total_active_file", "total_inactive_file"),
            Cgroup::V2(d) => (d, "active_file", "inactive_file"),
        };
        Some(stat_field(d, active)? + stat_field(d, inactive)?)
    }
}

/// The cgroup directory `rel` under `root`, or `root` itself when the
/// process's cgroup namespace hides the path (`rel` is then relative to
/// another root).
fn mounted(root: &str, rel: &str) -> Option<PathBuf> {
    let root = Path::new(root);
    let dir = root.join(rel);
    if dir.is_dir() {
        Some(dir)
    } else if root.is_dir() {
        Some(root.to_path_buf())
    } else {
        None
    }
}

/// A number in a file ("max" and the like read as none).
fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A field of the cgroup's `memory.stat`.
fn stat_field(dir: &Path, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// A `/proc/meminfo` field, in bytes.
fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// `some avg10` of `/proc/pressure/memory`.
fn psi_some_avg10() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/pressure/memory").ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// A PSI trigger: readable (`POLLPRI`) when tasks stalled on memory for
/// 100 ms within a second. `None` where PSI is absent or the process may
/// not create triggers; the thread then only wakes every [`PERIOD`].
pub(crate) fn psi_trigger() -> Option<OwnedFd> {
    proc::memory_pressure_trigger(b"some 100000 1000000\0")
}

/// One decision of the automatic bound: the regular pool's new bound, or
/// `None` to leave `limit` as it is. `used`: the pool's bytes now;
/// `floor`: the least it may be (4 of the largest page, twice the pinned
/// bytes).
pub(crate) fn next_bound(
    view: &MemoryView,
    share: f64,
    used: u64,
    limit: u64,
    floor: u64,
) -> Option<u64> {
    let mut target = view.target(share, used);
    if view.pressure > PRESSURED {
        target = target.min(limit - limit / 4);
    }
    let target = target.max(floor);
    if target.abs_diff(limit) < (limit / 16).max(1 << 20) {
        return None;
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_a_share_of_the_limit_less_other_memory() {
        const MIB: u64 = 1 << 20;
        let v = MemoryView {
            limit: Some(512 * MIB),
            usage: 400 * MIB,
            file_cache: 100 * MIB,
            available: 10_000 * MIB,
            pressure: 0.0,
        };
        // Others: 400 - 200 (umio) - 100 (file cache) = 100 MiB.
        assert_eq!(v.target(0.5, 200 * MIB), 206 * MIB);
        // The machine's available memory caps it.
        let tight = MemoryView {
            available: 50 * MIB,
            ..v
        };
        assert_eq!(tight.target(1.0, 200 * MIB), 250 * MIB);
        // No cgroup limit: the machine's.
        let free = MemoryView { limit: None, ..v };
        assert_eq!(free.target(0.5, 0), 5000 * MIB);
        // Others over the limit: nothing left.
        let over = MemoryView {
            usage: 900 * MIB,
            ..v
        };
        assert_eq!(over.target(0.5, 0), 0);
    }

    #[test]
    fn this_machines_view_reads() {
        let v = MemoryView::read();
        assert!(v.available > 0 && v.available < u64::MAX, "{v:?}");
        if let Some(l) = v.limit {
            assert!(l > 0);
        }
    }
}
