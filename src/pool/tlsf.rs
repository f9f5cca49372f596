//! The TLSF index: which free blocks exist, by size class, found in O(1).
//!
//! Free blocks live in size classes: a first level per power of two and [`SL_COUNT`] linear
//! subdivisions per level; sizes below [`SMALL`] sit in first-level class 0 in 16-byte
//! steps. One bit per non-empty class in two bitmaps. A search rounds the request up to the
//! next class boundary, so any block of a class found by two `trailing_zeros` fits (good
//! fit); when nothing is found the request's own class, the one place a fitting block may
//! hide, is scanned, at most [`MAX_SCAN`] entries. Both are O(1).
//!
//! The index only links and unlinks headers; it never splits, merges or touches block
//! data. Every method runs under the owning pool's lock.

use std::ptr;

use crate::block::{BLOCK_ALIGN, MemoryBlock, Word};

/// log2 of the number of second-level classes per power of two.
const SL_LOG2: u32 = 5;
/// Second-level classes per power of two: the rounding waste is at most 1/32.
const SL_COUNT: usize = 1 << SL_LOG2;
/// Sizes below this are all in first-level class 0, linearly by 16 bytes.
const SMALL: usize = SL_COUNT * BLOCK_ALIGN;
/// First-level classes: enough for any `isize::MAX` region.
const FL_COUNT: usize = (usize::BITS - SMALL.trailing_zeros() + 1) as usize;
/// How many blocks of the request's own class the fallback search looks at.
const MAX_SCAN: usize = 64;

/// Size class (first level, second level) of a block of `size` bytes.
#[inline]
fn mapping(size: usize) -> (usize, usize) {
    if size < SMALL {
        (0, size / BLOCK_ALIGN)
    } else {
        let msb = usize::BITS - 1 - size.leading_zeros();
        let fl = msb - SMALL.trailing_zeros() + 1;
        let sl = (size >> (msb - SL_LOG2)) & (SL_COUNT - 1);
        (fl as usize, sl)
    }
}

/// `size` rounded up to the next class boundary, so every block of its class fits it.
#[inline]
fn round_to_class(size: usize) -> usize {
    if size < SMALL {
        size
    } else {
        let msb = usize::BITS - 1 - size.leading_zeros();
        let step = (1usize << (msb - SL_LOG2)) - 1;
        // Sizes are at most `isize::MAX`, so this cannot overflow.
        (size + step) & !step
    }
}

/// Segregated free lists with their bitmaps.
pub(crate) struct Tlsf {
    fl_bitmap: u64,
    sl_bitmap: [u32; FL_COUNT],
    heads: [[*mut MemoryBlock; SL_COUNT]; FL_COUNT],
    /// Blocks on the lists: separate free ranges, since free neighbours are always merged.
    pub(crate) free_ranges: usize,
}

impl Tlsf {
    /// An index with no free block.
    pub(crate) fn new() -> Tlsf {
        Tlsf {
            fl_bitmap: 0,
            sl_bitmap: [0; FL_COUNT],
            heads: [[ptr::null_mut(); SL_COUNT]; FL_COUNT],
            free_ranges: 0,
        }
    }

    /// Puts `block` on the list of its size class.
    ///
    /// # Safety
    /// `block` is a free block of this pool with `magic`, `size` and footer written, and is
    /// on no list.
    pub(crate) unsafe fn insert(&mut self, block: *mut MemoryBlock) {
        // SAFETY: the caller hands us a valid free header; list neighbours are valid free
        // headers of this pool, accessed under the pool's lock.
        let (fl, sl) = mapping(unsafe { (*block).size });
        let head = self.heads[fl][sl];
        // SAFETY: as above.
        unsafe {
            (*block).next = head;
            (*block).word = Word {
                prev_free: ptr::null_mut(),
            };
            if !head.is_null() {
                (*head).word = Word { prev_free: block };
            }
        }
        self.heads[fl][sl] = block;
        self.fl_bitmap |= 1 << fl;
        self.sl_bitmap[fl] |= 1 << sl;
        self.free_ranges += 1;
    }

    /// Takes `block` off its list.
    ///
    /// # Safety
    /// `block` is on this index's lists.
    pub(crate) unsafe fn remove(&mut self, block: *mut MemoryBlock) {
        // SAFETY: `block` and its list neighbours are valid free headers, under the lock.
        unsafe {
            let (fl, sl) = mapping((*block).size);
            let next = (*block).next;
            let prev = (*block).word.prev_free;
            if !next.is_null() {
                (*next).word = Word { prev_free: prev };
            }
            if prev.is_null() {
                debug_assert_eq!(self.heads[fl][sl], block);
                self.heads[fl][sl] = next;
                if next.is_null() {
                    self.sl_bitmap[fl] &= !(1 << sl);
                    if self.sl_bitmap[fl] == 0 {
                        self.fl_bitmap &= !(1 << fl);
                    }
                }
            } else {
                (*prev).next = next;
            }
        }
        self.free_ranges -= 1;
    }

    /// The first block of a non-empty class at or above `(fl, sl)`.
    fn find_from(&self, fl: usize, sl: usize) -> *mut MemoryBlock {
        let sl_map = self.sl_bitmap[fl] & (!0u32).checked_shl(sl as u32).unwrap_or(0);
        let (fl, sl_map) = if sl_map != 0 {
            (fl, sl_map)
        } else {
            let fl_map = self.fl_bitmap & (!0u64).checked_shl(fl as u32 + 1).unwrap_or(0);
            if fl_map == 0 {
                return ptr::null_mut();
            }
            let fl = fl_map.trailing_zeros() as usize;
            (fl, self.sl_bitmap[fl])
        };
        self.heads[fl][sl_map.trailing_zeros() as usize]
    }

    /// A free block of at least `size` bytes, or null. O(1): two bitmap searches, then at
    /// most `MAX_SCAN` blocks of `size`'s own class.
    pub(crate) fn find(&self, size: usize) -> *mut MemoryBlock {
        let rounded = round_to_class(size);
        if rounded <= isize::MAX as usize {
            let (fl, sl) = mapping(rounded);
            if fl < FL_COUNT {
                let found = self.find_from(fl, sl);
                if !found.is_null() {
                    return found;
                }
            }
        }
        let (fl, sl) = mapping(size);
        let mut b = self.heads[fl][sl];
        for _ in 0..MAX_SCAN {
            if b.is_null() {
                break;
            }
            // SAFETY: list members are valid free headers (under the lock).
            unsafe {
                if (*b).size >= size {
                    return b;
                }
                b = (*b).next;
            }
        }
        ptr::null_mut()
    }

    /// Total size of the largest block `find` can return: the best of the first `MAX_SCAN`
    /// blocks of the highest non-empty class.
    pub(crate) fn largest(&self) -> usize {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmap[fl].leading_zeros() as usize;
        let mut b = self.heads[fl][sl];
        let mut best = 0;
        for _ in 0..MAX_SCAN {
            if b.is_null() {
                break;
            }
            // SAFETY: list members are valid free headers (under the lock).
            unsafe {
                best = best.max((*b).size);
                b = (*b).next;
            }
        }
        best
    }

    /// Every free block, class by class (for the decommit pass). O(free ranges).
    pub(crate) fn for_each(&self, mut f: impl FnMut(*mut MemoryBlock)) {
        for fl in 0..FL_COUNT {
            if self.sl_bitmap[fl] == 0 {
                continue;
            }
            for head in self.heads[fl] {
                let mut b = head;
                while !b.is_null() {
                    // Read the link first: `f` may not unlink, but it may rewrite flags.
                    // SAFETY: list members are valid free headers (under the lock).
                    let next = unsafe { (*b).next };
                    f(b);
                    b = next;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::MIN_BLOCK;

    #[test]
    fn classes_are_monotonic_and_rounding_fits() {
        let mut last = (0, 0);
        // Miri runs this too, on a range small enough for it.
        let top = if cfg!(miri) { 1 << 14 } else { 1 << 22 };
        for size in (MIN_BLOCK..top).step_by(BLOCK_ALIGN) {
            let c = mapping(size);
            assert!(c >= last, "class order broke at {size}");
            last = c;
            let r = round_to_class(size);
            assert!(r >= size);
            // Every block of r's class is >= r's class start >= size.
            let (fl, sl) = mapping(r);
            if fl > 0 {
                let msb = fl as u32 + SMALL.trailing_zeros() - 1;
                let class_start = (1usize << msb) + (sl << (msb - SL_LOG2));
                assert!(
                    class_start >= size,
                    "size {size} rounded to class starting {class_start}"
                );
            }
        }
        assert!(mapping(isize::MAX as usize).0 < FL_COUNT);
    }
}
