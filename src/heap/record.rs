//! What the owner map records of a tracked allocation: the tag it was charged to and the
//! size it was charged, so that a free credits exactly what was charged whatever size the
//! caller passes (an optimised build may merge a shrinking `realloc` into the free that
//! follows it, which then names the old block with the new size).
//!
//! **The first entry** (the granule the allocation starts in) is `id | code << 10`: the
//! tag's heap id (below [`counters::TAGS`], at most 1,024: 10 bits) and a code, never 0,
//! so a tracked allocation's entry is never 0:
//! - `1..=61`: the size is `code - 1` (0 to 60 bytes; a zero size is outside
//!   `GlobalAlloc`'s contract, and kept exact all the same);
//! - [`ONE_WORD`]: the size (61 to 65,535) is the next granule's entry;
//! - [`THREE_WORDS`]: the size (65,536 to 2^48 - 1) is the next three granules' entries,
//!   low bits first. An allocation of 2^48 bytes or more (none fits a 48-bit user address
//!   space) is not tracked.
//!
//! **Why those entries are the allocation's own.** Every inner allocation is aligned to at
//! least a granule (see `inner_layout`), so an allocation starts at its first granule's
//! start, and an allocation of more than `16 * j` bytes covers the start of granule
//! `g0 + j`. No other live allocation starts there, and entries are written only at an
//! allocation's first granule, so the entries after it are free for its size: one needs
//! more than 16 bytes (61 and up), three more than 48 (65,536 and up). They are cleared
//! with the first when the allocation is freed, so an allocation that starts there later
//! without being tracked (tracking off) finds its entry 0. In the radix tree they may sit
//! in the next leaf, found by a lookup of their own.
//!
//! Nothing here allocates, locks or runs user code: it is called from inside `alloc`.

use std::sync::atomic::AtomicU16;
use std::sync::atomic::Ordering::Relaxed;

use super::counters;
use super::owners::{self, GRANULE};

/// Bits of the first entry that hold the tag's id.
const ID_BITS: u32 = 10;
const ID_MASK: u16 = (1 << ID_BITS) - 1;
const _: () = assert!(counters::TAGS <= 1 << ID_BITS, "a tag id fits the entry");

/// The code whose size is the next entry.
const ONE_WORD: u16 = 62;
/// The code whose size is the next three entries.
const THREE_WORDS: u16 = 63;
/// Sizes below this have a code of their own.
const EXACT_BELOW: usize = ONE_WORD as usize - 1;
/// Sizes from this on need three words.
const THREE_WORDS_FROM: usize = 1 << 16;
/// Sizes from this on are not tracked.
const TOO_LARGE: u64 = 1 << 48;

/// The entries a new allocation's record is written to: its first granule's and, for a
/// size without a code of its own, the one or three after it.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    first: &'static AtomicU16,
    words: [Option<&'static AtomicU16>; 3],
}

/// The entry `j` granules after the one of `addr` (`e`'s run, or a lookup of its own in
/// the next leaf), mapping its leaf if `map`.
#[inline(always)]
fn word(e: owners::Entries, addr: usize, j: usize, map: bool) -> Option<&'static AtomicU16> {
    match e.get(j) {
        Some(w) => Some(w),
        None => next_leaf_word(addr, j, map),
    }
}

#[cold]
#[inline(never)]
fn next_leaf_word(addr: usize, j: usize, map: bool) -> Option<&'static AtomicU16> {
    let at = addr.checked_add(j.checked_mul(GRANULE)?)?;
    let e = if map {
        owners::entry(at)
    } else {
        owners::find(at)
    };
    e.map(owners::Entries::first)
}

/// Where the record of a new allocation of `size` bytes at `addr` goes, its tables mapped
/// if need be; `None` if the map cannot hold it (then it is not tracked). O(1).
#[inline(always)]
pub(crate) fn place(addr: usize, size: usize) -> Option<Place> {
    let e = owners::entry(addr)?;
    let mut words = [None; 3];
    if size >= EXACT_BELOW {
        let n = if size < THREE_WORDS_FROM {
            1
        } else if (size as u64) < TOO_LARGE {
            3
        } else {
            return None;
        };
        for (j, w) in words.iter_mut().enumerate().take(n) {
            *w = Some(word(e, addr, j + 1, true)?);
        }
    }
    Some(Place {
        first: e.first(),
        words,
    })
}

impl Place {
    /// Records an allocation of `size` bytes (the size `place` was given) charged to `id`.
    #[inline(always)]
    pub(crate) fn store(self, id: u16, size: usize) {
        let code = if size < EXACT_BELOW {
            size as u16 + 1
        } else if size < THREE_WORDS_FROM {
            ONE_WORD
        } else {
            THREE_WORDS
        };
        let mut rest = size as u64;
        for w in self.words.into_iter().flatten() {
            w.store(rest as u16, Relaxed);
            rest >>= 16;
        }
        self.first.store((id & ID_MASK) | code << ID_BITS, Relaxed);
    }
}

/// Takes the record of the live allocation at `addr` out of the map: the tag it was
/// charged to and the size charged, or `None` if it was not tracked. Its entries are 0
/// after. O(1).
#[inline(always)]
pub(crate) fn take(addr: usize) -> Option<(u16, usize)> {
    let e = owners::find(addr)?;
    let entry = e.first().load(Relaxed);
    if entry == 0 {
        return None;
    }
    e.first().store(0, Relaxed);
    let (id, code) = (entry & ID_MASK, entry >> ID_BITS);
    let size = match code {
        ONE_WORD => take_words::<1>(e, addr),
        THREE_WORDS => take_words::<3>(e, addr),
        _ => usize::from(code - 1),
    };
    Some((id, size))
}

/// Reads and clears the `N` size words after the first entry, low bits first.
#[inline(always)]
fn take_words<const N: usize>(e: owners::Entries, addr: usize) -> usize {
    let mut size = 0u64;
    for j in 0..N {
        // Written with the first entry (`place` found or mapped each), so found now.
        if let Some(w) = word(e, addr, j + 1, false) {
            size |= u64::from(w.swap(0, Relaxed)) << (16 * j);
        }
    }
    // Below 2^48 (`place`), and an allocation's size fits `usize`.
    size as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address far from any heap this test binary uses (it does not track its own).
    fn far(n: usize) -> usize {
        #[cfg(target_pointer_width = "64")]
        let base = (1usize << 37) + 0x789_0000;
        #[cfg(not(target_pointer_width = "64"))]
        let base = 0xC000_0000usize;
        base + n * 0x1000
    }

    #[test]
    fn every_code_boundary_records_its_size_and_id() {
        let mut sizes = vec![0, 1, 15, 16, 17, 59, 60, 61, 62, 63, 64, 65_535, 65_536];
        #[cfg(target_pointer_width = "64")]
        sizes.extend([(1 << 32) + 61, (1 << 48) - 1]);
        for (n, &size) in sizes.iter().enumerate() {
            let addr = far(n);
            let id = (counters::TAGS - 1 - n) as u16;
            place(addr, size).unwrap().store(id, size);
            assert_ne!(owners::find(addr).unwrap().first().load(Relaxed), 0);
            assert_eq!(take(addr), Some((id, size)), "size {size}");
            assert_eq!(take(addr), None, "taken");
            for j in 0..4 {
                let e = owners::find(addr + j * GRANULE).map_or(0, |e| e.first().load(Relaxed));
                assert_eq!(e, 0, "size {size}: entry {j} cleared");
            }
        }
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn sizes_of_2_to_the_48_or_more_are_not_tracked() {
        assert!(place(far(100), 1 << 48).is_none());
    }

    #[test]
    fn a_record_whose_words_cross_into_the_next_leaf_finds_them_there() {
        // The last granule of a 4 MiB span (under Miri, 64 KiB): in the tree, its leaf's
        // last entry.
        let span = 1usize << if cfg!(miri) { 16 } else { 22 };
        let addr = (far(200) | (span - 1)) + 1 - GRANULE;
        let size = 100_000;
        place(addr, size).unwrap().store(5, size);
        assert_eq!(take(addr), Some((5, size)));
        assert_eq!(
            owners::find(addr + GRANULE).map(|e| e.first().load(Relaxed)),
            Some(0)
        );
    }
}
