//! `reset`: freeing everything at once, and the steady state in which that costs two cache
//! lines.
//!
//! `reset(&mut self)` asks the reset policy (`policy`) once which block to keep and carries
//! the decision out. After each full reset it works out the **steady band**: the peaks for
//! which the policy would keep the one block as it is. A reset whose peak falls in the band
//! (and that has no label, no quiet streak and one pool block) touches the arena's first
//! two cache lines and nothing else. Internal resets (a scratch arena freed in a drop) use
//! `reset_quietly`, which records the events instead of telling them.

use std::sync::atomic::Ordering::Relaxed;

use super::policy::{self, Decision, Quiet};
use super::{MemoryArena, NO_BAND};
use crate::block::{HEADER, MIN_BLOCK};
use crate::poison;

/// The most a block replacing blocks of `held` bytes together (headers included) may
/// hold, so that it takes no more of the pool than they did: less its own header, and
/// less the remainder the pool may add to a block (under `MIN_BLOCK`).
fn replacement_room(held: usize) -> usize {
    held.saturating_sub(HEADER + MIN_BLOCK)
}

impl<'pool> MemoryArena<'pool> {
    /// Frees everything at once and gives every block but one back to the pool.
    /// O(1) in the steady state; O(blocks held) otherwise.
    ///
    /// The block kept is the one that best serves the next frame: the largest held, if it
    /// fits everything this frame used (plus 1/8); otherwise a single new block of that
    /// size (and at least 1.25 times the largest) replaces them all, but never one larger
    /// than the blocks it replaces together: after a reset the arena holds no more of its
    /// pool than at the frame's deepest point (so a lone block grows only when a frame
    /// spills over it). So after a warm-up
    /// frame, a steady workload does no pool operation at all, and its reset touches
    /// nothing but the arena's own fields. If the kept block stays more than twice too
    /// large for [`ArenaConfig::trim_after_resets`](crate::ArenaConfig::trim_after_resets)
    /// resets in a row, it is swapped for one sized to those frames, so one spike does not
    /// pin its memory for ever. A block sized after a frame that spilled over several
    /// blocks counts what collections that outgrew a block left behind; if the next 8
    /// frames need less than 1/1.25 of it, it is swapped for one sized to them.
    ///
    /// Bumps the arena's generation: every [`Checkpoint`](crate::Checkpoint) taken before is invalid.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// for _ in 0..4 {
    ///     arena.alloc_slice(300_000, 1u8); // spills over several blocks
    /// }
    /// assert!(arena.block_count() > 1);
    /// arena.reset();
    /// assert_eq!((arena.block_count(), arena.bytes_used()), (1, 0));
    /// ```
    ///
    /// `&mut self` is what makes it safe: no allocation, and no collection allocating from
    /// the arena, can be alive across it.
    ///
    /// ```compile_fail,E0502
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let value = arena.alloc_val(7u64);
    /// arena.reset(); // cannot borrow `arena` as mutable: `value` borrows it
    /// println!("{value}");
    /// ```
    ///
    /// ```compile_fail,E0502
    /// use allocator_api2::vec::Vec;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let mut v = Vec::new_in(&arena);
    /// v.push(1u32);
    /// arena.reset(); // cannot borrow `arena` as mutable: `v` borrows it
    /// v.push(2);
    /// ```
    #[inline]
    pub fn reset(&mut self) {
        if !self.reset_steady() {
            self.reset_slow();
            // A replacement block may have crossed a tag's warn budget: told now that the
            // reset is complete.
            crate::ledger::emit_pending_warnings();
        }
    }

    /// [`reset`](MemoryArena::reset) inside a larger operation of the crate, or a drop:
    /// runs no user code (a budget crossing stays pending, for the next operation that
    /// reports to tell).
    #[inline]
    pub(crate) fn reset_quietly(&mut self) {
        if !self.reset_steady() {
            self.reset_slow();
        }
    }

    /// The steady reset, if the arena is in the steady state; `false` (and nothing done)
    /// otherwise.
    #[inline(always)]
    fn reset_steady(&mut self) -> bool {
        // The steady state: the arena holds one pool block that the reset policy keeps as it
        // is for this frame's peak (it lies in the steady band), so nothing is decided and
        // only the arena's first cache lines are touched: no lock, no block header, no
        // pool. With one block the cursor is in it and `base` is 0, so `ptr - start` is the
        // frame's `bytes_used`.
        let start = self.cursor.start();
        let used = self.cursor.used_here();
        let peak = (*self.peak_since_reset.get_mut()).max(used);
        if peak.wrapping_sub(*self.steady_lo.get_mut()) <= *self.steady_span.get_mut() {
            debug_assert!(self.steady_state_agrees(peak), "steady band out of date");
            // SAFETY: everything handed out from the block is dead (`&mut self`), and with
            // one block that is exactly `[start, ptr)`.
            unsafe { poison::give_back(start, used) };
            self.cursor.set_ptr(start);
            *self.peak_since_reset.get_mut() = 0;
            let high = self.high_watermark.get_mut();
            *high = (*high).max(peak);
            self.generation += 1;
            // The ledger's `used`: the frame's peak, a plain store (none if untagged).
            self.chain.get_mut().publish_used(peak);
            return true;
        }
        false
    }

    /// `reset` outside the steady band: decide with the reset policy, carry the decision
    /// out, then work out the new steady band. Runs no user code.
    #[cold]
    #[inline(never)]
    fn reset_slow(&mut self) {
        // `&mut self`: plain accesses, no atomic read-modify-write.
        let peak = std::mem::take(self.peak_since_reset.get_mut()).max(self.cursor.position());
        let high = self.high_watermark.get_mut();
        *high = (*high).max(peak);
        self.generation += 1;
        self.labels.get_mut().clear();
        let chain = self.chain.get_mut();
        chain.publish_used(peak);
        let single = chain.is_single_pool_block();
        let (kept, held) = if single {
            let kept = self.cursor.window_len();
            (kept, kept.saturating_add(HEADER))
        } else if chain.block_count() == 0 {
            return;
        } else {
            (chain.largest_pool_block().1, chain.pool_bytes_held())
        };
        // The replacement takes no more of the pool than the blocks held now, at the
        // frame's deepest point.
        let room = replacement_room(held);
        let (decision, quiet) = policy::decide(kept, peak, self.quiet, &self.config, room);
        self.quiet = quiet;
        if single && decision == Decision::Keep {
            let start = self.cursor.start();
            // SAFETY: everything handed out from the block is dead (`&mut self`).
            unsafe { poison::give_back(start, self.cursor.used_here()) };
            self.cursor.set_ptr(start);
        } else if chain.reset(self.pool, &self.cursor, decision) {
            // Sized after a frame that spilled: its peak counts what moved collections
            // left behind, so the size waits for the next frames to confirm it.
            let spilled = !single && matches!(decision, Decision::Replace(_));
            self.quiet = Quiet::sized_after(spilled);
        }
        self.enter_steady_state();
    }

    /// Works out the steady band after a full reset (see `steady_lo`).
    fn enter_steady_state(&mut self) {
        let steady = self.chain.get_mut().is_single_pool_block()
            && self.quiet == Quiet::default()
            && self.labels.get_mut().is_empty();
        let (lo, span) = if steady {
            match policy::keep_band(self.cursor.window_len(), &self.config) {
                Some((lo, hi)) => (lo, hi - lo),
                None => NO_BAND,
            }
        } else {
            NO_BAND
        };
        *self.steady_lo.get_mut() = lo;
        *self.steady_span.get_mut() = span;
    }

    /// Empties the steady band: a block or a tag came in, so the next reset decides in full.
    pub(super) fn leave_steady_state(&self) {
        self.steady_lo.store(NO_BAND.0, Relaxed);
        self.steady_span.store(NO_BAND.1, Relaxed);
    }

    /// Whether the fast reset's shortcut is what the reset policy would do (debug check).
    fn steady_state_agrees(&mut self, peak: usize) -> bool {
        let window = self.cursor.window_len();
        self.chain.get_mut().is_single_pool_block()
            && self.cursor.base() == 0
            && self.quiet == Quiet::default()
            && self.labels.get_mut().is_empty()
            && policy::decide(
                window,
                peak,
                self.quiet,
                &self.config,
                replacement_room(window + HEADER),
            ) == (Decision::Keep, Quiet::default())
    }

    /// Frees everything at once, like [`reset`](MemoryArena::reset), and gives **every**
    /// block back to the pool: the arena then holds nothing and takes a first block again
    /// at its next allocation. For an arena that will be idle for a while (the crate's own
    /// per-thread scratch arenas do this after a few idle frames). O(blocks held).
    ///
    /// Bumps the arena's generation: every [`Checkpoint`](crate::Checkpoint) taken before
    /// is invalid.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_slice(300_000, 1u8);
    /// arena.reset_and_release();
    /// assert_eq!((arena.block_count(), arena.bytes_held()), (0, 0));
    /// arena.alloc_val(7u32); // takes a block again
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn reset_and_release(&mut self) {
        let peak = std::mem::take(self.peak_since_reset.get_mut()).max(self.cursor.position());
        let high = self.high_watermark.get_mut();
        *high = (*high).max(peak);
        self.generation += 1;
        self.labels.get_mut().clear();
        self.quiet = Quiet::default();
        let chain = self.chain.get_mut();
        chain.publish_used(0);
        // Poison and give back in one go: nothing handed out is alive (`&mut self`).
        chain.reset(self.pool, &self.cursor, Decision::Keep);
        chain.release_all(self.pool, &self.cursor);
        *self.steady_lo.get_mut() = NO_BAND.0;
        *self.steady_span.get_mut() = NO_BAND.1;
    }

    /// Gives the cached spare blocks (those after the current one) back to the pool.
    /// O(spares).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u8);
    /// arena.scope(|a| { a.alloc_slice(200_000, 0u8); }); // needs a second block
    /// assert_eq!(arena.block_count(), 2);
    /// arena.trim_spares();
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn trim_spares(&mut self) {
        self.chain.get_mut().trim_spares(self.pool);
    }
}
