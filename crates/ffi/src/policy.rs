//! An eviction policy written in C: `struct umio_eviction_ops` as an
//! [`EvictionPolicy`], installed with `umio_config_set_eviction_ops`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use umio_cache::{EvictionPolicy, Observed, PageKey, PageOracle, PageState, Touch};

use crate::boundary::{Errno, check_ptr, ffi_boundary};
use crate::ops::{OwnedOps, callback_table};

/// A page: `index` (page number within its mapping, from 0) of the
/// mapping `region`. Region numbers are given by umio, start at 1 and are
/// never reused within a process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub struct umio_page_key {
    /// The mapping's number.
    pub region: u64,
    /// The page's index within the mapping.
    pub index: u64,
}

impl From<PageKey> for umio_page_key {
    fn from(k: PageKey) -> Self {
        umio_page_key {
            region: k.region,
            index: k.index,
        }
    }
}

impl From<umio_page_key> for PageKey {
    fn from(k: umio_page_key) -> Self {
        PageKey {
            region: k.region,
            index: k.index,
        }
    }
}

/// A page not resident (`struct umio_page_probe.state`).
pub const UMIO_PAGE_EMPTY: c_int = 0;
/// A resident page equal to the store.
pub const UMIO_PAGE_CLEAN: c_int = 1;
/// A resident page written since it was last read or written back.
pub const UMIO_PAGE_DIRTY: c_int = 2;

/// A use of a resident page umio observed (`touched`'s `touch`): the first
/// write to a clean page (a write-protect fault).
pub const UMIO_TOUCH_FIRST_WRITE: c_int = 0;
/// A fault on a page another thread was filling or changing.
pub const UMIO_TOUCH_COALESCED: c_int = 1;

/// What the probe function tells of a page.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umio_page_probe {
    /// `UMIO_PAGE_EMPTY`, `UMIO_PAGE_CLEAN` or `UMIO_PAGE_DIRTY`.
    pub state: c_int,
    /// 1 while a thread fills, dirties, writes back or evicts the page (it
    /// keeps `state` meanwhile), else 0. A busy page is not a victim now.
    pub busy: c_int,
    /// 1 if the page was referenced (first write, or a fault while busy)
    /// since a probe last cleared the bit, else 0.
    pub referenced: c_int,
    /// 1 if the page is pinned (`umio_pin`): never a victim. A policy may
    /// forget it; umio reports it with `inserted` again when it is
    /// unpinned.
    pub pinned: c_int,
}

/// The probe function umio passes to `select_victims` and `purge`: fills
/// `*out` with the state of page `key`, clearing its referenced bit if
/// `clear_referenced` is non-zero. Returns 1, or 0 if the page's mapping is
/// gone (forget the key), or -1 with errno `EINVAL` if `ctx` or `out` is
/// NULL or misaligned. Call it only with the `ctx` passed with it and only
/// before the callback that received them returns.
#[allow(non_camel_case_types)]
pub type umio_probe_fn = unsafe extern "C" fn(
    ctx: *const c_void,
    key: umio_page_key,
    clear_referenced: c_int,
    out: *mut umio_page_probe,
) -> c_int;

/// An eviction policy written in C: callbacks umio calls to tell it which
/// pages became resident and were used, and to ask it which to evict.
/// Install it with `umio_config_set_eviction_ops`; it then serves every
/// mapping (the cache is shared).
///
/// Thread safety: the callbacks are called from umio's filler threads (on
/// the page-fault path), its evictor threads and threads calling
/// `umio_unmap`, `uunmap`, `umio_pin` or `umio_unpin`, several at once and
/// concurrently with each other: they must be thread-safe (a mutex around
/// the policy's state is enough) and quick, since a faulting thread may
/// wait for them. They must not call any umio function (other than the
/// probe function handed to them), nor touch memory mapped by umio, nor
/// unwind (C++ exceptions, `longjmp`) out of the callback.
///
/// What umio reports: a page is reported (`inserted`, `prefetched`,
/// `restore`) only once it is resident and no longer busy. A policy may
/// keep keys of pages that are no longer resident and may hold a key more
/// than once: the probe says a page is gone (0) or empty, and umio itself
/// checks every victim again before evicting it. Each callback gets `user`
/// as its first argument.
///
/// Ownership: from the moment `umio_config_set_eviction_ops` is called
/// with these ops, umio owns `user`. `release`, if set, is called exactly
/// once when umio no longer needs `user`: before the setter returns if it
/// fails, or when a later `umio_config_set_eviction_ops` or
/// `umio_config_set_eviction` replaces it before the first mapping. Once
/// the runtime has started with it, it is in use until the process exits,
/// and `release` is not called. No callback is called after `release`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umio_eviction_ops {
    /// A page became resident because a thread missed on it, or became an
    /// eviction candidate again (unpinned). NULL: ignored.
    pub inserted: Option<unsafe extern "C" fn(user: *mut c_void, key: umio_page_key)>,
    /// A page became resident by prefetch or read-ahead: no thread has
    /// asked for it yet. NULL: umio calls `inserted` instead.
    pub prefetched: Option<unsafe extern "C" fn(user: *mut c_void, key: umio_page_key)>,
    /// umio observed a use of a resident page: `touch` is
    /// `UMIO_TOUCH_FIRST_WRITE` or `UMIO_TOUCH_COALESCED`. umio sees no
    /// accessed bits: reads of a resident page never reach it. NULL:
    /// ignored.
    pub touched: Option<unsafe extern "C" fn(user: *mut c_void, key: umio_page_key, touch: c_int)>,
    /// A page `select_victims` returned was not evicted (it changed after
    /// it was picked, or its write-back failed): it is resident and must
    /// be tracked again, or its space is lost to eviction. NULL: umio
    /// calls `inserted` instead.
    pub restore: Option<unsafe extern "C" fn(user: *mut c_void, key: umio_page_key)>,
    /// Mapping `region` is gone: forget its pages. NULL: ignored (the
    /// probe reports its pages gone).
    pub forget_region: Option<unsafe extern "C" fn(user: *mut c_void, region: u64)>,
    /// Required. Chooses up to `max` pages to evict, removes them from the
    /// policy and writes their keys to `out[0..n)`; returns `n`. Pass
    /// candidates to `probe(probe_ctx, key, clear_referenced, &p)` to learn
    /// their state: a victim should be resident (clean or dirty), not
    /// busy and not pinned. umio checks each victim again before evicting
    /// it (a page that changed meanwhile comes back through `restore`),
    /// ignores keys returned twice and values of `n` above `max`, and
    /// evicts nothing when `n` is 0 (the cache then stays full: return
    /// victims whenever resident, unpinned pages exist).
    pub select_victims: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            probe: umio_probe_fn,
            probe_ctx: *const c_void,
            out: *mut umio_page_key,
            max: usize,
        ) -> usize,
    >,
    /// Keys the policy holds now (resident pages plus stale entries).
    /// When it exceeds twice the pages the cache can hold, umio calls
    /// `purge`. NULL: never purged.
    pub tracked: Option<unsafe extern "C" fn(user: *mut c_void) -> usize>,
    /// Drops stale keys: pages the probe reports gone, empty or pinned,
    /// and duplicates. NULL: nothing to do.
    pub purge: Option<
        unsafe extern "C" fn(user: *mut c_void, probe: umio_probe_fn, probe_ctx: *const c_void),
    >,
    /// Called once when umio no longer needs `user` (see above). May be
    /// NULL.
    pub release: Option<unsafe extern "C" fn(user: *mut c_void)>,
    /// Passed to every callback.
    pub user: *mut c_void,
}

/// [`umio_eviction_ops`] copied when installed; `user` is released when
/// the last clone is dropped (the setter's override and the runtime's
/// policy share it).
#[derive(Clone)]
pub(crate) struct CEviction {
    ops: Arc<OwnedOps<umio_eviction_ops>>,
}

callback_table!(umio_eviction_ops, required: select_victims);

impl CEviction {
    /// Takes ownership of `ops.user` (released on drop, including when
    /// this returns an error).
    pub(crate) fn new(ops: &umio_eviction_ops) -> Result<CEviction, Errno> {
        let ops = OwnedOps::new(ops);
        ops.check()?;
        Ok(CEviction { ops: Arc::new(ops) })
    }

    /// Whether `self` and `other` are the same installation.
    pub(crate) fn same(&self, other: &CEviction) -> bool {
        Arc::ptr_eq(&self.ops, &other.ops)
    }

    fn ops(&self) -> &umio_eviction_ops {
        &self.ops
    }

    fn report(&self, f: Option<unsafe extern "C" fn(*mut c_void, umio_page_key)>, key: PageKey) {
        if let Some(f) = f {
            // SAFETY: a callback of the ops' owner, called with its `user`
            // while the policy is live, as the ops' contract allows.
            unsafe { f(self.ops().user, key.into()) };
        }
    }
}

/// The `probe_ctx` of one `select_victims` or `purge` call: core's oracle,
/// alive for the duration of the call.
struct ProbeCtx<'a> {
    oracle: &'a dyn PageOracle,
}

/// The probe function handed to C. It runs behind the panic boundary:
/// nothing unwinds into the C caller.
///
/// # Safety
/// `ctx` is the `probe_ctx` passed with this function to a callback that
/// has not returned yet; `out` is NULL or points to writable memory for a
/// `struct umio_page_probe`.
unsafe extern "C" fn probe(
    ctx: *const c_void,
    key: umio_page_key,
    clear_referenced: c_int,
    out: *mut umio_page_probe,
) -> c_int {
    ffi_boundary!(-1, {
        check_ptr(ctx.cast::<ProbeCtx>())?;
        check_ptr(out)?;
        // SAFETY: non-null, aligned, and by the caller's promise the
        // ProbeCtx of a call still running, so alive.
        let ctx = unsafe { &*ctx.cast::<ProbeCtx>() };
        let Some(p) = ctx.oracle.probe(key.into(), clear_referenced != 0) else {
            return Ok(0);
        };
        let (state, busy) = match p.state {
            Observed::Stable(s) => (s, 0),
            Observed::Busy(s) => (s, 1),
        };
        let state = match state {
            PageState::Empty => UMIO_PAGE_EMPTY,
            PageState::Clean => UMIO_PAGE_CLEAN,
            PageState::Dirty => UMIO_PAGE_DIRTY,
        };
        let c = umio_page_probe {
            state,
            busy,
            referenced: p.referenced.into(),
            pinned: p.pinned.into(),
        };
        // SAFETY: checked non-null and aligned; the caller promised it is
        // writable.
        unsafe { out.write(c) };
        Ok(1)
    })
}

/// Runs `f` with a `probe_ctx` for `oracle`.
fn with_probe<R>(oracle: &dyn PageOracle, f: impl FnOnce(*const c_void) -> R) -> R {
    let ctx = ProbeCtx { oracle };
    f((&ctx as *const ProbeCtx).cast())
}

impl EvictionPolicy for CEviction {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn inserted(&self, key: PageKey) {
        self.report(self.ops().inserted, key);
    }

    fn prefetched(&self, key: PageKey) {
        self.report(self.ops().prefetched.or(self.ops().inserted), key);
    }

    fn touched(&self, key: PageKey, touch: Touch) {
        let Some(touched) = self.ops().touched else {
            return;
        };
        let touch = match touch {
            Touch::FirstWrite => UMIO_TOUCH_FIRST_WRITE,
            Touch::Coalesced => UMIO_TOUCH_COALESCED,
        };
        // SAFETY: as in `report`.
        unsafe { touched(self.ops().user, key.into(), touch) };
    }

    fn restore(&self, key: PageKey) {
        self.report(self.ops().restore.or(self.ops().inserted), key);
    }

    fn forget_region(&self, region: u64) {
        if let Some(forget) = self.ops().forget_region {
            // SAFETY: as in `report`.
            unsafe { forget(self.ops().user, region) };
        }
    }

    fn select_victims(&self, oracle: &dyn PageOracle, max: usize, out: &mut Vec<PageKey>) {
        let Some(select) = self.ops().select_victims else {
            return;
        };
        if max == 0 {
            return;
        }
        let mut keys = vec![umio_page_key::default(); max];
        let n = with_probe(oracle, |ctx| {
            // SAFETY: as in `report`; `probe` and `ctx` stay valid for the
            // call, and `keys` is writable for `max` keys.
            unsafe { select(self.ops().user, probe, ctx, keys.as_mut_ptr(), max) }
        });
        if n > max {
            log::warn!("umio: custom eviction policy returned {n} victims for at most {max}");
        }
        keys.truncate(n.min(max));
        // A key returned twice would be locked by this batch already when
        // core reaches it again, and handed back to the policy.
        keys.sort_unstable();
        keys.dedup();
        out.extend(keys.into_iter().map(PageKey::from));
    }

    fn tracked(&self) -> usize {
        match self.ops().tracked {
            // SAFETY: as in `report`.
            Some(tracked) => unsafe { tracked(self.ops().user) },
            None => 0,
        }
    }

    fn purge(&self, oracle: &dyn PageOracle) {
        if let Some(purge) = self.ops().purge {
            with_probe(oracle, |ctx| {
                // SAFETY: as in `select_victims`.
                unsafe { purge(self.ops().user, probe, ctx) }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use umio_cache::{PageProbe, PageTable};

    use super::*;

    /// A policy's state, as a C program would keep it.
    #[derive(Default)]
    struct Log {
        keys: Vec<umio_page_key>,
        probes: Vec<(c_int, c_int)>,
        releases: usize,
        /// What select_victims returns: `max` plus this.
        overshoot: usize,
    }

    fn log<'a>(user: *mut c_void) -> std::sync::MutexGuard<'a, Log> {
        // SAFETY: the tests pass a live Mutex<Log> as `user`.
        unsafe { &*(user as *const Mutex<Log>) }.lock().unwrap()
    }

    unsafe extern "C" fn inserted(user: *mut c_void, key: umio_page_key) {
        log(user).keys.push(key);
    }

    unsafe extern "C" fn release(user: *mut c_void) {
        log(user).releases += 1;
    }

    /// Probes every key, with a NULL `out` first, and returns them all,
    /// each twice, and `overshoot` more than asked.
    unsafe extern "C" fn select(
        user: *mut c_void,
        probe: umio_probe_fn,
        ctx: *const c_void,
        out: *mut umio_page_key,
        max: usize,
    ) -> usize {
        let mut l = log(user);
        let keys = l.keys.clone();
        for &k in &keys {
            let mut p = umio_page_probe::default();
            // SAFETY: `probe` and `ctx` come with this call.
            let bad = unsafe { probe(ctx, k, 0, std::ptr::null_mut()) };
            assert_eq!(bad, -1);
            // SAFETY: as above; `p` is writable.
            let found = unsafe { probe(ctx, k, 1, &mut p) };
            l.probes
                .push((found, if found == 1 { p.state } else { -1 }));
        }
        // SAFETY: umio passes `max` writable keys.
        let out = unsafe { std::slice::from_raw_parts_mut(out, max) };
        let mut n = 0;
        for &k in keys.iter().flat_map(|k| [k, k]).take(max) {
            out[n] = k;
            n += 1;
        }
        n + l.overshoot
    }

    struct OneRegion(PageTable);

    impl PageOracle for OneRegion {
        fn probe(&self, key: PageKey, clear: bool) -> Option<PageProbe> {
            (key.region == 1).then(|| PageProbe {
                state: self.0.get(key.index as usize),
                referenced: clear && self.0.take_referenced(key.index as usize),
                pinned: self.0.is_pinned(key.index as usize),
            })
        }
    }

    fn ops(user: &Mutex<Log>) -> umio_eviction_ops {
        umio_eviction_ops {
            inserted: Some(inserted),
            prefetched: None,
            touched: None,
            restore: None,
            forget_region: None,
            select_victims: Some(select),
            tracked: None,
            purge: None,
            release: Some(release),
            user: user as *const Mutex<Log> as *mut c_void,
        }
    }

    fn key(region: u64, index: u64) -> PageKey {
        PageKey { region, index }
    }

    #[test]
    fn select_victims_is_required_and_release_runs_once() {
        let l = Mutex::new(Log::default());
        let mut o = ops(&l);
        o.select_victims = None;
        assert_eq!(CEviction::new(&o).err(), Some(Errno(libc::EINVAL)));
        assert_eq!(l.lock().unwrap().releases, 1);

        let p = CEviction::new(&ops(&l)).unwrap();
        let q = p.clone();
        assert!(p.same(&q));
        drop(p);
        assert_eq!(l.lock().unwrap().releases, 1, "a clone still holds it");
        drop(q);
        assert_eq!(l.lock().unwrap().releases, 2);
    }

    #[test]
    fn null_notifications_are_ignored_or_fall_back_to_inserted() {
        let l = Mutex::new(Log::default());
        let p = CEviction::new(&ops(&l)).unwrap();
        p.inserted(key(1, 0));
        p.prefetched(key(1, 1));
        p.restore(key(1, 2));
        p.touched(key(1, 3), Touch::FirstWrite);
        p.forget_region(1);
        p.purge(&OneRegion(PageTable::new(1)));
        assert_eq!(p.tracked(), 0);
        let got: Vec<u64> = l.lock().unwrap().keys.iter().map(|k| k.index).collect();
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn victims_are_probed_clamped_and_deduplicated() {
        let l = Mutex::new(Log::default());
        let p = CEviction::new(&ops(&l)).unwrap();
        let o = OneRegion(PageTable::new(4));
        assert!(o.0.try_lock(1, PageState::Empty));
        assert!(!o.0.unlock(1, PageState::Clean));
        for k in [key(1, 1), key(1, 0), key(2, 0)] {
            p.inserted(k);
        }
        l.lock().unwrap().overshoot = 1000;
        let mut out = vec![key(9, 9)];
        p.select_victims(&o, 4, &mut out);
        // Four keys returned (1:1 twice, 1:0 twice), each once, sorted,
        // after what `out` held; the overshoot is ignored.
        assert_eq!(out, [key(9, 9), key(1, 0), key(1, 1)]);
        let probes = l.lock().unwrap().probes.clone();
        assert_eq!(
            probes,
            [(1, UMIO_PAGE_CLEAN), (1, UMIO_PAGE_EMPTY), (0, -1)],
            "states, and region 2 is gone"
        );
        let mut none = Vec::new();
        p.select_victims(&o, 0, &mut none);
        assert!(none.is_empty());
    }
}
