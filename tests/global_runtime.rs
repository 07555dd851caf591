//! The process-wide runtime: built once from the environment, shared by
//! every caller, a clear error for malformed settings, tried again once
//! they are fixed, and a runtime of its own in a fork child.

use std::io::Write;
use std::process::Command;

const CHILD_ENV: &str = "UMIO_TEST_GLOBAL_CHILD";

#[test]
fn global_runtime_is_shared_and_maps() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let a = umio::Runtime::global().expect("global runtime");
    let b = umio::Runtime::global().expect("global runtime");
    assert!(std::ptr::eq(a, b), "one runtime per process");
    let mut tmp = tempfile::NamedTempFile::new().unwrap();
    tmp.write_all(&[42u8; 100_000]).unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { a.map_file(tmp.as_file(), umio::MapOptions::new()) }
        .expect("map through the global runtime");
    assert!(map.as_slice().iter().all(|&x| x == 42));
    map.unmap().unwrap();
}

/// Runs in the child only: reports what `Runtime::global` gave.
#[test]
fn global_runtime_child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    match umio::Runtime::global() {
        Ok(rt) => println!(
            "CHILD-RESULT ok cache={} page={} huge={:?}",
            rt.cache_bytes(),
            rt.page_size(),
            rt.huge_cache_bytes()
        ),
        Err(e) => println!("CHILD-RESULT errno={} {e}", e.errno()),
    }
    // A second call gives the same answer.
    match umio::Runtime::global() {
        Ok(_) => println!("CHILD-SECOND ok"),
        Err(e) => println!("CHILD-SECOND errno={}", e.errno()),
    }
}

fn run_child(vars: &[(&str, &str)]) -> (String, String) {
    run_child_body("global_runtime_child_body", vars)
}

/// Runs the test `body` alone in a child process with `vars` set; returns
/// what it printed after `CHILD-RESULT` and `CHILD-SECOND`.
fn run_child_body(body: &str, vars: &[(&str, &str)]) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", body, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawning the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let find = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(tag).map(|i| l[i + tag.len()..].trim().to_owned()))
            .unwrap_or_else(|| panic!("child printed no {tag}: {stdout}"))
    };
    (find("CHILD-RESULT"), find("CHILD-SECOND"))
}

#[test]
fn environment_configures_the_global_runtime() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let (first, second) = run_child(&[
        ("UMIO_CACHE_BYTES", "96M"),
        ("UMIO_PAGE_SIZE", "16K"),
        ("UMIO_HUGE_CACHE_BYTES", "16M"),
        ("UMIO_FILLER_SPIN_US", "auto"),
    ]);
    assert_eq!(
        first,
        format!(
            "ok cache={} page={} huge=Some({})",
            96 << 20,
            16 << 10,
            16 << 20
        )
    );
    assert_eq!(second, "ok");
    let (first, _) = run_child(&[("UMIO_FILLER_SPIN_US", "30")]);
    assert!(first.starts_with("ok "), "{first}");
}

#[test]
fn malformed_environment_is_an_error_every_time() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    for (var, value, needle) in [
        ("UMIO_CACHE_BYTES", "lots", "UMIO_CACHE_BYTES"),
        ("UMIO_PAGE_SIZE", "5000", "page size"),
        ("UMIO_FILLERS", "-3", "UMIO_FILLERS"),
        ("UMIO_EVICTION", "random", "UMIO_EVICTION"),
        ("UMIO_EVICT_HIGH_WATER", "300", "UMIO_EVICT_HIGH_WATER"),
        ("UMIO_CACHE_BYTES", "abc", "UMIO_CACHE_BYTES"),
        ("UMIO_CACHE_BYTES", "-1", "UMIO_CACHE_BYTES"),
        ("UMIO_CACHE_BYTES", "99999999999T", "UMIO_CACHE_BYTES"),
        ("UMIO_CACHE_BYTES", "0", "cache_bytes"),
        ("UMIO_PAGE_SIZE", "-1", "UMIO_PAGE_SIZE"),
        ("UMIO_PAGE_SIZE", "4Q", "UMIO_PAGE_SIZE"),
        ("UMIO_PAGE_SIZE", "2G", "page size"),
        ("UMIO_FILLERS", "0", "fillers"),
        ("UMIO_FILLERS", "four", "UMIO_FILLERS"),
        ("UMIO_EVICTORS", "-1", "UMIO_EVICTORS"),
        ("UMIO_EVICT_LOW_WATER", "abc", "UMIO_EVICT_LOW_WATER"),
        ("UMIO_EVICT_LOW_WATER", "95", "watermarks"),
        ("UMIO_PREFETCH", "psychic", "UMIO_PREFETCH"),
        ("UMIO_READAHEAD", "lots", "UMIO_READAHEAD"),
        ("UMIO_FILLER_SPIN_US", "-5", "UMIO_FILLER_SPIN_US"),
        ("UMIO_FILLER_SPIN_US", "often", "UMIO_FILLER_SPIN_US"),
        ("UMIO_HUGE_CACHE_BYTES", "lots", "UMIO_HUGE_CACHE_BYTES"),
        ("UMIO_HUGE_CACHE_BYTES", "4M", "huge_cache_bytes"),
        ("UMIO_PROMOTE", "maybe", "UMIO_PROMOTE"),
        ("UMIO_UFFD_MODE", "sometimes", "UMIO_UFFD_MODE"),
    ] {
        let (first, second) = run_child(&[(var, value)]);
        assert!(first.starts_with("errno=22 "), "{var}={value}: {first}");
        assert!(first.contains(needle), "{var}={value}: {first}");
        assert_eq!(second, "errno=22", "{var}={value}: the error is kept");
    }
}

/// Runs in the child only: the environment fixed, the next call starts.
#[test]
fn fixed_environment_child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let errno = || umio::Runtime::global().map(|_| ()).map_err(|e| e.errno());
    let (first, second) = (errno(), errno());
    println!("CHILD-RESULT {first:?} {second:?}");
    // SAFETY: no other thread of this child reads or writes the
    // environment now (the test harness's main thread waits for this one).
    unsafe { std::env::set_var("UMIO_FILLERS", "2") };
    match umio::Runtime::global() {
        Ok(_) => println!("CHILD-SECOND ok"),
        Err(e) => println!("CHILD-SECOND errno={} {e}", e.errno()),
    }
}

#[test]
fn failed_start_is_kept_until_the_environment_changes() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let (first, second) = run_child_body("fixed_environment_child_body", &[("UMIO_FILLERS", "0")]);
    assert_eq!(first, "Err(22) Err(22)");
    assert_eq!(second, "ok", "a changed environment is tried again");
}

/// Runs in the child only: maps through the global runtime, forks, and
/// reports how the grandchild fared with its own.
#[test]
fn fork_child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let parent = umio::Runtime::global().expect("global runtime");
    let mut tmp = tempfile::NamedTempFile::new().unwrap();
    tmp.write_all(&[7u8; 256 << 10]).unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { parent.map_file(tmp.as_file(), umio::MapOptions::new()) }.unwrap();
    assert!(map.as_slice()[..128 << 10].iter().all(|&x| x == 7));
    // SAFETY: the child uses umio (glibc's fork leaves malloc usable, and
    // no umio lock is held: this thread holds none, umio's threads take no
    // lock of the global runtime) and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match umio::Runtime::global() {
            Err(_) => 1,
            // The parent's: its threads are not in this process.
            Ok(rt) if std::ptr::eq(rt, parent) => 2,
            // SAFETY: nothing but this mapping changes the store while a slice of it lives.
            Ok(rt) => match unsafe { rt.map_file(tmp.as_file(), umio::MapOptions::new()) } {
                Ok(m) if m.as_slice().iter().all(|&x| x == 7) => 0,
                Ok(_) => 3,
                Err(_) => 4,
            },
        };
        // SAFETY: ends the child at once, running no exit handler.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(status) {
        println!("CHILD-RESULT exit {}", libc::WEXITSTATUS(status));
    } else {
        println!("CHILD-RESULT status {status:#x}");
    }
    // The parent's runtime still serves its pages.
    let same = std::ptr::eq(umio::Runtime::global().unwrap(), parent);
    let read = map.as_slice()[128 << 10..].iter().all(|&x| x == 7);
    println!("CHILD-SECOND same {same} read {read}");
}

#[test]
fn fork_child_starts_a_global_runtime_of_its_own() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let (child, parent) = run_child_body("fork_child_body", &[]);
    // 1: no runtime; 2: the parent's; 3, 4: its mapping failed.
    assert_eq!(child, "exit 0");
    assert_eq!(parent, "same true read true");
}
