//! Positions in a `MemoryArena`: checkpoints and `rewind` (across blocks, which stay cached
//! and are reused without pool operations; to an empty arena; stale and foreign checkpoints
//! panic), and scopes built on them (`scope`, `scope_guard`), which free what they
//! allocated, also when the closure panics.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use nebula_memory::Arena;
use std::alloc::Layout;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use nebula_memory::{ArenaConfig, MemoryArena};

mod common;
use common::{KIB, panic_message, pool};

// ------------------------------------------------------------------ checkpoints

#[test]
fn rewind_across_blocks_keeps_and_reuses_them() {
    let pool = pool("rewind");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let keep = arena.alloc_slice_fill_with(100, |i| i as u32);
    let mark = arena.checkpoint();
    let used = arena.bytes_used();
    let layout = Layout::from_size_align(3000, 8).unwrap();
    let first: Vec<NonNull<u8>> = (0..40).map(|_| arena.alloc(layout)).collect();
    let blocks = arena.block_count();
    assert!(blocks >= 3, "expected several blocks, got {blocks}");
    let held = arena.bytes_held();
    let ops = pool.stats();
    // SAFETY: nothing allocated after `mark` is used again.
    unsafe { arena.rewind(mark) };
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(
        arena.block_count(),
        blocks,
        "rewind keeps the blocks cached"
    );
    assert_eq!(arena.bytes_held(), held);
    // The same program again lands on the same addresses, with no pool operation.
    let second: Vec<NonNull<u8>> = (0..40).map(|_| arena.alloc(layout)).collect();
    assert_eq!(first, second, "the cached blocks are reused in order");
    let after = pool.stats();
    assert_eq!(
        (after.allocations, after.frees),
        (ops.allocations, ops.frees),
        "reusing cached blocks must not touch the pool"
    );
    assert!(keep.iter().enumerate().all(|(i, &x)| x == i as u32));
    // Rewinding twice to the same checkpoint is fine; a checkpoint is Copy.
    // SAFETY: as above.
    unsafe { arena.rewind(mark) };
    // SAFETY: as above.
    unsafe { arena.rewind(mark) };
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(mark, arena.checkpoint());
}

#[test]
fn rewind_to_an_empty_arena_checkpoint() {
    let pool = pool("rewind-empty");
    let arena = MemoryArena::new(&pool);
    let start = arena.checkpoint();
    if cfg!(miri) {
        // The same layout in 1 000 closure calls, not 100 000.
        arena.alloc_slice(1_000, [1u8; 100]);
    } else {
        arena.alloc_slice(100_000, 1u8);
    }
    // SAFETY: nothing is used again.
    unsafe { arena.rewind(start) };
    assert_eq!(arena.bytes_used(), 0);
    assert!(arena.block_count() >= 1);
    let s = arena.alloc_slice(10, 2u8);
    assert_eq!(s, &[2; 10]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn stale_checkpoints_panic() {
    let pool = pool("stale");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_val(1u64);
    let before_reset = arena.checkpoint();
    arena.alloc_val(2u64);
    arena.reset();
    arena.alloc_slice(100, 0u8);
    let used = arena.bytes_used();
    // SAFETY: the call panics before touching anything.
    let msg = panic_message(|| unsafe { arena.rewind(before_reset) });
    assert!(msg.contains("'stale'") && msg.contains("reset"), "{msg}");
    assert_eq!(arena.bytes_used(), used);
    // The arena is still fine. (A checkpoint *ahead* of the position is not stale: see
    // tests/arena_rewind_ahead.rs.)
    assert_eq!(arena.alloc_slice(3, 7u8), &[7, 7, 7]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn foreign_checkpoints_panic() {
    let pool = pool("mine");
    let mine = MemoryArena::new(&pool);
    let theirs = MemoryArena::new(&pool);
    mine.alloc_val(1u32);
    theirs.alloc_val(2u32);
    let foreign = theirs.checkpoint();
    let used = mine.bytes_used();
    // SAFETY: the call panics before touching anything.
    let msg = panic_message(|| unsafe { mine.rewind(foreign) });
    assert!(
        msg.contains("'mine'") && msg.contains("another arena"),
        "{msg}"
    );
    assert_eq!(mine.bytes_used(), used);
    assert_eq!(theirs.bytes_used(), 4);
}

// ------------------------------------------------------------------ scopes

#[test]
fn scopes_free_what_they_allocated() {
    let pool = pool("scope");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    arena.alloc_val(5u64);
    let used = arena.bytes_used();
    let sum = arena.scope(|a| {
        let xs = a.alloc_slice_fill_with(10_000, |i| i as u64);
        xs.iter().sum::<u64>()
    });
    assert_eq!(sum, 10_000 * 9_999 / 2);
    assert_eq!(arena.bytes_used(), used);
    let blocks = arena.block_count();
    assert!(blocks > 1);
    {
        let scope = arena.scope_guard();
        let s = scope.alloc_str("temporary");
        assert_eq!(s, "temporary");
        if cfg!(miri) {
            // The same layout in 500 closure calls, not 50 000.
            scope.alloc_slice(500, [0u8; 100]);
        } else {
            scope.alloc_slice(50_000, 0u8);
        }
        assert!(scope.bytes_used() > used);
    }
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(
        arena.block_count(),
        blocks,
        "blocks stay cached after a scope"
    );
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn scopes_free_on_panic() {
    let pool = pool("scope-panic");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let keep = arena.alloc_slice_fill_with(64, |i| i as u8) as *const [u8];
    let used = arena.bytes_used();
    let r = catch_unwind(AssertUnwindSafe(|| {
        arena.scope(|a| {
            if cfg!(miri) {
                // The same layout in 800 closure calls, not 20 000.
                a.alloc_slice(800, [1u32; 25]);
            } else {
                a.alloc_slice(20_000, 1u32);
            }
            panic!("inside scope");
        })
    }));
    assert!(r.is_err());
    assert_eq!(arena.bytes_used(), used, "scope freed nothing on panic");
    let r = catch_unwind(AssertUnwindSafe(|| {
        let g = arena.scope_guard();
        if cfg!(miri) {
            g.alloc_slice(800, [1u32; 25]);
        } else {
            g.alloc_slice(20_000, 1u32);
        }
        panic!("inside guard");
    }));
    assert!(r.is_err());
    assert_eq!(arena.bytes_used(), used, "guard freed nothing on panic");
    // SAFETY: `keep` was allocated before both scopes, which only freed their own memory.
    let keep = unsafe { &*keep };
    assert!(keep.iter().enumerate().all(|(i, &x)| x == i as u8));
    assert_eq!(arena.alloc_slice(2, 3u8), &[3, 3]);
}

// ------------------------------------------------------------------ the compile-time rules

/// The patterns the `compile_fail` doctests get wrong (an allocation leaving its scope,
/// `reset` while a borrow or a collection is alive, a destructor in `alloc_val`), done
/// right: they compile and run.
#[test]
fn the_refused_patterns_done_right() {
    use allocator_api2::vec::Vec as AVec;
    use nebula_memory::with_scratch;

    let pool = pool("done_right");
    let mut arena = MemoryArena::new(&pool);
    let n = arena.scope(|a| *a.alloc_val(1u32) + 1);
    assert_eq!(n, 2);
    {
        let mut v = AVec::new_in(&arena);
        v.push(1u32);
    }
    let boxed = arena.alloc_boxed(String::from("dropped properly"));
    assert_eq!(boxed.len(), 16);
    drop(boxed);
    arena.reset();
    assert_eq!(arena.bytes_used(), 0);
    let len = with_scratch(|s| s.alloc_slice(16, 0u8).len());
    assert_eq!(len, 16);
}
