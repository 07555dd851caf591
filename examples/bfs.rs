//! Out-of-core graph traversal: breadth-first search over a generated
//! R-MAT graph (the Graph500 generator's skew) whose CSR arrays live in a
//! file mapped with a cache a quarter of the graph's size, as in the xmap
//! and Aquila evaluations (Ligra BFS out of core).
//!
//! The graph file holds `offsets` (vertices + 1 little-endian u64) then
//! `edges` (u32 targets), both directions of every generated edge. BFS
//! runs top-down from the vertex of highest degree; the frontier and the
//! visited bits are ordinary memory (a few MiB). Each configuration maps
//! the file fresh and must visit the same vertices at the same depths.
//!
//! ```text
//! cargo run --release --example bfs -- [--scale N] [--edge-factor N] [--cache MiB] [--all]
//! ```
//!
//! Without `--all`, the three configurations that thrash on this random
//! access are skipped: promote-always (every miss promotes a 2 MiB range
//! the cache then evicts), and 2 MiB pages, hugetlbfs or not (one run
//! here: 4 KiB pages 7.9 s, promote-always 49.7 s, 2 MiB units 732 s,
//! against Linux mmap's 18.2 s).
//!
//! Configurations: Linux `mmap` under a cgroup v1 memory limit of the
//! cache's size (the file copied to ext4 on a loop device over /dev/shm),
//! and umio with 4 KiB pages, 4 KiB pages promoted (promote-always),
//! 2 MiB fill units, and hugetlbfs 2 MiB pages (the pool is raised and
//! restored). Root is needed; rows that cannot run say why.

use umio_bench::cli::{self, value_parser};
use umio_bench::policy_workload;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use policy_workload::{LoopFs, Mmap, Result, drop_cache, in_memory_cgroup};
use umio::backends::FileStore;
use umio::{MapOptions, PrefetchKind, PromoteKind, Runtime};

const MIB: usize = 1 << 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Writes an R-MAT graph with `2^scale` vertices and `edge_factor` edges
/// per vertex (both directions stored) to `out`. Returns the vertex count.
fn generate(scale: u32, edge_factor: usize, out: &mut impl Write) -> Result<usize> {
    let n = 1usize << scale;
    let m = n * edge_factor;
    let (a, b, c) = (0.57, 0.19, 0.19);
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(m);
    for _ in 0..m {
        let (mut u, mut v) = (0usize, 0usize);
        for bit in 0..scale {
            let r = rng.unit();
            let (du, dv) = if r < a {
                (0, 0)
            } else if r < a + b {
                (0, 1)
            } else if r < a + b + c {
                (1, 0)
            } else {
                (1, 1)
            };
            u |= du << bit;
            v |= dv << bit;
        }
        pairs.push((u as u32, v as u32));
    }
    let mut degree = vec![0u64; n + 1];
    for &(u, v) in &pairs {
        degree[u as usize] += 1;
        degree[v as usize] += 1;
    }
    let mut offsets = vec![0u64; n + 1];
    for i in 0..n {
        offsets[i + 1] = offsets[i] + degree[i];
    }
    let mut fill: Vec<u64> = offsets[..n].to_vec();
    let mut edges = vec![0u32; 2 * m];
    for &(u, v) in &pairs {
        edges[fill[u as usize] as usize] = v;
        fill[u as usize] += 1;
        edges[fill[v as usize] as usize] = u;
        fill[v as usize] += 1;
    }
    for o in &offsets {
        out.write_all(&o.to_le_bytes())?;
    }
    for e in &edges {
        out.write_all(&e.to_le_bytes())?;
    }
    Ok(n)
}

/// BFS over the mapped graph: (vertices reached, depth, sum of depths).
fn bfs(base: *const u8, n: usize) -> (usize, u32, u64) {
    // SAFETY: the file holds n + 1 u64 offsets, 8-byte aligned at the
    // mapping's start (page-aligned), then the edges.
    let offsets = unsafe { std::slice::from_raw_parts(base.cast::<u64>(), n + 1) };
    let m = offsets[n] as usize;
    // SAFETY: the edges follow the offsets; 4-byte aligned.
    let edges = unsafe { std::slice::from_raw_parts(base.add((n + 1) * 8).cast::<u32>(), m) };
    let mut root = 0;
    for v in 0..n.min(1 << 16) {
        if offsets[v + 1] - offsets[v] > offsets[root + 1] - offsets[root] {
            root = v;
        }
    }
    let mut visited = vec![0u64; n.div_ceil(64)];
    let mut frontier = vec![root as u32];
    visited[root / 64] |= 1 << (root % 64);
    let (mut reached, mut depth, mut depth_sum) = (1usize, 0u32, 0u64);
    while !frontier.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for &u in &frontier {
            let u = u as usize;
            for &v in &edges[offsets[u] as usize..offsets[u + 1] as usize] {
                let v = v as usize;
                if visited[v / 64] & (1 << (v % 64)) == 0 {
                    visited[v / 64] |= 1 << (v % 64);
                    next.push(v as u32);
                    reached += 1;
                    depth_sum += u64::from(depth);
                }
            }
        }
        frontier = next;
    }
    (reached, depth - 1, depth_sum)
}

fn faults_now() -> u64 {
    // SAFETY: getrusage writes one struct rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_minflt + ru.ru_majflt) as u64
}

fn umio_bfs(
    file: &File,
    n: usize,
    cache: usize,
    config: &str,
) -> Result<(Duration, u64, (usize, u32, u64))> {
    let rt = Runtime::builder()
        .cache_bytes(cache as u64)
        .fillers(2)
        .build()?;
    let store = Arc::new(FileStore::new(file)?);
    let base = MapOptions::new()
        .store(store)
        .page_size(4096)
        .prefetch(PrefetchKind::None);
    let opts = match config {
        "4k" => base,
        "promote" => base.promote(PromoteKind::Always),
        "2m" => base.page_size(2 * MIB),
        _ => base.page_size(2 * MIB).hugetlb(false),
    };
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map(opts) }?;
    let t = Instant::now();
    let r = bfs(m.as_ptr(), n);
    Ok((t.elapsed(), rt.stats().faults, r))
}

/// Raises `vm.nr_hugepages` to `n` for its lifetime.
struct HugePool(Option<String>);

impl Drop for HugePool {
    fn drop(&mut self) {
        if let Some(was) = &self.0 {
            let _ = std::fs::write("/proc/sys/vm/nr_hugepages", was.trim());
        }
    }
}

fn main() -> Result<()> {
    let m = cli::command(
        "bfs",
        "Out-of-core breadth-first search over a generated R-MAT graph mapped with a cache \
         a quarter of its size: Linux mmap under a cgroup limit beside umio's page settings.",
    )
    .arg(cli::opt("scale", "N", "20", "2^N vertices, 10 to 26").value_parser(value_parser!(u32)))
    .arg(cli::opt("edge-factor", "N", "16", "edges per vertex").value_parser(value_parser!(usize)))
    .arg(
        cli::opt(
            "cache",
            "MiB",
            "0",
            "cache size; 0: a quarter of the graph, at least 16",
        )
        .value_parser(value_parser!(usize)),
    )
    .arg(cli::switch(
        "all",
        "also run the configurations that thrash on random access",
    ))
    .get_matches();
    let (scale, edge_factor, cache_mib): (u32, usize, usize) = (
        cli::get(&m, "scale"),
        cli::get(&m, "edge-factor"),
        cli::get(&m, "cache"),
    );
    let all = m.get_flag("all");
    if !(10..=26).contains(&scale) || edge_factor == 0 {
        return Err("--scale must be 10 to 26, --edge-factor at least 1".into());
    }
    let tmp = tempfile::NamedTempFile::new_in("/dev/shm")?;
    let t = Instant::now();
    let n = {
        let mut w = BufWriter::new(tmp.as_file());
        let n = generate(scale, edge_factor, &mut w)?;
        w.flush()?;
        n
    };
    let size = tmp.as_file().metadata()?.len() as usize;
    let cache = if cache_mib > 0 {
        cache_mib * MIB
    } else {
        (size / 4).next_multiple_of(2 * MIB).max(16 * MIB)
    };
    println!(
        "R-MAT scale {scale}, edge factor {edge_factor}: {n} vertices, {} MiB graph (generated in {:.1} s), cache {} MiB",
        size / MIB,
        t.elapsed().as_secs_f64(),
        cache / MIB
    );
    println!();
    println!("| configuration | BFS ms | faults | vs mmap |");
    println!("|---|---|---|---|");
    let file = File::open(tmp.path())?;
    let mut results = Vec::new();
    let mut base_time = None;
    match LoopFs::new(size + size / 4 + 64 * MIB) {
        Ok(fs) => {
            let copy = fs.mount.join("graph.bin");
            std::fs::copy(tmp.path(), &copy)?;
            let f = File::open(&copy)?;
            drop_cache(&f);
            let (time, faults, r) = in_memory_cgroup(cache, || {
                let m = Mmap::new(&f, 0, size, libc::MADV_RANDOM).expect("mmap");
                let f0 = faults_now();
                let t = Instant::now();
                let r = bfs(m.ptr, n);
                (t.elapsed(), faults_now() - f0, r)
            })?;
            println!(
                "| Linux mmap, cgroup {} MiB | {:.0} | {faults} | - |",
                cache / MIB,
                time.as_secs_f64() * 1e3
            );
            base_time = Some(time);
            results.push(r);
        }
        Err(e) => eprintln!("mmap under a cgroup limit skipped: {e}"),
    }
    let pool = {
        const NR: &str = "/proc/sys/vm/nr_hugepages";
        let was = std::fs::read_to_string(NR).ok();
        let ok = std::fs::write(NR, (cache / (2 * MIB) + 4).to_string()).is_ok();
        HugePool(if ok { was } else { None })
    };
    for (config, name) in [
        ("4k", "umio 4 KiB"),
        ("promote", "umio 4 KiB, promote-always"),
        ("2m", "umio 2 MiB fill unit"),
        ("hugetlb", "umio hugetlbfs 2 MiB"),
    ] {
        if matches!(config, "promote" | "2m" | "hugetlb") && !all {
            eprintln!("{name} skipped: slow here (minutes; see --all)");
            continue;
        }
        if config == "hugetlb" && pool.0.is_none() {
            eprintln!("hugetlbfs skipped: cannot raise vm.nr_hugepages");
            continue;
        }
        match umio_bfs(&file, n, cache, config) {
            Ok((time, faults, r)) => {
                let vs = base_time.map_or("-".into(), |b: Duration| {
                    format!("{:.2}x", b.as_secs_f64() / time.as_secs_f64())
                });
                println!(
                    "| {name} | {:.0} | {faults} | {vs} |",
                    time.as_secs_f64() * 1e3
                );
                results.push(r);
            }
            Err(e) => eprintln!("{name} skipped: {e}"),
        }
    }
    if let Some(first) = results.first() {
        println!();
        println!(
            "reached {} vertices, depth {}; every configuration agreed: {}",
            first.0,
            first.1,
            results.iter().all(|r| r == first)
        );
        if results.iter().any(|r| r != first) {
            return Err("configurations disagree".into());
        }
    }
    drop(pool);
    Ok(())
}
