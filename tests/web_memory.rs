//! On the web (wasm32) linear memory only grows: what the pools take is taken for good. The
//! pools grow by segments there, so a little use of the three global pools takes a
//! little memory, and a spike's blocks are reused by the next spike instead of adding to
//! it. Measured with the `memory.size` instruction (64 KiB pages) around the use. This
//! binary has tests on wasm32 only (elsewhere pools reserve address space, which costs no
//! memory: tests/pool_rss.rs measures the resident set there).
#![cfg(target_family = "wasm")]

use nebula_memory::{Arena, MemoryArena, MemoryPool, engine_arena, game_arena, with_scratch};

const PAGE: usize = 64 * 1024;
const MIB: usize = 1 << 20;

/// Bytes of linear memory now.
fn memory() -> usize {
    core::arch::wasm32::memory_size(0) * PAGE
}

/// One test only: they share the process's linear memory, so each figure is measured
/// where nothing else runs.
#[test]
fn a_little_use_takes_a_little_memory_and_a_recurring_spike_reuses_its_segments() {
    let before = memory();
    with_scratch(|s| {
        let list = s.alloc_slice_copy(&[7u32; 1000]);
        assert_eq!(list.iter().sum::<u32>(), 7000);
    });
    engine_arena().alloc_str("engine string");
    game_arena().read().alloc_val(42u64);
    let grown = memory() - before;
    println!("three global pools, a little use each: linear memory grew {grown} bytes");
    assert!(grown <= 16 * MIB, "grew {grown} bytes");

    // A game loop on a pool of 256 MiB: small frames, and every 100th frame a spike of
    // 24 allocations of 1 MiB, the pool maintained once a frame (as the Bevy plugin does).
    let pool = MemoryPool::new("web-spike", 256 * MIB).unwrap();
    assert!(pool.grows_by_segments());
    let mut arena = MemoryArena::new(&pool);
    let before = memory();
    let mut after_spike = Vec::new();
    for frame in 1..=500 {
        let spike = frame % 100 == 0;
        for _ in 0..if spike { 24 } else { 1 } {
            arena.alloc_slice(if spike { MIB - 4096 } else { 64 * 1024 }, 1u8);
        }
        arena.reset();
        pool.maintain();
        if spike {
            after_spike.push(memory() - before);
        }
    }
    println!("a spike of 24 MiB every 100 frames: linear memory grew {after_spike:?} bytes");
    // The first spike takes what it needs (its arena's blocks, 31 MiB for 24 of 1 MiB, and
    // a segment's slack); every later one finds it again and adds nothing.
    let first = after_spike[0];
    assert!(after_spike.iter().all(|&m| m == first), "{after_spike:?}");
    assert!(first <= 2 * 24 * MIB, "{after_spike:?}");
}
