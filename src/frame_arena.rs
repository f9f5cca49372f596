//! `FrameArena`: the fixed-capacity arena API game code knows (`alloc` returning `Option`,
//! `unsafe reset(&self)`), named after its usual lifetime, a frame. Its user resets it; the
//! crate's frame end does not.
//!
//! A `FrameArena` is a bump [`Cursor`] over the first `capacity` usable bytes of one block
//! of a pool (the scratch pool unless told otherwise): the same bump path as every other
//! arena of the crate. Its window starts 16-aligned (block data is); alignments of any size
//! are honoured by aligning the address, with the padding counted in `bytes_used`.
//!
//! The thread arenas of [`thread_arena_alloc`](crate::thread_arena_alloc) offer the same
//! classic API per thread, on growing arenas (`crate::per_thread`).

use std::alloc::Layout;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use crate::arena::chain::{Chain, Reports};
use crate::arena::cursor::Cursor;
use crate::arena_trait::Arena;
use crate::error::{AllocError, PoolError};
use crate::global::scratch_pool;
use crate::poison;
use crate::pool::MemoryPool;

/// A fixed-capacity bump arena for per-frame allocations, over one block of a pool.
///
/// All allocations are freed together by [`reset`](FrameArena::reset), in O(1).
///
/// ```
/// use std::alloc::Layout;
/// use nebula_memory::FrameArena;
///
/// let arena = FrameArena::new(4096);
/// let p = arena.alloc(Layout::from_size_align(64, 8).unwrap()).unwrap();
/// assert_eq!(p.as_ptr() as usize % 8, 0);
/// assert_eq!(arena.bytes_used(), 64);
/// // SAFETY: `p` is not used after this.
/// unsafe { arena.reset() };
/// assert_eq!(arena.bytes_remaining(), 4096);
/// ```
pub struct FrameArena {
    cursor: Cursor,
    /// One block, taken and given back through the chain like every arena's.
    chain: Chain,
    capacity: usize,
    high_watermark: AtomicUsize,
    pool: &'static MemoryPool,
    /// Bumping is not atomic: one thread at a time.
    _not_sync: PhantomData<Cell<()>>,
}

impl FrameArena {
    /// An arena of exactly `capacity` usable bytes, backed by a block of the scratch pool.
    /// O(1).
    ///
    /// # Panics
    /// If `capacity` is 0 or the scratch pool cannot supply the block (use
    /// [`FrameArena::try_new_in`] to get the error instead).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(1 << 20);
    /// assert_eq!(arena.capacity(), 1 << 20);
    /// ```
    #[track_caller]
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "Arena capacity must be > 0");
        match Self::try_new_in(scratch_pool(), capacity) {
            Ok(arena) => arena,
            Err(e) => panic!("FrameArena::new({capacity}): {e}"),
        }
    }

    /// An arena of exactly `capacity` usable bytes in a block of `pool`. O(1).
    ///
    /// # Errors
    /// The pool's refusal ([`PoolError::ZeroSize`] for a capacity of 0).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::try_new_in(nebula_memory::engine_pool(), 4096).unwrap();
    /// assert_eq!(arena.bytes_remaining(), 4096);
    /// ```
    pub fn try_new_in(pool: &'static MemoryPool, capacity: usize) -> Result<Self, PoolError> {
        let cursor = Cursor::empty();
        let mut chain = Chain::new();
        let mut reports = Reports::default();
        let taken = chain.take_fixed(pool, &cursor, capacity, &mut reports);
        reports.emit();
        taken?;
        Ok(FrameArena {
            cursor,
            chain,
            capacity,
            high_watermark: AtomicUsize::new(0),
            pool,
            _not_sync: PhantomData,
        })
    }

    /// Allocates `layout.size()` bytes aligned to `layout.align()` (any power of two), or
    /// `None` when the arena has no room. O(1). The memory is valid until the next reset.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::FrameArena::new(256);
    /// assert!(arena.alloc(Layout::from_size_align(256, 1).unwrap()).is_some());
    /// assert!(arena.alloc(Layout::from_size_align(1, 1).unwrap()).is_none());
    /// ```
    #[inline]
    pub fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        let p = self.cursor.bump(layout)?;
        // SAFETY: the bytes were just carved out of our block for the caller.
        unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
        Some(p)
    }

    /// Moves `value` into the arena; `None` when it has no room. O(1).
    ///
    /// `T` must not need dropping (the arena never runs destructors): a type with drop
    /// glue fails to compile.
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// let v = arena.alloc_val(42u64).unwrap();
    /// *v += 1;
    /// assert_eq!(*v, 43);
    /// ```
    #[allow(clippy::mut_from_ref)]
    pub fn alloc_val<T>(&self, value: T) -> Option<&mut T> {
        const {
            assert!(
                !std::mem::needs_drop::<T>(),
                "FrameArena never runs destructors: this type has one"
            )
        };
        let p = self.alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: fresh, aligned memory for one T, valid until reset (which is unsafe and
        // requires that no reference is held).
        unsafe {
            p.write(value);
            Some(&mut *p.as_ptr())
        }
    }

    /// A slice of `count` copies of `value`; `None` when it does not fit or the size
    /// overflows. O(count).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// assert_eq!(arena.alloc_slice(3, 9u8).unwrap(), &[9, 9, 9]);
    /// assert!(arena.alloc_slice(usize::MAX, 0u32).is_none());
    /// ```
    #[allow(clippy::mut_from_ref)]
    pub fn alloc_slice<T: Copy>(&self, count: usize, value: T) -> Option<&mut [T]> {
        let layout = Layout::array::<T>(count).ok()?;
        let p = self.alloc(layout)?.cast::<T>().as_ptr();
        // SAFETY: room for `count` Ts was just allocated.
        unsafe {
            for i in 0..count {
                p.add(i).write(value);
            }
            Some(std::slice::from_raw_parts_mut(p, count))
        }
    }

    /// Frees every allocation at once. O(1) (debug builds also fill the freed bytes with
    /// 0xDD).
    ///
    /// # Safety
    /// No pointer or reference into the arena is used after this call.
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// arena.alloc_val(1u32);
    /// // SAFETY: the value is not used again.
    /// unsafe { arena.reset() };
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    pub unsafe fn reset(&self) {
        let start = self.cursor.start();
        let used = self.cursor.used_here();
        self.high_watermark.fetch_max(used, Relaxed);
        // SAFETY: the caller guarantees the handed-out bytes are dead.
        unsafe { poison::give_back(start, used) };
        self.cursor.set_ptr(start);
    }

    /// Bytes allocated since the last reset, alignment padding included. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    pub fn bytes_used(&self) -> usize {
        self.cursor.used_here()
    }

    /// Usable bytes: exactly the capacity asked for. O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::FrameArena::new(100).capacity(), 100);
    /// ```
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The most bytes ever in use at once, across resets. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// arena.alloc_slice(10, 0u8);
    /// // SAFETY: the slice is not used again.
    /// unsafe { arena.reset() };
    /// assert_eq!(arena.high_watermark(), 10);
    /// ```
    pub fn high_watermark(&self) -> usize {
        self.high_watermark.load(Relaxed).max(self.bytes_used())
    }

    /// `capacity() - bytes_used()`. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// arena.alloc_val(0u32);
    /// assert_eq!(arena.bytes_remaining(), 60);
    /// ```
    pub fn bytes_remaining(&self) -> usize {
        self.cursor.remaining()
    }
}

/// The arena interface: typed helpers that panic (or return [`AllocError::Full`]) when the
/// arena has no room. The inherent seed methods keep their `Option` results:
/// `arena.alloc_val(x)` is the inherent one, `Arena::alloc_val(&arena, x)` the trait's.
///
/// ```
/// use nebula_memory::{Arena, FrameArena};
/// let arena = FrameArena::new(64);
/// assert_eq!(Arena::alloc_slice_copy(&arena, &[1u8, 2, 3]), &[1, 2, 3]);
/// assert!(arena.try_alloc_str(&"x".repeat(100)).is_err()); // full: an error, not a panic
/// ```
// SAFETY: every allocation is carved out of the one block's window by the cursor, past
// every earlier one; the bytes come back only through the `unsafe` reset (whose contract
// excludes live allocations), a `pop` of the top (likewise), or drop (`&mut`).
unsafe impl Arena for FrameArena {
    #[inline]
    fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.alloc(layout).ok_or_else(|| AllocError::Full {
            pool: self.pool.name(),
            requested: layout.size(),
            remaining: self.bytes_remaining(),
        })
    }

    #[inline]
    unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        if !self.cursor.is_top(ptr.as_ptr(), layout.size()) {
            return false;
        }
        // The window's own pointer at the top's address (see `MemoryArena::pop`).
        let top = self.cursor.ptr().with_addr(ptr.as_ptr().addr());
        // SAFETY: the caller gives the top allocation up; it lies in our window.
        unsafe { poison::give_back(top, layout.size()) };
        self.cursor.set_ptr(top);
        true
    }

    fn pool_name(&self) -> &'static str {
        self.pool.name()
    }
}

impl Drop for FrameArena {
    fn drop(&mut self) {
        self.chain.release_all(self.pool, &self.cursor);
    }
}

impl std::fmt::Debug for FrameArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameArena")
            .field("pool", &self.pool.name())
            .field("bytes_used", &self.bytes_used())
            .field("capacity", &self.capacity)
            .field("high_watermark", &self.high_watermark())
            .finish()
    }
}

/// Figures of one `FrameArena` or thread arena, from [`FrameArena::stats`] or
/// [`thread_arena_stats`](crate::thread_arena_stats).
///
/// ```
/// let arena = nebula_memory::FrameArena::new(256);
/// arena.alloc_val(7u64);
/// let s = arena.stats();
/// assert_eq!((s.bytes_used, s.high_watermark, s.capacity), (8, 8, 256));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameArenaStats {
    /// Bytes allocated since the last reset, padding included.
    pub bytes_used: usize,
    /// The most bytes ever in use at once.
    pub high_watermark: usize,
    /// Usable bytes: the cap (a thread arena grows up to it).
    pub capacity: usize,
    /// Bytes of pool blocks held (header included).
    pub bytes_held: usize,
    /// Blocks taken from the pool, ever (1 for a `FrameArena`).
    pub blocks_taken: u64,
    /// Blocks given back to the pool, ever (0 while the arena lives).
    pub blocks_returned: u64,
}

impl FrameArena {
    /// The arena's figures. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::FrameArena::new(64);
    /// assert_eq!(arena.stats().bytes_used, 0);
    /// ```
    pub fn stats(&self) -> FrameArenaStats {
        FrameArenaStats {
            bytes_used: self.bytes_used(),
            high_watermark: self.high_watermark(),
            capacity: self.capacity,
            bytes_held: self.chain.bytes_held(),
            blocks_taken: self.chain.figures().blocks_taken,
            blocks_returned: self.chain.figures().blocks_returned,
        }
    }
}
