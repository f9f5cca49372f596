//! What a `MemoryArena` reports and what the pool sees of it: labels counted per name and
//! cleared by reset, `stats()` and its `Display`, and blocks given back to the pool by
//! `trim_spares` and by drop.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use nebula_memory::Arena;
use std::alloc::Layout;

use nebula_memory::{ArenaConfig, MemoryArena};

mod common;
use common::{KIB, assert_drained, pool};

#[test]
fn labels_are_counted_and_cleared_by_reset() {
    let pool = pool("labels");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_labelled(Layout::new::<[u8; 48]>(), "mesh");
    arena.alloc_labelled(Layout::new::<[u8; 16]>(), "mesh");
    arena
        .try_alloc_labelled(Layout::new::<u64>(), "ai")
        .unwrap();
    arena.alloc_val(0u64); // untagged
    assert_eq!(arena.label_bytes("mesh"), 64);
    assert_eq!(arena.label_bytes("ai"), 8);
    assert_eq!(arena.label_bytes("none"), 0);
    assert_eq!(arena.stats().labels, vec![("mesh", 64), ("ai", 8)]);
    let text = arena.stats().to_string();
    assert!(text.contains("mesh") && text.contains("64 B"), "{text}");
    arena.reset();
    assert_eq!(arena.label_bytes("mesh"), 0);
    assert!(arena.stats().labels.is_empty());
}

#[test]
fn stats_are_consistent_and_readable() {
    let pool = pool("stats");
    let mut arena = MemoryArena::new(&pool);
    let s = arena.stats();
    assert_eq!(
        (s.pool, s.bytes_used, s.block_count, s.bytes_held),
        ("stats", 0, 0, 0)
    );
    arena.alloc_val(0u8);
    arena.alloc_val(0u32); // 3 bytes of padding first
    assert_eq!(arena.bytes_used(), 8);
    // A second block.
    if cfg!(miri) {
        // The same layout in 3 000 closure calls, not 300 000.
        arena.alloc_slice(3_000, [1u8; 100]);
    } else {
        arena.alloc_slice(300_000, 1u8);
    }
    let s = arena.stats();
    assert_eq!(s.bytes_used, arena.bytes_used());
    assert_eq!(s.block_count, 2);
    assert_eq!(s.bytes_held, pool.stats().in_use);
    assert!(s.high_watermark >= s.bytes_used);
    let text = s.to_string();
    assert!(text.contains("arena on 'stats'"), "{text}");
    assert!(text.contains("2 blocks"), "{text}");
    assert!(text.contains("KiB"), "{text}");
    let peak = arena.high_watermark();
    arena.reset();
    assert_eq!(
        arena.high_watermark(),
        peak,
        "the high watermark survives reset"
    );
    assert_eq!(arena.generation(), 1);
    let text = arena.stats().to_string();
    assert!(text.contains("1 block,"), "{text}");
    assert!(text.contains("0 B used"), "{text}");
    assert!(format!("{arena:?}").contains("MemoryArena"));
}

#[test]
fn trim_spares_gives_cached_blocks_back() {
    let pool = pool("trim");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    arena.alloc_val(1u8);
    arena.scope(|a| {
        for _ in 0..20 {
            a.alloc_slice(3000, 0u8);
        }
    });
    assert!(arena.block_count() > 1);
    arena.trim_spares();
    assert_eq!(arena.block_count(), 1);
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    assert_eq!(pool.stats().blocks_in_use, 1);
}

#[test]
fn drop_returns_every_block() {
    let pool = pool("drop");
    {
        let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
        for i in 0..100 {
            if cfg!(miri) {
                // The same layout in `i` closure calls, not `i * 100`.
                arena.alloc_slice(i, [0u8; 100]);
            } else {
                arena.alloc_slice(i * 100, 0u8);
            }
        }
        assert!(pool.stats().blocks_in_use > 1);
    }
    assert_drained(&pool);
}
