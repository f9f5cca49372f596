//! Alignment and size edge cases of `MemoryArena`: alignments from 1 up to beyond the block
//! size (also of zero-sized requests), and zero-sized allocations, which take no block and
//! cost no bytes.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use nebula_memory::Arena;
use std::alloc::Layout;

use nebula_memory::{ArenaConfig, MemoryArena};

mod common;
use common::{KIB, assert_drained, pool};

#[test]
fn large_alignments_are_honoured() {
    let pool = pool("align");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * KIB));
    for shift in 0..=12 {
        let align = 1usize << shift;
        for size in [1, 3, 17, 4096] {
            let p = arena.alloc(Layout::from_size_align(size, align).unwrap());
            assert_eq!(p.as_ptr() as usize % align, 0, "align {align}");
            // SAFETY: `size` fresh bytes.
            unsafe { p.as_ptr().write_bytes(0xAB, size) };
        }
    }
    // Alignments beyond the block size.
    let mut held = Vec::new();
    for shift in [16, 17, 20] {
        let align = 1usize << shift;
        let layout = Layout::from_size_align(100, align).unwrap();
        let p = arena.alloc(layout);
        assert_eq!(p.as_ptr() as usize % align, 0, "align {align}");
        // SAFETY: 100 fresh bytes.
        unsafe { p.as_ptr().write_bytes(shift as u8, 100) };
        held.push((p, shift as u8));
        let z = arena.alloc(Layout::from_size_align(0, align).unwrap());
        assert_eq!(z.as_ptr() as usize % align, 0, "zero-sized, align {align}");
    }
    for (p, byte) in held {
        // SAFETY: live 100-byte allocations.
        let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), 100) };
        assert!(s.iter().all(|&b| b == byte));
    }
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    let v = arena.alloc_val(Aligned4096([9; 64]));
    assert_eq!(v as *mut Aligned4096 as usize % 4096, 0);
    assert_eq!(v.0[63], 9);
}

#[repr(C, align(4096))]
struct Aligned4096([u8; 64]);

#[test]
fn zero_sized_allocations() {
    let pool = pool("zst");
    let arena = MemoryArena::new(&pool);
    // On a fresh arena zero-sized requests take no block.
    for align in [1, 2, 8, 64, 4096] {
        let p = arena.alloc(Layout::from_size_align(0, align).unwrap());
        assert_eq!(p.as_ptr() as usize % align, 0);
    }
    let unit = arena.alloc_val(());
    *unit = ();
    let empty: &mut [u64] = arena.alloc_slice(0, 0u64);
    assert!(empty.is_empty());
    assert_eq!(arena.alloc_slice_copy::<u32>(&[]), &[] as &[u32]);
    assert_eq!(arena.alloc_str(""), "");
    assert_eq!(arena.alloc_fmt(format_args!("")), "");
    assert_eq!((arena.block_count(), arena.bytes_used()), (0, 0));
    assert_drained(&pool);

    // Once there is a block, zero-sized requests are served in it and cost no bytes
    // (beyond alignment padding).
    arena.alloc_val(1u8);
    let used = arena.bytes_used();
    let z = arena.alloc(Layout::from_size_align(0, 1).unwrap());
    assert_eq!(arena.bytes_used(), used);
    // SAFETY: a zero-sized top: popping it is a no-op that reports success.
    assert!(unsafe { arena.pop(z, Layout::from_size_align(0, 1).unwrap()) });
    let units = arena.alloc_slice_fill_with(1000, |_| ());
    assert_eq!(units.len(), 1000);
    assert_eq!(arena.bytes_used(), used);
}
