//! The RADOS store on a local one-OSD cluster: what requests in flight and
//! prefetch buy when every read is a network round trip.
//!
//! For each object store (memstore: the OSD keeps objects in memory;
//! bluestore: on a plain file), on a cluster started with
//! `scripts/rados-cluster.sh` (or the one `--conf` names):
//! 1. store reads of random 4 KiB blocks, one at a time (`read_at`) and 16
//!    per `submit` (16 in flight);
//! 2. fills through a mapping: random 4 KiB faults from one thread (each
//!    fault one read: 1 in flight), and a vectored prefetch of random
//!    4 KiB pages on a store of queue depth 16 (16 in flight);
//! 3. a sequential scan of the whole set through a cache a quarter of its
//!    size, with umio's sequential read-ahead (2 MiB window) and without.
//!
//! ```text
//! cargo run --release --features rados --example rados -- \
//!     [--objectstore memstore|bluestore|both] [--conf CEPH_CONF] [--size MiB] [--faults N]
//! ```

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use umio::backends::{IoRequest, RadosOptions, RadosStore};
use umio::{MapOptions, PrefetchKind, Runtime, Store};
use umio_bench::cli::{self, value_parser};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rados-cluster.sh");
const PAGE: usize = 4096;

struct Args {
    objectstores: Vec<String>,
    conf: Option<PathBuf>,
    size: usize,
    faults: usize,
}

fn args() -> Result<Args> {
    let m = cli::command(
        "rados",
        "The RADOS store on a local one-OSD cluster: what requests in flight and prefetch buy \
         when every read is a network round trip.",
    )
    .arg(
        cli::opt("objectstore", "KIND", "both", "the OSD's object store").value_parser([
            "memstore",
            "bluestore",
            "both",
        ]),
    )
    .arg(
        cli::opt_none(
            "conf",
            "CEPH_CONF",
            "a running cluster's ceph.conf (default: start one)",
        )
        .value_parser(value_parser!(PathBuf)),
    )
    .arg(cli::opt("size", "MiB", "64", "size of the object set").value_parser(value_parser!(usize)))
    .arg(
        cli::opt("faults", "N", "2000", "random faults per run").value_parser(value_parser!(usize)),
    )
    .get_matches();
    let a = Args {
        objectstores: match cli::get::<String>(&m, "objectstore").as_str() {
            "both" => vec!["memstore".into(), "bluestore".into()],
            s => vec![s.into()],
        },
        conf: cli::get_opt(&m, "conf"),
        size: cli::get::<usize>(&m, "size") << 20,
        faults: cli::get(&m, "faults"),
    };
    if a.size < 1 << 20 || a.faults == 0 {
        return Err("--size is at least 1 (MiB) and --faults at least 1".into());
    }
    Ok(a)
}

/// A cluster run by the script as a child; stopped on drop.
struct Cluster {
    runner: Child,
    conf: PathBuf,
}

impl Cluster {
    fn start(objectstore: &str) -> Result<Cluster> {
        let dir = std::env::temp_dir().join(format!(
            "umio-rados-bench-{}-{objectstore}",
            std::process::id()
        ));
        let mut runner = Command::new(SCRIPT)
            .args(["run", dir.to_str().ok_or("temp dir")?, objectstore])
            .env("RADOS_CLUSTER_WATCH_PID", std::process::id().to_string())
            .env("RADOS_CLUSTER_REMOVE_DIR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{SCRIPT}: {e}"))?;
        let mut line = String::new();
        BufReader::new(runner.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        let conf = PathBuf::from(line.trim());
        if !conf.is_file() {
            return Err(format!("{SCRIPT} run failed; see {}", dir.display()).into());
        }
        Ok(Cluster { runner, conf })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: signals our own child, not yet reaped.
        unsafe { libc::kill(self.runner.id() as i32, libc::SIGTERM) };
        let _ = self.runner.wait();
    }
}

/// xorshift64 for offsets and data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// `n` distinct random page numbers below `pages`.
fn random_pages(n: usize, pages: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng(seed | 1);
    let mut seen = vec![false; pages];
    let mut v = Vec::with_capacity(n);
    while v.len() < n.min(pages) {
        let p = (rng.next() % pages as u64) as usize;
        if !std::mem::replace(&mut seen[p], true) {
            v.push(p);
        }
    }
    v
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn mib_per_sec(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

fn runtime(cache: u64, page: usize) -> Result<Runtime> {
    Ok(Runtime::builder()
        .cache_bytes(cache)
        .page_size(page)
        .fillers(2)
        .build()?)
}

fn bench(objectstore: &str, conf: &Path, a: &Args) -> Result<Vec<(String, String)>> {
    let mut rows = Vec::new();
    let prefix = format!("bench/{}-{objectstore}", std::process::id());
    let opts = RadosOptions::new("umio", &prefix).conf(conf);
    let mut data = vec![0u8; a.size];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for c in data.chunks_mut(8) {
        c.copy_from_slice(&rng.next().to_le_bytes()[..c.len()]);
    }
    let store = Arc::new(RadosStore::create(&opts, a.size as u64)?);
    let t = Instant::now();
    store.write_at(0, &data)?;
    let took = t.elapsed();
    rows.push((
        format!("write {} MiB, 4 MiB objects, 32 in flight", a.size >> 20),
        format!("{:.0} MiB/s", mib_per_sec(a.size, took)),
    ));
    let pages = a.size / PAGE;

    // 1. The store alone: 1 and 16 reads in flight.
    let offsets = random_pages(a.faults, pages, 1);
    let mut buf = vec![0u8; PAGE];
    let t = Instant::now();
    for &p in &offsets {
        store.read_at((p * PAGE) as u64, &mut buf)?;
    }
    let one = t.elapsed();
    let mut bufs = vec![0u8; 16 * PAGE];
    let t = Instant::now();
    for group in offsets.chunks(16) {
        let mut batch: Vec<IoRequest<'_>> = bufs
            .chunks_mut(PAGE)
            .zip(group)
            .map(|(b, &p)| IoRequest::read((p * PAGE) as u64, b))
            .collect();
        store.submit(&mut batch);
        for r in &batch {
            r.result().ok_or("no result")??;
        }
        for (b, &p) in bufs.chunks(PAGE).zip(group) {
            if b != &data[p * PAGE..(p + 1) * PAGE] {
                return Err(format!("page {p} read back wrong").into());
            }
        }
    }
    let sixteen = t.elapsed();
    rows.push((
        "store 4 KiB reads/s, 1 in flight (read_at)".into(),
        format!("{:.0}", per_sec(offsets.len(), one)),
    ));
    rows.push((
        "store 4 KiB reads/s, 16 in flight (submit)".into(),
        format!("{:.0}", per_sec(offsets.len(), sixteen)),
    ));

    // 2. Fills through a mapping.
    let rt = runtime(a.size as u64, PAGE)?;
    let s1 = Arc::new(RadosStore::open(&opts)?);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe {
        rt.map(
            MapOptions::new()
                .store(s1.clone())
                .prefetch(PrefetchKind::None),
        )
    }?;
    let offsets = random_pages(a.faults, pages, 2);
    let t = Instant::now();
    let mut sum = 0u64;
    for &p in &offsets {
        sum += u64::from(m.as_slice()[p * PAGE + 7]);
    }
    let faults = t.elapsed();
    let want: u64 = offsets.iter().map(|&p| u64::from(data[p * PAGE + 7])).sum();
    if sum != want {
        return Err("faults read wrong bytes".into());
    }
    rows.push((
        "fills/s, random 4 KiB faults (1 in flight)".into(),
        format!(
            "{:.0} ({:.0} us each)",
            per_sec(offsets.len(), faults),
            faults.as_secs_f64() * 1e6 / offsets.len() as f64
        ),
    ));
    drop(m);

    let s16 = Arc::new(RadosStore::open(&opts.clone().queue_depth(16))?);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe {
        rt.map(
            MapOptions::new()
                .store(s16.clone())
                .prefetch(PrefetchKind::None),
        )
    }?;
    let offsets = random_pages(a.faults, pages, 3);
    let ranges: Vec<_> = offsets.iter().map(|&p| p * PAGE..(p + 1) * PAGE).collect();
    let t = Instant::now();
    m.prefetch_ranges(&ranges)?;
    while !offsets.iter().all(|&p| m.is_resident(p * PAGE)) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let prefetched = t.elapsed();
    let st = s16.stats();
    for &p in &offsets {
        if m.as_slice()[p * PAGE..(p + 1) * PAGE] != data[p * PAGE..(p + 1) * PAGE] {
            return Err(format!("prefetched page {p} wrong").into());
        }
    }
    rows.push((
        format!(
            "fills/s, vectored prefetch of random 4 KiB pages ({} in flight at most)",
            st.max_in_flight
        ),
        format!("{:.0}", per_sec(offsets.len(), prefetched)),
    ));
    drop(m);
    drop(rt);

    // 3. Sequential scans, cache a quarter of the set.
    for (name, prefetch, page) in [
        ("scan, 4 KiB pages, no read-ahead", PrefetchKind::None, PAGE),
        (
            "scan, 4 KiB pages, sequential read-ahead",
            PrefetchKind::default(),
            PAGE,
        ),
        (
            "scan, 64 KiB pages, sequential read-ahead",
            PrefetchKind::default(),
            64 << 10,
        ),
    ] {
        let rt = runtime(a.size as u64 / 4, page)?;
        let s = Arc::new(RadosStore::open(&opts)?);
        // SAFETY: nothing but this mapping changes the store while a slice of it lives.
        let m = unsafe { rt.map(MapOptions::new().store(s.clone()).prefetch(prefetch)) }?;
        let t = Instant::now();
        let mut x = 0u64;
        for chunk in m.as_slice().chunks(PAGE) {
            x = x.wrapping_add(u64::from(chunk[0]) + u64::from(chunk[PAGE - 1]));
        }
        let took = t.elapsed();
        let want = data.chunks(PAGE).fold(0u64, |x, c| {
            x.wrapping_add(u64::from(c[0]) + u64::from(c[PAGE - 1]))
        });
        if x != want {
            return Err(format!("{name}: wrong bytes").into());
        }
        rows.push((
            name.into(),
            format!(
                "{:.0} MiB/s ({} faults, {} reads, {} in flight at most)",
                mib_per_sec(a.size, took),
                m.stats().faults,
                s.stats().reads,
                s.stats().max_in_flight
            ),
        ));
    }
    RadosStore::remove(&opts)?;
    Ok(rows)
}

fn main() -> Result<()> {
    let a = args()?;
    let runs: Vec<String> = if a.conf.is_some() {
        vec!["given cluster".into()]
    } else {
        a.objectstores.clone()
    };
    for objectstore in runs {
        let (conf, _cluster) = match &a.conf {
            Some(c) => (c.clone(), None),
            None => {
                let t = Instant::now();
                let c = Cluster::start(&objectstore)?;
                eprintln!(
                    "{objectstore}: cluster ready in {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                (c.conf.clone(), Some(c))
            }
        };
        let rows = bench(&objectstore, &conf, &a)?;
        println!("\n{objectstore}, {} MiB object set", a.size >> 20);
        println!("| measure | result |\n|---|---|");
        for (k, v) in rows {
            println!("| {k} | {v} |");
        }
    }
    Ok(())
}
