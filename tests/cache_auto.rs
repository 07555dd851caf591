//! The automatic cache bound (`Builder::cache_bytes_auto`) follows the
//! process's memory cgroup: a process whose limit is lowered under it while
//! it runs keeps running (no OOM kill) and its cache follows the limit down,
//! then up again.
//!
//! The process is this test binary again (`cgroup_child`, ignored unless
//! run by `cache_follows_a_lowered_cgroup_limit`), in a cgroup v1 memory
//! cgroup of its own. Needs root and the v1 memory controller (this
//! project's machines have both); elsewhere the test says SKIPPED.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use umio::{Error, MapOptions, Runtime};

const MIB: u64 = 1 << 20;
const FILE: usize = 768 << 20;

#[test]
fn bad_shares_are_refused_and_a_good_one_starts_within_reason() {
    for share in [0.0, -0.5, 1.5, f64::NAN] {
        let r = Runtime::builder().cache_bytes_auto(share).build();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{share}");
    }
    let rt = Runtime::builder().cache_bytes_auto(0.25).build().unwrap();
    let s = rt.stats();
    assert_eq!(s.cache_bytes, rt.cache_bytes());
    assert!(rt.cache_bytes() >= 4 * rt.page_size() as u64);
}

/// The memory cgroup (v1) this process is in.
fn own_memory_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| {
        let mut p = l.splitn(3, ':');
        let (_, c, path) = (p.next()?, p.next()?, p.next()?);
        c.split(',').any(|c| c == "memory").then(|| path.to_owned())
    })?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
    dir.join("memory.limit_in_bytes").exists().then_some(dir)
}

/// Sets the cgroup's limit, retrying while the kernel refuses (usage above
/// it: the process has yet to shrink).
fn set_limit(cg: &Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match std::fs::write(cg.join("memory.limit_in_bytes"), bytes.to_string()) {
            Ok(()) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("limit {bytes}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("cannot set the cgroup's limit to {bytes}: {e}"),
        }
    }
}

/// Waits up to 5 s for the child's reports to satisfy `cond` on (cache
/// bound, resident bytes); returns the last report.
fn wait_for(
    rx: &mpsc::Receiver<(u64, u64)>,
    what: &str,
    cond: impl Fn(u64, u64) -> bool,
) -> (u64, u64) {
    // A hang detector: the sizer reacts within a second or so; a loaded
    // machine may keep it waiting longer.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (0, 0);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(r) => {
                last = r;
                if cond(r.0, r.1) {
                    return r;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("{what}: the child stopped reporting: {e}"),
        }
    }
    panic!(
        "{what}: not reached in 5 s; last report: bound {} MiB, resident {} MiB",
        last.0 / MIB,
        last.1 / MIB
    );
}

#[test]
fn cache_follows_a_lowered_cgroup_limit() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let Some(parent) = own_memory_cgroup().filter(|_| root) else {
        eprintln!("SKIPPED: needs root and the cgroup v1 memory controller");
        return;
    };
    let cg = parent.join(format!("umio-auto-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _remove = Remove(cg.clone());
    set_limit(&cg, 512 * MIB);

    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, common::random_bytes(FILE, 7)).unwrap();
    let stop = dir.path().join("stop");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["cgroup_child", "--exact", "--ignored", "--nocapture"])
        .env("UMIO_TEST_CGROUP", &cg)
        .env("UMIO_TEST_FILE", &file)
        .env("UMIO_TEST_STOP", &stop)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut w = line.split_whitespace();
            if let (Some("cache"), Some(b), Some("resident"), Some(r)) =
                (w.next(), w.next(), w.next(), w.next())
                && tx.send((b.parse().unwrap(), r.parse().unwrap())).is_err()
            {
                return;
            }
        }
    });
    let result = std::panic::catch_unwind(|| {
        // Half of a 512 MiB limit, less what else the process uses.
        let (b, _) = wait_for(&rx, "start", |b, r| b > 200 * MIB && r > 150 * MIB);
        eprintln!("limit 512 MiB: bound {} MiB", b / MIB);
        set_limit(&cg, 384 * MIB);
        let (b, r) = wait_for(&rx, "limit 384 MiB", |b, r| b <= 192 * MIB && r <= b);
        eprintln!(
            "limit 384 MiB: bound {} MiB, resident {} MiB",
            b / MIB,
            r / MIB
        );
        set_limit(&cg, 256 * MIB);
        let (b, r) = wait_for(&rx, "limit 256 MiB", |b, r| b <= 128 * MIB && r <= b);
        eprintln!(
            "limit 256 MiB: bound {} MiB, resident {} MiB",
            b / MIB,
            r / MIB
        );
        set_limit(&cg, 512 * MIB);
        let (b, _) = wait_for(&rx, "limit 512 MiB again", |b, _| b > 200 * MIB);
        eprintln!("limit 512 MiB again: bound {} MiB", b / MIB);
    });
    std::fs::write(&stop, b"").unwrap();
    let status = child.wait().unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(
        status.success(),
        "the child ended with {status} (OOM kill?)"
    );
    let oom = std::fs::read_to_string(cg.join("memory.oom_control")).unwrap_or_default();
    assert!(!oom.contains("oom_kill 1"), "{oom}");
}

/// The process of `cache_follows_a_lowered_cgroup_limit`: joins the
/// cgroup, maps the file with an automatic bound (half), reads random
/// pages until told to stop, and prints its bound and resident bytes
/// every 100 ms.
#[test]
#[ignore = "run by cache_follows_a_lowered_cgroup_limit in a cgroup of its own"]
fn cgroup_child() {
    let cg = std::env::var("UMIO_TEST_CGROUP").expect("run by its parent test");
    let file = std::env::var("UMIO_TEST_FILE").unwrap();
    let stop = PathBuf::from(std::env::var("UMIO_TEST_STOP").unwrap());
    std::fs::write(
        Path::new(&cg).join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .unwrap();
    let rt = Runtime::builder()
        .cache_bytes_auto(0.5)
        .page_size(64 << 10)
        .build()
        .unwrap();
    let f = std::fs::File::open(&file).unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&f, MapOptions::new()) }.unwrap();
    let bytes = map.as_slice();
    let mut rng = common::Rng::new(3);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sum = 0u64;
    let mut last = Instant::now();
    while !stop.exists() && Instant::now() < deadline {
        for _ in 0..1000 {
            sum = sum.wrapping_add(bytes[rng.below(FILE)] as u64);
        }
        if last.elapsed() >= Duration::from_millis(100) {
            let s = rt.stats();
            println!("cache {} resident {}", s.cache_bytes, s.resident_bytes);
            last = Instant::now();
        }
    }
    std::hint::black_box(sum);
}
