//! The C library as a packager ships it: `crates/ffi/install.sh` into a
//! temporary prefix, then what a user of the installed library sees: the
//! versioned files and their symlinks, the SONAME, exactly the C API
//! exported under the version node `UMIO_0`, a program built with
//! `pkg-config` (shared and static) that runs against the installed
//! library, the shim beside it, and an uninstall that removes exactly what
//! the install put there.
//!
//! Needs a C compiler, binutils (`readelf`, `nm`, `strip`) and pkg-config;
//! without one a test says SKIPPED and what to install. The programs use
//! userfaultfd: run as root (or with `vm.unprivileged_userfaultfd=1`), as
//! the rest of the workspace's tests.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{declared_functions, lib_dir};

/// The SONAME and version node that libumio.map and install.sh give.
const SONAME: &str = "libumio.so.0";
const NODE: &str = "UMIO_0";

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The real file's name: `libumio.so.<package version>`.
fn real_name() -> String {
    format!("libumio.so.{}", env!("CARGO_PKG_VERSION"))
}

/// Whether the tools the tests need are installed; if not, says SKIPPED
/// with what to install.
fn tools_present() -> bool {
    let missing: Vec<&str> = [
        ("cc", "gcc"),
        ("readelf", "binutils"),
        ("nm", "binutils"),
        ("strip", "binutils"),
        ("pkg-config", "pkg-config"),
    ]
    .into_iter()
    .filter(|(tool, _)| Command::new(tool).arg("--version").output().is_err())
    .map(|(_, package)| package)
    .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!(
        "SKIPPED: the packaging tests need {} (apt-get install {})",
        missing.join(", "),
        missing.join(" ")
    );
    false
}

/// The directory holding libumio.a and libumio_preload.so, built fresh for
/// this test run's profile (`lib_dir` builds umio-ffi; the shim is built
/// the same way).
fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = lib_dir().to_path_buf();
        let target_dir = dir.parent().unwrap();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "-p", "umio-preload", "--lib"])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(crate_dir());
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(profile) => {
                cargo.args(["--profile", profile]);
            }
            None => panic!("no profile directory at {}", dir.display()),
        }
        let out = cargo.output().expect("cargo runs");
        assert!(
            out.status.success(),
            "building libumio_preload failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(dir.join("libumio_preload.so").exists());
        dir
    })
}

/// Runs `install.sh` with `args` (and `DESTDIR` if given); panics with its
/// output if it fails.
fn install_sh(args: &[&Path], destdir: Option<&Path>) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg(crate_dir().join("install.sh"))
        .args(args)
        .env("UMIO_BUILD_DIR", build_dir())
        .env_remove("DESTDIR");
    if let Some(d) = destdir {
        cmd.env("DESTDIR", d);
    }
    let out = cmd.output().expect("sh runs");
    assert!(
        out.status.success(),
        "install.sh {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn install(prefix: &Path) {
    install_sh(&[prefix], None);
}

fn uninstall(prefix: &Path) {
    install_sh(&[Path::new("--uninstall"), prefix], None);
}

/// Runs a tool; panics naming it unless it succeeds; returns its stdout.
fn tool(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the tool runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn readelf(args: &[&str], file: &Path) -> String {
    tool(Command::new("readelf").args(args).arg(file))
}

/// Every file, symlink and directory under `root`, relative to it;
/// directories end in `/`.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// What an install into an empty prefix holds.
fn expected_tree() -> BTreeSet<String> {
    let mut files: BTreeSet<String> = [
        "include/",
        "include/umap/",
        "include/umap/umap.h",
        "include/umap/store/",
        "include/umap/store/SparseStore.h",
        "include/umap/store/Store.hpp",
        "include/umap/store/StoreFile.h",
        "include/umio.h",
        "lib/",
        "lib/libumio.a",
        "lib/libumio.so",
        "lib/libumio_preload.so",
        "lib/pkgconfig/",
        "lib/pkgconfig/umio.pc",
        "share/",
        "share/umio/",
        "share/umio/installed",
    ]
    .map(String::from)
    .into();
    files.insert(format!("lib/{SONAME}"));
    files.insert(format!("lib/{}", real_name()));
    files
}

#[test]
fn install_lays_out_versioned_stripped_files_and_symlinks() {
    if !tools_present() {
        return;
    }
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    install(p);
    assert_eq!(tree(p), expected_tree());

    let lib = p.join("lib");
    let real = real_name();
    assert_eq!(
        std::fs::read_link(lib.join("libumio.so")).unwrap(),
        Path::new(SONAME)
    );
    assert_eq!(
        std::fs::read_link(lib.join(SONAME)).unwrap(),
        Path::new(&real)
    );
    assert!(
        std::fs::symlink_metadata(lib.join(&real))
            .unwrap()
            .is_file()
    );

    let dynamic = readelf(&["-d"], &lib.join("libumio.so"));
    assert!(
        dynamic.contains(&format!("Library soname: [{SONAME}]")),
        "{dynamic}"
    );
    // The library, the shim and the archive carry no debug information;
    // the two shared objects no static symbol table either.
    for f in [real.as_str(), "libumio_preload.so"] {
        let sections = readelf(&["-S", "-W"], &lib.join(f));
        assert!(
            !sections.contains(".debug_") && !sections.contains(".symtab"),
            "{f} is not stripped:\n{sections}"
        );
    }
    let archive = readelf(&["-S", "-W"], &lib.join("libumio.a"));
    assert!(archive.contains(".text"), "{archive}");
    assert!(
        !archive.contains(".debug_info"),
        "libumio.a keeps debug information"
    );

    let pc = std::fs::read_to_string(lib.join("pkgconfig/umio.pc")).unwrap();
    assert!(
        pc.contains(&format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{pc}"
    );
    assert!(pc.contains(&format!("prefix={}\n", p.display())), "{pc}");
    // rustc --print native-static-libs for libumio.a (and librados with
    // the rados feature), with the unwinder's archive for libgcc_s, which
    // has none.
    let private = "-lgcc_eh -lutil -lrt -lpthread -lm -ldl -lc";
    let private = if cfg!(feature = "rados") {
        format!("-lrados {private}")
    } else {
        private.to_string()
    };
    assert!(pc.contains(&format!("Libs.private: {private}\n")), "{pc}");
}

#[test]
fn installed_library_exports_exactly_the_api_under_its_version_node() {
    if !tools_present() {
        return;
    }
    let prefix = tempfile::tempdir().unwrap();
    install(prefix.path());
    let lib = prefix.path().join("lib").join(real_name());

    let mut declared: BTreeSet<String> = declared_functions("umio.h").into_iter().collect();
    declared.extend(declared_functions("umap/umap.h"));
    assert!(declared.len() > 30, "found only {declared:?}");

    // Every defined dynamic symbol: `name@@UMIO_0`, and the version node's
    // own (absolute) symbol.
    let syms = readelf(&["--dyn-syms", "-W"], &lib);
    let mut exported = BTreeSet::new();
    for line in syms.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        if f.len() < 8 || !f[0].ends_with(':') || f[6] == "UND" || f[6] == "Ndx" {
            continue;
        }
        if f[4] == "LOCAL" {
            continue;
        }
        let name = f[7];
        if f[6] == "ABS" && (name == NODE || name == format!("{NODE}@@{NODE}")) {
            continue;
        }
        let (sym, version) = name
            .split_once("@@")
            .unwrap_or_else(|| panic!("{name} has no default version:\n{syms}"));
        assert_eq!(version, NODE, "{name}");
        assert_eq!(f[3], "FUNC", "{line}");
        exported.insert(sym.to_string());
    }
    assert_eq!(
        exported, declared,
        "exports (left) and header declarations (right) differ"
    );

    let versions = readelf(&["-V"], &lib);
    assert!(
        versions.contains(&format!("Name: {NODE}")),
        "no version definition {NODE}:\n{versions}"
    );
}

/// A program of its own: umio_version() against the header's macros,
/// where the library was loaded from (dladdr; "the program" when linked
/// in fully static), then a write, a flush, an
/// unmap and a second map reading it back through umap/umap.h.
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <umap/umap.h>
#include <umio.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *want = STR(UMIO_VERSION_MAJOR) "." STR(UMIO_VERSION_MINOR) "." STR(UMIO_VERSION_PATCH);
  if (strcmp(umio_version(), want) != 0) {
    printf("version %s, header %s\n", umio_version(), want);
    return 1;
  }
  /* A fully static program has no loader to ask. */
  Dl_info info;
  if (!dladdr((void *)umio_version, &info) || !info.dli_fname) info.dli_fname = "the program";
  size_t len = 1 << 20;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) return 4;
  char *p = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  if (p == UMAP_FAILED) { perror("umap"); return 5; }
  memcpy(p + 300000, "packaged", 8);
  if (umap_flush() != 0 || uunmap(p, len) != 0) return 6;
  char *q = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  if (q == UMAP_FAILED || memcmp(q + 300000, "packaged", 8) != 0 || q[0] != 0) return 7;
  if (uunmap(q, len) != 0) return 8;
  close(fd);
  printf("packaged: umio %s from %s\n", umio_version(), info.dli_fname);
  return 0;
}
"#;

/// `pkg-config <args> umio` with the prefix's .pc file.
fn pkg_config(prefix: &Path, args: &[&str]) -> String {
    tool(
        Command::new("pkg-config")
            .args(args)
            .arg("umio")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .env_remove("PKG_CONFIG_LIBDIR")
            .env_remove("PKG_CONFIG_SYSROOT_DIR"),
    )
}

/// Compiles `PROGRAM` with `flags` into `exe`.
fn compile(dir: &Path, exe: &Path, flags: &[String]) {
    let src = dir.join("packaged.c");
    std::fs::write(&src, PROGRAM).unwrap();
    tool(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .arg("-o")
            .arg(exe)
            .args(flags),
    );
}

/// Runs `exe` with `env`, no `UMAP_*`/`UMIO_*` variable, nothing preloaded;
/// returns its stdout after checking it succeeded.
fn run(exe: &Path, data: &Path, env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMAP_") || k.starts_with("UMIO_") || k.starts_with("LD_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg(data).envs(env.iter().copied());
    let out = cmd.output().expect("the program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed ({}):\n{stdout}{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_program_built_with_pkg_config_runs_against_the_installed_library() {
    if !tools_present() {
        return;
    }
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    install(p);
    let flags = pkg_config(p, &["--cflags", "--libs"]);
    assert_eq!(
        flags.trim(),
        format!("-I{0}/include -L{0}/lib -lumio", p.display())
    );

    // Shared: the flags alone, no rpath; the loader finds the library
    // through LD_LIBRARY_PATH, by its SONAME.
    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("packaged");
    let flags: Vec<String> = flags.split_whitespace().map(String::from).collect();
    compile(work.path(), &exe, &flags);
    let dynamic = readelf(&["-d"], &exe);
    assert!(
        dynamic.contains(&format!("Shared library: [{SONAME}]")),
        "{dynamic}"
    );
    let refs = readelf(&["--dyn-syms", "-W"], &exe);
    assert!(
        refs.contains(&format!("umap@{NODE}")) && refs.contains(&format!("umio_version@{NODE}")),
        "the program's references carry no symbol version:\n{refs}"
    );
    let libdir = p.join("lib");
    let out = run(
        &exe,
        &work.path().join("data"),
        &[("LD_LIBRARY_PATH", &libdir)],
    );
    let loaded = format!("from {}/{SONAME}", libdir.display());
    assert!(
        out.starts_with(&format!("packaged: umio {}", env!("CARGO_PKG_VERSION")))
            && out.contains(&loaded),
        "{out}"
    );

    // Static: libumio.a and Libs.private, and nothing of libumio needed at
    // run time.
    let static_flags = pkg_config(p, &["--static", "--cflags", "--libs"]);
    let flags: Vec<String> = static_flags
        .split_whitespace()
        .flat_map(|f| {
            if f == "-lumio" {
                vec!["-Wl,-Bstatic".into(), f.into(), "-Wl,-Bdynamic".into()]
            } else {
                vec![f.to_string()]
            }
        })
        .collect();
    let exe_static = work.path().join("packaged_static");
    compile(work.path(), &exe_static, &flags);
    let dynamic = readelf(&["-d"], &exe_static);
    assert!(!dynamic.contains("libumio"), "{dynamic}");
    let out = run(&exe_static, &work.path().join("data2"), &[]);
    assert!(out.starts_with("packaged: umio "), "{out}");

    // The shim beside the library loads into a program (no file is
    // selected: it changes nothing) and prints nothing.
    let shim = libdir.join("libumio_preload.so");
    let mut cmd = Command::new(&exe_static);
    cmd.arg(work.path().join("data3"))
        .env("LD_PRELOAD", &shim)
        .env_remove("UMIO_PRELOAD_PATHS")
        .env_remove("UMIO_HEAP_FILE")
        .env_remove("UMIO_STATS");
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "under the installed shim: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cc -static` with `pkg-config --static` and nothing else: a program
/// with no dynamic section, which runs (`-lgcc_s` in `Libs.private` has no
/// archive to link).
#[test]
fn a_fully_static_program_links_with_pkg_config_static() {
    if !tools_present() {
        return;
    }
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    install(p);
    let mut flags = vec!["-static".to_string()];
    flags.extend(
        pkg_config(p, &["--static", "--cflags", "--libs"])
            .split_whitespace()
            .map(String::from),
    );
    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("packaged_fully_static");
    compile(work.path(), &exe, &flags);
    let dynamic = readelf(&["-d"], &exe);
    assert!(dynamic.contains("no dynamic section"), "{dynamic}");
    let out = run(&exe, &work.path().join("data"), &[]);
    assert!(out.starts_with("packaged: umio "), "{out}");
    assert!(out.contains("from the program"), "{out}");
}

/// Without `UMIO_BUILD_DIR`, install.sh builds what it installs, with
/// cargo, in `CARGO_TARGET_DIR` (here this test run's own, and profile,
/// where the libraries are up to date).
#[test]
fn install_builds_the_libraries_in_cargo_target_dir() {
    if !tools_present() {
        return;
    }
    let built = build_dir();
    let profile = match built.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("no profile directory at {}", built.display()),
    };
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    let out = Command::new("sh")
        .arg(crate_dir().join("install.sh"))
        .arg(p)
        .env_remove("UMIO_BUILD_DIR")
        .env_remove("DESTDIR")
        .env("CARGO_TARGET_DIR", built.parent().unwrap())
        .env("UMIO_PROFILE", profile)
        .env("CARGO", env!("CARGO"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tree(p), expected_tree());
}

#[test]
fn uninstall_removes_exactly_what_install_put_there() {
    if !tools_present() {
        return;
    }
    // A prefix with something of its own in lib/: it stays, with lib/.
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    std::fs::create_dir(p.join("lib")).unwrap();
    std::fs::write(p.join("lib/libother.so"), "not umio's").unwrap();
    let before = tree(p);
    install(p);
    // Installing again over it is fine, and changes nothing.
    let once = tree(p);
    install(p);
    assert_eq!(tree(p), once);
    assert!(once.is_superset(&before));
    uninstall(p);
    assert_eq!(tree(p), before);
    assert_eq!(
        std::fs::read_to_string(p.join("lib/libother.so")).unwrap(),
        "not umio's"
    );

    // An empty prefix is left empty. Uninstalling twice fails: nothing is
    // installed.
    let empty = tempfile::tempdir().unwrap();
    install(empty.path());
    uninstall(empty.path());
    assert!(tree(empty.path()).is_empty(), "{:?}", tree(empty.path()));
    let again = Command::new("sh")
        .arg(crate_dir().join("install.sh"))
        .arg("--uninstall")
        .arg(empty.path())
        .env_remove("DESTDIR")
        .output()
        .unwrap();
    assert!(!again.status.success());
}

#[test]
fn destdir_stages_the_install_under_the_final_prefix() {
    if !tools_present() {
        return;
    }
    let stage = tempfile::tempdir().unwrap();
    let prefix = Path::new("/opt/umio-test");
    install_sh(&[prefix], Some(stage.path()));
    assert!(
        !prefix.exists(),
        "{} written outside DESTDIR",
        prefix.display()
    );
    let staged = stage.path().join("opt/umio-test");
    assert_eq!(tree(&staged), expected_tree());
    let pc = std::fs::read_to_string(staged.join("lib/pkgconfig/umio.pc")).unwrap();
    assert!(pc.starts_with("prefix=/opt/umio-test\n"), "{pc}");
    install_sh(&[Path::new("--uninstall"), prefix], Some(stage.path()));
    assert!(tree(&staged).is_empty(), "{:?}", tree(&staged));
}
