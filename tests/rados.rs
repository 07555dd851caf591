//! The RADOS store against a real cluster: one monitor and one OSD started
//! by `scripts/rados-cluster.sh` under a temporary directory (memstore for
//! the integrity suite, shared by its tests; bluestore for the OSD-failure
//! test, which restarts the OSD on the same data).
//!
//! Run with `cargo test -p umio --features rados --test rados`. Without
//! Ceph's daemons installed (Debian: `apt-get install -y
//! --no-install-recommends ceph-mon ceph-osd librados-dev`) every test
//! prints why it did not run and returns.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use umio::backends::StoreOp;
use umio::backends::{RadosOptions, RadosStore};
use umio::{Error, MapOptions, PrefetchKind, Runtime, Store, StoreError};

use common::{
    Rng, assert_same, eventually, random_bytes, read_random_slices, runtime,
    write_random_runs_in_halves,
};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rados-cluster.sh");
const POOL: &str = "umio";
/// Small objects, so that a few megabytes span many of them.
const OBJECT: u64 = 64 << 10;

/// A cluster run by the script in the foreground (a child of this
/// process); stopped on drop, and by the script itself should this process
/// die first.
struct Cluster {
    dir: PathBuf,
    runner: Child,
    conf: PathBuf,
}

impl Cluster {
    /// Starts a cluster, or says why it cannot and returns `None`.
    fn start(objectstore: &str) -> Option<Cluster> {
        match Self::try_start(objectstore) {
            Ok(c) => Some(c),
            Err(why) => {
                eprintln!("SKIPPED: {why}");
                None
            }
        }
    }

    /// Starts a cluster; `Err` says which program is missing (failing to
    /// start one with everything installed panics).
    fn try_start(objectstore: &str) -> Result<Cluster, String> {
        for daemon in ["ceph-mon", "ceph-osd", "monmaptool", "rados"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {daemon}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(format!(
                    "{daemon} is not installed; the RADOS tests run a cluster with \
                     {SCRIPT}, which needs `apt-get install -y --no-install-recommends \
                     ceph-mon ceph-osd librados-dev`"
                ));
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("umio-rados-")
            .tempdir()
            .unwrap()
            .keep();
        let mut runner = Command::new(SCRIPT)
            .args(["run", dir.to_str().unwrap(), objectstore])
            .env("RADOS_CLUSTER_WATCH_PID", std::process::id().to_string())
            .env("RADOS_CLUSTER_REMOVE_DIR", "1")
            // Its own process group: a ^C or `timeout` aimed at the tests
            // reaches the script through its watch, which stops the OSD
            // before the monitor, not the daemons all at once.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The script prints the ceph.conf path once a write went through.
        let mut line = String::new();
        BufReader::new(runner.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let conf = PathBuf::from(line.trim());
        assert!(
            conf.is_file(),
            "{SCRIPT} run {} {objectstore} failed (exit {:?}); its log is in that directory",
            dir.display(),
            runner.try_wait()
        );
        Ok(Cluster { dir, runner, conf })
    }

    /// The memstore cluster the integrity tests share (started by the
    /// first test to ask), or `None` after saying why there is none.
    fn shared() -> Option<&'static Cluster> {
        static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
        match SHARED.get_or_init(|| Cluster::try_start("memstore")) {
            Ok(c) => Some(c),
            Err(why) => {
                eprintln!("SKIPPED: {why}");
                None
            }
        }
    }

    fn script(&self, cmd: &str) {
        let st = Command::new(SCRIPT)
            .args([cmd, self.dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success(), "{SCRIPT} {cmd} failed: {st}");
    }

    fn options(&self, prefix: &str) -> RadosOptions {
        RadosOptions::new(POOL, prefix)
            .conf(&self.conf)
            .object_size(OBJECT)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: signals our own child, which has not been reaped yet.
        unsafe { libc::kill(self.runner.id() as i32, libc::SIGTERM) };
        let _ = self.runner.wait();
    }
}

/// A prefix no other test (or earlier run) uses.
fn unique(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "test/{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    )
}

/// A new object set holding `data`, written through the store itself.
fn create_with(cluster: &Cluster, prefix: &str, data: &[u8]) -> Arc<RadosStore> {
    let store = RadosStore::create(&cluster.options(prefix), data.len() as u64).unwrap();
    store.write_at(0, data).unwrap();
    Arc::new(store)
}

/// Everything an object set holds, read through a fresh connection.
fn contents(cluster: &Cluster, prefix: &str) -> Vec<u8> {
    let store = RadosStore::open(&cluster.options(prefix)).unwrap();
    let mut v = vec![0u8; store.len().unwrap() as usize];
    assert_eq!(store.read_at(0, &mut v).unwrap(), v.len());
    v
}

fn map(rt: &Runtime, store: &Arc<RadosStore>, writable: bool) -> umio::Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .writable(writable)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// The data objects of `prefix` the cluster holds, by the `rados` tool.
fn objects_listed(cluster: &Cluster, prefix: &str) -> Vec<String> {
    let out = Command::new("rados")
        .args(["-c", cluster.conf.to_str().unwrap(), "-p", POOL, "ls"])
        .output()
        .unwrap();
    assert!(out.status.success(), "rados ls: {out:?}");
    let mut v: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(&format!("{prefix}.")))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------
// The integrity suite every store gets (tests/stores.rs), on memstore.
// ---------------------------------------------------------------------

/// Random and sequential reads from two threads, cache an eighth of the
/// data, 65 objects and a partial last page: every byte as written.
#[test]
fn reads_match_under_eviction() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes((4 << 20) + 1234, 11);
    let prefix = unique("reads");
    create_with(cluster, &prefix, &data);
    for ps in [4096, 64 << 10] {
        let what = format!("{ps}-byte pages");
        let store = Arc::new(RadosStore::open(&cluster.options(&prefix)).unwrap());
        let rt = runtime(512 << 10, ps, 2);
        let m = map(&rt, &store, false);
        let s = m.as_slice();
        assert_same(s, &data, &what);
        read_random_slices(s, &data, 200, &what);
        let st = m.stats();
        assert!(st.evictions > 0, "{what}: nothing was evicted: {st:?}");
        assert!(store.stats().reads > 0);
    }
}

/// Writes from two threads on halves of the mapping, reads in between,
/// the cache an eighth of the data: after a last
/// flush a fresh connection reads exactly the model.
#[test]
fn writes_persist_through_eviction_and_flush() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes((2 << 20) + 3000, 12);
    let prefix = unique("writes");
    let store = create_with(cluster, &prefix, &data);
    let rt = runtime(256 << 10, 4096, 2);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    let mut model = data.clone();
    write_random_runs_in_halves(m.as_mut_slice(), &mut model, 300, "mapping");
    m.flush().unwrap();
    assert_eq!(m.mapping().dirty_pages(), 0);
    assert!(m.mapping().stats().evictions > 0, "nothing was evicted");
    assert_same(&contents(cluster, &prefix), &model, "fresh connection");
    m.unmap().unwrap();
}

/// `UncheckedAdvice::Remove` on a RADOS mapping: dirty bytes around the range are
/// kept, the range reads zeros in the mapping and in the objects (across
/// object boundaries), and the length is unchanged.
#[test]
fn remove_zeroes_the_range_in_the_objects() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes((1 << 20) + 1000, 13);
    let prefix = unique("remove");
    let store = create_with(cluster, &prefix, &data);
    let rt = runtime(256 << 10, 4096, 2);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    let mut model = data.clone();
    let dirty = random_bytes(3 * 4096, 14);
    let at = OBJECT as usize - 8192;
    m.as_mut_slice()[at..at + dirty.len()].copy_from_slice(&dirty);
    model[at..at + dirty.len()].copy_from_slice(&dirty);
    let range = at + 4096..at + 4096 + OBJECT as usize;
    m.advise_mut(range.clone(), umio::UncheckedAdvice::Remove)
        .unwrap();
    model[range].fill(0);
    assert_same(m.as_slice(), &model, "the mapping");
    m.flush().unwrap();
    assert_same(&contents(cluster, &prefix), &model, "fresh connection");
    m.unmap().unwrap();
}

/// The last, partial page: bytes past the end read as zero, and writing
/// the part inside the store writes nothing beyond it.
#[test]
fn tail_page_is_zero_past_the_end() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(10_000, 13);
    let prefix = unique("tail");
    let store = create_with(cluster, &prefix, &data);
    let rt = runtime(1 << 20, 4096, 1);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    assert_eq!(m.len(), 10_000);
    // SAFETY: the region spans whole pages; bytes past len up to the page
    // end are mapped and readable.
    let tail = unsafe { std::slice::from_raw_parts(m.as_ptr().add(10_000), 12_288 - 10_000) };
    assert!(tail.iter().all(|&b| b == 0), "bytes past the end");
    m.as_mut_slice()[9_990..].fill(0xEE);
    m.flush().unwrap();
    let mut want = data.clone();
    want[9_990..].fill(0xEE);
    assert_same(&contents(cluster, &prefix), &want, "after flush");
    assert_eq!(store.len().unwrap(), 10_000);
}

/// Two regions over one object set, each with its own runtime and
/// connection: each writes its half and flushes; then each reads the
/// other's half (never read before, so not cached) and sees its writes.
#[test]
fn two_regions_over_one_object_set() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(1 << 20, 14);
    let prefix = unique("two");
    create_with(cluster, &prefix, &data);
    let open = || Arc::new(RadosStore::open(&cluster.options(&prefix)).unwrap());
    let (sa, sb) = (open(), open());
    let (rta, rtb) = (runtime(256 << 10, 4096, 2), runtime(256 << 10, 4096, 2));
    let (mut a, mut b) = (
        map(&rta, &sa, true).into_mut().unwrap(),
        map(&rtb, &sb, true).into_mut().unwrap(),
    );
    let half = data.len() / 2;
    a.as_mut_slice()[..half].fill(0xA1);
    b.as_mut_slice()[half..].fill(0xB2);
    a.flush().unwrap();
    b.flush().unwrap();
    assert!(a.as_slice()[half..].iter().all(|&x| x == 0xB2), "a sees b");
    assert!(b.as_slice()[..half].iter().all(|&x| x == 0xA1), "b sees a");
    let mut want = vec![0xA1; half];
    want.resize(data.len(), 0xB2);
    assert_same(&contents(cluster, &prefix), &want, "fresh connection");
}

/// A 32 MiB mapping over 512 objects of 64 KiB, created empty (sparse):
/// it reads as zeros, a byte written in each object reaches that object
/// (named `<prefix>.<index as 16 hex digits>`), and nothing else is
/// written.
#[test]
fn mapping_larger_than_many_objects() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let prefix = unique("large");
    let len = 32u64 << 20;
    let objects = len / OBJECT;
    let store = Arc::new(RadosStore::create(&cluster.options(&prefix), len).unwrap());
    assert!(objects_listed(cluster, &prefix) == [format!("{prefix}.meta")]);
    let rt = runtime(1 << 20, 16 << 10, 2);
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let mut m = unsafe {
        rt.map(
            MapOptions::new()
                .store(store.clone())
                .writable(true)
                .prefetch(PrefetchKind::default()),
        )
    }
    .unwrap()
    .into_mut()
    .unwrap();
    assert!(m.as_slice().iter().all(|&b| b == 0), "a new store is zeros");
    for i in 0..objects {
        m.as_mut_slice()[(i * OBJECT + i % 1000) as usize] = (i % 251) as u8 + 1;
    }
    m.flush().unwrap();
    let got = contents(cluster, &prefix);
    let mut want = vec![0u8; len as usize];
    for i in 0..objects {
        want[(i * OBJECT + i % 1000) as usize] = (i % 251) as u8 + 1;
    }
    assert_same(&got, &want, "fresh connection");
    // Write-back wrote dirty pages only, each inside one object.
    let st = store.stats();
    assert!(st.bytes_written <= objects * (16 << 10), "{st:?}");
    let listed = objects_listed(cluster, &prefix);
    assert_eq!(listed.len() as u64, objects + 1);
    assert_eq!(listed[0], format!("{prefix}.0000000000000000"));
    assert_eq!(
        listed[objects as usize - 1],
        format!("{prefix}.00000000000001ff")
    );
    assert_eq!(
        store.object_name(len - 1),
        format!("{prefix}.00000000000001ff")
    );
}

/// Prefetch of many ranges puts many requests in flight at once, and the
/// write-back of a large dirty run sends whole objects.
#[test]
fn prefetch_batches_reads_and_writeback_sends_whole_objects() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(4 << 20, 16);
    let prefix = unique("batch");
    create_with(cluster, &prefix, &data);
    let store = Arc::new(RadosStore::open(&cluster.options(&prefix).queue_depth(16)).unwrap());
    let rt = runtime(8 << 20, 4096, 1);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    let ranges: Vec<_> = (0..48).map(|i| i * 81920..i * 81920 + 8192).collect();
    m.mapping().prefetch_ranges(&ranges).unwrap();
    eventually("prefetch", Duration::from_millis(5), || {
        ranges.iter().all(|r| m.mapping().is_resident(r.start))
    });
    assert_eq!(m.mapping().stats().faults, 0, "prefetch faulted");
    let st = store.stats();
    assert!(st.max_in_flight >= 8, "{st:?}");
    assert!(
        st.max_in_flight <= 16,
        "more in flight than the depth: {st:?}"
    );
    for r in &ranges {
        assert_same(&m.as_slice()[r.clone()], &data[r.clone()], "prefetched");
    }
    let before = store.stats();
    m.as_mut_slice()[1 << 20..2 << 20].fill(7);
    m.flush().unwrap();
    let st = store.stats();
    assert_eq!(st.bytes_written - before.bytes_written, 1 << 20, "{st:?}");
    assert_eq!(st.writes - before.writes, (1 << 20) / OBJECT, "{st:?}");
    assert_eq!(st.largest_write, OBJECT, "{st:?}");
    let mut want = data.clone();
    want[1 << 20..2 << 20].fill(7);
    assert_same(&contents(cluster, &prefix), &want, "fresh connection");
}

/// Lengths: a store keeps its length and object size in `.meta`; shrinking
/// removes and truncates objects, growing reads as zeros.
#[test]
fn set_len_removes_objects_and_grows_with_zeros() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(10 * OBJECT as usize, 17);
    let prefix = unique("len");
    let store = create_with(cluster, &prefix, &data);
    assert_eq!(objects_listed(cluster, &prefix).len(), 11);
    store.set_len(3 * OBJECT + 100).unwrap();
    assert_eq!(objects_listed(cluster, &prefix).len(), 5);
    store.set_len(5 * OBJECT).unwrap();
    let reopened = RadosStore::open(&cluster.options(&prefix).object_size(4096)).unwrap();
    assert_eq!(reopened.len().unwrap(), 5 * OBJECT);
    assert_eq!(
        reopened.object_size(),
        OBJECT,
        "the stored object size wins"
    );
    let got = contents(cluster, &prefix);
    let cut = (3 * OBJECT + 100) as usize;
    assert_same(&got[..cut], &data[..cut], "kept");
    assert!(got[cut..].iter().all(|&b| b == 0), "grown part is zeros");
    // A write past the end extends the store.
    store.write_at(6 * OBJECT, b"end").unwrap();
    assert_eq!(contents(cluster, &prefix).len() as u64, 6 * OBJECT + 3);
}

/// Errors are typed and keep librados's errno and the object.
#[test]
fn errors_name_errno_and_object() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let prefix = unique("errors");
    let e = RadosStore::open(&cluster.options(&prefix)).unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    assert_eq!(e.object, format!("{prefix}.meta"));
    let store = RadosStore::create(&cluster.options(&prefix), 4096).unwrap();
    let e = RadosStore::create(&cluster.options(&prefix), 4096).unwrap_err();
    assert_eq!((e.op, e.errno), ("create", libc::EEXIST));
    drop(store);
    let e =
        RadosStore::open(&RadosOptions::new("no-such-pool", "x").conf(&cluster.conf)).unwrap_err();
    assert_eq!((e.op, e.errno), ("open pool", libc::ENOENT));
    assert!(e.to_string().contains("no-such-pool"), "{e}");
    let e =
        RadosStore::open(&RadosOptions::new(POOL, "x").conf("/nonexistent/ceph.conf")).unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    let ro = RadosStore::open(&cluster.options(&prefix).writable(false)).unwrap();
    assert!(!ro.is_writable());
    let e = ro.write_at(0, b"x").unwrap_err();
    assert_eq!((e.op, e.errno), (StoreOp::Write, libc::EBADF));
    RadosStore::remove(&cluster.options(&prefix)).unwrap();
    assert!(objects_listed(cluster, &prefix).is_empty());
}

// ---------------------------------------------------------------------
// The cluster is the shared truth: a second runtime, a second process.
// ---------------------------------------------------------------------

/// After the first runtime flushed, a second runtime (own cache, own
/// connection) maps the set and reads its writes; its own writes, flushed,
/// are what a third connection reads.
#[test]
fn second_runtime_reads_the_first_ones_flushed_writes() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(3 << 20, 18);
    let prefix = unique("second");
    let store = create_with(cluster, &prefix, &data);
    let rt1 = runtime(512 << 10, 4096, 2);
    let mut m1 = map(&rt1, &store, true).into_mut().unwrap();
    let mut model = data.clone();
    let mut rng = Rng::new(5);
    for _ in 0..100 {
        let a = rng.below(model.len() - 5000);
        let v = rng.next() as u8;
        m1.as_mut_slice()[a..a + 5000].fill(v);
        model[a..a + 5000].fill(v);
    }
    m1.flush().unwrap();
    let rt2 = runtime(512 << 10, 64 << 10, 2);
    // Another client name, too (the test cluster has no cephx: any name
    // is let in).
    let other =
        Arc::new(RadosStore::open(&cluster.options(&prefix).client("umio-second")).unwrap());
    let mut m2 = map(&rt2, &other, true).into_mut().unwrap();
    assert_same(m2.as_slice(), &model, "second runtime");
    m2.as_mut_slice()[..4096].fill(0x33);
    m2.flush().unwrap();
    model[..4096].fill(0x33);
    assert_same(&contents(cluster, &prefix), &model, "third connection");
}

/// The child half of `second_process_reads_the_first_ones_writes`: maps
/// the set named in the environment, checks it holds the data the parent
/// flushed, writes its own marker and flushes. Run by that test only.
#[test]
#[ignore = "run by second_process_reads_the_first_ones_writes in a child process"]
fn child_process_maps_the_set() {
    let conf = std::env::var("UMIO_RADOS_CONF").unwrap();
    let prefix = std::env::var("UMIO_RADOS_PREFIX").unwrap();
    let opts = RadosOptions::new(POOL, prefix).conf(conf);
    let store = Arc::new(RadosStore::open(&opts).unwrap());
    let rt = runtime(256 << 10, 4096, 2);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    let mut want = random_bytes(1 << 20, 19);
    want[100_000..200_000].fill(0x5C);
    assert_same(m.as_slice(), &want, "child reads the parent's writes");
    m.as_mut_slice()[500_000..600_000].fill(0xC5);
    m.flush().unwrap();
}

/// A second process maps the set after the first flushed: it reads the
/// first one's writes, and the first reads the second's (through a fresh
/// connection: its own cache holds its own copy of those pages).
#[test]
fn second_process_reads_the_first_ones_writes() {
    let Some(cluster) = Cluster::shared() else {
        return;
    };
    let data = random_bytes(1 << 20, 19);
    let prefix = unique("process");
    let store = create_with(cluster, &prefix, &data);
    let rt = runtime(256 << 10, 4096, 2);
    let mut m = map(&rt, &store, true).into_mut().unwrap();
    m.as_mut_slice()[100_000..200_000].fill(0x5C);
    m.flush().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_maps_the_set", "--ignored"])
        .env("UMIO_RADOS_CONF", &cluster.conf)
        .env("UMIO_RADOS_PREFIX", &prefix)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = data.clone();
    want[100_000..200_000].fill(0x5C);
    want[500_000..600_000].fill(0xC5);
    assert_same(&contents(cluster, &prefix), &want, "after the child");
}

// ---------------------------------------------------------------------
// The OSD dies during a run (bluestore, so that it comes back with its
// data).
// ---------------------------------------------------------------------

/// The child half of `osd_failure_...`: opens the set with a 2 s
/// operation timeout, says "ready" on stdout, waits for a line on stdin
/// (the parent kills the OSD meanwhile), then reads a page that is not
/// resident: the read times out and the fault raises SIGBUS, which kills
/// this process. Run by that test only.
#[test]
#[ignore = "run by osd_failure_faults_time_out_or_wait_flush_fails_nothing_dirty_is_lost"]
fn child_faults_with_the_osd_down() {
    let conf = std::env::var("UMIO_RADOS_CONF").unwrap();
    let prefix = std::env::var("UMIO_RADOS_PREFIX").unwrap();
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit; only this process's core size changes.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let opts = RadosOptions::new(POOL, prefix)
        .conf(conf)
        .op_timeout(Duration::from_secs(2));
    let store = Arc::new(RadosStore::open(&opts).unwrap());
    let rt = runtime(1 << 20, 4096, 2);
    let m = map(&rt, &store, false);
    // libtest may have printed "test <name> ... " on this line already.
    println!("\nchild-ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let x = m.as_slice()[300_000];
    // Not reached: the fault above raised SIGBUS.
    println!("read {x} with the OSD down");
}

/// The OSD is killed (SIGKILL) while three regions are mapped:
/// - a fault on a non-resident page of a store with an operation timeout
///   (2 s) raises SIGBUS once it expires (in a child process);
/// - flush of dirty pages fails with the store error `ETIMEDOUT` at the
///   first dirty run's offset, names its object, and keeps every page dirty;
/// - a fault on a store with no timeout blocks until the OSD is back, then
///   completes with the right bytes;
/// - once the OSD is back, flush succeeds and a fresh connection reads
///   every write: nothing dirty was dropped.
#[test]
fn osd_failure_faults_time_out_or_wait_flush_fails_nothing_dirty_is_lost() {
    let Some(cluster) = Cluster::start("bluestore") else {
        return;
    };
    let data = random_bytes(1 << 20, 20);
    let prefix = unique("failure");
    create_with(&cluster, &prefix, &data);

    // A region with dirty pages, on a store with a 3 s timeout.
    let timed = Arc::new(
        RadosStore::open(&cluster.options(&prefix).op_timeout(Duration::from_secs(3))).unwrap(),
    );
    let rt = runtime(2 << 20, 4096, 2);
    let mut dirty = map(&rt, &timed, true).into_mut().unwrap();
    let mut model = data.clone();
    for at in [70_000usize, 400_000, 900_000] {
        dirty.as_mut_slice()[at..at + 10_000].fill(0xD1);
        model[at..at + 10_000].fill(0xD1);
    }
    let dirty_pages = dirty.mapping().dirty_pages();
    assert!(dirty_pages >= 9, "{dirty_pages}");

    // A region on a store that waits forever; nothing resident yet.
    let patient =
        Arc::new(RadosStore::open(&cluster.options(&prefix).op_timeout(Duration::ZERO)).unwrap());
    let rt2 = runtime(1 << 20, 4096, 2);
    let waiting = map(&rt2, &patient, false);

    // A child process mapping with a 2 s timeout, ready to fault.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_faults_with_the_osd_down", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env("UMIO_RADOS_CONF", &cluster.conf)
        .env("UMIO_RADOS_PREFIX", &prefix)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("child-ready") {
        line.clear();
        assert!(
            child_out.read_line(&mut line).unwrap() > 0,
            "child died early"
        );
    }

    cluster.script("osd-kill");

    // SIGBUS in the child, after its 2 s timeout.
    let t = Instant::now();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let st = child.wait().unwrap();
    let took = t.elapsed();
    assert_eq!(st.signal(), Some(libc::SIGBUS), "child: {st}");
    assert!(took >= Duration::from_millis(1900), "SIGBUS after {took:?}");

    // Flush fails with the timeout, names the first dirty page's object,
    // and keeps everything dirty.
    let t = Instant::now();
    match dirty.flush() {
        Err(Error::Store(StoreError { op, offset, errno })) => {
            assert_eq!((op, errno), (StoreOp::Write, libc::ETIMEDOUT));
            let runs = [17 * 4096, 97 * 4096, 219 * 4096];
            assert!(runs.contains(&offset), "{offset} starts no dirty run");
        }
        r => panic!("flush with the OSD down gave {r:?}"),
    }
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(dirty.mapping().dirty_pages(), dirty_pages);
    let failure = timed.last_failure().unwrap();
    assert_eq!(failure.errno, libc::ETIMEDOUT);
    assert!(
        failure.object.starts_with(&format!("{prefix}.")),
        "{failure}"
    );

    // A fault with no timeout waits for the OSD.
    let (tx, rx) = mpsc::channel();
    let addr = waiting.as_ptr() as usize;
    let reader = std::thread::spawn(move || {
        // SAFETY: the mapping outlives this thread (joined below, before
        // `waiting` is dropped) and is 1 MiB long.
        let s = unsafe { std::slice::from_raw_parts(addr as *const u8, 1 << 20) };
        tx.send(s[600_000..610_000].to_vec()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(3)).is_err(),
        "a fault was served with the OSD down"
    );

    cluster.script("osd-start");
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the waiting fault did not resume once the OSD was back");
    reader.join().unwrap();
    assert_same(&got, &data[600_000..610_000], "resumed fault");

    dirty.flush().unwrap();
    assert_eq!(dirty.mapping().dirty_pages(), 0);
    assert_same(
        &contents(&cluster, &prefix),
        &model,
        "after the OSD came back",
    );
    drop(waiting);
    drop(dirty);
}
