//! [`CachePadded`]: a value alone on its cache line(s), so that threads
//! writing neighbouring values do not invalidate each other's line (false
//! sharing). crossbeam-utils' type, written out: 128 bytes on x86-64 and
//! aarch64 (whose prefetchers pull lines in pairs), 64 elsewhere.

use std::ops::Deref;

/// `T` aligned and padded to a cache line pair (or line).
#[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64"), repr(align(128)))]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    repr(align(64))
)]
#[derive(Default, Debug)]
pub(crate) struct CachePadded<T> {
    value: T,
}

impl<T> CachePadded<T> {
    pub(crate) const fn new(value: T) -> CachePadded<T> {
        CachePadded { value }
    }
}

impl<T> Deref for CachePadded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn neighbours_share_no_line() {
        let pair: [CachePadded<AtomicU64>; 2] = Default::default();
        let a = &*pair[0] as *const AtomicU64 as usize;
        let b = &*pair[1] as *const AtomicU64 as usize;
        assert!(b - a >= 64, "{a:#x} and {b:#x} are {} bytes apart", b - a);
        assert_eq!(a % 64, 0);
    }
}
