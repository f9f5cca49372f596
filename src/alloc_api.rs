//! `allocator_api2::alloc::Allocator` for `&MemoryArena` and `&SharedArena`, so arena
//! memory backs `allocator_api2::vec::Vec`, `hashbrown::HashMap` and friends.
//!
//! Implemented for the reference only: a blanket `impl Allocator for &A` in allocator-api2
//! would clash with an impl on the arena itself, and an owned-arena impl would let
//! `vec.allocator_mut().reset()` free the vector's own buffer (bump-scope #137).
//!
//! `deallocate` of the top allocation pops it; `grow` and `shrink` of the top happen in
//! place while its block has room; everything else falls back to allocate-and-copy, with
//! the old bytes left for the next reset.
//!
//! **One call per resize, arena by value, result in registers.** `grow` and `shrink` are
//! an inlined call to one out-of-line function that takes the `&MemoryArena` itself (not
//! the `&&MemoryArena` the trait passes, which would pin the collection in memory) and
//! returns `Result<NonNull<[u8]>, AllocError>`, two registers. A vector pushed in a loop
//! (W3) then keeps its pointer, length and capacity in callee-saved registers and the
//! push is the bare bump pointer's 7 instructions. With `resize` inlined and
//! `MemoryArena::realloc` called from it (its 48-byte `Result` returned through the
//! stack), LLVM kept the vector's pointer in two registers and copied it twice per push:
//! W3 ran at 1.3x the floor. `examples/asm_probe.rs` (`w3_nebula`) shows the loop.

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use crate::arena::MemoryArena;
use crate::shared::SharedArena;

// SAFETY: memory handed out stays valid (and is never handed out twice) until the arena is
// reset, rewound or dropped, all of which need `&mut MemoryArena` or an `unsafe` call whose
// contract forbids it while allocations are alive, and an `&MemoryArena` held by a
// collection keeps `&mut` away. Copies of the `&MemoryArena` allocator are the same
// allocator. `grow`/`shrink` only work in place on the top allocation of the current
// block (`MemoryArena::realloc` checks), so an older allocation is never extended over a
// newer one.
unsafe impl Allocator for &MemoryArena<'_> {
    #[inline(always)]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match self.try_alloc(layout) {
            Ok(p) => Ok(NonNull::slice_from_raw_parts(p, layout.size())),
            Err(_) => Err(AllocError),
        }
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the collection gives the allocation up; popping it when it is the top is
        // exactly what `pop` allows, and any other pointer is a no-op.
        unsafe { self.pop(ptr, layout) };
    }

    #[inline(always)]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract (`ptr` live with `old`).
        unsafe { resize(self, ptr, old, new) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        let p = unsafe { resize(self, ptr, old, new)? };
        // SAFETY: the new allocation has `new.size() >= old.size()` bytes.
        unsafe {
            p.cast::<u8>()
                .as_ptr()
                .add(old.size())
                .write_bytes(0, new.size() - old.size())
        };
        Ok(p)
    }

    #[inline(always)]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { resize(self, ptr, old, new) }
    }
}

/// Grow or shrink: in place through `realloc` when the alignment allows, else a fresh
/// allocation and a copy. Out of line on purpose (see the module documentation).
///
/// # Safety
/// `ptr` is live in `arena` with layout `old`.
#[inline(never)]
unsafe fn resize(
    arena: &MemoryArena<'_>,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
) -> Result<NonNull<[u8]>, AllocError> {
    let p = if new.align() <= old.align() || (ptr.as_ptr() as usize).is_multiple_of(new.align()) {
        // `ptr` already satisfies the new alignment, so `realloc` may keep it.
        let keep = Layout::from_size_align(old.size(), old.align().max(new.align()))
            .map_err(|_| AllocError)?;
        // SAFETY: `ptr` is live with `old`'s size and is aligned to `keep.align()`.
        unsafe { arena.realloc(ptr, keep, new.size()) }.map_err(|_| AllocError)?
    } else {
        let q = arena.try_alloc(new).map_err(|_| AllocError)?;
        // SAFETY: `q` is fresh and disjoint from the live `ptr`; then the old one is dead.
        unsafe {
            q.as_ptr()
                .copy_from_nonoverlapping(ptr.as_ptr(), old.size().min(new.size()));
            arena.pop(ptr, old);
        }
        q
    };
    Ok(NonNull::slice_from_raw_parts(p, new.size()))
}

// SAFETY: every call works on the calling thread's part (`SharedArena::with_part`), a
// `MemoryArena` whose impl above is sound; memory handed out stays valid until
// `SharedArena::reset(&mut self)` or drop, which a collection borrowing `&SharedArena`
// keeps away. A pointer allocated by another thread is never the top of the calling
// thread's part (`is_top` checks the part's own window), so `deallocate` leaves it alone
// and `grow`/`shrink` copy it instead of extending it over someone else's data.
unsafe impl Allocator for &SharedArena<'_> {
    #[inline(always)]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.with_part(|part| part.allocate(layout))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from the caller's contract.
        self.with_part(|part| unsafe { part.deallocate(ptr, layout) })
    }

    #[inline(always)]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { resize_shared(self, ptr, old, new) }
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        self.with_part(|part| unsafe { part.grow_zeroed(ptr, old, new) })
    }

    #[inline(always)]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { resize_shared(self, ptr, old, new) }
    }
}

/// `resize` on the calling thread's part, the part lookup included: one out-of-line call
/// per resize, as for `&MemoryArena`.
///
/// # Safety
/// `ptr` is live in `arena` with layout `old`.
#[inline(never)]
unsafe fn resize_shared(
    arena: &SharedArena<'_>,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: forwarded from the caller; a pointer of another thread's part is not the
    // top of this one, so it is copied, never extended.
    arena.with_part(|part| unsafe { resize(part, ptr, old, new) })
}
