//! Giving blocks back: `free_block`'s checks and the merge with free neighbours, O(1)
//! through the boundary tags (`footer`): a freed block reads its successor's magic and its
//! own `PREV_FREE` flag (then its predecessor's footer) and merges with whichever is free
//! at once, so two free blocks are never adjacent. Neighbours are reached through the
//! pool's own pointer to its region, never the caller's, which covers the block only.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

use super::footer::{previous_size, write_footer};
use super::{MemoryPool, State};
use crate::block::{
    BLOCK_ALIGN, DIRTY, HEADER, MAGIC_FREE, MAGIC_QUARANTINE, MAGIC_USED, MIN_BLOCK, MemoryBlock,
    PREV_FREE,
};
use crate::poison;

impl MemoryPool {
    /// Gives `block` back and merges it with its free neighbours at once. O(1).
    ///
    /// Debug builds fill the usable bytes with `0xDD` first. If release pressure has stayed
    /// above the retain limit for the purge delay (see [`MemoryPool::set_retain_limit`]),
    /// this release also runs a decommit pass (O(free ranges)) that gives the pages of
    /// every dirty free range back to the OS.
    ///
    /// # Safety
    /// `block` came from this pool's [`allocate_block`](MemoryPool::allocate_block), has not
    /// been freed since, and neither it nor its data is used afterwards.
    ///
    /// # Panics
    /// Where a broken contract can be detected cheaply it panics instead of corrupting the
    /// pool, with a message naming the pool and the address: a pointer outside the region or
    /// misaligned, a block already freed (double free), or a header whose magic or size was
    /// overwritten.
    pub unsafe fn free_block(&self, block: NonNull<MemoryBlock>) {
        // From here on the pool's own pointer to the block: the caller's covers the block at
        // most, and the merge below reads and writes its neighbours.
        let (block, end) = self.own_block(block);
        let b = block.as_ptr();
        let size = self.check_freed(b, end);
        // SAFETY: the caller gave the block back to us; its data is dead.
        unsafe { poison::give_back(MemoryBlock::data_of(block).as_ptr(), size - HEADER) };

        let mut st = self.state.lock();
        // SAFETY: a live used block of this region that the caller gave up; its header (and
        // its neighbours', in `release_locked`) are only written under the lock we hold.
        // Quarantine protects whole pages of its data only, which nobody may touch now;
        // the header page stays accessible for the magic checks of later frees.
        unsafe {
            if (*b).magic != MAGIC_USED {
                drop(st);
                self.bad_free(b, "was already freed (double free)");
            }
            if st.quarantine.active() {
                (*b).magic = MAGIC_QUARANTINE;
                let data = MemoryBlock::data_of(block).as_ptr();
                self.protect(&st, data, size - HEADER, false);
                st.quarantine.hold(b, size);
                return;
            }
            self.release_locked(&mut st, b);
        }
        self.purge_if_due(&mut st, false);
    }

    /// The block at the caller's address, as a pointer derived from the pool's own span
    /// that holds it, and that span's end: the first check `free_block` makes, before
    /// touching anything (the address is read as a number only). Panics naming the pool
    /// and the address if it is not a block's place in this pool.
    pub(super) fn own_block(&self, block: NonNull<MemoryBlock>) -> (NonNull<MemoryBlock>, usize) {
        let addr = block.as_ptr().addr();
        let span = self
            .span_of(addr)
            .filter(|span| addr.saturating_add(MIN_BLOCK) <= span.end)
            .filter(|_| addr.is_multiple_of(BLOCK_ALIGN));
        let Some(span) = span else {
            self.bad_free(
                block.as_ptr(),
                "is not a block of this pool (foreign pointer)",
            );
        };
        // SAFETY: `span.at` keeps the span's base pointer, which is not null.
        let own = unsafe { NonNull::new_unchecked(span.at(addr)) };
        (own.cast(), span.end)
    }

    /// The checks `free_block` makes on a block's header (`b` inside a span ending at `end`,
    /// see `own_block`): it says the block is in use with a plausible size, which it
    /// returns. Panics naming the pool and the address otherwise.
    fn check_freed(&self, b: *mut MemoryBlock, end: usize) -> usize {
        let addr = b.addr();
        const NO_HEADER: &str = "has no valid block header (a double free of a block already \
                                 merged, a foreign pointer or an overwritten header)";
        if poison::is_hidden(b.cast(), HEADER) {
            self.bad_free(b, NO_HEADER);
        }
        // SAFETY: for a pointer that honours `free_block`'s contract this is a live block's
        // header. For one that does not (best-effort detection of a broken contract), the
        // slot is at least inside our region, which stays mapped and zero-initialised for
        // the pool's life, so the read does not leave the region; on Windows an uncommitted
        // page there would fault rather than panic.
        let (magic, size) = unsafe { ((*b).magic, (*b).size) };
        match magic {
            MAGIC_USED => {}
            MAGIC_FREE | MAGIC_QUARANTINE => self.bad_free(b, "was already freed (double free)"),
            _ => self.bad_free(b, NO_HEADER),
        }
        if size < MIN_BLOCK || size % BLOCK_ALIGN != 0 || size > end - addr {
            self.bad_free(b, "has a corrupted size in its header");
        }
        size
    }

    /// Puts in-use block `b` back on the free lists, merged with its free neighbours.
    ///
    /// # Safety
    /// `b` is a block of this pool whose magic is `MAGIC_USED` and nobody uses it; the lock
    /// is held (`st`).
    pub(super) unsafe fn release_locked(&self, st: &mut State, b: *mut MemoryBlock) {
        // SAFETY: per the contract; neighbours' headers lie inside the region and are only
        // touched under the lock.
        unsafe {
            let size = (*b).size;
            st.counters.in_use -= size;
            st.counters.blocks_in_use -= 1;
            st.counters.frees += 1;
            st.purge.released(size, st.counters.in_use);

            let mut start = b;
            let mut total = size;
            if let Some(next) = self.physical_next(b)
                && (*next).magic == MAGIC_FREE
            {
                st.index.remove(next);
                total += (*next).size;
                (*next).magic = 0;
            }
            if (*b).flags.load(Relaxed) & PREV_FREE != 0 {
                let prev_size = previous_size(b);
                let prev = b.cast::<u8>().sub(prev_size).cast::<MemoryBlock>();
                debug_assert_eq!(
                    (*prev).magic,
                    MAGIC_FREE,
                    "pool '{}': bad boundary tag",
                    self.name
                );
                st.index.remove(prev);
                total += prev_size;
                (*b).magic = 0;
                start = prev;
            }
            (*start).magic = MAGIC_FREE;
            (*start).size = total;
            // The block before `start` is in use (free neighbours are always merged); the
            // range now holds pages the freed block may have touched.
            let flags = (*start).flags.load(Relaxed);
            (*start).flags.store((flags & !PREV_FREE) | DIRTY, Relaxed);
            write_footer(start);
            if let Some(after) = self.physical_next(start) {
                (*after).flags.fetch_or(PREV_FREE, Relaxed);
            }
            st.index.insert(start);
            // Headers of absorbed blocks are now plain free space.
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(start)).as_ptr(),
                total - HEADER - 8,
            );
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn bad_free(&self, block: *mut MemoryBlock, what: &str) -> ! {
        panic!(
            "memory pool '{}': free_block({block:p}): the block {what}",
            self.name
        )
    }
}
