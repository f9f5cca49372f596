//! The reset policy of `MemoryArena`: keep one block sized for the next frame, so a steady
//! frame workload does no pool operation at all after warm-up; shrink the kept block after
//! `trim_after_resets` quiet frames following a spike (and never with `0`); give every
//! block back when the arena is dropped.
//!
//! Each test uses a private pool so that `PoolStats::allocations` / `frees` count this
//! arena's pool operations only.

use nebula_memory::Arena;
use std::alloc::Layout;

use allocator_api2::vec::Vec as AVec;
use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};
use proptest::prelude::*;

mod common;
use common::{KIB, assert_drained, pool};

/// One frame: `300 * scale` allocations of 64..1264 bytes (about 200 KiB per unit of
/// scale, three times the default first block), alignments 8 / 16 / 64, every byte
/// written. Returns the bytes requested. Under Miri: `30 * scale` allocations ten times
/// as large, about the same bytes in a tenth of the calls.
fn frame(arena: &MemoryArena, scale: usize) -> usize {
    let (count, factor) = if cfg!(miri) { (30, 10) } else { (300, 1) };
    let mut total = 0;
    for i in 0..count * scale {
        let size = (64 + (i * 37) % 1200) * factor;
        let align = [8, 16, 64][i % 3];
        let p = arena.alloc(Layout::from_size_align(size, align).unwrap());
        assert_eq!(p.as_ptr() as usize % align, 0);
        // SAFETY: `size` fresh bytes.
        unsafe { p.as_ptr().write_bytes(i as u8, size) };
        total += size;
    }
    total
}

fn pool_ops(pool: &MemoryPool) -> (u64, u64) {
    let s = pool.stats();
    (s.allocations, s.frees)
}

#[test]
fn steady_frames_do_no_pool_operations_after_warm_up() {
    for config in [
        ArenaConfig::default(),
        ArenaConfig::default().first_block(4 * KIB),
        ArenaConfig::default()
            .first_block(4 * KIB)
            .trim_after_resets(1),
        ArenaConfig::default().max_block(32 * KIB),
    ] {
        let pool = pool("steady");
        let mut arena = MemoryArena::with_config(&pool, config);
        let bytes = frame(&arena, 1);
        assert!(
            bytes > config.first_block,
            "the frame must outgrow the first block"
        );
        assert!(arena.block_count() > 1, "{config:?}");
        arena.reset();
        assert_eq!(arena.block_count(), 1);
        frame(&arena, 1);
        arena.reset();

        let ops = pool_ops(&pool);
        let held = arena.bytes_held();
        let mut high = arena.high_watermark();
        for _ in 0..if cfg!(miri) { 10 } else { 100 } {
            frame(&arena, 1);
            assert_eq!(arena.block_count(), 1, "{config:?}: the frame spilled over");
            arena.reset();
            assert_eq!(arena.block_count(), 1);
            assert_eq!(arena.bytes_used(), 0);
            assert_eq!(arena.bytes_held(), held);
            assert!(arena.high_watermark() >= high);
            high = arena.high_watermark();
        }
        assert_eq!(
            pool_ops(&pool),
            ops,
            "{config:?}: steady frames touched the pool"
        );
        assert_eq!(pool.stats().in_use, arena.bytes_held());
        drop(arena);
        assert_drained(&pool);
    }
}

#[test]
fn steady_frames_with_collections_and_scopes() {
    // Under Miri the collections are a tenth (and 5 steady runs instead of 50).
    let (pushes, entries, runs) = if cfg!(miri) {
        (2_000u32, 200u32, 5)
    } else {
        (20_000, 2_000, 50)
    };
    let pool = pool("steady-collections");
    let mut arena = MemoryArena::new(&pool);
    let run = |arena: &mut MemoryArena| {
        {
            let mut v = AVec::new_in(&*arena);
            for i in 0..pushes {
                v.push(i);
            }
            let mut map = hashbrown::HashMap::new_in(&*arena);
            for i in 0..entries {
                map.insert(i, v[i as usize]);
            }
            assert_eq!(map[&(entries - 1)], entries - 1);
        }
        arena.scope(|a| {
            if cfg!(miri) {
                // The same layout in 1 000 closure calls, not 100 000.
                a.alloc_slice(1_000, [0u8; 100]);
            } else {
                a.alloc_slice(100_000, 0u8);
            }
        });
        frame(arena, 1);
        arena.reset();
    };
    run(&mut arena);
    run(&mut arena);
    let ops = pool_ops(&pool);
    for _ in 0..runs {
        run(&mut arena);
        assert_eq!(arena.block_count(), 1);
    }
    assert_eq!(pool_ops(&pool), ops, "steady frames touched the pool");
}

#[test]
fn growing_frames_end_with_one_block() {
    let pool = pool("growing");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    for scale in 1..=8 {
        frame(&arena, scale);
        arena.reset();
        assert_eq!(arena.block_count(), 1);
        assert_eq!(arena.bytes_used(), 0);
        assert_eq!(pool.stats().blocks_in_use, 1);
        assert_eq!(pool.stats().in_use, arena.bytes_held());
    }
    // Now the largest frame fits in the kept block: the smaller ones do too.
    let ops = pool_ops(&pool);
    for scale in (1..=8).rev() {
        frame(&arena, scale);
        assert_eq!(arena.block_count(), 1);
        arena.reset();
    }
    assert_eq!(pool_ops(&pool), ops);
}

/// Runs `quiet` steady frames after a spike; returns `bytes_held` after each reset.
fn spike_then_quiet(config: ArenaConfig, quiet: usize) -> (usize, usize, Vec<usize>) {
    let pool = pool("spike");
    let mut arena = MemoryArena::with_config(&pool, config);
    for _ in 0..3 {
        frame(&arena, 1);
        arena.reset();
    }
    let steady = arena.bytes_held();
    frame(&arena, 10);
    arena.reset();
    let spiked = arena.bytes_held();
    assert_eq!(arena.block_count(), 1);
    let mut held = Vec::new();
    for _ in 0..quiet {
        frame(&arena, 1);
        arena.reset();
        assert_eq!(arena.block_count(), 1);
        held.push(arena.bytes_held());
    }
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    drop(arena);
    // Every block is back in the pool after drop.
    assert_drained(&pool);
    (steady, spiked, held)
}

#[test]
fn a_spike_is_trimmed_after_trim_after_resets_quiet_frames() {
    let quiet = if cfg!(miri) { 8 } else { 20 };
    let (steady, spiked, held) =
        spike_then_quiet(ArenaConfig::default().trim_after_resets(5), quiet);
    assert!(
        spiked > 5 * steady,
        "the spike must grow the kept block ({spiked} vs {steady})"
    );
    for (i, &h) in held.iter().take(4).enumerate() {
        assert_eq!(h, spiked, "trimmed too early, after {} quiet frames", i + 1);
    }
    let after = held[4];
    assert!(
        after <= steady + steady / 4,
        "after 5 quiet frames the kept block is {after} B, steady size {steady} B"
    );
    assert!(
        after >= steady / 2,
        "trimmed below the frames' needs: {after} B"
    );
    // And it stays there: no more pool traffic.
    assert!(held[4..].iter().all(|&h| h == after), "{held:?}");
}

#[test]
fn the_default_trims_after_120_quiet_frames() {
    let (steady, spiked, held) = spike_then_quiet(ArenaConfig::default(), 121);
    assert!(spiked > 5 * steady);
    assert_eq!(held[118], spiked, "trimmed before 120 quiet frames");
    assert!(
        held[119] <= steady + steady / 4,
        "not trimmed after 120 quiet frames"
    );
}

#[test]
fn trim_after_resets_zero_never_shrinks() {
    let quiet = if cfg!(miri) { 10 } else { 60 };
    let (steady, spiked, held) =
        spike_then_quiet(ArenaConfig::default().trim_after_resets(0), quiet);
    assert!(spiked > 5 * steady);
    assert!(
        held.iter().all(|&h| h == spiked),
        "trim_after_resets(0) shrank the kept block: {held:?}"
    );
}

#[test]
fn one_busy_frame_among_quiet_ones_restarts_the_count() {
    let pool = pool("restart");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().trim_after_resets(5));
    frame(&arena, 10);
    arena.reset();
    let spiked = arena.bytes_held();
    for _ in 0..4 {
        frame(&arena, 1);
        arena.reset();
    }
    // A frame that needs more than half of the kept block resets the quiet count.
    frame(&arena, 6);
    arena.reset();
    for _ in 0..4 {
        frame(&arena, 1);
        arena.reset();
        assert_eq!(
            arena.bytes_held(),
            spiked,
            "the busy frame did not restart the count"
        );
    }
    frame(&arena, 1);
    arena.reset();
    assert!(arena.bytes_held() < spiked / 2);
}

#[test]
fn drop_gives_every_block_back() {
    let pool = pool("drop");
    {
        let mut arena =
            MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
        frame(&arena, 3);
        let mark = arena.checkpoint();
        frame(&arena, 3);
        // SAFETY: nothing allocated after `mark` is used again.
        unsafe { arena.rewind(mark) };
        assert!(arena.block_count() > 2, "spares are cached");
        assert_eq!(pool.stats().blocks_in_use, arena.block_count());
        arena.reset();
        frame(&arena, 5);
    }
    assert_drained(&pool);
}

/// One step of a frame in [`a_reset_keeps_no_more_than_the_deepest_point`].
#[derive(Clone, Debug)]
enum Step {
    /// An allocation of this many bytes, in the outer arena or the nested one.
    Alloc { size: usize, nested: bool },
    /// A vector pushed to this length (it moves as it outgrows a block, leaving copies).
    Vec { len: usize, nested: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            1usize..if cfg!(miri) { 20_000 } else { 200_000 },
            any::<bool>()
        )
            .prop_map(|(size, nested)| Step::Alloc { size, nested }),
        (
            1usize..if cfg!(miri) { 2_000 } else { 20_000 },
            any::<bool>()
        )
            .prop_map(|(len, nested)| Step::Vec { len, nested }),
    ]
}

proptest! {
    #![proptest_config(common::proptest_config(64))]

    /// What stays after a reset fits in what the frame held at its deepest: an outer arena
    /// and one nested in it (the shape of nested `with_scratch` calls) run frames of random
    /// allocations and growing vectors; after each frame's resets (the nested arena's
    /// first) the pool's use is at most the most it reached during the frame.
    #[test]
    fn a_reset_keeps_no_more_than_the_deepest_point(
        first in prop_oneof![Just(4 * KIB), Just(16 * KIB), Just(64 * KIB)],
        frames in proptest::collection::vec(
            proptest::collection::vec(step(), 1..12),
            1..6,
        ),
    ) {
        use proptest::prelude::prop_assert;
        let pool = pool("deepest");
        let config = ArenaConfig::default().first_block(first);
        let mut outer = MemoryArena::with_config(&pool, config);
        let mut inner = MemoryArena::with_config(&pool, config);
        for frame in &frames {
            let mut deepest = pool.stats().in_use;
            for s in frame {
                match *s {
                    Step::Alloc { size, nested } => {
                        let arena = if nested { &inner } else { &outer };
                        arena.alloc_slice(size, 7u8);
                    }
                    Step::Vec { len, nested } => {
                        let arena = if nested { &inner } else { &outer };
                        let mut v = AVec::new_in(arena);
                        for i in 0..len as u32 {
                            v.push(i);
                        }
                        prop_assert!(v.len() == len);
                    }
                }
                deepest = deepest.max(pool.stats().in_use);
            }
            inner.reset();
            outer.reset();
            let after = pool.stats().in_use;
            prop_assert!(after <= deepest, "{after} after the resets, {deepest} at the deepest");
        }
        drop((outer, inner));
        assert_drained(&pool);
    }
}
