//! Cold 4 KiB faults on umio mappings over an SPDK malloc bdev, beside the
//! same faults over a tmpfs file read with `pread` (`FileStore`) and with
//! io_uring (`UringStore`): what a fault costs, how much of it is the
//! store's read, and what is left of a fault when the device costs under
//! a microsecond (Aquila's SPDK-NVMe versus host-NVMe comparison, made in
//! user space, with a memory-backed bdev standing in for the device).
//!
//! `SPDK_DIR=... cargo run --release --features spdk --example spdk_fault [faults]`
//! (root: userfaultfd in full mode; DPDK memory without hugepages unless
//! enough are free; a few seconds).
//!
//! Each fault is timed with the time stamp counter from the faulting
//! thread, one page in each 64 KiB touched so that nothing is prefetched,
//! and broken into its steps by umio's fault trace, as
//! `examples/fault_path.rs` does. The rows take turns in rounds, so that
//! each sees the same machine. A second table times the stores' own
//! 4 KiB reads at queue depth 1, without faults: the device's share.

use umio_bench::bench;
use umio_bench::cli::{self, Arg, value_parser};
use umio_bench::fault_path;

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use bench::{Data, MIB, PAGE, Result, mean, quantile, rdtsc};
use fault_path::{PathRow, STRIDE};
use umio::backends::{FileStore, SpdkEnv, SpdkEnvOptions, SpdkStore, UringOptions, UringStore};
use umio::{MapOptions, PrefetchKind, Runtime, Store};

/// Data size (MiB): the file, and the malloc bdev.
const DATA_MIB: usize = 256;
/// DPDK memory (MiB): the bdev, and SPDK's own buffer pools (about 200 MiB
/// with its defaults).
const SPDK_MIB: u32 = DATA_MIB as u32 + 512;
/// Rounds the rows take turns in.
const ROUNDS: usize = 5;
/// Faults per row handled before timing (code and tables warm).
const WARMUP: usize = 16;

/// The stores compared.
struct Stores {
    file: Arc<dyn Store>,
    uring: Arc<dyn Store>,
    spdk: Arc<dyn Store>,
}

fn main() {
    let m = cli::command(
        "spdk_fault",
        "Cold 4 KiB faults on umio mappings over an SPDK malloc bdev, beside the same faults \
         over a tmpfs file read with pread and with io_uring.",
    )
    .arg(
        Arg::new("faults")
            .value_name("FAULTS")
            .default_value("2000")
            .value_parser(value_parser!(usize))
            .help("faults measured per row"),
    )
    .get_matches();
    let faults: usize = cli::get(&m, "faults");
    if let Err(e) = run(faults) {
        eprintln!("spdk_fault: {e}");
        std::process::exit(1);
    }
}

fn run(faults: usize) -> Result<()> {
    let data = Data::new(DATA_MIB, false)?;
    let faults = faults.min(data.len / STRIDE - WARMUP - 1);
    let config = format!(
        r#"{{"subsystems": [{{"subsystem": "bdev", "config": [{{"method": "bdev_malloc_create",
            "params": {{"name": "Malloc0", "num_blocks": {}, "block_size": 4096}}}}]}}]}}"#,
        data.len / 4096
    );
    // SPDK's polling thread gets a CPU of its own, the last one; this
    // thread, and with it the threads it starts (umio's fillers), the
    // others. Without it the busy poller shares a CPU with a filler
    // half of the time, at random.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = cpus >= 2 && std::env::var_os("SPDK_FAULT_NO_PIN").is_none();
    let mut opts = SpdkEnvOptions::new().mem_mib(SPDK_MIB).config_json(config);
    if pin {
        opts = opts.core(cpus as u32 - 1);
        pin_to(0..cpus - 1)?;
    }
    eprintln!("starting SPDK (malloc bdev of {DATA_MIB} MiB)");
    let env = SpdkEnv::start(opts)?;
    let spdk = Arc::new(SpdkStore::open(env, "Malloc0", true)?);
    // The bdev gets the file's bytes, so that every row reads the same.
    let src = std::fs::read(data.shm.path())?;
    for (i, chunk) in src.chunks(4 * MIB).enumerate() {
        spdk.write_at((i * 4 * MIB) as u64, chunk)?;
    }
    drop(src);
    let f = File::open(data.shm.path())?;
    let stores = Stores {
        file: Arc::new(FileStore::new(&f)?),
        uring: Arc::new(UringStore::new(&f, UringOptions::new())?),
        spdk,
    };
    let tsc_hz = bench::tsc_hz(200);
    let us = |c: f64| c / tsc_hz * 1e6;

    // (name, store, whether the SPDK poller polls without ever sleeping)
    let rows: [(&str, &Arc<dyn Store>, Option<bool>); 4] = [
        ("FileStore: pread from the tmpfs file", &stores.file, None),
        (
            "UringStore: io_uring read of the tmpfs file",
            &stores.uring,
            None,
        ),
        (
            "SpdkStore: malloc bdev, poller always polling (default)",
            &stores.spdk,
            Some(true),
        ),
        (
            "SpdkStore: malloc bdev, poller sleeping after 200 us idle",
            &stores.spdk,
            Some(false),
        ),
    ];
    let mut measured: Vec<PathRow> = rows
        .iter()
        .map(|(n, _, _)| PathRow {
            name: n.to_string(),
            cycles: Vec::new(),
            phases: Vec::new(),
        })
        .collect();
    // Each fault's store read, per row.
    let mut reads: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    let per_round = faults.div_ceil(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("faults, round {round} of {ROUNDS}");
        for (((_, store, poll), acc), rd) in rows.iter().zip(&mut measured).zip(&mut reads) {
            set_polling(env, *poll);
            let (r, read) = fault_row(store, data.len, per_round)?;
            rd.extend(read);
            acc.cycles.extend(r.cycles);
            if acc.phases.is_empty() {
                acc.phases = r.phases.iter().map(|&(k, _)| (k, 0.0)).collect();
            }
            for (mine, (_, c)) in acc.phases.iter_mut().zip(r.phases) {
                mine.1 += c / ROUNDS as f64;
            }
        }
    }
    for r in &mut measured {
        r.cycles.sort_by(f64::total_cmp);
    }
    for rd in &mut reads {
        rd.sort_by(f64::total_cmp);
    }

    eprintln!("store reads at queue depth 1");
    let mut direct = Vec::new();
    for (name, store, poll) in &rows {
        set_polling(env, *poll);
        direct.push((name, store_reads(store, data.len, faults)?));
    }
    set_polling(env, Some(true));

    println!(
        "Time stamp counter {:.3} GHz. {} cold 4 KiB faults per row (one page per 64 KiB, \
         one thread, umio defaults: {} fillers, no prefetch), in {ROUNDS} alternating rounds; \
         {DATA_MIB} MiB of data. SPDK: malloc bdev, 4 KiB blocks, DPDK {}. {}\n",
        tsc_hz / 1e9,
        faults,
        umio::default_fillers(),
        if env.hugepages() {
            "on hugepages"
        } else {
            "without hugepages (--no-huge)"
        },
        if pin {
            format!(
                "SPDK's polling thread on CPU {}, this thread and umio's on CPUs 0 to {} \
                 (SPDK_FAULT_NO_PIN=1: no pinning, the poller on CPU 0).",
                cpus - 1,
                cpus - 2
            )
        } else {
            "No pinning: SPDK's polling thread on CPU 0, the others anywhere.".to_string()
        }
    );
    println!(
        "| store | fault: median us | p90 us | mean us | store read in the fault: median us | mean us | \
         rest of the fault (median fault - median read) us |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (r, rd) in measured.iter().zip(&reads) {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r.name,
            us(r.median()),
            us(quantile(&r.cycles, 0.9)),
            us(r.mean()),
            us(quantile(rd, 0.5)),
            us(mean(rd)),
            us(r.median() - quantile(rd, 0.5))
        );
    }
    println!(
        "\n| store, 4 KiB `read_at` at queue depth 1, no fault | median us | mean us | p90 us |"
    );
    println!("|---|---:|---:|---:|");
    for (name, v) in &direct {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} |",
            us(quantile(v, 0.5)),
            us(mean(v)),
            us(quantile(v, 0.9))
        );
    }
    for r in &measured {
        println!("\n**{}** (mean per phase)\n", r.name);
        println!("| phase | us | share |");
        println!("|---|---:|---:|");
        let total: f64 = r.phases.iter().map(|p| p.1).sum();
        for (k, c) in &r.phases {
            println!("| {k} | {:.2} | {:.0}% |", us(*c), 100.0 * c / total);
        }
        println!("| total | {:.2} | |", us(total));
    }
    Ok(())
}

/// Always polling (`Some(true)`, the default), sleeping after 200 us idle
/// (`Some(false)`), or unchanged (`None`: a row without SPDK).
fn set_polling(env: &SpdkEnv, poll: Option<bool>) {
    match poll {
        Some(true) => env.set_park_after(None),
        Some(false) => env.set_park_after(Some(Duration::from_micros(200))),
        None => {}
    }
}

/// Pins the calling thread (and the threads it starts later) to `cpus`.
fn pin_to(cpus: std::ops::Range<usize>) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // for CPUs below CPU_SETSIZE (the machine's count is far below).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set)
    };
    if rc != 0 {
        return Err(format!("sched_setaffinity: {}", std::io::Error::last_os_error()).into());
    }
    Ok(())
}

/// `faults` cold faults on a fresh mapping of `store`, with umio's trace
/// of each; and the cycles of each fault's store read.
fn fault_row(store: &Arc<dyn Store>, len: usize, faults: usize) -> Result<(PathRow, Vec<f64>)> {
    let rt = Runtime::builder()
        .cache_bytes(len as u64 + (16 << 20))
        .page_size(PAGE)
        .prefetch(PrefetchKind::None)
        .trace_faults(true)
        .build()?;
    // SAFETY: nothing else writes the bdev while the benchmark maps it.
    let map = unsafe { rt.map(MapOptions::new().len(len).store(store.clone())) }?;
    fault_path::traced_faults(&rt, &map, faults, fault_path::WARMUP, "store read")
}

/// Cycles of `n` 4 KiB reads at queue depth 1, one per 64 KiB, sorted.
fn store_reads(store: &Arc<dyn Store>, len: usize, n: usize) -> Result<Vec<f64>> {
    let mut page = vec![0u8; PAGE];
    let mut v = Vec::with_capacity(n);
    for i in 0..n + WARMUP {
        let off = ((i * STRIDE) % len) as u64;
        let t0 = rdtsc();
        let got = store.read_at(off, &mut page)?;
        let t1 = rdtsc();
        if got != PAGE {
            return Err(format!("{}: short read at {off}", store.name()).into());
        }
        if i >= WARMUP {
            v.push((t1 - t0) as f64);
        }
    }
    v.sort_by(f64::total_cmp);
    Ok(v)
}
