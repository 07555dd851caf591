//! The block device under a file, and its own rates with no page cache and
//! no umio in them: 4 KiB `O_DIRECT` reads at random offsets one at a time
//! and 32 at a time, and 2 MiB `O_DIRECT` reads in order. A reader of a
//! benchmark needs them to tell what its numbers mean: a mapping's random
//! misses per second beside the device's one-at-a-time reads per second, a
//! scan's bytes per second beside the device's large reads.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::bench::Result;

/// The block device a file's file system is on, from sysfs.
#[derive(Clone, Debug)]
pub struct BlockDevice {
    /// The device's name (`vda`, `nvme0n1p2`, `loop3`).
    pub name: String,
    /// The whole disk's name when `name` is a partition, else `name`.
    pub disk: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Whether the kernel takes it for a rotating disk.
    pub rotational: bool,
    /// The kernel's read-ahead window for it (`queue/read_ahead_kb`).
    pub read_ahead_kb: Option<u64>,
    /// Its model or driver, where sysfs says (`virtio`, a disk's model).
    pub model: Option<String>,
    /// A loop device's backing file.
    pub backing_file: Option<PathBuf>,
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

impl BlockDevice {
    /// The block device holding `file`, or `None` where its file system
    /// has none (tmpfs, overlay, a network file system).
    pub fn of(file: &File) -> Option<BlockDevice> {
        let dev = file.metadata().ok()?.dev();
        let sys = PathBuf::from(format!(
            "/sys/dev/block/{}:{}",
            libc::major(dev),
            libc::minor(dev)
        ))
        .canonicalize()
        .ok()?;
        let name = read_trim(sys.join("uevent"))?
            .lines()
            .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_owned))?;
        // A partition has no queue of its own: its disk's is one level up.
        let disk_dir = if sys.join("partition").exists() {
            sys.parent()?.to_path_buf()
        } else {
            sys.clone()
        };
        let disk = disk_dir.file_name()?.to_string_lossy().into_owned();
        let model = read_trim(disk_dir.join("device/model")).or_else(|| {
            let driver = disk_dir.join("device/driver").canonicalize().ok()?;
            let driver = driver.file_name()?.to_string_lossy().into_owned();
            Some(match driver.as_str() {
                "virtio_blk" => "virtio disk".to_owned(),
                d => d.to_owned(),
            })
        });
        Some(BlockDevice {
            bytes: read_trim(sys.join("size"))?.parse::<u64>().ok()? * 512,
            rotational: read_trim(disk_dir.join("queue/rotational")).as_deref() == Some("1"),
            read_ahead_kb: read_trim(disk_dir.join("queue/read_ahead_kb"))?
                .parse()
                .ok(),
            backing_file: read_trim(disk_dir.join("loop/backing_file")).map(PathBuf::from),
            model,
            name,
            disk,
        })
    }

    /// One line: name, model, size, kind, read-ahead.
    pub fn describe(&self) -> String {
        let mut s = format!("/dev/{}", self.name);
        if self.disk != self.name {
            s += &format!(" (a partition of /dev/{})", self.disk);
        }
        if let Some(m) = &self.model {
            s += &format!(", {m}");
        }
        if let Some(b) = &self.backing_file {
            s += &format!(", a loop device over {}", b.display());
        }
        s += &format!(
            ", {:.0} GiB, {}",
            self.bytes as f64 / (1u64 << 30) as f64,
            if self.rotational {
                "rotational (says sysfs)"
            } else {
                "non-rotational (says sysfs)"
            }
        );
        if let Some(kb) = self.read_ahead_kb {
            s += &format!(", kernel read-ahead {kb} KiB");
        }
        s
    }
}

/// The device's own rates, measured through one file with `O_DIRECT`.
#[derive(Clone, Copy, Debug)]
pub struct DeviceRates {
    /// 4 KiB reads per second at random offsets, one at a time.
    pub random_4k_qd1: f64,
    /// 4 KiB reads per second at random offsets, 32 in flight (32 threads).
    pub random_4k_qd32: f64,
    /// Bytes per second of 2 MiB reads in order, one at a time.
    pub seq_2m: f64,
}

/// The queue depth of [`DeviceRates::random_4k_qd32`].
pub const DEPTH: usize = 32;
const SMALL: usize = 4096;
const LARGE: usize = 2 << 20;

/// A buffer aligned for `O_DIRECT`.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a valid layout");
        // SAFETY: the layout's size is not zero (callers pass SMALL or LARGE).
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    /// One `O_DIRECT` read filling the whole buffer from `offset`.
    fn read_at(&mut self, file: &File, offset: u64) -> Result<()> {
        // SAFETY: ptr is layout.size() writable bytes owned by self, and
        // pread returns before the borrow of self ends.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                self.ptr.cast(),
                self.layout.size(),
                offset as libc::off_t,
            )
        };
        if n != self.layout.size() as isize {
            return Err(format!(
                "O_DIRECT read of {} bytes at {offset}: {}",
                self.layout.size(),
                if n < 0 {
                    std::io::Error::last_os_error().to_string()
                } else {
                    format!("{n} bytes")
                }
            )
            .into());
        }
        Ok(())
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Reads per second of `threads` threads each reading one 4 KiB block at a
/// random offset of the first `len` bytes at a time, for `each`.
fn random_rate(file: &File, len: u64, threads: usize, each: Duration) -> Result<f64> {
    let blocks = len / SMALL as u64;
    let done = AtomicU64::new(0);
    let start = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as u64)
            .map(|t| {
                let done = &done;
                s.spawn(move || {
                    let mut buf = AlignedBuf::new(SMALL);
                    let mut x = 0x2545_f491_4f6c_dd1d ^ (t + 1).wrapping_mul(0x9e37_79b9);
                    // Each thread stops on its own clock: one that fails
                    // does not keep the others going. Each reads at least
                    // once: a thread started late on a loaded machine
                    // still counts, and the rate is never a starved 0.
                    loop {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        buf.read_at(file, x % blocks * SMALL as u64)
                            .map_err(|e| e.to_string())?;
                        done.fetch_add(1, Ordering::Relaxed);
                        if start.elapsed() >= each {
                            return Ok(());
                        }
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a reader panicked".into())))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / secs)
}

/// Bytes per second of 2 MiB reads in order through the first `len` bytes
/// (from the start again at the end), one at a time, for `each`.
fn sequential_rate(file: &File, len: u64, each: Duration) -> Result<f64> {
    let windows = len / LARGE as u64;
    if windows == 0 {
        return Err("the file is smaller than one 2 MiB read".into());
    }
    let mut buf = AlignedBuf::new(LARGE);
    let start = Instant::now();
    let mut n = 0u64;
    // At least one read, however late this thread runs.
    loop {
        buf.read_at(file, n % windows * LARGE as u64)?;
        n += 1;
        if start.elapsed() >= each {
            break;
        }
    }
    Ok((n * LARGE as u64) as f64 / start.elapsed().as_secs_f64())
}

/// The device's rates through the file at `path`, about `each` of each
/// kind of read. Errors where the file cannot be opened with `O_DIRECT`
/// (tmpfs, some network file systems) or is smaller than 2 MiB.
pub fn measure(path: &Path, each: Duration) -> Result<DeviceRates> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("opening {} with O_DIRECT: {e}", path.display()))?;
    let len = file.metadata()?.len();
    if len < LARGE as u64 {
        return Err("the file is smaller than one 2 MiB read".into());
    }
    Ok(DeviceRates {
        random_4k_qd1: random_rate(&file, len, 1, each)?,
        random_4k_qd32: random_rate(&file, len, DEPTH, each)?,
        seq_2m: sequential_rate(&file, len, each)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `len` bytes in the temp directory, written and synced.
    fn data_file(len: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![0x5a; len]).unwrap();
        f.as_file().sync_all().unwrap();
        f
    }

    #[test]
    fn rates_are_measured_through_the_file_or_refused_with_the_reason() {
        let f = data_file(4 * LARGE);
        match measure(f.path(), Duration::from_millis(50)) {
            Ok(r) => {
                for (what, v) in [
                    ("4 KiB one at a time", r.random_4k_qd1),
                    ("4 KiB 32 at a time", r.random_4k_qd32),
                    ("2 MiB in order", r.seq_2m),
                ] {
                    assert!(v.is_finite() && v > 0.0, "{what}: {v}");
                }
            }
            // A temp directory whose file system refuses O_DIRECT.
            Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
        }
    }

    #[test]
    fn a_file_smaller_than_one_large_read_is_an_error_not_a_hang() {
        let f = data_file(LARGE / 2);
        let e = measure(f.path(), Duration::from_millis(50)).unwrap_err();
        assert!(
            e.to_string().contains("O_DIRECT") || e.to_string().contains("smaller"),
            "{e}"
        );
    }

    #[test]
    fn a_file_on_tmpfs_has_no_block_device() {
        let Ok(f) = tempfile::NamedTempFile::new_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm");
            return;
        };
        assert!(BlockDevice::of(f.as_file()).is_none());
    }

    #[test]
    fn a_file_on_a_block_device_names_it_and_its_size() {
        let f = data_file(4096);
        let dev = f.as_file().metadata().unwrap().dev();
        if libc::major(dev) == 0 {
            eprintln!("skipped: the temp directory's file system has no block device");
            return;
        }
        let d = BlockDevice::of(f.as_file()).expect("the temp directory's block device");
        assert!(
            Path::new("/sys/class/block").join(&d.name).exists(),
            "{d:?}"
        );
        assert!(d.bytes >= 4096, "{d:?}");
        assert!(
            d.describe().starts_with(&format!("/dev/{}", d.name)),
            "{d:?}"
        );
    }
}
