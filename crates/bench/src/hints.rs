//! Application-driven I/O at the device's depth (issue 30): random 4 KiB
//! pages of a file in batches of N, each batch hinted then touched (umio
//! with `Mapping::prefetch_ranges`, Linux `mmap` with
//! `madvise(MADV_WILLNEED)` per page), random reads from several threads
//! (umio with default settings, `mmap` with `MADV_RANDOM`), and the
//! device's own rate of 4 KiB `O_DIRECT` reads through io_uring at a given
//! depth (fio-like: the queue kept full, the next read submitted as each
//! completes). Each run starts cold (the file's page cache dropped). Rates
//! are pages per second.
//!
//! The memory budget: run a side inside [`bounded`](crate::bench::bounded)
//! (a cgroup v1 memory limit on the whole process, so umio's cache and
//! the kernel's page cache are both counted).

use std::error::Error;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

use umio_backends::{IoRequest, Store, UringOptions, UringStore};
use umio_core::{FaultService, MapOptions, PrefetchKind, Runtime, Stats};

/// Result of the helpers here.
pub type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const PAGE: usize = 4096;

/// `n` pseudo-random page indexes below `pages`:
/// [`random_pages`](crate::bench::random_pages) from `seed`.
pub fn keys(n: usize, pages: usize, seed: u64) -> Vec<usize> {
    crate::bench::random_pages(seed, pages, n)
}

/// Drops the file's clean pages from the kernel's page cache.
pub fn drop_cache(f: &File) {
    // SAFETY: advice only: the file's clean pages leave the page cache.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Hints each batch of `keys` with `hint`, then reads a byte of each of
/// its pages at `base`; pages per second.
pub fn touch_batches(
    base: usize,
    keys: &[usize],
    batch: usize,
    mut hint: impl FnMut(&[usize]),
) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for b in keys.chunks(batch.max(1)) {
        hint(b);
        for &p in b {
            // SAFETY: the caller's mapping at `base` holds every key's page.
            sum += u64::from(unsafe { std::ptr::read_volatile((base + p * PAGE) as *const u8) });
        }
    }
    std::hint::black_box(sum);
    keys.len() as f64 / t.elapsed().as_secs_f64()
}

/// Reads a byte of each page of `keys` at `base` from `threads` threads,
/// each taking its share in turn; pages per second.
pub fn touch_threads(base: usize, keys: &[usize], threads: usize) -> f64 {
    let threads = threads.max(1);
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            s.spawn(move || {
                let mut sum = 0u64;
                for &p in keys.iter().skip(k).step_by(threads) {
                    // SAFETY: the caller's mapping holds every key's page.
                    sum += u64::from(unsafe {
                        std::ptr::read_volatile((base + p * PAGE) as *const u8)
                    });
                }
                std::hint::black_box(sum);
            });
        }
    });
    keys.len() as f64 / t.elapsed().as_secs_f64()
}

/// A runtime as a user who sets only the cache and the fault service gets.
fn runtime(cache: u64, service: FaultService) -> Result<Runtime> {
    Ok(Runtime::builder()
        .cache_bytes(cache)
        .page_size(PAGE)
        .fault_service(service)
        .build()?)
}

/// umio, batch-hinted: `prefetch_ranges` of each batch, then its pages
/// touched. Returns pages per second and the runtime's counters.
pub fn umio_batches(
    path: &Path,
    cache: u64,
    service: FaultService,
    keys: &[usize],
    batch: usize,
) -> Result<(f64, Stats)> {
    let rt = runtime(cache, service)?;
    let f = File::open(path)?;
    drop_cache(&f);
    // SAFETY: nothing changes the file while the mapping lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new().prefetch(PrefetchKind::None)) }?;
    let mut ranges = Vec::with_capacity(batch);
    let rate = touch_batches(map.as_ptr() as usize, keys, batch, |b| {
        ranges.clear();
        ranges.extend(b.iter().map(|&p| p * PAGE..p * PAGE + PAGE));
        map.prefetch_ranges(&ranges).expect("prefetch_ranges");
    });
    Ok((rate, rt.stats()))
}

/// umio with default settings (read-ahead as it comes), `threads`
/// threads reading random pages. Pages per second and the counters.
pub fn umio_threads(
    path: &Path,
    cache: u64,
    service: FaultService,
    keys: &[usize],
    threads: usize,
) -> Result<(f64, Stats)> {
    let rt = runtime(cache, service)?;
    let f = File::open(path)?;
    drop_cache(&f);
    // SAFETY: nothing changes the file while the mapping lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new()) }?;
    let rate = touch_threads(map.as_ptr() as usize, keys, threads);
    Ok((rate, rt.stats()))
}

/// A read-only shared `mmap` of the whole file with `advice`, unmapped
/// when dropped.
struct KernelMap {
    base: usize,
    len: usize,
}

impl KernelMap {
    fn new(f: &File, advice: i32) -> Result<KernelMap> {
        let len = usize::try_from(f.metadata()?.len())?;
        // SAFETY: a fresh read-only shared mapping of the file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(p, len, advice) };
        Ok(KernelMap {
            base: p as usize,
            len,
        })
    }
}

impl Drop for KernelMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        let r = unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        assert_eq!(r, 0, "munmap failed");
    }
}

/// Linux `mmap` (`MADV_RANDOM`), batch-hinted with `MADV_WILLNEED` per
/// page, then touched; pages per second.
pub fn mmap_batches(path: &Path, keys: &[usize], batch: usize) -> Result<f64> {
    let f = File::open(path)?;
    drop_cache(&f);
    let m = KernelMap::new(&f, libc::MADV_RANDOM)?;
    let base = m.base;
    Ok(touch_batches(base, keys, batch, |b| {
        for &k in b {
            // SAFETY: advice on a page of the mapping.
            unsafe { libc::madvise((base + k * PAGE) as *mut _, PAGE, libc::MADV_WILLNEED) };
        }
    }))
}

/// Linux `mmap` with `MADV_RANDOM`, `threads` threads reading random
/// pages; pages per second.
pub fn mmap_threads(path: &Path, keys: &[usize], threads: usize) -> Result<f64> {
    let f = File::open(path)?;
    drop_cache(&f);
    let m = KernelMap::new(&f, libc::MADV_RANDOM)?;
    Ok(touch_threads(m.base, keys, threads))
}

/// The device's own rate through the file: `reads` random 4 KiB
/// `O_DIRECT` reads through io_uring, `depth` in flight, the next
/// submitted as each completes (fio's `--rw=randread --bs=4k
/// --iodepth=N --direct=1 --ioengine=io_uring`); reads per second.
pub fn device_rate(path: &Path, depth: u32, reads: usize) -> Result<f64> {
    let store = UringStore::open(path, false, UringOptions::new().direct(true).depth(depth))?;
    if !store.is_direct() {
        return Err("O_DIRECT refused".into());
    }
    let pages = usize::try_from(store.len()?)? / PAGE;
    let keys = keys(reads, pages.max(1), 0x2545_F491_4F6C_DD1D);
    // One page-aligned buffer per read.
    let mut mem = vec![0u8; (reads + 1) * PAGE];
    let skip = (mem.as_ptr() as usize).next_multiple_of(PAGE) - mem.as_ptr() as usize;
    let mut batch: Vec<IoRequest<'_>> = mem[skip..]
        .chunks_exact_mut(PAGE)
        .zip(&keys)
        .map(|(b, &k)| IoRequest::read((k * PAGE) as u64, b))
        .collect();
    let t = Instant::now();
    let mut failed = None;
    store.submit_each(&mut batch, &mut |_, r| {
        if let Some(Err(e)) = r.result() {
            failed = Some(e);
        }
    });
    let secs = t.elapsed().as_secs_f64();
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(reads as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn keys_are_in_range_and_repeatable() {
        let a = keys(1000, 77, 5);
        assert!(a.iter().all(|&k| k < 77));
        assert_eq!(a, keys(1000, 77, 5));
        assert_ne!(a, keys(1000, 77, 6));
    }

    #[test]
    fn every_side_reads_the_file_or_says_why_not() {
        let mut f = tempfile::NamedTempFile::new_in(std::env::temp_dir()).unwrap();
        f.write_all(&vec![0x5a; 256 * PAGE]).unwrap();
        f.as_file().sync_all().unwrap();
        let k = keys(64, 256, 1);
        assert!(mmap_batches(f.path(), &k, 8).unwrap() > 0.0);
        assert!(mmap_threads(f.path(), &k, 2).unwrap() > 0.0);
        let (r, s) = umio_batches(f.path(), 1 << 20, FaultService::Fillers, &k, 8).unwrap();
        assert!(r > 0.0 && s.read_submissions > 0, "{s:?}");
        let (r, _) = umio_threads(f.path(), 1 << 20, FaultService::Fillers, &k, 2).unwrap();
        assert!(r > 0.0);
        match device_rate(f.path(), 8, 64) {
            Ok(r) => assert!(r > 0.0),
            // A temp directory on tmpfs: no O_DIRECT.
            Err(e) => eprintln!("device rate: {e}"),
        }
    }
}
