//! The C headers agree with the library's exports.
//!
//! - `include/umio.h` is what cbindgen generates from the sources now
//!   (rustls-ffi's ensure-header-updated check); `UMIO_BLESS=1` rewrites it.
//! - `include/umap/umap.h` is written by hand to keep UMap's spelling.
//!   cbindgen's declarations of the same functions are compiled together
//!   with it, so any difference of type is a compile error, and every
//!   function it declares is exported by libumio.so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{declared_functions, lib_dir};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(config: cbindgen::Config) -> String {
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut out);
    String::from_utf8(out).expect("cbindgen writes UTF-8")
}

/// cbindgen copies Rust doc comments as they are; a C header speaks C:
/// in its comments, rustdoc headings (`# Safety`) become plain labels
/// ("Requirements:"), Markdown's backticks and table rules go.
fn as_c_documentation(header: &str) -> String {
    let mut out = String::with_capacity(header.len());
    for line in header.lines() {
        let body = line.trim_start();
        if let Some(text) = body.strip_prefix("//") {
            let indent = &line[..line.len() - body.len()];
            let text = text.trim_start();
            if text.starts_with("|-") {
                continue;
            }
            let text = match text.strip_prefix("# ") {
                Some("Safety") => "Requirements:".to_string(),
                Some(heading) => format!("{heading}:"),
                None => text.replace('`', ""),
            };
            if text.is_empty() {
                out.push_str(&format!("{indent}//\n"));
            } else {
                out.push_str(&format!("{indent}// {text}\n"));
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn umio_h_comments_are_c_documentation() {
    let header = std::fs::read_to_string(crate_dir().join("include/umio.h")).unwrap();
    for (n, line) in header.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            assert!(
                !line.contains('`') && !line.contains("# "),
                "umio.h:{}: Markdown in a C comment: {line}",
                n + 1
            );
        }
    }
    assert!(header.contains("Requirements:"));
}

fn umio_config() -> cbindgen::Config {
    cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).expect("cbindgen.toml parses")
}

#[test]
fn umio_h_is_what_cbindgen_generates() {
    let path = crate_dir().join("include/umio.h");
    let generated = as_c_documentation(&generate(umio_config()));
    if std::env::var_os("UMIO_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} differs from what cbindgen generates from the sources: \
         run `UMIO_BLESS=1 cargo test -p umio-ffi --test headers` and commit it",
        path.display()
    );
}

fn umap_h_functions() -> Vec<String> {
    declared_functions("umap/umap.h")
}

#[test]
fn umap_h_declares_umaps_api() {
    let names = umap_h_functions();
    for f in [
        "umap",
        "uunmap",
        "umap_flush",
        "umap_prefetch",
        "umap_fetch_and_pin",
        "umap_has_write_support",
        "umapcfg_get_umap_page_size",
        "umapcfg_get_max_fault_events",
        "umapcfg_get_num_fillers",
        "umapcfg_get_num_evictors",
        "umapcfg_get_max_pages_in_buffer",
        "umapcfg_get_evict_low_water_threshold",
        "umapcfg_get_evict_high_water_threshold",
    ] {
        assert!(names.iter().any(|n| n == f), "umap.h lacks {f}");
    }
}

fn exported_symbols(lib: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("nm runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (_, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "T").then(|| name.to_string())
        })
        .collect()
}

#[test]
fn every_declared_function_is_exported() {
    let exported = exported_symbols(&lib_dir().join("libumio.so"));
    let mut declared = umap_h_functions();
    declared.extend(declared_functions("umio.h"));
    assert!(declared.len() > 25, "found only {declared:?}");
    for name in &declared {
        assert!(
            exported.contains(name),
            "{name} is declared but libumio.so does not export it"
        );
    }
    // And nothing but the C API is exported from the Rust side.
    for name in &exported {
        if name.starts_with("umio_") || name.starts_with("umap") || name == "uunmap" {
            assert!(
                declared.contains(name),
                "{name} is exported but declared by no header"
            );
        }
    }
}

#[test]
fn umap_h_agrees_with_the_exports() {
    // cbindgen's declarations of every exported function, from the Rust
    // sources: with `args = "horizontal"` each is one unindented line.
    let mut config = umio_config();
    config.export.exclude.clear();
    let declarations: String = generate(config)
        .lines()
        .filter(|l| !l.starts_with([' ', '/', '#']) && l.contains('(') && l.ends_with(");"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(declarations.contains("*umap(") && declarations.contains(" uunmap("));
    let dir = tempfile::tempdir().unwrap();
    let from_rust = dir.path().join("from_rust.h");
    std::fs::write(&from_rust, declarations).unwrap();
    // C rejects two declarations of one function with different types.
    let src = dir.path().join("agree.c");
    std::fs::write(
        &src,
        format!(
            "#include <umap/umap.h>\n#include <umio.h>\n#include \"{}\"\nint main(void) {{ return 0; }}\n",
            from_rust.display()
        ),
    )
    .unwrap();
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(crate_dir().join("include"))
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "umap/umap.h disagrees with the Rust exports:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn headers_compile_as_cxx() {
    if Command::new("c++").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C++ compiler");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("both.cpp");
    std::fs::write(
        &src,
        "#include <umap/umap.h>\n#include <umio.h>\n\
         int main() { struct umio_stats s; (void)s; return umap_has_write_support() < 0; }\n",
    )
    .unwrap();
    let out = Command::new("c++")
        .args(["-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&src)
        .output()
        .expect("c++ runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
