//! Builds the C programs of `tests/c/` and `examples/c/` (and the C++ ones
//! of `tests/c/`, with g++, against UMap's C++ API) against libumio with
//! `-Wall -Wextra -Werror` and runs them: once plain, once under
//! AddressSanitizer and UndefinedBehaviorSanitizer. Each must exit 0 and
//! print nothing on stderr (libumio prints only errors unless
//! `UMAP_LOG_LEVEL` asks for more), and its report line is checked.
//!
//! The programs use userfaultfd: run as root (or with
//! `vm.unprivileged_userfaultfd=1`), as the rest of the workspace's tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::lib_dir;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

#[derive(Clone, Copy, PartialEq)]
enum Build {
    Plain,
    /// `-fsanitize=address,undefined`, stopping at the first report.
    Sanitized,
    /// Linked with libumio.a instead of libumio.so.
    Static,
}

/// Compiles `source` into `dir`; panics with the compiler's messages.
fn compile(source: &Path, dir: &Path, build: Build) -> PathBuf {
    let name = source.file_stem().unwrap().to_str().unwrap();
    let exe = dir.join(name);
    let lib = lib_dir();
    let cpp = source.extension().is_some_and(|e| e == "cpp");
    let (compiler, std) = if cpp {
        ("g++", "-std=c++11")
    } else {
        ("cc", "-std=gnu11")
    };
    let mut cc = Command::new(compiler);
    cc.args([std, "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg("-I")
        .arg(include_dir())
        .arg("-I")
        .arg(repo_root().join("tests/c"))
        .arg(source)
        .arg("-o")
        .arg(&exe);
    match build {
        Build::Plain | Build::Sanitized => {
            cc.arg(format!("-L{}", lib.display()))
                .arg("-lumio")
                .arg(format!("-Wl,-rpath,{}", lib.display()));
        }
        Build::Static => {
            cc.arg(lib.join("libumio.a")).args(["-ldl", "-lm"]);
        }
    }
    cc.arg("-pthread");
    if build == Build::Sanitized {
        cc.args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ]);
    }
    let out = cc.output().expect("cc runs");
    assert!(
        out.status.success(),
        "{} does not compile:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` with `env` (and no other `UMAP_*`/`UMIO_*` variable but
/// `UMIO_FAULT_SERVICE`, with which the suite runs in each fault-service
/// mode), its temporary files in `tmp`.
fn run(exe: &Path, tmp: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if (k.starts_with("UMAP_") || k.starts_with("UMIO_")) && k != "UMIO_FAULT_SERVICE" {
            cmd.env_remove(k);
        }
    }
    cmd.env("TMPDIR", tmp)
        // Leaks at exit are the runtime's threads and caches, kept for the
        // life of the process by design; everything else ASan checks.
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .envs(env.iter().copied());
    let out = output_within(cmd, exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        exe.display(),
        out.status
    );
    out
}

/// A test program that has used no CPU time for this long is hung (a
/// deadlock, a wait nothing will end), and fails the test. One that runs
/// slowly on a busy machine, but runs, is waited for (up to [`LIMIT`]):
/// slowness is not a failure here.
const STALL: std::time::Duration = std::time::Duration::from_secs(180);
/// The longest a test program may run at all, progressing or not (a
/// program that spins for ever).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(1800);

/// The CPU time process `pid` has used (its threads', not its reaped
/// children's), in clock ticks; `None` once it is gone.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime
    // and stime fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Runs `cmd` to completion and collects its output; kills it and panics
/// if it stops using CPU for [`STALL`] (hung) or runs longer than
/// [`LIMIT`].
fn output_within(mut cmd: Command, exe: &Path) -> Output {
    use std::process::Stdio;
    use std::time::Instant;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test program runs");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let start = Instant::now();
    let (mut ticks, mut progressed) = (cpu_ticks(pid), start);
    while !waiter.is_finished() {
        let now = cpu_ticks(pid);
        if now != ticks {
            (ticks, progressed) = (now, Instant::now());
        }
        let hung = progressed.elapsed() > STALL;
        if hung || start.elapsed() > LIMIT {
            // SAFETY: kill takes no pointer; `pid` is our child, not yet
            // reaped (its waiter has not returned).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = waiter.join();
            if hung {
                panic!(
                    "{} used no CPU for {STALL:?} ({:?} after it started): hung",
                    exe.display(),
                    progressed.duration_since(start)
                );
            }
            panic!("{} still running after {LIMIT:?}", exe.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    waiter.join().unwrap().expect("the test program's output")
}

/// Builds and runs `tests/c/<name>.c` (or another source) the given way;
/// returns its stdout after checking that stderr is empty and that the
/// report line starts with `expect`.
fn check(source: &Path, build: Build, env: &[(&str, &str)], expect: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(source, dir.path(), build);
    let out = run(&exe, dir.path(), env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.is_empty(),
        "{} printed on stderr:\n{stderr}",
        source.display()
    );
    assert!(
        stdout.lines().any(|l| l.starts_with(expect)),
        "{}: no line starting with {expect:?} in:\n{stdout}",
        source.display()
    );
    print!("{stdout}");
    stdout
}

fn test_c(name: &str) -> PathBuf {
    repo_root().join("tests/c").join(format!("{name}.c"))
}

fn test_cpp(name: &str) -> PathBuf {
    repo_root().join("tests/c").join(format!("{name}.cpp"))
}

/// UMap's C++ API: `Umap::umap_ex` with a `Umap::Store` of the program's
/// own under a cache of a quarter of the region, a store error reported by
/// `umap_flush`, and `Store::make_store`'s `StoreFile`.
#[test]
fn umap_store() {
    // Its store fails on purpose: the errors logged that say so are not
    // checked (the program checks the errno umap_flush returns).
    let env = &[("UMAP_BUFSIZE", "64"), ("UMAP_LOG_LEVEL", "OFF")];
    check(&test_cpp("umap_store"), Build::Plain, env, "umap_store: ok");
}

#[test]
fn umap_store_sanitized() {
    // Its store fails on purpose: the errors logged that say so are not
    // checked (the program checks the errno umap_flush returns).
    let env = &[("UMAP_BUFSIZE", "64"), ("UMAP_LOG_LEVEL", "OFF")];
    check(
        &test_cpp("umap_store"),
        Build::Sanitized,
        env,
        "umap_store: ok",
    );
}

/// UMap's `Umap::SparseStore` as its `umap-sparsestore` test uses it: made,
/// written sparsely under a small cache, unmapped, opened again read-only
/// and read back; only the files written exist.
#[test]
fn umap_sparsestore() {
    let env = &[("UMAP_BUFSIZE", "512")];
    let expect = "umap_sparsestore: ok";
    check(&test_cpp("umap_sparsestore"), Build::Plain, env, expect);
}

#[test]
fn umap_sparsestore_sanitized() {
    let env = &[("UMAP_BUFSIZE", "512")];
    let expect = "umap_sparsestore: ok";
    check(&test_cpp("umap_sparsestore"), Build::Sanitized, env, expect);
}

const CONFIG_ENV: &[(&str, &str)] = &[
    ("UMAP_PAGESIZE", "16384"),
    ("UMAP_BUFSIZE", "64"),
    ("UMAP_PAGE_FILLERS", "3"),
    ("UMAP_PAGE_EVICTORS", "2"),
    ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "80"),
    ("UMAP_EVICT_LOW_WATER_THRESHOLD", "50"),
    ("UMAP_MAX_FAULT_EVENTS", "128"),
    ("UMAP_READ_AHEAD", "0"),
    ("UMIO_EVICTION", "LRU"),
];

/// Every numeric `UMAP_*` variable set to 0 or to nothing, as UMap job
/// scripts do to mean "the default" (UMap takes 0 for unset).
const ZERO_ENV: &[(&str, &str)] = &[
    ("UMAP_PAGESIZE", "0"),
    ("UMAP_BUFSIZE", ""),
    ("UMAP_PAGE_FILLERS", "0"),
    ("UMAP_PAGE_EVICTORS", "0"),
    ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "0"),
    ("UMAP_EVICT_LOW_WATER_THRESHOLD", " "),
    ("UMAP_MAX_FAULT_EVENTS", "0"),
    ("UMAP_READ_AHEAD", ""),
    ("UMAP_LOG_LEVEL", ""),
    ("UMIO_EVICTION", ""),
];

/// One test per program and build.
macro_rules! c_tests {
    ($($name:ident, $sanitized:ident: $env:expr, $expect:literal;)*) => {$(
        #[test]
        fn $name() {
            check(&test_c(stringify!($name)), Build::Plain, $env, $expect);
        }

        #[test]
        fn $sanitized() {
            check(&test_c(stringify!($name)), Build::Sanitized, $env, $expect);
        }
    )*};
}

// The programs given UMAP_LOG_LEVEL=ERROR provoke warnings on purpose
// (refused flags, a refused fixed mapping): errors still fail them. c_store
// fails its store's writes on purpose, which is logged as an error: OFF.
c_tests! {
    eviction_integrity, eviction_integrity_sanitized: &[], "eviction_integrity:";
    durability, durability_sanitized: &[], "durability:";
    offset_tail, offset_tail_sanitized: &[], "offset_tail:";
    c_store, c_store_sanitized: &[("UMAP_LOG_LEVEL", "OFF")], "c_store:";
    store_punch_hole, store_punch_hole_sanitized: &[], "store_punch_hole:";
    c_policies, c_policies_sanitized: &[], "c_policies:";
    config_env, config_env_sanitized: CONFIG_ENV, "config_env:";
    config_bad_env, config_bad_env_sanitized: &[("UMAP_PAGESIZE", "1000"), ("UMAP_LOG_LEVEL", "OFF")], "config_bad_env:";
    config_zero_env, config_zero_env_sanitized: ZERO_ENV, "config_zero_env:";
    umap_compat, umap_compat_sanitized: &[], "umap_compat:";
    fixed_replace, fixed_replace_sanitized: &[("UMAP_LOG_LEVEL", "ERROR")], "fixed_replace:";
    bad_inputs, bad_inputs_sanitized: &[("UMAP_LOG_LEVEL", "OFF")], "bad_inputs:";
    backends, backends_sanitized: &[], "backends:";
    huge, huge_sanitized: &[], "huge:";
    user_mode_only, user_mode_only_sanitized: &[("UMIO_UFFD_MODE", "full")], "user_mode_only:";
    coherence, coherence_sanitized: &[], "coherence: ok";
    cache_resize, cache_resize_sanitized: &[], "cache_resize: ok";
    flags, flags_sanitized: &[("UMAP_LOG_LEVEL", "ERROR")], "flags: ok";
    old_structs, old_structs_sanitized: &[], "old_structs: ok";
    runtime_stats, runtime_stats_sanitized: &[], "runtime_stats: ok";
    advice, advice_sanitized: &[], "advice: ok";
    in_thread, in_thread_sanitized: &[], "in_thread: ok";
    fault_service, fault_service_sanitized: &[], "fault_service: ok";
    process_runtime, process_runtime_sanitized: &[("UMAP_LOG_LEVEL", "OFF")], "process_runtime: ok";
}

/// Write prediction through the C API: on by default, off with
/// `UMIO_WRITE_PREDICTION=0`, counted in both stats structures
/// (synchronous dirty tracking, where it applies, whatever the
/// environment asks for).
#[test]
fn write_prediction_is_counted_and_taken_from_the_environment() {
    for (build, predict) in [
        (Build::Plain, None),
        (Build::Plain, Some("0")),
        (Build::Sanitized, None),
    ] {
        let mut env = vec![("UMIO_DIRTY_TRACKING", "sync")];
        match predict {
            Some(v) => env.extend([("UMIO_WRITE_PREDICTION", v), ("EXPECT_PREDICTED", "0")]),
            None => env.push(("EXPECT_PREDICTED", "1")),
        }
        check(
            &test_c("write_prediction"),
            build,
            &env,
            "write_prediction: ok",
        );
    }
}

/// Garbage in each variable the C library reads: the first mapping fails
/// with `EINVAL` (no panic), says why on stderr at the default log level
/// (each failed mapping, one line), and works once the variable is gone.
#[test]
fn every_malformed_variable_fails_the_first_map_with_einval() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(&test_c("config_bad_env"), dir.path(), Build::Plain);
    for (var, value, why) in [
        ("UMAP_PAGESIZE", "-1", ""),
        ("UMAP_PAGESIZE", "4096x", ""),
        ("UMAP_PAGESIZE", "18446744073709551616", ""),
        ("UMAP_BUFSIZE", "abc", ""),
        ("UMAP_BUFSIZE", "18446744073709551615", ""),
        ("UMAP_PAGE_FILLERS", "many", ""),
        ("UMAP_PAGE_EVICTORS", "-1", ""),
        ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "150", ""),
        ("UMAP_EVICT_LOW_WATER_THRESHOLD", "95", ""),
        ("UMAP_MAX_FAULT_EVENTS", "4097", ""),
        ("UMAP_READ_AHEAD", "x", ""),
        ("UMAP_LOG_LEVEL", "chatty", "UMAP_LOG_LEVEL=chatty"),
        ("UMIO_EVICTION", "arc", ""),
        ("UMIO_UFFD_MODE", "sometimes", ""),
        ("UMIO_DIRTY_TRACKING", "sometimes", ""),
        ("UMIO_WRITE_PREDICTION", "sometimes", ""),
    ] {
        let out = run(&exe, dir.path(), &[(var, value), ("BAD_VAR", var)]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stdout.contains(&format!("config_bad_env: {var}: EINVAL")),
            "{var}={value}: {stdout}"
        );
        // umap's and umio_map's refusals.
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{var}={value}: {stderr}");
        for line in lines {
            assert!(
                line.starts_with("[umio ERROR] umio: mapping refused: ") && line.contains(why),
                "{var}={value}: {line:?} does not say {why:?}"
            );
        }
    }
    // UMAP_LOG_LEVEL=OFF silences them.
    let out = run(
        &exe,
        dir.path(),
        &[("UMAP_PAGESIZE", "1000"), ("UMAP_LOG_LEVEL", "off")],
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `UMAP_BUFSIZE` below the smallest cache umio takes (4 pages): the
/// mapping fails with `EINVAL` and says so on stderr at the default log
/// level, naming the minimum; with the minimum it works.
#[test]
fn umap_bufsize_below_the_minimum_says_the_minimum() {
    for (pages, page_size) in [("2", "4096"), ("3", "16384")] {
        let out = check_stderr(
            &test_c("config_small_cache"),
            &[("UMAP_BUFSIZE", pages), ("UMAP_PAGESIZE", page_size)],
            "config_small_cache: ok",
        );
        let min = 4 * page_size.parse::<u64>().unwrap();
        let want = format!(
            "[umio ERROR] umio: mapping refused: UMAP_BUFSIZE={pages} is below the minimum \
             cache of 4 pages (UMAP_BUFSIZE=4, {min} bytes with pages of {page_size} bytes)\n"
        );
        assert_eq!(out, want.repeat(2), "UMAP_BUFSIZE={pages}");
    }
}

/// Builds and runs `source` as [`check`] does; returns its stderr.
fn check_stderr(source: &Path, env: &[(&str, &str)], expect: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(source, dir.path(), Build::Plain);
    let out = run(&exe, dir.path(), env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(expect), "{}: {stdout}", source.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_inputs_cover_at_least_20_cases() {
    let quiet = &[("UMAP_LOG_LEVEL", "OFF")];
    let out = check(&test_c("bad_inputs"), Build::Plain, quiet, "bad_inputs:");
    let ok = out.lines().filter(|l| l.contains(" ok (errno ")).count();
    assert!(ok >= 20, "only {ok} bad inputs checked:\n{out}");
    assert!(out.contains(", 0 failed"), "{out}");
}

/// `UMAP_MONITOR_FREQ=1`: UMap's monitor prints a line of statistics on
/// stderr every second while the program runs (three seconds here).
#[test]
fn umap_monitor_freq_prints_statistics_periodically() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(&test_c("runtime_stats"), dir.path(), Build::Plain);
    let out = run(&exe, dir.path(), &[("UMAP_MONITOR_FREQ", "1")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("runtime_stats: ok"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("umio: monitor: faults "))
        .collect();
    assert!(lines.len() >= 2, "expected a line a second:\n{stderr}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("2 regions") && l.contains("resident")),
        "{stderr}"
    );
    // 0 is unset, as for UMap: no monitor.
    let off = run(&exe, dir.path(), &[("UMAP_MONITOR_FREQ", "0")]);
    assert!(
        off.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
}

#[test]
fn umap_log_level_prints_and_nothing_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(&test_c("durability"), dir.path(), Build::Plain);
    let quiet = run(&exe, dir.path(), &[]);
    assert!(quiet.stderr.is_empty());
    let loud = run(&exe, dir.path(), &[("UMAP_LOG_LEVEL", "DEBUG")]);
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert!(
        stderr.contains("[umio INFO] umio: runtime started"),
        "{stderr}"
    );
    assert!(stderr.contains("[umio DEBUG] umio: mapped"), "{stderr}");
    // Errors are logged at DEBUG: the failed second uunmap.
    assert!(stderr.contains("not mapped"), "{stderr}");
    let errors_only = run(&exe, dir.path(), &[("UMAP_LOG_LEVEL", "ERROR")]);
    assert!(errors_only.stderr.is_empty());
}

#[test]
fn quickstart_example_runs() {
    let src = repo_root().join("examples/c/quickstart.c");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quickstart.bin");
    let exe = compile(&src, dir.path(), Build::Plain);
    let out = Command::new(&exe).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    assert!(stdout.contains("file starts with \"hello\""), "{stdout}");
    print!("{stdout}");
}

#[test]
fn quickstart_links_statically() {
    let src = repo_root().join("examples/c/quickstart.c");
    check(&src, Build::Static, &[], "file starts with \"hello\"");
}

/// `tests/c/exit_writeback.c killed`: a program that maps a file with
/// `umio_map_options.survive_process_death`, writes every byte and
/// SIGKILLs itself (nothing evicted, nothing written back) leaves every
/// byte in the file once its keeper is done (no process holds the file
/// open any more), as with `mmap`'s `MAP_SHARED`, in both fault services.
#[test]
fn writes_reach_the_file_when_the_process_is_killed_with_survive_process_death() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(&test_c("exit_writeback"), dir.path(), Build::Plain);
    for service in ["fillers", "in-thread"] {
        let path = dir.path().join(format!("{service}-killed.bin"));
        let out = run_exit_writeback(&exe, &path, "killed", service);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.signal() == Some(libc::SIGKILL) && stdout.contains("exit_writeback: killed"),
            "{service}: {}\n{stdout}\n{stderr}",
            out.status
        );
        // The keeper holds the file open until it has written it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        while held_open(&path) {
            assert!(
                std::time::Instant::now() < deadline,
                "{service}: the keeper hung"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_exit_writeback_bytes(&path, service);
    }
}

/// Whether a process has `path` open (`/proc/*/fd`).
fn held_open(path: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
        })
    })
}

/// How many bytes `tests/c/exit_writeback.c` writes.
const EXIT_WRITEBACK_LEN: usize = 1 << 20;

/// Runs `exe` (`tests/c/exit_writeback.c`) in `mode` with fault service
/// `service` on `path`, a file of [`EXIT_WRITEBACK_LEN`] zeros made first,
/// and no other `UMAP_*`/`UMIO_*` variable than a cache of 4 MiB: nothing
/// is evicted, so nothing is written back before the program ends unless
/// it unmaps. Returns its output, whatever its status.
fn run_exit_writeback(exe: &Path, path: &Path, mode: &str, service: &str) -> Output {
    std::fs::write(path, vec![0u8; EXIT_WRITEBACK_LEN]).unwrap();
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMAP_") || k.starts_with("UMIO_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg(path)
        .arg(mode)
        .env("UMAP_BUFSIZE", "1024")
        .env("UMIO_FAULT_SERVICE", service);
    output_within(cmd, exe)
}

/// Asserts that the file at `path` holds every byte
/// `tests/c/exit_writeback.c` writes, naming `what` otherwise.
#[track_caller]
fn assert_exit_writeback_bytes(path: &Path, what: &str) {
    const LEN: usize = EXIT_WRITEBACK_LEN;
    let data = std::fs::read(path).unwrap();
    assert_eq!(data.len(), LEN, "{what}");
    let lost = (0..LEN)
        .filter(|&i| data[i] != exit_writeback_byte(i as u64))
        .count();
    assert_eq!(
        lost, 0,
        "{what}: {lost} of {LEN} bytes did not reach the file"
    );
}

/// The byte `tests/c/exit_writeback.c` writes at `off`.
fn exit_writeback_byte(off: u64) -> u8 {
    let x = off.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 56) as u8 ^ (off >> 12) as u8) ^ 0x5a
}

/// A C program writes 1 MiB through `umap` (or `umio_map`) and ends
/// without unmapping it (`exit(0)`, a return from `main`, another thread
/// still running, a write in its own `atexit` handler, after a fork child
/// exited first), or unmaps it with
/// UMap's `uunmap(p, 0)` or a length past its end: every byte is in the
/// file afterwards, as with `mmap`'s `MAP_SHARED`, in both fault services.
#[test]
fn writes_reach_the_file_at_exit_and_at_uunmap_of_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(&test_c("exit_writeback"), dir.path(), Build::Plain);
    for service in ["fillers", "in-thread"] {
        for mode in [
            "exit",
            "return",
            "umio-exit",
            "named",
            "thread",
            "atexit",
            "fork",
            "uunmap0",
            "uunmap-long",
            "uunmap-holes",
        ] {
            let path = dir.path().join(format!("{service}-{mode}.bin"));
            let out = run_exit_writeback(&exe, &path, mode, service);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stdout.contains(&format!("exit_writeback: {mode}")),
                "{service} {mode}: {}\n{stdout}\n{stderr}",
                out.status
            );
            assert!(stderr.is_empty(), "{service} {mode}: {stderr}");
            assert_exit_writeback_bytes(&path, &format!("{service} {mode}"));
        }
    }
}

/// The hang detector's clock: a process's CPU time, which grows while it
/// computes and stands while it sleeps.
#[test]
fn cpu_ticks_count_work_and_not_sleep() {
    let me = std::process::id();
    let t0 = cpu_ticks(me).expect("this process's CPU time");
    let start = std::time::Instant::now();
    let mut x = 0u64;
    while cpu_ticks(me).unwrap() < t0 + 3 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(600),
            "no CPU time counted"
        );
    }
    let mut sleeper = Command::new("sleep").arg("1").spawn().unwrap();
    let pid = sleeper.id();
    let before = cpu_ticks(pid).expect("a running child's CPU time");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        cpu_ticks(pid).unwrap_or(before) <= before + 1,
        "sleep(1) computed"
    );
    sleeper.wait().unwrap();
    assert_eq!(cpu_ticks(pid), None, "a reaped process has no CPU time");
}
