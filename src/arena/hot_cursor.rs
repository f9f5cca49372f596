//! `HotCursor`: the arena's bump position held by the caller, in registers, for hot loops.
//!
//! Through `&MemoryArena`, every allocation loads the cursor from the arena and stores it
//! back: the slow path is a call that takes the arena, so the optimiser must assume the
//! cursor changes across it and cannot keep it in a register. A loop of small allocations
//! then pays a store-to-load round trip per allocation (about 1 ns on a good run of the
//! W6 machine, 3 ns on a bad one). A `HotCursor` copies the position and the window end
//! into two locals of the caller's frame, bumps them there, and writes the position back
//! once, when it is dropped.
//!
//! **Why it is sound.** The cursor borrows the arena mutably (`MemoryArena::hot_cursor`
//! takes `&mut self`), so while it lives nothing else can reach the arena: no other
//! allocation, figure, checkpoint or reset can see the stale position it left there. Its
//! slow path writes the position back before the arena grows, and reads the new window
//! afterwards; its slow-path calls take the arena and the position by value, never the
//! cursor itself, so the cursor's address does not escape and its fields stay in
//! registers. If it is leaked (`mem::forget`), the arena keeps the position of the last
//! write-back: the bytes handed out since are handed out again, but every reference to
//! them borrowed the cursor or the arena, so none can still be alive by then.
//!
//! **User code sees it whole.** A growth's events (a budget WARN, a pool exhaustion) reach
//! a `tracing` subscriber, which may allocate through this very cursor (a leaked one is
//! `'static`) or panic through its drop. So every slow path reloads the registers from the
//! arena first and emits the events last; and every write-back checks the position lies
//! in the arena's window (`Cursor::write_back`), a real assertion, not a debug one.

use std::alloc::Layout;
use std::cell::Cell;
use std::ptr::NonNull;

use super::cursor::fit;
use super::{MemoryArena, Reports};
use crate::arena_trait::Arena;
use crate::error::AllocError;
use crate::error::alloc_failed;
use crate::poison;

/// A [`MemoryArena`]'s bump position, held by the caller for a hot loop: allocation bumps
/// two locals (kept in registers) instead of the arena's fields, and the position is
/// written back to the arena once, when the cursor is dropped. From
/// [`MemoryArena::hot_cursor`].
///
/// It implements [`Arena`], so every typed helper works through it (references borrow the
/// cursor, so they end with it; the memory itself stays the arena's until its next reset).
/// Growth works as through the arena: a request that does not fit takes the next block.
/// While the cursor lives the arena is mutably borrowed, so nothing else can use it.
///
/// ```
/// use nebula_memory::{Arena, MemoryArena, MemoryPool};
///
/// let pool = MemoryPool::new("particles", 8 << 20).unwrap();
/// let mut arena = MemoryArena::new(&pool);
/// for _frame in 0..3 {
///     {
///         let hot = arena.hot_cursor();
///         for i in 0..10_000u32 {
///             let p = hot.alloc_val([i as f32; 4]); // 10,000 x 16 B: more than one block
///             p[0] += 1.0;
///         }
///     } // the position is written back here
///     assert_eq!(arena.bytes_used(), 160_000);
///     arena.reset();
/// }
/// ```
pub struct HotCursor<'a, 'pool> {
    /// The first free byte, with the window's provenance.
    ptr: Cell<*mut u8>,
    /// The window's end.
    end: Cell<*mut u8>,
    arena: &'a mut MemoryArena<'pool>,
}

impl<'pool> MemoryArena<'pool> {
    /// A [`HotCursor`] over this arena: allocation in a hot loop with the bump position in
    /// registers, written back once when the cursor is dropped. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let hot = arena.hot_cursor();
    /// let ids = hot.alloc_slice_copy(&[1u32, 2, 3]);
    /// assert_eq!(ids.iter().sum::<u32>(), 6);
    /// drop(hot);
    /// assert_eq!(arena.bytes_used(), 12);
    /// ```
    #[inline(always)]
    pub fn hot_cursor(&mut self) -> HotCursor<'_, 'pool> {
        HotCursor {
            ptr: Cell::new(self.cursor.ptr()),
            end: Cell::new(self.cursor.end()),
            arena: self,
        }
    }
}

impl<'a, 'pool> HotCursor<'a, 'pool> {
    /// The bump, on the locals. `None` if the request does not fit the window.
    #[inline(always)]
    fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let ptr = self.ptr.get();
        let (start, new_ptr) = fit::fit(ptr.addr(), self.end.get().addr(), layout)?;
        // `start..new_ptr` lies in the window (or is zero bytes at the sentinel), so
        // `with_addr` keeps the window's provenance.
        self.ptr.set(ptr.with_addr(new_ptr));
        // SAFETY: `start >= ptr >= the window start`, and no window starts at address 0.
        let p = unsafe { NonNull::new_unchecked(ptr.with_addr(start)) };
        // SAFETY: the bytes were just carved out for the caller.
        unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
        Some(p)
    }

    /// Takes the position and the window back from the arena after a slow-path call.
    #[inline(always)]
    fn reload(&self, (ptr, end): (*mut u8, *mut u8)) {
        self.ptr.set(ptr);
        self.end.set(end);
    }

    /// The arena's bytes used (as [`MemoryArena::bytes_used`]), counting what this cursor
    /// handed out so far. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let hot = arena.hot_cursor();
    /// hot.alloc_val(1u64);
    /// assert_eq!(hot.bytes_used(), 8);
    /// ```
    pub fn bytes_used(&self) -> usize {
        let cursor = &self.arena.cursor;
        cursor
            .base()
            .saturating_add(self.ptr.get().addr().saturating_sub(cursor.start().addr()))
    }
}

/// What a refill hands back: the allocation, the arena's position and window end after it,
/// and the events of the growth, which the cursor emits only once its registers hold that
/// position (a subscriber may use this very cursor, or panic through its drop).
struct Refill {
    result: Result<NonNull<u8>, AllocError>,
    window: (*mut u8, *mut u8),
    reports: Reports,
}

/// The slow path of a hot cursor: writes `ptr` back to the arena, allocates there (taking
/// a block if needed) and returns the result with the arena's new position and window
/// end. Takes the arena and the position by value, so the caller's cursor never escapes.
/// Runs no user code.
#[cold]
#[inline(never)]
fn refill(arena: &MemoryArena<'_>, ptr: *mut u8, layout: Layout) -> Refill {
    arena.cursor.write_back(ptr);
    let mut reports = Reports::default();
    let result = arena.try_alloc_deferred(layout, &mut reports);
    Refill {
        result,
        window: (arena.cursor.ptr(), arena.cursor.end()),
        reports,
    }
}

/// Every typed helper, on the cursor's registers. `pop` and `realloc` act on the top of
/// the current block, as on the arena.
///
/// Each slow path reloads the registers from the arena **before** it emits the growth's
/// events or panics: user code (a subscriber, a panic hook, a drop during unwinding) then
/// finds the cursor and the arena in agreement.
// SAFETY: every pointer comes from `bump` on the window the registers hold (a window of
// the arena's current block, reloaded after every call into the arena) or from the
// arena's own `try_alloc` / `realloc`, whose contract is the trait's; the arena is
// mutably borrowed for the cursor's life, so nothing else hands out its bytes meanwhile.
unsafe impl Arena for HotCursor<'_, '_> {
    #[inline(always)]
    fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if let Some(p) = self.bump(layout) {
            return Ok(p);
        }
        let Refill {
            result,
            window,
            reports,
        } = refill(self.arena, self.ptr.get(), layout);
        self.reload(window);
        reports.emit();
        result
    }

    #[inline(always)]
    #[track_caller]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        match self.try_alloc(layout) {
            Ok(p) => p,
            Err(e) => alloc_failed(&e),
        }
    }

    #[inline]
    unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        self.arena.cursor.write_back(self.ptr.get());
        // SAFETY: forwarded from the caller.
        let popped = unsafe { self.arena.pop(ptr, layout) };
        self.ptr.set(self.arena.cursor.ptr());
        popped
    }

    #[inline]
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        self.arena.cursor.write_back(self.ptr.get());
        let mut reports = Reports::default();
        // SAFETY: forwarded from the caller: `ptr` was allocated through this cursor (so
        // by the arena) and is live.
        let r = unsafe {
            self.arena
                .realloc_deferred(ptr, old, new_size, &mut reports)
        };
        self.reload((self.arena.cursor.ptr(), self.arena.cursor.end()));
        reports.emit();
        r
    }

    fn pool_name(&self) -> &'static str {
        self.arena.pool.name()
    }
}

/// Writes the position back: the arena sees everything the cursor handed out.
impl Drop for HotCursor<'_, '_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.arena.cursor.write_back(self.ptr.get());
    }
}

impl std::fmt::Debug for HotCursor<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotCursor")
            .field("ptr", &self.ptr.get())
            .field("end", &self.end.get())
            .field("bytes_used", &self.bytes_used())
            .finish()
    }
}
