//! Unmodified programs under `LD_PRELOAD=libumio_preload.so`: the C
//! programs of `tests/preload/` (built with `-Wall -Wextra -Werror`) and
//! `fio --ioengine=mmap`. Each C program also runs once without the shim,
//! so that what it checks is known to be the kernel's behaviour.
//!
//! The programs use userfaultfd: run as root (or with
//! `vm.unprivileged_userfaultfd=1`), as the rest of the workspace's tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// libumio_preload.so for this test run's profile, built fresh: cargo does
/// not build a cdylib-only package's library before its integration tests.
fn shim() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "-p", "umio-preload", "--lib"])
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
            "building libumio_preload failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = profile_dir.join("libumio_preload.so");
        assert!(lib.exists(), "{} not built", lib.display());
        lib
    })
}

/// A scratch directory on tmpfs where there is one (fast, as the tests
/// measure nothing but correctness).
fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Compiles `tests/preload/<name>.c` into `dir`.
fn compile(name: &str, dir: &Path) -> PathBuf {
    let src = repo_root().join("tests/preload").join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg(&src)
        .arg("-pthread")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "{} does not compile:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `program` with `args` and `env`, and no other `UMIO_*` or
/// `LD_PRELOAD` variable; `preload` puts the shim in.
fn run(program: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Output {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMIO_") || k.starts_with("UMAP_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    if preload {
        cmd.env("LD_PRELOAD", shim());
    }
    cmd.args(args).envs(env.iter().copied());
    output_within(cmd, program)
}

/// How long a program may run: a hang fails the test.
const HANG: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `cmd` to completion and collects its output; kills it and panics
/// if it runs longer than [`HANG`].
fn output_within(mut cmd: Command, program: &Path) -> Output {
    use std::process::Stdio;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program runs");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let deadline = std::time::Instant::now() + HANG;
    while !waiter.is_finished() {
        if std::time::Instant::now() > deadline {
            // SAFETY: kill takes no pointer; `pid` is our child, not yet
            // reaped (its waiter has not returned).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = waiter.join();
            panic!("{} did not finish within {HANG:?}: hung", program.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    waiter.join().unwrap().expect("the program's output")
}

fn assert_ok(out: &Output, what: &str, line: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(line),
        "{what}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// A counter from the shim's `UMIO_STATS` line (the first process's):
/// the number before `name`.
fn stat(out: &Output, name: &str) -> u64 {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("umio-preload: pid"))
        .unwrap_or_else(|| panic!("no stats line in:\n{stderr}"));
    let at = line
        .find(name)
        .unwrap_or_else(|| panic!("no {name:?} in {line}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|w| w.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no number before {name:?} in {line}"))
}

/// Runs a mapping program under the kernel, then under the shim with a
/// 4 MiB cache over files of `mib` MiB; returns the shim run's output.
fn kernel_then_shim(name: &str, mib: u32, file_arg: bool) -> Output {
    kernel_then_shim_with(name, mib, file_arg, &[])
}

/// As `kernel_then_shim`, with more variables for the shim run.
fn kernel_then_shim_with(
    name: &str,
    mib: u32,
    file_arg: bool,
    more_env: &[(&str, &str)],
) -> Output {
    let dir = scratch();
    let exe = compile(name, dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let target = if file_arg {
        data.join(format!("{name}.bin"))
    } else {
        data.clone()
    };
    let target = target.to_str().unwrap();
    let mib = mib.to_string();
    let kernel = run(&exe, &[target, &mib], &[], false);
    assert_ok(
        &kernel,
        &format!("{name} under the kernel"),
        &format!("{name} ok"),
    );
    let pattern = format!("{}/*", data.display());
    let mut env = vec![
        ("UMIO_PRELOAD_PATHS", pattern.as_str()),
        ("UMIO_CACHE_BYTES", "4M"),
        ("UMIO_STATS", "1"),
        ("EXPECT_UMIO", "1"),
    ];
    env.extend_from_slice(more_env);
    let shim = run(&exe, &[target, &mib], &env, true);
    assert_ok(
        &shim,
        &format!("{name} under the shim"),
        &format!("{name} ok"),
    );
    shim
}

#[test]
fn shared_mappings_survive_eviction_and_reach_the_file() {
    let out = kernel_then_shim("shared", 32, true);
    assert_eq!(stat(&out, "file mappings"), 3, "mmap calls served by umio");
    assert!(stat(&out, "evicted pages") > 0, "the 4 MiB cache evicted");
    assert!(stat(&out, "MiB written back") >= 32);
}

#[test]
fn private_mappings_never_write_the_file() {
    let out = kernel_then_shim("private", 32, true);
    assert!(stat(&out, "dirty)") > 0, "dirty private pages were evicted");
}

#[test]
fn partial_munmap_leaves_the_rest_mapped() {
    kernel_then_shim("partial", 16, true);
}

#[test]
fn map_fixed_over_a_file_mapping_replaces_that_part() {
    let out = kernel_then_shim("fixed", 8, true);
    // a, b, c and d (the refused one is not counted).
    assert_eq!(stat(&out, "file mappings"), 4, "mmap calls served by umio");
}

#[test]
fn fork_children_see_the_parents_mappings() {
    let out = kernel_then_shim("fork", 16, false);
    // The parent's line and the child's (a runtime of its own).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("umio-preload: pid").count(),
        2,
        "stderr:\n{stderr}"
    );
}

#[test]
fn threads_map_write_and_allocate_at_once_in_both_modes() {
    let heap = scratch();
    let out = kernel_then_shim_with(
        "threads",
        16,
        true,
        &[
            ("UMIO_HEAP_FILE", heap.path().to_str().unwrap()),
            ("UMIO_HEAP_MIN_ALLOC", "1M"),
        ],
    );
    assert_eq!(stat(&out, "file mappings"), 32, "4 threads x 8 rounds");
    // The workers' 32 blocks, the 1 MiB buffers of the file checks (2 per
    // round) and of the file's creation.
    assert_eq!(stat(&out, "allocations"), 32 + 64 + 1);
    assert_eq!(stat(&out, "allocations"), stat(&out, "frees"));
    assert!(stat(&out, "evicted pages") > 0);
}

#[test]
fn heap_mode_runs_arrays_larger_than_the_cache() {
    let dir = scratch();
    let exe = compile("heap", dir.path());
    let kernel = run(&exe, &["6", "16"], &[], false);
    assert_ok(&kernel, "heap under glibc", "heap ok");
    let out = run(
        &exe,
        &["6", "16"],
        &[
            ("UMIO_HEAP_FILE", dir.path().to_str().unwrap()),
            ("UMIO_HEAP_MIN_ALLOC", "1M"),
            ("UMIO_CACHE_BYTES", "8M"),
            ("UMIO_STATS", "1"),
        ],
        true,
    );
    assert_ok(&out, "heap under the shim", "heap ok");
    // 6 arrays, 3 callocs, a realloc's move, the small block grown large,
    // posix_memalign, aligned_alloc.
    assert!(stat(&out, "allocations") >= 12);
    assert_eq!(stat(&out, "allocations"), stat(&out, "frees"));
    assert_eq!(stat(&out, "fell back"), 0);
    assert!(stat(&out, "MiB live") == 0);
    assert!(stat(&out, "evicted pages") > 0, "96 MiB of arrays in 8 MiB");
}

/// fio, installed from Debian's package if missing (as root).
fn fio() -> &'static str {
    let have = || Command::new("fio").arg("--version").output().is_ok();
    if !have() {
        let install = || {
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "fio"])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install() {
            let _ = Command::new("apt-get").args(["update", "-qq"]).status();
            install();
        }
    }
    assert!(
        have(),
        "fio is not installed and apt-get could not install it"
    );
    "fio"
}

#[test]
fn fio_mmap_random_reads_verify_over_a_file_four_times_the_cache() {
    let dir = scratch();
    let file = dir.path().join("fio.data");
    let file = file.to_str().unwrap();
    let common = [
        "--name=umio",
        "--bs=4k",
        "--size=32M",
        "--verify=crc32c",
        "--thread",
    ];
    // Written by the kernel, with fio's verification headers.
    let prep = Command::new(fio())
        .args(common)
        .args([
            &format!("--filename={file}"),
            "--rw=write",
            "--ioengine=psync",
            "--do_verify=0",
        ])
        .output()
        .unwrap();
    assert_ok(&prep, "fio writing the file", "err= 0");
    let pattern = format!("{}/*", dir.path().display());
    let out = run(
        Path::new(fio()),
        &[
            common.as_slice(),
            &[
                &format!("--filename={file}"),
                "--rw=randread",
                "--ioengine=mmap",
                "--randrepeat=0",
            ],
        ]
        .concat(),
        &[
            ("UMIO_PRELOAD_PATHS", &pattern),
            ("UMIO_CACHE_BYTES", "8M"),
            ("UMIO_STATS", "1"),
        ],
        true,
    );
    assert_ok(&out, "fio random reads under the shim", "err= 0");
    assert_eq!(stat(&out, "file mappings"), 1);
    assert!(stat(&out, "read misses") > 0);
    assert!(stat(&out, "evicted pages") > 0, "32 MiB through 8 MiB");
}
