//! Runs of pages: sorted page indices split into runs of consecutive
//! pages, and a userfaultfd operation on a range split per VMA when the
//! kernel refuses a range that spans several.

use std::ops::Range;

/// Splits sorted page indices into runs of consecutive pages.
pub(crate) fn runs(pages: &[usize]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = *pages.get(i)?;
        let mut end = start + 1;
        i += 1;
        while pages.get(i) == Some(&end) {
            end += 1;
            i += 1;
        }
        Some(start..end)
    })
}

/// Runs `op` (a userfaultfd operation on a range) on `[dst, dst+len)`. The
/// kernel refuses with ENOENT a range that is not within one VMA: a
/// range of pages of one region is split into several when the
/// application changed the protection of part of it, or unmapped part of
/// it. Then `op` runs on pieces of the range, each as large as fits within
/// one VMA (found by halving, down to 4 KiB), and 4 KiB pieces in no VMA
/// of ours (unmapped: nothing can fault there) are skipped. `Err(ENOENT)`
/// if no piece was done.
pub(crate) fn per_vma(
    dst: usize,
    len: usize,
    mut op: impl FnMut(usize, usize) -> Result<(), i32>,
) -> Result<(), i32> {
    const PIECE: usize = 4096;
    match op(dst, len) {
        Err(libc::ENOENT) if len > PIECE => {}
        r => return r,
    }
    let end = dst + len;
    let mut at = dst;
    let mut n = (len / 2).next_multiple_of(PIECE);
    let mut done = false;
    while at < end {
        let piece = n.min(end - at);
        match op(at, piece) {
            Ok(()) => {
                at += piece;
                done = true;
                n = end - at;
            }
            Err(libc::ENOENT) if piece > PIECE => n = (piece / 2).next_multiple_of(PIECE),
            Err(libc::ENOENT) => {
                at += piece;
                n = end - at;
            }
            Err(e) => return Err(e),
        }
    }
    if done { Ok(()) } else { Err(libc::ENOENT) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `per_vma` over fake VMAs: `op` fails with ENOENT unless its range
    /// is within one of `vmas`; returns the pieces done.
    fn pieces(
        vmas: &[Range<usize>],
        dst: usize,
        len: usize,
    ) -> (Result<(), i32>, Vec<Range<usize>>) {
        let mut done = Vec::new();
        let r = per_vma(dst, len, |at, n| {
            if vmas.iter().any(|v| v.start <= at && at + n <= v.end) {
                done.push(at..at + n);
                Ok(())
            } else {
                Err(libc::ENOENT)
            }
        });
        (r, done)
    }

    #[test]
    fn runs_group_consecutive_pages() {
        let r: Vec<_> = runs(&[1, 2, 3, 7, 9, 10]).collect();
        assert_eq!(r, vec![1..4, 7..8, 9..11]);
        assert_eq!(runs(&[]).count(), 0);
    }

    #[test]
    fn per_vma_splits_at_vma_boundaries_and_skips_holes() {
        let k = 4096;
        // One VMA: one call.
        let whole = vec![0..32 * k, 32 * k..64 * k];
        let (r, done) = pieces(&whole, 0, 16 * k);
        assert_eq!((r, done.len(), &done[0]), (Ok(()), 1, &(0..16 * k)));
        // Split at 9 pages (an mprotect of 9 of 16 pages): every byte
        // copied, each piece within one VMA.
        let (r, done) = pieces(&[0..9 * k, 9 * k..64 * k], 0, 16 * k);
        assert_eq!(r, Ok(()));
        let mut at = 0;
        for d in &done {
            assert_eq!(d.start, at);
            assert!(d.end <= 9 * k || d.start >= 9 * k, "{d:?} crosses");
            at = d.end;
        }
        assert_eq!(at, 16 * k);
        // A hole of one page (munmap'd) is skipped; the rest is done.
        let (r, done) = pieces(&[0..5 * k, 6 * k..16 * k], 0, 16 * k);
        assert_eq!(r, Ok(()));
        let total: usize = done.iter().map(|d| d.len()).sum();
        assert_eq!(total, 15 * k);
        // Nothing mapped: ENOENT.
        assert_eq!(pieces(&[], 0, 16 * k).0, Err(libc::ENOENT));
        // Other errors are returned as they are.
        assert_eq!(
            per_vma(0, 16 * k, |_, _| Err(libc::EINVAL)),
            Err(libc::EINVAL)
        );
    }
}
