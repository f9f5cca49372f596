//! `SharedArena`: many threads allocating from one arena at once, `engine_arena` and
//! `game_arena`.

use nebula_memory::Arena;
use std::alloc::Layout;

use allocator_api2::vec::Vec as AVec;
use nebula_memory::{AllocError, PoolError, SharedArena};

mod common;
use common::{Barrier, MIB, SplitMix64, assert_drained, pool_of};

const THREADS: usize = 8;

/// Pool sizes are smaller under Miri, where a pool's region is a zeroed heap allocation
/// that Miri tracks byte by byte.
fn mib(n: usize) -> usize {
    if cfg!(miri) { n.min(8) * MIB } else { n * MIB }
}

/// Byte `i` of allocation `n` of thread `t`.
fn byte_of(t: usize, n: usize, i: usize) -> u8 {
    (t.wrapping_mul(131) ^ n.wrapping_mul(31) ^ i) as u8
}

/// Eight threads allocate at once, every allocation stamped; after all threads finish,
/// every stamp is intact, no two allocations overlap, and `bytes_used` is their sum.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn eight_threads_allocate_at_once_without_overlap() {
    let per_thread = if cfg!(miri) { 50 } else { 5_000 };
    let pool = pool_of("shared-8", mib(256));
    let arena = SharedArena::new(&pool);
    let start = Barrier::new(THREADS);
    let all: Vec<Vec<(usize, usize)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (arena, start) = (&arena, &start);
                s.spawn(move || {
                    let mut rng = SplitMix64(t as u64 + 1);
                    start.wait();
                    let mine = (0..per_thread)
                        .map(|n| {
                            let len = 1 + rng.below(300);
                            // Align 1: no padding, so `bytes_used` is exactly the sum.
                            let bytes = arena.alloc_slice_fill_with(len, |i| byte_of(t, n, i));
                            (bytes.as_ptr() as usize, len)
                        })
                        .collect();
                    // Stay alive until all are done: a thread that exited early would
                    // leave its part to a late one (legal, but then fewer than 8 parts).
                    start.wait();
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (t, allocs) in all.iter().enumerate() {
        for (n, &(addr, len)) in allocs.iter().enumerate() {
            // SAFETY: allocated above from `arena`, which is alive and was not reset.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            assert!(
                bytes
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == byte_of(t, n, i)),
                "allocation {n} of thread {t} was overwritten"
            );
            spans.push((addr, len));
        }
    }
    spans.sort_unstable();
    assert!(
        spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
        "two allocations overlap"
    );
    let total: usize = spans.iter().map(|&(_, len)| len).sum();
    assert_eq!(arena.bytes_used(), total);
    assert_eq!(arena.stats().bytes_used, total);
    assert_eq!(arena.threads(), THREADS);
    assert_eq!(pool.stats().in_use, arena.bytes_held());
}

/// Collections of the allocator-api2 and hashbrown kinds, built on several threads at
/// once; one vector is moved to another thread and grown there (a copy, since it is not
/// that thread's top).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn collections_from_several_threads() {
    let n: u32 = if cfg!(miri) { 200 } else { 20_000 };
    let pool = pool_of("shared-collections", mib(64));
    let arena = SharedArena::new(&pool);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let arena = &arena;
            s.spawn(move || {
                let mut v: AVec<u32, _> = AVec::new_in(arena);
                let mut m = hashbrown::HashMap::new_in(arena);
                for i in 0..n {
                    v.push(t * n + i);
                    m.insert(i, t);
                }
                assert!(v.iter().enumerate().all(|(i, &x)| x == t * n + i as u32));
                assert!((0..n).all(|i| m[&i] == t));
            });
        }
    });
    let mut v: AVec<u64, _> = AVec::new_in(&arena);
    v.extend(0..100u64);
    let v = std::thread::scope(|s| {
        s.spawn(move || {
            v.extend(100..10_000u64); // grows on another thread: copied into its part
            v
        })
        .join()
        .unwrap()
    });
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
}

/// Many rounds of parallel allocation and reset by a fixed set of worker threads (as a
/// job system has): after a warm-up the pool's usage is flat and there is no pool traffic
/// at all (each thread's part keeps one block sized to its frames).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn rounds_of_parallel_allocation_and_reset_keep_pool_usage_flat() {
    const WORKERS: usize = 4;
    // Under Miri a small pool and few allocations: at full size it had not finished after
    // 11 minutes (Miri ran at about 30,000 basic blocks a second here); this takes about one.
    let (rounds, allocs, pool_size) = if cfg!(miri) {
        (4, 50, mib(4))
    } else {
        (300, 200, mib(64))
    };
    let pool = pool_of("shared-rounds", pool_size);
    // Workers allocate under the read lock; the main thread resets under the write lock.
    let arena = std::sync::RwLock::new(SharedArena::new(&pool));
    let sync = Barrier::new(WORKERS + 1);
    let mut in_use = Vec::new();
    std::thread::scope(|s| {
        for t in 0..WORKERS {
            let (arena, sync) = (&arena, &sync);
            s.spawn(move || {
                for round in 0..rounds {
                    sync.wait(); // round starts
                    let arena = arena.read().unwrap();
                    let mut rng = SplitMix64((round * WORKERS + t) as u64);
                    for _ in 0..allocs {
                        let v = arena.alloc_slice(16 + rng.below(512), t as u8);
                        assert!(v.iter().all(|&b| b == t as u8));
                    }
                    drop(arena);
                    sync.wait(); // round done
                }
            });
        }
        for _ in 0..rounds {
            sync.wait();
            sync.wait();
            let mut arena = arena.write().unwrap();
            arena.reset();
            assert_eq!(arena.bytes_used(), 0);
            assert_eq!(arena.threads(), WORKERS);
            let stats = pool.stats();
            in_use.push((stats.in_use, stats.allocations));
        }
    });
    let warm = &in_use[rounds / 3..];
    assert!(
        warm.iter().all(|&x| x == warm[0]),
        "pool usage and traffic change after warm-up: {warm:?}"
    );
    drop(arena);
    assert_drained(&pool); // drop gives every block back
}

/// A pool exhausted while several threads (a fixed set of workers) allocate: each
/// thread gets the error (never a panic, never memory of another thread), most of the
/// pool was handed out before the first refusal, and after a reset all of them allocate
/// again.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn exhaustion_while_several_threads_allocate() {
    const WORKERS: usize = 4;
    // Under Miri two rounds and a sixteenth of the sizes: at a quarter it had not finished
    // after 25 minutes (every byte is written and checked in the interpreter); this takes 40 s.
    const ROUNDS: usize = if cfg!(miri) { 2 } else { 3 };
    const SCALE: usize = if cfg!(miri) { 16 } else { 1 };
    const PIECE: usize = 8 * 1024 / SCALE;
    const POOL: usize = MIB / SCALE;
    let pool = pool_of("shared-tight", POOL);
    let arena = std::sync::RwLock::new(SharedArena::new(&pool));
    let sync = Barrier::new(WORKERS + 1);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..WORKERS as u8 {
            let (arena, sync, results) = (&arena, &sync, &results);
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    sync.wait();
                    let arena = arena.read().unwrap();
                    let mut mine = Vec::new();
                    let err = loop {
                        match arena.try_alloc_slice(PIECE, t) {
                            Ok(v) => mine.push(v),
                            Err(e) => break e,
                        }
                    };
                    assert!(mine.iter().all(|v| v.iter().all(|&b| b == t)));
                    results.lock().unwrap().push((mine.len(), err));
                    drop(arena);
                    sync.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            sync.wait();
            sync.wait();
            let got = std::mem::take(&mut *results.lock().unwrap());
            assert_eq!(got.len(), WORKERS);
            for (_, e) in &got {
                assert!(
                    matches!(
                        e,
                        AllocError::Pool(PoolError::Exhausted {
                            pool: "shared-tight",
                            ..
                        })
                    ),
                    "{e:?}"
                );
            }
            let total: usize = got.iter().map(|(n, _)| n).sum();
            assert!(
                total * PIECE > POOL * 3 / 4,
                "round {round}: only {total} pieces of {PIECE} B from a pool of {POOL} B"
            );
            let mut arena = arena.write().unwrap();
            arena.reset();
            assert_eq!(arena.bytes_used(), 0);
        }
    });
    assert!(pool.stats().exhaustions >= (WORKERS * ROUNDS) as u64);
}

/// The calling thread's newest allocation pops and grows in place, whatever the other
/// threads do; a pop from another thread is a no-op.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn the_calling_threads_top_pops_and_grows_in_place() {
    let pool = pool_of("shared-top", mib(16));
    let arena = SharedArena::new(&pool);
    let layout = Layout::from_size_align(64, 8).unwrap();
    let p = arena.alloc(layout);
    let addr = p.as_ptr() as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            arena.alloc_slice(1000, 1u8); // another thread's part
            let p = std::ptr::NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: `p` is not this thread's allocation: a no-op by contract.
            assert!(!unsafe { arena.pop(p, layout) }, "not this thread's top");
        });
    });
    // SAFETY: `p` is live with `layout`; only the result is used afterwards.
    let q = unsafe { arena.realloc(p, layout, 4096) }.unwrap();
    assert_eq!(p, q, "grown in place");
    let grown = Layout::from_size_align(4096, 8).unwrap();
    let before = arena.bytes_used();
    // SAFETY: `q` is the top of this thread's part and is not used again.
    assert!(unsafe { arena.pop(q, grown) });
    assert_eq!(arena.bytes_used(), before - 4096);
    // Vector growth through the allocator: in place at this thread's top.
    let mut v: AVec<u64, _> = AVec::with_capacity_in(1, &arena);
    let at = v.as_ptr();
    for i in 0..500 {
        v.reserve_exact(1);
        v.push(i);
    }
    assert_eq!(v.as_ptr(), at);
}

/// What a thread allocated stays allocated, and counted, after the thread exits (its
/// part stays in the arena, to be taken over by a later thread).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn allocations_outlive_the_threads_that_made_them() {
    let pool = pool_of("shared-exited", mib(16));
    let arena = SharedArena::new(&pool);
    let values: Vec<&u32> = (0..5u32)
        .map(|i| std::thread::scope(|s| s.spawn(|| &*arena.alloc_val(i)).join().unwrap()))
        .collect();
    assert_eq!(arena.bytes_used(), 20);
    assert!(values.iter().enumerate().all(|(i, &&v)| v == i as u32));
    assert!((1..=5).contains(&arena.threads()));
}

/// The two process-wide shared arenas.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn engine_and_game_arenas() {
    if cfg!(miri) {
        // The first use of a global pool in this process is here: keep them small.
        let small = nebula_memory::GlobalPoolConfig {
            engine: 8 * MIB,
            game: 8 * MIB,
            scratch: 8 * MIB,
        };
        nebula_memory::configure_global_pools(small).unwrap();
    }
    let engine = nebula_memory::engine_arena();
    assert_eq!(engine.pool().name(), "engine");
    let title: &'static str = engine.alloc_str("nebula");
    std::thread::spawn(move || assert_eq!(title, "nebula"))
        .join()
        .unwrap();

    let level = nebula_memory::game_arena();
    let guard = level.read();
    assert_eq!(guard.pool().name(), "game");
    let spawns = guard.alloc_slice_copy(&[1u32, 2, 3]);
    std::thread::scope(|s| {
        s.spawn(|| {
            let arena = level.read(); // readers do not block each other
            arena.alloc_val(9u64);
        });
    });
    assert_eq!(spawns, &[1, 2, 3]);
    assert!(!level.try_reset(), "a guard is alive");
    drop(guard);
    assert!(level.try_reset());
    assert_eq!(level.read().bytes_used(), 0);
    level.read().alloc_val(1u8);
    level.wait_and_reset();
    assert_eq!(level.stats().bytes_used, 0);
}

#[test]
fn shared_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SharedArena<'static>>();
    send_sync::<nebula_memory::GameArena>();
    send_sync::<nebula_memory::DoubleBufferedArena<'static>>();
    send_sync::<nebula_memory::FrameHandle<u64>>();
    send_sync::<nebula_memory::FrameHandle<[u32]>>();
}

/// `wait_and_reset` on a thread that holds a guard would wait for itself for ever: it
/// panics at once instead, saying so, and works once the guard is gone.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn wait_and_reset_with_a_guard_of_ones_own_panics() {
    let level = nebula_memory::game_arena();
    let guard = level.read();
    guard.alloc_val(1u32);
    let msg = common::panic_message(|| level.wait_and_reset());
    assert!(msg.contains("holds 1 of its guards"), "{msg}");
    drop(guard);
    level.wait_and_reset();
    // Another thread's guard does not count here: that one is waited for.
    let held = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            let g = level.read();
            held.wait();
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(g);
        });
        held.wait();
        level.wait_and_reset();
    });
}

/// A thread's part that allocated nothing at 8 resets in a row gives all its memory back,
/// so only threads that use a shared arena hold memory for it.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn idle_parts_give_their_blocks_back_at_reset() {
    let pool = common::pool("shared-idle");
    let mut arena = SharedArena::new(&pool);
    // This thread first: it then holds its thread id (and part) while the other thread
    // runs, so the two parts are distinct (ids of exited threads are reused).
    arena.alloc_slice(1000, 1u8);
    std::thread::scope(|s| {
        s.spawn(|| {
            arena.alloc_slice(1000, 1u8);
        });
    });
    let two = arena.bytes_held();
    assert_eq!(two, pool.stats().in_use);
    assert!(two >= 2 * 64 * 1024, "two parts, a block each: {two}");
    arena.reset(); // both parts allocated: both keep a block
    assert_eq!(arena.bytes_held(), two);
    // Only this thread's part allocates: the other one keeps its block for one idle reset
    // (a thread that allocates every other frame does not churn blocks), then gives it
    // back at the second.
    arena.alloc_slice(1000, 1u8);
    arena.reset();
    assert_eq!(arena.bytes_held(), two);
    arena.alloc_slice(1000, 1u8);
    arena.reset();
    assert!(arena.bytes_held() < two, "{} of {two}", arena.bytes_held());
    assert_eq!(arena.bytes_held(), pool.stats().in_use);
    // Now this thread's part is idle too: 2 resets later it holds nothing.
    arena.reset();
    assert!(arena.bytes_held() > 0);
    arena.reset();
    assert_eq!((arena.bytes_held(), pool.stats().in_use), (0, 0));
}
