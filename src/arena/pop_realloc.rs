//! The top: the newest allocation of the current block, which can be popped or resized in
//! place (what makes a growing vector cheap).
//!
//! The top is `[p, p + size)` with `p >= start` (the cursor's window) and
//! `p + size == ptr`. Only the top can be popped or resized in place, and only while it
//! is the top; checking `p >= start` refuses pointers of other blocks and arenas. A moved
//! `realloc` forgets the old top only if it still ends its block's fill. Pointers handed
//! back are derived from the cursor's (the block's) provenance, never from the caller's,
//! and the bytes a pop takes back are poisoned through the cursor's pointer too (a
//! caller's may be read-only).
//!
//! **Colouring.** A moving grow of 2 KiB or more skips one cache line first: W4's vectors
//! of equal power-of-two sizes otherwise aliased in L1 and L2 and ran 5x slower.

use std::alloc::Layout;
use std::ptr::{self, NonNull};

use super::policy::round_block;
use super::{COLOUR, COLOUR_MIN, MemoryArena, Reports};
use crate::error::AllocError;
use crate::poison;

impl<'pool> MemoryArena<'pool> {
    /// Whether `[ptr, ptr + size)` is the newest allocation in the current block.
    #[inline]
    pub(crate) fn is_top(&self, ptr: *const u8, size: usize) -> bool {
        self.cursor.is_top(ptr, size)
    }

    /// Gives back the newest allocation (LIFO), so its bytes are reused by the next one.
    /// Returns `true` if `ptr` was the top of the current block; any other pointer
    /// (older, foreign, already popped) is a no-op that returns `false`. O(1).
    ///
    /// # Safety
    /// If `ptr` is the top allocation (made with `layout`'s size), it is not used
    /// afterwards: the next allocation will reuse its bytes.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let layout = Layout::new::<[u8; 100]>();
    /// let old = arena.alloc(layout);
    /// let top = arena.alloc(layout);
    /// // SAFETY: neither allocation is used again.
    /// unsafe {
    ///     assert!(!arena.pop(old, layout)); // not the top: nothing happens
    ///     assert!(arena.pop(top, layout));
    /// }
    /// assert_eq!(arena.alloc(layout), top);
    /// ```
    #[inline]
    pub unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        let ptr = ptr.as_ptr();
        if !self.is_top(ptr, layout.size()) {
            return false;
        }
        self.note_peak();
        // The top lies in the window, so its address is a valid position there; rebuilt
        // from the cursor's own pointer, which covers the window: the caller's may not even
        // allow writes (one made from a shared reference).
        let top = self.cursor.ptr().with_addr(ptr.addr());
        // SAFETY: the caller gives the top allocation up; it lies in the current block.
        unsafe { poison::give_back(top, layout.size()) };
        self.cursor.set_ptr(top);
        true
    }

    /// Resizes an allocation, keeping its first `min(old, new)` bytes and its alignment.
    ///
    /// In place (same pointer) when `ptr` is the top allocation and the block has room, and
    /// for any shrink. Otherwise allocates anew and copies; if the old bytes were the top,
    /// they stop counting in `bytes_used` (the block they are in is reused after the next
    /// rewind or reset). O(1) in place, O(size) when copying.
    ///
    /// # Safety
    /// `ptr` was allocated by this arena with `old` and is still live; after a successful
    /// call only the returned pointer is used.
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc); on error the old allocation is untouched.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let old = Layout::from_size_align(64, 8).unwrap();
    /// let p = arena.alloc(old);
    /// // SAFETY: p is live with layout `old`; we only use the result afterwards.
    /// let q = unsafe { arena.realloc(p, old, 4096) }.unwrap();
    /// assert_eq!(p, q); // the top grew in place
    /// ```
    pub unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let mut reports = Reports::default();
        // SAFETY: forwarded from the caller.
        let q = unsafe { self.realloc_deferred(ptr, old, new_size, &mut reports) };
        reports.emit();
        q
    }

    /// [`realloc`](MemoryArena::realloc) inside a larger operation of the crate: what a
    /// growth has to report is left in `reports`, for the caller to emit once its own
    /// operation is complete.
    ///
    /// # Safety
    /// As `realloc`.
    pub(crate) unsafe fn realloc_deferred(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
        reports: &mut Reports,
    ) -> Result<NonNull<u8>, AllocError> {
        let new = Layout::from_size_align(new_size, old.align())
            .map_err(|_| AllocError::layout(self.pool.name()))?;
        let p = ptr.as_ptr();
        let was_top = self.is_top(p, old.size());
        if was_top {
            let mut avail = self.cursor.end().addr() - p.addr();
            if new_size > avail && self.extend_in_place(p, new_size) {
                avail = self.cursor.end().addr() - p.addr();
            }
            if new_size <= avail {
                // The top lies in the window: rebuild its pointer from the cursor's, so the
                // result (and the poisoning through it) carries the block's provenance, not
                // that of whatever reference the caller derived `ptr` from.
                let top = self.cursor.ptr().with_addr(p.addr());
                // SAFETY: `[p, p + new_size)` lies in the current window; the part past the
                // old size was free, the part past the new size is given up.
                unsafe {
                    if new_size > old.size() {
                        poison::hand_out(top.add(old.size()), new_size - old.size());
                    } else {
                        self.note_peak();
                        poison::give_back(top.add(new_size), old.size() - new_size);
                    }
                }
                self.cursor.set_ptr(top.wrapping_add(new_size));
                // SAFETY: `top` has the address of the non-null `ptr`.
                return Ok(unsafe { NonNull::new_unchecked(top) });
            }
        } else if new_size <= old.size() {
            return Ok(ptr);
        }
        if new_size >= COLOUR_MIN {
            self.colour(new_size);
        }
        let old_start = self.cursor.start();
        // What the growth reports waits until the old bytes are copied and forgotten.
        let q = self.try_alloc_deferred(new, reports)?;
        // SAFETY: `q` is a fresh allocation of `new_size` bytes, disjoint from the live
        // `ptr`; we copy the bytes both hold. Then the old allocation is dead.
        unsafe { ptr::copy_nonoverlapping(p, q.as_ptr(), old.size().min(new_size)) };
        if was_top {
            // The old top did not fit in its block, so `q` is in a later one, and the old
            // block's recorded fill ends just past the old allocation (no colour line was
            // skipped: a top that does not fit in place leaves less than `new_size` in the
            // block, short of what `colour` needs). Lower that fill so the old bytes stop
            // counting as used. `forget_tail` checks that the allocation still ends the
            // fill rather than trusting it (no user code ran in between: the growth's
            // events wait for the caller, but the check costs nothing on this path).
            self.note_peak();
            // SAFETY: `[p, p + old.size())` was this arena's top allocation, and the caller
            // gives it up now that its bytes are copied.
            unsafe {
                self.chain
                    .lock()
                    .forget_tail(&self.cursor, old_start, p, old.size())
            };
        }
        Ok(q)
    }

    /// Grows the current block in place, into the pool's free range after it, so that the
    /// top allocation at `p` can reach `new_size` bytes without moving (no copy, no old
    /// copy left behind). The window is grown to a whole block granule past the need.
    /// `false` if the range after the block is not free (the caller moves the top).
    #[cold]
    fn extend_in_place(&self, p: *mut u8, new_size: usize) -> bool {
        let start = self.cursor.start().addr();
        let Some(usable) = p
            .addr()
            .checked_add(new_size)
            .map(|end| round_block(end - start))
        else {
            return false;
        };
        let end = start.saturating_add(usable);
        let grown = self
            .chain
            .lock()
            .try_extend_current(self.pool, &self.cursor, end);
        if grown {
            // The block is larger: the next reset decides in full.
            self.leave_steady_state();
        }
        grown
    }

    /// Skips one cache line before a moving grow, when the block has room for it.
    ///
    /// Vectors grown in turn (W4) otherwise get equal power-of-two buffers laid end to end,
    /// whose write streams all map to the same L1/L2 cache sets and evict each other: a 5x
    /// slowdown measured here. Offsetting each buffer by a line breaks the aliasing, at a
    /// cost of at most 64 bytes per moving grow of 2 KiB or more.
    #[cold]
    fn colour(&self, new_size: usize) {
        if self.cursor.remaining() >= new_size.saturating_add(2 * COLOUR) {
            let p = self.cursor.ptr();
            self.cursor.set_ptr(p.wrapping_add(COLOUR));
        }
    }
}
