//! Regression tests for problems found in review of the arena.

use nebula_memory::Arena;
use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};

mod common;
use common::panic_message;

/// A checkpoint of a fresh arena (no block yet, generation 0) must not rewind another
/// fresh arena.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn checkpoint_of_another_fresh_arena_is_refused() {
    let pool = MemoryPool::new("regress", 4 << 20).unwrap();
    let a = MemoryArena::new(&pool);
    let b = MemoryArena::new(&pool);
    let mark = a.checkpoint();
    b.alloc_val(1u64);
    // SAFETY: the rewind is refused before it touches anything.
    let msg = panic_message(|| unsafe { b.rewind(mark) });
    assert!(
        msg.contains("regress") && msg.contains("checkpoint"),
        "{msg}"
    );
    assert_eq!(b.bytes_used(), 8);
}

/// A checkpoint of a dropped arena must not pass on a new arena that got the same block.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn checkpoint_of_a_dropped_arena_is_refused() {
    let pool = MemoryPool::new("regress", 4 << 20).unwrap();
    let old = MemoryArena::new(&pool);
    old.alloc_val(1u8);
    let mark = old.checkpoint();
    drop(old);
    let new = MemoryArena::new(&pool);
    new.alloc_val(1u8); // very likely the same block address as `old` had
    // SAFETY: refused before anything is touched.
    let msg = panic_message(|| unsafe { new.rewind(mark) });
    assert!(msg.contains("checkpoint"), "{msg}");
}

/// In a pool barely larger than a frame, the arena settles on one block and stops logging
/// exhaustions for requests it has a fallback for.
#[test]
fn tight_pool_settles_without_spurious_exhaustions() {
    let pool = MemoryPool::new("tight", 1 << 20).unwrap();
    let mut arena = MemoryArena::new(&pool);
    let frame = |arena: &MemoryArena<'_>| {
        for _ in 0..60 {
            if cfg!(miri) {
                // The same 10 000-byte, byte-aligned slice in 100 closure calls, not 10 000.
                arena.alloc_slice(100, [1u8; 100]);
            } else {
                arena.alloc_slice(10_000, 1u8);
            }
        }
    };
    for _ in 0..5 {
        frame(&arena);
        arena.reset();
    }
    let before = pool.stats();
    for _ in 0..if cfg!(miri) { 5 } else { 20 } {
        frame(&arena);
        arena.reset();
    }
    let after = pool.stats();
    assert_eq!(
        after.exhaustions, 0,
        "tentative requests must not count as exhaustions"
    );
    assert_eq!(
        (
            after.allocations - before.allocations,
            after.frees - before.frees
        ),
        (0, 0),
        "a steady frame in a tight pool must settle"
    );
    assert_eq!(arena.block_count(), 1);
}

/// An unsafe rewind below a scope guard's mark, inside the scope, must not make the guard
/// panic when it drops.
#[test]
fn scope_guard_tolerates_an_inner_rewind_below_its_mark() {
    let pool = MemoryPool::new("regress", 4 << 20).unwrap();
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default());
    let early = arena.checkpoint();
    arena.alloc_slice(100, 0u8);
    {
        let guard = arena.scope_guard();
        guard.alloc_slice(100, 0u8);
        // SAFETY: nothing allocated after `early` is used again.
        unsafe { guard.rewind(early) };
    }
    assert_eq!(arena.bytes_used(), 0);
}

/// The panic of a failed growing helper names the bytes the pool was asked for, not 0.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn growing_helper_panic_names_the_size() {
    let pool = MemoryPool::new("tiny", 64 * 1024).unwrap();
    let arena = MemoryArena::new(&pool);
    let msg = panic_message(|| {
        arena.alloc_slice_from_iter((0..1_000_000u32).filter(|_| true));
    });
    assert!(msg.contains("'tiny'"), "{msg}");
    assert!(!msg.contains("allocate 0 bytes"), "{msg}");
}

/// When an arena really cannot get a block, the pool counts (and reports) exactly one
/// exhaustion per failed request, whatever tentative requests came before it; a request
/// no block could ever hold is `TooLarge`, not an exhaustion.
#[test]
fn a_real_arena_failure_is_counted_once_by_the_pool() {
    let pool = MemoryPool::new("full", 64 * 1024).unwrap();
    let arena = MemoryArena::new(&pool);
    for (request, exhaustions) in [(8 * 1024, 1), (20 * 1024, 1), (100_000, 0)] {
        let before = pool.stats().exhaustions;
        let hog = pool.allocate_block(60 * 1024).unwrap();
        assert!(arena.try_alloc_slice(request, 0u8).is_err());
        assert_eq!(
            pool.stats().exhaustions - before,
            exhaustions,
            "request {request}"
        );
        // SAFETY: from this pool, not used afterwards.
        unsafe { pool.free_block(hog) };
    }
}

/// A top allocation that has to move to another block to grow stops counting as used.
#[test]
fn a_moved_top_allocation_gives_its_bytes_back() {
    let pool = MemoryPool::new("regress", 4 << 20).unwrap();
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4096));
    arena.alloc_slice(4096 - 100, 0u8); // the block has 100 bytes left
    // The pool's range right after the block is taken: the block cannot grow in place.
    let neighbour = pool.allocate_block(4096).unwrap();
    let old = std::alloc::Layout::from_size_align(100, 1).unwrap();
    let p = arena.alloc(old);
    assert_eq!(arena.bytes_used(), 4096);
    // SAFETY: `p` is live with `old`; only the result is used afterwards.
    let q = unsafe { arena.realloc(p, old, 8000) }.unwrap();
    assert_ne!(p, q, "it cannot grow in place");
    assert_eq!(arena.block_count(), 2);
    assert_eq!(arena.bytes_used(), 4096 - 100 + 8000);
    assert!(arena.high_watermark() >= 4096 + 8000, "the copy held both");
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(neighbour) };
}
