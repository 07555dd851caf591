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
    compile_with(name, dir, &[])
}

/// Compiles `tests/preload/<name>.c` into `dir`, linked with `libs`.
fn compile_with(name: &str, dir: &Path, libs: &[&str]) -> PathBuf {
    let src = repo_root().join("tests/preload").join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg(&src)
        .args(libs)
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
/// `LD_PRELOAD` variable but `UMIO_FAULT_SERVICE` (so the suite runs in
/// the mode the environment names, as CI's second test command does);
/// `preload` puts the shim in.
fn run(program: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Output {
    output_within(command(program, args, env, preload), program, HANG)
}

/// The command `run` runs, to be adjusted before it runs.
fn command(program: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars() {
        if (k.starts_with("UMIO_") && k != "UMIO_FAULT_SERVICE")
            || k.starts_with("UMAP_")
            || k == "LD_PRELOAD"
        {
            cmd.env_remove(k);
        }
    }
    if preload {
        cmd.env("LD_PRELOAD", shim());
    }
    cmd.args(args).envs(env.iter().copied());
    cmd
}

/// How long a program may run: a hang fails the test.
const HANG: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `cmd` to completion and collects its output; kills it and panics
/// if it runs longer than `limit`.
fn output_within(mut cmd: Command, program: &Path, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program runs");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let deadline = std::time::Instant::now() + limit;
    while !waiter.is_finished() {
        if std::time::Instant::now() > deadline {
            // SAFETY: kill takes no pointer; `pid` is our child, not yet
            // reaped (its waiter has not returned).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = waiter.join();
            panic!(
                "{} did not finish within {limit:?}: hung",
                program.display()
            );
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

/// A runtime that cannot start (here `UMIO_FILLERS=0`) leaves the
/// program's mappings with the kernel; the shim says so once, not at each
/// of the program's three `mmap`s of selected files.
#[test]
fn a_failed_start_is_reported_once_and_mappings_stay_with_the_kernel() {
    let dir = scratch();
    let exe = compile("shared", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let target = data.join("shared.bin");
    let pattern = format!("{}/*", data.display());
    let out = run(
        &exe,
        &[target.to_str().unwrap(), "8"],
        &[
            ("UMIO_PRELOAD_PATHS", pattern.as_str()),
            ("UMIO_FILLERS", "0"),
        ],
        true,
    );
    assert_ok(&out, "shared under a shim that cannot start", "shared ok");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("umio-preload: umio cannot start").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("fillers must be 1 to 256"), "{stderr}");
}

/// `UMIO_STATS=1` also prints the hit ratio, the read amplification and
/// the fault-latency histogram, whose buckets add up to the faults.
#[test]
fn stats_at_exit_show_hit_ratio_and_fault_latency() {
    let out = kernel_then_shim("shared", 8, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let faults = stat(&out, "faults,");
    assert!(faults > 0);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("umio-preload: pid"))
        .unwrap();
    assert!(line.contains("; hit ratio "), "{line}");
    assert!(line.contains(" bytes read per byte faulted"), "{line}");
    let latency = stderr
        .lines()
        .find(|l| l.starts_with("umio-preload: fault latency (pid"))
        .unwrap_or_else(|| panic!("no latency line in:\n{stderr}"));
    assert!(
        latency.contains(&format!(": {faults} faults: mean ")),
        "{latency}"
    );
    let buckets = stderr
        .lines()
        .find(|l| l.starts_with("umio-preload: fault latency buckets:"))
        .unwrap_or_else(|| panic!("no buckets line in:\n{stderr}"));
    let counted: u64 = buckets
        .split(';')
        .map(|b| b.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum();
    // A filler records a fault's latency after waking its thread, so the
    // last faults of a program that exits at once may not be recorded yet
    // (one a filler at most); none is counted twice.
    assert!(
        counted <= faults && faults - counted <= 8,
        "{counted} of {faults} faults in the buckets: {buckets}"
    );
}

/// `UMIO_LOG` sets what the shim prints: warnings and errors by default,
/// more with `info`, nothing with `off`; a bad value is reported.
#[test]
fn umio_log_sets_the_level_printed() {
    let started = "umio-preload: info: runtime started";
    let default = kernel_then_shim_with("shared", 4, true, &[("UMIO_STATS", "0")]);
    let stderr = String::from_utf8_lossy(&default.stderr);
    assert!(!stderr.contains(started), "{stderr}");
    let info = kernel_then_shim_with("shared", 4, true, &[("UMIO_LOG", "info")]);
    let stderr = String::from_utf8_lossy(&info.stderr);
    assert!(stderr.contains(started), "{stderr}");
    let bad = kernel_then_shim_with("shared", 4, true, &[("UMIO_LOG", "loud")]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("UMIO_LOG is not off, error, warn, info or debug: loud"),
        "{stderr}"
    );
    assert!(!stderr.contains(started), "{stderr}");
}

#[test]
fn private_mappings_never_write_the_file() {
    let out = kernel_then_shim("private", 32, true);
    assert!(
        stat(&out, "dirty)") + stat(&out, "dirty pages written back in place") > 0,
        "dirty private pages were written back (to their private copy) before the exit"
    );
}

#[test]
fn partial_munmap_leaves_the_rest_mapped() {
    // The test unmaps one 4 KiB page out of the middle of a larger umio
    // page: it needs pages larger than the 4 KiB default.
    kernel_then_shim_with("partial", 16, true, &[("UMIO_PAGE_SIZE", "64k")]);
}

#[test]
fn madvise_remove_pageout_and_cold_as_the_kernel() {
    kernel_then_shim("advice", 4, true);
}

#[test]
fn map_fixed_over_a_file_mapping_replaces_that_part() {
    // The test maps at addresses that split 64 KiB umio pages: it needs
    // pages larger than the 4 KiB default.
    let out = kernel_then_shim_with("fixed", 8, true, &[("UMIO_PAGE_SIZE", "64k")]);
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

/// Runs `program` as [`run`] does, with a deadline of `secs` seconds.
fn run_within(
    secs: u64,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    preload: bool,
) -> Output {
    output_within(
        command(program, args, env, preload),
        program,
        std::time::Duration::from_secs(secs),
    )
}

#[test]
fn writes_and_reads_through_descriptors_are_coherent_with_mappings() {
    let dir = scratch();
    let exe = compile("coherence", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("coherence.bin");
    let file = file.to_str().unwrap();
    let kernel = run_within(120, &exe, &[file, "8"], &[], false);
    assert_ok(&kernel, "coherence under the kernel", "coherence ok");
    let pattern = format!("{}/*", data.display());
    for page in ["4K", "64K"] {
        let out = run_within(
            120,
            &exe,
            &[file, "8"],
            &[
                ("UMIO_PRELOAD_PATHS", &pattern),
                ("UMIO_CACHE_BYTES", "4M"),
                ("UMIO_PAGE_SIZE", page),
                ("UMIO_STATS", "1"),
                ("EXPECT_UMIO", "1"),
            ],
            true,
        );
        assert_ok(
            &out,
            &format!("coherence under the shim, {page} pages"),
            "coherence ok",
        );
        assert!(stat(&out, "file mappings") >= 4);
    }
}

/// Two `MAP_SHARED` mappings of one file: each sees the other's writes at
/// once (bytes 100-103 through one, 0-3 of the same page through the
/// other), the file keeps both, and a thread writing through the first
/// while the second is made loses nothing; in both fault services, with 4
/// and 64 KiB pages, through a cache smaller than the file.
#[test]
fn two_shared_mappings_of_one_file_are_one() {
    let dir = scratch();
    let exe = compile("two_maps", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("two.bin");
    let file = file.to_str().unwrap();
    let kernel = run_within(120, &exe, &[file, "8"], &[], false);
    assert_ok(&kernel, "two_maps under the kernel", "two_maps ok");
    let pattern = format!("{}/*", data.display());
    for service in ["fillers", "in-thread"] {
        for page in ["4K", "64K"] {
            let out = run_within(
                300,
                &exe,
                &[file, "8"],
                &[
                    ("UMIO_PRELOAD_PATHS", &pattern),
                    ("UMIO_CACHE_BYTES", "4M"),
                    ("UMIO_PAGE_SIZE", page),
                    ("UMIO_FAULT_SERVICE", service),
                    ("UMIO_STATS", "1"),
                    ("EXPECT_UMIO", "1"),
                ],
                true,
            );
            assert_ok(
                &out,
                &format!("two_maps under the shim, {service}, {page} pages"),
                "two_maps ok",
            );
            assert!(stat(&out, "file mappings") >= 2);
        }
    }
}

/// The `sqlite3` shell (Debian's `sqlite3`) with `mmap_size`: it reads
/// through its mapping and writes with `pwrite`. An UPDATE of every row
/// through the shim gives the right sums, the database checks, and, the
/// cache holding the file, no page is read twice (the pages `pwrite`
/// rewrites are updated in place); in both fault services.
#[test]
fn sqlite_updates_through_mmap_and_pwrite_keep_pages_cached() {
    let sqlite = Path::new("/usr/bin/sqlite3");
    if !sqlite.exists() {
        eprintln!("SKIPPED: sqlite3 is not installed (apt-get install sqlite3)");
        return;
    }
    let dir = scratch();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let base = data.join("base.db");
    let base_s = base.to_str().unwrap();
    let make = run(
        sqlite,
        &[
            base_s,
            "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT); \
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<100000) \
             INSERT INTO t SELECT x, x, hex(randomblob(64)) FROM c;",
        ],
        &[],
        false,
    );
    assert!(make.status.success(), "{make:?}");
    let mib = std::fs::metadata(&base).unwrap().len() >> 20;
    let db = data.join("t.db");
    let db_s = db.to_str().unwrap();
    let pattern = format!("{}/t.db", data.display());
    let sql = "PRAGMA mmap_size=1000000000; SELECT sum(a) FROM t; \
               UPDATE t SET a = a + 1; SELECT sum(a) FROM t;";
    let before: u64 = (1..=100_000u64).sum();
    let after = before + 100_000;
    for service in ["fillers", "in-thread"] {
        std::fs::copy(&base, &db).unwrap();
        let out = run(
            sqlite,
            &[db_s, sql],
            &[
                ("UMIO_PRELOAD_PATHS", &pattern),
                ("UMIO_CACHE_BYTES", "256M"),
                ("UMIO_FAULT_SERVICE", service),
                ("UMIO_STATS", "1"),
            ],
            true,
        );
        let what = format!("sqlite3 under the shim, {service}");
        assert_ok(&out, &what, &format!("{before}\n{after}"));
        assert_eq!(stat(&out, "file mappings"), 1, "{what}");
        assert!(
            stat(&out, "MiB read") <= mib + 1,
            "{what}: pages read again ({mib} MiB database)"
        );
        let check = run(
            sqlite,
            &[db_s, "PRAGMA integrity_check; SELECT sum(a) FROM t;"],
            &[],
            false,
        );
        assert_ok(
            &check,
            &format!("{what}: the database after"),
            &format!("ok\n{after}"),
        );
    }
}

/// LMDB (Debian's `liblmdb-dev`): 500,000 inserts into a database of about
/// 100 MiB through a 16 MiB cache, then every record read back, in LMDB's
/// default mode (pages written with `pwrite`, read through a read-only
/// mapping) and with `MDB_WRITEMAP`.
#[test]
fn lmdb_keeps_every_record_in_both_write_modes() {
    if !Path::new("/usr/include/lmdb.h").exists() {
        eprintln!("SKIPPED: LMDB is not installed (apt-get install liblmdb-dev)");
        return;
    }
    let dir = scratch();
    let exe = compile_with("lmdb", dir.path(), &["-llmdb"]);
    for mode in ["default", "writemap"] {
        let db = dir.path().join(mode);
        std::fs::create_dir(&db).unwrap();
        let pattern = format!("{}/*", db.display());
        let out = run_within(
            600,
            &exe,
            &[db.to_str().unwrap(), "500000", mode, "1073741824"],
            &[
                ("UMIO_PRELOAD_PATHS", &pattern),
                ("UMIO_CACHE_BYTES", "16M"),
                ("UMIO_PAGE_SIZE", "4K"),
                ("UMIO_STATS", "1"),
            ],
            true,
        );
        assert_ok(
            &out,
            &format!("LMDB ({mode}) under the shim"),
            "lmdb ok: 500000",
        );
        let size = std::fs::metadata(db.join("data.mdb")).unwrap().len();
        assert!(
            size > 64 << 20,
            "the database ({size} bytes) is far larger than the cache"
        );
        assert!(stat(&out, "evicted pages") > 0, "the cache evicted");
    }
}

/// A B-tree's random point reads through the shim with umio's defaults
/// (4 KiB pages, read-ahead only for sequential streams) read about the
/// bytes they touch: LMDB `mdb_get`s of random keys of a database four
/// times the cache read at most 1.2 bytes from the file per byte faulted
/// in (an upper bound of the bytes read per byte touched: pages read
/// ahead and then used are touched without a fault).
#[test]
fn lmdb_random_point_reads_read_what_they_touch() {
    if !Path::new("/usr/include/lmdb.h").exists() {
        eprintln!("SKIPPED: LMDB is not installed (apt-get install liblmdb-dev)");
        return;
    }
    let dir = scratch();
    let exe = compile_with("lmdb", dir.path(), &["-llmdb"]);
    let db = dir.path().join("points");
    std::fs::create_dir(&db).unwrap();
    let db_arg = db.to_str().unwrap();
    let made = run_within(
        600,
        &exe,
        &[db_arg, "200000", "default", "1073741824"],
        &[],
        false,
    );
    assert_ok(&made, "LMDB under the kernel", "lmdb ok: 200000");
    let size = std::fs::metadata(db.join("data.mdb")).unwrap().len();
    assert!(size >= 32 << 20, "the database is {size} bytes");
    let pattern = format!("{db_arg}/*");
    let out = run_within(
        600,
        &exe,
        &[db_arg, "200000", "points", "1073741824", "50000"],
        &[
            ("UMIO_PRELOAD_PATHS", &pattern),
            ("UMIO_CACHE_BYTES", "8M"),
            ("UMIO_STATS", "1"),
        ],
        true,
    );
    assert_ok(&out, "LMDB point reads under the shim", "lmdb points ok");
    assert!(stat(&out, "evicted pages") > 0, "the cache evicted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("umio-preload: pid"))
        .unwrap_or_else(|| panic!("no stats line in:\n{stderr}"));
    let amplification: f64 = line
        .split(" bytes read per byte faulted")
        .next()
        .and_then(|head| head.split_whitespace().last())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no read amplification in {line}"));
    assert!(
        amplification <= 1.2,
        "{amplification} bytes read per byte faulted: {line}"
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
    assert!(
        stat(&out, "MiB fresh") >= 48,
        "fresh arrays are zero-filled without a file read"
    );
}

/// A missing `UMIO_HEAP_FILE` directory is named in the error.
#[test]
fn a_missing_heap_directory_is_named() {
    let dir = scratch();
    let exe = compile("heap", dir.path());
    let missing = dir.path().join("no/such/dir");
    let out = run(
        &exe,
        &["2", "2"],
        &[("UMIO_HEAP_FILE", missing.to_str().unwrap())],
        true,
    );
    assert_ok(&out, "heap with a missing heap directory", "heap ok");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("heap mode cannot start") && stderr.contains(missing.to_str().unwrap()),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("heap mode cannot start").count(),
        1,
        "{stderr}"
    );
    // A runtime that cannot start is reported once, not again by the heap.
    let out = run(
        &exe,
        &["2", "2"],
        &[
            ("UMIO_HEAP_FILE", dir.path().to_str().unwrap()),
            ("UMIO_CACHE_BYTES", "lots"),
        ],
        true,
    );
    assert_ok(&out, "heap with a runtime that cannot start", "heap ok");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("umio-preload").count(), 1, "{stderr}");
    assert!(stderr.contains("UMIO_CACHE_BYTES"), "{stderr}");
}

/// A process that ends with `_exit`, its shared mapping still mapped,
/// keeps what it wrote (as in the kernel's page cache) and prints
/// `UMIO_STATS`; in both fault services.
#[test]
fn exit_without_atexit_keeps_shared_writes_and_prints_stats() {
    let dir = scratch();
    let exe = compile("exit_now", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("exit.bin");
    let check = |what: &str| {
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(bytes.len(), 8 << 20);
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let off = (i * 8) as u64;
            let seed: u64 = if off < 4 << 20 { 5 } else { 1 };
            let want = ((off / 8) + 1).wrapping_mul(0x9E3779B97F4A7C15) ^ (seed << 56);
            assert_eq!(
                u64::from_ne_bytes(w.try_into().unwrap()),
                want,
                "{what}: word at {off}"
            );
        }
    };
    let path = file.to_str().unwrap();
    let kernel = run(&exe, &[path, "8"], &[], false);
    assert_ok(&kernel, "exit_now under the kernel", "exit_now ok");
    check("kernel");
    let pattern = format!("{}/*", data.display());
    for service in ["fillers", "in-thread"] {
        let out = run(
            &exe,
            &[path, "8"],
            &[
                ("UMIO_PRELOAD_PATHS", &pattern),
                ("UMIO_CACHE_BYTES", "16M"),
                ("UMIO_FAULT_SERVICE", service),
                ("UMIO_STATS", "1"),
                ("EXPECT_UMIO", "1"),
            ],
            true,
        );
        assert_ok(
            &out,
            &format!("exit_now under the shim, {service}"),
            "exit_now ok",
        );
        assert_eq!(stat(&out, "file mappings"), 1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("fault service {service}")),
            "{stderr}"
        );
        check(service);
    }
}

/// `pwrite`, `write` and `pwritev` over resident pages of a shared mapping
/// show in it at once and leave the pages resident: no page is read twice
/// (the cache holds the file), in both fault services, 4 and 64 KiB pages.
#[test]
fn writes_over_resident_mapped_pages_update_them_in_place() {
    let dir = scratch();
    let exe = compile("pwrite_inplace", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let file = data.join("inplace.bin");
    let file = file.to_str().unwrap();
    let kernel = run(&exe, &[file, "8"], &[], false);
    assert_ok(
        &kernel,
        "pwrite_inplace under the kernel",
        "pwrite_inplace ok",
    );
    let pattern = format!("{}/*", data.display());
    for service in ["fillers", "in-thread"] {
        for page in ["4K", "64K"] {
            let out = run(
                &exe,
                &[file, "8"],
                &[
                    ("UMIO_PRELOAD_PATHS", &pattern),
                    ("UMIO_CACHE_BYTES", "64M"),
                    ("UMIO_PAGE_SIZE", page),
                    ("UMIO_FAULT_SERVICE", service),
                    ("UMIO_STATS", "1"),
                    ("EXPECT_UMIO", "1"),
                ],
                true,
            );
            let what = format!("pwrite_inplace under the shim, {service}, {page} pages");
            assert_ok(&out, &what, "pwrite_inplace ok");
            // 8 MiB read once and the 1 MiB second file (dropped pages
            // would be read again: 16 MiB and more).
            assert!(
                stat(&out, "MiB read") <= 10,
                "{what}: a page was read twice"
            );
            assert_eq!(stat(&out, "evicted pages"), 0, "{what}");
        }
    }
}

/// Mapped pages and heap allocations never touched, passed as the buffers
/// of the write, read, vectored and socket calls, and a buffer larger than
/// the cache: the calls work as with the kernel in both fault services
/// (in the faulting thread, only because the shim faults the buffers in).
#[test]
fn system_calls_take_untouched_mapped_buffers_in_both_fault_services() {
    let dir = scratch();
    let exe = compile("syscall_buffers", dir.path());
    let files = dir.path().join("data");
    std::fs::create_dir(&files).unwrap();
    let heap = dir.path().join("heap");
    std::fs::create_dir(&heap).unwrap();
    let files_arg = files.to_str().unwrap();
    let kernel = run_within(120, &exe, &[files_arg, "16"], &[], false);
    assert_ok(
        &kernel,
        "syscall_buffers under the kernel",
        "syscall buffers ok",
    );
    let pattern = format!("{files_arg}/mapped.bin");
    for service in ["fillers", "in-thread"] {
        let out = run_within(
            120,
            &exe,
            &[files_arg, "16"],
            &[
                ("UMIO_PRELOAD_PATHS", &pattern),
                ("UMIO_CACHE_BYTES", "4M"),
                ("UMIO_FAULT_SERVICE", service),
                // The mapped file may be served in-thread; the heap never is.
                ("UMIO_PRELOAD_IN_THREAD_PATHS", &pattern),
                ("UMIO_HEAP_FILE", heap.to_str().unwrap()),
                ("UMIO_HEAP_MIN_ALLOC", "1M"),
                ("UMIO_STATS", "1"),
                ("EXPECT_UMIO", "1"),
            ],
            true,
        );
        assert_ok(
            &out,
            &format!("syscall_buffers under the shim, {service}"),
            "syscall buffers ok",
        );
        assert_eq!(stat(&out, "file mappings"), 5, "{service}");
        assert_eq!(
            stat(&out, "in the faulting thread"),
            if service == "in-thread" { 5 } else { 0 },
            "{service}: the opted-in file's mappings"
        );
        assert!(stat(&out, "allocations") >= 2, "{service}: heap buffers");
        assert!(
            stat(&out, "evicted pages") > 0,
            "{service}: 16 MiB through 4 MiB"
        );
    }
}

/// fio, if installed (Debian's package `fio`; CI's `.ci/run` installs
/// it). Tests install nothing: without it a test says SKIPPED and returns.
fn fio() -> Option<&'static str> {
    if Command::new("fio").arg("--version").output().is_ok() {
        Some("fio")
    } else {
        eprintln!("SKIPPED: fio is not installed (apt-get install fio)");
        None
    }
}

#[test]
fn fio_mmap_random_reads_verify_over_a_file_four_times_the_cache() {
    let Some(fio) = fio() else { return };
    let dir = scratch();
    let file = dir.path().join("fio.data");
    let file = file.to_str().unwrap();
    // No verify state file (fio would write local-umio-0-verify.state in
    // its working directory): nothing here resumes an interrupted verify.
    let common = [
        "--name=umio",
        "--bs=4k",
        "--size=32M",
        "--verify=crc32c",
        "--verify_state_save=0",
        "--thread",
    ];
    // Written by the kernel, with fio's verification headers.
    let prep = Command::new(fio)
        .current_dir(dir.path())
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
    let mut cmd = command(
        Path::new(fio),
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
    cmd.current_dir(dir.path());
    let out = output_within(cmd, Path::new(fio), HANG);
    assert_ok(&out, "fio random reads under the shim", "err= 0");
    // fio wrote no verify state, neither in its working directory nor in
    // the test's (which is the crate's: the file used to land in git).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["fio.data"], "fio left files behind");
    let stray: Vec<_> = std::fs::read_dir(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-verify.state"))
        .collect();
    assert!(stray.is_empty(), "fio state files in the crate: {stray:?}");
    assert_eq!(stat(&out, "file mappings"), 1);
    assert!(stat(&out, "read misses") > 0);
    assert!(stat(&out, "evicted pages") > 0, "32 MiB through 8 MiB");
}

/// The last page of a mapping first (issue 16: with 64 KiB umio pages, a
/// read-only private mapping, or a shared one over a read-write
/// descriptor, whose length was not a multiple of 64 KiB hung at its last
/// page): the whole matrix of `tests/preload/last_page.c`, under the kernel
/// and under the shim with 4 KiB, 64 KiB and 2 MiB pages. Each case runs in
/// a child with a 20 s alarm.
#[test]
fn last_pages_of_every_kind_of_mapping_complete() {
    let dir = scratch();
    let exe = compile("last_page", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let data_dir = data.to_str().unwrap();
    for page in [4usize << 10, 64 << 10, 2 << 20] {
        let page_arg = page.to_string();
        let kernel = run(&exe, &[data_dir, &page_arg], &[], false);
        assert_ok(&kernel, "last_page under the kernel", "last_page ok");
        let pattern = format!("{data_dir}/*");
        let out = run(
            &exe,
            &[data_dir, &page_arg],
            &[
                ("UMIO_PRELOAD_PATHS", pattern.as_str()),
                ("UMIO_CACHE_BYTES", "64M"),
                ("UMIO_PAGE_SIZE", &page_arg),
                ("UMIO_STATS", "1"),
                ("EXPECT_UMIO", "1"),
            ],
            true,
        );
        assert_ok(
            &out,
            &format!("last_page under the shim with {page}-byte pages"),
            "last_page ok",
        );
        // The children's stats lines: every case was umio's, none stuck.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("umio-preload: pid"))
            .collect();
        assert!(lines.len() >= 21, "{stderr}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains(", 0 faults without progress")),
            "{stderr}"
        );
    }
}

/// A text file of `lines` lines of varied lengths and contents (sortable,
/// with duplicates), for the heap-mode stdio and `sort` tests.
fn text_file(path: &Path, lines: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..lines {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 120) as usize;
        let line: String = (0..len)
            .map(|k| (b'a' + ((x >> (k % 50)) % 26) as u8) as char)
            .collect();
        writeln!(f, "{line} {}", i % 1000).unwrap();
    }
    f.flush().unwrap();
}

/// `fread`, `fgets` and `fwrite` (the C library's own system calls, which
/// the shim cannot interpose) into and out of large heap buffers never
/// touched before, in heap mode with `UMIO_FAULT_SERVICE=in-thread`: the
/// heap is served by the fillers whatever the variable says, so the bytes
/// come through. (Served in-thread, the first `fread` failed with
/// `EFAULT`.)
#[test]
fn stdio_reads_and_writes_large_heap_buffers_under_the_in_thread_service() {
    let dir = scratch();
    let exe = compile("stdio_heap", dir.path());
    let input = dir.path().join("in.txt");
    text_file(&input, 400_000);
    let len = std::fs::metadata(&input).unwrap().len();
    assert!(len > 16 << 20, "{len} bytes: larger than the cache");
    let heap = dir.path().join("heap");
    std::fs::create_dir(&heap).unwrap();
    for service in ["in-thread", "fillers"] {
        let output = dir.path().join(format!("out-{service}.txt"));
        let out = run(
            &exe,
            &[input.to_str().unwrap(), output.to_str().unwrap()],
            &[
                ("UMIO_FAULT_SERVICE", service),
                ("UMIO_HEAP_FILE", heap.to_str().unwrap()),
                ("UMIO_HEAP_MIN_ALLOC", "1M"),
                ("UMIO_CACHE_BYTES", "8M"),
                ("UMIO_STATS", "1"),
            ],
            true,
        );
        assert_ok(&out, &format!("stdio_heap, {service}"), "stdio heap ok");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("heap (served by the fillers)"),
            "{service}: {stderr}"
        );
        // The two file buffers and the two stdio buffers.
        assert!(stat(&out, "allocations") >= 4, "{service}: {stderr}");
        assert!(stat(&out, "evicted pages") > 0, "{service}: through 8 MiB");
        assert!(
            std::fs::read(&input).unwrap() == std::fs::read(&output).unwrap(),
            "{service}: the file written back differs from the file read"
        );
    }
}

/// GNU `sort`, if installed, with its buffer in the shim's heap and
/// `UMIO_FAULT_SERVICE=in-thread`: the same output as without the shim.
/// (Served in-thread, the heap failed `sort`'s first read with `EFAULT`:
/// "sort: read failed: ...: Bad address".)
#[test]
fn gnu_sort_in_heap_mode_under_the_in_thread_service_sorts_as_without_the_shim() {
    let Some(sort) = ["/usr/bin/sort", "/bin/sort"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("SKIPPED: no GNU sort");
        return;
    };
    let dir = scratch();
    let input = dir.path().join("in.txt");
    text_file(&input, 300_000);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let heap = dir.path().join("heap");
    std::fs::create_dir(&heap).unwrap();
    let sorted = |out: &Path, env: &[(&str, &str)], preload: bool| {
        let mut cmd = command(
            Path::new(sort),
            &[
                "-S",
                "64M",
                "-T",
                tmp.to_str().unwrap(),
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
            env,
            preload,
        );
        cmd.env("LC_ALL", "C");
        output_within(cmd, Path::new(sort), HANG)
    };
    let plain = dir.path().join("plain.txt");
    let o = sorted(&plain, &[], false);
    assert!(o.status.success(), "sort without the shim: {o:?}");
    let shimmed = dir.path().join("shim.txt");
    let o = sorted(
        &shimmed,
        &[
            ("UMIO_FAULT_SERVICE", "in-thread"),
            ("UMIO_HEAP_FILE", heap.to_str().unwrap()),
            ("UMIO_HEAP_MIN_ALLOC", "1M"),
            ("UMIO_CACHE_BYTES", "16M"),
            ("UMIO_STATS", "1"),
        ],
        true,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "sort under the shim: {o:?}");
    assert!(
        stat(&o, "allocations") >= 1,
        "sort's buffer in the heap: {stderr}"
    );
    assert!(
        std::fs::read(&plain).unwrap() == std::fs::read(&shimmed).unwrap(),
        "sort's output under the shim differs from its output without it"
    );
}

/// The keepers (`umio_core::keeper`) that process `pid` started, as
/// pidfds: its child processes, found by their parent in `/proc/*/stat`
/// (the test programs start none of their own; a keeper names itself
/// `umio-keeper` only once it runs).
fn keepers_of(pid: u32) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if ppid == Some(pid.to_string().as_str()) {
            let keeper: i32 = stat[..open].trim().parse().unwrap();
            // SAFETY: pidfd_open takes no pointer.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, keeper, 0) };
            if fd >= 0 {
                // SAFETY: a fresh descriptor, ours.
                found.push(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) });
            }
        }
    }
    found
}

/// Waits until each of `keepers` (pidfds) has exited: a keeper left
/// running past `HANG` fails the test.
fn wait_for_keepers(keepers: &[std::os::fd::OwnedFd]) {
    use std::os::fd::AsRawFd;
    for k in keepers {
        let mut p = libc::pollfd {
            fd: k.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let r = unsafe { libc::poll(&mut p, 1, HANG.as_millis() as i32) };
        assert_eq!(r, 1, "a keeper did not exit within {HANG:?}: hung");
    }
}

/// Runs `cmd`, reads its stdout line by line and SIGKILLs it once `stop`
/// returns true for a line; returns that line, the keepers it had
/// started by then (pidfds) and its stderr. A program that runs past
/// `HANG` is killed and fails the test.
fn kill_when(
    mut cmd: Command,
    mut stop: impl FnMut(&str) -> bool,
) -> (String, Vec<std::os::fd::OwnedFd>, String) {
    use std::io::{BufRead, Read};
    use std::process::Stdio;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program runs");
    let pid = child.id();
    let finished = Arc::new(AtomicBool::new(false));
    let hung = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (finished, hung) = (finished.clone(), hung.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + HANG;
            while !finished.load(Ordering::Acquire) {
                if std::time::Instant::now() > deadline {
                    hung.store(true, Ordering::Release);
                    // SAFETY: kill takes no pointer; not yet reaped.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut keepers = None;
    let mut at = String::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if keepers.is_none() {
            // The mapping is made: its keeper, if any, runs.
            keepers = Some(keepers_of(pid));
        }
        if stop(&line) {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            at = line;
            break;
        }
    }
    let status = child.wait().unwrap();
    finished.store(true, Ordering::Release);
    watchdog.join().unwrap();
    let stderr = err_reader.join().unwrap();
    assert!(!hung.load(Ordering::Acquire), "hung: {stderr}");
    assert!(
        !at.is_empty(),
        "the program ended before it was killed ({status}): {stderr}"
    );
    (at, keepers.unwrap_or_default(), stderr)
}

/// The pattern seed of each 8-byte word of `file` (`check.h`'s `word`),
/// or an error naming a word that is no pattern's.
fn seeds(file: &[u8]) -> Result<Vec<u64>, String> {
    file.chunks_exact(8)
        .enumerate()
        .map(|(i, w)| {
            let v = u64::from_ne_bytes(w.try_into().unwrap());
            let x = v ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            if x & ((1 << 56) - 1) != 0 {
                Err(format!(
                    "the word at byte {} is no pattern's: {v:#x}",
                    i * 8
                ))
            } else {
                Ok(x >> 56)
            }
        })
        .collect()
}

/// A writer through a `MAP_SHARED` mapping, SIGKILLed mid-run, leaves in
/// the file every byte it wrote before the last marker its parent saw, as
/// under the kernel (whose page cache outlives the process): under the
/// shim its keeper writes the pages still in umio's cache once it is
/// gone. The file is four times the cache, so that pages were also
/// evicted and written back, in umio's order, before the kill. In both
/// fault services (the file opted in to the in-thread one).
#[test]
fn a_killed_writer_loses_nothing_written_through_a_shared_mapping() {
    let dir = scratch();
    let exe = compile("killed", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let pattern = format!("{}/*", data.display());
    const MIB: usize = 16;
    let npages = MIB << 8;
    for (what, preload, env) in [
        ("the kernel", false, vec![]),
        (
            "the shim, fillers",
            true,
            vec![
                ("UMIO_PRELOAD_PATHS", pattern.as_str()),
                ("UMIO_CACHE_BYTES", "4M"),
                ("EXPECT_UMIO", "1"),
            ],
        ),
        (
            "the shim, in-thread",
            true,
            vec![
                ("UMIO_PRELOAD_PATHS", pattern.as_str()),
                ("UMIO_PRELOAD_IN_THREAD_PATHS", pattern.as_str()),
                ("UMIO_FAULT_SERVICE", "in-thread"),
                ("UMIO_CACHE_BYTES", "4M"),
                ("EXPECT_UMIO", "1"),
            ],
        ),
    ] {
        let file = data.join("killed.bin");
        let cmd = command(
            &exe,
            &[file.to_str().unwrap(), &MIB.to_string()],
            &env,
            preload,
        );
        let marker = |line: &str| -> (u64, usize) {
            let mut w = line.split_whitespace().skip(1);
            (
                w.next().unwrap().parse().unwrap(),
                w.next().unwrap().parse().unwrap(),
            )
        };
        // Killed in its third pass over the file, past the middle.
        let (at, keepers, stderr) = kill_when(cmd, |line| {
            let (seed, pages) = marker(line);
            seed >= 3 && pages >= npages / 2
        });
        wait_for_keepers(&keepers);
        let (seed, pages) = marker(&at);
        let seeds = seeds(&std::fs::read(&file).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(seeds.len(), npages * 512);
        for (pg, page) in seeds.chunks(512).enumerate() {
            let least = if pg < pages { seed } else { seed - 1 };
            if let Some(s) = page.iter().find(|&&s| s < least) {
                panic!(
                    "{what}: killed after {at:?}, page {pg} of the file holds pattern {s}, \
                     older than pattern {least} written before the marker\n{stderr}"
                );
            }
        }
        assert_eq!(keepers.len(), usize::from(preload), "{what}: keepers");
    }
}

/// LMDB with `MDB_WRITEMAP | MDB_NOSYNC` (every write through a shared
/// mapping, never an `msync`) SIGKILLed mid-load: the database then opens
/// and holds every transaction whose commit returned before the kill,
/// every record whole, as under the kernel. The load is about 30 MiB of
/// tree through an 8 MiB cache; in both fault services.
#[test]
fn lmdb_writemap_nosync_killed_mid_load_opens_and_verifies() {
    if !Path::new("/usr/include/lmdb.h").exists() {
        eprintln!("SKIPPED: LMDB is not installed (apt-get install liblmdb-dev)");
        return;
    }
    let dir = scratch();
    let exe = compile_with("lmdb", dir.path(), &["-llmdb"]);
    const RECORDS: &str = "500000";
    const MAPSIZE: &str = "1073741824";
    for (what, preload, in_thread) in [
        ("the kernel", false, false),
        ("the shim, fillers", true, false),
        ("the shim, in-thread", true, true),
    ] {
        let db = dir.path().join(what.replace([' ', ','], "_"));
        std::fs::create_dir(&db).unwrap();
        let pattern = format!("{}/*", db.display());
        let mut env = vec![
            ("UMIO_PRELOAD_PATHS", pattern.as_str()),
            ("UMIO_CACHE_BYTES", "8M"),
            ("UMIO_PAGE_SIZE", "4K"),
        ];
        if in_thread {
            env.push(("UMIO_PRELOAD_IN_THREAD_PATHS", pattern.as_str()));
            env.push(("UMIO_FAULT_SERVICE", "in-thread"));
        }
        let cmd = command(
            &exe,
            &[db.to_str().unwrap(), RECORDS, "killed", MAPSIZE],
            &env,
            preload,
        );
        let (at, keepers, stderr) = kill_when(cmd, |line| {
            line.strip_prefix("committed ")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n >= 200_000)
        });
        wait_for_keepers(&keepers);
        let done = at.strip_prefix("committed ").unwrap();
        // Checked without the shim: the file as the kernel sees it.
        let check = run(
            &exe,
            &[db.to_str().unwrap(), RECORDS, "check", MAPSIZE, done],
            &[],
            false,
        );
        assert_ok(
            &check,
            &format!("LMDB killed mid-load under {what}, then opened"),
            "lmdb check ok",
        );
        assert_eq!(
            keepers.len(),
            usize::from(preload),
            "{what}: keepers\n{stderr}"
        );
    }
}

/// A writer through a `MAP_SHARED` mapping that calls `exec` without
/// unmapping or `msync` leaves what it wrote in the file, as under the
/// kernel (whose page cache outlives the old address space): under the
/// shim its keeper, which holds the old address space, writes it once the
/// program's end of their socket closes at `exec`, and exits. The file is
/// four times the cache. In both fault services.
#[test]
fn exec_after_writing_through_a_shared_mapping_loses_nothing() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let dir = scratch();
    let exe = compile("exec_writer", dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let pattern = format!("{}/*", data.display());
    const MIB: usize = 16;
    for (what, preload, env) in [
        ("the kernel", false, vec![]),
        (
            "the shim, fillers",
            true,
            vec![
                ("UMIO_PRELOAD_PATHS", pattern.as_str()),
                ("UMIO_CACHE_BYTES", "4M"),
                ("EXPECT_UMIO", "1"),
            ],
        ),
        (
            "the shim, in-thread",
            true,
            vec![
                ("UMIO_PRELOAD_PATHS", pattern.as_str()),
                ("UMIO_PRELOAD_IN_THREAD_PATHS", pattern.as_str()),
                ("UMIO_FAULT_SERVICE", "in-thread"),
                ("UMIO_CACHE_BYTES", "4M"),
                ("EXPECT_UMIO", "1"),
            ],
        ),
    ] {
        let file = data.join("exec.bin");
        let mut cmd = command(
            &exe,
            &[file.to_str().unwrap(), &MIB.to_string(), "/bin/true"],
            &env,
            preload,
        );
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the program runs");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().and_then(Result::ok);
        assert_eq!(ready.as_deref(), Some("ready"), "{what}");
        let keepers = keepers_of(child.id());
        writeln!(child.stdin.as_mut().unwrap(), "exec").unwrap();
        let status = output_within_status(child);
        assert!(status.success(), "{what}: {status}");
        wait_for_keepers(&keepers);
        assert_eq!(keepers.len(), usize::from(preload), "{what}: keepers");
        let seeds = seeds(&std::fs::read(&file).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(seeds.len(), MIB << 17);
        if let Some(w) = seeds.iter().position(|&s| s != 1) {
            panic!(
                "{what}: after exec, the word at byte {} holds pattern {}, not 1",
                w * 8,
                seeds[w]
            );
        }
    }
}

/// Waits for `child` (a hang detector: killed and failed past `HANG`).
fn output_within_status(mut child: std::process::Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + HANG;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the program hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
