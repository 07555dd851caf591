//! Fillers pinned to CPUs (`Builder::pin_fillers`, `UMIO_PIN_FILLERS`):
//! which fillers are pinned where, by the default (measured beside
//! sleeping and polling) and when asked, as the runtime reports it and as
//! the kernel has it (`/proc/self/task/*/status`); and that fillers pinned,
//! each woken by every fault, and fillers switching between pinned and
//! unpinned, serve faults from threads on every CPU, many at once, with
//! the right bytes.
//!
//! The tests run one at a time (`SERIAL`): each reads the affinity of the
//! process's `umio-filler-N` threads, which another test's runtime would
//! also have.

mod common;

use std::sync::Mutex;

use umio::{FaultService, MapOptions, PrefetchKind, Runtime};

use common::{assert_same, random_bytes, rw_file_with};

static SERIAL: Mutex<()> = Mutex::new(());

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is an empty set; the call writes it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: as in `allowed_cpus`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// `Cpus_allowed_list` of each live `umio-filler-N` thread, by N.
fn fillers_in_proc() -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let status = match std::fs::read_to_string(t.path().join("status")) {
            Ok(s) => s,
            Err(_) => continue, // exited meanwhile
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        let Some(n) = field("Name:").and_then(|n| {
            n.strip_prefix("umio-filler-")
                .and_then(|i| i.parse::<usize>().ok())
        }) else {
            continue;
        };
        out.push((n, field("Cpus_allowed_list:").unwrap()));
    }
    out.sort();
    out
}

/// The kernel's list syntax for `cpus` (`0-1`, `3`, `0,2`), as
/// `Cpus_allowed_list` prints it.
fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn runtime(fillers: usize, pin_fillers: Option<bool>) -> Runtime {
    let mut b = Runtime::builder()
        .cache_bytes(1 << 20)
        .page_size(4096)
        .fillers(fillers)
        .prefetch(PrefetchKind::None)
        .fault_service(FaultService::Fillers);
    if let Some(on) = pin_fillers {
        b = b.pin_fillers(on);
    }
    b.build().unwrap()
}

/// Maps 4 MiB of random bytes (four times the cache) and has `threads`
/// threads, thread k pinned to CPU `cpus[k % cpus.len()]`, read every page
/// of their share and compare it: misses from every CPU at once, served
/// by fillers each woken by every fault.
fn read_from_every_cpu(rt: &Runtime, cpus: &[usize], threads: usize) {
    let data = random_bytes(4 << 20, 7);
    let (_tmp, f) = rw_file_with(&data);
    // SAFETY: nothing changes the file while it is mapped.
    let map = unsafe { rt.map_file(&f, MapOptions::new()) }.unwrap();
    let pages = data.len() / 4096;
    std::thread::scope(|s| {
        for k in 0..threads {
            let (map, data, cpu) = (&map, &data, cpus[k % cpus.len()]);
            s.spawn(move || {
                pin(cpu);
                let mut got = vec![0u8; 4096];
                for round in 0..2 {
                    for p in (k..pages).step_by(threads) {
                        got.copy_from_slice(&map[p * 4096..(p + 1) * 4096]);
                        assert_same(
                            &got,
                            &data[p * 4096..(p + 1) * 4096],
                            &format!("page {p}, thread {k} on CPU {cpu}, round {round}"),
                        );
                    }
                }
            });
        }
    });
    let s = rt.stats();
    assert!(s.store_reads as usize >= pages, "{s}");
}

/// One filler more than the CPUs (as the default), pinned for good or
/// never: after reads from every CPU, the runtime and the kernel say each
/// filler runs on its own CPU (the last on all of them) or on all.
fn fillers_pinned_or_not(pin: bool) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cpus = allowed_cpus();
    let rt = runtime(cpus.len() + 1, Some(pin));
    assert_eq!(rt.config().pin_fillers, Some(pin));
    read_from_every_cpu(&rt, &cpus, 2 * cpus.len() + 1);
    let want: Vec<Option<usize>> = (0..=cpus.len())
        .map(|i| if pin { cpus.get(i).copied() } else { None })
        .collect();
    assert_eq!(rt.filler_cpus(), want);
    let seen = fillers_in_proc();
    assert_eq!(seen.len(), cpus.len() + 1, "{seen:?}");
    for (i, list) in &seen {
        let expect = match want[*i] {
            Some(c) => c.to_string(),
            None => cpu_list(&cpus),
        };
        assert_eq!(list, &expect, "filler {i}: {seen:?}");
    }
}

#[test]
fn pinned_fillers_take_one_cpu_each_and_serve_every_cpu() {
    fillers_pinned_or_not(true);
}

#[test]
fn unpinned_fillers_may_run_anywhere_and_serve_every_cpu() {
    fillers_pinned_or_not(false);
}

/// The default measures pinning where there is a filler for each of at
/// least two CPUs the mapping thread may run on; not with fewer fillers,
/// nor for a thread held to one CPU. (`UMIO_PIN_FILLERS`, where set,
/// decides instead: checked as what it says.)
#[test]
fn the_default_pins_only_with_a_filler_for_every_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cpus = allowed_cpus();
    let forced = std::env::var("UMIO_PIN_FILLERS")
        .ok()
        .map(|v| v.trim() == "1");
    let check = |cpus: &[usize], fillers: usize, eligible: bool| {
        let rt = runtime(fillers, None);
        assert_eq!(rt.config().pin_fillers, forced);
        read_from_every_cpu(&rt, cpus, cpus.len().max(2));
        let pinned = forced.unwrap_or(eligible);
        let want: Vec<Option<usize>> = (0..fillers)
            .map(|i| if pinned { cpus.get(i).copied() } else { None })
            .collect();
        assert_eq!(rt.filler_cpus(), want, "{fillers} fillers on CPUs {cpus:?}");
        // Measured: the tuner's first windows run each way twice (32
        // faults a window; the reads make thousands of faults), switching
        // the fillers between pinned and unpinned under the faults.
        let s = rt.stats();
        if forced.is_none() && eligible {
            assert!(s.filler_pinned_windows >= 2, "{s:?}");
        } else {
            assert_eq!(s.filler_pinned_windows, 0, "{s:?}");
        }
    };
    check(&cpus, cpus.len() + 1, cpus.len() >= 2);
    if cpus.len() >= 2 {
        check(&cpus, cpus.len() - 1, false);
    }
    // A runtime started by a thread held to one CPU: nothing to measure.
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpus[0]);
            check(&cpus[..1], 3, false);
        });
    });
}
