//! Cold-fault latency, umio beside Linux `mmap`: the time to read a unit
//! of 4 KiB, 64 KiB or 2 MiB (one word per 4 KiB) that no one has touched
//! yet, from a 64 MiB file on `/dev/shm` (tmpfs: its pages are in memory,
//! so this is the software path). umio fills the unit with one fault
//! (page size = unit, no read-ahead); Linux faults each 4 KiB page of it
//! (mapping up to 16 cached pages per fault). Units are read in a shuffled
//! order; every sample maps the file afresh.
//!
//! `cargo bench --bench fault_latency` (root: userfaultfd in full mode; about
//! half a minute). `examples/fault_path.rs` breaks one fault into steps.

use umio_bench::bench;

use std::time::Duration;

use bench::{Data, MIB, Region, UmioSetup, read_units, shuffled};
use criterion::{Criterion, SamplingMode, Throughput};

/// Times `iters` cold units, mapping afresh whenever a mapping runs out.
fn cold_units(iters: u64, unit: usize, data: &Data, map: &dyn Fn() -> Region) -> Duration {
    let per_map = data.len / unit;
    let mut left = iters as usize;
    let mut total = Duration::ZERO;
    let mut seed = 1;
    while left > 0 {
        let n = left.min(per_map);
        let r = map();
        let order = &shuffled(per_map, seed)[..n];
        total += read_units(&r, unit, order);
        left -= n;
        seed += 1;
    }
    total
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let data = match Data::new(64, false) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fault_latency: {e}");
            std::process::exit(1);
        }
    };
    for unit in [4 << 10, 64 << 10, 2 << 20] {
        let mut g = c.benchmark_group(format!("cold_fault/{}KiB", unit >> 10));
        g.throughput(Throughput::Bytes(unit as u64));
        g.sampling_mode(SamplingMode::Flat);
        let setup = UmioSetup::new(data.len + 16 * MIB, unit);
        g.bench_function("umio", |b| {
            b.iter_custom(|iters| {
                cold_units(iters, unit, &data, &|| {
                    Region::umio_shm(&data, setup).expect("umio mapping")
                })
            })
        });
        g.bench_function("mmap", |b| {
            b.iter_custom(|iters| {
                cold_units(iters, unit, &data, &|| {
                    Region::kernel_shm(&data, libc::MADV_NORMAL, false).expect("mmap")
                })
            })
        });
        g.finish();
    }
    c.final_summary();
}
