//! A huge-page promotion policy written in C: `struct umio_promote_ops` as
//! a [`Promoter`], given to one mapping with `umio_map_options.promoter`.

use std::ffi::{c_int, c_void};

use umio_core::{Fault, Promoter};

use crate::ops::{OwnedOps, callback_table};
use crate::prefetcher::umio_fault;

/// A huge-page promotion policy written in C, for one mapping
/// (`umio_map_options.promoter`): after each fault of the mapping umio asks
/// it whether to promote the aligned 2 MiB range around the page to a huge
/// page, and does so in the background.
///
/// Thread safety, ownership and `release`: as for `struct
/// umio_prefetch_ops`. `should_promote` runs on umio's filler threads,
/// several at once, on the fault path: thread-safe, quick, no umio calls,
/// no touching umio-mapped memory, no unwinding.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umio_promote_ops {
    /// Required. Returns nonzero to promote the 2 MiB range holding
    /// `fault->page`. Promotions of one range are coalesced; a promoted
    /// range is not offered again until it is evicted.
    pub should_promote:
        Option<unsafe extern "C" fn(user: *mut c_void, fault: *const umio_fault) -> c_int>,
    /// Called once when umio no longer needs `user`. May be NULL.
    pub release: Option<unsafe extern "C" fn(user: *mut c_void)>,
    /// Passed to every callback.
    pub user: *mut c_void,
}

callback_table!(umio_promote_ops, required: should_promote);

/// [`umio_promote_ops`] copied at map time; releases `user` on drop.
pub(crate) type CPromoter = OwnedOps<umio_promote_ops>;

impl Promoter for CPromoter {
    fn should_promote(&self, fault: &Fault) -> bool {
        let Some(f) = self.should_promote else {
            return false;
        };
        let c = umio_fault::from(fault);
        // SAFETY: a callback of the ops' owner, called with its `user`
        // while the policy is live; `c` is readable during the call.
        unsafe { f(self.user, &c) != 0 }
    }
}
