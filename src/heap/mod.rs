//! Heap tracking: a global allocator that charges every heap allocation to the calling
//! thread's ledger tag, so the ledger covers the heap as well as the arenas.
//!
//! **Who owns a byte.** The tag current on the allocating thread (a
//! [`ledger::scope`](crate::ledger::scope) guard sets it; outside every scope it is the
//! untagged line). A free must credit that same tag whichever thread frees it and whatever
//! scope is current then, so the tag of every live allocation is kept in the **owner map**
//! ([`owners`]), a table keyed by the allocation's address, with the size it was charged
//! ([`record`]). The inner allocator sees the caller's pointer and size, and the caller's
//! alignment raised to at least 16 (the map's granule: every allocation starts at a
//! granule's start, so two never share one, and the entries after an allocation's first
//! are its own, for its size). The size is the caller's so that the caller's bytes are the
//! whole allocation: Miri's Stacked Borrows (its default) refuses a free through a pointer
//! whose borrow covers less than the block (a size under 16 made 16 did that to every
//! program). A `realloc` takes the record out while the inner allocator has the memory and
//! puts it at the new address (or back at the old one if the move failed).
//!
//! **What was charged is credited.** `dealloc` credits, and gives the inner allocator back,
//! the recorded size, not the size it is passed: an optimised build may fold
//! `free(realloc(q, n))` into `free(q)` with the size `n` (seen in release with the raw
//! `std::alloc` API: a 1 MiB block freed as 3 bytes, 1,048,573 bytes left on the tag for
//! ever). An allocation the map could not record (outside the covered addresses, 2^48
//! bytes or more, or made while tracking was off) is passed back with the caller's size.
//!
//! **Each byte once.** Pool blocks are the ledger's arena figures, never heap: heap-fallback
//! blocks and (under Miri) pool regions come from `System` directly, not through the
//! tracker. The Bevy plugin charges each system's heap use to `systems/<name>` by wrapping
//! the system (`bevy::attribution`).
//!
//! **The caller's pointer is a number here.** `dealloc` and `realloc` read its address
//! and pass it back to the inner allocator, nothing else: no header before it, no trailer
//! after it. rustc tells LLVM a global allocation is exactly the size asked for, so once
//! these methods are inlined into the caller, touching a byte outside it through its
//! pointer would be out of bounds (undefined behaviour the optimiser acts on).
//!
//! **What the charge path may do.** It runs inside `alloc`, so it never allocates, never
//! takes a lock another allocation could hold, never runs user code, and never fails: the
//! thread's tag and shard sit in a `const` thread-local without a destructor (readable
//! until the thread's very end), tag ids are given out when a scope is made, outside
//! every allocation, and the map's tables are OS pages mapped on first use. The counters
//! are sharded per thread ([`counters`]), so the charge is a plain load and store on
//! memory no other thread writes.
//!
//! **Sampled call stacks.** With sampling on ([`sample`]), an allocation whose bytes
//! cross its counter's sampling threshold (a countdown in the counter's own cache line)
//! goes, after its record is written, to the sampler: it captures the call stack and keeps
//! the allocation in a table of its own, its record marked so that the free finds it
//! there. Off (the default), the countdown is the whole cost.
//!
//! **Off.** [`ledger::set_heap_tracking(false)`](crate::ledger::set_heap_tracking) stops
//! counting: allocations made then have no entry, and a free is right whichever way the
//! switch was when its allocation was made.
//!
//! **What stays charged.** A tag's `heap_live` is what is live now of what was allocated in
//! its scopes, whoever frees it. So an allocation made in a scope and kept by something
//! that outlives the scope stays on the tag until freed, and a vector first allocated in a
//! scope keeps that tag however it grows later, on any thread (a `realloc` keeps its tag).
//! The crate's own lazily made bookkeeping (the global pools, the tag registry, the
//! scratch and thread-arena registries, a `SharedArena`'s per-thread slots) is made
//! untagged ([`untagged`]). What the runtime and dependencies make lazily, in whichever
//! thread needs it first, is charged to that thread's scope and kept for the process;
//! measured on Linux (the reproduction: short-lived threads, each allocating, using
//! `with_scratch`, a thread arena and a `SharedArena` in a scope, or panicking while
//! holding memory):
//! - `parking_lot_core`'s parking table, made at the first contended lock (this crate's
//!   locks are `parking_lot`'s) and replaced by one twice as large as more threads park at
//!   once, the old ones kept: 16 buckets of 64 bytes and a 32-byte header first (1,056
//!   bytes), then 2,080, 4,128, ...: it grows with the most threads alive at once, not
//!   with the number of threads ever made, and stops once that stops rising;
//! - with `RUST_BACKTRACE` set, std's symbolisation cache (the binary's parsed debug
//!   information, 31 MB for a release build of an example with debug info), made at the
//!   first panic that prints a backtrace;
//! - under the test harness's output capture, each panic's message (and anything printed)
//!   goes into the test's capture buffer, about 190 bytes a panic, live until the test
//!   ends.
//!
//! Short-lived threads add nothing else: std's per-thread structures (a thread's handle
//! and name, its thread-local destructor list) are freed when it ends, and credited to
//! the scope they were made in (`tests/heap_threads.rs`: 256 threads, 50 of them
//! panicking, leave the tag where it was).

pub(crate) mod counters;
pub(crate) mod owners;
mod record;
pub(crate) mod sample;

use std::alloc::{GlobalAlloc, Layout, System};

/// Runs `f` with the untagged line as the calling thread's heap tag; the tag before is
/// current again after, also if `f` unwinds. For the crate's own bookkeeping that lives
/// past the call (the global pools, the tag registry, a thread's scratch and thread-arena
/// registrations, a `SharedArena`'s per-thread slots): made lazily by whichever call
/// needs it first, it would otherwise be charged, for the rest of the process, to the
/// scope that call happened to run in (and a long-lived vector's growth keeps the tag of
/// its first allocation, since a `realloc` keeps its tag). O(1).
pub(crate) fn untagged<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the tag back, on return or unwind.
    struct Restore(u16);
    impl Drop for Restore {
        fn drop(&mut self) {
            counters::set_tag(self.0);
        }
    }
    let _restore = Restore(counters::set_tag(counters::UNTAGGED));
    f()
}

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
/// Any `GlobalAlloc` can be wrapped (`TrackingAllocator::new(mimalloc::MiMalloc)`). The
/// inner allocator sees the caller's sizes, with the alignment raised to at least 16
/// bytes (with `System` on 64-bit Linux, a request under 16 bytes then goes to
/// `posix_memalign` rather than `malloc`); the tags live in a table of the tracker's own,
/// at most 2 bytes per 16 bytes of heap address space in use
/// ([`ledger::heap_tracking_overhead`](crate::ledger::heap_tracking_overhead)). An inner
/// allocator that hands out memory another tracker's allocation holds (a tracker over an
/// arena carved from tracked memory) is not supported: both would write the map at the
/// same addresses.
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

/// The inner allocation's layout for a caller's allocation of `size` bytes aligned to
/// `align`: the caller's size (a zero size, outside `GlobalAlloc`'s contract, made 1) and
/// at least a granule's alignment. The size is the caller's so that its pointer, whose
/// borrow covers its own bytes, frees the whole inner allocation (Miri's Stacked Borrows
/// refuses a free through a pointer that covers part of it). The alignment is a granule's
/// so that every allocation starts at a granule's start: two live ones never start in one
/// granule, whatever the inner allocator, and the entries after an allocation's first
/// are its own (see [`record`]). The alignment depends on nothing else, so a `realloc`
/// (which keeps the alignment) leaves an allocation with the layout its new size gives.
/// `None` if that layout would not fit `isize` (a size within 15 bytes of it).
#[inline(always)]
fn inner_layout(size: usize, align: usize) -> Option<Layout> {
    let (size, align) = (size.max(1), align.max(owners::GRANULE));
    // One comparison in the common case: with both at most `isize::MAX / 2` (the
    // alignment, a power of two, then at most a quarter of the address space), the size
    // rounded up to the alignment fits `isize`, `Layout`'s condition.
    if (size | align) > isize::MAX as usize / 2 {
        return huge_layout(size, align);
    }
    // SAFETY: as just said; the alignment is the maximum of two powers of two (the
    // caller's, from a valid layout, and the granule), so one.
    Some(unsafe { Layout::from_size_align_unchecked(size, align) })
}

/// `inner_layout` of sizes or alignments over `isize::MAX / 2`: `Layout`'s own checks.
#[cold]
#[inline(never)]
fn huge_layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size, align).ok()
}

/// [`inner_layout`] of arguments it accepted before: the allocation's own, when it was
/// made. No check: the free and `realloc` paths pass it straight on.
///
/// # Safety
/// `inner_layout(size, align)` is `Some`.
#[inline(always)]
unsafe fn inner_layout_of(size: usize, align: usize) -> Layout {
    // SAFETY: the caller's promise: `inner_layout` made this layout, after its checks.
    unsafe { Layout::from_size_align_unchecked(size.max(1), align.max(owners::GRANULE)) }
}

// SAFETY: every method passes on to `inner` the caller's pointer and a layout made the same
// way each time from the caller's (`inner_layout`: its size, at least a granule's
// alignment; a request whose layout would not fit `isize` is refused with null), so
// alignment, validity and the zeroing of `alloc_zeroed` are the inner allocator's. A
// tracked allocation is given back with the size its record holds, the size it was made
// with, whatever size the caller passes. The caller's pointer is only read as an address;
// the bookkeeping touches the owner map and the counters, never the caller's memory, and
// neither allocates nor unwinds nor locks.
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(inner) = inner_layout(layout.size(), layout.align()) else {
            return std::ptr::null_mut();
        };
        if !counters::is_on() {
            // Untracked: no entry. (A call in tail position: off, the wrapper costs the
            // layout's comparison, a load and a branch.)
            // SAFETY: `inner` is a valid layout with a non-zero size.
            return unsafe { self.inner.alloc(inner) };
        }
        // SAFETY: as above.
        let p = unsafe { self.inner.alloc(inner) };
        if !p.is_null() {
            record::track(p.addr(), layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(inner) = inner_layout(layout.size(), layout.align()) else {
            return std::ptr::null_mut();
        };
        if !counters::is_on() {
            // SAFETY: as in `alloc`.
            return unsafe { self.inner.alloc_zeroed(inner) };
        }
        // SAFETY: as in `alloc`.
        let p = unsafe { self.inner.alloc_zeroed(inner) };
        if !p.is_null() {
            record::track(p.addr(), layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // The record is taken out before the memory goes back: once it has, another
        // thread may be handed the same address and write its own.
        let size = match record::take(p.addr()) {
            Some((id, size)) => {
                // What was charged, whatever size the caller names (see `record`).
                counters::credit(id, size);
                size
            }
            None => layout.size(),
        };
        // SAFETY: `p` came from `inner` with the inner layout of its size (the recorded
        // one, or the caller's for an untracked allocation) and `layout`'s alignment,
        // which `inner_layout` accepted then (`alloc` and `realloc` made it so).
        unsafe { self.inner.dealloc(p, inner_layout_of(size, layout.align())) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(new_inner) = inner_layout(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        // Out of the map while the inner allocator has the memory (it may free `p` and
        // hand the address to another thread before it returns).
        let taken = record::take(p.addr());
        let old = taken.map_or(layout.size(), |(_, size)| size);
        // SAFETY: `p` came from `inner` with the inner layout of `old`, which
        // `inner_layout` accepted then (see `dealloc`); the new size is `new_inner`'s,
        // valid with the same alignment.
        let q = unsafe {
            self.inner
                .realloc(p, inner_layout_of(old, layout.align()), new_inner.size())
        };
        if let Some((id, old)) = taken {
            let kept = if q.is_null() {
                record::put_back(p.addr(), id, old)
            } else {
                record::regrow(q.addr(), id, old, new_size)
            };
            if !kept {
                // The map cannot hold the new record: counted as freed, untracked from
                // now on. (`p`'s was held, so a failed realloc always finds its place.)
                counters::credit(id, old);
            }
        }
        q
    }
}
