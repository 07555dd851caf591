//! Settings as strings give them: sizes ([`parse_size`], the one size
//! parser that the C library and the shim use too, and [`size`] as `usize`), and
//! policies by name: [`FromStr`] for [`PrefetchKind`] and [`PromoteKind`]
//! (umio-cache's `PolicyKind` has its own), as command lines and
//! configuration files give them.

use std::str::FromStr;

use umio_cache::UnknownName;

use crate::{PrefetchKind, PromoteKind};

/// A size in bytes: a decimal number with an optional `K`, `M`, `G` or `T`
/// suffix (powers of 1024, any case), white space around it ignored, as
/// every `UMIO_*` and `UMAP_*` size variable takes it. `None` if malformed
/// or larger than `u64`.
///
/// ```
/// assert_eq!(umio_core::parse_size(" 64K"), Some(64 << 10));
/// assert_eq!(umio_core::parse_size("2m"), Some(2 << 20));
/// assert_eq!(umio_core::parse_size("-1"), None);
/// ```
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// A size in bytes ([`parse_size`]'s syntax) as
/// `usize`: read-ahead windows here, the `usize` settings of the
/// environment (`env.rs`) and the preload shim's own sizes. `None` if
/// malformed or larger than `usize`.
///
/// ```
/// assert_eq!(umio_core::parse::size("64k"), Some(64 << 10));
/// assert_eq!(umio_core::parse::size(""), None);
/// ```
pub fn size(s: &str) -> Option<usize> {
    usize::try_from(parse_size(s)?).ok()
}

impl FromStr for PrefetchKind {
    type Err = UnknownName;

    /// `none`, `sequential` or `stride` (any case), optionally followed by
    /// `:` and the largest window in bytes (`k`, `M`, `G` suffixes; 2 MiB
    /// if absent): `"stride:8M".parse::<PrefetchKind>()` is
    /// `Ok(PrefetchKind::Stride { max_window: 8 << 20 })`. `none` takes no
    /// window.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || UnknownName {
            what: "prefetch policy",
            name: s.to_string(),
            expected: "none, sequential or stride, optionally with :<window bytes>",
        };
        let (name, window) = match s.split_once(':') {
            Some((n, w)) => (n, Some(size(w).filter(|&w| w > 0).ok_or_else(unknown)?)),
            None => (s, None),
        };
        let max_window = window.unwrap_or(crate::DEFAULT_READ_AHEAD);
        match name.trim().to_ascii_lowercase().as_str() {
            "none" if window.is_none() => Ok(PrefetchKind::None),
            "sequential" => Ok(PrefetchKind::Sequential { max_window }),
            "stride" => Ok(PrefetchKind::Stride { max_window }),
            _ => Err(unknown()),
        }
    }
}

impl FromStr for PromoteKind {
    type Err = UnknownName;

    /// As [`PromoteKind::from_name`]: `never`, `always` or `sequential`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PromoteKind::from_name(s).ok_or_else(|| UnknownName {
            what: "promotion policy",
            name: s.to_string(),
            expected: "never, always or sequential",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size(" 2m "), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }

    #[test]
    fn sizes_parse_as_usize() {
        let sizes = [
            ("4096", 4096),
            ("64k", 64 << 10),
            (" 2M", 2 << 20),
            ("1G", 1 << 30),
        ];
        for (s, bytes) in sizes {
            assert_eq!(size(s), Some(bytes), "{s:?}");
        }
        assert_eq!((size("x"), size("")), (None, None));
    }

    #[test]
    fn prefetch_kinds_parse() {
        assert_eq!("none".parse(), Ok(PrefetchKind::None));
        assert_eq!(
            "Sequential".parse(),
            Ok(PrefetchKind::Sequential {
                max_window: 2 << 20
            })
        );
        assert_eq!(
            "stride:8M".parse(),
            Ok(PrefetchKind::Stride {
                max_window: 8 << 20
            })
        );
        assert_eq!(
            "sequential:65536".parse(),
            Ok(PrefetchKind::Sequential { max_window: 65536 })
        );
        for bad in ["", "psychic", "none:1M", "stride:", "stride:0", "stride:x"] {
            let e = bad.parse::<PrefetchKind>().unwrap_err();
            assert_eq!(e.name, bad);
            assert!(e.to_string().starts_with("unknown prefetch policy"), "{e}");
        }
    }

    #[test]
    fn promote_kinds_parse() {
        for kind in PromoteKind::ALL {
            assert_eq!(kind.name().parse(), Ok(kind));
        }
        assert_eq!("ALWAYS".parse(), Ok(PromoteKind::Always));
        assert!("sometimes".parse::<PromoteKind>().is_err());
    }
}
