//! Concurrency: many threads churning one shared `MemoryPool`.
//!
//! Every block is stamped over its whole capacity with a pattern unique to the thread and
//! the sequence number of the allocation, and verified just before it is released, so a
//! block handed out twice, a split or merge that touches live bytes, or a lost update of
//! the free structure shows up as a wrong word. At the end the pool must be exactly empty:
//! `in_use == 0`, no blocks, one free range, every count consistent.

use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use nebula_memory::{MemoryBlock, MemoryPool, PoolError};

mod common;
use common::{Barrier, HEADER, SplitMix64, assert_drained, stamp, verify};

/// A live block and the seed of its stamp. Blocks are plain memory owned by whoever holds
/// the handle, so moving one to another thread is fine.
struct Held {
    block: NonNull<MemoryBlock>,
    seed: u64,
}

// SAFETY: a pool block is owned by its holder and has no thread affinity; the pool is
// `Sync` and accepts `free_block` from any thread.
unsafe impl Send for Held {}

/// `n` steps; a fortieth under Miri (every word of every block is stamped and verified).
fn steps(n: usize) -> usize {
    if cfg!(miri) { n / 40 } else { n }
}

/// Blocks of at most `n` bytes; a sixteenth under Miri (sizes are log-uniform, so this
/// mostly trims the rare large blocks).
fn max_size(n: usize) -> usize {
    if cfg!(miri) { n / 16 } else { n }
}

/// Counts of what the threads did, to compare with the pool's own counters.
#[derive(Default)]
struct Tally {
    allocations: AtomicU64,
    frees: AtomicU64,
    exhaustions: AtomicU64,
}

/// Allocates `n` bytes; on `Exhausted` (legitimate under contention and fragmentation)
/// checks the error and returns `None`. Any other error fails the test.
fn acquire(pool: &MemoryPool, n: usize, seed: u64, tally: &Tally) -> Option<Held> {
    match pool.allocate_block(n) {
        Ok(block) => {
            assert!(pool.contains(block.as_ptr().cast()));
            // SAFETY: a live block we own.
            let header = unsafe { block.as_ref() };
            assert!(header.capacity() >= n);
            assert_eq!(header.total_size(), header.capacity() + HEADER);
            assert_eq!(header.data().as_ptr() as usize % 16, 0);
            stamp(block, seed);
            tally.allocations.fetch_add(1, Ordering::Relaxed);
            Some(Held { block, seed })
        }
        Err(PoolError::Exhausted {
            pool: name,
            requested,
            ..
        }) => {
            assert_eq!((name, requested), (pool.name(), n));
            tally.exhaustions.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => panic!("unexpected refusal of {n} B: {e}"),
    }
}

fn release(pool: &MemoryPool, held: Held, tally: &Tally) {
    if let Err(e) = verify(held.block, held.seed) {
        panic!("{e}");
    }
    // SAFETY: from `pool`, live, not used afterwards.
    unsafe { pool.free_block(held.block) };
    tally.frees.fetch_add(1, Ordering::Relaxed);
}

fn check_snapshot(pool: &MemoryPool) {
    let s = pool.stats();
    assert_eq!(s.in_use + s.free, s.capacity);
    assert!(s.high_watermark >= s.in_use);
    assert!(s.in_use >= s.blocks_in_use * 48);
    assert!(s.largest_free <= s.free);
}

fn check_drained(pool: &MemoryPool, tally: &Tally) {
    assert_drained(pool);
    let s = pool.stats();
    assert_eq!(s.allocations, tally.allocations.load(Ordering::Relaxed));
    assert_eq!(s.frees, tally.frees.load(Ordering::Relaxed));
    assert_eq!(s.exhaustions, tally.exhaustions.load(Ordering::Relaxed));
    assert!(s.high_watermark > 0 && s.high_watermark <= s.capacity);
    // Fully coalesced: the whole region is one block again.
    let all = pool.allocate_block(s.largest_free).unwrap();
    // SAFETY: from `pool`, not used afterwards.
    unsafe { pool.free_block(all) };
}

/// One thread's churn: keeps up to `max_live` blocks of its own, allocating and freeing at
/// random, verifying each block before it goes back.
fn churn(
    pool: &MemoryPool,
    thread: u64,
    steps: usize,
    max_live: usize,
    max_size: usize,
    tally: &Tally,
    start: &Barrier,
) {
    // Per-thread fixed-seed sizes and choices.
    let mut rng = SplitMix64(thread + 1);
    start.wait();
    let mut live: Vec<Held> = Vec::new();
    for step in 0..steps {
        let seed = (thread << 48) ^ step as u64;
        if live.len() < max_live && (live.is_empty() || rng.below(3) != 0) {
            let n = rng.log_uniform(1, max_size);
            match acquire(pool, n, seed, tally) {
                Some(h) => live.push(h),
                // Exhausted: make room.
                None => {
                    if !live.is_empty() {
                        let h = live.swap_remove(rng.below(live.len()));
                        release(pool, h, tally);
                    }
                }
            }
        } else {
            let h = live.swap_remove(rng.below(live.len()));
            release(pool, h, tally);
        }
        if step % 256 == 0 {
            check_snapshot(pool);
        }
    }
    for h in live {
        release(pool, h, tally);
    }
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn four_threads_share_one_pool() {
    let pool = MemoryPool::new("threads", 16 << 20).unwrap();
    let tally = Tally::default();
    let start = Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (pool, tally, start) = (&pool, &tally, &start);
            s.spawn(move || churn(pool, t, steps(10_000), 48, max_size(64 << 10), tally, start));
        }
    });
    check_drained(&pool, &tally);
    assert!(tally.allocations.load(Ordering::Relaxed) >= 4 * (steps(10_000) as u64 / 2));
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn four_threads_with_decommit_on_every_release() {
    // Retain limit 0 and no purge delay: every release runs a decommit pass over the dirty
    // free ranges while other threads' live blocks sit right next to them.
    let pool = MemoryPool::new("threads-decommit", 8 << 20).unwrap();
    pool.set_retain_limit(0);
    pool.set_purge_delay(std::time::Duration::ZERO);
    pool.set_recall_window(std::time::Duration::ZERO);
    let tally = Tally::default();
    let start = Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (pool, tally, start) = (&pool, &tally, &start);
            s.spawn(move || churn(pool, t, steps(3000), 16, max_size(128 << 10), tally, start));
        }
    });
    check_drained(&pool, &tally);
    assert_eq!(pool.trim(), 0, "a release left a dirty free range");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn many_threads_share_one_pool() {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()) * 4;
    let pool = MemoryPool::new("many-threads", 32 << 20).unwrap();
    let tally = Tally::default();
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            let (pool, tally, start) = (&pool, &tally, &start);
            s.spawn(move || churn(pool, t, steps(3000), 24, max_size(32 << 10), tally, start));
        }
    });
    check_drained(&pool, &tally);
}

/// Blocks allocated on one thread and released on another, through a shared bag, so that
/// the neighbours a release merges with belong to other threads.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn blocks_released_by_other_threads() {
    const THREADS: u64 = 4;
    let pool = MemoryPool::new("cross-threads", 16 << 20).unwrap();
    let tally = Tally::default();
    let bag: Mutex<Vec<Held>> = Mutex::new(Vec::new());
    let start = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, tally, bag, start) = (&pool, &tally, &bag, &start);
            s.spawn(move || {
                let mut rng = SplitMix64(100 + t);
                start.wait();
                for step in 0..steps(8000) as u64 {
                    let seed = (t << 48) ^ step ^ 0x5555_0000;
                    if rng.below(2) == 0 {
                        if let Some(h) =
                            acquire(pool, rng.log_uniform(1, max_size(32 << 10)), seed, tally)
                        {
                            bag.lock().unwrap().push(h);
                        }
                    } else {
                        let taken = {
                            let mut bag = bag.lock().unwrap();
                            let len = bag.len();
                            (len > 0).then(|| bag.swap_remove(rng.below(len)))
                        };
                        if let Some(h) = taken {
                            release(pool, h, tally);
                        }
                    }
                }
            });
        }
    });
    for h in bag.into_inner().unwrap() {
        release(&pool, h, &tally);
    }
    check_drained(&pool, &tally);
}

/// `Arc` ownership and `'static` threads (not just scoped ones), each holding blocks while
/// the others allocate.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn arc_shared_pool_with_static_threads() {
    let pool = std::sync::Arc::new(MemoryPool::new("arc", 8 << 20).unwrap());
    let tally = std::sync::Arc::new(Tally::default());
    let start = std::sync::Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let (pool, tally, start) = (pool.clone(), tally.clone(), start.clone());
            std::thread::spawn(move || {
                churn(
                    &pool,
                    1000 + t,
                    steps(4000),
                    32,
                    max_size(16 << 10),
                    &tally,
                    &start,
                )
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    check_drained(&pool, &tally);
}
