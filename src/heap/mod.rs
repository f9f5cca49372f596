//! Heap tracking: a global allocator that charges every heap allocation to the calling
//! thread's ledger tag, so the ledger covers the heap as well as the arenas.
//!
//! **Who owns a byte.** The tag current on the allocating thread (a
//! [`ledger::scope`](crate::ledger::scope) guard sets it; outside every scope it is the
//! untagged line). A free must credit that same tag whichever thread frees it and whatever
//! scope is current then, so the tag of every live allocation is kept in the **owner map**
//! ([`owners`]), a radix tree keyed by the allocation's address: the pointer, the size and
//! the alignment the inner allocator sees are the caller's (a request under 16 bytes is
//! made 16), and the caller's bytes are the only bytes behind its pointer the allocator
//! ever has. A `realloc` takes the entry out while the inner allocator has the memory and
//! puts it at the new address (or back at the old one if the move failed).
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
//! **Off.** [`ledger::set_heap_tracking(false)`](crate::ledger::set_heap_tracking) stops
//! counting: allocations made then have no entry, and a free is right whichever way the
//! switch was when its allocation was made.

pub(crate) mod counters;
pub(crate) mod owners;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::Ordering::Relaxed;

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
/// inner allocator sees the caller's layouts (a size under 16 bytes made 16); the tags
/// live in a table of the tracker's own, at most 2 bytes per 16 bytes of heap address
/// space in use ([`ledger::heap_tracking_overhead`](crate::ledger::heap_tracking_overhead)).
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

/// The inner allocation's size for `size`: at least one granule of the owner map, so that
/// two live allocations never start in one granule.
#[inline(always)]
fn inner_size(size: usize) -> usize {
    size.max(owners::GRANULE)
}

/// The inner allocation's layout for `layout`.
#[inline(always)]
fn inner_layout(layout: Layout) -> Layout {
    // SAFETY: the alignment is `layout`'s. The size is `layout`'s, or 16 if smaller, which
    // rounded up to the alignment is 16 (alignment < 16) or the alignment, which `layout`'s
    // own size rounded up reaches too: it fits `isize` whenever `layout` does.
    unsafe { Layout::from_size_align_unchecked(inner_size(layout.size()), layout.align()) }
}

/// A fresh allocation at `addr` of `size` bytes: charged to the thread's tag, which its
/// map entry records. Not counted (no entry) where the map cannot hold it.
#[inline(always)]
fn track(addr: usize, size: usize) {
    if let Some(entry) = owners::entry(addr) {
        let id = counters::charge(size);
        entry.store(id + 1, Relaxed);
    }
}

/// Takes the entry of the live allocation at `addr` out of the map: its tag's id + 1, or
/// 0 if it was not tracked.
#[inline(always)]
fn take(addr: usize) -> u16 {
    let Some(entry) = owners::find(addr) else {
        return 0;
    };
    let owner = entry.load(Relaxed);
    if owner != 0 {
        entry.store(0, Relaxed);
    }
    owner
}

// SAFETY: every method passes on to `inner` the caller's pointer and the caller's layout
// (sizes under 16 made 16, the same way each time, which keeps layouts valid: see
// `inner_layout`), so alignment, validity and the zeroing of `alloc_zeroed` are the inner
// allocator's. The caller's pointer is only read as an address; the bookkeeping touches the
// owner map and the counters, never the caller's memory, and neither allocates nor
// unwinds nor locks.
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !counters::is_on() {
            // Untracked: no entry. (A call in tail position: off, the wrapper costs a
            // load and a branch.)
            // SAFETY: `inner_layout` is valid with a non-zero size (`GlobalAlloc`'s
            // contract).
            return unsafe { self.inner.alloc(inner_layout(layout)) };
        }
        // SAFETY: as above.
        let p = unsafe { self.inner.alloc(inner_layout(layout)) };
        if !p.is_null() {
            track(p.addr(), layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !counters::is_on() {
            // SAFETY: as in `alloc`.
            return unsafe { self.inner.alloc_zeroed(inner_layout(layout)) };
        }
        // SAFETY: as in `alloc`.
        let p = unsafe { self.inner.alloc_zeroed(inner_layout(layout)) };
        if !p.is_null() {
            track(p.addr(), layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // The entry is cleared before the memory goes back: once it has, another thread
        // may be handed the same address and write its own entry.
        let owner = take(p.addr());
        if owner != 0 {
            counters::credit(owner - 1, layout.size());
        }
        // SAFETY: `p` came from `inner` with `inner_layout(layout)` (see `alloc`).
        unsafe { self.inner.dealloc(p, inner_layout(layout)) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Out of the map while the inner allocator has the memory (it may free `p` and
        // hand the address to another thread before it returns).
        let owner = take(p.addr());
        // SAFETY: `p` came from `inner` with `inner_layout(layout)`; the new size is the
        // caller's (non-zero, fits `isize` rounded up to the alignment: the contract) or
        // 16, which fits too (see `inner_layout`).
        let q = unsafe {
            self.inner
                .realloc(p, inner_layout(layout), inner_size(new_size))
        };
        if owner != 0 {
            let id = owner - 1;
            let at = if q.is_null() { p } else { q };
            match owners::entry(at.addr()) {
                Some(entry) => {
                    entry.store(owner, Relaxed);
                    if !q.is_null() {
                        counters::resize(id, layout.size(), new_size);
                    }
                }
                // The map cannot hold the new address: counted as freed, untracked from
                // now on. (`p` had an entry, so a failed realloc always finds it.)
                None => counters::credit(id, layout.size()),
            }
        }
        q
    }
}
