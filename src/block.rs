//! The block header: the unit a pool hands to an arena.
//!
//! Every block, free or in use, starts with a 32-byte [`MemoryBlock`] header, 16-byte
//! aligned, and its usable bytes follow at once, so `data()` is 16-byte aligned too.
//!
//! ```text
//!  offset  in use (owned by an arena)        free (owned by the pool)
//!  0       magic: u32 = MAGIC_USED,          magic: u32 = MAGIC_FREE,
//!            or MAGIC_HEAP (heap fallback)     or MAGIC_QUARANTINE
//!  4       flags: u32 (PREV_FREE)            flags: u32 (PREV_FREE, DIRTY)
//!  8       size: usize (total, header incl.) size: usize
//!  16      next: arena chain                 next: next free block in its size class
//!  24      used: bytes the arena used        prev: previous free block in its size class
//!  32      data ...                          ... footer: size (last 8 bytes)
//! ```
//!
//! Ownership of the fields: `magic`, `flags` and `size` belong to the pool and change only
//! under its lock; while a block is in use its owner (an arena) may write `next` and `used`,
//! never the rest. `flags` is atomic because the pool sets `PREV_FREE` on a block's
//! successor, which may be in use by an arena on another thread at that moment.
//!
//! The footer of a free block and the `PREV_FREE` flag of the block after it let the pool
//! find a free physical predecessor in O(1) when coalescing (boundary tags), without a
//! "previous block" pointer in every header.

use std::alloc::{GlobalAlloc, System};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// Magic of a block handed out by a pool.
pub(crate) const MAGIC_USED: u32 = 0x4E42_5553; // "NBUS"
/// Magic of a block on a pool's free lists.
pub(crate) const MAGIC_FREE: u32 = 0x4E42_4652; // "NBFR"
/// Magic of a block an arena took from the system heap when its pool ran dry.
pub(crate) const MAGIC_HEAP: u32 = 0x4E42_4850; // "NBHP"
/// Magic of a freed block held back by a pool's quarantine (use-after-free trap).
pub(crate) const MAGIC_QUARANTINE: u32 = 0x4E42_5154; // "NBQT"
/// Magic of the sentinel header that ends a segment of a segmented pool (never handed out).
pub(crate) const MAGIC_END: u32 = 0x4E42_454E; // "NBEN"

/// Set on a block whose physical predecessor is free (its footer is then valid).
pub(crate) const PREV_FREE: u32 = 1;
/// Set on a free block that may hold resident pages (it was in use since it was last
/// decommitted). Meaningless on a block in use.
pub(crate) const DIRTY: u32 = 2;

/// Alignment of every block and of every block's data.
pub(crate) const BLOCK_ALIGN: usize = 16;
/// Size of the header in front of every block's data.
pub(crate) const HEADER: usize = size_of::<MemoryBlock>();
/// Smallest block: a header plus 16 usable bytes (which a free block needs for its footer).
pub(crate) const MIN_BLOCK: usize = HEADER + BLOCK_ALIGN;

/// Free-list link or arena fill level, depending on who owns the block.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) union Word {
    /// In use: bytes of `data()` the owning arena has handed out (kept up to date lazily).
    pub(crate) used: usize,
    /// Free: the previous block in the same size class.
    pub(crate) prev_free: *mut MemoryBlock,
}

/// The header of a block of pool memory, followed by its usable bytes.
///
/// Blocks are created by [`MemoryPool::allocate_block`](crate::MemoryPool::allocate_block)
/// and given back with [`MemoryPool::free_block`](crate::MemoryPool::free_block); you only
/// ever see them behind a `NonNull<MemoryBlock>`. The header is 32 bytes, 16-byte aligned,
/// and holds a magic number (checked whenever the block changes hands), flags, the block's
/// total size, a `next` link (the arena's chain) and the arena's fill level.
///
/// ```
/// use nebula_memory::MemoryPool;
///
/// let pool = MemoryPool::new("doc", 1 << 20).unwrap();
/// let block = pool.allocate_block(1000).unwrap();
/// // SAFETY: the block is live until `free_block` below.
/// let header = unsafe { block.as_ref() };
/// assert!(header.capacity() >= 1000);
/// assert_eq!(header.data().as_ptr() as usize % 16, 0);
/// // SAFETY: the block came from this pool and is not used afterwards.
/// unsafe { pool.free_block(block) };
/// ```
#[repr(C, align(16))]
pub struct MemoryBlock {
    pub(crate) magic: u32,
    /// `PREV_FREE` and `DIRTY`; atomic because the pool updates it under its lock while the
    /// block may be in use (and borrowed) elsewhere.
    pub(crate) flags: AtomicU32,
    pub(crate) size: usize,
    pub(crate) next: *mut MemoryBlock,
    pub(crate) word: Word,
}

const _: () = assert!(size_of::<MemoryBlock>() == 32 && align_of::<MemoryBlock>() == 16);

impl MemoryBlock {
    /// The address of the first usable byte, 16-byte aligned. O(1).
    ///
    /// **For reading the address only** (comparisons, alignment checks, logging): the
    /// pointer is derived from `&self`, a reference to the 32-byte header, so it carries
    /// no permission to read or write the block's data. To use the data, take the pointer
    /// from the block pointer itself with [`MemoryBlock::data_of`].
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// let block = pool.allocate_block(256).unwrap();
    /// // SAFETY: the block is live until `free_block` below.
    /// let addr = unsafe { block.as_ref() }.data();
    /// assert_eq!(addr, nebula_memory::MemoryBlock::data_of(block));
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// ```
    #[inline]
    pub fn data(&self) -> NonNull<u8> {
        Self::data_of(NonNull::from(self))
    }

    /// The number of usable bytes after the header: at least the `min_usable` the block was
    /// asked for, a multiple of 16. O(1).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.size - HEADER
    }

    /// The block's total size in the pool, header included. O(1).
    #[inline]
    pub fn total_size(&self) -> usize {
        self.size
    }

    /// The first usable byte of `block`, computed from the block pointer itself, so it
    /// keeps the block pointer's permission to the whole block: the pointer to write a
    /// block's data through. O(1).
    ///
    /// Safe for any pointer: the address is computed without assuming that `block` points
    /// at a block (wrapping arithmetic), so a dangling or foreign pointer gives a
    /// meaningless address, never undefined behaviour; using that address is the caller's
    /// `unsafe` business.
    ///
    /// # Panics
    /// If `block` lies in the last 32 bytes of the address space (where no block can be).
    ///
    /// ```
    /// use nebula_memory::{MemoryBlock, MemoryPool};
    ///
    /// let pool = MemoryPool::new("doc", 1 << 20).unwrap();
    /// let block = pool.allocate_block(64 * 1024).unwrap();
    /// let data = MemoryBlock::data_of(block);
    /// // SAFETY: the block's usable bytes (at least 64 KiB) are ours until `free_block`.
    /// unsafe { data.as_ptr().write_bytes(7, 64 * 1024) };
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// ```
    #[inline]
    pub fn data_of(block: NonNull<MemoryBlock>) -> NonNull<u8> {
        block.cast::<u8>().map_addr(|addr| {
            addr.checked_add(HEADER)
                .expect("MemoryBlock::data_of: a pointer at the top of the address space")
        })
    }
}

impl MemoryBlock {
    /// A block taken from the system heap, laid out like a pool block (magic
    /// `MAGIC_HEAP`), for an arena whose pool ran dry. `None` if the size overflows or the
    /// heap refuses. Its usable bytes are uninitialised.
    ///
    /// From the system allocator itself, not the global one: with a
    /// [`TrackingAllocator`](crate::TrackingAllocator) installed, the block is counted once,
    /// as its arena's tag's `heap_held`, not a second time as heap of whatever scope is
    /// current.
    pub(crate) fn heap(min_usable: usize) -> Option<NonNull<MemoryBlock>> {
        let size = min_usable
            .checked_next_multiple_of(BLOCK_ALIGN)?
            .checked_add(HEADER)?;
        let layout = std::alloc::Layout::from_size_align(size, BLOCK_ALIGN).ok()?;
        // SAFETY: `size >= HEADER > 0`.
        let block = NonNull::new(unsafe { System.alloc(layout) })?.cast::<MemoryBlock>();
        // SAFETY: fresh heap memory of `size >= HEADER` bytes, 16-aligned.
        unsafe {
            block.write(MemoryBlock {
                magic: MAGIC_HEAP,
                flags: AtomicU32::new(0),
                size,
                next: std::ptr::null_mut(),
                word: Word { used: 0 },
            })
        };
        Some(block)
    }

    /// Whether this block came from the system heap ([`MemoryBlock::heap`]).
    pub(crate) fn is_heap(&self) -> bool {
        self.magic == MAGIC_HEAP
    }

    /// Gives a heap block back to the system heap.
    ///
    /// # Safety
    /// `block` came from [`MemoryBlock::heap`] and nothing in it is used any more.
    pub(crate) unsafe fn free_heap(block: NonNull<MemoryBlock>) {
        // SAFETY: per the contract the header is valid; `size` and the alignment are the
        // layout `heap` allocated with. The heap gets its memory back unpoisoned.
        unsafe {
            let size = block.as_ref().size;
            crate::poison::expose(block.as_ptr().cast(), size);
            System.dealloc(
                block.as_ptr().cast(),
                std::alloc::Layout::from_size_align_unchecked(size, BLOCK_ALIGN),
            );
        }
    }
}

impl std::fmt::Debug for MemoryBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.magic {
            MAGIC_USED => "in use",
            MAGIC_FREE => "free",
            MAGIC_HEAP => "heap fallback",
            MAGIC_QUARANTINE => "quarantined",
            MAGIC_END => "segment end",
            _ => "corrupt",
        };
        f.debug_struct("MemoryBlock")
            .field("at", &(self as *const Self))
            .field("state", &state)
            .field("total_size", &self.size)
            .field("capacity", &self.size.saturating_sub(HEADER))
            .finish()
    }
}
