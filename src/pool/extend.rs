//! Growing a block in place, into the free range right after it.
//!
//! An arena whose top allocation (a vector being pushed to) outgrows its block would
//! otherwise take a second block and copy the allocation over, leaving the old copy
//! behind until the reset: at a spike, a vector doubled over a few blocks holds about
//! twice its final size, and the pages of every copy are faulted in. When the range after
//! the block is free, the block takes what it needs of it instead (like `realloc` growing
//! in place, or `mremap`): no copy, no second block, nothing left behind. The range is
//! often free: the blocks an arena gave back at its last reset merged there, and the
//! pool's good fit places a block at the start of a free range.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

use super::MemoryPool;
use super::footer::write_footer;
use crate::block::{
    BLOCK_ALIGN, DIRTY, HEADER, MAGIC_FREE, MAGIC_USED, MIN_BLOCK, MemoryBlock, PREV_FREE, Word,
};
use crate::poison;

impl MemoryPool {
    /// Grows the used block `block` in place to at least `min_usable` usable bytes, taking
    /// the start of the free range right after it (all of it if the rest would be too
    /// small for a block). Returns the block's new total size, or `None` (nothing changed)
    /// if the range after it is not free or not large enough, or its pages cannot be
    /// committed. Counted in `in_use` like a block of the added size, not as an allocation.
    /// O(1) under the pool's lock; refusals are not counted or reported (the caller falls
    /// back to a new block).
    ///
    /// # Safety
    /// `block` was handed out by this pool, is not freed, and its holder lets nobody else
    /// read or write its header meanwhile.
    pub(crate) unsafe fn try_extend_block(
        &self,
        block: NonNull<MemoryBlock>,
        min_usable: usize,
    ) -> Option<usize> {
        let want = min_usable
            .checked_next_multiple_of(BLOCK_ALIGN)?
            .checked_add(HEADER)?;
        // Reached through the pool's own span, not the caller's pointer: the free range
        // after the block is not the caller's.
        let (own, _) = self.own_block(block);
        let b = own.as_ptr();
        let mut st = self.state.lock();
        // SAFETY: a used block of this pool, which its holder does not touch meanwhile; its
        // neighbour's header is the pool's, written only under the lock we hold.
        unsafe {
            debug_assert_eq!((*b).magic, MAGIC_USED);
            let size = (*b).size;
            if want <= size {
                return Some(size);
            }
            let next = self.physical_next(b)?;
            if (*next).magic != MAGIC_FREE {
                return None;
            }
            let free = (*next).size;
            let mut add = want - size;
            if add > free {
                return None;
            }
            let mut rest = free - add;
            if rest < MIN_BLOCK {
                (add, rest) = (free, 0);
            }
            // The added bytes and, when the range is split, the remainder's header.
            let commit_len = if rest > 0 { add + HEADER } else { add };
            if !self.commit(&st, next.cast(), commit_len) {
                return None;
            }
            st.index.remove(next);
            let dirty = (*next).flags.load(Relaxed) & DIRTY;
            let after = next.cast::<u8>().add(add).cast::<MemoryBlock>();
            if rest > 0 {
                poison::expose(after.cast(), HEADER);
                after.write(MemoryBlock {
                    magic: MAGIC_FREE,
                    flags: std::sync::atomic::AtomicU32::new(dirty),
                    size: rest,
                    next: std::ptr::null_mut(),
                    word: Word { used: 0 },
                });
                write_footer(after);
                st.index.insert(after);
            } else if let Some(following) = self.physical_next(next) {
                (*following).flags.fetch_and(!PREV_FREE, Relaxed);
            }
            (*b).size = size + add;
            let c = &mut st.counters;
            c.in_use += add;
            c.high_watermark = c.high_watermark.max(c.in_use);
            let in_use = c.in_use;
            st.purge.acquired(add, in_use);
            drop(st);
            // The old free range's header and interior are the block's data now.
            poison::hand_out(next.cast(), add);
            Some(size + add)
        }
    }
}
