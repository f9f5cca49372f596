//! Boundary tags: a free block repeats its size in its last 8 bytes (the footer), so the
//! block after it finds it in O(1) when it is freed (its `PREV_FREE` flag says the footer
//! is there). A block in use has no footer: its owner's data runs to its end.

use crate::block::MemoryBlock;
use crate::poison;

/// Writes `b`'s size into its last 8 bytes (the boundary tag of a free block).
///
/// # Safety
/// `b` is a block of at least `MIN_BLOCK` bytes whose size field is set.
pub(super) unsafe fn write_footer(b: *mut MemoryBlock) {
    // SAFETY: the last 8 bytes of the block are inside it (size >= MIN_BLOCK) and 8-aligned.
    unsafe {
        let size = (*b).size;
        let f = b.cast::<u8>().add(size - 8);
        poison::expose(f, 8);
        f.cast::<usize>().write(size);
    }
}

/// The size of the free block just before `b`, read from its footer.
///
/// # Safety
/// `b`'s `PREV_FREE` flag is set, so the 8 bytes before it are a free block's footer.
pub(super) unsafe fn previous_size(b: *mut MemoryBlock) -> usize {
    // SAFETY: see the contract; the footer lies inside the region, before `b`.
    unsafe { b.cast::<u8>().sub(8).cast::<usize>().read() }
}
