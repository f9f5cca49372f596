//! The eight unit tests of the original `FrameArena` design this crate's API comes from,
//! verbatim (inside `mod tests`, as they were written); `use super::*` brings in the
//! crate's `FrameArena`, so they check that the API and its behaviour are kept.

// The original tests check `NonNull::as_ptr` for null; kept verbatim.
#![allow(useless_ptr_null_checks)]

#[allow(unused_imports)]
use nebula_memory::FrameArena;

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::Layout;

    /// Allocating from a fresh arena should return a valid, non-null pointer.
    #[test]
    fn test_alloc_returns_valid_pointer() {
        let arena = FrameArena::new(4096);
        let layout = Layout::from_size_align(64, 8).unwrap();

        let ptr = arena.alloc(layout);

        assert!(ptr.is_some(), "allocation should succeed");
        let ptr = ptr.unwrap();
        assert!(!ptr.as_ptr().is_null());
        // The pointer should be properly aligned.
        assert_eq!(ptr.as_ptr() as usize % 8, 0);
    }

    /// Multiple allocations should return non-overlapping memory regions.
    #[test]
    fn test_multiple_allocations_dont_overlap() {
        let arena = FrameArena::new(4096);
        let layout = Layout::from_size_align(128, 8).unwrap();

        let ptr_a = arena.alloc(layout).expect("first alloc");
        let ptr_b = arena.alloc(layout).expect("second alloc");
        let ptr_c = arena.alloc(layout).expect("third alloc");

        let a = ptr_a.as_ptr() as usize;
        let b = ptr_b.as_ptr() as usize;
        let c = ptr_c.as_ptr() as usize;

        // Each region is 128 bytes. They must not overlap.
        assert!(b >= a + 128, "B ({b:#x}) overlaps A ({a:#x})");
        assert!(c >= b + 128, "C ({c:#x}) overlaps B ({b:#x})");
    }

    /// After reset, bytes_used should return to 0 and new allocations
    /// should start from the beginning of the arena.
    #[test]
    fn test_reset_frees_all_memory() {
        let arena = FrameArena::new(4096);
        let layout = Layout::from_size_align(256, 8).unwrap();

        arena.alloc(layout).expect("alloc before reset");
        assert!(arena.bytes_used() > 0);

        // SAFETY: no references into the arena are held.
        unsafe {
            arena.reset();
        }

        assert_eq!(arena.bytes_used(), 0, "bytes_used should be 0 after reset");
        assert_eq!(
            arena.bytes_remaining(),
            arena.capacity(),
            "full capacity should be available after reset"
        );
    }

    /// Allocations that would exceed arena capacity should return None.
    #[test]
    fn test_arena_respects_capacity() {
        let arena = FrameArena::new(256);

        // Allocate exactly 256 bytes (may succeed depending on alignment).
        let layout_full = Layout::from_size_align(256, 1).unwrap();
        let first = arena.alloc(layout_full);
        assert!(first.is_some(), "should fit in 256-byte arena");

        // Now the arena is full. Another allocation should fail.
        let layout_extra = Layout::from_size_align(1, 1).unwrap();
        let second = arena.alloc(layout_extra);
        assert!(second.is_none(), "arena should be full");
    }

    /// After reset, allocations should reuse the same memory region
    /// (bump pointer starts from the beginning again).
    #[test]
    fn test_allocation_after_reset_reuses_memory() {
        let arena = FrameArena::new(4096);
        let layout = Layout::from_size_align(64, 8).unwrap();

        let ptr_before = arena.alloc(layout).expect("alloc before reset");

        // SAFETY: no references into the arena are held after this point.
        unsafe {
            arena.reset();
        }

        let ptr_after = arena.alloc(layout).expect("alloc after reset");

        // Both allocations should return the same address since the bump
        // pointer was reset and alignment is the same.
        assert_eq!(
            ptr_before.as_ptr(),
            ptr_after.as_ptr(),
            "after reset, the first allocation should reuse the same address"
        );
    }

    /// The high watermark should track the maximum bytes ever allocated.
    #[test]
    fn test_high_watermark_tracks_peak_usage() {
        let arena = FrameArena::new(4096);
        let layout = Layout::from_size_align(100, 8).unwrap();

        arena.alloc(layout).unwrap();
        arena.alloc(layout).unwrap();
        arena.alloc(layout).unwrap();
        let peak = arena.high_watermark();
        assert!(peak >= 300, "watermark should be at least 300 bytes");

        // SAFETY: no references held.
        unsafe {
            arena.reset();
        }

        // Watermark should persist after reset.
        assert_eq!(
            arena.high_watermark(),
            peak,
            "high watermark should survive reset"
        );
    }

    /// alloc_val should store and return the correct value.
    #[test]
    fn test_alloc_val_stores_value() {
        let arena = FrameArena::new(4096);

        let val = arena.alloc_val(42u64).expect("alloc_val");
        assert_eq!(*val, 42);

        *val = 99;
        assert_eq!(*val, 99);
    }

    /// alloc_slice should return a properly initialized slice.
    #[test]
    fn test_alloc_slice_initializes_values() {
        let arena = FrameArena::new(4096);

        let slice = arena.alloc_slice::<u32>(10, 0xDEAD).expect("alloc_slice");
        assert_eq!(slice.len(), 10);
        for &val in slice.iter() {
            assert_eq!(val, 0xDEAD);
        }
    }
}
