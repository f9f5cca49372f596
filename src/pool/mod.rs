//! `MemoryPool`: one reserved region split into blocks by a TLSF free structure.
//!
//! A first-fit search over one free list (what a textbook block pool does) is O(n) per
//! acquire and per release once the pool fragments, which is exactly when a game can least
//! afford it. The pool keeps the same contract (split what is too large, coalesce what is
//! freed) and finds blocks with Two-Level Segregated Fit instead:
//!
//! - [`tlsf`]: free blocks indexed by size class; acquire is two bitmap searches plus a
//!   bounded scan, O(1) whatever the fragmentation.
//! - Release merges the block with free physical neighbours at once (boundary tags, see
//!   [`crate::block`]), so two free blocks are never adjacent and releasing everything
//!   restores the single initial range.
//! - [`purge`]: when release pressure has lasted past a delay, free pages go back to the OS.
//! - [`quarantine`]: a debug aid that keeps freed blocks inaccessible for a few frames.
//!
//! Physical memory: the region is reserved once ([`crate::vm`]) and pages are committed as
//! blocks are handed out.

mod purge;
mod quarantine;
mod tlsf;

use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use parking_lot::Mutex;

use crate::block::{
    BLOCK_ALIGN, DIRTY, HEADER, MAGIC_FREE, MAGIC_QUARANTINE, MAGIC_USED, MIN_BLOCK, MemoryBlock,
    PREV_FREE, Word,
};
use crate::error::PoolError;
use crate::poison;
use crate::vm::Region;

use purge::Purge;
use quarantine::Quarantine;
use tlsf::Tlsf;

/// A snapshot of a pool's counters, from [`MemoryPool::stats`].
///
/// `in_use + free == capacity` always holds.
///
/// ```
/// use nebula_memory::MemoryPool;
///
/// let pool = MemoryPool::new("stats", 1 << 20).unwrap();
/// let block = pool.allocate_block(4096).unwrap();
/// let s = pool.stats();
/// assert_eq!(s.in_use + s.free, s.capacity);
/// assert_eq!(s.blocks_in_use, 1);
/// // SAFETY: the block came from this pool and is not used afterwards.
/// unsafe { pool.free_block(block) };
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes the region spans.
    pub capacity: usize,
    /// Bytes of blocks handed out, headers included.
    pub in_use: usize,
    /// `capacity - in_use`.
    pub free: usize,
    /// The largest `min_usable` that `allocate_block` would grant now.
    pub largest_free: usize,
    /// Blocks handed out and not yet freed.
    pub blocks_in_use: usize,
    /// The largest `in_use` ever seen.
    pub high_watermark: usize,
    /// `allocate_block` calls refused with [`PoolError::Exhausted`].
    pub exhaustions: u64,
    /// Number of separate free ranges (1 when nothing is in use: fragmentation at a glance).
    pub free_ranges: usize,
    /// Bytes of freed blocks held back by the quarantine (counted in `in_use` until
    /// released; see [`MemoryPool::set_quarantine`]).
    pub quarantined: usize,
    /// Successful `allocate_block` calls ever (with `frees`, counts pool operations).
    pub allocations: u64,
    /// `free_block` calls ever.
    pub frees: u64,
}

impl std::fmt::Display for PoolStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        write!(
            f,
            "{:.1}/{:.1} MiB in use in {} blocks (peak {:.1} MiB), largest free {:.1} MiB \
             in {} free ranges, {} exhaustions",
            self.in_use as f64 / MIB,
            self.capacity as f64 / MIB,
            self.blocks_in_use,
            self.high_watermark as f64 / MIB,
            self.largest_free as f64 / MIB,
            self.free_ranges,
            self.exhaustions
        )
    }
}

/// A region of address space handed out as 16-byte-aligned [`MemoryBlock`]s.
///
/// The region is reserved once ([`MemoryPool::new`]) and committed only as blocks are used.
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
    region: Region,
    state: Mutex<Box<State>>,
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
        let mut state = Box::new(State {
            index: Tlsf::new(),
            counters: Counters::default(),
            purge: Purge::new(len),
            quarantine: Quarantine::new(),
        });
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
            region,
            state: Mutex::new(state),
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

    /// Hands out a block whose usable area ([`MemoryBlock::data`], 16-byte aligned) holds at
    /// least `min_usable` bytes. A free range much larger than that is split and the rest
    /// stays free. O(1): see the module docs for the search.
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
            self.report_exhausted(e);
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
    /// with [`report_exhausted`](MemoryPool::report_exhausted) once its lock is released.
    /// A `tracing` subscriber is user code and may allocate from that very arena.
    pub(crate) fn allocate_block_unreported(
        &self,
        min_usable: usize,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        self.allocate(min_usable, Refusal::Counted)
    }

    /// Emits the WARN event (inside a `pool_exhausted` span) of a refusal counted by
    /// `allocate_block` or `allocate_block_unreported`; other errors are not reported.
    /// Runs user code (the subscriber): call it with no lock of the crate held.
    #[cold]
    pub(crate) fn report_exhausted(&self, e: &PoolError) {
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

    /// Validate, find, carve, count, hand out.
    fn allocate(
        &self,
        min_usable: usize,
        refusal: Refusal,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        let size = self.block_size(min_usable)?;
        let mut st = self.state.lock();
        let found = st.index.find(size);
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
        st.purge.acquired(size);
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
        let max_usable = self.region.len() - HEADER;
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
        mut st: parking_lot::MutexGuard<'_, Box<State>>,
        requested: usize,
        refusal: Refusal,
    ) -> PoolError {
        if refusal == Refusal::Counted {
            st.counters.exhaustions += 1;
        }
        PoolError::Exhausted {
            pool: self.name,
            requested,
            free: self.region.len() - st.counters.in_use,
            largest_free: st.index.largest().saturating_sub(HEADER),
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
            if !self.region.commit(block.cast(), commit_len) {
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

    /// The block right after `block` in the region, if `block` is not the last.
    ///
    /// # Safety
    /// `block`'s header is valid (its size is right).
    unsafe fn physical_next(&self, block: *mut MemoryBlock) -> Option<*mut MemoryBlock> {
        let region_end = self.region.base().as_ptr() as usize + self.region.len();
        // SAFETY: per the contract; a block ends at or before the region's end.
        let after = unsafe { block.cast::<u8>().add((*block).size) };
        ((after as usize) < region_end).then_some(after.cast())
    }

    /// Gives `block` back and merges it with its free neighbours at once. O(1).
    ///
    /// Debug builds fill the usable bytes with `0xDD` first. If release pressure has stayed
    /// above the retain limit for the purge delay (see [`MemoryPool::set_retain_limit`]),
    /// this release also runs a decommit pass (O(free ranges)) that gives the pages of
    /// every dirty free range back to the OS.
    ///
    /// # Safety
    /// `block` came from this pool's [`allocate_block`](MemoryPool::allocate_block), has not
    /// been freed since, and neither it nor its data is used afterwards.
    ///
    /// # Panics
    /// Where a broken contract can be detected cheaply it panics instead of corrupting the
    /// pool, with a message naming the pool and the address: a pointer outside the region or
    /// misaligned, a block already freed (double free), or a header whose magic or size was
    /// overwritten.
    pub unsafe fn free_block(&self, block: NonNull<MemoryBlock>) {
        let b = block.as_ptr();
        let size = self.check_freed(b);
        // SAFETY: the caller gave the block back to us; its data is dead.
        unsafe { poison::give_back(MemoryBlock::data_of(block).as_ptr(), size - HEADER) };

        let mut st = self.state.lock();
        // SAFETY: a live used block of this region that the caller gave up; its header (and
        // its neighbours', in `release_locked`) are only written under the lock we hold.
        // Quarantine protects whole pages of its data only, which nobody may touch now;
        // the header page stays accessible for the magic checks of later frees.
        unsafe {
            if (*b).magic != MAGIC_USED {
                drop(st);
                self.bad_free(b, "was already freed (double free)");
            }
            if st.quarantine.active() {
                (*b).magic = MAGIC_QUARANTINE;
                let data = MemoryBlock::data_of(block).as_ptr();
                self.region.protect(data, size - HEADER, false);
                st.quarantine.hold(b, size);
                return;
            }
            self.release_locked(&mut st, b);
        }
        self.purge_if_due(&mut st);
    }

    /// The checks `free_block` makes before touching anything: the pointer is a block of
    /// this region and its header says it is in use with a plausible size, which it returns.
    /// Panics naming the pool and the address otherwise.
    fn check_freed(&self, b: *mut MemoryBlock) -> usize {
        let base = self.region.base().as_ptr() as usize;
        let addr = b as usize;
        let capacity = self.region.len();
        if addr < base || addr > base + capacity - MIN_BLOCK || !addr.is_multiple_of(BLOCK_ALIGN) {
            self.bad_free(b, "is not a block of this pool (foreign pointer)");
        }
        const NO_HEADER: &str = "has no valid block header (a double free of a block already \
                                 merged, a foreign pointer or an overwritten header)";
        if poison::is_hidden(b.cast(), HEADER) {
            self.bad_free(b, NO_HEADER);
        }
        // SAFETY: for a pointer that honours `free_block`'s contract this is a live block's
        // header. For one that does not (best-effort detection of a broken contract), the
        // slot is at least inside our region, which stays mapped and zero-initialised for
        // the pool's life, so the read does not leave the region; on Windows an uncommitted
        // page there would fault rather than panic.
        let (magic, size) = unsafe { ((*b).magic, (*b).size) };
        match magic {
            MAGIC_USED => {}
            MAGIC_FREE | MAGIC_QUARANTINE => self.bad_free(b, "was already freed (double free)"),
            _ => self.bad_free(b, NO_HEADER),
        }
        if size < MIN_BLOCK || size % BLOCK_ALIGN != 0 || size > base + capacity - addr {
            self.bad_free(b, "has a corrupted size in its header");
        }
        size
    }

    /// Puts in-use block `b` back on the free lists, merged with its free neighbours.
    ///
    /// # Safety
    /// `b` is a block of this pool whose magic is `MAGIC_USED` and nobody uses it; the lock
    /// is held (`st`).
    unsafe fn release_locked(&self, st: &mut State, b: *mut MemoryBlock) {
        // SAFETY: per the contract; neighbours' headers lie inside the region and are only
        // touched under the lock.
        unsafe {
            let size = (*b).size;
            st.counters.in_use -= size;
            st.counters.blocks_in_use -= 1;
            st.counters.frees += 1;
            st.purge.released(size);

            let mut start = b;
            let mut total = size;
            if let Some(next) = self.physical_next(b)
                && (*next).magic == MAGIC_FREE
            {
                st.index.remove(next);
                total += (*next).size;
                (*next).magic = 0;
            }
            if (*b).flags.load(Relaxed) & PREV_FREE != 0 {
                let prev_size = footer(b);
                let prev = b.cast::<u8>().sub(prev_size).cast::<MemoryBlock>();
                debug_assert_eq!(
                    (*prev).magic,
                    MAGIC_FREE,
                    "pool '{}': bad boundary tag",
                    self.name
                );
                st.index.remove(prev);
                total += prev_size;
                (*b).magic = 0;
                start = prev;
            }
            (*start).magic = MAGIC_FREE;
            (*start).size = total;
            // The block before `start` is in use (free neighbours are always merged); the
            // range now holds pages the freed block may have touched.
            let flags = (*start).flags.load(Relaxed);
            (*start).flags.store((flags & !PREV_FREE) | DIRTY, Relaxed);
            write_footer(start);
            if let Some(after) = self.physical_next(start) {
                (*after).flags.fetch_or(PREV_FREE, Relaxed);
            }
            st.index.insert(start);
            // Headers of absorbed blocks are now plain free space.
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(start)).as_ptr(),
                total - HEADER - 8,
            );
        }
    }

    /// Runs a decommit pass if the purge policy says one is due.
    fn purge_if_due(&self, st: &mut State) -> usize {
        if st.purge.due() {
            self.decommit_dirty(st)
        } else {
            0
        }
    }

    /// One decommit pass: gives back the pages of every dirty free range and resets the
    /// release pressure. O(free ranges); under the lock, because a range must not be handed
    /// out while its pages are being dropped. Returns the number of ranges decommitted.
    fn decommit_dirty(&self, st: &mut State) -> usize {
        let mut count = 0;
        st.index.for_each(|b| {
            // SAFETY: a free block on our lists, under the lock. Its interior (between the
            // header and the footer, which stay committed) is dead memory of the region.
            unsafe {
                if (*b).flags.load(Relaxed) & DIRTY != 0 {
                    let size = (*b).size;
                    self.region
                        .decommit(b.cast::<u8>().add(HEADER), size - HEADER - 8);
                    (*b).flags.fetch_and(!DIRTY, Relaxed);
                    count += 1;
                }
            }
        });
        st.purge.passed();
        count
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn bad_free(&self, block: *mut MemoryBlock, what: &str) -> ! {
        panic!(
            "memory pool '{}': free_block({block:p}): the block {what}",
            self.name
        )
    }

    /// A snapshot of the pool's counters. O(1) (the largest free block is found as
    /// `allocate_block` would find it).
    ///
    /// ```
    /// use nebula_memory::MemoryPool;
    ///
    /// let pool = MemoryPool::new("doc", 1 << 20).unwrap();
    /// let s = pool.stats();
    /// assert_eq!((s.in_use, s.free, s.blocks_in_use), (0, 1 << 20, 0));
    /// assert_eq!(s.largest_free, (1 << 20) - 32);
    /// ```
    pub fn stats(&self) -> PoolStats {
        let st = self.state.lock();
        let capacity = self.region.len();
        let c = &st.counters;
        PoolStats {
            capacity,
            in_use: c.in_use,
            free: capacity - c.in_use,
            largest_free: st.index.largest().saturating_sub(HEADER),
            blocks_in_use: c.blocks_in_use,
            high_watermark: c.high_watermark,
            exhaustions: c.exhaustions,
            free_ranges: st.index.free_ranges,
            quarantined: st.quarantine.bytes,
            allocations: c.allocations,
            frees: c.frees,
        }
    }

    /// Sets the release pressure (bytes freed minus bytes acquired since the last decommit
    /// pass) above which free pages are given back to the OS once the purge delay has
    /// passed (default: capacity / 4, at most 64 MiB). After a peak, resident free memory
    /// falls to about this much. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_retain_limit(0);
    /// ```
    pub fn set_retain_limit(&self, bytes: usize) {
        self.state.lock().purge.retain_limit = bytes;
    }

    /// Sets how long release pressure must stay above the retain limit before a release or
    /// [`maintain`](MemoryPool::maintain) decommits (default 500 ms). A delay rides out
    /// free-then-reallocate churn (a level unloaded, the next one loaded) without faulting
    /// every page in again; `Duration::ZERO` decommits as soon as the limit is crossed.
    /// O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_purge_delay(std::time::Duration::ZERO);
    /// ```
    pub fn set_purge_delay(&self, delay: Duration) {
        self.state.lock().purge.delay = delay;
    }

    /// Gives free pages back to the OS if release pressure has stayed above the retain
    /// limit for the purge delay, and releases quarantined blocks whose wait is over.
    /// Cheap when nothing is due (a lock and a comparison); call it once per frame (see
    /// [`maintain_global_pools`](crate::maintain_global_pools)), since a steady arena
    /// workload makes no pool call that could run it. O(1), or O(free ranges) when a pass
    /// runs. Returns the number of ranges decommitted.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// assert_eq!(pool.maintain(), 0);
    /// ```
    pub fn maintain(&self) -> usize {
        let mut st = self.state.lock();
        st.quarantine.tick();
        while let Some(b) = st.quarantine.pop_expired() {
            // SAFETY: a quarantined block of this pool: dead, out of every list, its header
            // accessible; its data pages are made accessible again before it is released.
            unsafe {
                let size = (*b).size;
                let data = MemoryBlock::data_of(NonNull::new_unchecked(b)).as_ptr();
                self.region.protect(data, size - HEADER, true);
                (*b).magic = MAGIC_USED;
                self.release_locked(&mut st, b);
            }
        }
        self.purge_if_due(&mut st)
    }

    /// Debug aid after Unreal's "purgatory": blocks given back with
    /// [`free_block`](MemoryPool::free_block) stay out of circulation, their data pages
    /// inaccessible (`mprotect(PROT_NONE)`), until [`maintain`](MemoryPool::maintain) has
    /// been called `frames` more times (call it once per frame). A stale pointer into a
    /// block an arena gave back then faults at once instead of reading recycled memory.
    /// `0` (the default) turns it off; blocks already waiting are released by the next
    /// `maintain`. Whole pages only: the first and last partial page of a block stay
    /// accessible. On targets without page protection the blocks are only delayed. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_quarantine(4);
    /// let block = pool.allocate_block(64 * 1024).unwrap();
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// assert_eq!(pool.stats().quarantined, 64 * 1024 + 32);
    /// for _ in 0..4 {
    ///     pool.maintain();
    /// }
    /// assert_eq!(pool.stats().in_use, 0);
    /// ```
    pub fn set_quarantine(&self, frames: u32) {
        self.state.lock().quarantine.frames = frames;
    }

    /// Gives the pages of every free range that may hold resident memory back to the OS
    /// now (each range's header and footer stay). O(free ranges). Returns the number of
    /// ranges decommitted.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// assert_eq!(pool.trim(), 0); // nothing was ever touched
    /// let block = pool.allocate_block(4096).unwrap();
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// assert_eq!(pool.trim(), 1);
    /// ```
    pub fn trim(&self) -> usize {
        let mut st = self.state.lock();
        self.decommit_dirty(&mut st)
    }

    /// Whether `ptr` points into this pool's region. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// let block = pool.allocate_block(64).unwrap();
    /// assert!(pool.contains(block.as_ptr().cast()));
    /// assert!(!pool.contains(&0u8));
    /// # unsafe { pool.free_block(block) };
    /// ```
    pub fn contains(&self, ptr: *const u8) -> bool {
        let base = self.region.base().as_ptr() as usize;
        (base..base + self.region.len()).contains(&(ptr as usize))
    }
}

impl std::fmt::Debug for MemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPool")
            .field("name", &self.name)
            .field("base", &self.region.base())
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
        // Under ASan the region's shadow must be clean before the memory is unmapped and
        // possibly reused by the system allocator.
        // SAFETY: the whole region is ours and about to be released.
        unsafe { poison::expose(self.region.base().as_ptr(), self.region.len()) };
    }
}

/// Writes `b`'s size into its last 8 bytes (the boundary tag of a free block).
///
/// # Safety
/// `b` is a block of at least `MIN_BLOCK` bytes whose size field is set.
unsafe fn write_footer(b: *mut MemoryBlock) {
    // SAFETY: the last 8 bytes of the block are inside it (size >= MIN_BLOCK) and 8-aligned.
    unsafe {
        let size = (*b).size;
        let f = b.cast::<u8>().add(size - 8);
        poison::expose(f, 8);
        f.cast::<usize>().write(size);
    }
}

/// Reads the footer of the free block just before `b`.
///
/// # Safety
/// `b`'s `PREV_FREE` flag is set, so the 8 bytes before it are a free block's footer.
unsafe fn footer(b: *mut MemoryBlock) -> usize {
    // SAFETY: see the contract; the footer lies inside the region, before `b`.
    unsafe { b.cast::<u8>().sub(8).cast::<usize>().read() }
}
