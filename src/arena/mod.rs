//! `MemoryArena`: a paged bump allocator over blocks of one pool.
//!
//! An arena is two things ([`cursor`] and [`chain`]):
//! - a **cursor**, the bump position in the current block. Allocation is
//!   [`Cursor::bump`](cursor::Cursor::bump): align, compare, add. Everything else (new
//!   blocks, statistics, tags, tracing) is on the cold path, and the high watermark is
//!   brought up to date only where `bytes_used` is about to fall (pop, shrink, rewind,
//!   reset), never on the hot path;
//! - a **chain**, the blocks it holds and the only code that takes blocks from the pool or
//!   gives them back.
//!
//! The cursor bumps **upwards**, so the newest allocation (the *top*) ends at the bump
//! pointer: it can be popped ([`MemoryArena::pop`]) or grown and shrunk in place
//! ([`MemoryArena::realloc`]), which is what makes a growing vector cheap.
//!
//! [`reset`](MemoryArena::reset) asks the [`policy`] which block to keep, once per reset.
//!
//! Every field a shared reference can reach is an atomic or behind a lock, and the arena
//! is `!Sync` only because bumping is a load and a store, not an atomic read-modify-write.
//! That lets [`SharedArena`](crate::SharedArena) be one `MemoryArena` per thread whose
//! statistics any thread may read.

mod chain;
mod config;
pub(crate) mod cursor;
mod policy;
mod position;
mod stats;

use std::alloc::Layout;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use parking_lot::Mutex;

use crate::error::AllocError;
use crate::interface::{Arena, alloc_failed};
use crate::poison;
use crate::pool::MemoryPool;

use chain::{Chain, Reports};
use cursor::Cursor;
use policy::{Decision, Quiet};

pub use chain::heap_fallbacks;
pub use config::ArenaConfig;
pub use position::{ArenaScope, Checkpoint};
pub use stats::ArenaStats;
#[cfg(feature = "bevy")]
pub(crate) use stats::Bytes;

/// Bytes skipped before a moving grow (one cache line; see `MemoryArena::colour`).
const COLOUR: usize = 64;
/// Moving grows at least this large are coloured.
const COLOUR_MIN: usize = 2048;

/// A paged, growable bump arena: a linked list of blocks from one [`MemoryPool`].
///
/// Allocation bumps a pointer inside the current block (a handful of instructions); when
/// the block is full the arena takes another from its pool. Memory comes back all at once
/// with [`reset`](MemoryArena::reset) (which keeps one block, sized for the next frame),
/// back to a [`Checkpoint`], at the end of a [`scope`](MemoryArena::scope), or for the
/// newest allocation alone with [`pop`](MemoryArena::pop).
///
/// `MemoryArena` is `Send` but not `Sync`: one thread allocates from it at a time (see
/// [`SharedArena`](crate::SharedArena) for many).
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
/// returns an [`ArenaBox`](crate::ArenaBox) that runs the destructor when it goes out of
/// scope.
///
/// ```
/// use nebula_memory::{Arena, MemoryArena, MemoryPool};
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
// `repr(C)`: the fields the bump path and a steady reset read (the cursor, the peaks, the
// generation and the steady band) come first, on the first two cache lines; `align(128)`
// keeps those two lines in one 128-byte pair (which the hardware prefetches together) and
// gives every arena lines of its own, so a shared arena's per-thread parts never share one.
#[repr(C, align(128))]
pub struct MemoryArena<'pool> {
    /// The bump position; all the fast path reads.
    cursor: Cursor,
    /// Largest `bytes_used` since the last reset (brought up to date where it falls).
    peak_since_reset: AtomicUsize,
    /// Largest `bytes_used` ever (likewise).
    high_watermark: AtomicUsize,
    /// Resets so far; checkpoints carry it. Written only through `&mut self`.
    generation: u64,
    /// Frame peaks `p` with `p - steady_lo <= steady_span` (wrapping) need no decision at
    /// reset: the arena holds one pool block, no tags and no quiet streak, and the reset
    /// policy keeps the block as it is for them (`policy::keep_band`). Empty (`usize::MAX`,
    /// 0) otherwise; emptied whenever a block or a tag comes in.
    steady_lo: AtomicUsize,
    steady_span: AtomicUsize,
    /// The blocks. Locked only on the slow path, by positions and by statistics; `reset`
    /// and `Drop` reach it through `&mut` without locking.
    chain: Mutex<Chain>,
    tags: Mutex<Vec<(&'static str, usize)>>,
    /// The reset policy's count of frames in which the kept block was much too large.
    quiet: Quiet,
    config: ArenaConfig,
    /// Unique per arena (process-wide counter): checkpoints carry it, so one from another
    /// arena is refused even if it names a block address this arena now uses.
    id: u64,
    pool: &'pool MemoryPool,
    /// Bumping is not atomic: one thread at a time.
    _not_sync: PhantomData<Cell<()>>,
}

/// `steady_lo` / `steady_span` of an empty steady band.
const NO_BAND: (usize, usize) = (usize::MAX, 0);

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
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        MemoryArena {
            cursor: Cursor::empty(),
            peak_since_reset: AtomicUsize::new(0),
            high_watermark: AtomicUsize::new(0),
            generation: 0,
            steady_lo: AtomicUsize::new(NO_BAND.0),
            steady_span: AtomicUsize::new(NO_BAND.1),
            chain: Mutex::new(Chain::new()),
            tags: Mutex::new(Vec::new()),
            quiet: Quiet::default(),
            config,
            id: NEXT_ID.fetch_add(1, Relaxed),
            pool,
            _not_sync: PhantomData,
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

    // ---------------------------------------------------------------- allocation

    /// Allocates memory for `layout`, growing the arena if needed. O(1); amortised O(1) when
    /// a new block is needed.
    ///
    /// The memory is uninitialised (0xCD in debug builds) and valid until the arena is
    /// reset, rewound past it, or dropped.
    ///
    /// # Errors
    /// [`AllocError::Pool`] when the pool cannot supply a block (and heap fallback is off);
    /// [`AllocError::Layout`] when the request plus its padding overflows.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let p = arena.try_alloc(Layout::from_size_align(256, 64).unwrap()).unwrap();
    /// assert_eq!(p.as_ptr() as usize % 64, 0);
    /// ```
    #[inline(always)]
    pub fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match self.cursor.bump(layout) {
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
        match self.cursor.bump(layout) {
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
            Err(e) => alloc_failed(&e),
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
        let needed =
            cursor::window_need(layout).ok_or_else(|| AllocError::layout(self.pool.name()))?;
        self.leave_steady_state();
        let mut reports = Reports::default();
        let grown =
            self.chain
                .lock()
                .grow(self.pool, &self.cursor, needed, &self.config, &mut reports);
        let p = grown.map(|()| {
            let p = self
                .cursor
                .bump(layout)
                .expect("a block sized for the request has room for it");
            // SAFETY: freshly carved out for the caller.
            unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
            p
        });
        // Only now, with the chain unlocked and the request carved out, may user code run
        // (a `tracing` subscriber that allocates from this arena lands after `p`).
        reports.emit(self.pool);
        p
    }

    // ---------------------------------------------------------------- top: pop / realloc

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
    pub unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        let ptr = ptr.as_ptr();
        if !self.is_top(ptr, layout.size()) {
            return false;
        }
        self.note_peak();
        // SAFETY: the caller gives the top allocation up; it lies in the current block.
        unsafe { poison::give_back(ptr, layout.size()) };
        // The top lies in the window, so its address is a valid position there; rebuilt
        // from the cursor's own pointer to keep the window's provenance.
        self.cursor.set_ptr(self.cursor.ptr().with_addr(ptr.addr()));
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
            let avail = self.cursor.end().addr() - p.addr();
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
        let q = self.try_alloc(new)?;
        // SAFETY: `q` is a fresh allocation of `new_size` bytes, disjoint from the live
        // `ptr`; we copy the bytes both hold. Then the old allocation is dead.
        unsafe { ptr::copy_nonoverlapping(p, q.as_ptr(), old.size().min(new_size)) };
        if was_top {
            // The old top did not fit in its block, so `q` is in a later one, and the old
            // block's recorded fill ends just past the old allocation (no colour line was
            // skipped: a top that does not fit in place leaves less than `new_size` in the
            // block, short of what `colour` needs). Lower that fill so the old bytes stop
            // counting as used. `forget_tail` checks that the allocation still ends the
            // fill, rather than trusting it: what ran in between is not ours to assume.
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

    // ---------------------------------------------------------------- reset

    /// Frees everything at once and gives every block but one back to the pool.
    /// O(1) in the steady state; O(blocks held) otherwise.
    ///
    /// The block kept is the one that best serves the next frame: the largest held, if it
    /// fits everything this frame used (plus 1/8); otherwise a single new block of that
    /// size (and at least 1.25 times the largest) replaces them all. So after a warm-up
    /// frame, a steady workload does no pool operation at all, and its reset touches
    /// nothing but the arena's own fields. If the kept block stays more than twice too
    /// large for [`ArenaConfig::trim_after_resets`] resets in a row, it is swapped for one
    /// sized to those frames, so one spike does not pin its memory for ever.
    ///
    /// Bumps the arena's generation: every [`Checkpoint`] taken before is invalid.
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
    #[inline]
    pub fn reset(&mut self) {
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
            return;
        }
        self.reset_slow();
    }

    /// `reset` outside the steady band: decide with the reset policy, carry the decision
    /// out, then work out the new steady band.
    #[cold]
    #[inline(never)]
    fn reset_slow(&mut self) {
        // `&mut self`: plain accesses, no atomic read-modify-write.
        let peak = std::mem::take(self.peak_since_reset.get_mut()).max(self.cursor.position());
        let high = self.high_watermark.get_mut();
        *high = (*high).max(peak);
        self.generation += 1;
        self.tags.get_mut().clear();
        let chain = self.chain.get_mut();
        let single = chain.is_single_pool_block();
        let kept = if single {
            self.cursor.window_len()
        } else if chain.block_count() == 0 {
            return;
        } else {
            chain.largest_pool_block().1
        };
        let (decision, quiet) = policy::decide(kept, peak, self.quiet, &self.config);
        self.quiet = quiet;
        if single && decision == Decision::Keep {
            let start = self.cursor.start();
            // SAFETY: everything handed out from the block is dead (`&mut self`).
            unsafe { poison::give_back(start, self.cursor.used_here()) };
            self.cursor.set_ptr(start);
        } else if chain.reset(self.pool, &self.cursor, decision) {
            self.quiet = Quiet::default();
        }
        self.enter_steady_state();
    }

    /// Works out the steady band after a full reset (see `steady_lo`).
    fn enter_steady_state(&mut self) {
        let steady = self.chain.get_mut().is_single_pool_block()
            && self.quiet == Quiet::default()
            && self.tags.get_mut().is_empty();
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
    fn leave_steady_state(&self) {
        self.steady_lo.store(NO_BAND.0, Relaxed);
        self.steady_span.store(NO_BAND.1, Relaxed);
    }

    /// Whether the fast reset's shortcut is what the reset policy would do (debug check).
    fn steady_state_agrees(&mut self, peak: usize) -> bool {
        let window = self.cursor.window_len();
        self.chain.get_mut().is_single_pool_block()
            && self.cursor.base() == 0
            && self.quiet == Quiet::default()
            && self.tags.get_mut().is_empty()
            && policy::decide(window, peak, self.quiet, &self.config)
                == (Decision::Keep, Quiet::default())
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

    // ---------------------------------------------------------------- statistics

    /// Brings the watermarks up to date before `bytes_used` falls.
    #[inline]
    fn note_peak(&self) {
        let used = self.bytes_used();
        if used > self.peak_since_reset.load(Relaxed) {
            self.peak_since_reset.store(used, Relaxed);
            if used > self.high_watermark.load(Relaxed) {
                self.high_watermark.store(used, Relaxed);
            }
        }
    }

    /// Bytes handed out since the last reset, alignment padding included (the unused tail
    /// of a block the arena moved on from is not counted). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(0u8);
    /// arena.alloc_val(0u32); // 3 bytes of padding first
    /// assert_eq!(arena.bytes_used(), 8);
    /// ```
    pub fn bytes_used(&self) -> usize {
        self.cursor.position()
    }

    /// The largest `bytes_used` ever, across resets. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_slice(1000, 0u8);
    /// arena.reset();
    /// assert_eq!(arena.high_watermark(), 1000);
    /// ```
    pub fn high_watermark(&self) -> usize {
        self.high_watermark.load(Relaxed).max(self.bytes_used())
    }

    /// The largest `bytes_used` since the last reset: what this frame needed at its peak,
    /// also if pops or rewinds have given memory back since. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let layout = std::alloc::Layout::new::<[u8; 500]>();
    /// let p = arena.alloc(layout);
    /// // SAFETY: `p` is not used again.
    /// unsafe { arena.pop(p, layout) };
    /// assert_eq!((arena.bytes_used(), arena.peak_since_reset()), (0, 500));
    /// ```
    pub fn peak_since_reset(&self) -> usize {
        self.peak_since_reset.load(Relaxed).max(self.bytes_used())
    }

    /// Blocks the arena holds, cached spares included. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.block_count(), 0);
    /// arena.alloc_val(1u8);
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn block_count(&self) -> usize {
        self.chain.lock().block_count()
    }

    /// Bytes of pool memory the arena holds (whole blocks, headers included). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u8);
    /// assert!(arena.bytes_held() >= 64 * 1024);
    /// ```
    pub fn bytes_held(&self) -> usize {
        self.chain.lock().bytes_held()
    }

    /// The arena's generation: how many times it has been reset. O(1).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.reset();
    /// assert_eq!(arena.generation(), 1);
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation
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
            .lock()
            .iter()
            .find(|(t, _)| *t == tag)
            .map_or(0, |&(_, n)| n)
    }

    /// A snapshot of every counter, printable with `{}`. O(tags).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u64);
    /// let stats = arena.stats();
    /// assert_eq!(stats.bytes_used, 8);
    /// println!("{stats}");
    /// ```
    pub fn stats(&self) -> ArenaStats {
        let (block_count, bytes_held) = {
            let chain = self.chain.lock();
            (chain.block_count(), chain.bytes_held())
        };
        ArenaStats {
            pool: self.pool.name(),
            bytes_used: self.bytes_used(),
            high_watermark: self.high_watermark(),
            block_count,
            bytes_held,
            generation: self.generation,
            tags: self.tags.lock().clone(),
        }
    }

    // ---------------------------------------------------------------- tags

    /// Allocates like [`try_alloc`](MemoryArena::try_alloc) and counts the bytes under
    /// `tag` (`ArenaPush(arena, size, align, "Tag")` in C++ engines). Tagging costs a lock
    /// and a lookup in a short list; untagged allocations pay nothing for it. O(tags).
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
        self.leave_steady_state();
        let mut tags = self.tags.lock();
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
            Err(e) => alloc_failed(&e),
        }
    }
}

/// The arena interface: typed helpers (`alloc_val`, `alloc_slice_copy`, `alloc_str`, …)
/// come with it. `pop` and `realloc` act on the top of the current block.
impl Arena for MemoryArena<'_> {
    #[inline(always)]
    fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        MemoryArena::try_alloc(self, layout)
    }

    #[inline(always)]
    #[track_caller]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        MemoryArena::alloc(self, layout)
    }

    #[inline]
    unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { MemoryArena::pop(self, ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: forwarded from the caller.
        unsafe { MemoryArena::realloc(self, ptr, old, new_size) }
    }

    fn pool_name(&self) -> &'static str {
        self.pool.name()
    }
}

impl Drop for MemoryArena<'_> {
    fn drop(&mut self) {
        self.chain.get_mut().release_all(self.pool, &self.cursor);
    }
}

/// The arena's [`stats`](MemoryArena::stats), as `{}` prints them.
impl std::fmt::Display for MemoryArena<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.stats().fmt(f)
    }
}

impl std::fmt::Debug for MemoryArena<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryArena")
            .field("stats", &self.stats())
            .finish()
    }
}
