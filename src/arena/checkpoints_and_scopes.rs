//! Positions: checkpoints, rewinds and scopes.
//!
//! A [`Checkpoint`] is the cursor's position (the start of its window and the bump
//! pointer) plus the arena's id and generation. Rewinding frees everything allocated
//! after it. A checkpoint from another arena, or from before a reset, is refused with a
//! panic; one that lies *ahead* of the current position (the bytes after it were already
//! given back by a pop or an earlier rewind) leaves the position where it is: a rewind
//! never moves forward.
//!
//! `rewind` is `unsafe`: the caller promises that nothing allocated after the checkpoint is
//! used again. Scopes ([`MemoryArena::scope`](crate::MemoryArena::scope),
//! [`MemoryArena::scope_guard`](crate::MemoryArena::scope_guard)) are the safe form: they
//! take `&mut self`, and everything allocated inside borrows the scope.

use std::ops::Deref;

use super::MemoryArena;

/// A saved arena position, from [`MemoryArena::checkpoint`]; [`MemoryArena::rewind`] goes
/// back to it.
///
/// ```
/// use nebula_memory::Arena;
/// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
/// let mut arena = nebula_memory::MemoryArena::new(&pool);
/// let mark = arena.checkpoint();
/// arena.alloc_slice(1000, 0u8);
/// // SAFETY: nothing allocated after `mark` is used again.
/// unsafe { arena.rewind(mark) };
/// assert_eq!(arena.bytes_used(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    arena: u64,
    generation: u64,
    /// Window start of the block the position is in (the sentinel before any block).
    start: *mut u8,
    ptr: *mut u8,
}

impl<'pool> MemoryArena<'pool> {
    /// Records the current position. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let a = arena.checkpoint();
    /// assert_eq!(a, arena.checkpoint());
    /// ```
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            arena: self.id,
            generation: self.generation,
            start: self.cursor.start(),
            ptr: self.cursor.ptr(),
        }
    }

    /// Frees everything allocated since `to` was taken. Blocks entered since then stay
    /// cached as spares (the next allocations reuse them) until the next reset.
    /// O(blocks held).
    ///
    /// If the position is already below `to` (a collection whose buffer was the top before
    /// `to` was taken has since been dropped and popped, or an earlier rewind went further
    /// back), nothing is freed and the position stays where it is.
    ///
    /// # Safety
    /// No reference or pointer into memory allocated after `to` is used afterwards.
    ///
    /// # Panics
    /// If `to` does not belong to this arena's current generation: it came from another
    /// arena, or a `reset` has since invalidated it. Nothing changes then.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u64);
    /// let mark = arena.checkpoint();
    /// arena.alloc_slice(100_000, 0u8); // a second block
    /// // SAFETY: the slice is not used again.
    /// unsafe { arena.rewind(mark) };
    /// assert_eq!(arena.bytes_used(), 8);
    /// assert_eq!(arena.block_count(), 2); // the second block is cached
    /// ```
    #[track_caller]
    pub unsafe fn rewind(&self, to: Checkpoint) {
        if to.arena != self.id || to.generation != self.generation {
            self.bad_checkpoint(to);
        }
        self.note_peak();
        // SAFETY: `to` is a position of this arena in this generation (checked above), and
        // the caller promises nothing allocated after it is used.
        unsafe { self.chain.lock().rewind(&self.cursor, to.start, to.ptr) };
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn bad_checkpoint(&self, to: Checkpoint) -> ! {
        let why = if to.arena != self.id {
            "it was taken from another arena"
        } else {
            "the arena has been reset since it was taken"
        };
        panic!(
            "arena on pool '{}': rewind to a checkpoint that is not a position of this arena: {why}",
            self.pool.name()
        )
    }

    /// Runs `f` with this arena and frees everything `f` allocated when it returns (or
    /// panics). Safe: `f` gets a shared borrow that cannot escape, and `&mut self` proves no
    /// allocation from before is alive, so nothing can reach the memory given back. O(1)
    /// plus the rewind (O(blocks held)).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let sum = arena.scope(|a| a.alloc_slice_fill_with(100, |i| i as u64).iter().sum::<u64>());
    /// assert_eq!(sum, 4950);
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    ///
    /// What `f` allocates cannot leave it, neither returned nor stored outside:
    ///
    /// ```compile_fail
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let escaped: &mut u32 = arena.scope(|a| a.alloc_val(1u32)); // lifetime may not live long enough
    /// *escaped += 1;
    /// ```
    ///
    /// ```compile_fail,E0521
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let mut escaped = None;
    /// arena.scope(|a| escaped = Some(a.alloc_val(1u32))); // borrowed data escapes the closure
    /// *escaped.unwrap() += 1;
    /// ```
    pub fn scope<R>(&mut self, f: impl FnOnce(&MemoryArena<'pool>) -> R) -> R {
        let guard = self.scope_guard();
        f(&guard)
    }

    /// A guard that derefs to this arena and rewinds it to the current position when
    /// dropped. Allocations borrow the guard, so they cannot outlive it. O(1); the rewind
    /// on drop is O(blocks held).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// {
    ///     let scope = arena.scope_guard();
    ///     let v = scope.alloc_val(5u32);
    ///     assert_eq!(*v, 5);
    /// }
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    ///
    /// An allocation cannot outlive its guard, so it is never alive at the rewind:
    ///
    /// ```compile_fail,E0597
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let escaped;
    /// {
    ///     let guard = arena.scope_guard();
    ///     escaped = guard.alloc_val(1u32); // `guard` does not live long enough
    /// }
    /// *escaped += 1;
    /// ```
    pub fn scope_guard(&mut self) -> ArenaScope<'_, 'pool> {
        ArenaScope {
            mark: self.checkpoint(),
            arena: self,
        }
    }
}

/// A scope over an arena: derefs to it and rewinds it to where it was when dropped.
/// Created by [`MemoryArena::scope_guard`].
///
/// ```
/// use nebula_memory::Arena;
/// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
/// let scope = arena.scope_guard();
/// scope.alloc_str("temporary");
/// drop(scope);
/// assert_eq!(arena.bytes_used(), 0);
/// ```
pub struct ArenaScope<'a, 'pool> {
    arena: &'a mut MemoryArena<'pool>,
    mark: Checkpoint,
}

impl<'pool> Deref for ArenaScope<'_, 'pool> {
    type Target = MemoryArena<'pool>;
    fn deref(&self) -> &MemoryArena<'pool> {
        self.arena
    }
}

impl Drop for ArenaScope<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: every allocation made through this scope borrows it, so none is alive
        // now; allocations from before the scope cannot be alive either, since the scope
        // holds the arena by `&mut`. The mark is of this arena and generation (nothing can
        // reset the arena while the scope holds it); if an `unsafe` rewind inside the scope
        // already went below it, this rewind leaves the position alone.
        unsafe { self.arena.rewind(self.mark) }
    }
}
