//! Every arena kind takes its blocks from its pool and gives them back through one place
//! (the chain's `take_block` / `release`), which counts them: each arena's figures account
//! for every `allocate_block` and `free_block` its pool saw.

mod common;

use nebula_memory::{
    Arena, ArenaConfig, DoubleBufferedArena, FrameArena, MemoryArena, MemoryPool, SharedArena,
};

use common::{KIB, assert_drained};

/// `(allocations, frees)` the pool saw.
fn pool_ops(pool: &MemoryPool) -> (u64, u64) {
    let s = pool.stats();
    (s.allocations, s.frees)
}

/// The arena's counts are exactly its (private) pool's.
#[track_caller]
fn assert_counts(pool: &MemoryPool, s: &nebula_memory::ArenaStats, when: usize) {
    assert_eq!(
        pool_ops(pool),
        (s.blocks_taken, s.blocks_returned),
        "frame {when}"
    );
}

/// The growing, resetting and trimming arena of the tests below.
fn config() -> ArenaConfig {
    ArenaConfig::default()
        .first_block(16 * KIB)
        .trim_after_resets(3)
}

/// A frame pattern that grows over several blocks, resets, spikes, trims.
fn frames<A: Arena + ?Sized>(arena: &A, frame: usize) {
    let n = if frame % 7 == 3 { 40_000 } else { 2_000 };
    for i in 0..n {
        arena.alloc_val(i as u64);
    }
}

#[test]
fn memory_arena() {
    let pool = MemoryPool::new("ops_memory", 64 << 20).unwrap();
    let mut arena = MemoryArena::with_config(&pool, config());
    for frame in 0..30 {
        frames(&arena, frame);
        assert_counts(&pool, &arena.stats(), frame);
        arena.reset();
    }
    arena.trim_spares();
    let s = arena.stats();
    assert!(s.blocks_taken > 3, "the pattern grows and trims: {s:?}");
    assert_eq!(pool_ops(&pool), (s.blocks_taken, s.blocks_returned));
    drop(arena);
    assert_drained(&pool);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn shared_arena_on_several_threads() {
    let pool = MemoryPool::new("ops_shared", 64 << 20).unwrap();
    let mut arena = SharedArena::with_config(&pool, config());
    for frame in 0..10 {
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| frames(&arena, frame));
            }
        });
        assert_counts(&pool, &arena.stats(), frame);
        arena.reset();
    }
    let s = arena.stats();
    assert_eq!(pool_ops(&pool), (s.blocks_taken, s.blocks_returned));
    drop(arena);
    assert_drained(&pool);
}

#[test]
fn double_buffered_arena() {
    let pool = MemoryPool::new("ops_double", 64 << 20).unwrap();
    let mut frames_arena = DoubleBufferedArena::new(&pool);
    for frame in 0..12 {
        frames(frames_arena.current(), frame);
        let (a, b) = (
            frames_arena.current().stats(),
            frames_arena.previous().stats(),
        );
        assert_eq!(
            pool_ops(&pool),
            (
                a.blocks_taken + b.blocks_taken,
                a.blocks_returned + b.blocks_returned
            ),
            "frame {frame}"
        );
        frames_arena.swap();
    }
    drop(frames_arena);
    assert_drained(&pool);
}

#[test]
fn frame_arena() {
    static POOL: std::sync::OnceLock<MemoryPool> = std::sync::OnceLock::new();
    let pool: &'static MemoryPool =
        POOL.get_or_init(|| MemoryPool::new("ops_frame", 4 << 20).unwrap());
    for capacity in [1, 100, 64 * KIB, 1 << 20] {
        let arena = FrameArena::try_new_in(pool, capacity).unwrap();
        assert_eq!(
            arena.bytes_remaining(),
            capacity,
            "exactly the capacity asked for"
        );
        let s = arena.stats();
        assert_eq!((s.blocks_taken, s.blocks_returned), (1, 0));
        assert_eq!(pool.stats().blocks_in_use, 1);
        drop(arena);
        assert_drained(pool);
    }
    assert_eq!(pool_ops(pool), (4, 4));
}
