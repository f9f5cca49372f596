//! `MemoryArena`: a paged bump allocator over blocks of one pool.
//!
//! An arena is two things ([`cursor`] and [`chain`]):
//! - a **cursor**, the bump position in the current block. Allocation is
//!   [`Cursor::bump`](cursor::Cursor::bump): align, compare, add. Everything else (new
//!   blocks, statistics, labels, tracing) is on the cold path, and the high watermark is
//!   brought up to date only where `bytes_used` is about to fall (pop, shrink, rewind,
//!   reset), never on the hot path;
//! - a **chain**, the blocks it holds and the only code that takes blocks from the pool or
//!   gives them back.
//!
//! The cursor bumps **upwards**, so the newest allocation (the *top*) ends at the bump
//! pointer: it can be popped ([`MemoryArena::pop`]) or grown and shrunk in place
//! ([`MemoryArena::realloc`]), which is what makes a growing vector cheap
//! ([`pop_realloc`]).
//!
//! [`reset`](MemoryArena::reset) asks the [`policy`] which block to keep, once per reset
//! ([`reset`]); [`checkpoints_and_scopes`] holds checkpoints and scopes, [`stats`] the
//! figures, [`hot_cursor`] the [`HotCursor`] (the bump position held in the caller's
//! registers for a hot loop). This file holds the struct and the allocation path:
//! `try_alloc` / `alloc` (the bump) and `alloc_slow` (a new block).
//!
//! **Layout.** The struct is `repr(C, align(128))`: its first two cache lines hold
//! everything the bump path and a steady reset read (the cursor, the peak and watermark,
//! the generation, the steady band); the chain sits behind a mutex taken on slow paths
//! only.
//!
//! Every field a shared reference can reach is an atomic or behind a lock, and the arena
//! is `!Sync` only because bumping is a load and a store, not an atomic read-modify-write.
//! That lets [`SharedArena`](crate::SharedArena) be one `MemoryArena` per thread whose
//! statistics any thread may read.

pub(crate) mod chain;
mod config;
pub(crate) mod cursor;
mod hot_cursor;
mod policy;

pub(crate) use policy::need as block_need;
mod checkpoints_and_scopes;
mod pop_realloc;
mod reset;
mod stats;

use std::alloc::Layout;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use parking_lot::Mutex;

use crate::arena_trait::Arena;
use crate::error::AllocError;
use crate::error::alloc_failed;
use crate::poison;
use crate::pool::MemoryPool;

use chain::Chain;
pub(crate) use chain::Reports;
use cursor::Cursor;
use policy::Quiet;

pub use chain::heap_fallbacks;
pub use checkpoints_and_scopes::{ArenaScope, Checkpoint};
pub use config::ArenaConfig;
pub use hot_cursor::HotCursor;
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
    /// reset: the arena holds one pool block, no labels and no quiet streak, and the reset
    /// policy keeps the block as it is for them (`policy::keep_band`). Empty (`usize::MAX`,
    /// 0) otherwise; emptied whenever a block or a label comes in.
    steady_lo: AtomicUsize,
    steady_span: AtomicUsize,
    /// The blocks. Locked only on the slow path, by positions and by statistics; `reset`
    /// and `Drop` reach it through `&mut` without locking.
    chain: Mutex<Chain>,
    /// Bytes per label since the last reset (`alloc_labelled`).
    labels: Mutex<Vec<(&'static str, usize)>>,
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
    /// # Panics
    /// If `config`'s `first_block` was set (with the builder) larger than any block `pool`
    /// can hand out; the message names the field and both sizes.
    ///
    /// ```
    /// use nebula_memory::{ArenaConfig, MemoryArena};
    /// let config = ArenaConfig::default().heap_fallback(true);
    /// let arena = MemoryArena::with_config(nebula_memory::scratch_pool(), config);
    /// assert_eq!(arena.config().heap_fallback, true);
    /// ```
    #[track_caller]
    pub fn with_config(pool: &'pool MemoryPool, config: ArenaConfig) -> Self {
        config.check_against(pool);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut chain = Chain::new();
        if let Some(tag) = config.tag {
            chain.set_tag(crate::ledger::node(tag));
        }
        MemoryArena {
            cursor: Cursor::empty(),
            peak_since_reset: AtomicUsize::new(0),
            high_watermark: AtomicUsize::new(0),
            generation: 0,
            steady_lo: AtomicUsize::new(NO_BAND.0),
            steady_span: AtomicUsize::new(NO_BAND.1),
            chain: Mutex::new(chain),
            labels: Mutex::new(Vec::new()),
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

    /// Charges this arena's blocks to the ledger tag `node` from now on (its config's tag
    /// becomes `node`'s path): a pooled scratch arena handed to another line. Only for an
    /// arena that holds no block, so nothing charged moves. O(arenas of `node`).
    #[cfg_attr(not(feature = "bevy"), allow(dead_code))] // used by the Bevy owners
    pub(crate) fn retag(&mut self, node: &'static crate::ledger::TagNode) {
        let chain = self.chain.get_mut();
        assert_eq!(
            chain.block_count(),
            0,
            "retagging an arena that holds blocks"
        );
        chain.set_tag(node);
        self.config.tag = Some(node.path);
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

    /// The slow path: the current block is full. Moves to a spare block or takes a new one,
    /// then reports what happened (the operation is complete by then).
    #[cold]
    #[inline(never)]
    fn alloc_slow(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let mut reports = Reports::default();
        let p = self.alloc_slow_deferred(layout, &mut reports);
        reports.emit();
        p
    }

    /// [`try_alloc`](MemoryArena::try_alloc) inside a larger operation of the crate: what
    /// the growth has to report is left in `reports`, for the caller to emit once its own
    /// operation is complete (see [`Reports`]).
    #[inline(always)]
    pub(crate) fn try_alloc_deferred(
        &self,
        layout: Layout,
        reports: &mut Reports,
    ) -> Result<NonNull<u8>, AllocError> {
        match self.cursor.bump(layout) {
            Some(p) => {
                // SAFETY: the bytes were just carved out for the caller.
                unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
                Ok(p)
            }
            None => self.alloc_slow_deferred(layout, reports),
        }
    }

    /// The growth itself: enters a spare or a new block and carves the request out of it.
    /// Runs no user code; what to report goes to `reports`.
    #[cold]
    #[inline(never)]
    fn alloc_slow_deferred(
        &self,
        layout: Layout,
        reports: &mut Reports,
    ) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            // Any aligned, non-null address serves a zero-sized request.
            return Ok(NonNull::new(ptr::without_provenance_mut(layout.align()))
                .unwrap_or(NonNull::dangling()));
        }
        let needed =
            cursor::window_need(layout).ok_or_else(|| AllocError::layout(self.pool.name()))?;
        self.leave_steady_state();
        let mut chain = self.chain.lock();
        let grown = chain.grow(self.pool, &self.cursor, needed, &self.config, reports);
        let p = grown.map(|()| {
            let p = self
                .cursor
                .bump(layout)
                .expect("a block sized for the request has room for it");
            // SAFETY: freshly carved out for the caller.
            unsafe { poison::hand_out(p.as_ptr(), layout.size()) };
            p
        });
        // The ledger learns an arena's use at block granularity: here and at reset.
        chain.publish_used(self.cursor.position());
        p
    }
}

/// The arena interface: typed helpers (`alloc_val`, `alloc_slice_copy`, `alloc_str`, …)
/// come with it. `pop` and `realloc` act on the top of the current block.
// SAFETY: `try_alloc` carves each request out of the cursor's window (a block the arena
// owns) at an aligned address past every earlier allocation of the window, or out of a
// fresh block; bytes come back only through `&mut self` (reset, scopes, drop) or the
// `unsafe` rewind, pop and realloc, whose contracts exclude live allocations. `pop`
// returns `true` only for the top, and `realloc` copies `min(old, new)` bytes (or keeps
// them in place).
unsafe impl Arena for MemoryArena<'_> {
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
