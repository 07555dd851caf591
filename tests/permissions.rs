//! Without permission to use userfaultfd, building a runtime fails at once
//! with an error that tells the user what to change; it never hangs.

use std::os::unix::process::CommandExt;
use std::process::Command;

const CHILD_ENV: &str = "UMIO_TEST_UNPRIVILEGED_CHILD";

/// Runs in the unprivileged child only: prints the error it got.
#[test]
fn unprivileged_child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    match umio::Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(4096)
        .build()
    {
        Ok(_) => println!("CHILD-RESULT ok"),
        Err(e) => println!("CHILD-RESULT errno={} {e}", e.errno()),
    }
}

#[test]
fn unprivileged_process_gets_a_clear_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: this test needs to drop privileges from root");
        return;
    }
    let sysctl =
        std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "unprivileged_child_body",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("spawning the test binary as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.find("CHILD-RESULT").map(|i| &l[i..]))
        .unwrap_or_else(|| {
            panic!(
                "child printed no result: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    if sysctl.trim() == "1" {
        assert_eq!(
            line, "CHILD-RESULT ok",
            "unprivileged userfaultfd is allowed here"
        );
        return;
    }
    assert!(
        line.contains("errno=1 ") || line.contains("errno=13 "),
        "{line}"
    );
    assert!(line.contains("vm.unprivileged_userfaultfd"), "{line}");
    assert!(line.contains("/dev/userfaultfd"), "{line}");
}
