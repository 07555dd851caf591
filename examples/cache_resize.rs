//! A cache that breathes: two threads read random pages of a 256 MiB file
//! while the cache bound goes 64 MiB -> 16 MiB -> 64 MiB
//! (`Runtime::set_cache_bytes`); a table every 100 ms shows the bound, the
//! bytes resident, the pages evicted because of the shrink, and the reads
//! served.
//!
//! Run: `cargo run --release --example cache_resize` (root, or with
//! permission for full-mode userfaultfd).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const LEN: usize = 256 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    umio_bench::cli::command("cache_resize", "A cache that breathes: two threads read random pages while the cache bound goes 64 MiB -> 16 MiB -> 64 MiB; a table every 100 ms.").get_matches();
    let path = std::env::temp_dir().join(format!("umio-cache-resize-{}.bin", std::process::id()));
    let mut f = std::fs::File::create(&path)?;
    for i in 0..LEN / (1 << 20) {
        f.write_all(&vec![i as u8; 1 << 20])?;
    }
    drop(f);
    let rt = umio::Runtime::builder()
        .cache_bytes(64 * MIB)
        .page_size(64 << 10)
        .build()?;
    let file = std::fs::File::open(&path)?;
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = Arc::new(unsafe { rt.map_file(&file, umio::MapOptions::new()) }?);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let (map, stop, reads) = (map.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let bytes = map.as_slice();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x % LEN as u64) as usize;
                    assert_eq!(bytes[at], (at >> 20) as u8);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    println!("| time | bound | resident | evicted by shrinking | reads/s |");
    println!("|---:|---:|---:|---:|---:|");
    let start = Instant::now();
    let mut last_reads = 0;
    for tick in 0..30 {
        match tick {
            10 => rt.set_cache_bytes(16 * MIB)?,
            20 => rt.set_cache_bytes(64 * MIB)?,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
        let s = rt.stats();
        let r = reads.load(Ordering::Relaxed);
        println!(
            "| {:.1} s | {} MiB | {:.1} MiB | {} MiB | {} |",
            start.elapsed().as_secs_f64(),
            s.cache_bytes / MIB,
            s.resident_bytes as f64 / MIB as f64,
            s.shrink_evicted_bytes / MIB,
            (r - last_reads) * 10
        );
        last_reads = r;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader panicked");
    }
    drop(map);
    std::fs::remove_file(&path)?;
    Ok(())
}
