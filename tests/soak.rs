//! Soak: 100,000 frames of a randomized frame workload on a private pool.
//!
//! Asserts that after warm-up the pool's usage and the process's RSS stay flat (spikes are
//! trimmed away again), that a steady frame does no pool operation, and that every block is
//! back in its pool at the end. One `#[test]` in its own binary, since RSS is process-wide.
//!
//! Runs in about 3 s in a debug build (its checks compare slices, one `memcmp` each, not
//! bytes in a loop); `NEBULA_SOAK_FRAMES=1000000 cargo test --release --test soak --
//! --nocapture` runs a longer soak.
//!
//! Not under Miri: 100,000 frames would take days there, and RSS needs /proc. The frame
//! workload's pieces (reset policy, trims, collections, scopes) are covered by the other
//! arena tests, which Miri runs.
#![cfg(not(miri))]

use nebula_memory::Arena;
use std::alloc::Layout;

use allocator_api2::vec::Vec as AVec;
use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};

mod common;
use common::{SplitMix64, assert_drained};

#[cfg(target_os = "linux")]
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[cfg(not(target_os = "linux"))]
fn rss_bytes() -> usize {
    0
}

/// Under valgrind (`scripts/valgrind.sh` sets `NEBULA_UNDER_VALGRIND=1`) `/proc/self/statm`
/// counts valgrind's own memory (shadow memory, its replacement heap and the freed-block
/// queue of that heap), so the RSS assertion is skipped there; the others still hold.
fn under_valgrind() -> bool {
    std::env::var_os("NEBULA_UNDER_VALGRIND").is_some_and(|v| v == "1")
}

/// Whether every byte of `bytes` is `stamp`: the first is, and each equals the one before
/// it. Slice comparisons are a `memcmp` (optimised code, in the standard library) where a
/// byte loop in a debug build made up 70% of the soak's time.
fn all_stamped(bytes: &[u8], stamp: u8) -> bool {
    match bytes.split_first() {
        Some((&first, rest)) => first == stamp && rest == &bytes[..bytes.len() - 1],
        None => true,
    }
}

/// `0, 1, 2, …` as far as the frame's vector and scratch slice go, to compare them with.
struct Ramps {
    u16s: Vec<u16>,
    u32s: Vec<u32>,
}

impl Ramps {
    fn new() -> Self {
        Ramps {
            u16s: (0..1024).collect(),
            u32s: (0..500).collect(),
        }
    }
}

/// One frame: allocations of mixed sizes and alignments, a growing vector, nested scratch
/// work in a second arena, every allocation stamped and checked before the reset.
fn frame(
    arena: &mut MemoryArena<'_>,
    scratch: &mut MemoryArena<'_>,
    rng: &mut SplitMix64,
    ramps: &Ramps,
    spike: bool,
) {
    let count = 20 + rng.below(100);
    let mut live: Vec<(*mut u8, usize, u8)> = Vec::with_capacity(count);
    for i in 0..count {
        let size = 8 + rng.below(if spike { 64 * 1024 } else { 2048 });
        let align = [8, 16, 64][rng.below(3)];
        let p = arena
            .alloc(Layout::from_size_align(size, align).unwrap())
            .as_ptr();
        assert_eq!(p as usize % align, 0);
        let stamp = i as u8;
        // SAFETY: `p` is a fresh allocation of `size` bytes.
        unsafe { p.write_bytes(stamp, size) };
        live.push((p, size, stamp));
    }
    let mut v = AVec::new_in(&*arena);
    for i in 0..rng.below(500) {
        v.push(i as u32);
    }
    scratch.scope(|s| {
        let tmp = s.alloc_slice_fill_with(rng.below(1024), |i| i as u16);
        assert!(*tmp == ramps.u16s[..tmp.len()]);
    });
    assert!(v[..] == ramps.u32s[..v.len()], "vector overwritten");
    drop(v);
    for (p, size, stamp) in live {
        // SAFETY: still live until the reset below.
        let bytes = unsafe { std::slice::from_raw_parts(p, size) };
        assert!(all_stamped(bytes, stamp), "allocation overwritten");
    }
    arena.reset();
    scratch.reset();
}

#[test]
fn soak_100k_frames_stays_flat_and_gives_everything_back() {
    let frames: u64 = std::env::var("NEBULA_SOAK_FRAMES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    const WARMUP: u64 = 2_000;
    const SPIKE_EVERY: u64 = 10_000;
    let pool = MemoryPool::new("soak", 256 << 20).unwrap();
    // Give freed pages back as soon as 1 MiB of release pressure builds up, so a spike's
    // memory leaves RSS once the arenas trim it.
    pool.set_retain_limit(1 << 20);
    pool.set_purge_delay(std::time::Duration::ZERO);
    pool.set_recall_window(std::time::Duration::ZERO);
    let config = ArenaConfig::default()
        .first_block(16 * 1024)
        .trim_after_resets(60);
    let mut arena = MemoryArena::with_config(&pool, config);
    let mut scratch = MemoryArena::with_config(&pool, config);
    let mut rng = SplitMix64(0x50AC);
    let ramps = Ramps::new();

    let mut baseline = None;
    let mut max_in_use_after_warmup = 0;
    let mut max_rss_after_warmup = 0;
    let mut quiet_pool_ops = 0;
    for f in 0..frames {
        let spike = f % SPIKE_EVERY == SPIKE_EVERY / 2;
        let before = pool.stats();
        frame(&mut arena, &mut scratch, &mut rng, &ramps, spike);
        let after = pool.stats();
        // A quiet frame well clear of a spike and its trim window does no pool operation.
        let since_spike = (f + SPIKE_EVERY - SPIKE_EVERY / 2) % SPIKE_EVERY;
        if f >= WARMUP && !spike && since_spike > 200 {
            let ops = (after.allocations - before.allocations) + (after.frees - before.frees);
            if ops > 0 && std::env::var("SOAK_DEBUG").is_ok() {
                println!("frame {f}: {ops} pool ops, arena {}", arena.stats());
            }
            quiet_pool_ops += ops;
        }
        if f == WARMUP {
            baseline = Some((after.in_use, rss_bytes()));
        }
        if f > WARMUP && since_spike > 200 {
            max_in_use_after_warmup = max_in_use_after_warmup.max(after.in_use);
            max_rss_after_warmup = max_rss_after_warmup.max(rss_bytes());
        }
    }
    let (in_use_at_warmup, rss_at_warmup) = baseline.expect("ran past warm-up");
    println!(
        "soak: {frames} frames; pool in_use after warm-up {} KiB, max later {} KiB; \
         RSS after warm-up {} KiB, max later {} KiB; pool ops on quiet frames {quiet_pool_ops}",
        in_use_at_warmup / 1024,
        max_in_use_after_warmup / 1024,
        rss_at_warmup / 1024,
        max_rss_after_warmup / 1024
    );
    // Pool usage after warm-up (away from spikes) never exceeds the warm-up level by more
    // than one growth step of either arena.
    assert!(
        max_in_use_after_warmup <= in_use_at_warmup * 2,
        "pool usage crept up: {in_use_at_warmup} -> {max_in_use_after_warmup}"
    );
    // RSS is flat: spikes were trimmed and nothing accumulates (4 MiB of slack for the test
    // harness and allocator noise).
    // (Under AddressSanitizer, RSS also counts ASan's shadow memory and the freed-memory
    // quarantine of its own allocator, so only plain builds check it; likewise under
    // valgrind.)
    assert!(
        cfg!(nebula_asan) || under_valgrind() || max_rss_after_warmup <= rss_at_warmup + (4 << 20),
        "RSS grew: {rss_at_warmup} -> {max_rss_after_warmup}"
    );
    // Frame sizes vary at random, so a new record frame may still grow the kept block now
    // and then (by at least 1/4 each time); anything more than one pool operation per
    // thousand frames would mean the reset policy churns. (A steady workload does exactly
    // zero: tests/arena_reset_policy.rs.)
    assert!(
        quiet_pool_ops <= frames / 1000,
        "{quiet_pool_ops} pool operations on quiet frames"
    );

    drop(arena);
    drop(scratch);
    assert_drained(&pool);
}
