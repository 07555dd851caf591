//! `bench report`: umio's benchmark report: the fault-path
//! microbenchmark and a short run of each workload of `benches/`, umio
//! beside Linux `mmap` on the same file and memory budget, on two devices
//! (ext4 on a loop device over tmpfs, which the report makes, and a
//! directory of the machine's own disk, `--disk`), each with its own rates
//! beside. Every table is written as a CSV file in the report's directory
//! (`target/umio-report` by default) and read back from there to build
//! `report.md` and its SVG plots; the load average is recorded at the start
//! and end of every section (`sections.csv`).
//!
//! Needs root (userfaultfd in full mode, a loop mount and a cgroup v1
//! memory limit for the bounded `mmap` runs); without root or cgroup v1 the
//! bounded runs are skipped and the report says why. About ten minutes on
//! a loaded 2-vCPU machine (`sections.csv` has each section's time).

use umio_bench::bench;
use umio_bench::cli::{self, ArgMatches, Command, value_parser};
use umio_bench::fault_path;
use umio_bench::svg;
use umio_bench::table::{Table, median, num};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bench::{
    Data, MIB, Region, UmioSetup, bounded, load, random_reads_for, read_units, scan_pages,
    scan_words, shuffled, write_then_flush,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Result;

/// Sizes of the short workloads.
const FILE_MIB: usize = 128;
const RESIDENT_MIB: usize = 32;
const DIRTY_MIB: usize = 16;
const RANDOM_OPS: usize = 20_000;
/// Rounds of the random reads (sides alternate within each).
const RANDOM_ROUNDS: usize = 3;
/// Each random-read run (and its warm-up) stops here if not done.
const RANDOM_LIMIT: Duration = Duration::from_secs(3);

struct Report {
    md: String,
    out: PathBuf,
    bar: ProgressBar,
    /// The summary's rows: what, measured, note.
    summary: Table,
    /// Each section: its name, the load average at its start and end, and
    /// its seconds.
    sections: Table,
    /// The current section: name, load at its start, when it started.
    current: Option<(String, String, Instant)>,
    /// umio's median cold fault over Linux's minor fault's, in this run.
    trap_vs_minor: f64,
}

impl Report {
    /// Ends the current section (if any) and starts `what`.
    fn step(&mut self, what: &str) {
        self.end_section();
        self.bar.inc(1);
        self.bar.set_message(what.to_string());
        self.current = Some((what.to_string(), load(), Instant::now()));
    }

    fn end_section(&mut self) {
        if let Some((name, start, t)) = self.current.take() {
            self.sections
                .push([name, start, load(), num(t.elapsed().as_secs_f64(), 0)]);
        }
    }

    /// Writes `t` as CSV in the report's directory, reads it back and adds
    /// it to the report as a Markdown table.
    fn table(&mut self, t: &Table) -> Result<Table> {
        t.write_csv(&self.out)?;
        let back = Table::read_csv(&self.out, &t.name)?;
        self.md.push('\n');
        self.md.push_str(&back.markdown());
        Ok(back)
    }

    fn svg(&mut self, name: &str, alt: &str, body: String) -> Result<()> {
        std::fs::write(self.out.join(name), body)?;
        let _ = writeln!(self.md, "\n![{alt}]({name})\n");
        Ok(())
    }

    /// A bar chart of CSV `table`'s columns `series` (label, column) over
    /// its rows, named by column `cats`, for the rows `keep` accepts.
    #[allow(clippy::too_many_arguments)]
    fn bars(
        &mut self,
        file: &str,
        alt: &str,
        title: &str,
        y: &str,
        table: &str,
        cats: &str,
        series: &[(&str, &str)],
        keep: impl Fn(&Table, usize) -> bool,
    ) -> Result<()> {
        let t = Table::read_csv(&self.out, table)?;
        let rows: Vec<usize> = (0..t.rows.len()).filter(|&k| keep(&t, k)).collect();
        let names = t.texts(cats);
        let cats: Vec<String> = rows.iter().map(|&k| names[k].clone()).collect();
        let s: Vec<(&str, Vec<f64>)> = series
            .iter()
            .map(|(label, col)| {
                let v = t.numbers(col);
                (*label, rows.iter().map(|&k| v[k]).collect())
            })
            .collect();
        self.svg(file, alt, svg::bars(title, y, &cats, &s))
    }

    fn note(&mut self, what: &str, measured: String, note: String) {
        self.summary.push([what.to_string(), measured, note]);
    }
}

pub fn command() -> Command {
    cli::command(
        "report",
        "Runs a short version of umio's benchmarks on a fast device (ext4 on a loop device over \
         tmpfs) and on the disk under --disk, writes every table as CSV in OUT, and builds \
         OUT/report.md and its SVG charts from those files.",
    )
    .arg(
        cli::opt_none(
            "disk",
            "DIR",
            "directory on the disk to measure (default: the temporary directory)",
        )
        .value_parser(value_parser!(PathBuf)),
    )
    .arg(cli::switch("no-disk", "measure the fast device only"))
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs ({cpu}), Linux {kernel}")
}

/// One device the out-of-core sections run on: its key in file names, its
/// name in the report, and the data.
struct Device {
    key: &'static str,
    name: &'static str,
    data: Data,
}

pub fn run(m: &ArgMatches, out: &Path) -> Result<()> {
    let disk: PathBuf = cli::get_opt(m, "disk").unwrap_or_else(std::env::temp_dir);
    let with_disk = !m.get_flag("no-disk");
    let out = out.to_path_buf();
    std::fs::create_dir_all(&out)?;
    let started = Instant::now();
    let bar = ProgressBar::new(if with_disk { 9 } else { 6 });
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?,
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut r = Report {
        md: String::new(),
        out: out.clone(),
        bar,
        summary: Table::new("summary", ["what", "measured", "note"]),
        sections: Table::new(
            "sections",
            ["section", "load at start", "load at end", "seconds"],
        ),
        current: None,
        trap_vs_minor: f64::NAN,
    };
    r.step("creating the data files");
    let start_load = load();
    let mut devices = vec![Device {
        key: "fast",
        name: "fast device",
        data: Data::new(FILE_MIB, true)?,
    }];
    if with_disk {
        devices.push(Device {
            key: "disk",
            name: "disk",
            data: Data::in_dir(FILE_MIB, &disk)?,
        });
    }
    let _ = writeln!(
        r.md,
        "# umio benchmark report\n\n\
         Generated by `cargo run --release --example bench -- report` on {}, load average \
         (1, 5, 15 minutes) {start_load} at the start. One run; this machine is a shared, \
         nested virtual machine whose load swings with other work, so only ratios taken in \
         this one run mean anything, and the load of each section is in the last table. \
         Every table is also a CSV file beside this report.\n\n\
         The fault-path benchmark, cold faults and resident scans read a file on `/dev/shm` \
         (tmpfs: its pages are in memory, umio reads them with `pread`, Linux maps them). \
         Out-of-core runs ({FILE_MIB} MiB file) read it on each device below: umio with \
         `O_DIRECT` through io_uring (its cache is its only cache), Linux `mmap` through its \
         page cache with the whole process in a cgroup v1 memory limit equal to umio's cache.",
        machine(),
    );
    for d in &devices {
        let _ = writeln!(
            r.md,
            "\n- {}: {}{}",
            d.name,
            d.data.device(),
            match &d.data.no_ext4 {
                None => String::new(),
                Some(why) => format!(" (the bounded Linux `mmap` runs are skipped: {why})"),
            }
        );
    }
    devices_section(&mut r, &devices)?;
    fault_path_section(&mut r, &devices[0].data)?;
    cold_section(&mut r)?;
    resident_section(&mut r)?;
    for d in &devices {
        r.step(&format!("{}: random reads", d.name));
        random_section(&mut r, d)?;
        r.step(&format!("{}: sequential scans", d.name));
        seq_section(&mut r, d)?;
        r.step(&format!("{}: write + flush", d.name));
        write_section(&mut r, d)?;
    }
    r.end_section();
    let _ = writeln!(
        r.md,
        "\n## Load\n\nThe load average (1, 5, 15 minutes) at the start and end of each \
         section, and its seconds; {:.0} s in all.",
        started.elapsed().as_secs_f64()
    );
    let sections = r.sections.clone();
    r.table(&sections)?;
    let summary = r.summary.clone();
    summary.write_csv(&out)?;
    let summary = Table::read_csv(&out, "summary")?;
    let t = format!("## Summary\n\n{}", summary.markdown());
    let md =
        r.md.replacen("\n## Device limits", &format!("\n{t}\n## Device limits"), 1);
    let path = out.join("report.md");
    std::fs::write(&path, md)?;
    r.bar.finish_with_message("done");
    println!("{t}");
    println!(
        "report written to {} in {:.0} s (CSV files beside it)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn devices_section(r: &mut Report, devices: &[Device]) -> Result<()> {
    r.step("device limits");
    let _ = writeln!(
        r.md,
        "\n## Device limits\n\n\
         Each device's own rates through the data file with `O_DIRECT` (no page cache, no \
         umio; about a second each, `umio_bench::device`), measured once at the start: the \
         scale for the misses of umio and `mmap` below. They swing with the machine's load \
         (the disk is a virtual one whose host may cache it), so a rate below can exceed the \
         one measured here."
    );
    let mut t = Table::new(
        "devices",
        [
            "device",
            "4 KiB random reads/s, 1 at a time",
            "4 KiB random reads/s, 32 at a time",
            "2 MiB reads in order, MB/s",
            "load",
        ],
    );
    for d in devices {
        let Some(path) = d.data.ext4_path() else {
            continue;
        };
        match umio_bench::device::measure(path, Duration::from_secs(1)) {
            Ok(rates) => t.push([
                d.name.to_string(),
                num(rates.random_4k_qd1, 0),
                num(rates.random_4k_qd32, 0),
                num(rates.seq_2m / 1e6, 0),
                load(),
            ]),
            Err(e) => {
                let _ = writeln!(r.md, "\n{}: not measured ({e}).", d.name);
            }
        }
    }
    r.table(&t)?;
    Ok(())
}

fn fault_path_section(r: &mut Report, data: &Data) -> Result<()> {
    r.step("fault path");
    let bar = r.bar.clone();
    let fp = fault_path::run(data, 1000, &mut |name| {
        bar.set_message(format!("fault path: {name}"))
    })?;
    let _ = writeln!(r.md, "\n## Fault path (`examples/fault_path.rs`)\n");
    r.md.push_str(&fault_path::markdown(&fp));
    let (pread, mapped) = fault_path::ratio_to_floor(&fp);
    let vs_floor = |row: &fault_path::PathRow| row.median() / fp.floor_pread.median();
    let (sleep, spin) = (vs_floor(&fp.umio_sleep), vs_floor(&fp.umio_spin));
    r.note(
        "cold 4 KiB fault: umio's median over the floor of the mechanism's",
        format!(
            "{pread:.2}x reading the page with pread (beside the floor that preads it too); \
             {mapped:.2}x copying from the mapped file (beside the bare floor)"
        ),
        format!(
            "like for like: each umio row beside a floor that does the same store work. By \
             default umio's fillers poll for the next event or sleep, whichever the runtime \
             measures to be faster; always sleeping came to {sleep:.2}x and always polling to \
             {spin:.2}x in this run. Which wins depends on the machine's other load: on an idle \
             2-vCPU machine a sleeping handler (the floor's too) is woken on the other CPU and \
             wakes the faulting thread back across CPUs, which a polling one avoids; with the \
             other CPU busy the kernel keeps a sleeping handler on the faulting thread's CPU \
             and polling only gets in the way. What umio adds to the floor's work: \
             epoll_wait before the read, page-state updates, and UFFDIO_COPY with DONTWAKE \
             plus a separate UFFDIO_WAKE so that the thread never runs before the page's \
             state is recorded"
        ),
    );
    r.trap_vs_minor = fp.umio.median() / fp.kernel_minor.median();
    let speedup = fp.umio.median() / fp.umio_in_thread.median();
    r.note(
        "cold 4 KiB fault: served through the fillers over served in the faulting thread",
        format!(
            "{speedup:.2}x (medians: {:.1} us in-thread, {:.1} us through the fillers)",
            fp.us(fp.umio_in_thread.median()),
            fp.us(fp.umio.median())
        ),
        "both read the page with pread from the tmpfs file; in-thread, the faulting thread's \
         SIGBUS handler reads and installs it and returns, with no thread hand-off"
            .into(),
    );
    let rows = [
        ("umio (defaults)", &fp.umio),
        ("umio, mapped file", &fp.umio_mapped),
        ("umio, sleeping", &fp.umio_sleep),
        ("umio, polling", &fp.umio_spin),
        ("umio, in-thread", &fp.umio_in_thread),
        ("floor", &fp.floor),
        ("Linux minor", &fp.kernel_minor),
        ("Linux anon", &fp.kernel_anon),
    ];
    // Every fault's latency, a column per row, written and read back.
    let mut t = Table::new("fault-latency", rows.iter().map(|(n, _)| format!("{n} us")));
    let n = rows.iter().map(|(_, p)| p.cycles.len()).max().unwrap_or(0);
    for k in 0..n {
        t.push(
            rows.iter()
                .map(|(_, p)| p.cycles.get(k).map_or(String::new(), |&c| num(fp.us(c), 3))),
        );
    }
    t.write_csv(&r.out)?;
    let t = Table::read_csv(&r.out, "fault-latency")?;
    let cols: Vec<(String, Vec<f64>)> = rows
        .iter()
        .map(|(name, _)| {
            let v = t.numbers(&format!("{name} us"));
            (
                name.to_string(),
                v.into_iter().filter(|x| !x.is_nan()).collect(),
            )
        })
        .collect();
    let s: Vec<(&str, &[f64])> = cols
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let _ = writeln!(r.md, "\nEvery fault's latency: `fault-latency.csv`.");
    r.svg(
        "fault-latency.svg",
        "latency distribution of one fault",
        svg::cdf(
            "One 4 KiB fault: latency distribution",
            "microseconds (log scale)",
            &s,
        ),
    )
}

fn cold_section(r: &mut Report) -> Result<()> {
    r.step("cold faults by page size");
    let data = Data::new(64, false)?;
    let _ = writeln!(
        r.md,
        "\n## Cold faults by page size (`benches/fault_latency.rs`)\n\n\
         Time to read a unit nobody touched yet (one word per 4 KiB), units in shuffled order, \
         64 MiB file on /dev/shm. umio: page size = unit, one fault per unit, no read-ahead. \
         Linux: its faults of 4 KiB (with fault-around)."
    );
    let mut t = Table::new(
        "cold-by-page-size",
        [
            "unit",
            "umio us/unit",
            "mmap us/unit",
            "umio MiB/s",
            "mmap MiB/s",
            "umio / mmap time",
        ],
    );
    for unit in [4usize << 10, 64 << 10, 2 << 20] {
        let n = (data.len / unit).min(2048);
        let order = &shuffled(data.len / unit, 7)[..n];
        let u = Region::umio_shm(&data, UmioSetup::new(data.len + 16 * MIB, unit))?;
        let tu = read_units(&u, unit, order).as_secs_f64() / n as f64;
        drop(u);
        let k = Region::kernel_shm(&data, libc::MADV_NORMAL, false)?;
        let tk = read_units(&k, unit, order).as_secs_f64() / n as f64;
        let mibs = |t: f64| unit as f64 / t / MIB as f64;
        t.push([
            format!("{} KiB", unit >> 10),
            num(tu * 1e6, 1),
            num(tk * 1e6, 1),
            num(mibs(tu), 0),
            num(mibs(tk), 0),
            num(tu / tk, 2),
        ]);
    }
    r.table(&t)?;
    r.bars(
        "cold-by-page-size.svg",
        "cold-read throughput by page size",
        "Cold reads by unit (page) size",
        "MiB/s",
        "cold-by-page-size",
        "unit",
        &[("umio", "umio MiB/s"), ("Linux mmap", "mmap MiB/s")],
        |_, _| true,
    )
}

fn resident_section(r: &mut Report) -> Result<()> {
    r.step("resident scan");
    let data = Data::new(RESIDENT_MIB, false)?;
    let len = data.len;
    let u = Region::umio_shm(&data, UmioSetup::new(2 * len, 64 << 10))?;
    let k = Region::kernel_shm(&data, libc::MADV_NORMAL, false)?;
    scan_words(&u, len);
    scan_words(&k, len);
    // Alternate, best of 31 each: the machine's noise hits both alike.
    let (mut bu, mut bk) = (f64::MAX, f64::MAX);
    for _ in 0..31 {
        bu = bu.min(scan_words(&u, len).as_secs_f64());
        bk = bk.min(scan_words(&k, len).as_secs_f64());
    }
    let gib = |t: f64| len as f64 / t / (1u64 << 30) as f64;
    let diff = bu / bk - 1.0;
    let _ = writeln!(
        r.md,
        "\n## Resident scan\n\n\
         Every 64-bit word of a {RESIDENT_MIB} MiB file already resident, best of 31 passes \
         (alternating)."
    );
    let mut t = Table::new("resident", ["side", "GiB/s"]);
    t.push(["umio".to_string(), num(gib(bu), 2)]);
    t.push(["Linux mmap".to_string(), num(gib(bk), 2)]);
    r.table(&t)?;
    let _ = writeln!(
        r.md,
        "\numio's time is {:+.1}% of mmap's (negative: faster).",
        diff * 100.0
    );
    r.note(
        "scan of resident data: umio's time beside mmap's",
        format!("{:+.1}%", diff * 100.0),
        "resident pages are plain memory for both: loads the MMU translates, no umio code \
         runs; on a loaded machine the best of 31 passes still swings by tens of percent either \
         way (the load is in the last table)"
            .into(),
    );
    Ok(())
}

fn random_section(r: &mut Report, d: &Device) -> Result<()> {
    let data = &d.data;
    let name = format!("random-{}", d.key);
    let _ = writeln!(
        r.md,
        "\n## Random 4 KiB reads out of core: {}\n\n\
         {RANDOM_OPS} reads of one word at random 4 KiB pages of the {FILE_MIB} MiB file, after \
         a warm-up that fills the cache (as many reads as twice the cache has pages); umio \
         with 4 KiB pages and no read-ahead, Linux `mmap` under a cgroup limit of the same \
         bytes, with `MADV_RANDOM` and with the default advice. {RANDOM_ROUNDS} rounds, the \
         sides in turn within each; every round is shown. Each run, and each warm-up, stops \
         after {} s if not done (a `done` below 100%: the rate is of the reads done).",
        d.name,
        RANDOM_LIMIT.as_secs()
    );
    let mut t = Table::new(
        &name,
        [
            "cache / file",
            "threads",
            "round",
            "umio reads/s",
            "mmap MADV_RANDOM reads/s",
            "mmap default reads/s",
            "umio / best mmap",
            "done % (umio, RANDOM, default)",
            "load",
        ],
    );
    let fractions = [(1usize, 8usize), (1, 4), (1, 2)];
    let mut skipped = None;
    // One warm-up and one timed run of `reg`: reads/s and the share done.
    let measure = |reg: &Region, warm: usize, threads: usize| -> (f64, f64) {
        random_reads_for(reg, warm, threads, 1, RANDOM_LIMIT);
        let (done, t) = random_reads_for(reg, RANDOM_OPS, threads, 2, RANDOM_LIMIT);
        (
            done as f64 / t.as_secs_f64(),
            done as f64 / RANDOM_OPS as f64,
        )
    };
    for (num_, den) in fractions {
        let budget = data.len * num_ / den;
        for threads in [1usize, 2] {
            if (num_, den) != (1, 4) && threads == 2 {
                continue;
            }
            for round in 1..=RANDOM_ROUNDS {
                r.bar.set_message(format!(
                    "{}: random reads, cache {num_}/{den}, {threads} threads, round {round}",
                    d.name
                ));
                let warm = 2 * budget / 4096;
                let u = Region::umio_device(data, UmioSetup::new(budget, 4 << 10))?;
                let (tu, du) = measure(&u, warm, threads);
                drop(u);
                let mut kern = [(f64::NAN, f64::NAN); 2];
                if data.ext4_path().is_some() {
                    for (i, adv) in [libc::MADV_RANDOM, libc::MADV_NORMAL]
                        .into_iter()
                        .enumerate()
                    {
                        let got = bounded(budget, || -> Result<(f64, f64)> {
                            let k =
                                Region::kernel_device(data, adv, false)?.ok_or("no ext4 copy")?;
                            Ok(measure(&k, warm, threads))
                        });
                        match got {
                            Ok(v) => kern[i] = v?,
                            Err(why) => skipped = Some(why),
                        }
                    }
                }
                let best = kern[0].0.max(kern[1].0);
                let pct = |x: f64| num(x * 100.0, 0);
                t.push([
                    format!("{num_}/{den}"),
                    threads.to_string(),
                    round.to_string(),
                    num(tu, 0),
                    num(kern[0].0, 0),
                    num(kern[1].0, 0),
                    num(tu / best, 2),
                    format!("{}, {}, {}", pct(du), pct(kern[0].1), pct(kern[1].1)),
                    load(),
                ]);
            }
        }
    }
    let t = r.table(&t)?;
    if let Some(why) = &skipped {
        let _ = writeln!(r.md, "\nSkipped: Linux mmap under a cgroup limit ({why}).");
    }
    // Medians over the rounds, per configuration, from the CSV.
    let cfg: Vec<String> = t
        .texts("cache / file")
        .iter()
        .zip(t.texts("threads"))
        .map(|(c, th)| format!("{c} {th}"))
        .collect();
    let med = |col: &str, want: &str| -> f64 {
        let v = t.numbers(col);
        median(
            &cfg.iter()
                .zip(v)
                .filter(|(c, _)| *c == want)
                .map(|(_, x)| x)
                .collect::<Vec<_>>(),
        )
    };
    let mut m = Table::new(
        &format!("{name}-medians"),
        [
            "cache / file",
            "threads",
            "umio reads/s",
            "mmap MADV_RANDOM reads/s",
            "mmap default reads/s",
            "umio / best mmap",
        ],
    );
    let mut seen = Vec::new();
    for c in &cfg {
        if seen.contains(c) {
            continue;
        }
        seen.push(c.clone());
        let (frac, th) = c.split_once(' ').unwrap_or((c, ""));
        m.push([
            frac.to_string(),
            th.to_string(),
            num(med("umio reads/s", c), 0),
            num(med("mmap MADV_RANDOM reads/s", c), 0),
            num(med("mmap default reads/s", c), 0),
            num(med("umio / best mmap", c), 2),
        ]);
    }
    let _ = writeln!(r.md, "\nMedians of the rounds:");
    let m = r.table(&m)?;
    let ratio = m.numbers("umio / best mmap");
    let quarter: Vec<String> = m
        .texts("cache / file")
        .iter()
        .zip(m.texts("threads"))
        .zip(ratio)
        .filter(|((c, _), _)| *c == "1/4")
        .map(|((_, th), x)| format!("{x:.2}x ({th} thread{})", if th == "1" { "" } else { "s" }))
        .collect();
    r.note(
        &format!(
            "{}: random reads out of core, same memory budget: umio's rate over mmap's best \
             (median of {RANDOM_ROUNDS} rounds)",
            d.name
        ),
        quarter.join(", "),
        format!(
            "cache 1/4 of the file, uniform random pages: no policy can raise the hit rate, so \
             this measures each miss's cost. Both read the page from the same device. Linux \
             resolves the fault in the faulting thread; umio adds a user-space trap: delivery \
             to a filler thread, the event read, UFFDIO_COPY and the wake-up back (the \
             fault-path section: {:.1}x a Linux minor fault in this run). On a fast device \
             that trap is a large part of a miss; on a slower one the device's read \
             dominates both. The rounds swing with the machine's load: all of them are in \
             the section's table",
            r.trap_vs_minor
        ),
    );
    r.bars(
        &format!("{name}.svg"),
        &format!("random-read throughput by cache fraction, {}", d.name),
        &format!("Random 4 KiB reads by cache / file (1 thread), {}", d.name),
        "reads/s",
        &format!("{name}-medians"),
        "cache / file",
        &[
            ("umio", "umio reads/s"),
            ("mmap MADV_RANDOM", "mmap MADV_RANDOM reads/s"),
            ("mmap default", "mmap default reads/s"),
        ],
        |t, k| t.rows[k][1] == "1",
    )
}

fn seq_section(r: &mut Report, d: &Device) -> Result<()> {
    let data = &d.data;
    let name = format!("seq-{}", d.key);
    let budget = data.len / 4;
    let _ = writeln!(
        r.md,
        "\n## Sequential scan out of core: {}\n\n\
         One cold pass over the {FILE_MIB} MiB file (one word per 4 KiB: paging is all the \
         cost), cache {} MiB.",
        d.name,
        budget / MIB
    );
    let mibs = |t: Duration| data.len as f64 / t.as_secs_f64() / MIB as f64;
    let setups = [
        (
            "umio 4K",
            "umio 4 KiB pages, no read-ahead",
            UmioSetup::new(budget, 4 << 10),
        ),
        (
            "umio 4K+RA",
            "umio 4 KiB pages, read-ahead up to 2 MiB",
            UmioSetup::new(budget, 4 << 10).readahead(2 << 20),
        ),
        (
            "umio 64K+RA",
            "umio 64 KiB pages, read-ahead up to 2 MiB",
            UmioSetup::new(budget, 64 << 10).readahead(2 << 20),
        ),
        (
            "umio 2M",
            "umio 2 MiB pages",
            UmioSetup::new(budget, 2 << 20),
        ),
        (
            "umio 2M+RA",
            "umio 2 MiB pages, read-ahead up to 8 MiB",
            UmioSetup::new(budget, 2 << 20).readahead(8 << 20),
        ),
    ];
    let mut t = Table::new(&name, ["side", "short", "MiB/s", "faults", "load"]);
    for (short, long, s) in setups {
        r.bar
            .set_message(format!("{}: sequential scan: {long}", d.name));
        let u = Region::umio_device(data, s)?;
        let (tm, f) = scan_pages(&u, data.len);
        t.push([
            long.to_string(),
            short.to_string(),
            num(mibs(tm), 0),
            f.to_string(),
            load(),
        ]);
    }
    let mut skipped = None;
    if data.ext4_path().is_some() {
        for (short, long, adv) in [
            (
                "mmap seq",
                "Linux mmap, MADV_SEQUENTIAL",
                libc::MADV_SEQUENTIAL,
            ),
            ("mmap default", "Linux mmap, default", libc::MADV_NORMAL),
        ] {
            r.bar
                .set_message(format!("{}: sequential scan: {long}", d.name));
            match bounded(budget, || -> Result<(Duration, u64)> {
                let k = Region::kernel_device(data, adv, false)?.ok_or("no ext4 copy")?;
                Ok(scan_pages(&k, data.len))
            }) {
                Ok(v) => {
                    let (tm, f) = v?;
                    t.push([
                        long.to_string(),
                        short.to_string(),
                        num(mibs(tm), 0),
                        f.to_string(),
                        load(),
                    ]);
                }
                Err(why) => skipped = Some(why),
            }
        }
    }
    let t = r.table(&t)?;
    if let Some(why) = &skipped {
        let _ = writeln!(r.md, "\nSkipped: Linux mmap under a cgroup limit ({why}).");
    }
    let (sides, rate, faults) = (t.texts("side"), t.numbers("MiB/s"), t.numbers("faults"));
    // The better of the two 2 MiB runs (rows 3 and 4).
    let u2 = if rate[4] > rate[3] { 4 } else { 3 };
    let best_mmap = rate[5..].iter().copied().fold(f64::NAN, f64::max);
    let speed = rate[u2] / best_mmap;
    let fewer = faults[0] / faults[u2].max(1.0);
    r.note(
        &format!(
            "{}: sequential scan out of core, 2 MiB pages: umio's rate over mmap's best, and its \
             faults beside 4 KiB pages (one pass each)",
            d.name
        ),
        format!(
            "{speed:.2}x mmap's best ({}); {fewer:.0}x fewer faults than 4 KiB pages \
             ({:.1}x fewer than 4 KiB pages with read-ahead)",
            sides[u2],
            faults[1] / faults[u2].max(1.0)
        ),
        if speed >= 1.0 {
            "one fault, one 2 MiB read and one 2 MiB UFFDIO_COPY per 512 pages; Linux faults \
             about once per 128 KiB (each of its faults maps many cached pages) and reads \
             through its page cache. The margin swings from run to run on a shared machine"
                .to_string()
        } else {
            format!(
                "one fault per 512 pages, but each 2 MiB fault waits for a 2 MiB read through \
                 the device and a 2 MiB UFFDIO_COPY, and the scan stops meanwhile; read-ahead \
                 overlaps some of it (4 KiB pages with read-ahead fault {} times). Linux's \
                 read-ahead runs asynchronously ahead of the scan from its page cache and each \
                 of its faults maps many pages",
                faults[1]
            )
        },
    );
    r.bars(
        &format!("{name}.svg"),
        &format!("sequential-scan throughput by page size, {}", d.name),
        &format!("Sequential cold scan, cache 1/4 of the file, {}", d.name),
        "MiB/s",
        &name,
        "short",
        &[("throughput", "MiB/s")],
        |_, _| true,
    )
}

fn write_section(r: &mut Report, d: &Device) -> Result<()> {
    let data = &d.data;
    let dirty = DIRTY_MIB * MIB;
    let u = Region::umio_device(data, UmioSetup::new(data.len / 4, 64 << 10).writable())?;
    let k = match data.ext4_path() {
        Some(_) => Region::kernel_device(data, libc::MADV_NORMAL, true)?,
        None => Some(Region::kernel_shm(data, libc::MADV_NORMAL, true)?),
    };
    let _ = writeln!(
        r.md,
        "\n## Write then flush: {}\n\n\
         One word written in each 4 KiB of {DIRTY_MIB} MiB, then made durable (umio `flush`; \
         Linux `msync(MS_SYNC)` + `fdatasync`); the first round faults the pages in, the \
         second rewrites resident pages (best of 3 such rounds).",
        d.name
    );
    let mut t = Table::new(
        &format!("write-{}", d.key),
        [
            "side",
            "first write ms",
            "first flush ms",
            "rewrite ms",
            "flush ms",
            "load",
        ],
    );
    for (side, reg) in [
        ("umio (64 KiB pages)", Some(&u)),
        ("Linux mmap", k.as_ref()),
    ] {
        let Some(reg) = reg else { continue };
        let (w0, f0) = write_then_flush(reg, dirty, 1)?;
        let (mut w1, mut f1) = (Duration::MAX, Duration::MAX);
        for v in 2..5 {
            let (w, f) = write_then_flush(reg, dirty, v)?;
            w1 = w1.min(w);
            f1 = f1.min(f);
        }
        let ms = |d: Duration| num(d.as_secs_f64() * 1e3, 1);
        t.push([side.to_string(), ms(w0), ms(f0), ms(w1), ms(f1), load()]);
    }
    r.table(&t)?;
    Ok(())
}
