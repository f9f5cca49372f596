//! `MemoryPool`: one reserved region split into blocks by a TLSF free structure.
//!
//! A first-fit search over one free list (what a textbook block pool does) is O(n) per
//! acquire and per release once the pool fragments, which is exactly when a game can least
//! afford it. The pool keeps the same contract (split what is too large, coalesce what is
//! freed) and finds blocks with Two-Level Segregated Fit instead:
//!
//! - [`tlsf`]: free blocks indexed by size class; acquire is two bitmap searches plus a
//!   bounded scan, O(1) whatever the fragmentation.
//! - [`release`]: a freed block merges with its free physical neighbours at once (boundary
//!   tags, see [`crate::block`]), so two free blocks are never adjacent and releasing
//!   everything restores the single initial range.
//! - [`extend`]: a used block grown in place into the free range after it.
//! - [`maintain`] and [`purge`]: when release pressure has lasted past a delay, free pages
//!   go back to the OS, but not those a recent peak of use needed (the recall).
//! - [`quarantine`]: freed blocks kept inaccessible for a few frames; [`stats`]: counters.
//! - [`space`]: where the blocks live: one region reserved once ([`crate::vm`]), pages
//!   committed as blocks are handed out; or, on the web, segments taken as needed.
//!   [`spans`]: the pool's operations on them.
//!
//! **Invariants.** Blocks tile each span (the region, or a segment up to its sentinel) in
//! address order. No two free blocks are adjacent, so releasing everything restores one
//! range per span. A block is on a free list iff its magic is `MAGIC_FREE`.
//! `in_use + free == capacity`. `largest_free` is computed the way `allocate_block`
//! searches (a new segment included), so `allocate_block(stats().largest_free)` succeeds
//! (absent other threads).
//!
//! **Bad input.** A request is refused with `ZeroSize`, `TooLarge` or `Exhausted` (counted,
//! and a WARN in a `pool_exhausted` span that names the pool). A `free_block` of a foreign,
//! misaligned, double-freed or corrupted block panics, naming the pool and the address,
//! before anything is touched.

mod extend;
mod footer;
mod maintain;
mod purge;
mod quarantine;
mod release;
mod space;
mod spans;
mod stats;
mod tlsf;

use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicUsize};

use crate::block::{
    BLOCK_ALIGN, DIRTY, HEADER, MAGIC_FREE, MAGIC_USED, MIN_BLOCK, MemoryBlock, PREV_FREE, Word,
};
use crate::error::PoolError;
use crate::fork::{BoxedLock, Level, LockGuard};
use crate::poison;
use crate::vm::Region;

pub use stats::PoolStats;

use footer::write_footer;
use purge::Purge;
use quarantine::Quarantine;
pub(crate) use space::DEFAULT_SEGMENT;
use space::Space;
use tlsf::Tlsf;

/// A region of address space handed out as 16-byte-aligned [`MemoryBlock`]s.
///
/// The region is reserved once ([`MemoryPool::new`]) and committed only as blocks are used
/// (on the web, where nothing can be reserved, the pool takes segments as it needs them:
/// [`MemoryPool::segmented`]).
/// Blocks are found in O(1) by a TLSF structure (see the module docs), split when too
/// large, and coalesced with free neighbours as soon as they are freed. The pool is
/// `Send + Sync`: one mutex guards the free structure and is never held while block
/// contents are touched.
///
/// The crate's three global pools are [`engine_pool`](crate::engine_pool),
/// [`game_pool`](crate::game_pool) and [`scratch_pool`](crate::scratch_pool); arenas draw
/// blocks from them.
///
/// ```
/// use nebula_memory::MemoryPool;
///
/// let pool = MemoryPool::new("level", 16 << 20).unwrap();
/// let block = pool.allocate_block(64 * 1024).unwrap();
/// // The data pointer comes from the block pointer (not from a reference to the header).
/// let data = nebula_memory::MemoryBlock::data_of(block);
/// // SAFETY: the block is ours until we free it; its data holds >= 64 KiB.
/// unsafe { data.as_ptr().write_bytes(7, 64 * 1024) };
/// // SAFETY: from this pool, not used afterwards.
/// unsafe { pool.free_block(block) };
/// assert_eq!(pool.stats().in_use, 0);
/// ```
pub struct MemoryPool {
    name: &'static str,
    space: Space,
    /// Boxed and registered, so that it is taken around `fork` (see `crate::fork`).
    state: BoxedLock<State>,
    /// Bytes of this pool's blocks that tagged arenas hold now (charged to a ledger tag):
    /// what the ledger subtracts from `in_use` for the untagged rest.
    charged: AtomicUsize,
}

// SAFETY: the region is owned by the pool; every access to the free structure and to
// the headers of free blocks happens under `state`'s lock. Blocks in use belong to whoever
// allocated them, not to the pool.
unsafe impl Send for MemoryPool {}
// SAFETY: as above: shared access goes through the mutex.
unsafe impl Sync for MemoryPool {}

/// Everything the pool's lock guards.
struct State {
    index: Tlsf,
    counters: Counters,
    purge: Purge,
    quarantine: Quarantine,
    /// A segmented pool's segments, sorted by address (empty for a reserved region).
    segments: Vec<Region>,
    /// Bytes the segments span.
    spanned: usize,
}

impl State {
    fn new(capacity: usize) -> State {
        State {
            index: Tlsf::new(),
            counters: Counters::default(),
            purge: Purge::new(capacity),
            quarantine: Quarantine::new(),
            segments: Vec::new(),
            spanned: 0,
        }
    }
}

/// Whether an `Exhausted` refusal counts in [`PoolStats::exhaustions`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// A real exhaustion: counted (and reported, by the caller).
    Counted,
    /// A tentative request with a fallback: neither counted nor reported.
    Quiet,
}

/// The figures behind [`PoolStats`].
#[derive(Default)]
struct Counters {
    in_use: usize,
    blocks_in_use: usize,
    high_watermark: usize,
    exhaustions: u64,
    allocations: u64,
    frees: u64,
}

impl MemoryPool {
    /// Reserves `capacity` bytes of address space (rounded up to whole pages) as one free
    /// range. Nothing is committed but the page holding the first header. O(1).
    ///
    /// # Errors
    /// [`PoolError::InvalidCapacity`] for a capacity of 0; [`PoolError::ReserveFailed`] when
    /// the address space cannot be reserved (or the capacity is beyond `isize::MAX`).
    ///
    /// ```
    /// use nebula_memory::{MemoryPool, PoolError};
    ///
    /// let pool = MemoryPool::new("assets", 64 << 20).unwrap();
    /// assert_eq!(pool.stats().capacity, 64 << 20);
    /// assert!(matches!(MemoryPool::new("none", 0), Err(PoolError::InvalidCapacity { .. })));
    /// ```
    pub fn new(name: &'static str, capacity: usize) -> Result<MemoryPool, PoolError> {
        if !crate::vm::RESERVES {
            return MemoryPool::segmented(name, capacity, DEFAULT_SEGMENT);
        }
        if capacity == 0 {
            return Err(PoolError::InvalidCapacity {
                pool: name,
                capacity,
            });
        }
        let reserve_failed = |os_code| PoolError::ReserveFailed {
            pool: name,
            capacity,
            os_code,
        };
        let region = match Region::reserve(capacity) {
            Some(Ok(region)) => region,
            Some(Err(e)) => return Err(reserve_failed(e.raw_os_error())),
            None => return Err(reserve_failed(None)),
        };
        let len = region.len();
        let base = region.base().as_ptr();
        // SAFETY: a page is at least 4 KiB, so the first header and the last 8 bytes are
        // inside the fresh region.
        unsafe {
            if !region.commit(base, HEADER) || !region.commit(base.add(len - 8), 8) {
                return Err(reserve_failed(None));
            }
        }
        let mut state = State::new(len);
        let first = base.cast::<MemoryBlock>();
        // SAFETY: the region is page-aligned, at least a page long and committed where we
        // write; `first` becomes the one free block spanning it.
        unsafe {
            first.write(MemoryBlock {
                magic: MAGIC_FREE,
                flags: AtomicU32::new(0),
                size: len,
                next: ptr::null_mut(),
                word: Word { used: 0 },
            });
            write_footer(first);
            state.index.insert(first);
            // Nobody may touch free space until it is handed out.
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(first)).as_ptr(),
                len - HEADER - 8,
            );
        }
        Ok(MemoryPool {
            name,
            space: Space::Reserved(region),
            state: BoxedLock::new(Level::Pools, state),
            charged: AtomicUsize::new(0),
        })
    }

    /// A pool that takes memory in segments as it needs it, up to `capacity` bytes in all,
    /// instead of reserving its capacity up front: what `MemoryPool::new` makes on the web
    /// (wasm32 has no address space to reserve; its memory only grows), usable anywhere. A
    /// segment is at least `segment` bytes (rounded up to whole pages), at least an eighth
    /// of what the pool holds already, and at least what the block asked for needs; a
    /// segment that is wholly free again goes back to the system allocator at a purge pass
    /// ([`set_retain_limit`](MemoryPool::set_retain_limit),
    /// [`maintain`](MemoryPool::maintain)). A block never spans two segments, and each
    /// segment keeps a 32-byte header at its end. O(1); nothing is taken until the first
    /// block.
    ///
    /// # Errors
    /// [`PoolError::InvalidCapacity`] for a capacity of 0 or beyond `isize::MAX` once
    /// rounded up to whole pages (as a reserved region's is); [`PoolError::InvalidSegment`]
    /// for a segment of 0.
    ///
    /// ```
    /// use nebula_memory::MemoryPool;
    ///
    /// let pool = MemoryPool::segmented("web", 64 << 20, 1 << 20).unwrap();
    /// assert_eq!(pool.stats().reserved, 0, "nothing taken yet");
    /// let block = pool.allocate_block(4096).unwrap();
    /// assert_eq!(pool.stats().reserved, 1 << 20, "one segment");
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// ```
    pub fn segmented(
        name: &'static str,
        capacity: usize,
        segment: usize,
    ) -> Result<MemoryPool, PoolError> {
        let (page, pool) = (crate::vm::page_size(), name);
        // Whole pages, as a reserved region's capacity is (a tiny one is one page).
        let capacity = match capacity.checked_next_multiple_of(page) {
            Some(c) if capacity > 0 && c <= isize::MAX as usize => c,
            _ => return Err(PoolError::InvalidCapacity { pool, capacity }),
        };
        if segment == 0 {
            return Err(PoolError::InvalidSegment { pool, segment });
        }
        let step = segment.checked_next_multiple_of(page).unwrap_or(capacity);
        Ok(MemoryPool {
            name,
            space: Space::Segmented { capacity, step },
            state: BoxedLock::new(Level::Pools, State::new(capacity)),
            charged: AtomicUsize::new(0),
        })
    }

    /// The name given at creation; it appears in every error, panic and tracing event. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("audio", 1 << 20).unwrap();
    /// assert_eq!(pool.name(), "audio");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Hands out a block whose usable area (at [`MemoryBlock::data_of`], 16-byte aligned)
    /// holds at least `min_usable` bytes. A free range much larger than that is split and
    /// the rest stays free. O(1): see the module docs for the search.
    ///
    /// Debug builds fill the usable bytes with `0xCD`.
    ///
    /// # Errors
    /// - [`PoolError::ZeroSize`] for `min_usable == 0`;
    /// - [`PoolError::TooLarge`] when even an empty pool could not hold it;
    /// - [`PoolError::Exhausted`] when no free range fits now: the refusal is counted in
    ///   [`PoolStats::exhaustions`] and a `tracing` WARN event is emitted inside a
    ///   `pool_exhausted` span carrying the same fields.
    ///
    /// The pool is unchanged by any refusal.
    ///
    /// ```
    /// use nebula_memory::{MemoryPool, PoolError};
    ///
    /// let pool = MemoryPool::new("doc", 64 * 1024).unwrap();
    /// let a = pool.allocate_block(40 * 1024).unwrap();
    /// assert!(matches!(pool.allocate_block(40 * 1024), Err(PoolError::Exhausted { .. })));
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(a) };
    /// assert!(pool.allocate_block(40 * 1024).is_ok());
    /// ```
    pub fn allocate_block(&self, min_usable: usize) -> Result<NonNull<MemoryBlock>, PoolError> {
        let block = self.allocate(min_usable, Refusal::Counted);
        if let Err(e) = &block {
            // The pool's lock is released and nothing is half done: user code may run.
            report_exhausted(e);
        }
        block
    }

    /// `allocate_block` for a tentative request that has a fallback (an arena asking for a
    /// grown block before settling for the size it needs): a refusal is neither counted in
    /// `exhaustions` nor reported by a WARN event.
    pub(crate) fn allocate_block_quietly(
        &self,
        min_usable: usize,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        self.allocate(min_usable, Refusal::Quiet)
    }

    /// `allocate_block` for a caller that holds a lock of its own (an arena's chain): an
    /// exhaustion is counted now, but its WARN event is left to the caller, who emits it
    /// with `report_exhausted` once its whole operation is complete.
    /// A `tracing` subscriber is user code and may allocate from that very arena.
    pub(crate) fn allocate_block_unreported(
        &self,
        min_usable: usize,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        self.allocate(min_usable, Refusal::Counted)
    }

    /// Validate, find, carve, count, hand out.
    fn allocate(
        &self,
        min_usable: usize,
        refusal: Refusal,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        let size = self.block_size(min_usable)?;
        let mut st = self.state.lock();
        let mut found = st.index.find(size);
        if found.is_null() && self.grow(&mut st, size) {
            found = st.index.find(size);
        }
        if found.is_null() {
            return Err(self.refuse(st, min_usable, refusal));
        }
        // SAFETY: `found` is a free block of this region, found under the lock we hold.
        let block = unsafe { self.carve(&mut st, found, size) }.ok_or(PoolError::CommitFailed {
            pool: self.name,
            requested: min_usable,
        })?;
        // SAFETY: `carve` returned a block now in use, so its header is readable.
        let size = unsafe { (*block).size };
        let c = &mut st.counters;
        c.in_use += size;
        c.blocks_in_use += 1;
        c.allocations += 1;
        c.high_watermark = c.high_watermark.max(c.in_use);
        let in_use = c.in_use;
        st.purge.acquired(size, in_use);
        drop(st);

        // SAFETY: `carve` never returns null.
        let block = unsafe { NonNull::new_unchecked(block) };
        // SAFETY: the usable bytes are inside the block we just took off the free lists.
        unsafe { poison::hand_out(MemoryBlock::data_of(block).as_ptr(), size - HEADER) };
        Ok(block)
    }

    /// The total size of the block that serves `min_usable` bytes, or why there is none.
    fn block_size(&self, min_usable: usize) -> Result<usize, PoolError> {
        let pool = self.name;
        if min_usable == 0 {
            return Err(PoolError::ZeroSize { pool });
        }
        let max_usable = self.space.max_usable();
        match min_usable.checked_next_multiple_of(BLOCK_ALIGN) {
            Some(n) if n <= max_usable => Ok((n + HEADER).max(MIN_BLOCK)),
            _ => Err(PoolError::TooLarge {
                pool,
                requested: min_usable,
                max_usable,
            }),
        }
    }

    /// Refuses a request nothing fits, counting it unless it was tentative. Emits nothing:
    /// reporting is the caller's (see `report_exhausted`).
    #[cold]
    fn refuse(
        &self,
        mut st: LockGuard<'_, State>,
        requested: usize,
        refusal: Refusal,
    ) -> PoolError {
        if refusal == Refusal::Counted {
            st.counters.exhaustions += 1;
        }
        PoolError::Exhausted {
            pool: self.name,
            requested,
            free: self.space.capacity() - st.counters.in_use,
            largest_free: self.largest_free(&st),
        }
    }

    /// Takes free block `block` off the lists, splits off what is beyond `size` (when the
    /// rest can stand as a block of its own), commits it and marks it in use. Returns
    /// `None`, with the pool unchanged, when the OS refuses to commit.
    ///
    /// # Safety
    /// `block` is on this pool's free lists, its total size is at least `size`, and the lock
    /// is held (`st`).
    unsafe fn carve(
        &self,
        st: &mut State,
        block: *mut MemoryBlock,
        size: usize,
    ) -> Option<*mut MemoryBlock> {
        // SAFETY: per the contract every header we read or write below lies inside the
        // region, and we hold the lock.
        unsafe {
            st.index.remove(block);
            let total = (*block).size;
            let rest = total - size;
            let (size, rest) = if rest >= MIN_BLOCK {
                (size, rest)
            } else {
                (total, 0)
            };
            // Commit the block and, when split, the header of the remainder after it.
            let commit_len = if rest > 0 { size + HEADER } else { size };
            if !self.commit(st, block.cast(), commit_len) {
                st.index.insert(block);
                return None;
            }
            let dirty = (*block).flags.fetch_and(!DIRTY, Relaxed) & DIRTY;
            if rest > 0 {
                let tail = block.cast::<u8>().add(size).cast::<MemoryBlock>();
                poison::expose(tail.cast(), HEADER);
                tail.write(MemoryBlock {
                    magic: MAGIC_FREE,
                    flags: AtomicU32::new(dirty),
                    size: rest,
                    next: ptr::null_mut(),
                    word: Word { used: 0 },
                });
                write_footer(tail);
                st.index.insert(tail);
                (*block).size = size;
            } else if let Some(after) = self.physical_next(block) {
                (*after).flags.fetch_and(!PREV_FREE, Relaxed);
            }
            (*block).magic = MAGIC_USED;
            (*block).next = ptr::null_mut();
            (*block).word = Word { used: 0 };
            Some(block)
        }
    }

    /// The block right after `block` in its span (a segment's sentinel, in a segmented
    /// pool), if `block` is not the last of a reserved region.
    ///
    /// # Safety
    /// `block` is derived from one of the pool's spans and its header is valid (its size is
    /// right).
    unsafe fn physical_next(&self, block: *mut MemoryBlock) -> Option<*mut MemoryBlock> {
        // SAFETY: per the contract; a block ends at or before its span's end.
        let after = unsafe { block.cast::<u8>().add((*block).size) };
        self.space.header_at(after.addr()).then_some(after.cast())
    }

    /// The largest `min_usable` `allocate_block` could grant now (lock held): the largest
    /// free block, or a new segment's.
    fn largest_free(&self, st: &State) -> usize {
        st.index
            .largest()
            .max(self.segment_room(st))
            .saturating_sub(HEADER)
    }

    /// The most usable bytes one block of this pool can ever have (the whole capacity but
    /// a header, and a segment's sentinel). O(1).
    pub(crate) fn max_usable(&self) -> usize {
        self.space.max_usable()
    }

    /// Bytes of this pool's blocks held by tagged arenas now (see `charged`).
    pub(crate) fn charged(&self) -> usize {
        self.charged.load(Relaxed)
    }

    /// A tagged arena took (`true`) or gave back a block of `bytes`.
    pub(crate) fn note_charged(&self, bytes: usize, taken: bool) {
        if taken {
            self.charged.fetch_add(bytes, Relaxed);
        } else {
            self.charged.fetch_sub(bytes, Relaxed);
        }
    }

    /// Whether this pool takes memory in segments as it needs it ([`MemoryPool::segmented`],
    /// what [`MemoryPool::new`] makes on the web) rather than reserving its capacity up
    /// front. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::segmented("doc", 1 << 20, 64 << 10).unwrap();
    /// assert!(pool.grows_by_segments());
    /// ```
    pub fn grows_by_segments(&self) -> bool {
        matches!(self.space, Space::Segmented { .. })
    }

    /// Whether `ptr` points into this pool's memory (its region or one of its segments). O(1),
    /// O(log segments) for a segmented pool.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// let block = pool.allocate_block(64).unwrap();
    /// assert!(pool.contains(block.as_ptr().cast()));
    /// assert!(!pool.contains(&0u8));
    /// # unsafe { pool.free_block(block) };
    /// ```
    pub fn contains(&self, ptr: *const u8) -> bool {
        self.span_of(ptr.addr()).is_some()
    }
}

/// Emits the WARN event (inside a `pool_exhausted` span) of a refusal counted by
/// `allocate_block` or `allocate_block_unreported`; other errors are not reported.
/// Runs user code (the subscriber): call it only once the operation that met the refusal
/// is complete, with no lock of the crate held.
#[cold]
pub(crate) fn report_exhausted(e: &PoolError) {
    if let &PoolError::Exhausted {
        pool,
        requested,
        free,
        largest_free,
    } = e
    {
        let span = tracing::warn_span!("pool_exhausted", pool, requested, free, largest_free);
        let _enter = span.enter();
        tracing::warn!(
            pool,
            requested,
            free,
            largest_free,
            "memory pool '{pool}' exhausted: asked for {requested} bytes, {free} free, \
             largest free block {largest_free}"
        );
    }
}

impl std::fmt::Debug for MemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let space = match &self.space {
            Space::Reserved(_) => "reserved",
            Space::Segmented { .. } => "segmented",
        };
        f.debug_struct("MemoryPool")
            .field("name", &self.name)
            .field("space", &space)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for MemoryPool {
    fn drop(&mut self) {
        let blocks = self.state.get_mut().counters.blocks_in_use;
        if blocks != 0 {
            tracing::debug!(
                pool = self.name,
                blocks,
                "memory pool dropped with blocks still in use"
            );
        }
        // Under ASan the regions' shadow must be clean before the memory is unmapped and
        // possibly reused by the system allocator.
        let segments = &self.state.get_mut().segments;
        let reserved = match &self.space {
            Space::Reserved(region) => Some(region),
            Space::Segmented { .. } => None,
        };
        for region in reserved.into_iter().chain(segments) {
            // SAFETY: the whole region is ours and about to be released.
            unsafe { poison::expose(region.base().as_ptr(), region.len()) };
        }
    }
}
