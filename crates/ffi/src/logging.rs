//! `UMAP_LOG_LEVEL`: the only way libumio prints anything.
//!
//! `ERROR`, `WARNING` (or `WARN`), `INFO` or `DEBUG` (any case), as in
//! UMap, print umio's log records of that level and above to standard
//! error, one line each; `OFF` prints nothing. Unset, the level is
//! `WARNING`: what umio refuses or cannot do and a program would otherwise
//! see only as an errno or a signal (a setting or flag refused, and why;
//! a store that fails; a fault that has waited seconds for a slow store
//! or for cache space, and on what).

use std::io::Write;

use log::{LevelFilter, Log, Metadata, Record};

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            // A log line that cannot be written is dropped: logging must
            // not fail the operation it describes.
            let _ = writeln!(
                std::io::stderr().lock(),
                "[umio {}] {}",
                record.level(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Parses a `UMAP_LOG_LEVEL` value.
pub(crate) fn parse_level(value: &str) -> Option<LevelFilter> {
    Some(match value.trim().to_ascii_uppercase().as_str() {
        "ERROR" => LevelFilter::Error,
        "WARNING" | "WARN" => LevelFilter::Warn,
        "INFO" => LevelFilter::Info,
        "DEBUG" => LevelFilter::Debug,
        "TRACE" => LevelFilter::Trace,
        "OFF" | "NONE" => LevelFilter::Off,
        _ => return None,
    })
}

/// The level when `UMAP_LOG_LEVEL` is unset.
pub(crate) const DEFAULT_LEVEL: LevelFilter = LevelFilter::Warn;

/// Starts printing records of `level` and above. Called when the runtime
/// starts; later calls change only the level.
pub(crate) fn start(level: LevelFilter) {
    // Fails only if a logger is set already: ours, from an earlier call.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn umap_level_names_parse() {
        assert_eq!(parse_level("ERROR"), Some(LevelFilter::Error));
        assert_eq!(parse_level("warning"), Some(LevelFilter::Warn));
        assert_eq!(parse_level(" Info "), Some(LevelFilter::Info));
        assert_eq!(parse_level("DEBUG"), Some(LevelFilter::Debug));
        assert_eq!(parse_level("loud"), None);
    }
}
