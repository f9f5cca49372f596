//! What the owner map records of a tracked allocation: the tag it was charged to and the
//! size it was charged, so that a free credits exactly what was charged whatever size the
//! caller passes (an optimised build may merge a shrinking `realloc` into the free that
//! follows it, which then names the old block with the new size).
//!
//! **The first entry** (the granule the allocation starts in) is `id << 6 | code`: the
//! tag's heap id (below [`counters::TAGS`], at most 1,024: the high 10 bits) and a code
//! (the low 6), never 0, so a tracked allocation's entry is never 0. (Code low: the free
//! path reads the size with a mask, and `id << 6`, the offset of the tag's 64-byte
//! counter, with another.)
//! - `1..=60`: the size is `code - 1` (0 to 59 bytes; a zero size is outside
//!   `GlobalAlloc`'s contract, and kept exact all the same);
//! - [`SAMPLED`]: the sampler took the allocation ([`sample`](super::sample)): its size is
//!   in the sampler's table, keyed by the address, with its call stack;
//! - [`ONE_WORD`]: the size (60 to 65,535) is the next granule's entry;
//! - [`THREE_WORDS`]: the size (65,536 to 2^48 - 1) is the next three granules' entries,
//!   low bits first. An allocation of 2^48 bytes or more (none fits a 48-bit user address
//!   space) is not tracked.
//!
//! **Why those entries are the allocation's own.** Every inner allocation is aligned to at
//! least a granule (see `inner_layout`), so an allocation starts at its first granule's
//! start, and an allocation of more than `16 * j` bytes covers the start of granule
//! `g0 + j`. No other live allocation starts there, and entries are written only at an
//! allocation's first granule, so the entries after it are free for its size: one needs
//! more than 16 bytes (60 and up), three more than 48 (65,536 and up). They are cleared
//! with the first when the allocation is freed, so an allocation that starts there later
//! without being tracked (tracking off) finds its entry 0. In the radix tree they may sit
//! in the next leaf, found by a lookup of their own.
//!
//! Nothing here allocates, locks or runs user code: it is called from inside `alloc`.

use std::sync::atomic::AtomicU16;
use std::sync::atomic::Ordering::Relaxed;

use super::counters::{self, Crossing};
use super::owners::{self, GRANULE};
use super::sample;

/// Bits of the first entry, its low ones, that hold the code.
const CODE_BITS: u32 = 6;
const CODE_MASK: u16 = (1 << CODE_BITS) - 1;
const _: () = assert!(
    counters::TAGS <= 1 << (16 - CODE_BITS),
    "a tag id fits the entry"
);

/// The code of an allocation the sampler holds (size in its table).
const SAMPLED: u16 = 61;
/// The code whose size is the next entry.
const ONE_WORD: u16 = 62;
/// The code whose size is the next three entries.
const THREE_WORDS: u16 = 63;
/// Sizes below this have a code of their own.
const EXACT_BELOW: usize = SAMPLED as usize - 1;
/// Sizes from this on need three words.
const THREE_WORDS_FROM: usize = 1 << 16;
/// Sizes from this on are not tracked.
const TOO_LARGE: u64 = 1 << 48;

/// How many entries after the first hold the size of an allocation of `size` bytes.
#[inline(always)]
fn words_for(size: usize) -> usize {
    if size < EXACT_BELOW {
        0
    } else if size < THREE_WORDS_FROM {
        1
    } else {
        3
    }
}

/// The first entry's value for tag `id` (below [`counters::TAGS`]: `set_tag` keeps the
/// current tag so) and `code`.
#[inline(always)]
fn first_entry(id: u16, code: u16) -> u16 {
    debug_assert!(usize::from(id) < counters::TAGS);
    id << CODE_BITS | code
}

/// The entry `j` granules after the one of `addr` (`e`'s run, or a lookup of its own in
/// the next leaf), mapping its leaf if `map`.
#[inline(always)]
fn word(e: owners::Entries, addr: usize, j: usize, map: bool) -> Option<&'static AtomicU16> {
    match e.get(j) {
        Some(w) => Some(w),
        None => {
            let at = addr.checked_add(j.checked_mul(GRANULE)?)?;
            let e = if map {
                owners::entry(at)
            } else {
                owners::find(at)
            };
            e.map(owners::Entries::first)
        }
    }
}

/// A fresh allocation of `size` bytes at `addr`: charged to the calling thread's tag, and
/// recorded with its size. Not charged (no record) where the map cannot hold it. O(1).
#[inline(always)]
pub(crate) fn track(addr: usize, size: usize) {
    write(addr, size, Charge);
}

/// Records again an allocation of `size` bytes charged to `id` (a failed `realloc`'s,
/// taken out while the inner allocator had it). `false` if the map cannot hold the record.
#[inline(always)]
pub(crate) fn put_back(addr: usize, id: u16, size: usize) -> bool {
    write(addr, size, Again(id))
}

/// Records a `realloc`'s new allocation of `new` bytes at `addr`, charged to `id` (the
/// old one's tag) and counted as a resize from `old` bytes: the sampler may take it as it
/// takes a fresh allocation. `false` (nothing counted) if the map cannot hold the record.
#[inline(always)]
pub(crate) fn regrow(addr: usize, id: u16, old: usize, new: usize) -> bool {
    write(addr, new, Regrow(id, old))
}

/// Whose record [`write`] makes, and what it counts: one type per case, so that each
/// caller's `write` is compiled for its own (no case tested at run time).
trait By: Copy {
    /// Counts the allocation, then has `record` store its first entry with the tag's id;
    /// if it crossed its counter's sampling threshold, `sample` runs after (the sampler
    /// may take it and rewrite the entry).
    fn own(self, size: usize, record: impl FnOnce(u16), sample: impl FnOnce(u16, Crossing));
}

/// A fresh allocation: charged to the thread's current tag.
#[derive(Clone, Copy)]
struct Charge;

/// The record of an allocation charged to this tag already: nothing counted.
#[derive(Clone, Copy)]
struct Again(u16);

/// A `realloc`'s new allocation under this tag, from the old size.
#[derive(Clone, Copy)]
struct Regrow(u16, usize);

impl By for Charge {
    #[inline(always)]
    fn own(self, size: usize, record: impl FnOnce(u16), sample: impl FnOnce(u16, Crossing)) {
        counters::charge(size, record, sample);
    }
}

impl By for Again {
    #[inline(always)]
    fn own(self, _: usize, record: impl FnOnce(u16), _: impl FnOnce(u16, Crossing)) {
        record(self.0);
    }
}

impl By for Regrow {
    #[inline(always)]
    fn own(self, size: usize, record: impl FnOnce(u16), sample: impl FnOnce(u16, Crossing)) {
        record(self.0);
        if let Some(crossing) = counters::resize(self.0, self.1, size) {
            sample(self.0, crossing);
        }
    }
}

/// Records an allocation of `size` bytes at `addr` for `by`, called only once the record
/// is known to fit; `false` if it does not. Sizes below 64 KiB whose size entry sits in
/// the first's table take the inline path.
#[inline(always)]
fn write(addr: usize, size: usize, by: impl By) -> bool {
    let Some(e) = owners::entry(addr) else {
        return false;
    };
    let sample = move |id, crossing| sampled(e, addr, size, id, crossing);
    if size < EXACT_BELOW {
        let first = e.first();
        by.own(
            size,
            move |id| first.store(first_entry(id, size as u16 + 1), Relaxed),
            sample,
        );
        true
    } else if size < THREE_WORDS_FROM
        && let Some(w) = e.get(1)
    {
        let first = e.first();
        by.own(
            size,
            move |id| {
                w.store(size as u16, Relaxed);
                first.store(first_entry(id, ONE_WORD), Relaxed);
            },
            sample,
        );
        true
    } else {
        write_slow(e, addr, size, by)
    }
}

/// An allocation that crossed its counter's sampling threshold, its ordinary record
/// written: if the sampler takes it and its table has room, marked [`SAMPLED`] (its size
/// words stay, cleared at the free like any record's); else left as it is.
#[cold]
#[inline(never)]
fn sampled(e: owners::Entries, addr: usize, size: usize, id: u16, crossing: Crossing) {
    if crossing.sample(size) && sample::take(addr, size, id) {
        e.first().store(first_entry(id, SAMPLED), Relaxed);
    }
}

/// `write` for three size words, or words in the next leaf.
#[cold]
#[inline(never)]
fn write_slow(e: owners::Entries, addr: usize, size: usize, by: impl By) -> bool {
    if (size as u64) >= TOO_LARGE {
        return false;
    }
    let n = words_for(size);
    let mut words = [None; 3];
    for (j, w) in words.iter_mut().enumerate().take(n) {
        match word(e, addr, j + 1, true) {
            Some(found) => *w = Some(found),
            None => return false,
        }
    }
    let code = if n == 1 { ONE_WORD } else { THREE_WORDS };
    by.own(
        size,
        move |id| {
            let mut rest = size as u64;
            for w in words.into_iter().flatten() {
                w.store(rest as u16, Relaxed);
                rest >>= 16;
            }
            e.first().store(first_entry(id, code), Relaxed);
        },
        move |id, crossing| sampled(e, addr, size, id, crossing),
    );
    true
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
    let (id, code) = (entry >> CODE_BITS, entry & CODE_MASK);
    let size = if code < SAMPLED {
        usize::from(code) - 1
    } else if code == ONE_WORD
        && let Some(w) = e.get(1)
    {
        // A load and a store: only this allocation's owner writes it (no locked
        // instruction on the free path).
        let size = w.load(Relaxed);
        w.store(0, Relaxed);
        usize::from(size)
    } else {
        take_slow(e, addr, id, code)
    };
    Some((id, size))
}

/// Reads and clears the size words after the first entry (`code`'s one or three), low
/// bits first.
#[cold]
#[inline(never)]
fn take_slow(e: owners::Entries, addr: usize, id: u16, code: u16) -> usize {
    // The sampler's table has a sampled allocation's size; the size words written before
    // the sampler took it are cleared below as any record's.
    let sampled = (code == SAMPLED).then(|| sample::release(addr, id));
    let n = match sampled {
        Some(size) => words_for(size),
        None if code == ONE_WORD => 1,
        None => 3,
    };
    let mut size = 0u64;
    for j in 0..n {
        // Written with the first entry (`track` found or mapped each), so found now.
        if let Some(w) = word(e, addr, j + 1, false) {
            size |= u64::from(w.load(Relaxed)) << (16 * j);
            w.store(0, Relaxed);
        }
    }
    // Below 2^48 (`track`), and an allocation's size fits `usize`.
    sampled.unwrap_or(size as usize)
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
        let mut sizes = vec![0, 1, 15, 16, 17, 58, 59, 60, 61, 62, 63, 64, 65_535, 65_536];
        if usize::BITS == 64 {
            sizes.extend([(1u64 << 32) + 61, (1u64 << 48) - 1].map(|s| s as usize));
        }
        for (n, &size) in sizes.iter().enumerate() {
            let addr = far(n);
            let id = (counters::TAGS - 1 - n) as u16;
            let outer = counters::set_tag(id);
            track(addr, size);
            counters::set_tag(outer);
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
    fn sizes_of_2_to_the_48_or_more_are_not_recorded() {
        track(far(100), 1 << 48);
        assert_eq!(take(far(100)), None);
    }

    #[test]
    fn a_record_whose_words_cross_into_the_next_leaf_finds_them_there() {
        // The last granule of a 4 MiB span (under Miri, 64 KiB): in the tree, its leaf's
        // last entry.
        let span = 1usize << if cfg!(miri) { 16 } else { 22 };
        let addr = (far(200) | (span - 1)) + 1 - GRANULE;
        let size = 100_000;
        let outer = counters::set_tag(5);
        track(addr, size);
        counters::set_tag(outer);
        assert_eq!(take(addr), Some((5, size)));
        assert_eq!(
            owners::find(addr + GRANULE).map(|e| e.first().load(Relaxed)),
            Some(0)
        );
    }
}
