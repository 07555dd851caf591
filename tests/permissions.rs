//! Least privilege: what an unprivileged process gets, in each of the ways
//! userfaultfd can be made available to it.
//!
//! As root, the test flips the machine's state (the sysctl
//! `vm.unprivileged_userfaultfd` and the owner of `/dev/userfaultfd`),
//! each time behind a guard that restores it, even when an assertion
//! fails, and runs this binary again as `nobody` (uid 65534, no
//! capabilities), which maps a file and reports what works:
//!
//! - device access granted, or the sysctl at 1: full mode; a mapped buffer
//!   passed to `read(2)`/`write(2)` works whether resident or not;
//! - neither: umio falls back to user-mode-only faults; plain loads and
//!   stores work; a system call given a non-resident page fails with
//!   `EFAULT`, and so does one writing into a clean page of a writable
//!   mapping; pinning (or prefetching) first, and writing once to a page
//!   the kernel is to write, makes them work; requiring full mode fails
//!   with an error that says what to change.
//!
//! The cases run in sequence in one test function, and under a file lock
//! shared with any other process running this test, since they change
//! global state.

mod common;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use umio::{MapOptions, PrefetchKind, Runtime, UffdMode};

const CHILD_ENV: &str = "UMIO_TEST_UNPRIVILEGED_CHILD";
const SYSCTL: &str = "/proc/sys/vm/unprivileged_userfaultfd";
const DEVICE: &str = "/dev/userfaultfd";
const NOBODY: u32 = 65534;
const PAGE: usize = 4096;
const PAGES: usize = 16;

fn report(key: &str, value: impl std::fmt::Display) {
    println!("CHILD {key}={value}");
}

/// `ok` if the call moved a whole page, `EFAULT`, or what else it did.
fn outcome(n: isize) -> String {
    if n == PAGE as isize {
        return "ok".into();
    }
    let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    match (n, e) {
        (-1, libc::EFAULT) => "EFAULT".into(),
        _ => format!("other:{n}/{e}"),
    }
}

/// `write(2)` of one page of the mapping, at `addr`, to the start of `out`.
fn write_from(out: &File, addr: *const u8) -> String {
    // SAFETY: addr is the start of a mapped page of PAGE bytes; the kernel
    // only reads it.
    let n = unsafe { libc::pwrite(out.as_raw_fd(), addr.cast(), PAGE, 0) };
    outcome(n)
}

/// `read(2)` of one page of `src` from offset 0 into the mapping at `addr`.
fn read_into(src: &File, addr: *mut u8) -> String {
    // SAFETY: addr is the start of a mapped, writable page of PAGE bytes
    // that no reference to the mapping's slice covers meanwhile.
    let n = unsafe { libc::pread(src.as_raw_fd(), addr.cast(), PAGE, 0) };
    outcome(n)
}

fn page_of_file(f: &mut File) -> Vec<u8> {
    let mut v = vec![0u8; PAGE];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut v).unwrap();
    v
}

/// Runs in the child only: builds a runtime as the environment says, maps
/// a file and reports what works. Asserts what holds in every mode.
#[test]
fn unprivileged_child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let builder = || {
        // Fillers: only they serve the kernel's own faults in full mode,
        // which is what this test checks.
        Runtime::builder()
            .cache_bytes(1 << 20)
            .page_size(PAGE)
            .fillers(2)
            .fault_service(umio::FaultService::Fillers)
    };
    // SAFETY: geteuid has no preconditions.
    report("euid", unsafe { libc::geteuid() });
    match builder().uffd_mode(UffdMode::Full).build() {
        Ok(rt) => report("full", format!("ok user_mode_only={}", rt.user_mode_only())),
        Err(e) => report("full", format!("errno={} {e}", e.errno())),
    }
    let rt = match builder().from_env().and_then(|b| b.build()) {
        Ok(rt) => rt,
        Err(e) => {
            report("build", format!("errno={} {e}", e.errno()));
            return;
        }
    };
    report("build", "ok");
    report("user_mode_only", rt.user_mode_only());
    report("dirty_tracking", rt.dirty_tracking().name());
    report(
        "probe_user_mode_only",
        umio::kernel_features().unwrap().user_mode_only(),
    );

    let data = common::random_bytes(PAGES * PAGE, 11);
    let (tmp, file) = common::rw_file_with(&data);
    let src_data = common::random_bytes(PAGE, 12);
    let (_src_tmp, src) = common::file_with(&src_data);
    let mut out = tempfile::tempfile().unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe {
        rt.map_file(
            &file,
            MapOptions::new()
                .writable(true)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    let base = m.as_mut_ptr();
    let page = |i: usize| i * PAGE..(i + 1) * PAGE;

    // Plain loads and stores, flushed to the file, work in every mode.
    common::assert_same(&m.as_slice()[page(0)], &data[page(0)], "load of page 0");
    m.as_mut_slice()[page(1)].fill(0xAB);
    m.flush().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    assert!(
        on_disk[page(1)].iter().all(|&b| b == 0xAB),
        "store of page 1"
    );
    report("plain", "ok");

    // write(2) from a page never touched.
    assert!(!m.mapping().is_resident(8 * PAGE));
    // SAFETY: page 8 lies inside the mapping.
    let r = write_from(&out, unsafe { base.add(8 * PAGE) });
    if r == "ok" {
        common::assert_same(
            &page_of_file(&mut out),
            &data[page(8)],
            "write(2) of page 8",
        );
    }
    report("write_nonresident", r);

    // read(2) into a page never touched.
    assert!(!m.mapping().is_resident(9 * PAGE));
    // SAFETY: page 9 lies inside the mapping; no slice is held.
    let r = read_into(&src, unsafe { base.add(9 * PAGE) });
    if r == "ok" {
        common::assert_same(&m.as_slice()[page(9)], &src_data, "read(2) into page 9");
    }
    report("read_nonresident", r);

    // Pinned pages are resident: the kernel can read them. It can write
    // them only once they are dirty (a clean page is write-protected).
    m.mapping().pin(10 * PAGE..12 * PAGE).unwrap();
    assert!(m.mapping().is_resident(10 * PAGE) && m.mapping().is_resident(11 * PAGE));
    // SAFETY: page 10 lies inside the mapping.
    let r = write_from(&out, unsafe { base.add(10 * PAGE) });
    assert_eq!(r, "ok", "write(2) from a pinned page");
    common::assert_same(
        &page_of_file(&mut out),
        &data[page(10)],
        "write(2) of page 10",
    );
    report("write_pinned", r);
    // SAFETY: page 11 lies inside the mapping; no slice is held.
    let r = read_into(&src, unsafe { base.add(11 * PAGE) });
    report("read_pinned_clean", &r);
    if r != "ok" {
        common::assert_same(&m.as_slice()[page(11)], &data[page(11)], "page 11 intact");
    }
    // One store dirties the page (and lifts its write protection).
    m.as_mut_slice()[11 * PAGE] = 0;
    // SAFETY: as above.
    let r = read_into(&src, unsafe { base.add(11 * PAGE) });
    assert_eq!(r, "ok", "read(2) into a pinned, dirty page");
    common::assert_same(&m.as_slice()[page(11)], &src_data, "read(2) into page 11");
    report("read_pinned_dirty", r);
    m.mapping().unpin(10 * PAGE..12 * PAGE).unwrap();

    // Prefetch, then wait for the page to be resident.
    m.mapping().prefetch(page(12)).unwrap();
    common::eventually("page 12 prefetched", Duration::from_millis(1), || {
        m.mapping().is_resident(12 * PAGE)
    });
    // SAFETY: page 12 lies inside the mapping.
    let r = write_from(&out, unsafe { base.add(12 * PAGE) });
    assert_eq!(r, "ok", "write(2) from a prefetched page");
    common::assert_same(
        &page_of_file(&mut out),
        &data[page(12)],
        "write(2) of page 12",
    );
    report("write_prefetched", r);

    // Whatever went through the kernel reaches the file like a store.
    m.unmap().unwrap();
    let on_disk = std::fs::read(tmp.path()).unwrap();
    common::assert_same(&on_disk[page(11)], &src_data, "page 11 on disk");
    report("done", "ok");
}

/// Serializes the processes that run this test: they change global state.
struct GlobalLock(#[allow(dead_code)] File);

impl GlobalLock {
    fn acquire() -> GlobalLock {
        let f = File::create("/tmp/umio-permissions-test.lock").unwrap();
        // SAFETY: flock on a descriptor we own; it blocks until granted.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
        GlobalLock(f)
    }
}

/// Sets `vm.unprivileged_userfaultfd` and restores it when dropped.
struct Sysctl {
    original: String,
}

impl Sysctl {
    fn set(value: &str) -> Sysctl {
        let original = std::fs::read_to_string(SYSCTL).unwrap().trim().to_owned();
        let guard = Sysctl { original };
        std::fs::write(SYSCTL, value).unwrap();
        assert_eq!(std::fs::read_to_string(SYSCTL).unwrap().trim(), value);
        guard
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(SYSCTL, &self.original) {
            eprintln!("could not restore {SYSCTL} to {}: {e}", self.original);
        }
    }
}

/// Sets the owner and mode of `/dev/userfaultfd`; restores both when
/// dropped.
struct Device {
    uid: u32,
    gid: u32,
    mode: u32,
}

impl Device {
    fn set(uid: u32, gid: u32, mode: u32) -> Device {
        let meta = std::fs::metadata(DEVICE).unwrap();
        let guard = Device {
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        };
        std::os::unix::fs::chown(DEVICE, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(DEVICE, std::fs::Permissions::from_mode(mode)).unwrap();
        guard
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let owner = std::os::unix::fs::chown(DEVICE, Some(self.uid), Some(self.gid));
        let mode = std::fs::set_permissions(DEVICE, std::fs::Permissions::from_mode(self.mode));
        if owner.is_err() || mode.is_err() {
            eprintln!("could not restore {DEVICE}: {owner:?} {mode:?}");
        }
    }
}

/// Runs the child body as `uid` with `env`; returns its `CHILD` lines as
/// key=value pairs. Kills it after 60 s.
fn run_child(uid: u32, env: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "unprivileged_child_body",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1")
    .env_remove("UMIO_UFFD_MODE")
    // What is checked here is the kernel's own faults, which only the
    // fillers serve: the child's `from_env` must not switch to the
    // in-thread service when the suite runs in that mode.
    .env_remove("UMIO_FAULT_SERVICE")
    .env("TMPDIR", "/tmp")
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().expect("spawning the test binary");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "child hung:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| {
            let l = &l[l.find("CHILD ")? + 6..];
            let (k, v) = l.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn get<'a>(lines: &'a [(String, String)], key: &str) -> &'a str {
    lines
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("child reported no {key}: {lines:?}"))
}

/// Full mode: every system call works on non-resident pages.
fn assert_full_mode(case: &str, r: &[(String, String)]) {
    eprintln!("{case}: {r:?}");
    assert_eq!(get(r, "build"), "ok", "{case}");
    assert_eq!(get(r, "full"), "ok user_mode_only=false", "{case}");
    assert_eq!(get(r, "user_mode_only"), "false", "{case}");
    assert_eq!(get(r, "probe_user_mode_only"), "false", "{case}");
    for key in [
        "plain",
        "write_nonresident",
        "read_nonresident",
        "write_pinned",
        "read_pinned_clean",
        "read_pinned_dirty",
        "write_prefetched",
        "done",
    ] {
        assert_eq!(get(r, key), "ok", "{case}: {key}");
    }
}

/// User-mode-only: as documented, EFAULT unless resident (and dirty, for
/// the kernel to write).
fn assert_user_mode_only(case: &str, r: &[(String, String)]) {
    eprintln!("{case}: {r:?}");
    assert_eq!(get(r, "build"), "ok", "{case}");
    assert_eq!(get(r, "user_mode_only"), "true", "{case}");
    assert_eq!(get(r, "plain"), "ok", "{case}");
    assert_eq!(get(r, "write_nonresident"), "EFAULT", "{case}");
    assert_eq!(get(r, "read_nonresident"), "EFAULT", "{case}");
    assert_eq!(get(r, "write_pinned"), "ok", "{case}");
    // A clean page is write-protected; under asynchronous dirty tracking
    // the kernel resolves a write to it itself, its own writes too.
    let clean = if get(r, "dirty_tracking") == "async" {
        "ok"
    } else {
        "EFAULT"
    };
    assert_eq!(get(r, "read_pinned_clean"), clean, "{case}");
    assert_eq!(get(r, "read_pinned_dirty"), "ok", "{case}");
    assert_eq!(get(r, "write_prefetched"), "ok", "{case}");
    assert_eq!(get(r, "done"), "ok", "{case}");
}

#[test]
fn unprivileged_users_get_full_mode_or_the_documented_fallback() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: not root; this test changes the sysctl and drops privileges");
        return;
    }
    if std::fs::metadata(DEVICE).is_err() {
        eprintln!("SKIPPED: no {DEVICE}");
        return;
    }
    let _lock = GlobalLock::acquire();

    // Neither the sysctl nor the device: user-mode-only.
    {
        let _sysctl = Sysctl::set("0");
        let _device = Device::set(0, 0, 0o600);
        let r = run_child(NOBODY, &[]);
        assert_eq!(get(&r, "euid"), NOBODY.to_string());
        assert_user_mode_only("nobody, no permission", &r);
        assert_eq!(get(&r, "probe_user_mode_only"), "true");
        // Requiring full mode fails, saying what to change.
        let full = get(&r, "full");
        assert!(full.starts_with("errno=1 "), "{full}");
        for remedy in [
            "run as root",
            "/dev/userfaultfd",
            "vm.unprivileged_userfaultfd=1",
        ] {
            assert!(full.contains(remedy), "{remedy} not in: {full}");
        }
        // So does the environment's way of requiring it.
        let r = run_child(NOBODY, &[("UMIO_UFFD_MODE", "full")]);
        let build = get(&r, "build");
        assert!(
            build.starts_with("errno=1 ") && build.contains("vm.unprivileged_userfaultfd=1"),
            "{build}"
        );
        // And garbage in it is an error, not a fallback.
        let r = run_child(NOBODY, &[("UMIO_UFFD_MODE", "sometimes")]);
        let build = get(&r, "build");
        assert!(
            build.starts_with("errno=22 ") && build.contains("UMIO_UFFD_MODE"),
            "{build}"
        );
    }

    // Read-write access to /dev/userfaultfd: full mode.
    {
        let _sysctl = Sysctl::set("0");
        let _device = Device::set(NOBODY, NOBODY, 0o600);
        let r = run_child(NOBODY, &[]);
        assert_eq!(get(&r, "euid"), NOBODY.to_string());
        assert_full_mode("nobody, owner of /dev/userfaultfd", &r);
    }

    // vm.unprivileged_userfaultfd=1: full mode.
    {
        let _sysctl = Sysctl::set("1");
        let _device = Device::set(0, 0, 0o600);
        let r = run_child(NOBODY, &[]);
        assert_full_mode("nobody, vm.unprivileged_userfaultfd=1", &r);
    }

    // Root, asking for user-mode-only: the same as the fallback.
    let r = run_child(0, &[("UMIO_UFFD_MODE", "user")]);
    assert_eq!(get(&r, "euid"), "0");
    assert_user_mode_only("root, UMIO_UFFD_MODE=user", &r);
    assert_eq!(get(&r, "probe_user_mode_only"), "false");
}
