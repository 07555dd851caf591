//! `UMAP_MONITOR_FREQ`: as UMap's monitor thread, a line of runtime-wide
//! statistics printed on stderr every so many seconds (0 or unset: none).
//! Asked for explicitly, so it prints whatever `UMAP_LOG_LEVEL` says.

use std::io::Write;
use std::time::Duration;

use umio_core::{Runtime, Stats, format_bytes};

/// Starts the monitor thread: a line every `seconds`, for the life of the
/// process (the thread holds the runtime, which libumio never stops).
pub(crate) fn start(rt: &Runtime, seconds: u64) {
    let rt = rt.clone();
    let spawned = std::thread::Builder::new()
        .name("umio-monitor".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(seconds));
                let line = line(&rt.stats());
                // A closed stderr is no reason to stop the program.
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        });
    if let Err(e) = spawned {
        log::warn!("umio: UMAP_MONITOR_FREQ: cannot start the monitor thread: {e}");
    }
}

/// One monitor line.
pub(crate) fn line(s: &Stats) -> String {
    format!(
        "umio: monitor: faults {} (misses {} read, {} write; {} first writes, {} coalesced), \
         read {}, resident {} of {}, evicted {} pages ({} dirty), written back {} ({} errors), \
         {} regions",
        s.faults,
        s.read_misses,
        s.write_misses,
        s.wp_faults,
        s.coalesced,
        format_bytes(s.bytes_read),
        format_bytes(s.resident_bytes),
        format_bytes(s.cache_bytes),
        s.evicted_pages,
        s.evicted_dirty_pages,
        format_bytes(s.bytes_written),
        s.write_errors,
        s.regions,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_readable() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(3 << 19), "1.5 MiB");
        assert_eq!(format_bytes(2 << 30), "2.0 GiB");
    }
}
