//! Read-ahead follows several sequential streams in one region: two threads
//! scanning the two halves of a mapping at once each get their own
//! read-ahead, as one thread scanning alone does. Asserted on counters
//! (pages read ahead against pages missed), not on timing.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{file_with, random_bytes};
use umio::{MapOptions, Runtime};

const PS: usize = 4096;
/// Pages of the file: 32 MiB.
const PAGES: usize = 8192;
/// How long a scenario may take before the test fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `f` on a thread of its own; fails the test if it does not finish
/// within [`DEADLINE`].
fn within_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: not done after {DEADLINE:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the scenario panicked"),
    }
}

/// Scans `parts` (page ranges) of a fresh mapping of a file of [`PAGES`]
/// pages, one thread each, all at once, checking one byte of every page;
/// returns the region's (pages missed, pages read ahead).
fn scan(parts: Vec<std::ops::Range<usize>>) -> (u64, u64) {
    let data = random_bytes(PAGES * PS, 19);
    let (_tmp, file) = file_with(&data);
    let rt = Runtime::builder()
        .cache_bytes((2 * PAGES * PS) as u64)
        .page_size(PS)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new()) }.unwrap();
    let m = map.as_slice();
    std::thread::scope(|s| {
        for part in &parts {
            let (m, data) = (m, &data);
            s.spawn(move || {
                for p in part.clone() {
                    let at = p * PS + (p * 31) % PS;
                    assert_eq!(m[at], data[at], "byte {at}");
                }
            });
        }
    });
    let st = map.stats();
    (st.fills - st.prefetched, st.prefetched)
}

// Each scan is a list of ranges, some of one range.
#[allow(clippy::single_range_in_vec_init)]
#[test]
fn two_threads_scanning_two_halves_are_each_read_ahead_as_one_thread_alone() {
    let half = PAGES / 2;
    let (one_missed, one_ahead) =
        within_deadline("one thread, one half", move || scan(vec![0..half]));
    let (two_missed, two_ahead) = within_deadline("two threads, two halves", move || {
        scan(vec![0..half, half..PAGES])
    });
    eprintln!(
        "one thread over {half} pages: {one_missed} missed, {one_ahead} read ahead; \
         two threads over {PAGES}: {two_missed} missed, {two_ahead} read ahead"
    );
    // One stream: nearly every page comes from read-ahead.
    assert!(
        one_missed * 20 < half as u64,
        "one thread: {one_missed} of {half} pages missed"
    );
    // Two streams in one region, interleaved: each keeps its read-ahead
    // (one stream per region had the threads break each other's stream
    // at every miss: nearly every page missed).
    assert!(
        two_missed * 20 < PAGES as u64,
        "two threads: {two_missed} of {PAGES} pages missed"
    );
    assert!(
        two_ahead * 10 >= PAGES as u64 * 9,
        "two threads: only {two_ahead} of {PAGES} pages read ahead"
    );
}
