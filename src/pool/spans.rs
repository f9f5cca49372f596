//! The pool's operations on its spans (see [`space`](super::space)): finding the span a
//! block lies in, committing and decommitting its pages, taking a segment when no free
//! block fits and giving wholly free segments back.

use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;

use super::footer::write_footer;
use super::space::{Space, Span, find, pages_in};
use super::{MemoryPool, State};
use crate::block::{HEADER, MAGIC_END, MAGIC_FREE, MemoryBlock, PREV_FREE, Word};
use crate::poison;
use crate::vm::Region;

impl MemoryPool {
    /// The span `addr` lies in (a segmented pool takes its lock for the search, so the
    /// lock must not be held).
    pub(super) fn span_of(&self, addr: usize) -> Option<Span> {
        match &self.space {
            Space::Reserved(region) => {
                let span = Span::of(region);
                (span.base.as_ptr().addr()..span.end)
                    .contains(&addr)
                    .then_some(span)
            }
            Space::Segmented { .. } => find(&self.state.lock().segments, addr),
        }
    }

    /// The region `ptr` lies in (lock held).
    fn region_of<'a>(&'a self, st: &'a State, ptr: *mut u8) -> Option<&'a Region> {
        match &self.space {
            Space::Reserved(region) => Some(region),
            Space::Segmented { .. } => {
                let addr = ptr.addr();
                let i = st
                    .segments
                    .partition_point(|r| r.base().as_ptr().addr() <= addr);
                st.segments.get(i.checked_sub(1)?)
            }
        }
    }

    /// Commits `[ptr, ptr + len)`, which lies in one of the pool's spans (lock held).
    ///
    /// # Safety
    /// The range lies inside one span of this pool.
    pub(super) unsafe fn commit(&self, st: &State, ptr: *mut u8, len: usize) -> bool {
        match self.region_of(st, ptr) {
            // SAFETY: the caller keeps the range inside this region.
            Some(region) => unsafe { region.commit(ptr, len) },
            None => false,
        }
    }

    /// Decommits the whole pages inside `[ptr, ptr + len)` (lock held).
    ///
    /// # Safety
    /// The range lies inside one span of this pool and its contents are dead.
    pub(super) unsafe fn decommit(&self, st: &State, ptr: *mut u8, len: usize) {
        if let Some(region) = self.region_of(st, ptr) {
            // SAFETY: per the contract.
            unsafe { region.decommit(ptr, len) }
        }
    }

    /// Makes the whole pages inside `[ptr, ptr + len)` inaccessible or accessible again
    /// (lock held); false where the platform cannot.
    ///
    /// # Safety
    /// The range lies inside one span of this pool; while inaccessible nobody touches it.
    pub(super) unsafe fn protect(
        &self,
        st: &State,
        ptr: *mut u8,
        len: usize,
        accessible: bool,
    ) -> bool {
        match self.region_of(st, ptr) {
            // SAFETY: per the contract.
            Some(region) => unsafe { region.protect(ptr, len, accessible) },
            None => false,
        }
    }

    /// Bytes the pool's spans cover now (lock held): the whole capacity for a reserved
    /// region, the segments' sum for a segmented pool.
    pub(super) fn spanned(&self, st: &State) -> usize {
        match &self.space {
            Space::Reserved(region) => region.len(),
            Space::Segmented { .. } => st.spanned,
        }
    }

    /// The largest block (total bytes) a new segment could hold now, or 0 (lock held): the
    /// capacity no segment spans, and the wholly free segments `grow` would give back
    /// first. O(segments).
    pub(super) fn segment_room(&self, st: &State) -> usize {
        match &self.space {
            Space::Reserved(_) => 0,
            Space::Segmented { capacity, .. } => {
                let free: usize = st
                    .segments
                    .iter()
                    .filter(|region| is_wholly_free(region))
                    .map(Region::len)
                    .sum();
                pages_in(capacity.saturating_sub(st.spanned) + free).saturating_sub(HEADER)
            }
        }
    }

    /// Takes a segment that holds a free block of at least `size` total bytes and puts that
    /// block on the free lists (lock held). False for a reserved region, past the capacity,
    /// or when the system refuses the memory.
    pub(super) fn grow(&self, st: &mut State, size: usize) -> bool {
        let Space::Segmented { capacity, step } = self.space else {
            return false;
        };
        let Some(need) = size.checked_add(HEADER) else {
            return false;
        };
        // Wholly free segments cannot serve this block (no free block could): they go back
        // first, so that the system allocator can merge them into the new one's memory
        // (on the web, segments taken one after another lie side by side).
        self.release_free_segments(st);
        // Whole pages (the step is some), within the capacity.
        let room = pages_in(capacity.saturating_sub(st.spanned));
        let wanted = need.max(step).max(st.spanned / 8);
        let len = wanted
            .checked_next_multiple_of(step)
            .unwrap_or(usize::MAX)
            .min(room);
        if len < need {
            return false;
        }
        let Some(Ok(region)) = Region::reserve(len) else {
            return false;
        };
        let len = region.len();
        let base = region.base().as_ptr();
        // SAFETY: the first header and the sentinel (the last HEADER bytes) are inside the
        // fresh region, which is at least `need` = `size + HEADER` >= 2 headers long.
        unsafe {
            let end = base.add(len - HEADER);
            if !region.commit(base, HEADER) || !region.commit(end.sub(8), 8 + HEADER) {
                return false;
            }
            let first = base.cast::<MemoryBlock>();
            first.write(MemoryBlock {
                magic: MAGIC_FREE,
                flags: AtomicU32::new(0),
                size: len - HEADER,
                next: ptr::null_mut(),
                word: Word { used: 0 },
            });
            write_footer(first);
            end.cast::<MemoryBlock>().write(MemoryBlock {
                magic: MAGIC_END,
                flags: AtomicU32::new(PREV_FREE),
                size: HEADER,
                next: ptr::null_mut(),
                word: Word { used: 0 },
            });
            st.index.insert(first);
            poison::hide(
                MemoryBlock::data_of(NonNull::new_unchecked(first)).as_ptr(),
                len - 2 * HEADER - 8,
            );
        }
        let at = st
            .segments
            .partition_point(|r| r.base().as_ptr() < region.base().as_ptr());
        st.segments.insert(at, region);
        st.spanned += len;
        true
    }

    /// Gives every wholly free segment back to the system allocator (lock held). Returns
    /// how many went back.
    pub(super) fn release_free_segments(&self, st: &mut State) -> usize {
        if matches!(self.space, Space::Reserved(_)) {
            return 0;
        }
        let State {
            segments,
            index,
            spanned,
            ..
        } = st;
        let before = segments.len();
        segments.retain(|region| {
            let whole = is_wholly_free(region);
            if whole {
                let first = region.base().as_ptr().cast::<MemoryBlock>();
                // SAFETY: a free block on the lists, the segment's only block.
                unsafe { index.remove(first) };
                *spanned -= region.len();
                // The system allocator gets the memory back unpoisoned.
                // SAFETY: the whole segment is free and about to be released.
                unsafe { poison::expose(region.base().as_ptr(), region.len()) };
            }
            !whole
        });
        before - segments.len()
    }
}

/// Whether a segment's one block is free (lock held).
fn is_wholly_free(region: &Region) -> bool {
    let first = region.base().as_ptr().cast::<MemoryBlock>();
    // SAFETY: every segment starts with a block's header (free or in use), written by
    // `grow` and kept by the pool under its lock, which the caller holds.
    unsafe { (*first).magic == MAGIC_FREE && (*first).size == region.len() - HEADER }
}
