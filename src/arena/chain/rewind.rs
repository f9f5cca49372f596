//! Freeing part of a chain: rewinding to a position, forgetting a moved top, and the
//! full reset that keeps one block.

use std::ptr;

use super::{Ask, Chain, data, window, window_len};
use crate::arena::cursor::{Cursor, SENTINEL};
use crate::arena::policy::Decision;
use crate::block::{MemoryBlock, Word};
use crate::poison;
use crate::pool::MemoryPool;

impl Chain {
    /// How far block `b` is filled: the cursor for the current block, the header for
    /// blocks before it.
    ///
    /// # Safety
    /// `b` is a block of the chain at or before `current`.
    unsafe fn fill_end(&self, b: *mut MemoryBlock, cursor: &Cursor) -> *mut u8 {
        if b == self.current {
            cursor.ptr()
        } else {
            // SAFETY: per the contract `b` is ours and full.
            unsafe { data(b).add((*b).word.used) }
        }
    }

    /// Frees everything allocated after the position `(start, ptr)`: `start` is the window
    /// start of the block the position was in (the sentinel for "before any block").
    ///
    /// If that block is no longer at or before the current one (it is a spare now, or was
    /// trimmed), or the position lies above how far its block is filled now, the memory
    /// after it was already given back (by an earlier rewind or a pop) and the position
    /// stays where it is: rewinding never moves forward.
    ///
    /// # Safety
    /// The position was taken from this arena in its current generation, and nothing
    /// allocated after it is used any more.
    pub(crate) unsafe fn rewind(&mut self, cursor: &Cursor, start: *mut u8, ptr: *mut u8) {
        if self.current.is_null() {
            return; // no block: nothing was allocated since any position
        }
        let (start, ptr) = if start.addr() == SENTINEL {
            (data(self.first), data(self.first))
        } else {
            (start, ptr)
        };
        // Find the position's block at or before `current`, summing the fill before it.
        let mut base = 0;
        let mut keep = self.first;
        while data(keep) != start {
            if keep == self.current {
                return; // the position's block is past the current one: nothing to free
            }
            // SAFETY: blocks before `current` are ours and full.
            unsafe {
                base += (*keep).word.used;
                keep = (*keep).next;
            }
        }
        // The pointer is rebuilt from the block itself: a block trimmed and taken again at
        // the same address is a new allocation, which the old pointer may not stand for.
        // SAFETY: `keep` is at or before `current`.
        let fill = unsafe { self.fill_end(keep, cursor) };
        let to = fill.with_addr(ptr.addr().min(fill.addr()));
        // Give back [to, fill of `keep`) and the whole fill of every block after it up to
        // `current`; those blocks become spares.
        let mut b = keep;
        let mut from = to;
        loop {
            // SAFETY: a block at or before `current`; the bytes from `from` to its fill
            // were allocated after the position and are dead by contract.
            unsafe {
                let fill = self.fill_end(b, cursor);
                poison::give_back(from, fill.addr() - from.addr());
                (*b).word = Word { used: 0 };
            }
            if b == self.current {
                break;
            }
            // SAFETY: not the current block, so it has a successor.
            b = unsafe { (*b).next };
            from = data(b);
        }
        self.current = keep;
        let (win_start, win_end) = window(keep);
        cursor.enter(win_start, win_end, base);
        cursor.set_ptr(to);
    }

    /// After a `realloc` moved the top allocation `[p, p + bytes)` out of the block whose
    /// window starts at `old_start` into a later block: if that allocation still ends the
    /// block's recorded fill, the fill is lowered so its bytes stop counting as used.
    /// Anything else (the block is not one before the current block, or something was
    /// allocated after `p` in it) leaves the chain as it is: the bytes are then simply not
    /// reused before the next rewind or reset. Returns whether the tail was forgotten.
    ///
    /// # Safety
    /// `[p, p + bytes)` was an allocation of this arena and is dead.
    pub(crate) unsafe fn forget_tail(
        &mut self,
        cursor: &Cursor,
        old_start: *mut u8,
        p: *mut u8,
        bytes: usize,
    ) -> bool {
        let mut b = self.first;
        while !b.is_null() && b != self.current {
            if data(b) == old_start {
                // SAFETY: `b` is a block of the chain before `current`: ours, full, its
                // fill recorded in the header.
                let fill = unsafe { data(b).add((*b).word.used) };
                if p.addr().checked_add(bytes) != Some(fill.addr()) || p.addr() < data(b).addr() {
                    return false;
                }
                // SAFETY: `[p, fill)` is the dead allocation, inside `b`'s window; it is
                // the end of the fill, so lowering the fill frees exactly it, and the
                // position of every later block drops by as much.
                unsafe {
                    (*b).word.used -= bytes;
                    poison::give_back(fill.with_addr(p.addr()), bytes);
                }
                cursor.lower_base(bytes);
                return true;
            }
            // SAFETY: a block of the chain.
            b = unsafe { (*b).next };
        }
        false
    }

    /// Bytes of the pool blocks held, headers included: what the pool gave the arena.
    /// O(blocks).
    pub(crate) fn pool_bytes_held(&self) -> usize {
        let mut total = 0usize;
        let mut b = self.first;
        while !b.is_null() {
            // SAFETY: a block of the chain.
            unsafe {
                if !(*b).is_heap() {
                    total = total.saturating_add((*b).size);
                }
                b = (*b).next;
            }
        }
        total
    }

    /// The largest pool block held (null if none) and its window length: what `reset`
    /// would keep.
    pub(crate) fn largest_pool_block(&self) -> (*mut MemoryBlock, usize) {
        let mut best: (*mut MemoryBlock, usize) = (ptr::null_mut(), 0);
        let mut b = self.first;
        while !b.is_null() {
            // SAFETY: a block of the chain.
            unsafe {
                if !(*b).is_heap() && (best.0.is_null() || window_len(b) > best.1) {
                    best = (b, window_len(b));
                }
                b = (*b).next;
            }
        }
        best
    }

    /// Frees everything and carries out the reset policy's decision: poisons what was
    /// handed out, keeps the largest pool block (`Keep`) or one new block of the given
    /// size (`Replace`), gives every other block back, and puts the cursor at the start
    /// of the kept block. Returns whether a replacement was made.
    ///
    /// Every block goes back *before* a replacement is asked for, so the pool has room for
    /// it and never holds both. If the pool refuses, a block of the largest one's old size
    /// is asked for; if even that fails (another thread took the space) the arena holds no
    /// block and takes one on its next allocation.
    ///
    /// The caller proved (`&mut` on the arena) that nothing handed out is alive.
    pub(crate) fn reset(&mut self, pool: &MemoryPool, cursor: &Cursor, decision: Decision) -> bool {
        // Poison what was handed out, block by block; spares hold nothing.
        let mut b = self.first;
        let mut past_current = self.current.is_null();
        while !b.is_null() && !past_current {
            // SAFETY: blocks up to `current` are ours and dead.
            unsafe {
                let fill = self.fill_end(b, cursor);
                poison::give_back(data(b), fill.addr() - data(b).addr());
                past_current = b == self.current;
                b = (*b).next;
            }
        }
        let (largest, _) = self.largest_pool_block();
        // Unlink the largest and give back everything else.
        let rest = if largest.is_null() {
            std::mem::replace(&mut self.first, ptr::null_mut())
        } else {
            // SAFETY: `largest` is in our list; unlink it from its predecessor.
            unsafe {
                let mut prev: *mut *mut MemoryBlock = &mut self.first;
                while *prev != largest {
                    prev = &mut (**prev).next;
                }
                *prev = (*largest).next;
                (*largest).next = ptr::null_mut();
                std::mem::replace(&mut self.first, ptr::null_mut())
            }
        };
        self.current = ptr::null_mut();
        cursor.leave();
        // SAFETY: unlinked; everything in it is dead.
        unsafe { self.release_list(pool, rest) };

        let mut keep = largest;
        let mut replaced = false;
        if let Decision::Replace(size) = decision {
            // The replacement reuses the memory of the blocks it replaces, the largest
            // included: all of them are back before it is asked for, so the pool never
            // holds both (at a spike's reset that was twice the spike), the range they
            // merge into can serve it with its pages still resident, and a pool that grows
            // by segments (the web), which cannot merge two segments, can reuse them at
            // all. The tag is credited for the largest only once the replacement is taken,
            // as if it were still held: a budget sees no dip and no second crossing. Its
            // peak leaves it out (`TagNode::leave`): the pool never holds both.
            let mut old = None;
            if !keep.is_null() {
                // SAFETY: `keep` is ours, unlinked and dead.
                unsafe {
                    let capacity = (*keep).capacity();
                    old = Some((capacity, self.release_uncredited(pool, keep)));
                }
                keep = ptr::null_mut();
            }
            let mut fresh = self.take_block(pool, size, Ask::Tentatively);
            if let Some((capacity, owed)) = old {
                self.credit(pool, owed);
                if fresh.is_err() {
                    // Refused with the old block still counted (a limit), or its range
                    // taken by another thread meanwhile: again without it, or a block
                    // like the old one, or none (the next allocation takes one).
                    fresh = self
                        .take_block(pool, size, Ask::Tentatively)
                        .or_else(|_| self.take_block(pool, capacity, Ask::Tentatively));
                }
            }
            if let Ok(block) = fresh {
                keep = block;
                replaced = true;
            }
        }
        if !keep.is_null() {
            self.first = keep;
            self.enter(cursor, keep);
        }
        replaced
    }
}
