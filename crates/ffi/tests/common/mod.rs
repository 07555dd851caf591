//! What the C-facing tests share: where libumio is, built fresh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding libumio.so and libumio.a for this test run's
/// profile, after building them.
///
/// Cargo does not build a library that is only a cdylib and a staticlib
/// before the package's integration tests (they cannot link it), so the
/// tests build it: `cargo build -p umio-ffi --lib` with the profile and
/// target directory of the running test (`<target>/<profile>/deps/<test>`).
/// Cargo has released its build lock by the time tests run; when the
/// library is up to date this costs a fraction of a second.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args([
                "build",
                "--quiet",
                "-p",
                "umio-ffi",
                "--lib",
                "--target-dir",
            ])
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        // The library the tests link must have the features they were
        // built with (the rados test maps through librados).
        if cfg!(feature = "rados") {
            cargo.args(["--features", "rados"]);
        }
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
            "building libumio failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for lib in ["libumio.so", "libumio.a"] {
            assert!(
                profile_dir.join(lib).exists(),
                "{lib} not found in {}",
                profile_dir.display()
            );
        }
        profile_dir
    })
}

/// The names of the C functions a header declares: comments, preprocessor
/// lines and what only C++ sees (`#ifdef __cplusplus` up to its `#else` or
/// `#endif`: `umap/umap.h`'s C++ API, header-only) removed, each
/// statement up to `;`, the identifier before its first `(` (function
/// pointers in structs, `(*name)`, skipped).
#[allow(dead_code)] // not every test uses it
pub fn declared_functions(header: &str) -> Vec<String> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let text = std::fs::read_to_string(include.join(header)).unwrap();
    let mut code = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("/*") {
        code.push_str(&rest[..i]);
        rest = &rest[i + 2..];
        rest = &rest[rest.find("*/").map_or(rest.len(), |j| j + 2)..];
    }
    code.push_str(rest);
    // One entry per open `#if`: whether its current branch is C++ only.
    let mut cxx_only: Vec<bool> = Vec::new();
    let code: Vec<&str> = code
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .filter(|l| {
            let directive = l.trim_start();
            if directive.starts_with("#if") {
                cxx_only.push(directive.split_whitespace().eq(["#ifdef", "__cplusplus"]));
            } else if directive.starts_with("#else") || directive.starts_with("#elif") {
                if let Some(top) = cxx_only.last_mut() {
                    *top = false;
                }
            } else if directive.starts_with("#endif") {
                cxx_only.pop();
            }
            !directive.starts_with('#') && !cxx_only.contains(&true)
        })
        .collect();
    let code = code.join(" ");
    let mut names = Vec::new();
    for stmt in code.split([';', '{', '}']) {
        let Some(open) = stmt.find('(') else { continue };
        if stmt[open..].starts_with("(*") {
            continue;
        }
        let name = stmt[..open]
            .trim_end()
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap();
        if !name.is_empty() {
            names.push(name.to_string());
        }
    }
    names
}
