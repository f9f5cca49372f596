//! The bump cursor: a window `[start, end)` of one block and the position `ptr` in it.
//!
//! This is the whole hot path of every arena in the crate: [`MemoryArena`], the per-thread
//! arenas of [`SharedArena`] and [`FrameArena`] all allocate through [`Cursor::bump`].
//! The pointer arithmetic lives in [`fit`], a module that forbids `unsafe`, so it can be
//! tested (and fuzzed) as plain integer math.
//!
//! **One formula for every alignment.** `start = (ptr + align - 1) & !(align - 1)`
//! (wrapping); fail if `(end - start) as isize < size as isize`; else `ptr = start + size`.
//! A branch on the alignment was mispredicted half the time in W5; the signed compare is
//! exact in every wrap case (argued in [`fit`], property-tested at the top of the address
//! space). With a constant layout the bump compiles to 10 instructions and one branch
//! (`examples/asm_probe.rs`).
//!
//! Invariants, kept by whoever moves the cursor into a window:
//! - `start <= ptr <= end`, all in one allocation (a block, or the sentinel), so
//!   `end - ptr` is at most `isize::MAX`;
//! - `base` is the arena's position at `start`: the bytes used in the blocks before this
//!   one. `base + (ptr - start)` is the arena's `bytes_used`.
//!
//! The fields are atomics with `Relaxed` ordering, which compile to plain loads and stores:
//! bumping is a load followed by a store, **not** an atomic read-modify-write, so only one
//! thread may bump a given cursor. Atomics make reading a cursor from another thread (for
//! statistics) and moving it from another thread at a point where its owner is known to
//! be idle (a frame-end reset) free of data races.
//!
//! [`MemoryArena`]: crate::MemoryArena
//! [`SharedArena`]: crate::SharedArena
//! [`FrameArena`]: crate::FrameArena

use std::alloc::Layout;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicPtr, AtomicUsize};

/// Address of the window of a cursor with no block: aligned to 4 KiB, so zero-sized
/// requests of any alignment up to 4 KiB are served there without a block.
pub(crate) const SENTINEL: usize = 4096;

/// A bump position inside one window of memory. `repr(C)`: `ptr` and `end`, all the bump
/// path reads, come first, so that an arena can keep them on its first cache line.
#[repr(C)]
pub(crate) struct Cursor {
    ptr: AtomicPtr<u8>,
    end: AtomicPtr<u8>,
    start: AtomicPtr<u8>,
    base: AtomicUsize,
}

impl Cursor {
    /// A cursor at the sentinel: every non-empty request fails.
    pub(crate) const fn empty() -> Cursor {
        let sentinel = ptr::without_provenance_mut(SENTINEL);
        Cursor {
            ptr: AtomicPtr::new(sentinel),
            end: AtomicPtr::new(sentinel),
            start: AtomicPtr::new(sentinel),
            base: AtomicUsize::new(0),
        }
    }

    /// The hot path: carves `layout` out of the window, or `None` if it does not fit.
    /// Align up, compare, add: 10 instructions and one branch for a constant layout, and
    /// no branch on the alignment when it is only known at run time.
    #[inline(always)]
    pub(crate) fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let ptr = self.ptr.load(Relaxed);
        let (start, new_ptr) = fit::fit(ptr.addr(), self.end.load(Relaxed).addr(), layout)?;
        // `start..new_ptr` lies in the window (or is zero bytes at the sentinel), so
        // `with_addr` keeps the window's provenance.
        self.ptr.store(ptr.with_addr(new_ptr), Relaxed);
        // SAFETY: `start >= ptr >= self.start`, and no window starts at address 0.
        Some(unsafe { NonNull::new_unchecked(ptr.with_addr(start)) })
    }

    /// Whether `[p, p + size)` is the newest allocation of this window: inside it, and
    /// ending at `ptr`. Only the top may be popped or resized in place; checking the
    /// window start too is what stops a pointer from another block (or a foreign one)
    /// from passing for the top. The sentinel window holds no allocation (a zero-sized
    /// one served there is not a top).
    #[inline]
    pub(crate) fn is_top(&self, p: *const u8, size: usize) -> bool {
        let start = self.start.load(Relaxed).addr();
        start != SENTINEL
            && p.addr() >= start
            && p.addr().checked_add(size) == Some(self.ptr.load(Relaxed).addr())
    }

    /// Moves the cursor into a new window, at its start.
    ///
    /// `start <= end`, both pointers into the same allocation (or the sentinel); `base` is
    /// the arena position at `start`.
    pub(crate) fn enter(&self, start: *mut u8, end: *mut u8, base: usize) {
        debug_assert!(start.addr() <= end.addr());
        self.start.store(start, Relaxed);
        self.ptr.store(start, Relaxed);
        self.end.store(end, Relaxed);
        self.base.store(base, Relaxed);
    }

    /// Moves the cursor back to the sentinel.
    pub(crate) fn leave(&self) {
        let sentinel = ptr::without_provenance_mut(SENTINEL);
        self.enter(sentinel, sentinel, 0);
    }

    /// Sets a position that comes from outside the cursor (a [`HotCursor`]'s registers
    /// written back): checked, since a position outside the window would hand out bytes
    /// that are not the arena's. Two compares, on paths that run once per cursor or per
    /// block.
    ///
    /// [`HotCursor`]: crate::HotCursor
    ///
    /// # Panics
    /// If `p` lies outside `[start, end]`: the caller's copy of the position is stale,
    /// which is a bug of the crate.
    #[inline]
    #[track_caller]
    pub(crate) fn write_back(&self, p: *mut u8) {
        let (start, end) = (self.start().addr(), self.end().addr());
        assert!(
            start <= p.addr() && p.addr() <= end,
            "nebula_memory: a stale bump position ({:#x}) was written back to an arena whose \
             window is {start:#x}..{end:#x}",
            p.addr()
        );
        self.ptr.store(p, Relaxed);
    }

    /// Moves the window's end further into the same block (grown in place): `end` is at
    /// or past the current end and carries the block's provenance.
    pub(crate) fn extend_end(&self, end: *mut u8) {
        debug_assert!(self.end.load(Relaxed).addr() <= end.addr());
        self.end.store(end, Relaxed);
    }

    /// Sets the position inside the window (a pop, a resize of the top, a rewind).
    ///
    /// `p` lies in `[start, end]` and carries the window's provenance: every caller derives
    /// it from the window itself (the debug assertion re-checks that proof).
    #[inline]
    pub(crate) fn set_ptr(&self, p: *mut u8) {
        debug_assert!(
            self.start.load(Relaxed).addr() <= p.addr()
                && p.addr() <= self.end.load(Relaxed).addr()
        );
        self.ptr.store(p, Relaxed);
    }

    /// The first free byte.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.load(Relaxed)
    }

    /// The start of the window.
    #[inline]
    pub(crate) fn start(&self) -> *mut u8 {
        self.start.load(Relaxed)
    }

    /// The end of the window.
    #[inline]
    pub(crate) fn end(&self) -> *mut u8 {
        self.end.load(Relaxed)
    }

    /// Bytes free after `ptr`.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.end().addr() - self.ptr().addr()
    }

    /// Bytes handed out in this window.
    #[inline]
    pub(crate) fn used_here(&self) -> usize {
        self.ptr().addr() - self.start().addr()
    }

    /// Length of the window.
    #[inline]
    pub(crate) fn window_len(&self) -> usize {
        self.end().addr() - self.start().addr()
    }

    /// The arena position at the window's start.
    #[inline]
    pub(crate) fn base(&self) -> usize {
        self.base.load(Relaxed)
    }

    /// Lowers the base (bytes given back in an earlier block).
    pub(crate) fn lower_base(&self, by: usize) {
        self.base.store(self.base() - by, Relaxed);
    }

    /// The arena position: bytes handed out in every window so far. Read from another
    /// thread while the owner moves to a new window, the figure may be briefly off (never
    /// out of bounds of what the arena held).
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.base()
            .saturating_add(self.ptr().addr().saturating_sub(self.start().addr()))
    }
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("start", &self.start())
            .field("ptr", &self.ptr())
            .field("end", &self.end())
            .field("base", &self.base())
            .finish()
    }
}

/// Bytes a window starting at a 16-aligned address must hold to fit `layout` at once: the
/// size and the worst padding. `None` if that overflows.
pub(crate) fn window_need(layout: Layout) -> Option<usize> {
    layout.size().checked_add(layout.align().max(16) - 16)
}

/// The pointer math of the bump path, in safe integer arithmetic.
pub(crate) mod fit {
    #![forbid(unsafe_code)]

    use std::alloc::Layout;

    /// Where an allocation of `layout` goes in a window whose free part is `[ptr, end)`:
    /// `(start, new_ptr)` with `ptr <= start`, `start` aligned, `new_ptr = start + size <=
    /// end`; or `None` if it does not fit. Requires `ptr <= end` and `end - ptr <=
    /// isize::MAX` (the free part of one allocation).
    ///
    /// One formula for every alignment, so a run-time alignment costs no mispredicted
    /// branch: round `ptr` up (wrapping), then compare `end - start` with the size as
    /// *signed* numbers. That is exact:
    /// - no wrap, `start <= end`: `end - start <= end - ptr <= isize::MAX`, a true
    ///   non-negative difference;
    /// - no wrap, `start > end`: `start - end < align <= isize::MAX + 1`, so the wrapped
    ///   difference reads as the true negative number, below any size;
    /// - `ptr + align - 1` wraps: then `ptr > usize::MAX + 1 - align >= isize::MAX`, the
    ///   wrapped sum is below `align` and rounds down to `start = 0`, and `end >= ptr >
    ///   isize::MAX` makes `end - 0` negative as a signed number: refused.
    ///
    /// `Layout` keeps the size within `isize::MAX`, and when the request fits, `start +
    /// size <= end` cannot wrap.
    #[inline(always)]
    pub(crate) fn fit(ptr: usize, end: usize, layout: Layout) -> Option<(usize, usize)> {
        let (size, align) = (layout.size(), layout.align());
        let start = ptr.wrapping_add(align - 1) & !(align - 1);
        if (end.wrapping_sub(start) as isize) < size as isize {
            return None;
        }
        Some((start, start + size))
    }
}

#[cfg(test)]
mod tests {
    use super::fit::fit;
    use super::*;
    use proptest::prelude::*;

    /// The slowest correct answer: the first aligned address at or after `ptr`, if the
    /// request fits before `end` there.
    fn model(ptr: usize, end: usize, size: usize, align: usize) -> Option<(usize, usize)> {
        let start = ptr.checked_next_multiple_of(align)?;
        let new = start.checked_add(size)?;
        (new <= end).then_some((start, new))
    }

    proptest! {
        // Under Miri, few cases and no failure-persistence file (isolation forbids the
        // `getcwd` it needs).
        #![proptest_config(ProptestConfig {
            failure_persistence: if cfg!(miri) { None } else { ProptestConfig::default().failure_persistence },
            ..ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 4096 })
        })]

        #[test]
        fn fit_matches_the_model(
            end in 0usize..(1u64 << 40).min(1 << (usize::BITS - 2)) as usize,
            back in 0usize..1 << 16,
            size in 0usize..1 << 17,
            align_log in 0u32..20,
        ) {
            let ptr = end.saturating_sub(back);
            let align = 1usize << align_log;
            let layout = Layout::from_size_align(size, align).unwrap();
            prop_assert_eq!(fit(ptr, end, layout), model(ptr, end, size, align));
        }

        #[test]
        fn fit_is_exact_at_the_top_of_the_address_space(
            from_top in 0usize..1 << 16,
            back in 0usize..1 << 16,
            size in 0usize..1 << 17,
            align_log in 0u32..usize::BITS - 1,
        ) {
            let end = usize::MAX - from_top;
            let ptr = end - back;
            let align = 1usize << align_log;
            let Ok(layout) = Layout::from_size_align(size, align) else { return Ok(()) };
            prop_assert_eq!(fit(ptr, end, layout), model(ptr, end, size, align));
        }
    }

    #[test]
    fn huge_requests_and_alignments_do_not_wrap() {
        let end = 1 << 20;
        let max = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
        assert_eq!(fit(end - 100, end, max), None);
        let max = Layout::from_size_align(isize::MAX as usize, 1).unwrap();
        assert_eq!(fit(0, end, max), None);
        let huge_align = Layout::from_size_align(0, 1 << (usize::BITS - 2)).unwrap();
        assert_eq!(
            fit(usize::MAX - 10, usize::MAX - 5, huge_align),
            None,
            "rounding wraps"
        );
        assert_eq!(fit(end - 100, end, huge_align), None);
    }

    #[test]
    fn a_block_of_the_window_need_fits_the_request() {
        for align_log in 0..13 {
            for size in [0usize, 1, 15, 16, 17, 63, 64, 65, 1000, 4096] {
                let layout = Layout::from_size_align(size, 1 << align_log).unwrap();
                let need = window_need(layout).unwrap();
                // Every 16-aligned window start.
                for data in (4096..4096 + 4096).step_by(16) {
                    assert!(
                        fit(data, data + need, layout).is_some(),
                        "{layout:?} in a window of {need} at {data:#x}"
                    );
                }
            }
        }
        assert_eq!(
            window_need(Layout::from_size_align(usize::MAX / 2, 1).unwrap()),
            Some(usize::MAX / 2)
        );
    }

    #[test]
    fn top_and_positions() {
        let mut buf = vec![0u64; 64];
        let start = buf.as_mut_ptr().cast::<u8>();
        let end = start.wrapping_add(512);
        let c = Cursor::empty();
        assert_eq!(c.position(), 0);
        assert!(c.bump(Layout::new::<u8>()).is_none());
        assert!(
            c.bump(Layout::new::<()>()).is_some(),
            "zero-sized fits at the sentinel"
        );
        c.enter(start, end, 100);
        let a = c.bump(Layout::new::<u64>()).unwrap();
        let b = c.bump(Layout::new::<[u8; 3]>()).unwrap();
        assert!(c.is_top(b.as_ptr(), 3));
        assert!(!c.is_top(a.as_ptr(), 8));
        assert!(
            !c.is_top(start.wrapping_sub(5), 5 + 11),
            "a pointer before the window"
        );
        assert_eq!(c.position(), 100 + 11);
        c.set_ptr(b.as_ptr());
        assert_eq!((c.used_here(), c.position()), (8, 108));
        c.leave();
        assert_eq!(c.position(), 0);
        drop(buf);
    }
}
