//! A `tracing` subscriber that allocates from the arena whose exhaustion it is told about.
//! The arena once emitted the pool's exhaustion WARN while holding its chain lock, so a
//! subscriber allocating from the same arena (and needing a block) waited for that lock on
//! its own thread for ever. A process of its own: it sizes the global engine pool.

use nebula_memory::Arena;
mod common;

use std::cell::Cell;
use std::sync::mpsc;
use std::time::Duration;

use nebula_memory::{
    AllocError, GlobalPoolConfig, PoolError, configure_global_pools, engine_arena, engine_pool,
};

const MIB: usize = 1 << 20;

thread_local! {
    static IN_EVENT: Cell<bool> = const { Cell::new(false) };
    static ALLOCATED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Allocates 8 bytes from `engine_arena()` for every event it sees (once per thread at a
/// time): a log line kept in engine memory.
fn log_to_engine_memory(_: &tracing::Event<'_>) {
    if !IN_EVENT.replace(true) {
        let v = engine_arena().alloc_val(42u64);
        ALLOCATED.set(Some(*v));
        IN_EVENT.set(false);
    }
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_subscriber_may_allocate_from_the_exhausted_arena() {
    configure_global_pools(GlobalPoolConfig {
        engine: 4 * MIB,
        ..GlobalPoolConfig::default()
    })
    .unwrap();
    // Another thread takes 3 MiB of the 4 MiB engine pool.
    let taken = std::thread::spawn(|| engine_pool().allocate_block(3 * MIB).unwrap().addr())
        .join()
        .unwrap();

    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let result =
            tracing::subscriber::with_default(common::OnEvent(log_to_engine_memory), || {
                engine_arena().try_alloc(std::alloc::Layout::from_size_align(3 * MIB, 16).unwrap())
            });
        done.send((result.map(|_| ()), ALLOCATED.get())).unwrap();
    });
    let (result, logged) = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("the allocation never returned: the subscriber deadlocked on the arena");
    assert!(
        matches!(
            result,
            Err(AllocError::Pool(PoolError::Exhausted {
                pool: "engine",
                ..
            }))
        ),
        "{result:?}"
    );
    assert_eq!(logged, Some(42), "the subscriber allocated from the arena");
    assert!(taken.get() != 0);
}
