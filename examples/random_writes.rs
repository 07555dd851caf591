//! Random 4 KiB writes, read-modify-write of one 64-bit word per page, over
//! a file larger than the memory allowed: one side per run, for a driver
//! that puts each run in a memory cgroup of its own (docs/BENCHMARKS.md,
//! "Random writes: asynchronous dirty tracking").
//!
//! ```text
//! cargo run --release --example random_writes -- SIDE FILE OPS CACHE_MIB [SEED]
//! ```
//!
//! * `SIDE`: `mmap` (`MAP_SHARED`, `MADV_RANDOM`, `msync(MS_SYNC)` at the
//!   end), `umio` (the defaults, `UMIO_*` from the environment), `umio-sync`
//!   or `umio-async` (dirty tracking forced);
//! * `FILE`: an existing file (its page cache is dropped first);
//! * `OPS`: pages written, chosen at random (uniform over the file);
//! * `CACHE_MIB`: umio's cache bound (ignored by `mmap`).
//!
//! Prints one line: `side ops seconds ops_per_s wp_faults first_writes
//! scans evicted_dirty`; the time includes the final flush.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::time::Instant;

use umio::{DirtyTracking, MapOptions, Runtime};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PAGE: usize = 4096;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        return Err("usage: random_writes SIDE FILE OPS CACHE_MIB [SEED]".into());
    }
    let side = args[0].as_str();
    let path = &args[1];
    let ops: usize = args[2].parse()?;
    let cache_mib: u64 = args[3].parse()?;
    let mut seed: u64 = args
        .get(4)
        .map_or(Ok(0x9e37_79b9_7f4a_7c15), |s| s.parse())?;
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let len = file.metadata()?.len() as usize;
    let pages = len / PAGE;
    // Cold start: the file's pages out of the kernel's page cache.
    file.sync_all()?;
    // SAFETY: an open descriptor; advice only.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rmw = |base: *mut u8, r: u64| {
        let page = (r as usize >> 9) % pages;
        let word = (r as usize) & 511;
        // SAFETY: inside the mapping of `len` bytes at `base`, 8-aligned.
        unsafe {
            let p = base.add(page * PAGE + word * 8) as *mut u64;
            // A load, then a store (`black_box` keeps the compiler from
            // fusing them into one `inc` instruction, whose fault would be
            // a write miss): a read miss, then a first write to a clean
            // page, as a program that reads a record and updates it.
            let v = std::hint::black_box(p.read_volatile());
            p.write_volatile(v.wrapping_add(1));
        }
    };
    let (secs, wp, first, scans, evicted_dirty) = match side {
        "mmap" => {
            // SAFETY: a shared mapping of the whole file, unmapped below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error().into());
            }
            // SAFETY: the mapping just made.
            unsafe { libc::madvise(base, len, libc::MADV_RANDOM) };
            let t = Instant::now();
            for _ in 0..ops {
                rmw(base as *mut u8, next());
            }
            let loop_secs = t.elapsed().as_secs_f64();
            // SAFETY: the mapping just made.
            if unsafe { libc::msync(base, len, libc::MS_SYNC) } != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            let secs = t.elapsed().as_secs_f64();
            eprintln!(
                "mmap: loop {loop_secs:.3} s, flush {:.3} s",
                secs - loop_secs
            );
            // SAFETY: the mapping just made, no longer used.
            unsafe { libc::munmap(base, len) };
            (secs, 0, 0, 0, 0)
        }
        "umio" | "umio-sync" | "umio-async" => {
            let mut b = Runtime::builder().from_env()?.cache_bytes(cache_mib << 20);
            match side {
                "umio-sync" => b = b.dirty_tracking(DirtyTracking::Sync),
                "umio-async" => b = b.dirty_tracking(DirtyTracking::Async),
                _ => {}
            }
            let rt = b.build()?;
            // SAFETY: nothing else changes the file while it is mapped.
            let mut map = unsafe { rt.map_file_mut(&file, MapOptions::new()) }?;
            let base = map.as_mut_ptr();
            let t = Instant::now();
            for _ in 0..ops {
                rmw(base, next());
            }
            let loop_secs = t.elapsed().as_secs_f64();
            map.flush()?;
            let secs = t.elapsed().as_secs_f64();
            let s = rt.stats();
            eprintln!(
                "{side}: tracking {:?}, service {:?}, loop {loop_secs:.3} s, flush {:.3} s\n{s}",
                rt.dirty_tracking(),
                rt.fault_service(),
                secs - loop_secs
            );
            map.unmap()?;
            (
                secs,
                s.wp_faults,
                s.first_writes(),
                s.dirty_scans,
                s.evicted_dirty_pages,
            )
        }
        other => return Err(format!("unknown side {other}").into()),
    };
    println!(
        "{side} {ops} {secs:.3} {:.0} {wp} {first} {scans} {evicted_dirty}",
        ops as f64 / secs
    );
    Ok(())
}
