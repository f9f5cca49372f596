//! The top of a `MemoryArena`: `pop` gives back only the top allocation (not an older one, a
//! foreign one or one of the wrong size), and `realloc` grows and shrinks in place at the
//! top and copies below it or when the block is full.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use std::alloc::Layout;
use std::ptr::NonNull;

use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};

mod common;
use common::{KIB, pool};

#[test]
fn pop_only_the_top() {
    let pool = pool("pop");
    let other_pool = MemoryPool::new("pop-other", 1 << 20).unwrap();
    let arena = MemoryArena::new(&pool);
    let other = MemoryArena::new(&other_pool);
    // 100 is a multiple of the alignment: no padding between `a` and `b`, so popping `b`
    // makes `a` the top again.
    let layout = Layout::from_size_align(100, 4).unwrap();
    let a = arena.alloc(layout);
    let b = arena.alloc(layout);
    let foreign_top = other.alloc(layout);
    // SAFETY: 100 fresh bytes each.
    unsafe {
        a.as_ptr().write_bytes(1, 100);
        b.as_ptr().write_bytes(2, 100);
    }
    let used = arena.bytes_used();
    let mut stack = [0u8; 100];
    // SAFETY: none of these is this arena's top: each call is a no-op.
    unsafe {
        assert!(!arena.pop(a, layout), "non-top");
        assert!(!arena.pop(foreign_top, layout), "another arena's top");
        assert!(
            !arena.pop(NonNull::from(&mut stack).cast(), layout),
            "stack pointer"
        );
        assert!(
            !arena.pop(b, Layout::from_size_align(99, 4).unwrap()),
            "wrong size"
        );
    }
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(other.bytes_used(), 100);
    // SAFETY: live allocations of 100 bytes.
    unsafe {
        assert!(
            std::slice::from_raw_parts(a.as_ptr(), 100)
                .iter()
                .all(|&x| x == 1)
        );
        assert!(
            std::slice::from_raw_parts(b.as_ptr(), 100)
                .iter()
                .all(|&x| x == 2)
        );
    }
    // SAFETY: `b` is the top and is not used again.
    assert!(unsafe { arena.pop(b, layout) });
    assert_eq!(arena.bytes_used(), used - 100);
    // Popped twice: no longer the top.
    // SAFETY: a no-op.
    assert!(!unsafe { arena.pop(b, layout) });
    // `a` is now the top and its bytes come back to the next allocation.
    // SAFETY: `a` is the top and is not used again.
    assert!(unsafe { arena.pop(a, layout) });
    assert_eq!(arena.alloc(layout), a);
}

#[test]
fn realloc_in_place_at_the_top_and_copies_below_it() {
    let pool = pool("realloc");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * KIB));
    let fill = |p: NonNull<u8>, n: usize, seed: u8| {
        for i in 0..n {
            // SAFETY: callers pass live allocations of at least `n` bytes.
            unsafe { p.as_ptr().add(i).write(seed.wrapping_add(i as u8)) };
        }
    };
    let check = |p: NonNull<u8>, n: usize, seed: u8| {
        for i in 0..n {
            // SAFETY: as in `fill`.
            let b = unsafe { p.as_ptr().add(i).read() };
            assert_eq!(b, seed.wrapping_add(i as u8), "byte {i}");
        }
    };
    let l64 = Layout::from_size_align(64, 16).unwrap();
    let low = arena.alloc(l64);
    fill(low, 64, 10);
    let top = arena.alloc(l64);
    fill(top, 64, 20);

    // SAFETY: each pointer passed to `realloc` in this test is live with the given
    // layout and only the result is used afterwards.
    let grown = unsafe { arena.realloc(top, l64, 4096) }.unwrap();
    assert_eq!(grown, top, "the top grows in place");
    check(grown, 64, 20);
    let l4096 = Layout::from_size_align(4096, 16).unwrap();
    let used = arena.bytes_used();
    // SAFETY: as above.
    let shrunk = unsafe { arena.realloc(grown, l4096, 32) }.unwrap();
    assert_eq!(shrunk, top, "the top shrinks in place");
    assert_eq!(
        arena.bytes_used(),
        used - 4064,
        "shrinking the top gives bytes back"
    );
    check(shrunk, 32, 20);

    // Below the top: a shrink keeps the pointer, a grow copies.
    // SAFETY: as above.
    let low2 = unsafe { arena.realloc(low, l64, 16) }.unwrap();
    assert_eq!(low2, low);
    let l16 = Layout::from_size_align(16, 16).unwrap();
    // SAFETY: as above.
    let low3 = unsafe { arena.realloc(low2, l16, 1000) }.unwrap();
    assert_ne!(low3, low, "a non-top allocation must not grow in place");
    assert_eq!(low3.as_ptr() as usize % 16, 0);
    check(low3, 16, 10);
    check(shrunk, 32, 20); // the old top is untouched by the copy

    // The top grown beyond its block, with the pool's range after the block taken, moves
    // to a new block, contents preserved.
    let l1000 = Layout::from_size_align(1000, 16).unwrap();
    fill(low3, 1000, 30);
    let neighbour = pool.allocate_block(4096).unwrap();
    let blocks = arena.block_count();
    // SAFETY: as above.
    let moved = unsafe { arena.realloc(low3, l1000, 90_000) }.unwrap();
    assert_ne!(moved, low3);
    assert!(arena.block_count() > blocks);
    check(moved, 1000, 30);
    // And in the new block (90 112 usable bytes) it is the top again: growing stays in
    // place while the block has room.
    let l90k = Layout::from_size_align(90_000, 16).unwrap();
    // SAFETY: as above.
    let again = unsafe { arena.realloc(moved, l90k, 90_100) }.unwrap();
    assert_eq!(again, moved);
    check(again, 1000, 30);
    // Beyond it, the block grows in place into the free range after it: no move, no new
    // block, and the pool counts the added bytes as the arena's.
    let blocks = arena.block_count();
    let l90_1k = Layout::from_size_align(90_100, 16).unwrap();
    // SAFETY: as above.
    let grown = unsafe { arena.realloc(again, l90_1k, 400_000) }.unwrap();
    assert_eq!(grown, again, "the block grew in place");
    assert_eq!(arena.block_count(), blocks);
    check(grown, 1000, 30);
    fill(grown, 400_000, 40);
    // SAFETY: our live block's header.
    let neighbour_size = unsafe { neighbour.as_ref() }.total_size();
    assert_eq!(pool.stats().in_use, arena.bytes_held() + neighbour_size);
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(neighbour) };
}
