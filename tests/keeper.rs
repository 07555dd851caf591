//! `MapOptions::survive_process_death`: a process SIGKILLed mid-run loses
//! nothing it wrote to such a mapping, as with a kernel `MAP_SHARED`
//! mapping (whose page cache outlives the process): its keeper writes the
//! pages still in umio's cache to the file once the process is gone.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use umio::{MapOptions, Runtime};

const CHILD_ENV: &str = "UMIO_TEST_KEEPER_CHILD";
const PAGES: usize = 2048;
const PAGE: usize = 4096;

/// The word at byte `off` in pattern `seed`.
fn word(seed: u64, off: usize) -> u64 {
    (off as u64 / 8 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seed << 56)
}

/// The child: maps the file (8 MiB) through a 1 MiB cache with
/// `survive_process_death`, says its keeper's pid, then writes pattern 1,
/// 2, 3, ... over every page in turn and says after every 16 pages how
/// far it got, until it is killed.
#[test]
fn keeper_child_body() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(PAGE)
        .build()
        .unwrap();
    let opts = MapOptions::new()
        .len(PAGES * PAGE)
        .writable(true)
        .survive_process_death(true);
    // SAFETY: nothing but this mapping changes the file while it lives.
    let map = unsafe { rt.map_file(&file, opts) }.unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "keeper {}", umio::keeper::keeper_pid().unwrap()).unwrap();
    out.flush().unwrap();
    let p = map.as_ptr() as *mut u64;
    for seed in 1.. {
        for pg in 0..PAGES {
            for w in pg * PAGE / 8..(pg + 1) * PAGE / 8 {
                // SAFETY: within the writable mapping, which lives.
                unsafe { p.add(w).write_volatile(word(seed, w * 8)) };
            }
            if (pg + 1) % 16 == 0 {
                writeln!(out, "marker {seed} {}", pg + 1).unwrap();
                out.flush().unwrap();
            }
        }
    }
}

#[test]
fn a_killed_process_loses_nothing_written_to_a_mapping_that_survives_it() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.bin");
    let mut zeros = Vec::with_capacity(PAGES * PAGE);
    for w in 0..PAGES * PAGE / 8 {
        zeros.extend_from_slice(&word(0, w * 8).to_ne_bytes());
    }
    std::fs::write(&path, &zeros).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "keeper_child_body",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Hang detector: a child still running after 10 minutes is killed.
    let finished = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(600);
            while !finished.load(Ordering::Acquire) {
                if Instant::now() > deadline {
                    // SAFETY: kill takes no pointer; the child is not
                    // reaped before `finished` is set.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut keeper = None;
    let mut at = None;
    for line in BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        // (libtest may print "test keeper_child_body ... " before it.)
        if let Some(k) = line.split("keeper ").nth(1) {
            let k: i32 = k.parse().unwrap();
            // SAFETY: pidfd_open takes no pointer.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, k, 0) };
            assert!(fd >= 0, "pidfd_open of the keeper");
            // SAFETY: a fresh descriptor, ours.
            keeper = Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
            continue;
        }
        let Some(m) = line.strip_prefix("marker ") else {
            continue;
        };
        let (seed, pages) = m.split_once(' ').unwrap();
        let (seed, pages): (u64, usize) = (seed.parse().unwrap(), pages.parse().unwrap());
        // In its third pass, past the middle: pages were evicted and
        // written back in umio's order before.
        if seed >= 3 && pages >= PAGES / 2 {
            child.kill().unwrap();
            at = Some((seed, pages));
            break;
        }
    }
    let status = child.wait().unwrap();
    finished.store(true, Ordering::Release);
    watchdog.join().unwrap();
    let (seed, pages) =
        at.unwrap_or_else(|| panic!("the child ended ({status}) before it was killed"));
    let keeper = keeper.expect("the child named its keeper");
    let mut p = libc::pollfd {
        fd: keeper.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd. A hang detector of 10 minutes.
    let r = unsafe { libc::poll(&mut p, 1, 600_000) };
    assert_eq!(r, 1, "the keeper did not exit: hung");
    let file = std::fs::read(&path).unwrap();
    for pg in 0..PAGES {
        let least = if pg < pages { seed } else { seed - 1 };
        for w in pg * PAGE / 8..(pg + 1) * PAGE / 8 {
            let v = u64::from_ne_bytes(file[w * 8..w * 8 + 8].try_into().unwrap());
            let x = v ^ word(0, w * 8);
            assert!(
                x & ((1 << 56) - 1) == 0 && x >> 56 >= least,
                "killed after marker {seed} {pages}: the word at byte {} holds {v:#x}, \
                 not pattern {least} or later",
                w * 8
            );
        }
    }
}

/// Off by default: a mapping that does not ask starts no keeper.
#[test]
fn no_keeper_unless_asked() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let file = tempfile::tempfile().unwrap();
    file.set_len(1 << 20).unwrap();
    let rt = Runtime::builder().cache_bytes(1 << 20).build().unwrap();
    // SAFETY: nothing else changes the file.
    let map = unsafe { rt.map_file(&file, MapOptions::new().writable(true)) }.unwrap();
    assert!(umio::keeper::keeper_pid().is_none());
    drop(map);
}
