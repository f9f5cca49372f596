//! `MemoryPool`: one reserved region split into blocks by a TLSF free structure.
//!
//! The seeds ask for first-fit with splitting over a free list. That is O(n) per acquire
//! and per release once the pool fragments, which is exactly when a game can least afford
//! it. We keep the seed's contract (split what is too large, coalesce what is freed) and
//! replace the search with Two-Level Segregated Fit:
//!
//! - Free blocks live in size classes: a first level per power of two and 32 linear
//!   subdivisions per level ([`SL_COUNT`]). One bit per non-empty class in two bitmaps.
//! - Acquire rounds the request up to the next class boundary, so any block in a class found
//!   by two `trailing_zeros` is large enough (good fit, O(1)). When nothing is found the
//!   request's own class, the one place a fitting block may hide, is scanned, at most
//!   [`MAX_SCAN`] entries: still O(1), and the pool refuses only when no block it can see
//!   fits.
//! - Release merges the block with free physical neighbours at once (boundary tags, see
//!   [`crate::block`]), so two free blocks are never adjacent and releasing everything
//!   restores the single initial range.
//!
//! Physical memory: the region is reserved and pages are committed as blocks are handed
//! out. Free ranges that may hold resident pages carry a `DIRTY` flag. When releases have
//! outrun acquisitions by more than the retain limit and stayed so for the purge delay
//! (mimalloc's answer to free-then-reallocate churn), one pass decommits every dirty free
//! range, so RSS falls after a peak while a steady workload keeps its pages.
//! [`MemoryPool::trim`] runs that pass at once; [`MemoryPool::maintain`] runs it if due.

use std::collections::VecDeque;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::block::{
    BLOCK_ALIGN, DIRTY, HEADER, MAGIC_FREE, MAGIC_QUARANTINE, MAGIC_USED, MIN_BLOCK, MemoryBlock,
    PREV_FREE, Word,
};
use crate::error::PoolError;
use crate::poison;
use crate::vm::Region;

/// log2 of the number of second-level classes per power of two.
const SL_LOG2: u32 = 5;
/// Second-level classes per power of two: the rounding waste is at most 1/32.
const SL_COUNT: usize = 1 << SL_LOG2;
/// Sizes below this are all in first-level class 0, linearly by 16 bytes.
const SMALL: usize = SL_COUNT * BLOCK_ALIGN;
/// First-level classes: enough for any `isize::MAX` region.
const FL_COUNT: usize = (usize::BITS - SMALL.trailing_zeros() + 1) as usize;
/// How many blocks of the request's own class the fallback search looks at.
pub(crate) const MAX_SCAN: usize = 64;
/// Default retain limit: capacity / 4, at most this.
const DEFAULT_RETAIN_MAX: usize = 64 << 20;
/// Default purge delay: how long release pressure must last before pages are given back.
const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);

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
/// // SAFETY: the block is ours until we free it.
/// let data = unsafe { block.as_ref() }.data();
/// // SAFETY: data() points at >= 64 KiB of writable memory.
/// unsafe { data.as_ptr().write_bytes(7, 64 * 1024) };
/// // SAFETY: from this pool, not used afterwards.
/// unsafe { pool.free_block(block) };
/// assert_eq!(pool.stats().in_use, 0);
/// ```
pub struct MemoryPool {
    name: &'static str,
    region: Region,
    state: Mutex<Box<Tlsf>>,
}

// SAFETY: the region is owned by the pool; every access to the free structure and to
// the headers of free blocks happens under `state`'s lock. Blocks in use belong to whoever
// allocated them, not to the pool.
unsafe impl Send for MemoryPool {}
// SAFETY: as above: shared access goes through the mutex.
unsafe impl Sync for MemoryPool {}

struct Tlsf {
    fl_bitmap: u64,
    sl_bitmap: [u32; FL_COUNT],
    heads: [[*mut MemoryBlock; SL_COUNT]; FL_COUNT],
    in_use: usize,
    blocks_in_use: usize,
    high_watermark: usize,
    exhaustions: u64,
    free_ranges: usize,
    allocations: u64,
    frees: u64,
    /// Release pressure: bytes freed minus bytes acquired since the last decommit pass
    /// (saturating at 0).
    dirty_free: usize,
    retain_limit: usize,
    purge_delay: Duration,
    /// When `dirty_free` last rose above `retain_limit` (None while it is below).
    pressure_since: Option<Instant>,
    /// Use-after-free trap: freed blocks wait this many `maintain` calls (0: off).
    quarantine_frames: u32,
    /// Freed blocks waiting, with the `epoch` at which they were freed.
    quarantine: VecDeque<(*mut MemoryBlock, u64)>,
    /// Bytes of the blocks in `quarantine`.
    quarantined: usize,
    /// `maintain` calls so far.
    epoch: u64,
}

/// Size class (first level, second level) of a block of `size` bytes.
#[inline]
fn mapping(size: usize) -> (usize, usize) {
    if size < SMALL {
        (0, size / BLOCK_ALIGN)
    } else {
        let msb = usize::BITS - 1 - size.leading_zeros();
        let fl = msb - SMALL.trailing_zeros() + 1;
        let sl = (size >> (msb - SL_LOG2)) & (SL_COUNT - 1);
        (fl as usize, sl)
    }
}

/// `size` rounded up to the next class boundary, so every block of its class fits it.
#[inline]
fn round_to_class(size: usize) -> usize {
    if size < SMALL {
        size
    } else {
        let msb = usize::BITS - 1 - size.leading_zeros();
        let step = (1usize << (msb - SL_LOG2)) - 1;
        // Sizes are at most `isize::MAX`, so this cannot overflow.
        (size + step) & !step
    }
}

impl Tlsf {
    /// # Safety
    /// `block` is a free block of this pool with `magic`, `size` and footer written, and is
    /// on no list.
    unsafe fn insert(&mut self, block: *mut MemoryBlock) {
        // SAFETY: the caller hands us a valid free header; list neighbours are valid free
        // headers of this pool, accessed under the pool's lock.
        let (fl, sl) = mapping(unsafe { (*block).size });
        let head = self.heads[fl][sl];
        // SAFETY: as above.
        unsafe {
            (*block).next = head;
            (*block).word = Word {
                prev_free: ptr::null_mut(),
            };
            if !head.is_null() {
                (*head).word = Word { prev_free: block };
            }
        }
        self.heads[fl][sl] = block;
        self.fl_bitmap |= 1 << fl;
        self.sl_bitmap[fl] |= 1 << sl;
        self.free_ranges += 1;
    }

    /// # Safety
    /// `block` is on this pool's free lists.
    unsafe fn remove(&mut self, block: *mut MemoryBlock) {
        // SAFETY: `block` and its list neighbours are valid free headers, under the lock.
        unsafe {
            let (fl, sl) = mapping((*block).size);
            let next = (*block).next;
            let prev = (*block).word.prev_free;
            if !next.is_null() {
                (*next).word = Word { prev_free: prev };
            }
            if prev.is_null() {
                debug_assert_eq!(self.heads[fl][sl], block);
                self.heads[fl][sl] = next;
                if next.is_null() {
                    self.sl_bitmap[fl] &= !(1 << sl);
                    if self.sl_bitmap[fl] == 0 {
                        self.fl_bitmap &= !(1 << fl);
                    }
                }
            } else {
                (*prev).next = next;
            }
        }
        self.free_ranges -= 1;
    }

    /// The first block of a non-empty class at or above `(fl, sl)`.
    fn find_from(&self, fl: usize, sl: usize) -> *mut MemoryBlock {
        let sl_map = self.sl_bitmap[fl] & (!0u32).checked_shl(sl as u32).unwrap_or(0);
        let (fl, sl_map) = if sl_map != 0 {
            (fl, sl_map)
        } else {
            let fl_map = self.fl_bitmap & (!0u64).checked_shl(fl as u32 + 1).unwrap_or(0);
            if fl_map == 0 {
                return ptr::null_mut();
            }
            let fl = fl_map.trailing_zeros() as usize;
            (fl, self.sl_bitmap[fl])
        };
        self.heads[fl][sl_map.trailing_zeros() as usize]
    }

    /// A free block of at least `size` bytes, or null. O(1): two bitmap searches, then at
    /// most `MAX_SCAN` blocks of `size`'s own class.
    fn find(&self, size: usize) -> *mut MemoryBlock {
        let rounded = round_to_class(size);
        if rounded <= isize::MAX as usize {
            let (fl, sl) = mapping(rounded);
            if fl < FL_COUNT {
                let found = self.find_from(fl, sl);
                if !found.is_null() {
                    return found;
                }
            }
        }
        let (fl, sl) = mapping(size);
        let mut b = self.heads[fl][sl];
        for _ in 0..MAX_SCAN {
            if b.is_null() {
                break;
            }
            // SAFETY: list members are valid free headers (under the lock).
            unsafe {
                if (*b).size >= size {
                    return b;
                }
                b = (*b).next;
            }
        }
        ptr::null_mut()
    }

    /// Total size of the largest block `find` can return: the best of the first `MAX_SCAN`
    /// blocks of the highest non-empty class.
    fn largest(&self) -> usize {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmap[fl].leading_zeros() as usize;
        let mut b = self.heads[fl][sl];
        let mut best = 0;
        for _ in 0..MAX_SCAN {
            if b.is_null() {
                break;
            }
            // SAFETY: list members are valid free headers (under the lock).
            unsafe {
                best = best.max((*b).size);
                b = (*b).next;
            }
        }
        best
    }
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
        let region = match Region::reserve(capacity) {
            Some(Ok(region)) => region,
            Some(Err(e)) => {
                return Err(PoolError::ReserveFailed {
                    pool: name,
                    capacity,
                    os_code: e.raw_os_error(),
                });
            }
            None => {
                return Err(PoolError::ReserveFailed {
                    pool: name,
                    capacity,
                    os_code: None,
                });
            }
        };
        let len = region.len();
        let base = region.base().as_ptr();
        // SAFETY: a page is at least 4 KiB, so the first header and the last 8 bytes are
        // inside the fresh region.
        unsafe {
            if !region.commit(base, HEADER) || !region.commit(base.add(len - 8), 8) {
                return Err(PoolError::ReserveFailed {
                    pool: name,
                    capacity,
                    os_code: None,
                });
            }
        }
        let mut tlsf = Box::new(Tlsf {
            fl_bitmap: 0,
            sl_bitmap: [0; FL_COUNT],
            heads: [[ptr::null_mut(); SL_COUNT]; FL_COUNT],
            in_use: 0,
            blocks_in_use: 0,
            high_watermark: 0,
            exhaustions: 0,
            free_ranges: 0,
            allocations: 0,
            frees: 0,
            dirty_free: 0,
            retain_limit: (len / 4).min(DEFAULT_RETAIN_MAX),
            purge_delay: DEFAULT_PURGE_DELAY,
            pressure_since: None,
            quarantine_frames: 0,
            quarantine: VecDeque::new(),
            quarantined: 0,
            epoch: 0,
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
            tlsf.insert(first);
            // Nobody may touch free space until it is handed out.
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(first)).as_ptr(),
                len - HEADER - 8,
            );
        }
        Ok(MemoryPool {
            name,
            region,
            state: Mutex::new(tlsf),
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
        self.allocate(min_usable, true)
    }

    /// `allocate_block` for a tentative request that has a fallback (an arena asking for a
    /// grown block before settling for the size it needs): a refusal is neither counted in
    /// `exhaustions` nor reported by a WARN event.
    pub(crate) fn allocate_block_quietly(
        &self,
        min_usable: usize,
    ) -> Result<NonNull<MemoryBlock>, PoolError> {
        self.allocate(min_usable, false)
    }

    fn allocate(&self, min_usable: usize, report: bool) -> Result<NonNull<MemoryBlock>, PoolError> {
        let pool = self.name;
        if min_usable == 0 {
            return Err(PoolError::ZeroSize { pool });
        }
        let capacity = self.region.len();
        let max_usable = capacity - HEADER;
        let size = match min_usable.checked_next_multiple_of(BLOCK_ALIGN) {
            Some(n) if n <= max_usable => (n + HEADER).max(MIN_BLOCK),
            _ => {
                return Err(PoolError::TooLarge {
                    pool,
                    requested: min_usable,
                    max_usable,
                });
            }
        };

        let mut st = self.state.lock();
        let block = st.find(size);
        if block.is_null() {
            let (free, largest_free) = (capacity - st.in_use, st.largest().saturating_sub(HEADER));
            if !report {
                return Err(PoolError::Exhausted {
                    pool,
                    requested: min_usable,
                    free,
                    largest_free,
                });
            }
            st.exhaustions += 1;
            drop(st);
            return Err(self.exhausted(min_usable, free, largest_free));
        }
        // SAFETY: `block` is a free block of this region found under the lock; every header
        // we read or write below lies inside the region, and we hold the lock.
        let size = unsafe {
            st.remove(block);
            let total = (*block).size;
            let end = block.cast::<u8>().add(total);
            let region_end = self.region.base().as_ptr().add(capacity);
            let rest = total - size;
            let (size, rest) = if rest >= MIN_BLOCK {
                (size, rest)
            } else {
                (total, 0)
            };
            // Commit the block and, when split, the header of the remainder after it.
            let commit_len = if rest > 0 { size + HEADER } else { size };
            if !self.region.commit(block.cast(), commit_len) {
                st.insert(block);
                drop(st);
                return Err(PoolError::CommitFailed {
                    pool,
                    requested: min_usable,
                });
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
                st.insert(tail);
                (*block).size = size;
            } else if end < region_end {
                (*end.cast::<MemoryBlock>())
                    .flags
                    .fetch_and(!PREV_FREE, Relaxed);
            }
            (*block).magic = MAGIC_USED;
            (*block).next = ptr::null_mut();
            (*block).word = Word { used: 0 };
            size
        };
        st.in_use += size;
        st.blocks_in_use += 1;
        st.allocations += 1;
        st.high_watermark = st.high_watermark.max(st.in_use);
        st.dirty_free = st.dirty_free.saturating_sub(size);
        if st.dirty_free <= st.retain_limit {
            st.pressure_since = None;
        }
        drop(st);

        // SAFETY: the block is ours now; its data spans `size - HEADER` bytes.
        let block = unsafe { NonNull::new_unchecked(block) };
        // SAFETY: the usable bytes are inside the block we just took off the free lists.
        unsafe { poison::hand_out(MemoryBlock::data_of(block).as_ptr(), size - HEADER) };
        Ok(block)
    }

    #[cold]
    fn exhausted(&self, requested: usize, free: usize, largest_free: usize) -> PoolError {
        let pool = self.name;
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
        PoolError::Exhausted {
            pool,
            requested,
            free,
            largest_free,
        }
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
        let base = self.region.base().as_ptr() as usize;
        let addr = b as usize;
        let capacity = self.region.len();
        if addr < base || addr > base + capacity - MIN_BLOCK || !addr.is_multiple_of(BLOCK_ALIGN) {
            self.bad_free(b, "is not a block of this pool (foreign pointer)");
        }
        if poison::is_hidden(b.cast(), HEADER) {
            self.bad_free(
                b,
                "has no valid block header (a double free of a block already merged, a foreign pointer or an overwritten header)",
            );
        }
        // SAFETY: for a pointer that honours the contract this is a live block's header. For
        // one that does not (best-effort detection of a broken contract), the slot is at
        // least inside our region, which stays mapped and zero-initialised for the pool's
        // life, so the read does not leave the region; on Windows an uncommitted page
        // there would fault rather than panic.
        let (magic, size) = unsafe { ((*b).magic, (*b).size) };
        match magic {
            MAGIC_USED => {}
            MAGIC_FREE | MAGIC_QUARANTINE => self.bad_free(b, "was already freed (double free)"),
            _ => self.bad_free(
                b,
                "has no valid block header (a double free of a block already merged, a foreign pointer or an overwritten header)",
            ),
        }
        if size < MIN_BLOCK || size % BLOCK_ALIGN != 0 || size > base + capacity - addr {
            self.bad_free(b, "has a corrupted size in its header");
        }
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
            if st.quarantine_frames > 0 {
                // Purgatory: keep the block out of circulation, its pages inaccessible,
                // until `maintain` has been called `quarantine_frames` times.
                (*b).magic = MAGIC_QUARANTINE;
                let data = MemoryBlock::data_of(block).as_ptr();
                self.region.protect(data, size - HEADER, false);
                let epoch = st.epoch;
                st.quarantine.push_back((b, epoch));
                st.quarantined += size;
                return;
            }
            self.release_locked(&mut st, b);
        }
        self.purge_if_due(&mut st);
    }

    /// Puts in-use block `b` back on the free lists, merged with its free neighbours.
    ///
    /// # Safety
    /// `b` is a block of this pool whose magic is `MAGIC_USED` and nobody uses it; the lock
    /// is held (`st`).
    unsafe fn release_locked(&self, st: &mut Tlsf, b: *mut MemoryBlock) {
        let base = self.region.base().as_ptr() as usize;
        let capacity = self.region.len();
        // SAFETY: per the contract; neighbours' headers lie inside the region and are only
        // touched under the lock.
        unsafe {
            let size = (*b).size;
            st.in_use -= size;
            st.blocks_in_use -= 1;
            st.frees += 1;
            st.dirty_free = st.dirty_free.saturating_add(size);

            let region_end = base + capacity;
            let mut start = b;
            let mut total = size;
            let next = b.cast::<u8>().add(size).cast::<MemoryBlock>();
            if (next as usize) < region_end && (*next).magic == MAGIC_FREE {
                st.remove(next);
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
                st.remove(prev);
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
            let after = start.cast::<u8>().add(total);
            if (after as usize) < region_end {
                (*after.cast::<MemoryBlock>())
                    .flags
                    .fetch_or(PREV_FREE, Relaxed);
            }
            st.insert(start);
            // Headers of absorbed blocks are now plain free space.
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(start)).as_ptr(),
                total - HEADER - 8,
            );
        }
    }

    /// Runs a decommit pass if release pressure has exceeded the retain limit for at least
    /// the purge delay; starts the clock when the pressure first crosses the limit.
    fn purge_if_due(&self, st: &mut Tlsf) -> usize {
        if st.dirty_free <= st.retain_limit {
            st.pressure_since = None;
            return 0;
        }
        let now = Instant::now();
        match st.pressure_since {
            Some(since) if now.duration_since(since) >= st.purge_delay => self.decommit_dirty(st),
            Some(_) => 0,
            None if st.purge_delay.is_zero() => self.decommit_dirty(st),
            None => {
                st.pressure_since = Some(now);
                0
            }
        }
    }

    /// One decommit pass: gives back the pages of every dirty free range and resets the
    /// release pressure. O(free ranges); under the lock, because a range must not be handed
    /// out while its pages are being dropped. Returns the number of ranges decommitted.
    fn decommit_dirty(&self, st: &mut Tlsf) -> usize {
        let mut count = 0;
        for fl in 0..FL_COUNT {
            if st.sl_bitmap[fl] == 0 {
                continue;
            }
            for sl in 0..SL_COUNT {
                let mut b = st.heads[fl][sl];
                while !b.is_null() {
                    // SAFETY: a free block on our lists, under the lock.
                    unsafe {
                        if (*b).flags.load(Relaxed) & DIRTY != 0 {
                            self.decommit_free(b);
                            (*b).flags.fetch_and(!DIRTY, Relaxed);
                            count += 1;
                        }
                        b = (*b).next;
                    }
                }
            }
        }
        st.dirty_free = 0;
        st.pressure_since = None;
        count
    }

    /// Gives the whole pages inside free block `b` (between its header and its footer) back
    /// to the OS.
    ///
    /// # Safety
    /// `b` is a free block of this pool and the lock is held.
    unsafe fn decommit_free(&self, b: *mut MemoryBlock) {
        // SAFETY: the interior of a free block is dead memory inside the region; its header
        // and footer (outside the range) stay committed.
        unsafe {
            let size = (*b).size;
            self.region
                .decommit(b.cast::<u8>().add(HEADER), size - HEADER - 8);
        }
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
        PoolStats {
            capacity,
            in_use: st.in_use,
            free: capacity - st.in_use,
            largest_free: st.largest().saturating_sub(HEADER),
            blocks_in_use: st.blocks_in_use,
            high_watermark: st.high_watermark,
            exhaustions: st.exhaustions,
            free_ranges: st.free_ranges,
            quarantined: st.quarantined,
            allocations: st.allocations,
            frees: st.frees,
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
        self.state.lock().retain_limit = bytes;
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
        self.state.lock().purge_delay = delay;
    }

    /// Gives free pages back to the OS if release pressure has stayed above the retain
    /// limit for the purge delay. Cheap when nothing is due (a lock and a comparison); call
    /// it once per frame (see [`maintain_global_pools`](crate::maintain_global_pools)),
    /// since a steady arena workload makes no pool call that could run it. O(1), or
    /// O(free ranges) when a pass runs. Returns the number of ranges decommitted.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// assert_eq!(pool.maintain(), 0);
    /// ```
    pub fn maintain(&self) -> usize {
        let mut st = self.state.lock();
        st.epoch += 1;
        while let Some(&(b, freed_at)) = st.quarantine.front() {
            if st.epoch - freed_at < u64::from(st.quarantine_frames) {
                break;
            }
            st.quarantine.pop_front();
            // SAFETY: a quarantined block of this pool: dead, out of every list, its header
            // accessible; its data pages are made accessible again before it is released.
            unsafe {
                let size = (*b).size;
                st.quarantined -= size;
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
        self.state.lock().quarantine_frames = frames;
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
        let st = self.state.get_mut();
        if st.blocks_in_use != 0 {
            tracing::debug!(
                pool = self.name,
                blocks = st.blocks_in_use,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_rounding_fits() {
        let mut last = (0, 0);
        // Miri runs this too, on a range small enough for it.
        let top = if cfg!(miri) { 1 << 14 } else { 1 << 22 };
        for size in (MIN_BLOCK..top).step_by(BLOCK_ALIGN) {
            let c = mapping(size);
            assert!(c >= last, "class order broke at {size}");
            last = c;
            let r = round_to_class(size);
            assert!(r >= size);
            // Every block of r's class is >= r's class start >= size.
            let (fl, sl) = mapping(r);
            if fl > 0 {
                let msb = fl as u32 + SMALL.trailing_zeros() - 1;
                let class_start = (1usize << msb) + (sl << (msb - SL_LOG2));
                assert!(
                    class_start >= size,
                    "size {size} rounded to class starting {class_start}"
                );
            }
        }
        assert!(mapping(isize::MAX as usize).0 < FL_COUNT);
    }
}
