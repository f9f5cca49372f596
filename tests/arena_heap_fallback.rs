//! `ArenaConfig::heap_fallback`: when the pool is exhausted the arena takes its block from
//! the heap (the pool's counters do not move), the next reset frees it, and without the
//! option the same request fails.

use nebula_memory::Arena;
use nebula_memory::{AllocError, ArenaConfig, MemoryArena, MemoryPool, PoolError};

mod common;
use common::{KIB, assert_drained};

#[test]
fn heap_fallback_when_the_pool_is_exhausted() {
    let pool = MemoryPool::new("fallback", 256 * KIB).unwrap();
    let config = ArenaConfig::default()
        .first_block(16 * KIB)
        .heap_fallback(true);
    let mut arena = MemoryArena::with_config(&pool, config);
    let first = arena.alloc_val(1u64);
    assert_eq!(*first, 1);
    let held_pool_only = arena.bytes_held();
    // Take everything else in the pool.
    let hog = pool
        .allocate_block(pool.stats().largest_free)
        .expect("the rest of the pool");
    let before = pool.stats();
    assert_eq!(before.largest_free, 0);

    // 200 000 bytes (20 000 under Miri): less than the pool's capacity, more than it has
    // free.
    let n = if cfg!(miri) { 5_000 } else { 50_000 };
    let big = arena.alloc_slice_fill_with(n, |i| i as u32);
    big[n - 1] += 1;
    assert_eq!(big[n - 1], n as u32);
    assert!(
        big.iter()
            .take(n - 1)
            .enumerate()
            .all(|(i, &x)| x == i as u32)
    );
    let boxed = arena.alloc_boxed(String::from("on the heap"));
    assert_eq!(&*boxed, "on the heap");
    drop(boxed);
    assert!(arena.block_count() >= 2);
    assert!(arena.bytes_held() >= held_pool_only + 4 * n);
    let after = pool.stats();
    assert_eq!(
        (after.in_use, after.allocations, after.frees),
        (before.in_use, before.allocations, before.frees),
        "heap blocks do not come from the pool"
    );

    arena.reset();
    assert_eq!(
        arena.bytes_held(),
        held_pool_only,
        "reset frees the heap block"
    );
    assert_eq!(arena.block_count(), 1);
    assert_eq!(pool.stats().in_use, before.in_use);
    assert_eq!(arena.alloc_slice(10, 4u8), &[4; 10]);

    // An arena whose only block came from the heap holds nothing after reset.
    let mut heap_only = MemoryArena::with_config(&pool, config);
    assert_eq!(heap_only.alloc_slice(1000, 5u8), &[5; 1000]);
    assert_eq!(heap_only.block_count(), 1);
    heap_only.reset();
    assert_eq!((heap_only.block_count(), heap_only.bytes_held()), (0, 0));
    assert_eq!(heap_only.alloc_slice(1000, 6u8), &[6; 1000]);
    drop(heap_only);

    // Without fallback, the same request fails.
    let strict = MemoryArena::with_config(&pool, ArenaConfig::default());
    assert!(matches!(
        strict.try_alloc_slice(50_000, 0u32),
        Err(AllocError::Pool(PoolError::Exhausted { .. }))
    ));
    drop(strict);
    drop(arena);
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(hog) };
    assert_drained(&pool);
}
