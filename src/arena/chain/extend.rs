//! Growing the current block in place, into the pool's free range right after it: what a
//! top allocation that outgrows its block asks for before it moves (see
//! `MemoryPool::try_extend_block`).

use std::ptr::NonNull;

use super::{Chain, tell_block, window};
use crate::arena::cursor::Cursor;
use crate::block::HEADER;
use crate::pool::MemoryPool;

impl Chain {
    /// Grows the current block in place (see `MemoryPool::try_extend_block`) so that its
    /// window reaches at least `end` (an address past the window's end), and moves the
    /// cursor's end there. The tag is charged the added bytes first: a budget that refuses
    /// them, a heap block, or a pool that cannot leaves everything as it was (`false`), and
    /// the caller takes a new block as usual. O(1).
    pub(crate) fn try_extend_current(
        &mut self,
        pool: &MemoryPool,
        cursor: &Cursor,
        end: usize,
    ) -> bool {
        let b = self.current;
        // SAFETY: `current`, if not null, is a live block we own.
        if b.is_null() || unsafe { (*b).is_heap() } {
            return false;
        }
        let (start, _) = window(b);
        let Some(usable) = end.checked_sub(start.addr()) else {
            return false;
        };
        // SAFETY: as above.
        let old = unsafe { (*b).size };
        let estimate = usable.saturating_add(HEADER).saturating_sub(old);
        if let Some(t) = &self.tag
            && t.node.charge(estimate, false).is_err()
        {
            return false;
        }
        // SAFETY: a block of `pool` we hold (never freed while held), whose header only we
        // touch; the pool reaches its neighbour through its own span.
        let grown = unsafe { pool.try_extend_block(NonNull::new_unchecked(b), usable) };
        let Some(size) = grown else {
            if let Some(t) = &self.tag {
                t.node.uncharge(estimate, false);
            }
            return false;
        };
        let added = size - old;
        self.bytes_held += added;
        if let Some(t) = &self.tag {
            t.node.settle(estimate, added, false);
            pool.note_charged(added, true);
            // To a memory profiler the block is freed and taken again, larger.
            tell_block(false, t.node.path, b.addr(), old, false);
            tell_block(true, t.node.path, b.addr(), size, false);
        }
        let (_, new_end) = window(b);
        cursor.extend_end(new_end);
        true
    }
}
