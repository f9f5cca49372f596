//! A long pool exhaustion with `heap_fallback`: few heap blocks, one report. A process of
//! its own: it counts WARN events, and `tracing` caches per call site whether anyone
//! listens, so another test hitting the same call sites at once could hide them.

use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool};

mod common;
use common::KIB;

/// After the pool is exhausted, 5,000 allocations of 1 KiB once made about 4,000 heap
/// blocks, each with its own `malloc` and its own WARN events. Heap blocks now grow like
/// pool blocks, and the episode is reported once.
#[test]
fn a_long_exhaustion_takes_few_heap_blocks_and_warns_once() {
    let pool = MemoryPool::new("fallback_episode", 256 * KIB).unwrap();
    let config = ArenaConfig::default()
        .first_block(16 * KIB)
        .heap_fallback(true);
    let arena = MemoryArena::with_config(&pool, config);
    arena.alloc_val(1u8);
    let hog = pool.allocate_block(pool.stats().largest_free).unwrap();
    let warns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&warns);
    let count_warns = common::OnEvent(move |event: &tracing::Event<'_>| {
        if *event.metadata().level() == tracing::Level::WARN {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let n = if cfg!(miri) { 500 } else { 5_000 };
    tracing::subscriber::with_default(count_warns, || {
        for i in 0..n {
            let s = arena.alloc_slice(KIB, i as u8);
            assert_eq!(s[KIB - 1], i as u8);
        }
    });
    let s = arena.stats();
    assert!(
        (1..=20).contains(&s.heap_blocks_taken),
        "{} heap blocks for {n} allocations of 1 KiB",
        s.heap_blocks_taken
    );
    assert_eq!(
        warns.load(std::sync::atomic::Ordering::Relaxed),
        2,
        "one exhaustion WARN and one heap-fallback WARN for the whole episode"
    );
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(hog) };
}
