//! A scratch pool smaller than the crate's default first blocks (`configure_global_pools`
//! with `scratch: 4096`): `thread_arena_alloc` answers `None` for what cannot fit, as its
//! docs promise, and `with_scratch` serves what fits and refuses the rest with an error;
//! neither panics about an `ArenaConfig::first_block` the caller never set (the crate's
//! defaults are defaults there, not demands). A process of its own: it configures the
//! global pools.

use std::alloc::Layout;

use nebula_memory::{
    Arena, GlobalPoolConfig, configure_global_pools, scratch_pool, thread_arena_alloc,
    thread_arena_reset, with_scratch,
};

const MIB: usize = 1 << 20;

/// Runs `f` on a thread of its own, which gives its arenas' blocks back as it ends: the
/// pool holds one block at a time.
fn on_a_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "spawns threads (none on wasm32-wasip1)"
)]
fn a_scratch_pool_smaller_than_the_default_blocks_serves_what_fits() {
    configure_global_pools(GlobalPoolConfig {
        engine: MIB,
        game: MIB,
        scratch: 4096,
    })
    .unwrap();
    assert_eq!(scratch_pool().name(), "scratch");

    // The thread arena: a small request is served from a block sized to the pool, one
    // that can never fit is `None`.
    on_a_thread(|| {
        let small = thread_arena_alloc(Layout::new::<[u64; 4]>()).expect("32 bytes fit");
        // SAFETY: 32 bytes of this frame's thread arena, ours until its reset below.
        unsafe { small.cast::<[u64; 4]>().write([7; 4]) };
        assert!(thread_arena_alloc(Layout::from_size_align(MIB, 16).unwrap()).is_none());
        assert!(thread_arena_alloc(Layout::from_size_align(4096, 16).unwrap()).is_none());
        // SAFETY: `small` is not used afterwards.
        unsafe { thread_arena_reset() };
        assert!(
            thread_arena_alloc(Layout::new::<u64>()).is_some(),
            "usable after"
        );
    });

    // `with_scratch`: small values fit, a request beyond the pool is an error that names
    // the pool, and the arena stays usable. A nested scope needs a second block, which a
    // one-block pool has not: an exhaustion, not a panic.
    on_a_thread(|| {
        let sum = with_scratch(|outer| {
            let a = outer.alloc_slice_copy(&[1u32, 2, 3]);
            let err = outer.try_alloc(Layout::from_size_align(MIB, 16).unwrap());
            let msg = err.expect_err("1 MiB in a 4 KiB pool").to_string();
            assert!(msg.contains("'scratch'"), "the error names the pool: {msg}");
            let nested = with_scratch(|inner| inner.try_alloc(Layout::new::<u32>()).err());
            let msg = nested
                .expect("the only block is the outer scope's")
                .to_string();
            assert!(msg.contains("exhausted"), "{msg}");
            a.iter().sum::<u32>() + *outer.alloc_val(10u32)
        });
        assert_eq!(sum, 16);
    });
}
