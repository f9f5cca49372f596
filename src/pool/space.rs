//! Where a pool's blocks live: one region reserved at the pool's whole capacity, or
//! segments taken as the pool needs them.
//!
//! **Reserved** (where there is virtual memory: mmap, `VirtualAlloc`): the pool reserves
//! its whole capacity once; pages become resident as blocks are used and go back to the OS
//! at a purge pass. Reserving costs address space only.
//!
//! **Segmented** (the web: wasm32 has no virtual memory; its linear memory only grows, so
//! a reservation is an allocation, for good): the pool takes a segment from the system
//! allocator when no free block fits, at least `step` bytes and at least an eighth of what
//! it spans already (so a pool that grows large has few segments), or what the block needs,
//! up to its capacity in all. What it holds follows its use: the slack is the last
//! segment's unused part. Each segment ends in a **sentinel**, a header forever in use, so a
//! block never merges across into the next segment and every block has a header after it.
//! A segment that is wholly free again goes back to the system allocator at a purge pass
//! (the purge delay keeps it for a spike that recurs soon; the system allocator hands its
//! memory to the next one otherwise).
//!
//! Segments are kept sorted by address in the pool's state, under its lock; finding the
//! one a block lies in is a binary search. This file has the types; `spans` the pool's
//! operations on them (finding a block's span, committing pages, taking and giving back
//! segments).

use std::ptr::NonNull;

use crate::block::HEADER;
use crate::vm::Region;

/// The default segment step of a segmented pool: 1 MiB.
pub(crate) const DEFAULT_SEGMENT: usize = 1 << 20;

/// Where a pool's blocks live (see the module docs).
pub(super) enum Space {
    /// One region spanning the whole capacity.
    Reserved(Region),
    /// Segments in the pool's state (`State::segments`), taken as needed.
    Segmented {
        /// The most the segments may span together: whole pages, at least one.
        capacity: usize,
        /// A new segment's smallest size.
        step: usize,
    },
}

/// A span of a pool's memory: a region's base pointer (whose provenance covers the span)
/// and its end address.
#[derive(Clone, Copy)]
pub(super) struct Span {
    pub(super) base: NonNull<u8>,
    pub(super) end: usize,
}

impl Span {
    pub(super) fn of(region: &Region) -> Span {
        Span {
            base: region.base(),
            end: region.base().as_ptr().addr() + region.len(),
        }
    }

    /// The span's own pointer at `addr` (inside the span).
    pub(super) fn at(self, addr: usize) -> *mut u8 {
        self.base.as_ptr().with_addr(addr)
    }
}

impl Space {
    /// The bytes the pool may span: its capacity.
    pub(super) fn capacity(&self) -> usize {
        match self {
            Space::Reserved(region) => region.len(),
            Space::Segmented { capacity, .. } => *capacity,
        }
    }

    /// The most usable bytes one block can ever have: the whole capacity but a header (and
    /// a segment's sentinel; segments are whole pages).
    pub(super) fn max_usable(&self) -> usize {
        match self {
            Space::Reserved(region) => region.len() - HEADER,
            Space::Segmented { capacity, .. } => capacity - 2 * HEADER,
        }
    }

    /// Whether a block's header may follow a block ending at `after` (the next block, or a
    /// segment's sentinel): not past a reserved region's end.
    pub(super) fn header_at(&self, after: usize) -> bool {
        match self {
            Space::Reserved(region) => after < region.base().as_ptr().addr() + region.len(),
            Space::Segmented { .. } => true,
        }
    }
}

/// `bytes` rounded down to whole pages: what segments can span in that many bytes.
pub(super) fn pages_in(bytes: usize) -> usize {
    bytes & !(crate::vm::page_size() - 1)
}

/// The span of `segments` holding `addr`.
pub(super) fn find(segments: &[Region], addr: usize) -> Option<Span> {
    let i = segments.partition_point(|r| r.base().as_ptr().addr() <= addr);
    let span = Span::of(segments.get(i.checked_sub(1)?)?);
    (addr < span.end).then_some(span)
}
