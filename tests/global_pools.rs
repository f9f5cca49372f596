//! The three global pools with their defaults. This binary never calls
//! `configure_global_pools` (that is `tests/global_config.rs`, a process of its own).

use std::collections::HashSet;

use nebula_memory::{
    GlobalPoolConfig, MemoryBlock, MemoryPool, engine_pool, game_pool, scratch_pool,
};

const MIB: usize = 1 << 20;

fn pools() -> [(&'static MemoryPool, &'static str, usize); 3] {
    [
        (engine_pool(), "engine", 256 * MIB),
        (game_pool(), "game", 512 * MIB),
        (scratch_pool(), "scratch", 64 * MIB),
    ]
}

#[test]
fn names_and_default_capacities() {
    let defaults = GlobalPoolConfig::default();
    assert_eq!(
        (defaults.engine, defaults.game, defaults.scratch),
        (256 * MIB, 512 * MIB, 64 * MIB)
    );
    for (pool, name, capacity) in pools() {
        assert_eq!(pool.name(), name);
        let s = pool.stats();
        assert_eq!(s.capacity, capacity, "{name}");
        assert_eq!(s.in_use + s.free, s.capacity);
    }
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn each_accessor_returns_one_pool_for_the_whole_process() {
    // Many threads racing for first use all get the same pool.
    let addresses: Vec<[usize; 3]> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| pools().map(|(pool, _, _)| pool as *const MemoryPool as usize)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let here = pools().map(|(pool, _, _)| pool as *const MemoryPool as usize);
    assert!(addresses.iter().all(|a| *a == here));
    assert_eq!(
        here.iter().collect::<HashSet<_>>().len(),
        3,
        "three distinct pools"
    );
}

#[test]
fn global_pools_hand_out_disjoint_blocks() {
    let all = pools();
    for (pool, name, _) in all {
        let block = pool.allocate_block(100_000).unwrap();
        // SAFETY: a live block of `pool`.
        let header = unsafe { block.as_ref() };
        assert!(header.capacity() >= 100_000);
        assert_eq!(header.data().as_ptr() as usize % 16, 0);
        // SAFETY: 100,000 usable bytes, ours.
        unsafe {
            MemoryBlock::data_of(block)
                .as_ptr()
                .write_bytes(0x42, 100_000)
        };
        for (other, other_name, _) in all {
            assert_eq!(
                other.contains(block.as_ptr().cast()),
                other_name == name,
                "block of {name} vs region of {other_name}"
            );
        }
        // SAFETY: from `pool`, not used afterwards.
        unsafe { pool.free_block(block) };
    }
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn global_pools_are_shared_between_threads() {
    // Every byte is checked one by one: smaller blocks under Miri.
    let unit = if cfg!(miri) { 16 } else { 1000 };
    std::thread::scope(|s| {
        for t in 0..4u8 {
            s.spawn(move || {
                for (pool, _, _) in pools() {
                    let blocks: Vec<_> = (1..=32)
                        .map(|i| (pool.allocate_block(i * unit).unwrap(), i * unit))
                        .collect();
                    for &(b, n) in &blocks {
                        // SAFETY: `n` usable bytes of our live block.
                        unsafe { MemoryBlock::data_of(b).as_ptr().write_bytes(t, n) };
                    }
                    for (b, n) in blocks {
                        // SAFETY: as above.
                        let data = unsafe {
                            std::slice::from_raw_parts(MemoryBlock::data_of(b).as_ptr(), n)
                        };
                        assert!(data.iter().all(|&x| x == t));
                        // SAFETY: from `pool`, not used afterwards.
                        unsafe { pool.free_block(b) };
                    }
                }
            });
        }
    });
}
