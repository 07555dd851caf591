//! The backend integrity suite (as `tests/stores.rs` runs it on the file
//! backends) against SPDK bdevs: a malloc bdev (DMA-able memory) and an
//! aio bdev over a file, both created by a JSON configuration on the one
//! SPDK environment of this process. Then what is particular to SPDK:
//! fixed length, block-aligned writes, many requests in flight, typed
//! errors for bad bdev names and configurations.
//!
//! Needs the `spdk` feature and an SPDK build (`SPDK_DIR`, see
//! `crates/backends/SPDK.md`); runs without hugepages and without PCI
//! devices.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use umio::backends::{
    FaultTrigger, FaultyStore, IoRequest, SpdkEnv, SpdkEnvOptions, SpdkError, SpdkStore, StoreOp,
};
use umio::{Error, MapOptions, PrefetchKind, Runtime, Store, StoreError};

use common::{
    Rng, assert_same, eventually, random_bytes, read_random_slices, runtime,
    write_random_runs_in_halves,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Malloc,
    Aio,
}

const ALL: [Kind; 2] = [Kind::Malloc, Kind::Aio];

/// The process's SPDK environment: test threads share it.
fn env() -> &'static SpdkEnv {
    SpdkEnv::get_or_start(SpdkEnvOptions::new().mem_mib(1024)).expect("SPDK starts")
}

/// A bdev of `kind` holding `data` (a multiple of 4 KiB), with a name of
/// its own, opened as a store. The aio bdev's file is returned too, to
/// check what reached it.
struct Bdev {
    store: Arc<SpdkStore>,
    file: Option<tempfile::NamedTempFile>,
}

fn bdev(kind: Kind, data: &[u8], writable: bool) -> Bdev {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    assert_eq!(data.len() % 4096, 0);
    let env = env();
    let name = format!("{kind:?}{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let (method, params, file) = match kind {
        Kind::Malloc => (
            "bdev_malloc_create",
            format!(
                r#"{{"name": "{name}", "num_blocks": {}, "block_size": 4096}}"#,
                data.len() / 4096
            ),
            None,
        ),
        Kind::Aio => {
            // Not tmpfs: the aio bdev opens its file with O_DIRECT.
            let tmp = tempfile::NamedTempFile::new_in(std::env::temp_dir()).unwrap();
            std::fs::write(tmp.path(), data).unwrap();
            let p = format!(
                r#"{{"name": "{name}", "filename": "{}", "block_size": 4096}}"#,
                tmp.path().display()
            );
            ("bdev_aio_create", p, Some(tmp))
        }
    };
    env.load_config_json(&format!(
        r#"{{"subsystems": [{{"subsystem": "bdev", "config": [{{"method": "{method}", "params": {params}}}]}}]}}"#
    ))
    .unwrap();
    let store = Arc::new(SpdkStore::open(env, &name, true).unwrap());
    if kind == Kind::Malloc {
        store.write_at(0, data).unwrap();
    }
    let store = if writable {
        store
    } else {
        // A second, read-only descriptor of the same bdev.
        Arc::new(SpdkStore::open(env, &name, false).unwrap())
    };
    assert_eq!(store.len().unwrap(), data.len() as u64);
    Bdev { store, file }
}

/// Everything the bdev holds, read through the store itself.
fn contents(store: &dyn Store) -> Vec<u8> {
    let mut v = vec![0u8; store.len().unwrap() as usize];
    assert_eq!(store.read_at(0, &mut v).unwrap(), v.len());
    v
}

/// What reached the aio bdev's file.
fn check_file(b: &Bdev, want: &[u8], what: &str) {
    if let Some(f) = &b.file {
        assert_same(&std::fs::read(f.path()).unwrap(), want, what);
    }
}

fn map(rt: &Runtime, store: Arc<dyn Store>, writable: bool) -> umio::Mapping {
    // SAFETY: nothing but this mapping changes the bdev while a slice of it
    // lives.
    unsafe {
        rt.map(
            MapOptions::new()
                .store(store)
                .writable(writable)
                .prefetch(PrefetchKind::None),
        )
    }
    .unwrap()
}

/// The store reads back what the bdev was given, whole and in pieces
/// that are not block-aligned.
#[test]
fn store_reads_back_its_contents() {
    let data = random_bytes(1 << 20, 1);
    for kind in ALL {
        let what = format!("{kind:?}");
        let b = bdev(kind, &data, false);
        assert_same(&contents(&*b.store), &data, &what);
        for (off, len) in [
            (1usize, 100usize),
            (4095, 2),
            (8000, 70_000),
            (1_048_000, 576),
        ] {
            let mut buf = vec![0u8; len];
            assert_eq!(
                b.store.read_at(off as u64, &mut buf).unwrap(),
                len,
                "{what}"
            );
            assert_same(&buf, &data[off..off + len], &what);
        }
        // Short at the end, nothing past it.
        let mut buf = vec![0xFFu8; 8192];
        assert_eq!(b.store.read_at((1 << 20) - 4096, &mut buf).unwrap(), 4096);
        assert_same(&buf[..4096], &data[(1 << 20) - 4096..], &what);
        assert!(
            buf[4096..].iter().all(|&x| x == 0xFF),
            "{what}: bytes past the read"
        );
        assert_eq!(b.store.read_at(1 << 20, &mut buf).unwrap(), 0, "{what}");
    }
}

/// Random and sequential reads from two threads, cache an eighth of the
/// data: every byte as in the bdev.
#[test]
fn reads_match_under_eviction() {
    let data = random_bytes(4 << 20, 11);
    for kind in ALL {
        for ps in [4096, 64 << 10] {
            let what = format!("{kind:?}, {ps}-byte pages");
            let b = bdev(kind, &data, false);
            let rt = runtime(512 << 10, ps, 2);
            let m = map(&rt, b.store.clone(), false);
            let s = m.as_slice();
            assert_same(s, &data, &what);
            read_random_slices(s, &data, 300, &what);
            let st = m.stats();
            assert!(st.evictions > 0, "{what}: nothing was evicted: {st:?}");
        }
    }
}

/// Writes from two threads on halves of the mapping, reads in between,
/// the cache an eighth of the data: after a flush the bdev (read through
/// the store) and the aio bdev's file hold exactly the model.
#[test]
fn writes_persist_through_eviction_and_flush() {
    let data = random_bytes(2 << 20, 12);
    for kind in ALL {
        let what = format!("{kind:?}");
        let b = bdev(kind, &data, true);
        let rt = runtime(256 << 10, 4096, 2);
        let mut m = map(&rt, b.store.clone(), true).into_mut().unwrap();
        let mut model = data.clone();
        write_random_runs_in_halves(m.as_mut_slice(), &mut model, 400, &what);
        m.flush().unwrap();
        assert_eq!(m.mapping().dirty_pages(), 0, "{what}");
        assert_same(&contents(&*b.store), &model, &what);
        check_file(&b, &model, &what);
        assert!(
            m.mapping().stats().evictions > 0,
            "{what}: nothing was evicted"
        );
        // Both bdev types have a flush (aio's is fdatasync, malloc's a
        // no-op): sync must have sent it.
        assert!(b.store.flushes(), "{what}");
        let st = b.store.stats();
        assert!(st.writes > 0, "{what}: {st:?}");
        assert!(
            st.flushes > 0,
            "{what}: flush did not reach the bdev: {st:?}"
        );
        m.unmap().unwrap();
    }
}

/// A failed write-back names the operation and the offset, the page stays
/// dirty, and a later flush that succeeds writes it to the bdev.
#[test]
fn failed_write_back_names_offset_and_keeps_data() {
    let data = random_bytes(256 << 10, 14);
    for kind in ALL {
        let what = format!("{kind:?}");
        let b = bdev(kind, &data, true);
        let faulty = Arc::new(FaultyStore::new(b.store.clone()));
        faulty.fail_writes(FaultTrigger::Offsets(65536..65537), libc::EIO);
        let store: Arc<dyn Store> = faulty.clone();
        let rt = runtime(1 << 20, 4096, 1);
        let mut m = map(&rt, store, true).into_mut().unwrap();
        m.as_mut_slice()[65536 + 10] = 0x5A;
        m.as_mut_slice()[200_000] = 0xA5;
        match m.flush() {
            Err(Error::Store(StoreError { offset, errno, .. })) => {
                assert_eq!((offset, errno), (65536, libc::EIO), "{what}");
            }
            r => panic!("{what}: flush gave {r:?}"),
        }
        assert_eq!(m.mapping().dirty_pages(), 1, "{what}");
        faulty.fail_writes(FaultTrigger::Never, libc::EIO);
        m.flush().unwrap();
        let mut want = data.clone();
        want[65536 + 10] = 0x5A;
        want[200_000] = 0xA5;
        assert_same(&contents(&*b.store), &want, &what);
        check_file(&b, &want, &what);
    }
}

/// A mapping over a whole 64 MiB bdev with a 1 MiB cache: a sequential
/// pass reads every byte right, prefetching disjoint ranges puts many
/// requests in flight at once, and one large dirty run goes back in one
/// batch.
#[test]
fn whole_bdev_mapping_batches_requests() {
    let data = random_bytes(64 << 20, 16);
    for kind in ALL {
        let what = format!("{kind:?}");
        let b = bdev(kind, &data, true);
        let rt = runtime(1 << 20, 4096, 2);
        let mut m = map(&rt, b.store.clone(), true).into_mut().unwrap();
        assert_eq!(m.len(), data.len(), "{what}");
        for (i, chunk) in m.as_slice().chunks(1 << 20).enumerate() {
            assert_same(chunk, &data[i << 20..(i + 1) << 20], &what);
        }
        let ranges: Vec<_> = (0..32).map(|i| i * 131072..i * 131072 + 8192).collect();
        let before = b.store.stats().largest_batch;
        m.mapping().prefetch_ranges(&ranges).unwrap();
        eventually(&what, Duration::from_millis(5), || {
            ranges.iter().all(|r| m.mapping().is_resident(r.start))
        });
        for r in &ranges {
            assert_same(&m.as_slice()[r.clone()], &data[r.clone()], &what);
        }
        let st = b.store.stats();
        assert!(
            st.largest_batch >= 8 && st.largest_batch >= before,
            "{what}: prefetch was not batched: {st:?}"
        );
        assert!(env().max_in_flight() >= 8, "{what}: never 8 in flight");
        m.as_mut_slice()[..512 << 10].fill(7);
        m.flush().unwrap();
        let mut want = data.clone();
        want[..512 << 10].fill(7);
        assert_same(&contents(&*b.store), &want, &what);
        check_file(&b, &want, &what);
    }
}

/// A batch straight to the store: many requests, reads and writes mixed,
/// every one with its result.
#[test]
fn submit_completes_every_request() {
    let data = random_bytes(1 << 20, 17);
    let b = bdev(Kind::Malloc, &data, true);
    let new = random_bytes(64 << 10, 18);
    let mut bufs = vec![vec![0u8; 16384]; 32];
    let mut batch: Vec<IoRequest<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| IoRequest::read(i as u64 * 16384, buf))
        .collect();
    batch.push(IoRequest::write(768 << 10, &new));
    batch.push(IoRequest::write(3, &new[..10]));
    b.store.submit(&mut batch);
    for r in &batch[..32] {
        assert_eq!(r.result(), Some(Ok(16384)));
    }
    assert_eq!(batch[32].result(), Some(Ok(new.len())));
    assert_eq!(
        batch[33].result(),
        Some(Err(StoreError::new(StoreOp::Write, 3, libc::EINVAL))),
        "unaligned write"
    );
    drop(batch);
    for (i, buf) in bufs.iter().enumerate() {
        assert_same(buf, &data[i * 16384..(i + 1) * 16384], "batched read");
    }
    let mut want = data.clone();
    want[768 << 10..(768 << 10) + new.len()].copy_from_slice(&new);
    assert_same(&contents(&*b.store), &want, "batched write");
}

/// Bad input gets typed errors: the length is fixed, writes past the end,
/// unaligned or on a read-only descriptor are refused, unknown bdevs and
/// broken configurations are reported, and the environment starts once.
#[test]
fn bad_input_gets_typed_errors() {
    let data = random_bytes(64 << 10, 19);
    let b = bdev(Kind::Malloc, &data, true);
    let s = &b.store;
    assert_eq!(s.alignment(), 4096);
    assert!(s.name().starts_with("spdk:Malloc"));
    assert_eq!(
        s.set_len(1 << 20),
        Err(StoreError::new(StoreOp::Len, 1 << 20, libc::EOPNOTSUPP))
    );
    s.set_len(64 << 10).unwrap();
    assert_eq!(
        s.write_at(60 << 10, &[0u8; 8192]),
        Err(StoreError::new(StoreOp::Write, 64 << 10, libc::ENOSPC))
    );
    assert_eq!(
        s.write_at(4096, &[0u8; 100]),
        Err(StoreError::new(StoreOp::Write, 4096, libc::EINVAL))
    );
    let ro = SpdkStore::open(env(), s.name().trim_start_matches("spdk:"), false).unwrap();
    assert!(!ro.is_writable());
    assert_eq!(
        ro.write_at(0, &[0u8; 4096]),
        Err(StoreError::new(StoreOp::Write, 0, libc::EBADF))
    );
    assert_same(&contents(s), &data, "after refused writes");

    match SpdkStore::open(env(), "NoSuchBdev", false) {
        Err(SpdkError::Open { name, errno }) => {
            assert_eq!((name.as_str(), errno), ("NoSuchBdev", libc::ENODEV))
        }
        r => panic!("unknown bdev: {r:?}"),
    }
    assert_eq!(
        SpdkStore::open(env(), "a\0b", false).unwrap_err(),
        SpdkError::BadName("a\0b".into())
    );
    let bad = r#"{"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_malloc_create", "params": {"name": "Bad", "num_blocks": 0, "block_size": 4096}}]}]}"#;
    assert!(matches!(
        env().load_config_json(bad),
        Err(SpdkError::Config { .. })
    ));
    for junk in ["", "not json", r#"{"subsystems": 3}"#] {
        assert!(
            matches!(env().load_config_json(junk), Err(SpdkError::Config { .. })),
            "{junk:?}"
        );
    }
    assert!(matches!(
        env().load_config_file("/nonexistent/spdk.json"),
        Err(SpdkError::ConfigRead {
            errno: libc::ENOENT,
            ..
        })
    ));
    assert_eq!(
        SpdkEnv::start(SpdkEnvOptions::new()).unwrap_err(),
        SpdkError::AlreadyStarted
    );
    assert_eq!(
        SpdkEnv::get_or_start(SpdkEnvOptions::new().staging(0, 4096)).unwrap_err(),
        SpdkError::InvalidOption("staging slots must be 1 to 4096")
    );
}

/// The suite's reads, writes and batches over NVMe-over-TCP: SPDK's NVMe
/// driver (queue pairs polled for completions, as with a local device)
/// against a namespace of an SPDK `nvmf_tgt`. Ignored by default: it needs
/// that target, given as `UMIO_SPDK_NVMF=traddr:trsvcid:subnqn`, for
/// example `127.0.0.1:4420:nqn.2016-06.io.spdk:cnode1`, and overwrites
/// the namespace.
#[test]
#[ignore = "needs an NVMe-oF/TCP target in UMIO_SPDK_NVMF"]
fn nvme_over_tcp_namespace() {
    let target = std::env::var("UMIO_SPDK_NVMF")
        .expect("UMIO_SPDK_NVMF=traddr:trsvcid:subnqn names the NVMe-oF/TCP target");
    let mut parts = target.splitn(3, ':');
    let (addr, port, nqn) = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(p), Some(n)) => (a, p, n),
        _ => panic!("UMIO_SPDK_NVMF={target:?}: want traddr:trsvcid:subnqn"),
    };
    env()
        .load_config_json(&format!(
            r#"{{"subsystems": [{{"subsystem": "bdev", "config": [{{"method": "bdev_nvme_attach_controller",
            "params": {{"name": "Tcp0", "trtype": "TCP", "adrfam": "IPv4", "traddr": "{addr}",
            "trsvcid": "{port}", "subnqn": "{nqn}"}}}}]}}]}}"#
        ))
        .unwrap();
    let store = Arc::new(SpdkStore::open(env(), "Tcp0n1", true).unwrap());
    let len = store.len().unwrap() as usize;
    assert!(
        len >= 8 << 20,
        "namespace of {len} bytes: want 8 MiB or more"
    );
    let data = random_bytes(len, 21);
    for (i, chunk) in data.chunks(4 << 20).enumerate() {
        store.write_at((i << 22) as u64, chunk).unwrap();
    }
    assert_same(&contents(&*store), &data, "namespace as written");

    // Reads through a mapping, a cache of 1 MiB, two threads.
    let rt = runtime(1 << 20, 4096, 2);
    let mut m = map(&rt, store.clone(), true).into_mut().unwrap();
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let (data, s) = (&data, m.as_slice());
            sc.spawn(move || {
                let mut rng = Rng::new(t + 30);
                for _ in 0..300 {
                    let a = rng.below(data.len());
                    let b = (a + 1 + rng.below(100_000)).min(data.len());
                    assert_same(&s[a..b], &data[a..b], "nvme/tcp read");
                }
            });
        }
    });
    assert!(m.mapping().stats().evictions > 0, "nothing was evicted");

    // Prefetch in one batch, many requests in flight.
    let ranges: Vec<_> = (0..32).map(|i| i * 131072..i * 131072 + 8192).collect();
    m.mapping().prefetch_ranges(&ranges).unwrap();
    eventually("nvme/tcp prefetch", Duration::from_millis(5), || {
        ranges.iter().all(|r| m.mapping().is_resident(r.start))
    });
    assert!(store.stats().largest_batch >= 8, "{:?}", store.stats());

    // Writes through eviction and flush reach the namespace.
    let mut model = data.clone();
    let mut rng = Rng::new(31);
    for _ in 0..200 {
        let a = rng.below(len);
        let b = (a + 1 + rng.below(50_000)).min(len);
        let v = rng.next() as u8;
        m.as_mut_slice()[a..b].fill(v);
        model[a..b].fill(v);
    }
    m.flush().unwrap();
    assert_eq!(m.mapping().dirty_pages(), 0);
    assert_same(&contents(&*store), &model, "nvme/tcp after flush");
    m.unmap().unwrap();
}
