//! `configure_global_pools` takes effect before first use and is refused after it. Global
//! state is per process, so this binary holds exactly one test.

use nebula_memory::{
    GlobalPoolConfig, PoolError, configure_global_pools, engine_pool, game_pool, scratch_pool,
};

const MIB: usize = 1 << 20;

#[test]
fn configure_before_first_use_then_refused() {
    // A zero size is refused and changes nothing.
    let zero = GlobalPoolConfig {
        game: 0,
        ..GlobalPoolConfig::default()
    };
    assert_eq!(
        configure_global_pools(zero),
        Err(PoolError::InvalidCapacity {
            pool: "game",
            capacity: 0
        })
    );

    // Before first use the configuration may be set (and set again: the last one counts).
    let first = GlobalPoolConfig {
        engine: 4 * MIB,
        game: 4 * MIB,
        scratch: 4 * MIB,
    };
    configure_global_pools(first).unwrap();
    let config = GlobalPoolConfig {
        engine: 8 * MIB,
        game: 16 * MIB,
        scratch: 2 * MIB + 1,
    };
    configure_global_pools(config).unwrap();

    // First use: the scratch pool is created with the configured size (rounded up to pages).
    let scratch = scratch_pool().stats().capacity;
    assert!(
        (2 * MIB + 1..=2 * MIB + 64 * 1024).contains(&scratch),
        "{scratch}"
    );

    // From now on configuration is closed, whatever is asked, and the refusal names the
    // pool that exists.
    let later = GlobalPoolConfig {
        engine: 32 * MIB,
        game: 32 * MIB,
        scratch: 32 * MIB,
    };
    let err = configure_global_pools(later).unwrap_err();
    assert_eq!(err, PoolError::AlreadyCreated { pool: "scratch" });
    assert!(err.to_string().contains("'scratch'"), "{err}");
    assert_eq!(
        configure_global_pools(zero),
        Err(PoolError::AlreadyCreated { pool: "scratch" })
    );

    // Pools created after the refusal still use the accepted configuration.
    assert_eq!(engine_pool().stats().capacity, 8 * MIB);
    assert_eq!(game_pool().stats().capacity, 16 * MIB);
    assert_eq!(scratch_pool().stats().capacity, scratch);
    assert_eq!(
        (
            engine_pool().name(),
            game_pool().name(),
            scratch_pool().name()
        ),
        ("engine", "game", "scratch")
    );
    // The configured pools work, and their sizes bound what they hand out.
    let block = game_pool().allocate_block(12 * MIB).unwrap();
    assert!(matches!(
        game_pool().allocate_block(12 * MIB),
        Err(PoolError::Exhausted { pool: "game", .. })
    ));
    // SAFETY: from the game pool, not used afterwards.
    unsafe { game_pool().free_block(block) };
    assert!(matches!(
        engine_pool().allocate_block(8 * MIB),
        Err(PoolError::TooLarge { pool: "engine", .. })
    ));
}
