//! The environment's settings: one reader of the `UMIO_*` variables, with
//! UMap's `UMAP_*` names as aliases, shared by [`Builder::from_env`]
//! (the Rust runtimes and the preload shim) and the C library
//! (`umio-ffi`), so that a variable means the same everywhere.
//!
//! Each setting is read from its `UMIO_*` name; where that is unset or
//! empty, from its `UMAP_*` alias, in UMap's units and with UMap's rule
//! that `0` leaves the default in force (job scripts written for UMap run
//! unchanged):
//!
//! | setting | `UMIO_*` | `UMAP_*` alias |
//! |---|---|---|
//! | page size | `UMIO_PAGE_SIZE` (size) | `UMAP_PAGESIZE` (bytes) |
//! | cache bound | `UMIO_CACHE_BYTES` (size, `auto`, `auto:SHARE`) | `UMAP_BUFSIZE` (pages) |
//! | huge-page pool | `UMIO_HUGE_CACHE_BYTES` (size) | |
//! | fillers | `UMIO_FILLERS` | `UMAP_PAGE_FILLERS` |
//! | evictors | `UMIO_EVICTORS` | `UMAP_PAGE_EVICTORS` |
//! | watermarks | `UMIO_EVICT_HIGH_WATER`, `UMIO_EVICT_LOW_WATER` | `UMAP_EVICT_HIGH_WATER_THRESHOLD`, `UMAP_EVICT_LOW_WATER_THRESHOLD` |
//! | fault events per read | `UMIO_MAX_FAULT_EVENTS` | `UMAP_MAX_FAULT_EVENTS` |
//! | read-ahead window | `UMIO_READAHEAD` (size; 0: none) | `UMAP_READ_AHEAD` (pages; 0: none) |
//! | prefetch policy | `UMIO_PREFETCH` | |
//! | eviction policy | `UMIO_EVICTION` | |
//! | filler polling | `UMIO_FILLER_SPIN_US` | |
//! | huge-page promotion | `UMIO_PROMOTE` | |
//! | fault service | `UMIO_FAULT_SERVICE` | |
//! | userfaultfd mode | `UMIO_UFFD_MODE` | |
//! | dirty tracking | `UMIO_DIRTY_TRACKING` | |
//! | kernel page cache | `UMIO_PAGE_CACHE` | |
//! | write prediction | `UMIO_WRITE_PREDICTION` | |
//! | fillers pinned to CPUs | `UMIO_PIN_FILLERS` | |
//! | remove events | `UMIO_REMOVE_EVENTS` | |
//!
//! Sizes take [`parse_size`]'s syntax (`64K`, `2M`). A malformed value is an
//! error naming the variable, never a silent default.

use std::time::Duration;

use umio_cache::PolicyKind;

use crate::autosize::DEFAULT_AUTO_SHARE;
use crate::error::{Error, Result};
use crate::huge::PromoteKind;
use crate::kernel::FaultService;
use crate::kernel::{DirtyTracking, UffdMode};
use crate::parse::{parse_size, size};

/// A `UMAP_*` variable's name and the error of a malformed value.
type Alias = (&'static str, &'static str);

/// The [`Alias`] of a `UMAP_*` number.
macro_rules! umap {
    ($name:literal) => {
        ($name, concat!($name, " is not a number"))
    };
}

/// The cache bound as the environment gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EnvCache {
    /// Bytes (`UMIO_CACHE_BYTES`).
    Bytes(u64),
    /// The automatic bound with this share (`UMIO_CACHE_BYTES=auto[:SHARE]`).
    Auto(f64),
    /// Pages of the runtime's page size (`UMAP_BUFSIZE`).
    Pages(u64),
}

/// The prefetch policy's name as `UMIO_PREFETCH` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvPrefetch {
    /// `none`.
    None,
    /// `sequential`.
    Sequential,
    /// `stride`.
    Stride,
}

/// What the environment sets; `None`: the variable (and its alias) is
/// unset or empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvConfig {
    /// `UMIO_PAGE_SIZE`, `UMAP_PAGESIZE`.
    pub page_size: Option<usize>,
    /// `UMIO_CACHE_BYTES`, `UMAP_BUFSIZE`.
    pub cache: Option<EnvCache>,
    /// `UMIO_HUGE_CACHE_BYTES`.
    pub huge_cache_bytes: Option<u64>,
    /// `UMIO_FILLERS`, `UMAP_PAGE_FILLERS`.
    pub fillers: Option<usize>,
    /// `UMIO_EVICTORS`, `UMAP_PAGE_EVICTORS`.
    pub evictors: Option<usize>,
    /// `UMIO_EVICT_HIGH_WATER`, `UMAP_EVICT_HIGH_WATER_THRESHOLD` (percent).
    pub high_water: Option<u8>,
    /// `UMIO_EVICT_LOW_WATER`, `UMAP_EVICT_LOW_WATER_THRESHOLD` (percent).
    pub low_water: Option<u8>,
    /// `UMIO_MAX_FAULT_EVENTS`, `UMAP_MAX_FAULT_EVENTS`.
    pub max_fault_events: Option<usize>,
    /// `UMIO_QUEUE_DEPTH`: store requests in flight per batch.
    pub queue_depth: Option<usize>,
    /// The largest read-ahead window in bytes (0: none). `UMAP_READ_AHEAD`
    /// is in pages: see [`read_ahead_pages`](EnvConfig::read_ahead_pages).
    pub read_ahead: Option<usize>,
    /// `UMAP_READ_AHEAD`, in pages of the page size, where `UMIO_READAHEAD`
    /// is unset.
    pub read_ahead_pages: Option<usize>,
    /// `UMIO_PREFETCH`.
    pub prefetch: Option<EnvPrefetch>,
    /// `UMIO_EVICTION`.
    pub eviction: Option<PolicyKind>,
    /// `UMIO_FILLER_SPIN_US`; `Some(None)`: `auto`.
    pub filler_spin: Option<Option<Duration>>,
    /// `UMIO_PROMOTE`.
    pub promote: Option<PromoteKind>,
    /// `UMIO_FAULT_SERVICE`.
    pub fault_service: Option<FaultService>,
    /// `UMIO_UFFD_MODE`.
    pub uffd_mode: Option<UffdMode>,
    /// `UMIO_DIRTY_TRACKING`.
    pub dirty_tracking: Option<DirtyTracking>,
    /// `UMIO_PAGE_CACHE`.
    pub page_cache: Option<bool>,
    /// `UMIO_WRITE_PREDICTION`.
    pub write_prediction: Option<bool>,
    /// `UMIO_PIN_FILLERS`.
    pub pin_fillers: Option<bool>,
    /// `UMIO_REMOVE_EVENTS`.
    pub remove_events: Option<bool>,
}

impl EnvConfig {
    /// Reads the process's environment.
    pub fn from_process() -> Result<EnvConfig> {
        EnvConfig::read(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `get` (the process's environment, or a
    /// test's table).
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<EnvConfig> {
        let r = Reader { get: &get };
        let cache = match r.var("UMIO_CACHE_BYTES") {
            Some(v) => Some(cache_bytes(&v)?),
            None => r.umap_number(umap!("UMAP_BUFSIZE"))?.map(EnvCache::Pages),
        };
        let prefetch = r.parse(
            "UMIO_PREFETCH",
            "UMIO_PREFETCH must be none, sequential or stride",
            |v| match v.to_ascii_lowercase().as_str() {
                "none" => Some(EnvPrefetch::None),
                "sequential" => Some(EnvPrefetch::Sequential),
                "stride" => Some(EnvPrefetch::Stride),
                _ => None,
            },
        )?;
        let read_ahead = r.parse("UMIO_READAHEAD", "UMIO_READAHEAD is not a size", size)?;
        let read_ahead_pages = match read_ahead {
            Some(_) => None,
            // 0 is a value here (no read-ahead), as in UMap.
            None => r.parse("UMAP_READ_AHEAD", "UMAP_READ_AHEAD is not a number", number)?,
        };
        let filler_spin = match r.var("UMIO_FILLER_SPIN_US") {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("auto") => Some(None),
            Some(v) => Some(Some(Duration::from_micros(v.parse().map_err(|_| {
                Error::InvalidArgument("UMIO_FILLER_SPIN_US is not a number or auto")
            })?))),
        };
        Ok(EnvConfig {
            page_size: r.or_umap(
                "UMIO_PAGE_SIZE",
                "UMIO_PAGE_SIZE is not a size",
                size,
                umap!("UMAP_PAGESIZE"),
            )?,
            cache,
            huge_cache_bytes: r.parse(
                "UMIO_HUGE_CACHE_BYTES",
                "UMIO_HUGE_CACHE_BYTES is not a size",
                parse_size,
            )?,
            fillers: r.or_umap(
                "UMIO_FILLERS",
                "UMIO_FILLERS is not a number",
                number,
                umap!("UMAP_PAGE_FILLERS"),
            )?,
            evictors: r.or_umap(
                "UMIO_EVICTORS",
                "UMIO_EVICTORS is not a number",
                number,
                umap!("UMAP_PAGE_EVICTORS"),
            )?,
            high_water: r.or_umap(
                "UMIO_EVICT_HIGH_WATER",
                "UMIO_EVICT_HIGH_WATER is not a percentage",
                number,
                umap!("UMAP_EVICT_HIGH_WATER_THRESHOLD"),
            )?,
            low_water: r.or_umap(
                "UMIO_EVICT_LOW_WATER",
                "UMIO_EVICT_LOW_WATER is not a percentage",
                number,
                umap!("UMAP_EVICT_LOW_WATER_THRESHOLD"),
            )?,
            max_fault_events: r.or_umap(
                "UMIO_MAX_FAULT_EVENTS",
                "UMIO_MAX_FAULT_EVENTS is not a number",
                number,
                umap!("UMAP_MAX_FAULT_EVENTS"),
            )?,
            queue_depth: r.parse(
                "UMIO_QUEUE_DEPTH",
                "UMIO_QUEUE_DEPTH is not a number",
                number,
            )?,
            read_ahead,
            read_ahead_pages,
            prefetch,
            eviction: r.parse(
                "UMIO_EVICTION",
                "UMIO_EVICTION must be fifo, clock, lru or 2q",
                PolicyKind::from_name,
            )?,
            filler_spin,
            promote: r.parse(
                "UMIO_PROMOTE",
                "UMIO_PROMOTE must be never, always or sequential",
                PromoteKind::from_name,
            )?,
            fault_service: r.parse(
                "UMIO_FAULT_SERVICE",
                "UMIO_FAULT_SERVICE must be fillers, in-thread or auto",
                FaultService::from_name,
            )?,
            uffd_mode: r.parse(
                "UMIO_UFFD_MODE",
                "UMIO_UFFD_MODE must be auto, full or user",
                UffdMode::from_name,
            )?,
            dirty_tracking: r.parse(
                "UMIO_DIRTY_TRACKING",
                "UMIO_DIRTY_TRACKING must be auto, sync or async",
                DirtyTracking::from_name,
            )?,
            page_cache: r.parse("UMIO_PAGE_CACHE", "UMIO_PAGE_CACHE is not 0 or 1", on_off)?,
            write_prediction: r.parse(
                "UMIO_WRITE_PREDICTION",
                "UMIO_WRITE_PREDICTION is not 0 or 1",
                on_off,
            )?,
            pin_fillers: r.parse("UMIO_PIN_FILLERS", "UMIO_PIN_FILLERS is not 0 or 1", on_off)?,
            remove_events: r.parse(
                "UMIO_REMOVE_EVENTS",
                "UMIO_REMOVE_EVENTS is not 0 or 1",
                on_off,
            )?,
        })
    }

    /// The cache bound in bytes for pages of `page_size` (`UMAP_BUFSIZE`
    /// counts pages); `None` for the automatic bound or none set.
    pub fn cache_bytes(&self, page_size: usize) -> Result<Option<u64>> {
        Ok(match self.cache {
            Some(EnvCache::Bytes(b)) => Some(b),
            Some(EnvCache::Pages(n)) => Some(
                n.checked_mul(page_size as u64)
                    .ok_or(Error::InvalidArgument("UMAP_BUFSIZE is too large"))?,
            ),
            Some(EnvCache::Auto(_)) | None => None,
        })
    }

    /// The largest read-ahead window in bytes for pages of `page_size`.
    pub fn read_ahead_bytes(&self, page_size: usize) -> Result<Option<usize>> {
        match (self.read_ahead, self.read_ahead_pages) {
            (Some(b), _) => Ok(Some(b)),
            (None, Some(pages)) => pages
                .checked_mul(page_size)
                .map(Some)
                .ok_or(Error::InvalidArgument("UMAP_READ_AHEAD is too large")),
            (None, None) => Ok(None),
        }
    }
}

struct Reader<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    /// The variable, trimmed; `None` if unset or empty.
    fn var(&self, name: &str) -> Option<String> {
        (self.get)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn parse<T>(
        &self,
        name: &str,
        bad: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.var(name) {
            None => Ok(None),
            Some(v) => parse(&v).map(Some).ok_or(Error::InvalidArgument(bad)),
        }
    }

    /// A `UMAP_*` number (`alias`: its name and the error naming it):
    /// unset, empty or 0 leave the default in force (UMap's own rule).
    fn umap_number<T: std::str::FromStr + Default + PartialEq>(
        &self,
        (name, bad): Alias,
    ) -> Result<Option<T>> {
        let n: Option<T> = self.parse(name, bad, number)?;
        Ok(n.filter(|n| *n != T::default()))
    }

    /// `name` read by `parse`, else its `UMAP_*` alias.
    fn or_umap<T: std::str::FromStr + Default + PartialEq>(
        &self,
        name: &str,
        bad: &'static str,
        parse: fn(&str) -> Option<T>,
        alias: Alias,
    ) -> Result<Option<T>> {
        match self.parse(name, bad, parse)? {
            Some(n) => Ok(Some(n)),
            None => self.umap_number(alias),
        }
    }
}

fn cache_bytes(v: &str) -> Result<EnvCache> {
    let bad = || Error::InvalidArgument("UMIO_CACHE_BYTES is not a size, auto or auto:SHARE");
    match v.strip_prefix("auto") {
        Some("") => Ok(EnvCache::Auto(DEFAULT_AUTO_SHARE)),
        Some(share) => {
            let share = share.strip_prefix(':').ok_or_else(bad)?;
            Ok(EnvCache::Auto(share.trim().parse().map_err(|_| bad())?))
        }
        None => parse_size(v).map(EnvCache::Bytes).ok_or_else(bad),
    }
}

pub(crate) fn on_off(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn number<T: std::str::FromStr>(v: &str) -> Option<T> {
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<EnvConfig> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvConfig::read(|n| map.get(n).cloned())
    }

    #[test]
    fn nothing_set_is_all_none() {
        assert_eq!(read(&[]).unwrap(), EnvConfig::default());
    }

    #[test]
    fn umio_names_in_their_syntax() {
        let e = read(&[
            ("UMIO_PAGE_SIZE", "64K"),
            ("UMIO_CACHE_BYTES", "8M"),
            ("UMIO_HUGE_CACHE_BYTES", "8M"),
            ("UMIO_FILLERS", "3"),
            ("UMIO_EVICTORS", "2"),
            ("UMIO_EVICT_HIGH_WATER", "80"),
            ("UMIO_EVICT_LOW_WATER", "50"),
            ("UMIO_MAX_FAULT_EVENTS", "128"),
            ("UMIO_QUEUE_DEPTH", "16"),
            ("UMIO_READAHEAD", "1M"),
            ("UMIO_PREFETCH", "Stride"),
            ("UMIO_EVICTION", "2q"),
            ("UMIO_FILLER_SPIN_US", "auto"),
            ("UMIO_PROMOTE", "always"),
            ("UMIO_FAULT_SERVICE", "in-thread"),
            ("UMIO_UFFD_MODE", "user"),
            ("UMIO_PAGE_CACHE", "on"),
            ("UMIO_REMOVE_EVENTS", "1"),
            ("UMIO_DIRTY_TRACKING", "Sync"),
            ("UMIO_WRITE_PREDICTION", "0"),
            ("UMIO_PIN_FILLERS", "1"),
        ])
        .unwrap();
        assert_eq!(e.page_size, Some(64 << 10));
        assert_eq!(e.cache, Some(EnvCache::Bytes(8 << 20)));
        assert_eq!(e.huge_cache_bytes, Some(8 << 20));
        assert_eq!((e.fillers, e.evictors), (Some(3), Some(2)));
        assert_eq!((e.high_water, e.low_water), (Some(80), Some(50)));
        assert_eq!(e.max_fault_events, Some(128));
        assert_eq!(e.queue_depth, Some(16));
        assert_eq!(e.read_ahead_bytes(4096).unwrap(), Some(1 << 20));
        assert_eq!(e.prefetch, Some(EnvPrefetch::Stride));
        assert_eq!(e.eviction, Some(PolicyKind::TwoQ));
        assert_eq!(e.filler_spin, Some(None));
        assert_eq!(e.promote, Some(PromoteKind::Always));
        assert_eq!(e.fault_service, Some(FaultService::InThread));
        assert_eq!(e.uffd_mode, Some(UffdMode::UserModeOnly));
        assert_eq!(e.page_cache, Some(true));
        assert_eq!(e.remove_events, Some(true));
        assert_eq!(e.dirty_tracking, Some(DirtyTracking::Sync));
        assert_eq!(e.write_prediction, Some(false));
        assert_eq!(e.pin_fillers, Some(true));
    }

    #[test]
    fn umap_aliases_in_umaps_units_and_umio_names_first() {
        let e = read(&[
            ("UMAP_PAGESIZE", "16384"),
            ("UMAP_BUFSIZE", "100"),
            ("UMAP_PAGE_FILLERS", "5"),
            ("UMAP_PAGE_EVICTORS", "2"),
            ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "85"),
            ("UMAP_EVICT_LOW_WATER_THRESHOLD", "60"),
            ("UMAP_MAX_FAULT_EVENTS", "32"),
            ("UMAP_READ_AHEAD", "4"),
            ("UMIO_FILLERS", "3"),
        ])
        .unwrap();
        assert_eq!(e.page_size, Some(16384));
        assert_eq!(e.cache_bytes(16384).unwrap(), Some(100 * 16384));
        assert_eq!(e.fillers, Some(3), "UMIO_FILLERS wins over its alias");
        assert_eq!(e.evictors, Some(2));
        assert_eq!((e.high_water, e.low_water), (Some(85), Some(60)));
        assert_eq!(e.max_fault_events, Some(32));
        assert_eq!(e.read_ahead_bytes(16384).unwrap(), Some(4 * 16384));
        // UMap's rule: 0 leaves the default; empty is unset everywhere.
        let e = read(&[
            ("UMAP_PAGESIZE", "0"),
            ("UMAP_BUFSIZE", "0"),
            ("UMAP_PAGE_FILLERS", " "),
            ("UMIO_CACHE_BYTES", ""),
        ])
        .unwrap();
        assert_eq!(e, EnvConfig::default());
        // But UMAP_READ_AHEAD=0 means none, as in UMap.
        let e = read(&[("UMAP_READ_AHEAD", "0")]).unwrap();
        assert_eq!(e.read_ahead_bytes(4096).unwrap(), Some(0));
    }

    #[test]
    fn automatic_cache_bound() {
        assert_eq!(
            read(&[("UMIO_CACHE_BYTES", "auto")]).unwrap().cache,
            Some(EnvCache::Auto(DEFAULT_AUTO_SHARE))
        );
        assert_eq!(
            read(&[("UMIO_CACHE_BYTES", "auto:0.25")]).unwrap().cache,
            Some(EnvCache::Auto(0.25))
        );
    }

    #[test]
    fn malformed_values_are_errors_naming_the_variable() {
        for (name, value) in [
            ("UMIO_CACHE_BYTES", "lots"),
            ("UMIO_CACHE_BYTES", "auto0.5"),
            ("UMIO_PAGE_SIZE", "-4K"),
            ("UMIO_HUGE_CACHE_BYTES", "8Q"),
            ("UMIO_FILLERS", "two"),
            ("UMIO_EVICT_HIGH_WATER", "300"),
            ("UMIO_PREFETCH", "psychic"),
            ("UMIO_EVICTION", "random"),
            ("UMIO_FILLER_SPIN_US", "soon"),
            ("UMIO_PROMOTE", "sometimes"),
            ("UMIO_FAULT_SERVICE", "elves"),
            ("UMIO_UFFD_MODE", "sometimes"),
            ("UMIO_PAGE_CACHE", "maybe"),
            ("UMIO_REMOVE_EVENTS", "sometimes"),
            ("UMIO_DIRTY_TRACKING", "lazy"),
            ("UMAP_BUFSIZE", "-1"),
            ("UMAP_PAGE_FILLERS", "x"),
            ("UMAP_READ_AHEAD", "x"),
        ] {
            let e = read(&[(name, value)]).unwrap_err();
            assert!(e.to_string().contains(name), "{name}={value}: {e}");
        }
    }
}
