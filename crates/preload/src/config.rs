//! The shim's configuration, read from the environment once, when the
//! library is loaded. The runtime's own settings (`UMIO_CACHE_BYTES`,
//! `UMIO_PAGE_SIZE`, ...) are read by `umio_core::Builder::from_env` when
//! the runtime starts.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// What the environment asked for.
#[derive(Debug, Default)]
pub(crate) struct Config {
    /// `UMIO_PRELOAD_PATHS`: glob patterns (`fnmatch(3)`, `*` matching `/`
    /// too) against the real path of a mapped file. Empty: no file is
    /// selected.
    pub paths: Vec<CString>,
    /// `UMIO_PRELOAD_IN_THREAD_PATHS`: patterns as `paths`; the mappings of
    /// the files they select are declared private to user code
    /// (`MapOptions::user_access_only`), so that the runtime's fault service
    /// (`UMIO_FAULT_SERVICE`, `auto` by default) may serve them in the
    /// faulting thread. Every other file mapping, and the heap, is served
    /// by the fillers: the C library fills buffers there with its own
    /// system calls (stdio's `read`), which no `LD_PRELOAD` can fault in
    /// first, and which fail with `EFAULT` on non-resident memory served
    /// in-thread.
    pub in_thread_paths: Vec<CString>,
    /// `UMIO_PRELOAD_MIN_SIZE`: smaller mappings go to the kernel.
    pub min_size: usize,
    /// `UMIO_PRELOAD_SCRATCH_DIR`: where private mappings keep the pages
    /// they wrote (nameless files; default: the temporary directory).
    pub scratch_dir: Option<PathBuf>,
    /// `UMIO_HEAP_FILE`: the file (created or truncated) or directory (a
    /// nameless file in it) the heap spills to. `None`: no heap mode.
    pub heap_file: Option<PathBuf>,
    /// `UMIO_HEAP_MIN_ALLOC`: allocations at least this large come from
    /// the heap (default 1 MiB).
    pub heap_min_alloc: usize,
    /// `UMIO_HEAP_SIZE`: address space and file size reserved for the heap
    /// (default 64 GiB; the file is sparse).
    pub heap_size: usize,
    /// `UMIO_STATS=1`: print the process's counters at exit.
    pub stats: bool,
    /// `UMIO_PRELOAD_KEEPER` (default on; `0` turns it off): writable
    /// shared mappings survive the process's death
    /// (`MapOptions::survive_process_death`).
    pub keeper: bool,
    /// `UMIO_LOG`: `off`, `error`, `warn` (the default), `info` or
    /// `debug`: the log records printed on stderr.
    pub log_level: LogLevel,
}

/// The level of `UMIO_LOG` (`warn` by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogLevel(pub log::LevelFilter);

impl Default for LogLevel {
    fn default() -> Self {
        LogLevel(log::LevelFilter::Warn)
    }
}

/// A `UMIO_LOG` value (any case); `None` if it is none of them.
pub(crate) fn parse_log_level(v: &str) -> Option<log::LevelFilter> {
    use log::LevelFilter::*;
    Some(match v.trim().to_ascii_lowercase().as_str() {
        "off" | "none" | "0" => Off,
        "error" => Error,
        "warn" | "warning" => Warn,
        "info" => Info,
        "debug" => Debug,
        "trace" => Trace,
        _ => return None,
    })
}

/// A variable's value, read with `getenv(3)` (no allocation before the
/// copy: safe to call from the library's constructor).
pub(crate) fn var(name: &CStr) -> Option<String> {
    // SAFETY: getenv with a NUL-terminated name; the result, if non-null,
    // is a NUL-terminated string we copy at once.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null results of getenv are NUL-terminated strings.
    let s = unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_owned();
    (!s.is_empty()).then_some(s)
}

impl Config {
    /// Reads the environment; malformed values are reported on stderr and
    /// leave the default.
    pub(crate) fn from_env() -> Config {
        let size = |name: &CStr, default: usize| match var(name) {
            None => default,
            Some(v) => umio_core::parse::size(&v).unwrap_or_else(|| {
                crate::sys::eprint(&format!(
                    "umio-preload: {} is not a size: {v}\n",
                    name.to_string_lossy()
                ));
                default
            }),
        };
        let patterns = |name: &CStr| -> Vec<CString> {
            var(name)
                .map(|v| {
                    v.split(':')
                        .filter(|p| !p.is_empty())
                        .filter_map(|p| CString::new(p).ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        Config {
            paths: patterns(c"UMIO_PRELOAD_PATHS"),
            in_thread_paths: patterns(c"UMIO_PRELOAD_IN_THREAD_PATHS"),
            min_size: size(c"UMIO_PRELOAD_MIN_SIZE", 0),
            scratch_dir: var(c"UMIO_PRELOAD_SCRATCH_DIR").map(PathBuf::from),
            heap_file: var(c"UMIO_HEAP_FILE").map(PathBuf::from),
            heap_min_alloc: size(c"UMIO_HEAP_MIN_ALLOC", 1 << 20).max(1),
            heap_size: size(c"UMIO_HEAP_SIZE", 64 << 30),
            stats: var(c"UMIO_STATS").is_some_and(|v| v != "0"),
            keeper: var(c"UMIO_PRELOAD_KEEPER").is_none_or(|v| v != "0"),
            log_level: match var(c"UMIO_LOG") {
                None => LogLevel::default(),
                Some(v) => LogLevel(parse_log_level(&v).unwrap_or_else(|| {
                    crate::sys::eprint(&format!(
                        "umio-preload: UMIO_LOG is not off, error, warn, info or debug: {v}\n"
                    ));
                    log::LevelFilter::Warn
                })),
            },
        }
    }

    /// Whether a file whose real path is `path` is selected.
    pub(crate) fn selects(&self, path: &CStr) -> bool {
        matches(&self.paths, path)
    }

    /// Whether the mappings of the file whose real path is `path` may be
    /// served in the faulting thread (`UMIO_PRELOAD_IN_THREAD_PATHS`).
    pub(crate) fn in_thread(&self, path: &CStr) -> bool {
        matches(&self.in_thread_paths, path)
    }
}

/// Whether one of `patterns` matches `path`.
fn matches(patterns: &[CString], path: &CStr) -> bool {
    patterns.iter().any(|pat| {
        // SAFETY: both are NUL-terminated strings that outlive the call.
        unsafe { libc::fnmatch(pat.as_ptr(), path.as_ptr(), 0) == 0 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_parse() {
        use log::LevelFilter::*;
        assert_eq!(parse_log_level("off"), Some(Off));
        assert_eq!(parse_log_level("ERROR"), Some(Error));
        assert_eq!(parse_log_level(" warn "), Some(Warn));
        assert_eq!(parse_log_level("warning"), Some(Warn));
        assert_eq!(parse_log_level("info"), Some(Info));
        assert_eq!(parse_log_level("debug"), Some(Debug));
        assert_eq!(parse_log_level("loud"), None);
    }

    #[test]
    fn globs_select_real_paths() {
        let cfg = Config {
            paths: vec![c"/data/*.bin".into(), c"/scratch/run?/*".into()],
            ..Config::default()
        };
        assert!(cfg.selects(c"/data/a.bin"));
        assert!(cfg.selects(c"/data/sub/a.bin"), "* crosses '/'");
        assert!(cfg.selects(c"/scratch/run1/x"));
        assert!(!cfg.selects(c"/data/a.txt"));
        assert!(!cfg.selects(c"/scratch/run12/x"));
    }

    #[test]
    fn in_thread_paths_opt_files_in() {
        let cfg = Config {
            paths: vec![c"/data/*".into()],
            in_thread_paths: vec![c"/data/*.idx".into()],
            ..Config::default()
        };
        assert!(cfg.in_thread(c"/data/a.idx"));
        assert!(!cfg.in_thread(c"/data/a.bin"));
        assert!(!Config::default().in_thread(c"/data/a.idx"));
    }
}
