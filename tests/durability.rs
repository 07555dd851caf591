//! Durability: what `flush` returned for survives the process being killed
//! with SIGKILL right after, trial after trial.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};

use umio::{MapOptions, Runtime};

mod common;
use common::Rng;

const CHILD_ENV: &str = "UMIO_TEST_DURABILITY_CHILD";
const LEN: usize = 1 << 20;
const TRIALS: u64 = 100;

/// The child: writes the trial's pattern over random pages, flushes, says
/// so, then keeps writing other bytes (never flushed) until it is killed.
#[test]
fn durability_child_body() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (path, trial) = spec.split_once(':').unwrap();
    let trial: u64 = trial.parse().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let rt = Runtime::builder()
        .cache_bytes(256 << 10)
        .page_size(4096)
        .fillers(1)
        .build()
        .unwrap();
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().len(LEN).writable(true)) }.unwrap();
    let p = map.as_ptr();
    for (off, byte) in writes(trial) {
        // SAFETY: off < LEN; the mapping is writable and lives.
        unsafe { p.add(off).write_volatile(byte) };
    }
    map.flush().unwrap();
    println!("FLUSHED");
    std::io::stdout().flush().unwrap();
    let mut rng = Rng::new(trial + 1_000_000);
    loop {
        // SAFETY: as above.
        unsafe { p.add(rng.below(LEN)).write_volatile(0xEE) };
    }
}

/// The bytes trial `t` writes before its flush: 200 positions, a value
/// that differs from the file's zeros.
fn writes(trial: u64) -> Vec<(usize, u8)> {
    let mut rng = Rng::new(trial);
    (0..200)
        .map(|_| (rng.below(LEN), 1 + rng.below(200) as u8))
        .collect()
}

#[test]
fn flushed_writes_survive_sigkill() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut lost = 0usize;
    for trial in 0..TRIALS {
        let path = dir.path().join(format!("t{trial}"));
        std::fs::write(&path, vec![0u8; LEN]).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "durability_child_body",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}:{trial}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let flushed = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("FLUSHED"));
        // SIGKILL the moment flush has returned.
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(flushed, "trial {trial}: the child never flushed ({status})");
        let file = std::fs::File::open(&path).unwrap();
        let mut disk = vec![0u8; LEN];
        file.read_exact_at(&mut disk, 0).unwrap();
        // Later writes to the same offset win; bytes written after the
        // flush (0xEE) may or may not have reached the file.
        let mut want = std::collections::HashMap::new();
        for (off, byte) in writes(trial) {
            want.insert(off, byte);
        }
        lost += want
            .iter()
            .filter(|&(&off, &byte)| disk[off] != byte && disk[off] != 0xEE)
            .count();
    }
    assert_eq!(lost, 0, "bytes lost over {TRIALS} trials");
}
