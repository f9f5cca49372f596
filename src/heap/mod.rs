//! Heap tracking: a global allocator that charges every heap allocation to the calling
//! thread's ledger tag, so the ledger covers the heap as well as the arenas.
//!
//! **Who owns a byte.** The tag current on the allocating thread (a
//! [`ledger::scope`](crate::ledger::scope) guard sets it; outside every scope it is the
//! untagged line). A free must credit that same tag whichever thread frees it and whatever
//! scope is current then, so every allocation carries its tag's id in a **trailer**: two
//! bytes right after the caller's bytes (`ptr + size`, written unaligned), so the pointer,
//! the alignment and the caller's bytes are exactly the inner allocator's. A `realloc`
//! reads the trailer first and writes it at the new end: it stays with its tag. The cost
//! is two bytes per allocation (an inner size class up now and then), and nothing else in
//! memory: no header, no side table.
//!
//! **What the charge path may do.** It runs inside `alloc`, so it never allocates, never
//! takes a lock another allocation could hold, never runs user code, and never fails: the
//! thread's tag and shard sit in a `const` thread-local without a destructor (readable
//! until the thread's very end), and tag ids are given out when a scope is made, outside
//! every allocation. The counters are sharded per thread ([`counters`]), so the charge is
//! a plain load and store on memory no other thread writes.
//!
//! **Off.** [`ledger::set_heap_tracking(false)`](crate::ledger::set_heap_tracking) stops
//! counting: allocations still carry a trailer (marked untracked), so a free is right
//! whichever way the switch was when its allocation was made.

pub(crate) mod counters;

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

/// Bytes of the trailer after each allocation: the tag's id.
const TRAILER: usize = size_of::<u16>();

/// A [`GlobalAlloc`] that charges every heap allocation to the calling thread's ledger tag
/// (see [`ledger::scope`](crate::ledger::scope)) and passes it on to `A`. Install it as
/// the global allocator; then [`ledger::snapshot`](crate::ledger::snapshot) shows, per
/// tag, the heap bytes live and their peak and the allocations and frees of the frame,
/// next to the arenas' figures, and allocations outside every scope on a line of their
/// own.
///
/// ```standalone_crate
/// use std::alloc::System;
/// use nebula_memory::TrackingAllocator;
///
/// #[global_allocator]
/// static HEAP: TrackingAllocator = TrackingAllocator::new(System);
///
/// let path_nodes = {
///     let _ai = nebula_memory::ledger::scope("doc/ai/pathfinding");
///     vec![0u32; 1000] // charged to doc/ai/pathfinding (and doc/ai, doc)
/// };
/// let heap = nebula_memory::ledger::snapshot().tag("doc/ai").unwrap().heap_live;
/// assert!(heap >= 4000);
/// drop(path_nodes); // credited to the same tag, whatever scope is current now
/// ```
///
/// Any `GlobalAlloc` can be wrapped (`TrackingAllocator::new(mimalloc::MiMalloc)`). Each
/// allocation costs the inner allocator two bytes more (the trailer naming its tag).
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAllocator<A = System> {
    inner: A,
}

impl<A> TrackingAllocator<A> {
    /// Wraps `inner`; usable in a `static`. O(1).
    ///
    /// ```
    /// static HEAP: nebula_memory::TrackingAllocator =
    ///     nebula_memory::TrackingAllocator::new(std::alloc::System);
    /// ```
    pub const fn new(inner: A) -> Self {
        TrackingAllocator { inner }
    }

    /// The allocator it passes allocations on to. O(1).
    ///
    /// ```
    /// let heap = nebula_memory::TrackingAllocator::new(std::alloc::System);
    /// let _system: &std::alloc::System = heap.inner();
    /// ```
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

/// The inner allocation for `layout`: the same alignment, the trailer added to the size.
/// `None` if that is no valid layout (the allocation then fails, as for any impossible
/// one).
#[inline(always)]
fn with_trailer(layout: Layout) -> Option<Layout> {
    // A `Layout`'s size rounded up to its alignment fits `isize`; with the trailer it
    // still must: `size + TRAILER <= isize::MAX + 1 - align`. One compare, no overflow
    // (`align >= 1`, `size <= isize::MAX`).
    let room = (isize::MAX as usize) - (layout.align() - 1);
    if layout.size() > room.saturating_sub(TRAILER) {
        return None;
    }
    // SAFETY: the alignment is `layout`'s (a power of two) and the size passes the check
    // above.
    Some(unsafe { Layout::from_size_align_unchecked(layout.size() + TRAILER, layout.align()) })
}

/// Writes the trailer of an allocation of `size` bytes at `p`.
///
/// # Safety
/// `p` is an inner allocation of at least `size + TRAILER` bytes.
#[inline(always)]
unsafe fn write_trailer(p: *mut u8, size: usize, id: u16) {
    // SAFETY: per the contract, `[p + size, p + size + 2)` lies in the allocation; the
    // write is unaligned on purpose.
    unsafe { ptr::write_unaligned(p.add(size).cast::<u16>(), id) }
}

/// Reads the trailer of a live allocation of `size` bytes at `p`.
///
/// The caller's pointer is used as it is, also for the trailer just past its bytes and to
/// give the whole allocation back: that is the pointer the caller's contract concerns (a
/// `Box` frees through its own). Under Stacked Borrows a pointer derived from a `Box`
/// covers the `Box`'s bytes only, which forbids any allocator from keeping data next to an
/// allocation; Tree Borrows, which Miri runs this allocator's tests under, allows it.
///
/// # Safety
/// `p` is a live allocation this allocator made for a layout of `size` bytes.
#[inline(always)]
unsafe fn read_trailer(p: *mut u8, size: usize) -> u16 {
    // SAFETY: this allocator wrote the trailer there (`alloc`, `alloc_zeroed`,
    // `realloc`), and the caller's bytes end before it.
    unsafe { ptr::read_unaligned(p.add(size).cast::<u16>()) }
}

/// Hands out a fresh inner allocation: counts it and writes its trailer.
///
/// # Safety
/// `p` is null or a fresh inner allocation of `size + TRAILER` bytes.
#[inline(always)]
unsafe fn hand_out(p: *mut u8, size: usize) -> *mut u8 {
    if !p.is_null() {
        let id = counters::charge(size);
        // SAFETY: `p` holds `size + TRAILER` bytes.
        unsafe { write_trailer(p, size, id) };
    }
    p
}

// SAFETY: every method passes on to `inner` a layout of the same alignment and `TRAILER`
// more bytes (checked: an overflowing layout fails with null, as allowed), and hands the
// caller the inner pointer itself, so alignment, validity and the zeroing of
// `alloc_zeroed` are the inner allocator's; the trailer lies past the caller's bytes.
// `dealloc` and `realloc` rebuild the very layout the allocation was made with. The
// counting in between neither allocates nor unwinds nor locks.
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(outer) = with_trailer(layout) else {
            return ptr::null_mut();
        };
        // SAFETY: `outer` has a non-zero size (the trailer), as `GlobalAlloc` requires;
        // the result is null or fresh with `outer`'s size.
        unsafe { hand_out(self.inner.alloc(outer), layout.size()) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(outer) = with_trailer(layout) else {
            return ptr::null_mut();
        };
        // SAFETY: as in `alloc`.
        unsafe { hand_out(self.inner.alloc_zeroed(outer), layout.size()) }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` is live with `layout` (the caller's contract), so its trailer is ours.
        let id = unsafe { read_trailer(p, layout.size()) };
        counters::credit(id, layout.size());
        // SAFETY: `p` came from `inner` with this layout (see `alloc`), which was checked
        // valid then: same alignment, `TRAILER` more bytes.
        unsafe {
            let outer = Layout::from_size_align_unchecked(layout.size() + TRAILER, layout.align());
            self.inner.dealloc(p, outer)
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(new_outer) = Layout::from_size_align(new_size, layout.align())
            .ok()
            .and_then(with_trailer)
            .map(|l| l.size())
        else {
            return ptr::null_mut();
        };
        // SAFETY: `p` is live with `layout`. Read before the move (a shrink may cut it off).
        let id = unsafe { read_trailer(p, layout.size()) };
        // SAFETY: the layout `p` was allocated with (checked valid then, see `alloc`).
        let outer =
            unsafe { Layout::from_size_align_unchecked(layout.size() + TRAILER, layout.align()) };
        // SAFETY: `p` came from `inner` with `outer`; `new_outer` is non-zero and, rounded
        // to the alignment, fits `isize` (checked above).
        let q = unsafe { self.inner.realloc(p, outer, new_outer) };
        if !q.is_null() {
            // SAFETY: `q` holds `new_size + TRAILER` bytes.
            unsafe { write_trailer(q, new_size, id) };
            counters::resize(id, layout.size(), new_size);
        }
        q
    }
}
