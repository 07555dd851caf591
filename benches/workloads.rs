//! umio beside Linux `mmap` on the same file with the same memory budget:
//!
//! - `resident_scan`: every word of a 32 MiB file already resident (hits
//!   cost what memory costs: both are plain loads).
//! - `random_4k`: random 4 KiB reads of a 128 MiB file with a 32 MiB
//!   budget (a quarter), 1 and 2 threads, in steady state; Linux `mmap`
//!   with `MADV_RANDOM` (its best setting here) and with its default.
//! - `seq_scan`: a cold pass over the 128 MiB file with 32 MiB, umio with
//!   4 KiB pages and read-ahead, and with 2 MiB pages; Linux with
//!   `MADV_SEQUENTIAL` and its default.
//! - `write_flush`: write one word in each 4 KiB of 16 MiB, then make it
//!   durable (`flush`; `msync` + `fdatasync`).
//!
//! Out-of-core runs read a file on ext4 on a loop device over `/dev/shm`
//! (a fast device): umio with `O_DIRECT` (its cache is its only cache),
//! Linux through its page cache with the whole process in a cgroup v1
//! memory limit of the same size. Without root or cgroup v1 the bounded
//! `mmap` runs are skipped (the reason is printed) and umio reads tmpfs;
//! see `crates/bench/src/bench.rs`.
//!
//! `cargo bench --bench workloads` (root; a few minutes).

use umio_bench::bench;

use std::cell::Cell;
use std::time::Duration;

use bench::{
    Data, MIB, Region, UmioSetup, bounded, random_reads, scan_pages, scan_words, write_then_flush,
};
use criterion::{Criterion, SamplingMode, Throughput};

const FILE_MIB: usize = 128;
const BUDGET: usize = FILE_MIB * MIB / 4;
const RESIDENT: usize = 32 * MIB;
const DIRTY: usize = 16 * MIB;

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    if let Err(e) = run(&mut c) {
        eprintln!("workloads: {e}");
        std::process::exit(1);
    }
    c.final_summary();
}

fn run(c: &mut Criterion) -> bench::Result<()> {
    resident_scan(c)?;
    let data = Data::new(FILE_MIB, true)?;
    println!("out-of-core file: {} MiB on {}", FILE_MIB, data.device());
    if let Some(why) = &data.no_ext4 {
        println!("skipped: Linux mmap under a cgroup limit ({why})");
    }
    random_4k(c, &data)?;
    seq_scan(c, &data)?;
    write_flush(c, &data)?;
    Ok(())
}

fn resident_scan(c: &mut Criterion) -> bench::Result<()> {
    let data = Data::new(RESIDENT / MIB, false)?;
    let umio = Region::umio_shm(&data, UmioSetup::new(2 * RESIDENT, 64 << 10))?;
    let kernel = Region::kernel_shm(&data, libc::MADV_NORMAL, false)?;
    let mut g = c.benchmark_group("resident_scan");
    g.throughput(Throughput::Bytes(RESIDENT as u64));
    for (name, r) in [("umio", &umio), ("mmap", &kernel)] {
        scan_words(r, RESIDENT); // make it resident
        g.bench_function(name, |b| {
            b.iter_custom(|n| (0..n).map(|_| scan_words(r, RESIDENT)).sum())
        });
    }
    g.finish();
    Ok(())
}

fn random_4k(c: &mut Criterion, data: &Data) -> bench::Result<()> {
    let seed = Cell::new(1u64);
    let next = || {
        seed.set(seed.get() + 1);
        seed.get()
    };
    let mut g = c.benchmark_group("random_4k");
    g.throughput(Throughput::Elements(1));
    let umio = Region::umio_device(data, UmioSetup::new(BUDGET, 4 << 10))?;
    random_reads(&umio, 2 * BUDGET / 4096, 1, 0); // fill the cache
    for threads in [1, 2] {
        g.bench_function(format!("umio/{threads}t"), |b| {
            b.iter_custom(|n| random_reads(&umio, n as usize, threads, next()))
        });
    }
    drop(umio);
    if data.ext4_path().is_some() {
        let out = bounded(BUDGET, || -> bench::Result<()> {
            for (adv, name) in [
                (libc::MADV_RANDOM, "random"),
                (libc::MADV_NORMAL, "default"),
            ] {
                let k = Region::kernel_device(data, adv, false)?.ok_or("no ext4 copy")?;
                random_reads(&k, 2 * BUDGET / 4096, 1, 0);
                for threads in [1, 2] {
                    g.bench_function(format!("mmap_{name}/{threads}t"), |b| {
                        b.iter_custom(|n| random_reads(&k, n as usize, threads, next()))
                    });
                }
            }
            Ok(())
        });
        match out {
            Ok(r) => r?,
            Err(why) => println!("skipped: Linux mmap under a cgroup limit ({why})"),
        }
    }
    g.finish();
    Ok(())
}

fn seq_scan(c: &mut Criterion, data: &Data) -> bench::Result<()> {
    let mut g = c.benchmark_group("seq_scan");
    g.throughput(Throughput::Bytes(data.len as u64));
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    let scan = |make: &dyn Fn() -> Region, n: u64| -> Duration {
        (0..n).map(|_| scan_pages(&make(), data.len).0).sum()
    };
    let setups = [
        (
            "umio_4k_readahead",
            UmioSetup::new(BUDGET, 4 << 10).readahead(2 << 20),
        ),
        ("umio_2m", UmioSetup::new(BUDGET, 2 << 20)),
    ];
    for (name, s) in setups {
        g.bench_function(name, |b| {
            b.iter_custom(|n| scan(&|| Region::umio_device(data, s).expect("umio"), n))
        });
    }
    if data.ext4_path().is_some() {
        let out = bounded(BUDGET, || {
            for (adv, name) in [
                (libc::MADV_SEQUENTIAL, "mmap_sequential"),
                (libc::MADV_NORMAL, "mmap_default"),
            ] {
                g.bench_function(name, |b| {
                    b.iter_custom(|n| {
                        scan(
                            &|| {
                                Region::kernel_device(data, adv, false)
                                    .expect("mmap")
                                    .expect("ext4 copy")
                            },
                            n,
                        )
                    })
                });
            }
        });
        if let Err(why) = out {
            println!("skipped: Linux mmap under a cgroup limit ({why})");
        }
    }
    g.finish();
    Ok(())
}

fn write_flush(c: &mut Criterion, data: &Data) -> bench::Result<()> {
    let mut g = c.benchmark_group("write_flush");
    g.throughput(Throughput::Bytes(DIRTY as u64));
    g.sampling_mode(SamplingMode::Flat);
    let umio = Region::umio_device(data, UmioSetup::new(BUDGET, 64 << 10).writable())?;
    let kernel = match data.ext4_path() {
        Some(_) => Region::kernel_device(data, libc::MADV_NORMAL, true)?,
        None => Some(Region::kernel_shm(data, libc::MADV_NORMAL, true)?),
    };
    let mut v = 0u64;
    for (name, r) in [("umio", Some(&umio)), ("mmap", kernel.as_ref())] {
        let Some(r) = r else { continue };
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                (0..n)
                    .map(|_| {
                        v += 1;
                        let (w, f) = write_then_flush(r, DIRTY, v).expect("write + flush");
                        w + f
                    })
                    .sum()
            })
        });
    }
    g.finish();
    Ok(())
}
