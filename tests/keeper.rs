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

/// Which of the child bodies below runs, and the file it maps.
const MODE_ENV: &str = "UMIO_TEST_KEEPER_MODE";

/// What a child body maps: the file at `path` (`PAGES` pages), through a
/// 1 MiB cache (most pages are evicted and written back by umio, the last
/// ones written only by the keeper), with `survive_process_death`.
fn map_kept(rt: &Runtime, path: &str) -> umio::Mapping {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let opts = MapOptions::new()
        .len(PAGES * PAGE)
        .writable(true)
        .survive_process_death(true);
    // SAFETY: nothing but this mapping changes the file while it lives.
    unsafe { rt.map_file(&file, opts) }.unwrap()
}

fn small_runtime() -> Runtime {
    Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(PAGE)
        .build()
        .unwrap()
}

/// Writes pattern `seed` over the whole mapping.
fn fill(map: &umio::Mapping, seed: u64) {
    let p = map.as_ptr() as *mut u64;
    for w in 0..PAGES * PAGE / 8 {
        // SAFETY: within the writable mapping, which lives.
        unsafe { p.add(w).write_volatile(word(seed, w * 8)) };
    }
}

/// A file of `PAGES` pages of pattern 0 in `dir`.
fn pattern_file(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut bytes = Vec::with_capacity(PAGES * PAGE);
    for w in 0..PAGES * PAGE / 8 {
        bytes.extend_from_slice(&word(0, w * 8).to_ne_bytes());
    }
    std::fs::write(&path, &bytes).unwrap();
    path
}

/// Checks that the file at `path` holds pattern `seed` throughout.
fn assert_pattern(path: &std::path::Path, seed: u64, what: &str) {
    let file = std::fs::read(path).unwrap();
    assert_eq!(file.len(), PAGES * PAGE, "{what}: the file's size");
    let wrong = (0..PAGES)
        .filter(|pg| {
            (pg * PAGE / 8..(pg + 1) * PAGE / 8).any(|w| {
                u64::from_ne_bytes(file[w * 8..w * 8 + 8].try_into().unwrap()) != word(seed, w * 8)
            })
        })
        .collect::<Vec<_>>();
    assert!(
        wrong.is_empty(),
        "{what}: {} of {PAGES} pages do not hold pattern {seed} (the first: page {})",
        wrong.len(),
        wrong.first().copied().unwrap_or(0)
    );
}

/// A pidfd of process `pid`.
fn pidfd(pid: i32) -> OwnedFd {
    // SAFETY: pidfd_open takes no pointer.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(fd >= 0, "pidfd_open of {pid}");
    // SAFETY: a fresh descriptor, ours.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Waits until the process of `pidfd` has exited (a hang detector of 10
/// minutes).
fn wait_exit(pidfd: &OwnedFd, what: &str) {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 600_000) };
    assert_eq!(r, 1, "{what} did not exit within 10 minutes: hung");
}

/// Starts this test binary running child body `body` in mode `mode` over
/// the file at `path`, its stdin and stdout piped.
fn spawn_child(body: &str, path: &std::path::Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", body, "--nocapture", "--test-threads=1"])
        .env(MODE_ENV, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The number after `key ` in the next line of `lines` that has one
/// (libtest may print "test NAME ... " before it); panics at the end.
fn next_value(lines: &mut impl Iterator<Item = String>, key: &str) -> i64 {
    let key = format!("{key} ");
    for line in lines.by_ref() {
        if let Some(v) = line.split(&key).nth(1) {
            return v.split_whitespace().next().unwrap().parse().unwrap();
        }
    }
    panic!("the child ended before it said `{key}`");
}

fn lines_of(child: &mut std::process::Child) -> impl Iterator<Item = String> + use<> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
}

/// The exec child: writes pattern 1 over the mapping, says its keeper,
/// waits for a line on stdin, then `exec`s `/bin/true` without unmapping
/// or flushing.
#[test]
fn keeper_exec_child_body() {
    let Ok(path) = std::env::var(MODE_ENV) else {
        return;
    };
    let rt = small_runtime();
    let map = map_kept(&rt, &path);
    fill(&map, 1);
    println!("keeper {}", umio::keeper::keeper_pid().unwrap());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let prog = c"/bin/true";
    let argv = [prog.as_ptr(), std::ptr::null()];
    // SAFETY: a NUL-terminated argument vector of C strings.
    unsafe { libc::execv(prog.as_ptr(), argv.as_ptr()) };
    panic!("execv: {}", std::io::Error::last_os_error());
}

/// `exec` discards the address space as death does: what the process
/// wrote through a mapping that survives process death and had not
/// written back reaches the file, as with a kernel `MAP_SHARED` mapping
/// (its keeper sees the program's end of their socket close, which is
/// close-on-exec, and writes the old address space it still holds), and
/// the keeper exits.
#[test]
fn exec_loses_nothing_written_to_a_mapping_that_survives_process_death() {
    if std::env::var_os(MODE_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = pattern_file(dir.path(), "exec.bin");
    let mut child = spawn_child("keeper_exec_child_body", &path);
    let mut lines = lines_of(&mut child);
    let keeper = pidfd(next_value(&mut lines, "keeper") as i32);
    writeln!(child.stdin.as_mut().unwrap(), "exec").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the child (then /bin/true): {status}");
    wait_exit(&keeper, "the keeper after exec");
    assert_pattern(&path, 1, "after exec");
}

/// The killed-keeper child: says its keeper, waits for a line on stdin
/// (its keeper was killed meanwhile), waits for a new keeper (the watch
/// starts one; a hang detector of 2 minutes), says it and how many were
/// restarted, writes pattern 1 over the mapping, says so, and waits to be
/// killed.
#[test]
fn keeper_killed_child_body() {
    let Ok(path) = std::env::var(MODE_ENV) else {
        return;
    };
    let rt = small_runtime();
    let map = map_kept(&rt, &path);
    let first = umio::keeper::keeper_pid().unwrap();
    println!("keeper {first}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let second = loop {
        match umio::keeper::keeper_pid() {
            Some(k) if k != first => break k,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no new keeper 2 minutes after the first was killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("keeper {second}");
    println!("restarts {}", umio::keeper::keeper_restarts());
    // Reaped before its successor started: no zombie left.
    let gone = !std::path::Path::new(&format!("/proc/{first}")).exists();
    println!("reaped {}", u8::from(gone));
    fill(&map, 1);
    println!("written 1");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A keeper killed on its own (`SIGKILL` to it) is noticed by the
/// program's watch, which starts a new one keeping what the first kept
/// (and counts it): a process killed afterwards still loses nothing.
#[test]
fn a_killed_keeper_is_replaced() {
    if std::env::var_os(MODE_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = pattern_file(dir.path(), "killed.bin");
    let mut child = spawn_child("keeper_killed_child_body", &path);
    let mut lines = lines_of(&mut child);
    let first = next_value(&mut lines, "keeper") as i32;
    let first_fd = pidfd(first);
    // SAFETY: kill takes no pointer; the keeper is not reaped (the child
    // does that) before its pidfd says it exited.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    wait_exit(&first_fd, "the killed keeper");
    writeln!(child.stdin.as_mut().unwrap(), "killed").unwrap();
    let second = pidfd(next_value(&mut lines, "keeper") as i32);
    assert_eq!(next_value(&mut lines, "restarts"), 1, "keeper_restarts");
    assert_eq!(
        next_value(&mut lines, "reaped"),
        1,
        "the killed keeper reaped"
    );
    assert_eq!(next_value(&mut lines, "written"), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_exit(&second, "the second keeper");
    assert_pattern(&path, 1, "killed after its keeper was");
}

/// The fork child: maps `<path>` itself (its keeper, the parent's), then
/// forks; the fork child maps `<path>.child`, writes pattern 2 over it,
/// says its pid and its keeper's, and waits to be killed.
#[test]
fn keeper_fork_child_body() {
    let Ok(path) = std::env::var(MODE_ENV) else {
        return;
    };
    let rt = small_runtime();
    let _map = map_kept(&rt, &path);
    println!("keeper {}", umio::keeper::keeper_pid().unwrap());
    std::io::stdout().flush().unwrap();
    // SAFETY: the child makes its own runtime (umio's fork handlers reset
    // what the parent's threads held) and writes with `write(2)`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let rt = small_runtime();
        let map = map_kept(&rt, &format!("{path}.child"));
        fill(&map, 2);
        let line = format!(
            "grandchild {}\nkeeper {}\n",
            std::process::id(),
            umio::keeper::keeper_pid().unwrap()
        );
        // SAFETY: writes a live buffer to stdout.
        unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
        loop {
            // SAFETY: waits for a signal.
            unsafe { libc::pause() };
        }
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A fork child does not rely on its parent's keeper: its own mapping
/// that survives process death starts a keeper of its own, which writes
/// what it wrote when it is killed, while the parent still runs.
#[test]
fn a_fork_child_has_a_keeper_of_its_own() {
    if std::env::var_os(MODE_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = pattern_file(dir.path(), "fork.bin");
    let child_path = pattern_file(dir.path(), "fork.bin.child");
    let mut child = spawn_child("keeper_fork_child_body", &path);
    let mut lines = lines_of(&mut child);
    let parents = next_value(&mut lines, "keeper") as i32;
    let grandchild = next_value(&mut lines, "grandchild") as i32;
    let keeper = next_value(&mut lines, "keeper") as i32;
    assert_ne!(keeper, parents, "the fork child's keeper is its parent's");
    let keeper_fd = pidfd(keeper);
    let parents_fd = pidfd(parents);
    // SAFETY: kill takes no pointer; the grandchild is not reaped (the
    // child does not wait) before the child is killed below.
    assert_eq!(unsafe { libc::kill(grandchild, libc::SIGKILL) }, 0);
    wait_exit(&keeper_fd, "the fork child's keeper");
    assert_pattern(&child_path, 2, "the fork child killed");
    let mut p = libc::pollfd {
        fd: parents_fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, not waited for.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    assert_eq!(r, 0, "the parent's keeper exited with the fork child");
    child.kill().unwrap();
    child.wait().unwrap();
    wait_exit(&parents_fd, "the parent's keeper");
    assert_pattern(&path, 0, "the parent, which wrote nothing");
}

/// The closing child: writes pattern 1 over the mapping, says its keeper,
/// waits for a line on stdin, then closes every socket it has (as a loop that closes every
/// descriptor would: its end of the keeper's socket among them), waits
/// for a new keeper (a hang detector of 2 minutes) and says it; after a
/// line on stdin writes pattern 2, says so, and waits to be killed.
#[test]
fn keeper_closed_child_body() {
    let Ok(path) = std::env::var(MODE_ENV) else {
        return;
    };
    // Synchronous dirty tracking whatever the environment says: pages
    // written are then written back only when evicted (asynchronous
    // tracking may write them ahead), so that a page the keeper wrote is
    // seen as such.
    let rt = Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(PAGE)
        .dirty_tracking(umio::DirtyTracking::Sync)
        .build()
        .unwrap();
    let map = map_kept(&rt, &path);
    fill(&map, 1);
    let first = umio::keeper::keeper_pid().unwrap();
    println!("keeper {first}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
        let fd = fd.unwrap();
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.to_string_lossy().starts_with("socket:") {
            let n: i32 = fd.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: closes a descriptor behind its owner's back, which
            // is what this test is about.
            unsafe { libc::close(n) };
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let second = loop {
        match umio::keeper::keeper_pid() {
            Some(k) if k != first => break k,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no new keeper 2 minutes after the socket to the first was closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("keeper {second}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    fill(&map, 2);
    println!("written 2");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A program that closes its end of the keeper's socket while it runs
/// (not an exit, not an `exec`: the keeper checks with `kcmp` that the
/// program still runs in its address space) does not make the keeper
/// write the pages under the program's feet, where it would race with
/// umio's own write-back: the keeper exits without writing, and the watch
/// starts another, which keeps the mapping.
#[test]
fn a_keeper_whose_socket_is_closed_writes_nothing_and_is_replaced() {
    if std::env::var_os(MODE_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = pattern_file(dir.path(), "closed.bin");
    let mut child = spawn_child("keeper_closed_child_body", &path);
    let mut lines = lines_of(&mut child);
    let first = pidfd(next_value(&mut lines, "keeper") as i32);
    writeln!(child.stdin.as_mut().unwrap(), "close").unwrap();
    let second = pidfd(next_value(&mut lines, "keeper") as i32);
    wait_exit(&first, "the first keeper");
    // The last pages written are in umio's cache, not written back: the
    // first keeper must not have written them while the program ran.
    let file = std::fs::read(&path).unwrap();
    let unwritten = (0..PAGES)
        .filter(|pg| {
            let w = pg * PAGE / 8;
            u64::from_ne_bytes(file[w * 8..w * 8 + 8].try_into().unwrap()) == word(0, w * 8)
        })
        .count();
    assert!(
        unwritten > 0,
        "every page holds pattern 1: the first keeper wrote while the program ran"
    );
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(next_value(&mut lines, "written"), 2);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_exit(&second, "the second keeper");
    assert_pattern(&path, 2, "killed after its socket was closed");
}
