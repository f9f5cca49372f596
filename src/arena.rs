//! `MemoryArena`: a paged bump allocator over blocks of one pool.
//!
//! The arena bumps a pointer **upwards** through its current block; when a request does not
//! fit it moves to a cached spare block or takes a new one from its pool (see
//! [`MemoryArena::alloc_slow`]). Bumping upwards means the newest allocation (the *top*) ends
//! at the bump pointer, so it can be popped ([`MemoryArena::pop`]) or grown and shrunk in
//! place ([`MemoryArena::realloc`]); this is what makes a growing vector cheap.
//!
//! The hot path is [`MemoryArena::bump`]: align, compare, add. Everything else (new
//! blocks, statistics, tags, tracing) is on the cold path, and the high watermark is
//! brought up to date only where `bytes_used` is about to fall (pop, rewind, reset), never
//! on the hot path.
//!
//! Invariants (see ARCHITECTURE.md for the full argument):
//! - The blocks form a singly linked chain `first → … → current → spares…`. Blocks before
//!   `current` are full (their `used` field records how far they were filled); blocks after
//!   it are empty spares kept after a rewind. All of them belong to the arena until they are
//!   given back by `reset`, `trim_spares` or `Drop`.
//! - `ptr..end` is the free tail of `current`; with no block, both are the same sentinel
//!   address and every non-empty request takes the slow path.
//! - A [`Checkpoint`] is a position (block, pointer) plus the arena's generation; `reset`
//!   bumps the generation, so checkpoints from before it are refused.

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::{BLOCK_ALIGN, HEADER, MAGIC_HEAP, MemoryBlock, Word};
use crate::error::{AllocError, alloc_failed};
use crate::poison;
use crate::pool::MemoryPool;

/// Address of the sentinel "block" of an arena with no block: aligned to 4 KiB so that
/// zero-sized requests of alignment up to 4 KiB are served from it without a block.
const SENTINEL: usize = 4096;
/// Granularity of the block sizes the arena asks for.
const BLOCK_GRANULE: usize = 4096;
/// Bytes skipped before a moving grow (one cache line; see `MemoryArena::colour`).
const COLOUR: usize = 64;
/// Moving grows at least this large are coloured.
const COLOUR_MIN: usize = 2048;

/// How an arena sizes its blocks and when it gives memory back.
///
/// ```
/// use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};
///
/// let pool = MemoryPool::new("doc", 8 << 20).unwrap();
/// let config = ArenaConfig::default().first_block(16 * 1024);
/// let arena = MemoryArena::with_config(&pool, config);
/// arena.alloc_val(1u32);
/// assert!(arena.bytes_held() >= 16 * 1024);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Usable bytes of the first block (default 64 KiB).
    pub first_block: usize,
    /// Largest block that normal growth asks for (default 16 MiB). Each new block is at
    /// least the sum of the blocks held so far, up to this cap; a single request larger
    /// than the cap gets a block of its own sized to fit.
    pub max_block: usize,
    /// After this many consecutive resets in which the kept block was more than twice as
    /// large as needed, `reset` replaces it with one sized to those frames (default 120,
    /// about two seconds at 60 fps). `0` never shrinks.
    pub trim_after_resets: u32,
    /// When the pool is exhausted, take the block from the system heap instead of failing
    /// (a WARN event reports it; the block is freed by the next reset). Default `false`.
    pub heap_fallback: bool,
}

impl ArenaConfig {
    /// Sets [`first_block`](ArenaConfig#structfield.first_block). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().first_block(4096).first_block, 4096);
    /// ```
    pub fn first_block(mut self, bytes: usize) -> Self {
        self.first_block = bytes;
        self
    }

    /// Sets [`max_block`](ArenaConfig#structfield.max_block). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().max_block(1 << 20).max_block, 1 << 20);
    /// ```
    pub fn max_block(mut self, bytes: usize) -> Self {
        self.max_block = bytes;
        self
    }

    /// Sets [`trim_after_resets`](ArenaConfig#structfield.trim_after_resets). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().trim_after_resets(0).trim_after_resets, 0);
    /// ```
    pub fn trim_after_resets(mut self, resets: u32) -> Self {
        self.trim_after_resets = resets;
        self
    }

    /// Sets [`heap_fallback`](ArenaConfig#structfield.heap_fallback). O(1).
    ///
    /// ```
    /// assert!(nebula_memory::ArenaConfig::default().heap_fallback(true).heap_fallback);
    /// ```
    pub fn heap_fallback(mut self, on: bool) -> Self {
        self.heap_fallback = on;
        self
    }
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            first_block: 64 * 1024,
            max_block: 16 << 20,
            trim_after_resets: 120,
            heap_fallback: false,
        }
    }
}

/// A saved arena position, from [`MemoryArena::checkpoint`]; [`MemoryArena::rewind`] goes
/// back to it.
///
/// ```
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
    block: *mut MemoryBlock,
    ptr: *mut u8,
}

/// A paged, growable bump arena: a linked list of blocks from one [`MemoryPool`].
///
/// Allocation bumps a pointer inside the current block (a handful of instructions); when
/// the block is full the arena takes another from its pool. Memory comes back all at once
/// with [`reset`](MemoryArena::reset) (which keeps one block, sized for the next frame),
/// back to a [`Checkpoint`], at the end of a [`scope`](MemoryArena::scope), or for the
/// newest allocation alone with [`pop`](MemoryArena::pop).
///
/// `MemoryArena` is `Send` but not `Sync`: one thread allocates from it at a time.
///
/// # Naming
/// The methods read like [`FrameArena`](crate::FrameArena)'s: `alloc(layout)`,
/// `alloc_val(value)`, `alloc_slice(count, value)`. A `MemoryArena` grows instead of
/// running out, so these panic (naming the pool and the size) when the pool is exhausted;
/// each has a `try_` form returning [`AllocError`]. The helpers known from bumpalo follow
/// the same pattern: `alloc_with`, `alloc_slice_copy`, `alloc_slice_clone`,
/// `alloc_slice_fill_with`, `alloc_slice_from_iter`, `alloc_str`, `alloc_fmt`.
///
/// # Drop policy
/// An arena never runs destructors on its own. Types with drop glue are therefore refused
/// **at compile time** by every `alloc_*` method that returns a plain reference (the build
/// fails with a message pointing to `alloc_boxed`); [`alloc_boxed`](MemoryArena::alloc_boxed)
/// returns an [`ArenaBox`] that runs the destructor when it goes out of scope.
///
/// ```
/// use nebula_memory::{MemoryArena, MemoryPool};
///
/// let pool = MemoryPool::new("doc", 4 << 20).unwrap();
/// let mut arena = MemoryArena::new(&pool);
/// let pos = arena.alloc_val([1.0f32, 2.0, 3.0]);
/// let ids = arena.alloc_slice_copy(&[7u32, 8, 9]);
/// let name = arena.alloc_fmt(format_args!("entity-{}", ids[0]));
/// assert_eq!((pos[2], &*name), (3.0, "entity-7"));
/// arena.reset();
/// assert_eq!(arena.bytes_used(), 0);
/// ```
pub struct MemoryArena<'pool> {
    /// Bump pointer: the first free byte of `current`.
    ptr: Cell<*mut u8>,
    /// End of `current`'s data.
    end: Cell<*mut u8>,
    current: Cell<*mut MemoryBlock>,
    first: Cell<*mut MemoryBlock>,
    /// Bytes used in the blocks before `current`.
    used_before: Cell<usize>,
    high_watermark: Cell<usize>,
    /// Largest `bytes_used` since the last reset.
    frame_peak: Cell<usize>,
    block_count: Cell<usize>,
    bytes_held: Cell<usize>,
    generation: Cell<u64>,
    quiet_resets: Cell<u32>,
    quiet_peak: Cell<usize>,
    /// Blocks taken from the system heap (`heap_fallback`), never kept by reset.
    heap_blocks: Cell<usize>,
    tags: RefCell<Vec<(&'static str, usize)>>,
    config: ArenaConfig,
    /// Unique per arena (process-wide counter): checkpoints carry it, so one from another
    /// arena is refused even if it names a block address this arena now uses.
    id: u64,
    pool: &'pool MemoryPool,
}

// SAFETY: the arena exclusively owns its blocks (raw pointers into its pool, which is
// `Sync`); moving the arena moves that ownership. It is not `Sync`: its `Cell`s make it so.
unsafe impl Send for MemoryArena<'_> {}

impl<'pool> MemoryArena<'pool> {
    /// An empty arena over `pool`. Takes no memory until the first allocation. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.block_count(), 0);
    /// ```
    pub fn new(pool: &'pool MemoryPool) -> Self {
        Self::with_config(pool, ArenaConfig::default())
    }

    /// An empty arena with explicit sizing and trimming rules. O(1).
    ///
    /// ```
    /// use nebula_memory::{ArenaConfig, MemoryArena};
    /// let config = ArenaConfig::default().heap_fallback(true);
    /// let arena = MemoryArena::with_config(nebula_memory::scratch_pool(), config);
    /// assert_eq!(arena.config().heap_fallback, true);
    /// ```
    pub fn with_config(pool: &'pool MemoryPool, config: ArenaConfig) -> Self {
        let sentinel = ptr::without_provenance_mut(SENTINEL);
        MemoryArena {
            ptr: Cell::new(sentinel),
            end: Cell::new(sentinel),
            current: Cell::new(ptr::null_mut()),
            first: Cell::new(ptr::null_mut()),
            used_before: Cell::new(0),
            high_watermark: Cell::new(0),
            frame_peak: Cell::new(0),
            block_count: Cell::new(0),
            bytes_held: Cell::new(0),
            generation: Cell::new(0),
            quiet_resets: Cell::new(0),
            quiet_peak: Cell::new(0),
            heap_blocks: Cell::new(0),
            tags: RefCell::new(Vec::new()),
            config,
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            pool,
        }
    }

    /// The pool this arena takes its blocks from. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::game_pool());
    /// assert_eq!(arena.pool().name(), "game");
    /// ```
    pub fn pool(&self) -> &'pool MemoryPool {
        self.pool
    }

    /// The rules this arena was created with. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.config().first_block, 64 * 1024);
    /// ```
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    // ---------------------------------------------------------------- the bump path

    /// The fast path: carve `layout` out of the current block, or `None` if it does not fit.
    #[inline(always)]
    fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let ptr = self.ptr.get();
        let end = self.end.get();
        let (start, new_ptr) = if layout.align() <= BLOCK_ALIGN {
            // `end` is 16-aligned (see `enter`), so aligning `ptr <= end` up to at most 16
            // cannot pass `end`: the subtraction below cannot wrap. The short dependency
            // chain (add, and, add) is what keeps this path at the speed of a bare bump
            // pointer.
            let start = (ptr.addr() + (layout.align() - 1)) & !(layout.align() - 1);
            if layout.size() > end.addr() - start {
                return None;
            }
            (start, start + layout.size())
        } else {
            // `ptr <= end` always, and `pad + size <= isize::MAX` by `Layout`'s invariant,
            // so nothing here can overflow.
            let pad = ptr.addr().wrapping_neg() & (layout.align() - 1);
            if pad + layout.size() > end.addr() - ptr.addr() {
                return None;
            }
            (ptr.addr() + pad, ptr.addr() + pad + layout.size())
        };
        // `start..new_ptr` lies inside the current block's free tail (or is zero bytes at
        // the sentinel), so `with_addr` keeps the block's provenance and never yields null.
        self.ptr.set(ptr.with_addr(new_ptr));
        // SAFETY: `start >= ptr > 0`.
        Some(unsafe { NonNull::new_unchecked(ptr.with_addr(start)) })
    }

    /// Allocates memory for `layout`, growing the arena if needed. O(1); amortised O(1) when
    /// a new block is needed.
    ///
    /// The memory is uninitialised (0xCD in debug builds) and valid until the arena is
    /// reset, rewound past it, or dropped.
    ///
    /// # Errors
    /// [`AllocError::Pool`] when the pool cannot supply a block (and heap fallback is off).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let p = arena.try_alloc(Layout::from_size_align(256, 64).unwrap()).unwrap();
    /// assert_eq!(p.as_ptr() as usize % 64, 0);
    /// ```
    #[inline(always)]
    pub fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match self.bump(layout) {
            Some(p) => {
                // SAFETY: the bytes were just carved out for the caller.
                unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
                Ok(p)
            }
            None => self.alloc_slow(layout),
        }
    }

    /// Like [`try_alloc`](MemoryArena::try_alloc), panicking on failure with a message that
    /// names the pool and the size. O(1) amortised.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let p = arena.alloc(Layout::new::<[u64; 4]>());
    /// assert_eq!(p.as_ptr() as usize % 8, 0);
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn alloc(&self, layout: Layout) -> NonNull<u8> {
        match self.bump(layout) {
            Some(p) => {
                // SAFETY: the bytes were just carved out for the caller.
                unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
                p
            }
            None => self.alloc_slow_or_panic(layout),
        }
    }

    /// `alloc`'s slow path; panics itself so that `alloc` carries no error value (and no
    /// stack frame) on its fast path.
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn alloc_slow_or_panic(&self, layout: Layout) -> NonNull<u8> {
        match self.alloc_slow(layout) {
            Ok(p) => p,
            Err(e) => alloc_failed(self.pool.name(), layout, &e),
        }
    }

    /// The slow path: the current block is full. Moves to a spare block or takes a new one.
    #[cold]
    #[inline(never)]
    fn alloc_slow(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            // Any aligned, non-null address serves a zero-sized request.
            return Ok(NonNull::new(ptr::without_provenance_mut(layout.align()))
                .unwrap_or(NonNull::dangling()));
        }
        // Blocks' data is 16-aligned: larger alignments may need up to `align - 16` padding.
        let needed = layout
            .size()
            .checked_add(layout.align().saturating_sub(16))
            .ok_or_else(|| AllocError::layout(self.pool.name()))?;

        let cur = self.current.get();
        let spare = if cur.is_null() {
            self.first.get()
        } else {
            // SAFETY: `cur` is a block we own.
            unsafe { (*cur).next }
        };
        // SAFETY: `spare` (if any) is a block we own.
        if !spare.is_null() && unsafe { (*spare).capacity() } >= needed {
            self.enter(spare);
        } else {
            let block = self.take_block(needed)?;
            // SAFETY: `block` is fresh and ours; `cur` is ours. Link it after `cur`, before
            // the spares.
            unsafe {
                (*block).next = spare;
                if cur.is_null() {
                    self.first.set(block);
                } else {
                    (*cur).next = block;
                }
            }
            self.enter(block);
        }
        let p = self
            .bump(layout)
            .expect("a block sized for the request has room for it");
        // SAFETY: freshly carved out for the caller.
        unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
        Ok(p)
    }

    /// Makes `block` (the one after `current`, or the first) the current block.
    fn enter(&self, block: *mut MemoryBlock) {
        let cur = self.current.get();
        if !cur.is_null() {
            let used = self.ptr.get() as usize - MemoryBlock::data_of(nn(cur)).as_ptr() as usize;
            // SAFETY: `cur` is ours; we record how far it was filled.
            unsafe { (*cur).word = Word { used } };
            self.used_before.set(self.used_before.get() + used);
        }
        let data = MemoryBlock::data_of(nn(block)).as_ptr();
        self.current.set(block);
        self.ptr.set(data);
        // SAFETY: `block` is ours and its data spans `capacity()` bytes.
        self.end.set(unsafe { data.add((*block).capacity()) });
        // `bump` relies on this: data and capacities are multiples of 16.
        debug_assert!(self.end.get().addr().is_multiple_of(BLOCK_ALIGN));
        // SAFETY: as above; nothing of the new current block is in use.
        unsafe { poison::hide(data, (*block).capacity()) };
    }

    /// A new block with at least `needed` usable bytes, sized by the growth rule. The usable
    /// bytes are poisoned (nobody holds them yet).
    fn take_block(&self, needed: usize) -> Result<*mut MemoryBlock, AllocError> {
        let c = &self.config;
        let normal = self
            .bytes_held
            .get()
            .clamp(c.first_block.max(1), c.max_block.max(c.first_block));
        let size = round_block(normal.max(needed));
        // Ask for the grown size without reporting a refusal: the pool may still hold a
        // block that fits the request alone, and only that request's refusal is a real
        // exhaustion (counted and reported by the pool).
        let block = if size > needed {
            self.pool
                .allocate_block_quietly(size)
                .or_else(|_| self.pool.allocate_block(needed))
        } else {
            self.pool.allocate_block(needed)
        };
        let block = match block {
            Ok(b) => b.as_ptr(),
            Err(e) if c.heap_fallback => {
                let block = heap_block(self.pool.name(), needed, &e)?;
                self.heap_blocks.set(self.heap_blocks.get() + 1);
                block
            }
            Err(e) => return Err(AllocError::Pool(e)),
        };
        // SAFETY: `block` is a fresh block we own.
        unsafe {
            (*block).next = ptr::null_mut();
            (*block).word = Word { used: 0 };
            self.bytes_held.set(self.bytes_held.get() + (*block).size);
        }
        self.block_count.set(self.block_count.get() + 1);
        Ok(block)
    }

    /// Gives one block back to where it came from (its pool, or the heap).
    ///
    /// # Safety
    /// `block` is ours, unlinked, and nothing in it is used any more.
    unsafe fn release_block(&self, block: *mut MemoryBlock) {
        // SAFETY: the caller hands over a dead block we own.
        unsafe {
            let size = (*block).size;
            self.bytes_held.set(self.bytes_held.get() - size);
            self.block_count.set(self.block_count.get() - 1);
            if (*block).magic == MAGIC_HEAP {
                self.heap_blocks.set(self.heap_blocks.get() - 1);
                // Hand the heap its memory back unpoisoned.
                poison::expose(block.cast(), size);
                std::alloc::dealloc(block.cast(), Layout::from_size_align_unchecked(size, 16));
            } else {
                self.pool.free_block(nn(block));
            }
        }
    }

    // ---------------------------------------------------------------- top: pop / realloc

    /// Whether `[ptr, ptr + size)` is the newest allocation in the current block.
    #[inline]
    pub(crate) fn is_top(&self, ptr: *mut u8, size: usize) -> bool {
        let cur = self.current.get();
        !cur.is_null()
            && ptr as usize >= MemoryBlock::data_of(nn(cur)).as_ptr() as usize
            && (ptr as usize).checked_add(size) == Some(self.ptr.get() as usize)
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
    pub unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        let ptr = ptr.as_ptr();
        if !self.is_top(ptr, layout.size()) {
            return false;
        }
        self.note_peak();
        // SAFETY: the caller gives the top allocation up; it lies in the current block.
        unsafe { poison::give_back(ptr, layout.size()) };
        self.ptr.set(ptr);
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
        let new = Layout::from_size_align(new_size, old.align())
            .map_err(|_| AllocError::layout(self.pool.name()))?;
        let p = ptr.as_ptr();
        let was_top = self.is_top(p, old.size());
        if was_top {
            let avail = self.end.get() as usize - p as usize;
            if new_size <= avail {
                // SAFETY: `[p, p + new_size)` lies in the current block; the part past the
                // old size was free, the part past the new size is given up.
                unsafe {
                    if new_size > old.size() {
                        poison::hand_out(p.add(old.size()), new_size - old.size());
                    } else {
                        self.note_peak();
                        poison::give_back(p.add(new_size), old.size() - new_size);
                    }
                    self.ptr.set(p.add(new_size));
                }
                return Ok(ptr);
            }
        } else if new_size <= old.size() {
            return Ok(ptr);
        }
        if new_size >= COLOUR_MIN {
            self.colour(new_size);
        }
        let old_block = self.current.get();
        let q = self.try_alloc(new)?;
        // SAFETY: `q` is a fresh allocation of `new_size` bytes, disjoint from the live
        // `ptr`; we copy the bytes both hold. Then the old allocation is dead.
        unsafe { ptr::copy_nonoverlapping(p, q.as_ptr(), old.size().min(new_size)) };
        if was_top {
            // The old top did not fit, so `q` is in another block and `old_block` was left
            // with its fill level recorded just past the old allocation: lower it, so the
            // old bytes stop counting as used. (They are reused after the next rewind or
            // reset, like the rest of that block's tail.)
            debug_assert_ne!(self.current.get(), old_block);
            self.note_peak();
            // SAFETY: `old_block` is ours and now before `current`; its recorded fill ends
            // at `p + old.size()`, the dead old allocation.
            unsafe {
                (*old_block).word.used -= old.size();
                self.used_before.set(self.used_before.get() - old.size());
                poison::give_back(p, old.size());
            }
        }
        Ok(q)
    }

    /// Skips one cache line before a moving grow, when the block has room for it.
    ///
    /// Vectors grown in turn (W4) otherwise get equal power-of-two buffers laid end to end,
    /// whose write streams all map to the same L1/L2 cache sets and evict each other: a 5x
    /// slowdown measured here. Offsetting each buffer by a line breaks the aliasing, at a
    /// cost of at most 64 bytes per moving grow of 2 KiB or more.
    #[cold]
    fn colour(&self, new_size: usize) {
        let ptr = self.ptr.get();
        if self.end.get().addr() - ptr.addr() >= new_size.saturating_add(2 * COLOUR) {
            self.ptr.set(ptr.wrapping_add(COLOUR));
        }
    }

    // ---------------------------------------------------------------- positions

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
            generation: self.generation.get(),
            block: self.current.get(),
            ptr: self.ptr.get(),
        }
    }

    /// Frees everything allocated since `to` was taken. Blocks entered since then stay
    /// cached as spares (the next allocations reuse them) until the next reset.
    /// O(blocks held).
    ///
    /// # Safety
    /// No reference or pointer into memory allocated after `to` is used afterwards.
    ///
    /// # Panics
    /// If `to` does not belong to this arena's current generation (it came from another
    /// arena, or a `reset` or an earlier rewind has since invalidated it).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u64);
    /// let mark = arena.checkpoint();
    /// arena.alloc_slice(100_000, 0u8); // a second block
    /// // SAFETY: the slice is not used again.
    /// unsafe { arena.rewind(mark) };
    /// assert_eq!(arena.bytes_used(), 8);
    /// assert_eq!(arena.block_count(), 2); // the second block is cached
    /// ```
    pub unsafe fn rewind(&self, to: Checkpoint) {
        let cur = self.current.get();
        let valid = to.arena == self.id
            && to.generation == self.generation.get()
            && self.position_valid(to);
        if !valid {
            panic!(
                "arena on pool '{}': rewind to a checkpoint that is not a live position of this arena",
                self.pool.name()
            );
        }
        self.note_peak();
        // Give back [to, current position): the tail of `to.block` and every block after it
        // up to `current`.
        let (block, start) = if to.block.is_null() {
            let first = self.first.get();
            if first.is_null() {
                return;
            }
            (first, MemoryBlock::data_of(nn(first)).as_ptr())
        } else {
            (to.block, to.ptr)
        };
        let mut b = block;
        let mut from = start;
        let mut used_before = 0;
        let mut scan = self.first.get();
        while scan != block {
            // SAFETY: blocks before `to.block` in our chain are ours and full.
            unsafe {
                used_before += (*scan).word.used;
                scan = (*scan).next;
            }
        }
        loop {
            let fill_end = if b == cur {
                self.ptr.get()
            } else {
                // SAFETY: `b` is a full block of ours before `current`.
                unsafe { MemoryBlock::data_of(nn(b)).as_ptr().add((*b).word.used) }
            };
            // SAFETY: `[from, fill_end)` was handed out after `to` and is dead by contract.
            unsafe {
                poison::give_back(from, fill_end as usize - from as usize);
                (*b).word = Word { used: 0 };
            }
            if b == cur {
                break;
            }
            // SAFETY: `b` is ours and not the current block, so it has a successor.
            b = unsafe { (*b).next };
            from = MemoryBlock::data_of(nn(b)).as_ptr();
        }
        self.used_before.set(used_before);
        self.current.set(block);
        self.ptr.set(start);
        // SAFETY: `block` is ours; its data spans `capacity()` bytes.
        self.end.set(unsafe {
            MemoryBlock::data_of(nn(block))
                .as_ptr()
                .add((*block).capacity())
        });
    }

    /// Whether `to` is at or before the current position in this arena's chain.
    fn position_valid(&self, to: Checkpoint) -> bool {
        if to.block.is_null() {
            return to.ptr as usize == SENTINEL;
        }
        let cur = self.current.get();
        let mut b = self.first.get();
        while !b.is_null() {
            let data = MemoryBlock::data_of(nn(b)).as_ptr() as usize;
            let fill = if b == cur {
                self.ptr.get() as usize
            } else {
                // SAFETY: blocks before `current` are ours.
                data + unsafe { (*b).word.used }
            };
            if b == to.block {
                return (data..=fill).contains(&(to.ptr as usize));
            }
            if b == cur {
                return false;
            }
            // SAFETY: a block of our chain.
            b = unsafe { (*b).next };
        }
        false
    }

    /// Runs `f` with this arena and frees everything `f` allocated when it returns (or
    /// panics). Safe: `f` gets a shared borrow that cannot escape, and `&mut self` proves no
    /// allocation from before is alive, so nothing can reach the memory given back. O(1) plus the rewind (O(blocks held)).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let sum = arena.scope(|a| a.alloc_slice_fill_with(100, |i| i as u64).iter().sum::<u64>());
    /// assert_eq!(sum, 4950);
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    pub fn scope<R>(&mut self, f: impl FnOnce(&MemoryArena<'pool>) -> R) -> R {
        let guard = self.scope_guard();
        f(&guard)
    }

    /// A guard that derefs to this arena and rewinds it to the current position when
    /// dropped. Allocations borrow the guard, so they cannot outlive it. O(1); the rewind on drop is O(blocks held).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// {
    ///     let scope = arena.scope_guard();
    ///     let v = scope.alloc_val(5u32);
    ///     assert_eq!(*v, 5);
    /// }
    /// assert_eq!(arena.bytes_used(), 0);
    /// ```
    pub fn scope_guard(&mut self) -> ArenaScope<'_, 'pool> {
        ArenaScope {
            mark: self.checkpoint(),
            arena: self,
        }
    }

    // ---------------------------------------------------------------- reset

    /// Frees everything at once and gives every block but one back to the pool.
    /// O(blocks held).
    ///
    /// The block kept is the one that best serves the next frame: the largest held, if it
    /// fits everything this frame used (plus 1/8); otherwise a single new block of that size
    /// (and at least 1.25 times the largest) replaces them all. So after a warm-up frame, a steady workload does no pool operation
    /// at all. If the kept block stays more than twice too large for
    /// [`ArenaConfig::trim_after_resets`] resets in a row, it is swapped for one sized to
    /// those frames, so one spike does not pin its memory for ever.
    ///
    /// Bumps the arena's generation: every [`Checkpoint`] taken before is invalid.
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// for _ in 0..4 {
    ///     arena.alloc_slice(300_000, 1u8); // spills over several blocks
    /// }
    /// assert!(arena.block_count() > 1);
    /// arena.reset();
    /// assert_eq!((arena.block_count(), arena.bytes_used()), (1, 0));
    /// ```
    pub fn reset(&mut self) {
        self.note_peak();
        let peak = self.frame_peak.replace(0);
        self.generation.set(self.generation.get() + 1);
        self.tags.get_mut().clear();
        if self.first.get().is_null() {
            return;
        }
        let target = round_block(peak.saturating_add(peak / 8).max(1));

        // The steady state: one pool block, nothing to decide but its fill level. Handled
        // without touching block memory (its header is cold after a big frame).
        let single = self.block_count.get() == 1 && self.heap_blocks.get() == 0;
        let mut single_want = None;
        if single {
            let cur = self.current.get();
            let data = MemoryBlock::data_of(nn(cur)).as_ptr();
            let capacity = self.end.get().addr() - data.addr();
            single_want = self.resize_decision(capacity, target);
            if single_want.is_none() {
                // SAFETY: everything handed out from the block is dead (`&mut self`).
                unsafe { poison::give_back(data, self.ptr.get().addr() - data.addr()) };
                self.ptr.set(data);
                self.used_before.set(0);
                return;
            }
        }

        // Poison everything handed out and pick the largest pool block.
        let mut largest: *mut MemoryBlock = ptr::null_mut();
        let mut b = self.first.get();
        let cur = self.current.get();
        let mut past_current = false;
        while !b.is_null() {
            // SAFETY: every block of the chain is ours and dead after `reset(&mut self)`.
            unsafe {
                let data = MemoryBlock::data_of(nn(b)).as_ptr();
                let used = if b == cur {
                    self.ptr.get() as usize - data as usize
                } else if past_current {
                    0
                } else {
                    (*b).word.used
                };
                poison::give_back(data, used);
                if b == cur {
                    past_current = true;
                }
                if (*b).magic != MAGIC_HEAP && (largest.is_null() || (*b).size > (*largest).size) {
                    largest = b;
                }
                b = (*b).next;
            }
        }

        let kept_cap = if largest.is_null() {
            0
        } else {
            // SAFETY: `largest` is one of our blocks.
            unsafe { (*largest).capacity() }
        };
        // A single block had its decision made above (the decision counts quiet frames,
        // so it is made exactly once per reset).
        let want = if single {
            single_want
        } else {
            self.resize_decision(kept_cap, target)
        };
        // Give back everything but the largest first, so a tight pool has room for the
        // replacement; if the pool still refuses it, the largest stays.
        let mut b = self.first.get();
        while !b.is_null() {
            // SAFETY: our chain; each block other than `largest` is released after we read
            // its successor.
            unsafe {
                let next = (*b).next;
                if b != largest {
                    self.release_block(b);
                }
                b = next;
            }
        }
        let mut keep = largest;
        if let Some(size) = want {
            let mut fresh = self.pool.allocate_block_quietly(size);
            if fresh.is_err() && !largest.is_null() {
                // Tight pool: the replacement may only fit once the largest is back too.
                // If it still does not, take a block like the old one again (the range
                // just merged back), or hold none.
                // SAFETY: `largest` is ours and dead; it is unlinked below.
                unsafe { self.release_block(largest) };
                fresh = self
                    .pool
                    .allocate_block_quietly(size)
                    .or_else(|_| self.pool.allocate_block_quietly(kept_cap));
                keep = ptr::null_mut();
            }
            if let Ok(block) = fresh {
                // SAFETY: a fresh block we now own; `keep` (if still set) is ours and dead.
                unsafe {
                    if !keep.is_null() {
                        self.release_block(keep);
                    }
                    keep = block.as_ptr();
                    self.bytes_held.set(self.bytes_held.get() + (*keep).size);
                }
                self.block_count.set(self.block_count.get() + 1);
                self.quiet_resets.set(0);
                self.quiet_peak.set(0);
            }
        }

        self.first.set(ptr::null_mut());
        self.current.set(ptr::null_mut());
        self.used_before.set(0);
        if keep.is_null() {
            let sentinel = ptr::without_provenance_mut(SENTINEL);
            self.ptr.set(sentinel);
            self.end.set(sentinel);
        } else {
            // SAFETY: `keep` is ours.
            unsafe {
                (*keep).next = ptr::null_mut();
                (*keep).word = Word { used: 0 };
            }
            self.first.set(keep);
            self.enter(keep);
        }
    }

    /// The reset policy: given the capacity of the block that would be kept and what the
    /// frame needed (`target`), the size of the block that should replace it, if any.
    /// Updates the quiet-frame count, so it is called once per reset.
    fn resize_decision(&self, kept_cap: usize, target: usize) -> Option<usize> {
        let floor = round_block(self.config.first_block.max(1));
        if kept_cap < target {
            // Grow by at least a quarter, so a frame size creeping upwards costs a few
            // replacements, not one per new record.
            Some(round_block(
                target.max(kept_cap.saturating_add(kept_cap / 4)),
            ))
        } else if self.config.trim_after_resets > 0 && kept_cap > 2 * target.max(floor) {
            self.quiet_peak.set(self.quiet_peak.get().max(target));
            let quiet = self.quiet_resets.get() + 1;
            self.quiet_resets.set(quiet);
            (quiet >= self.config.trim_after_resets).then(|| self.quiet_peak.get().max(floor))
        } else {
            self.quiet_resets.set(0);
            self.quiet_peak.set(0);
            None
        }
    }

    /// Gives the cached spare blocks (those after the current one) back to the pool.
    /// O(spares).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u8);
    /// arena.scope(|a| { a.alloc_slice(200_000, 0u8); }); // needs a second block
    /// assert_eq!(arena.block_count(), 2);
    /// arena.trim_spares();
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn trim_spares(&mut self) {
        let cur = self.current.get();
        let mut b = if cur.is_null() {
            self.first.replace(ptr::null_mut())
        } else {
            // SAFETY: `cur` is ours.
            unsafe { std::mem::replace(&mut (*cur).next, ptr::null_mut()) }
        };
        while !b.is_null() {
            // SAFETY: spares are ours and empty.
            unsafe {
                let next = (*b).next;
                self.release_block(b);
                b = next;
            }
        }
    }

    // ---------------------------------------------------------------- statistics

    /// Brings the watermarks up to date before `bytes_used` falls.
    #[inline]
    fn note_peak(&self) {
        let used = self.bytes_used();
        if used > self.frame_peak.get() {
            self.frame_peak.set(used);
            if used > self.high_watermark.get() {
                self.high_watermark.set(used);
            }
        }
    }

    /// Bytes handed out since the last reset, alignment padding included (the unused tail
    /// of a block the arena moved on from is not counted). O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(0u8);
    /// arena.alloc_val(0u32); // 3 bytes of padding first
    /// assert_eq!(arena.bytes_used(), 8);
    /// ```
    pub fn bytes_used(&self) -> usize {
        let cur = self.current.get();
        if cur.is_null() {
            return 0;
        }
        self.used_before.get()
            + (self.ptr.get() as usize - MemoryBlock::data_of(nn(cur)).as_ptr() as usize)
    }

    /// The largest `bytes_used` ever, across resets. O(1).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_slice(1000, 0u8);
    /// arena.reset();
    /// assert_eq!(arena.high_watermark(), 1000);
    /// ```
    pub fn high_watermark(&self) -> usize {
        self.high_watermark.get().max(self.bytes_used())
    }

    /// Blocks the arena holds, cached spares included. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.block_count(), 0);
    /// arena.alloc_val(1u8);
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn block_count(&self) -> usize {
        self.block_count.get()
    }

    /// Bytes of pool memory the arena holds (whole blocks, headers included). O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u8);
    /// assert!(arena.bytes_held() >= 64 * 1024);
    /// ```
    pub fn bytes_held(&self) -> usize {
        self.bytes_held.get()
    }

    /// The arena's generation: how many times it has been reset. O(1).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.reset();
    /// assert_eq!(arena.generation(), 1);
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Bytes requested with `tag` since the last reset (see
    /// [`alloc_tagged`](MemoryArena::alloc_tagged)). O(tags).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_tagged(Layout::new::<[u8; 48]>(), "mesh");
    /// assert_eq!(arena.tag_bytes("mesh"), 48);
    /// ```
    pub fn tag_bytes(&self, tag: &str) -> usize {
        self.tags
            .borrow()
            .iter()
            .find(|(t, _)| *t == tag)
            .map_or(0, |&(_, n)| n)
    }

    /// A snapshot of every counter, printable with `{}`. O(tags).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u64);
    /// let stats = arena.stats();
    /// assert_eq!(stats.bytes_used, 8);
    /// println!("{stats}");
    /// ```
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            pool: self.pool.name(),
            bytes_used: self.bytes_used(),
            high_watermark: self.high_watermark(),
            block_count: self.block_count(),
            bytes_held: self.bytes_held(),
            generation: self.generation(),
            tags: self.tags.borrow().clone(),
        }
    }

    // ---------------------------------------------------------------- tags

    /// Allocates like [`try_alloc`](MemoryArena::try_alloc) and counts the bytes under
    /// `tag` (seed 004's `ArenaPush(arena, size, align, "Tag")`). Tagging costs a lookup in
    /// a short list; untagged allocations pay nothing for it. O(tags).
    ///
    /// # Errors
    /// As `try_alloc`.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.try_alloc_tagged(Layout::new::<u64>(), "ai").unwrap();
    /// assert_eq!(arena.tag_bytes("ai"), 8);
    /// ```
    pub fn try_alloc_tagged(
        &self,
        layout: Layout,
        tag: &'static str,
    ) -> Result<NonNull<u8>, AllocError> {
        let p = self.try_alloc(layout)?;
        let mut tags = self.tags.borrow_mut();
        match tags.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, n)) => *n += layout.size(),
            None => tags.push((tag, layout.size())),
        }
        Ok(p)
    }

    /// [`try_alloc_tagged`](MemoryArena::try_alloc_tagged), panicking on failure. O(tags).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_tagged(Layout::new::<u64>(), "ui");
    /// assert_eq!(arena.stats().tags, vec![("ui", 8)]);
    /// ```
    #[track_caller]
    pub fn alloc_tagged(&self, layout: Layout, tag: &'static str) -> NonNull<u8> {
        match self.try_alloc_tagged(layout, tag) {
            Ok(p) => p,
            Err(e) => alloc_failed(self.pool.name(), layout, &e),
        }
    }
}

impl Drop for MemoryArena<'_> {
    fn drop(&mut self) {
        let mut b = self.first.replace(ptr::null_mut());
        while !b.is_null() {
            // SAFETY: our chain; nothing borrows the arena any more.
            unsafe {
                let next = (*b).next;
                self.release_block(b);
                b = next;
            }
        }
    }
}

impl fmt::Debug for MemoryArena<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryArena")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A snapshot of an arena's counters, from [`MemoryArena::stats`].
///
/// ```
/// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
/// let s = arena.stats();
/// assert_eq!((s.pool, s.block_count), ("scratch", 0));
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Name of the pool the arena draws from.
    pub pool: &'static str,
    /// Bytes handed out since the last reset, padding included.
    pub bytes_used: usize,
    /// Largest `bytes_used` ever.
    pub high_watermark: usize,
    /// Blocks held, cached spares included.
    pub block_count: usize,
    /// Bytes of pool memory held (whole blocks).
    pub bytes_held: usize,
    /// Resets so far.
    pub generation: u64,
    /// Bytes requested per tag since the last reset, in first-use order.
    pub tags: Vec<(&'static str, usize)>,
}

impl fmt::Display for ArenaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arena on '{}': {} used (peak {}), {} held in {} block{}, frame {}",
            self.pool,
            Bytes(self.bytes_used),
            Bytes(self.high_watermark),
            Bytes(self.bytes_held),
            self.block_count,
            if self.block_count == 1 { "" } else { "s" },
            self.generation
        )?;
        for (tag, n) in &self.tags {
            write!(f, "\n  {tag:<16} {}", Bytes(*n))?;
        }
        Ok(())
    }
}

/// Byte counts for people: `512 B`, `12.0 KiB`, `3.5 MiB`.
struct Bytes(usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        if self.0 < 1024 {
            write!(f, "{} B", self.0)
        } else if self.0 < 1 << 20 {
            write!(f, "{:.1} KiB", n / 1024.0)
        } else {
            write!(f, "{:.1} MiB", n / (1024.0 * 1024.0))
        }
    }
}

/// A scope over an arena: derefs to it and rewinds it to where it was when dropped.
/// Created by [`MemoryArena::scope_guard`].
///
/// ```
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
        // An `unsafe` rewind inside the scope may already have gone below the mark.
        if !self.arena.position_valid(self.mark) {
            return;
        }
        // SAFETY: every allocation made through this scope borrows it, so none is alive
        // now; allocations from before the scope cannot be alive either, since the scope
        // holds the arena by `&mut`.
        unsafe { self.arena.rewind(self.mark) }
    }
}

/// Rounds a block request up to the block granule.
fn round_block(n: usize) -> usize {
    n.checked_next_multiple_of(BLOCK_GRANULE).unwrap_or(n)
}

#[inline(always)]
fn nn(b: *mut MemoryBlock) -> NonNull<MemoryBlock> {
    debug_assert!(!b.is_null());
    // SAFETY: callers pass blocks of the chain, which are never null.
    unsafe { NonNull::new_unchecked(b) }
}

/// A block from the system heap, laid out like a pool block, for `heap_fallback`.
#[cold]
fn heap_block(
    pool: &'static str,
    needed: usize,
    cause: &crate::PoolError,
) -> Result<*mut MemoryBlock, AllocError> {
    let size = needed
        .checked_next_multiple_of(16)
        .and_then(|n| n.checked_add(HEADER))
        .ok_or(AllocError::Layout { pool })?;
    let layout = Layout::from_size_align(size, 16).map_err(|_| AllocError::Layout { pool })?;
    tracing::warn!(
        pool,
        bytes = size,
        "pool '{pool}' exhausted ({cause}); arena falls back to the system heap for {size} bytes"
    );
    // SAFETY: `size` is non-zero.
    let p = unsafe { std::alloc::alloc(layout) }.cast::<MemoryBlock>();
    if p.is_null() {
        return Err(AllocError::Pool(cause.clone()));
    }
    // SAFETY: fresh heap memory of `size >= HEADER` bytes, 16-aligned.
    unsafe {
        p.write(MemoryBlock {
            magic: MAGIC_HEAP,
            flags: std::sync::atomic::AtomicU32::new(0),
            size,
            next: ptr::null_mut(),
            word: Word { used: 0 },
        })
    };
    Ok(p)
}
