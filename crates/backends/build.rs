//! Links SPDK when the `spdk` feature is on; does nothing otherwise.
//!
//! SPDK is found through pkg-config: its `.pc` files under
//! `$SPDK_DIR/build/lib/pkgconfig` (a built source tree) or
//! `$SPDK_DIR/lib/pkgconfig` (an installed prefix), or wherever
//! `PKG_CONFIG_PATH` points when `SPDK_DIR` is unset. SPDK's modules (bdev
//! types, subsystems) register themselves from constructors that nothing
//! references, so its static libraries and DPDK's are linked whole
//! (`+whole-archive`). Shared SPDK libraries are not supported: they would
//! need `--no-as-needed`, which a library crate cannot pass to the final
//! link.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pkg-config modules linked: the bdev layer and its subsystem, the
/// bdev types a configuration can name (malloc, aio, null, NVMe and
/// NVMe-oF), their socket, keyring and accel modules, the JSON
/// configuration loader and the DPDK environment.
const MODULES: &str = "spdk_event_bdev spdk_event_keyring spdk_bdev_malloc spdk_bdev_aio \
     spdk_bdev_null spdk_bdev_nvme spdk_sock_modules spdk_keyring_modules spdk_accel_modules \
     spdk_init spdk_env_dpdk";

fn main() {
    if std::env::var_os("CARGO_FEATURE_SPDK").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=SPDK_DIR");
    println!("cargo:rerun-if-env-changed=UMIO_SPDK_MODULES");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if let Err(e) = link() {
        eprintln!("error: umio-backends feature `spdk`: {e}");
        std::process::exit(1);
    }
}

fn link() -> Result<(), String> {
    let pc_path = pkg_config_path()?;
    let modules = std::env::var("UMIO_SPDK_MODULES").unwrap_or_else(|_| MODULES.into());
    let mods: Vec<&str> = modules.split_whitespace().collect();
    let spdk = pkg_config(&pc_path, &["--libs"], &mods)?;
    let sys = pkg_config(&pc_path, &["--libs", "--static"], &["spdk_syslibs"])?;

    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for tok in spdk.split_whitespace() {
        if let Some(d) = tok.strip_prefix("-L") {
            dirs.push(d.into());
            println!("cargo:rustc-link-search=native={d}");
        } else if let Some(l) = tok.strip_prefix("-l") {
            if !seen.insert(l.to_string()) {
                continue;
            }
            if !dirs.iter().any(|d| d.join(format!("lib{l}.a")).exists()) {
                return Err(format!(
                    "lib{l}.a not found in {dirs:?}: umio links SPDK and DPDK statically \
                     (configure SPDK without --with-shared)"
                ));
            }
            println!("cargo:rustc-link-lib=static:+whole-archive,-bundle={l}");
        }
    }
    for tok in sys.split_whitespace() {
        if let Some(l) = tok.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={l}");
        } else if let Some(d) = tok.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={d}");
        } else if tok.ends_with(".a") {
            // isa-l and isa-l_crypto, given by path.
            let p = Path::new(tok);
            let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str()))
            else {
                return Err(format!("unexpected library {tok} in spdk_syslibs"));
            };
            let name = name.trim_start_matches("lib").trim_end_matches(".a");
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static:-bundle={name}");
        }
    }
    Ok(())
}

/// Where SPDK's `.pc` files are, from `SPDK_DIR`, or the caller's
/// `PKG_CONFIG_PATH` when it is unset.
fn pkg_config_path() -> Result<String, String> {
    let inherited = std::env::var("PKG_CONFIG_PATH").unwrap_or_default();
    let Some(dir) = std::env::var_os("SPDK_DIR") else {
        return Ok(inherited);
    };
    let dir = PathBuf::from(dir);
    for sub in ["build/lib/pkgconfig", "lib/pkgconfig", "lib64/pkgconfig"] {
        let pc = dir.join(sub);
        if pc.join("spdk_bdev.pc").exists() {
            println!(
                "cargo:rerun-if-changed={}",
                pc.join("spdk_bdev.pc").display()
            );
            return Ok(if inherited.is_empty() {
                pc.display().to_string()
            } else {
                format!("{}:{inherited}", pc.display())
            });
        }
    }
    Err(format!(
        "SPDK_DIR={} has no spdk_bdev.pc under build/lib/pkgconfig or lib/pkgconfig: \
         point SPDK_DIR at a built SPDK source tree or an installed prefix",
        dir.display()
    ))
}

fn pkg_config(path: &str, flags: &[&str], mods: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", path)
        .args(flags)
        .args(mods)
        .output()
        .map_err(|e| format!("running pkg-config: {e} (install pkg-config, and set SPDK_DIR)"))?;
    if !out.status.success() {
        return Err(format!(
            "SPDK not found: `pkg-config {} {}` failed: {}\n\
             set SPDK_DIR to a built SPDK source tree (v24.09 or later) or install prefix",
            flags.join(" "),
            mods.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
