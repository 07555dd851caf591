//! `umio_map`'s `"rados:..."` backend from C (`tests/c/rados.c`), against a
//! one-monitor, one-OSD memstore cluster started with
//! `scripts/rados-cluster.sh` under a temporary directory. Needs the
//! `rados` feature: `cargo test -p umio-ffi --features rados --test rados`.
//! Without Ceph's daemons installed it prints why it did not run.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::lib_dir;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn c_maps_writes_and_rereads_a_rados_object_set() {
    let script = repo_root().join("scripts/rados-cluster.sh");
    if let Some(missing) = ["ceph-mon", "ceph-osd", "monmaptool", "rados"]
        .into_iter()
        .find(|p| !installed(p))
    {
        eprintln!(
            "SKIPPED: {missing} is not installed; this test runs a cluster with {}, which \
             needs `apt-get install -y --no-install-recommends ceph-mon ceph-osd librados-dev`",
            script.display()
        );
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("umio-ffi-rados-")
        .tempdir()
        .unwrap()
        .keep();
    let mut runner = Command::new(&script)
        .args(["run", dir.to_str().unwrap(), "memstore"])
        .env("RADOS_CLUSTER_WATCH_PID", std::process::id().to_string())
        .env("RADOS_CLUSTER_REMOVE_DIR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(runner.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let conf = PathBuf::from(line.trim());
    assert!(
        conf.is_file(),
        "the cluster in {} did not start",
        dir.display()
    );

    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("rados");
    let lib = lib_dir();
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg("-I")
        .arg(repo_root().join("tests/c"))
        .arg(repo_root().join("tests/c/rados.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-lumio")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-pthread")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "tests/c/rados.c does not compile:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .env("UMIO_RADOS_CONF", &conf)
        .env("UMIO_RADOS_PREFIX", format!("ffi/{}", std::process::id()))
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    // SAFETY: signals our own child, not yet reaped.
    unsafe { libc::kill(runner.id() as i32, libc::SIGTERM) };
    let _ = runner.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "tests/c/rados.c: {}\n{stdout}{stderr}",
        out.status
    );
    assert!(
        stdout.starts_with("rados: wrote and read back 1049576 bytes over 17 objects"),
        "{stdout}"
    );
}
