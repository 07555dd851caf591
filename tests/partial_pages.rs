//! Mappings whose last umio page is partly the application's and partly
//! padding, first touched at that last page: every combination of
//! protection, descriptor mode, length (a multiple of the page, one byte
//! short, one 4 KiB page past) and page size (4 KiB, 64 KiB, 2 MiB)
//! completes and reads the file's bytes, then zeros past EOF. Also with
//! the application's own `mprotect` of the mapping's length (rounded to
//! 4 KiB, as `mprotect` takes it), which splits the last umio page into
//! two VMAs: umio must fill it across them (issue 16; it used to refault
//! forever). And faults that make no progress (the kernel's own
//! `MADV_DONTNEED` on a page umio holds) are counted and ended: a clean
//! page is filled again, a dirty one gives SIGBUS.
//!
//! Each scenario runs under a deadline that fails the test instead of
//! hanging it.

mod common;

use std::fs::OpenOptions;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use umio::{Error, MapOptions, Runtime};

const K4: usize = 4096;
/// Long enough for a debug build on a busy machine; a hang is forever.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `f` on a thread: `Err` if it outlives [`DEADLINE`] (the thread is
/// then left blocked in its fault; the caller must leak the mapping and
/// runtime it touches, or unmapping them would crash it, and the process
/// with it, before the failure is reported), its panic if it panics.
fn within_deadline(what: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(()) => {
            t.join().unwrap();
            Ok(())
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => Ok(()),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "{what}: did not complete within {DEADLINE:?} (a fault that never resolves)"
        )),
    }
}

/// Bytes 1..=255, never 0, so that a zero read back is a zero-fill.
fn nonzero(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = common::Rng::new(seed);
    (0..len).map(|_| (rng.next() % 255) as u8 + 1).collect()
}

#[derive(Clone, Copy, Debug)]
struct Case {
    page: usize,
    writable: bool,
    fd_rw: bool,
    len: usize,
    /// The test `mprotect`s `[0, len rounded to 4 KiB)` read-only.
    app_mprotect: bool,
}

fn run_case(rt: &Runtime, c: Case) -> Result<(), String> {
    let what = format!("{c:?}");
    let data = nonzero(c.len, c.len as u64 ^ c.page as u64);
    let (tmp, _) = common::rw_file_with(&data);
    let file = OpenOptions::new()
        .read(true)
        .write(c.fd_rw)
        .open(tmp.path())
        .unwrap();
    let opts = MapOptions::new()
        .len(c.len)
        .page_size(c.page)
        .writable(c.writable);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = match unsafe { rt.map_file(&file, opts) } {
        Err(Error::ReadOnlyStore) if c.writable && !c.fd_rw => return Ok(()),
        Err(e) => panic!("{what}: map failed: {e}"),
        Ok(_) if c.writable && !c.fd_rw => panic!("{what}: writable over a read-only fd"),
        Ok(m) => m,
    };
    let base = map.as_ptr() as usize;
    let len_r = c.len.next_multiple_of(K4);
    if c.app_mprotect {
        // SAFETY: the mapping's own memory, made read-only; nothing
        // writes it until it is made writable again below.
        let r = unsafe { libc::mprotect(base as *mut libc::c_void, len_r, libc::PROT_READ) };
        assert_eq!(r, 0, "{what}");
    }
    let last_page = (c.len - 1) / c.page * c.page;
    let first = map.stats().fills;
    let read = within_deadline(&what, move || {
        // SAFETY: [base + last_page, base + len_r) is mapped readable (the
        // mapping's last 4 KiB pages; past `len`, zero-filled).
        let tail = unsafe {
            std::slice::from_raw_parts((base + last_page) as *const u8, len_r - last_page)
        };
        let n = c.len - last_page;
        assert_eq!(
            &tail[..n],
            &data[last_page..],
            "{c:?}: the last page's bytes"
        );
        assert!(
            tail[n..].iter().all(|&b| b == 0),
            "{c:?}: bytes past EOF in the last 4 KiB page read zero"
        );
    });
    if read.is_err() {
        std::mem::forget(map);
        return read;
    }
    assert!(
        map.stats().fills > first,
        "{what}: the last page was filled by umio"
    );
    assert_eq!(rt.stats().no_progress_faults, 0, "{what}");
    if c.writable {
        if c.app_mprotect {
            let rw = libc::PROT_READ | libc::PROT_WRITE;
            // SAFETY: back to read-write, which the region allows.
            let r = unsafe { libc::mprotect(base as *mut libc::c_void, len_r, rw) };
            assert_eq!(r, 0, "{what}");
        }
        let at = base + c.len - 1;
        let wrote = within_deadline(&format!("{what}: write"), move || {
            // SAFETY: the mapping's last byte, writable.
            unsafe { *(at as *mut u8) = 0 };
        });
        if wrote.is_err() {
            std::mem::forget(map);
            return wrote;
        }
        map.flush().unwrap();
        let mut want = nonzero(c.len, c.len as u64 ^ c.page as u64);
        want[c.len - 1] = 0;
        common::assert_same(&std::fs::read(tmp.path()).unwrap(), &want, &what);
    }
    map.unmap().unwrap();
    assert_eq!(
        std::fs::metadata(tmp.path()).unwrap().len(),
        c.len as u64,
        "{what}"
    );
    Ok(())
}

fn matrix(page: usize) {
    common::log_to_stderr();
    let rt = common::runtime((4 * page as u64).max(64 << 20), page, 2);
    for writable in [false, true] {
        for fd_rw in [false, true] {
            for len in [2 * page, 2 * page - 1, 2 * page + K4] {
                for app_mprotect in [false, true] {
                    let done = run_case(
                        &rt,
                        Case {
                            page,
                            writable,
                            fd_rw,
                            len,
                            app_mprotect,
                        },
                    );
                    if let Err(e) = done {
                        std::mem::forget(rt);
                        panic!("{e}");
                    }
                }
            }
        }
    }
}

#[test]
fn last_pages_complete_with_4k_pages() {
    matrix(4 << 10);
}

#[test]
fn last_pages_complete_with_64k_pages() {
    matrix(64 << 10);
}

#[test]
fn last_pages_complete_with_2m_pages() {
    matrix(2 << 20);
}

/// A page umio holds resident and clean, whose mapping the kernel drops
/// (`madvise(MADV_DONTNEED)` behind umio's back): the next touch is a
/// fault umio resolves with nothing to install, again and again. umio
/// notices, counts it, drops the page and fills it again.
#[test]
fn a_clean_page_dropped_behind_umios_back_is_filled_again() {
    common::log_to_stderr();
    let page = 64 << 10;
    let rt = common::runtime(16 << 20, page, 2);
    let data = nonzero(4 * page, 7);
    let (_tmp, file) = common::file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let map = unsafe { rt.map_file(&file, MapOptions::new().len(4 * page)) }.unwrap();
    let base = map.as_ptr() as usize;
    assert_eq!(map.as_slice()[page + 5], data[page + 5]);
    // SAFETY: the page is umio's, resident and clean; DONTNEED drops its
    // mapping (what this test is about), never the memory around it.
    let r = unsafe {
        libc::madvise(
            (base + page) as *mut libc::c_void,
            page,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(r, 0);
    assert_eq!(rt.stats().no_progress_faults, 0);
    let want = data[page + 100];
    let touched = within_deadline("touch after DONTNEED", move || {
        // SAFETY: within the live mapping.
        let got = unsafe { std::ptr::read_volatile((base + page + 100) as *const u8) };
        assert_eq!(got, want);
    });
    if let Err(e) = touched {
        std::mem::forget(map);
        std::mem::forget(rt);
        panic!("{e}");
    }
    let s = rt.stats();
    assert!(s.no_progress_faults >= 1, "{s:?}");
    assert!(map.stats().no_progress_faults >= 1);
    common::assert_same(map.as_slice(), &data, "the whole mapping after the refill");
}

const DIRTY_CHILD: &str = "UMIO_DIRTY_DROPPED_CHILD";

/// Run by `a_dirty_page_dropped_behind_umios_back_gives_sigbus` in a child.
#[test]
#[ignore = "run in a child process by a_dirty_page_dropped_behind_umios_back_gives_sigbus"]
fn dirty_dropped_child() {
    if std::env::var_os(DIRTY_CHILD).is_none() {
        return;
    }
    common::log_to_stderr();
    let page = 64 << 10;
    let rt = common::runtime(16 << 20, page, 2);
    let data = nonzero(4 * page, 9);
    let (_tmp, file) = common::rw_file_with(&data);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut map = unsafe { rt.map_file(&file, MapOptions::new().len(4 * page).writable(true)) }
        .unwrap()
        .into_mut()
        .unwrap();
    map.as_mut_slice()[page + 5] = 0;
    let base = map.as_ptr() as usize;
    // SAFETY: as in the clean case; the page's change is lost.
    let r = unsafe {
        libc::madvise(
            (base + page) as *mut libc::c_void,
            page,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(r, 0);
    println!("touching");
    // SAFETY: within the live mapping.
    let got = unsafe { std::ptr::read_volatile((base + page + 5) as *const u8) };
    println!("read {got} without a signal");
    std::process::exit(3);
}

#[test]
fn a_dirty_page_dropped_behind_umios_back_gives_sigbus() {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "dirty_dropped_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIRTY_CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the child hung (a fault that never resolves); stdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(stdout.contains("touching"), "stdout: {stdout}");
    assert!(
        stderr.contains("changes are lost") && stderr.contains("SIGBUS"),
        "the reason is logged; stderr: {stderr}"
    );
}
