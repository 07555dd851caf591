//! The declared minimum Rust version (`rust-version` in the workspace's
//! Cargo.toml) holds for what can be checked without that toolchain:
//!
//! - every package of the workspace inherits it;
//! - no package in Cargo.lock (any platform, `--cfg loom`'s too) declares
//!   a newer `rust-version`, so that toolchain can build the dependencies
//!   (the workspace's `resolver = "3"` keeps `cargo update` to such
//!   versions);
//! - the sources' let-chains (stable since 1.88) are within it;
//! - the README's Requirements line states it.
//!
//! Standard library APIs newer than it are clippy's `incompatible_msrv`
//! errors (CI runs clippy with `-D warnings`); the language features are
//! not checked by any tool short of that toolchain itself, which `.ci/run`
//! uses when rustup has it.

use std::path::Path;
use std::process::Command;

/// A version as `(major, minor, patch)`; a missing patch is 0.
fn parse(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    let major = parts.next().unwrap();
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `rust-version` of `[workspace.package]`.
fn workspace_msrv() -> String {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let section = manifest
        .split("[workspace.package]")
        .nth(1)
        .expect("[workspace.package]");
    let line = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find(|l| l.starts_with("rust-version"))
        .expect("[workspace.package] has a rust-version");
    line.split('"').nth(1).unwrap().to_string()
}

fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_package_inherits_the_msrv_and_no_dependency_needs_more() {
    let msrv = workspace_msrv();
    let meta = metadata();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(members.len() >= 6, "{members:?}");
    let mut too_new = Vec::new();
    let mut dependencies = 0;
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let declared = p["rust_version"].as_str();
        if members.contains(&p["id"].as_str().unwrap()) {
            assert_eq!(
                declared,
                Some(msrv.as_str()),
                "{name} does not inherit rust-version (rust-version.workspace = true)"
            );
            continue;
        }
        dependencies += 1;
        if let Some(v) = declared
            && parse(v) > parse(&msrv)
        {
            too_new.push(format!("{name} {} needs Rust {v}", p["version"]));
        }
    }
    assert!(dependencies > 50, "only {dependencies} dependencies listed");
    assert!(
        too_new.is_empty(),
        "rust-version is {msrv}, but Cargo.lock has {too_new:?}: pin older versions \
         (CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo update -p NAME) or raise it"
    );
}

/// Whether a Rust source under `dir` uses a let-chain (`&& let`).
fn uses_let_chains(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let path = e.unwrap().path();
        if path.is_dir() {
            path.file_name() != Some("target".as_ref()) && uses_let_chains(&path)
        } else {
            path.extension() == Some("rs".as_ref())
                && std::fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .any(|l| l.trim_start().starts_with("&& let "))
        }
    })
}

#[test]
fn let_chains_are_within_the_msrv() {
    let msrv = parse(&workspace_msrv());
    assert!(uses_let_chains(&root().join("crates")));
    assert!(
        msrv >= (1, 88, 0),
        "let-chains need Rust 1.88, rust-version says {msrv:?}"
    );
}

#[test]
fn readme_states_the_msrv() {
    let msrv = workspace_msrv();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let requirements = readme
        .split("## Requirements")
        .nth(1)
        .expect("README has a Requirements section");
    let requirements = requirements
        .split("\n## ")
        .next()
        .unwrap()
        .replace('\n', " ");
    assert!(
        requirements.contains(&format!("Rust {msrv} or later")),
        "README's Requirements do not say \"Rust {msrv} or later\""
    );
}
