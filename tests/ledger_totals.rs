//! The ledger's top level adds up to the global pools' `in_use`: every byte of a global
//! pool is charged once, to the tag of the arena that holds it, or shown as the untagged
//! rest. A test binary with one test: it measures the global pools.

use std::alloc::Layout;

use nebula_memory::ledger::{self, tags};
use nebula_memory::{
    Arena, MemoryArena, engine_arena, engine_pool, game_arena, game_pool, scratch_pool,
    thread_arena_alloc, with_scratch,
};

#[test]
fn the_top_level_sums_to_the_global_pools_in_use() {
    engine_arena().alloc_slice(100_000, 1u8);
    game_arena().read().alloc_slice(300_000, 1u8);
    thread_arena_alloc(Layout::new::<[u64; 64]>()).unwrap();
    let untagged = MemoryArena::new(game_pool());
    untagged.alloc_slice(50_000, 1u8);
    let direct = scratch_pool().allocate_block(10_000).unwrap();
    with_scratch(|s| {
        s.alloc_slice(70_000, 1u8);
        let snap = ledger::snapshot();
        let in_use: usize = [engine_pool(), game_pool(), scratch_pool()]
            .iter()
            .map(|p| p.stats().in_use)
            .sum();
        let top: usize = snap
            .tags()
            .filter(|(t, _)| !t.contains('/'))
            .map(|(_, f)| f.held)
            .sum();
        assert_eq!(top + snap.untagged(), in_use, "{snap}");
        assert_eq!(snap.total(), in_use);
        // The untagged rest: the untagged arena's blocks and the block taken directly.
        // SAFETY: `direct` came from `allocate_block` and is a live block.
        let direct_size = unsafe { direct.as_ref() }.capacity() + 32;
        assert_eq!(
            snap.untagged(),
            untagged.bytes_held() + direct_size,
            "{snap}"
        );
        // The crate's own arenas carry their default tags.
        for tag in [
            tags::ENGINE,
            tags::GAME,
            tags::WITH_SCRATCH,
            tags::THREAD_ARENAS,
        ] {
            assert!(snap.tag(tag).is_some_and(|f| f.held > 0), "{tag}: {snap}");
        }
        let scratch = snap.tag(tags::SCRATCH).unwrap().held;
        assert_eq!(
            scratch + direct_size,
            scratch_pool().stats().in_use,
            "{snap}"
        );
    });
    // SAFETY: from `allocate_block` above, not used afterwards.
    unsafe { scratch_pool().free_block(direct) };
}
