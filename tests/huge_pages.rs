//! Huge pages: asynchronous promotion of 2 MiB ranges (with writers
//! running, with eviction, never twice at once), and hugetlbfs regions with
//! the pool reserved and empty.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use umio::backends::FileStore;
use umio::{
    Advice, Error, MapOptions, Mapping, PrefetchKind, PromoteKind, Runtime, Store, UncheckedAdvice,
};

use common::{Rng, assert_same, random_bytes, rw_file_with};

const MIB: usize = 1 << 20;

fn runtime(cache: u64) -> Runtime {
    Runtime::builder()
        .cache_bytes(cache)
        .page_size(4096)
        .fillers(2)
        .build()
        .unwrap()
}

fn map(rt: &Runtime, file: &std::fs::File, opts: MapOptions) -> Mapping {
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    unsafe {
        rt.map(
            opts.store(Arc::new(FileStore::new(file).unwrap()))
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// Waits until `cond`, up to 20 s.
fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(120), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kilobytes of anonymous huge pages mapping `[addr, addr + len)`, from
/// /proc/self/smaps (the VMA holding it).
fn anon_huge_kb(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = a <= addr && addr < b;
            continue;
        }
        if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    0
}

/// Promote-always on a writable region, writers and readers running while
/// ranges are promoted: every byte as the model says, in memory and, after
/// a flush, in the file. The ranges are really mapped by huge pages.
#[test]
fn promotion_keeps_every_byte_with_writers_running() {
    let len = 16 * MIB;
    let data = random_bytes(len, 21);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime(64 << 20);
    let mut m = map(
        &rt,
        &file,
        MapOptions::new()
            .writable(true)
            .promote(PromoteKind::Always),
    )
    .into_mut()
    .unwrap();
    let mut model = data.clone();
    let quarter = len / 4;
    {
        let s = m.as_mut_slice();
        let parts: Vec<(&mut [u8], &mut [u8])> = s
            .chunks_mut(quarter)
            .zip(model.chunks_mut(quarter))
            .collect();
        std::thread::scope(|sc| {
            for (t, (mem, model)) in parts.into_iter().enumerate() {
                sc.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 1);
                    for i in 0..20_000 {
                        let a = rng.below(mem.len());
                        if i % 3 == 0 {
                            let v = rng.next() as u8;
                            mem[a] = v;
                            model[a] = v;
                        } else {
                            assert_eq!(mem[a], model[a], "thread {t}, byte {a}");
                        }
                    }
                });
            }
        });
        assert_same(s, &model, "after the writers");
    }
    wait("promotions to finish", || {
        let st = rt.stats();
        st.promotions == st.promotions_done + st.promotions_not_resident + st.promotions_refused
    });
    let st = rt.stats();
    assert!(st.promotions_done >= 4, "{st:?}");
    // The kernel may have had no free huge page for a range just then
    // (ENOMEM: free memory fragmented on a busy machine); it refuses
    // nothing else.
    assert!(
        st.promotions_refused == 0 || st.last_promotion_errno == libc::ENOMEM as u64,
        "the kernel refused: {st:?}"
    );
    assert!(m.mapping().promoted_ranges() >= 4);
    assert!(
        anon_huge_kb(m.as_ptr() as usize) >= 4 * 2048,
        "promoted ranges are not huge pages"
    );
    // Writes after promotion, then everything reaches the file.
    m.as_mut_slice()[5 * MIB + 7] = 0xEE;
    model[5 * MIB + 7] = 0xEE;
    assert_same(m.as_slice(), &model, "after promotion");
    m.flush().unwrap();
    assert_same(
        &std::fs::read(tmp.path()).unwrap(),
        &model,
        "file after flush",
    );
}

/// A range promoted by advice, then written once: the whole range is dirty
/// (dirty tracking is per 2 MiB from then on), written back whole, durable
/// after flush, and the huge page stays whole.
#[test]
fn promoted_range_is_dirtied_and_written_back_whole() {
    let len = 8 * MIB;
    let data = random_bytes(len, 22);
    let (tmp, file) = rw_file_with(&data);
    let rt = runtime(64 << 20);
    let mut m = map(&rt, &file, MapOptions::new().writable(true))
        .into_mut()
        .unwrap();
    m.mapping().advise(2 * MIB..4 * MIB, Advice::Huge).unwrap();
    for attempt in 0.. {
        let before = rt.stats();
        assert_eq!(m.as_slice()[2 * MIB + 100], data[2 * MIB + 100]);
        if promotion_done(&rt, &before, attempt) {
            break;
        }
        m.advise_mut(2 * MIB..4 * MIB, UncheckedAdvice::PageOut)
            .unwrap();
    }
    // Done, not only marked promoted: a range counts as promoted while its
    // pages are still held busy, and a flush meanwhile skips them.
    wait("the advised range to be promoted", || {
        m.mapping().promoted_ranges() == 1 && rt.stats().promotions_done == 1
    });
    // Promotion made the range writable without faults: all 512 dirty.
    m.flush().unwrap();
    assert_eq!(m.mapping().dirty_pages(), 0);
    let before = m.mapping().stats().bytes_written;
    m.as_mut_slice()[3 * MIB] = 0x42;
    // With asynchronous dirty tracking the kernel resolves the write to
    // the write-protected huge page itself, splitting it: the page written
    // is found dirty, alone (docs/ARCHITECTURE.md, "Asynchronous dirty
    // tracking").
    let sync = rt.dirty_tracking() == umio::DirtyTracking::Sync;
    let (dirty, written) = if sync { (512, 2 * MIB) } else { (1, 4096) };
    assert_eq!(
        m.mapping().dirty_pages(),
        dirty,
        "one write dirties the promoted range"
    );
    assert_eq!(m.mapping().promoted_ranges(), 1, "the range stays promoted");
    m.flush().unwrap();
    assert_eq!(m.mapping().stats().bytes_written - before, written as u64);
    let mut want = data.clone();
    want[3 * MIB] = 0x42;
    assert_same(&std::fs::read(tmp.path()).unwrap(), &want, "file");
    // Outside the advised range nothing is promoted.
    assert_eq!(m.as_slice()[6 * MIB], data[6 * MIB]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(m.mapping().promoted_ranges(), 1);
    let st = rt.stats();
    assert!(st.promotions <= 1 + st.promotions_refused, "{st:?}");
}

/// Promote-sequential with a cache of a quarter of the data: scans promote
/// ranges, eviction takes promoted ranges out whole, bytes stay right;
/// a range is never promoted twice at once (promotions never exceed the
/// ranges times the passes).
#[test]
fn promoted_ranges_are_evicted_and_never_promoted_twice_at_once() {
    let len = 32 * MIB;
    let data = random_bytes(len, 23);
    let (_tmp, file) = rw_file_with(&data);
    let rt = runtime(8 << 20);
    let m = map(
        &rt,
        &file,
        MapOptions::new().promote(PromoteKind::Sequential),
    );
    let s = m.as_slice();
    for pass in 0..3 {
        for start in (0..len).step_by(256 << 10) {
            assert_same(
                &s[start..start + (256 << 10)],
                &data[start..start + (256 << 10)],
                &format!("pass {pass}"),
            );
        }
    }
    let st = rt.stats();
    assert!(st.promotions_done > 0, "{st:?}");
    assert!(st.evicted_pages > 0, "{st:?}");
    assert!(st.promotions <= 3 * 16, "{st:?}");
    assert_same(m.as_slice(), &data, "after the passes");
    drop(m);

    // Threads hammering one range at once: one promotion. A runtime of its
    // own, whose cache holds the range, so that nothing evicts it (which
    // would let it be promoted again, one promotion after the other) and no
    // promotion the passes queued (the background thread may still be
    // working through them on a busy machine) is counted here.
    let rt = runtime(8 << 20);
    let m = map(
        &rt,
        &file,
        MapOptions::new().promote(PromoteKind::Sequential),
    );
    let s = m.as_slice();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (s, data, stop) = (&s, &data, &stop);
            sc.spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let a = 20 * MIB + (i * 4096) % (2 * MIB);
                    assert_eq!(s[a], data[a]);
                    i += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
    });
    let st = rt.stats();
    assert!(st.promotions <= 1, "one range promoted twice: {st:?}");
    assert_same(s, &data, "at the end");
}

/// Sets `vm.nr_hugepages` for the test's life.
struct HugePool {
    was: String,
}

/// The lock every test reading or changing the system's hugetlb pool takes
/// (the C tests' `lock_hugetlb_pool` too), held while it lives: two suites
/// running at once would otherwise shrink the pool under each other's
/// hugetlb regions (whose faults then fail with SIGBUS, as under the
/// kernel) or see a pool they did not expect.
struct PoolLock(#[allow(dead_code)] std::fs::File);

impl PoolLock {
    fn acquire() -> PoolLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open("/tmp/umio-hugetlb-pool.lock")
            .unwrap();
        // SAFETY: flock on a descriptor we own; it blocks until granted.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
        PoolLock(f)
    }
}

const NR: &str = "/proc/sys/vm/nr_hugepages";

impl HugePool {
    fn set(n: usize) -> HugePool {
        let was = std::fs::read_to_string(NR).unwrap();
        std::fs::write(NR, n.to_string()).unwrap();
        HugePool { was }
    }
}

impl Drop for HugePool {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.was.trim());
    }
}

fn free_huge() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// hugetlbfs regions: with pages reserved, one fault fills a 2 MiB page,
/// eviction and write-back work; with the pool empty, mapping fails
/// cleanly or falls back, as asked. One test: it changes the system pool.
#[test]
fn hugetlb_regions_with_and_without_reserved_pages() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: raising vm.nr_hugepages needs root");
        return;
    }
    let len = 24 * MIB + 1000;
    let data = random_bytes(len, 24);
    let (tmp, file) = rw_file_with(&data);
    let _lock = PoolLock::acquire();
    {
        let _pool = HugePool::set(8);
        if free_huge() < 8 {
            eprintln!("skipped: the kernel gave only {} huge pages", free_huge());
            return;
        }
        let rt = Runtime::builder()
            .cache_bytes(8 << 20)
            .fillers(2)
            .build()
            .unwrap();
        let mut m = map(&rt, &file, MapOptions::new().writable(true).hugetlb(false))
            .into_mut()
            .unwrap();
        assert!(m.mapping().is_hugetlb());
        assert_eq!(m.mapping().page_size(), 2 * MIB);
        assert_same(m.as_slice(), &data, "hugetlb read");
        let st = rt.stats();
        assert!(st.huge_faults >= 13 && st.huge_faults < 40, "{st:?}");
        assert!(
            st.evicted_pages > 0,
            "a 24 MiB file through an 8 MiB cache: {st:?}"
        );
        m.as_mut_slice()[MIB..3 * MIB].fill(9);
        m.as_mut_slice()[len - 1] = 10;
        m.flush().unwrap();
        let mut want = data.clone();
        want[MIB..3 * MIB].fill(9);
        want[len - 1] = 10;
        assert_same(&std::fs::read(tmp.path()).unwrap(), &want, "hugetlb file");
        m.unmap().unwrap();
    }
    let _pool = HugePool::set(0);
    if free_huge() != 0 {
        eprintln!("skipped: huge pages in use elsewhere");
        return;
    }
    let rt = runtime(8 << 20);
    let store = Arc::new(FileStore::new(&file).unwrap());
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe { rt.map(MapOptions::new().store(store.clone()).hugetlb(false)) }.unwrap_err();
    assert!(matches!(e, Error::HugePagesUnavailable), "{e}");
    assert_eq!(e.errno(), libc::ENOMEM);
    assert!(e.to_string().contains("nr_hugepages"));
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let m = unsafe { rt.map(MapOptions::new().store(store.clone()).hugetlb(true)) }.unwrap();
    assert!(!m.is_hugetlb());
    assert_eq!(m.page_size(), 2 * MIB);
    let mut want = vec![0u8; len];
    assert_eq!(store.read_at(0, &mut want).unwrap(), len);
    assert_same(m.as_slice(), &want, "fallback read");
}

/// Reads every byte of `m` into a vector.
fn read_all(m: &Mapping) -> Vec<u8> {
    // SAFETY: the mapping is readable for its length while `m` lives.
    unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) }.to_vec()
}

/// Maps an 8 MiB file with 64 KiB pages and reads it whole, then maps a
/// `large_len`-byte file with `large` options and runs `work` on that
/// mapping and its data. Returns the small region's pages and how many of
/// them were still resident after `work`, with the runtime's stats then;
/// the small region must still read back right.
fn beside_small_pages(
    rt: &Runtime,
    large_len: usize,
    large: MapOptions,
    work: impl FnOnce(&Mapping, &[u8]),
) -> (usize, usize, umio::Stats) {
    let small_data = random_bytes(8 * MIB, 71);
    let large_data = random_bytes(large_len, 72);
    let (_t1, small_file) = common::file_with(&small_data);
    let (_t2, large_file) = common::file_with(&large_data);
    let small = map(rt, &small_file, MapOptions::new().page_size(64 << 10));
    let large = map(rt, &large_file, large);
    assert_same(&read_all(&small), &small_data, "small pages, first read");
    let pages = small_data.len() / (64 << 10);
    assert_eq!(small.resident_pages(), pages, "all small pages read");
    work(&large, &large_data);
    let left = small.resident_pages();
    let stats = rt.stats();
    assert_same(&read_all(&small), &small_data, "small pages, read again");
    (pages, left, stats)
}

/// A 48 MiB scan through 2 MiB pages (more than the cache holds) beside
/// the small region, every byte checked.
fn scan_beside_small_pages(rt: &Runtime) -> (usize, usize, umio::Stats) {
    let opts = MapOptions::new().page_size(2 * MIB);
    beside_small_pages(rt, 48 * MIB, opts, |large, data| {
        assert_same(&read_all(large), data, "2 MiB pages, scan");
    })
}

#[test]
fn huge_page_pool_keeps_scans_from_evicting_small_pages() {
    // Two pools: 16 MiB for small pages, 8 MiB (4 huge pages) for 2 MiB
    // pages. FIFO would evict the small pages first (they are oldest) if
    // they shared a pool with the scan.
    let rt = Runtime::builder()
        .cache_bytes(16 * MIB as u64)
        .huge_cache_bytes(8 * MIB as u64)
        .eviction(umio::PolicyKind::Fifo)
        .fillers(2)
        .build()
        .unwrap();
    assert_eq!(rt.huge_cache_bytes(), Some(8 * MIB as u64));
    let (pages, left, stats) = scan_beside_small_pages(&rt);
    assert_eq!(left, pages, "the scan evicted small pages: {stats:?}");
    assert!(
        stats.evicted_pages >= 20,
        "48 MiB of 2 MiB pages through an 8 MiB pool evicts: {stats:?}"
    );
    assert!(
        stats.huge_pool_bytes <= 8 * MIB as u64,
        "the huge pool stays within its bound: {stats:?}"
    );
    assert!(
        stats.resident_bytes >= stats.huge_pool_bytes + 8 * MIB as u64,
        "resident bytes count both pools: {stats:?}"
    );

    // The control: one pool of the same 24 MiB. The scan evicts the small
    // pages (FIFO: oldest first), which is what the huge pool prevents.
    let rt = Runtime::builder()
        .cache_bytes(24 * MIB as u64)
        .eviction(umio::PolicyKind::Fifo)
        .fillers(2)
        .build()
        .unwrap();
    assert_eq!(rt.huge_cache_bytes(), None);
    let (pages, left, stats) = scan_beside_small_pages(&rt);
    assert!(
        left < pages,
        "one shared pool: the scan should have evicted small pages ({left} of {pages} left): {stats:?}"
    );
    assert_eq!(stats.huge_pool_bytes, 0);
}

#[test]
fn huge_page_pool_is_validated() {
    let e = Runtime::builder()
        .cache_bytes(16 * MIB as u64)
        .huge_cache_bytes(6 * MIB as u64)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // A region of 2 MiB pages must fit four pages in the huge pool, not in
    // the (smaller) regular one.
    let rt = Runtime::builder()
        .cache_bytes(MIB as u64)
        .page_size(4096)
        .huge_cache_bytes(8 * MIB as u64)
        .build()
        .unwrap();
    let data = random_bytes(4 * MIB, 73);
    let (_t, f) = common::file_with(&data);
    let m = map(&rt, &f, MapOptions::new().page_size(2 * MIB));
    assert_same(&read_all(&m), &data, "2 MiB pages in the huge pool");
    // SAFETY: nothing but this mapping changes the store while a slice of it lives.
    let e = unsafe {
        rt.map(
            MapOptions::new()
                .store(Arc::new(FileStore::new(&f).unwrap()))
                .page_size(512 << 10),
        )
    }
    .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(_)),
        "512 KiB pages go to the 1 MiB regular pool: {e:?}"
    );
}

/// Promotes the 2 MiB ranges of a 32 MiB region of 4 KiB pages one after
/// another (a fault on each range's first page, then waiting for its
/// promotion) beside the small region.
/// Waits for the promotion a touch just asked for (`before`: the stats
/// before the touch): true once done. The kernel may have had no huge page
/// to give just then (`MADV_COLLAPSE` fails with ENOMEM where free memory
/// is fragmented, as on a busy machine): then memory is compacted and
/// false returned, for the caller to page the range out and touch it
/// again, up to `attempt` 5. Any other refusal fails the test.
fn promotion_done(rt: &Runtime, before: &umio::Stats, attempt: u32) -> bool {
    wait("the range's promotion", || {
        let st = rt.stats();
        st.promotions_done > before.promotions_done
            || st.promotions_refused > before.promotions_refused
    });
    let st = rt.stats();
    if st.promotions_done > before.promotions_done {
        return true;
    }
    assert!(
        st.last_promotion_errno == libc::ENOMEM as u64 && attempt < 5,
        "the kernel refused: {st:?}"
    );
    let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
    false
}

/// Touches byte `at` of `large` (the first of a 2 MiB range not resident,
/// promote-always) and waits for the range's promotion, paging the range
/// out and touching it again if the kernel had no huge page for it
/// ([`promotion_done`]).
fn promote_on_touch(rt: &Runtime, large: &Mapping, at: usize, want: u8) {
    for attempt in 0.. {
        let before = rt.stats();
        assert_eq!(large.as_slice()[at], want);
        if promotion_done(rt, &before, attempt) {
            return;
        }
        // SAFETY: the mapping is read-only: nothing of it is written, and
        // no slice of it is held across the call.
        unsafe { large.advise_shared(at..at + 2 * MIB, UncheckedAdvice::PageOut) }.unwrap();
    }
}

fn promote_beside_small_pages(rt: &Runtime) -> (usize, usize, umio::Stats) {
    // No read-ahead: its windows of small pages, read ahead of the touches
    // into the regular pool, would evict the small region there (FIFO: its
    // pages are the oldest) whenever the prefetch threads got ahead of the
    // promotions, which is not what these tests measure. A promotion reads
    // its whole range itself.
    let opts = MapOptions::new()
        .page_size(4096)
        .prefetch(PrefetchKind::None)
        .promote(PromoteKind::Always);
    beside_small_pages(rt, 32 * MIB, opts, |large, data| {
        for chunk in 0..16 {
            let at = chunk * 2 * MIB;
            promote_on_touch(rt, large, at, data[at]);
            assert_same(
                &large.as_slice()[at..at + 2 * MIB],
                &data[at..at + 2 * MIB],
                &format!("promoted range {chunk}"),
            );
        }
        assert!(large.promoted_ranges() > 0, "{:?}", rt.stats());
        if rt.huge_cache_bytes().is_some() {
            // Room is made a range at a time: the pool's evictor stops at
            // its low watermark (70 %: 5.6 MiB of 8), so it ends at 4 or 6
            // MiB, never empty. (Batches of 16 victims, each a whole
            // range, emptied it.)
            wait("the huge pool below its high watermark", || {
                rt.stats().huge_pool_bytes <= 6 * MIB as u64
            });
            std::thread::sleep(Duration::from_millis(200));
            let st = rt.stats();
            assert!(
                st.huge_pool_bytes >= 4 * MIB as u64 && large.promoted_ranges() >= 2,
                "the huge pool was emptied to make room for one range: {st:?}"
            );
        }
    })
}

#[test]
fn promoted_ranges_move_to_the_huge_page_pool() {
    // The regular pool holds the small region and little more; the huge
    // pool four huge pages. Each promoted range moves its 2 MiB to the
    // huge pool, whose policy evicts older promoted ranges whole.
    let rt = Runtime::builder()
        .cache_bytes(12 * MIB as u64)
        .huge_cache_bytes(8 * MIB as u64)
        .eviction(umio::PolicyKind::Fifo)
        .fillers(2)
        .build()
        .unwrap();
    let (pages, left, st) = promote_beside_small_pages(&rt);
    assert_eq!(left, pages, "promotions evicted small pages: {st:?}");
    assert!(st.promotions_done >= 16, "{st:?}");
    assert!(
        st.huge_pool_bytes > 0 && st.huge_pool_bytes <= 8 * MIB as u64,
        "promoted ranges are charged to the huge pool, within its bound: {st:?}"
    );
    assert!(
        st.evicted_pages >= 4 * 512,
        "older promoted ranges were evicted from the huge pool: {st:?}"
    );

    // The control: without a huge pool, promoted ranges stay in the one
    // pool and push the small pages out (FIFO: oldest first).
    let rt = Runtime::builder()
        .cache_bytes(20 * MIB as u64)
        .eviction(umio::PolicyKind::Fifo)
        .fillers(2)
        .build()
        .unwrap();
    let (pages, left, st) = promote_beside_small_pages(&rt);
    assert!(
        left < pages,
        "one pool: promotions should have evicted small pages ({left} of {pages} left): {st:?}"
    );
}

#[test]
fn two_mib_pages_of_ordinary_memory_track_first_writes_through_eviction() {
    let len = 24 * MIB;
    let data = random_bytes(len, 91);
    let (tmp, file) = rw_file_with(&data);
    let mut model = data.clone();
    // First with room for every page, then with room for a third of them.
    for (round, cache) in [(0u8, 64 * MIB), (1, 8 * MIB)] {
        let rt = Runtime::builder()
            .cache_bytes(cache as u64)
            .fillers(2)
            .build()
            .unwrap();
        let mut m = map(
            &rt,
            &file,
            MapOptions::new().page_size(2 * MIB).writable(true),
        )
        .into_mut()
        .unwrap();
        assert_same(m.as_slice(), &model, &format!("round {round}: read"));
        // Writes to pages filled by reads (write-protected, so that the
        // first write is seen) reach the file, through eviction too.
        for (i, at) in (0..len).step_by(MIB + 4096).enumerate() {
            let v = (i as u8).wrapping_add(round * 100);
            m.as_mut_slice()[at] = v;
            model[at] = v;
        }
        // With asynchronous dirty tracking, the pages written are found
        // when umio looks (`dirty_pages` does).
        let _ = m.mapping().dirty_pages();
        let st = rt.stats();
        if round == 0 {
            assert_eq!(st.evicted_pages, 0, "{st:?}");
            assert_eq!(
                st.first_writes(),
                12,
                "every page's first write was seen: {st:?}"
            );
        } else {
            // Written back on their way out, or at the dirty limit first.
            assert!(
                st.evicted_dirty_pages + st.limit_written_pages > 0,
                "{st:?}"
            );
        }
        assert_same(
            m.as_slice(),
            &model,
            &format!("round {round}: after writes"),
        );
        m.flush().unwrap();
        assert_same(
            &std::fs::read(tmp.path()).unwrap(),
            &model,
            &format!("round {round}: the file"),
        );
    }
}
