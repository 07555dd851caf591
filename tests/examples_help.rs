//! Every example takes `--help` (what it does, its flags and defaults,
//! exit 0) and refuses a flag it does not know (exit 2, naming it): one
//! parser for all (`umio_bench::cli`). rados and spdk_fault need their
//! cargo features and libraries, and are not built here. And the demo, the
//! first thing a user runs, ends whatever the disk: each run stops at its
//! deadline and says how far it got, and the output names the device and
//! both mmap advices.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `exe` with `args`; fails the test if it has not exited within 30
/// seconds (an example that ignored `--help` would start its workload).
fn run(exe: &Path, args: &[&str]) -> Output {
    run_within(exe, args, Duration::from_secs(30))
}

/// Runs `exe` with `args`; fails the test if it has not exited within
/// `limit` (a hang, not a slow run: callers give room to spare).
fn run_within(exe: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {args:?} still runs after {limit:?}", exe.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const EXAMPLES: [&str; 9] = [
    "backends",
    "bench",
    "bfs",
    "cache_resize",
    "demo",
    "fault_path",
    "huge",
    "policies",
    "quickstart",
];

/// The benchmark tool's subcommands (`examples/bench`).
const BENCH: [&str; 6] = [
    "direct-io",
    "random-threads",
    "scan-halves",
    "scan-limits",
    "hint-batches",
    "report",
];

/// The examples of this test run's profile, built fresh (a test target
/// alone does not build them).
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "--examples"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cargo.arg("--release");
        }
        Some(profile) => {
            cargo.args(["--profile", profile]);
        }
        None => panic!("no profile directory above {}", exe.display()),
    }
    let out = cargo.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building the examples failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile_dir.join("examples")
}

#[test]
fn every_example_has_help_and_refuses_unknown_flags() {
    let dir = examples_dir();
    for name in EXAMPLES {
        let exe = dir.join(name);
        let help = run(&exe, &["--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{name} --help: {}", help.status);
        assert!(
            text.contains(&format!("Usage: {name}")),
            "{name} --help:\n{text}"
        );
        assert!(
            text.lines().next().is_some_and(|l| l.len() > 20),
            "{name}: no description:\n{text}"
        );
        let bad = run(&exe, &["--no-such-flag"]);
        let err = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{name} --no-such-flag:\n{err}");
        assert!(err.contains("--no-such-flag"), "{name}:\n{err}");
    }
    for sub in BENCH {
        let exe = dir.join("bench");
        let help = run(&exe, &[sub, "--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "bench {sub} --help: {}", help.status);
        assert!(
            text.contains(&format!("Usage: bench {sub}")) && text.contains("--out <DIR>"),
            "bench {sub} --help:\n{text}"
        );
        let bad = run(&exe, &[sub, "--no-such-flag"]);
        let err = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(
            bad.status.code(),
            Some(2),
            "bench {sub} --no-such-flag:\n{err}"
        );
        assert!(err.contains("--no-such-flag"), "bench {sub}:\n{err}");
    }
    let listed = run(&dir.join("bench"), &["--help"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    for sub in BENCH {
        assert!(
            text.contains(sub),
            "bench --help does not list {sub}:\n{text}"
        );
    }
    // Flags with values show their defaults.
    let demo = run(&dir.join("demo"), &["--help"]);
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(
        text.contains("--size <MiB>") && text.contains("[default: 256]"),
        "{text}"
    );
    let bad = run(&dir.join("demo"), &["--size", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a positive number"));
}

/// With more reads and writes asked for than any machine does in a second
/// (2^40), every run of the demo ends at its one-second deadline, says so,
/// and the demo still checks what was read and prints its table: the
/// device it ran on and both mmap advices named.
#[test]
fn demo_runs_stop_at_their_deadline_and_the_output_names_device_and_advices() {
    let dir = examples_dir();
    let out = run_within(
        &dir.join("demo"),
        &[
            "--size",
            "64",
            "--budget",
            "32",
            "--seconds",
            "1",
            "--ops",
            "1099511627776",
        ],
        // Eight one-second runs and three one-second device probes; the
        // rest is room for a loaded machine.
        Duration::from_secs(600),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for side in ["umio", "mmap RANDOM", "mmap default"] {
        for workload in ["random reads", "random writes"] {
            let line = format!("{workload} · {side}: ");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&line) && l.ends_with("(stopped at the deadline)")),
                "no {line:?} line stopped at the deadline:\n{text}"
            );
        }
    }
    assert!(
        text.lines().any(|l| l.starts_with("device: ")),
        "the device is not named:\n{text}"
    );
    assert!(text.contains("limit hits"), "no table:\n{text}");
}

/// A benchmark subcommand prints its table and writes the same table as
/// CSV in `--out`: a header naming the sides and a row per round, with
/// the rates as numbers.
#[test]
fn bench_writes_its_table_as_csv() {
    let dir = examples_dir();
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::write(&data, vec![7u8; 8 << 20]).unwrap();
    let out = work.path().join("out");
    let got = run_within(
        &dir.join("bench"),
        &[
            "random-threads",
            "--file",
            data.to_str().unwrap(),
            "--reads",
            "500",
            "--rounds",
            "2",
            "--cache",
            "4",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(600),
    );
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(
        got.status.success(),
        "bench random-threads: {}\n{text}\n{}",
        got.status,
        String::from_utf8_lossy(&got.stderr)
    );
    let csv = std::fs::read_to_string(out.join("random-threads.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "round,umio fillers,umio in-thread,mmap MADV_RANDOM,in-thread / mmap,load"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    for (k, l) in lines[1..].iter().enumerate() {
        let cells: Vec<&str> = l.split(',').collect();
        assert_eq!(cells[0], (k + 1).to_string(), "{csv}");
        for c in &cells[1..4] {
            assert!(c.parse::<f64>().is_ok_and(|v| v > 0.0), "{c:?} in {csv}");
        }
        // The printed table holds the same row.
        assert!(
            text.lines()
                .any(|t| t.split_whitespace().nth(1) == Some(cells[1])),
            "{l} not printed:\n{text}"
        );
    }
}
