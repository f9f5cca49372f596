//! `with_scratch`: nested scopes keep outer data intact, memory is reclaimed at exit (the
//! same depth reuses the same addresses), a panic in an inner scope leaves the outer one
//! and the depth consistent, work-stealing (a task run inside another task's scope) is
//! sound, many threads use it at once, and thread exit gives the scratch blocks back.
//!
//! Every test runs its body on a spawned thread that is joined while a lock is held: the
//! thread's scratch arenas are created and destroyed inside the test, so the scratch pool
//! counters that `thread_exit_gives_scratch_blocks_back` compares are not disturbed by the
//! other tests of this binary.

use nebula_memory::Arena;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use nebula_memory::{MemoryArena, scratch_pool, with_scratch};

mod common;
use common::Barrier;

static SCRATCH: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on a fresh thread (joined before returning) while holding the lock.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let _serial = serial();
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn pat(seed: u32, i: usize) -> u32 {
    (i as u32).wrapping_mul(0x9E37_79B9) ^ seed.rotate_left(16)
}

/// `n` elements; a sixteenth under Miri (300 000 still outgrows a 64 KiB first block).
fn fill<'a>(arena: &'a MemoryArena<'static>, seed: u32, n: usize) -> &'a mut [u32] {
    let n = if cfg!(miri) { n / 16 } else { n };
    arena.alloc_slice_fill_with(n, |i| pat(seed, i))
}

#[track_caller]
fn verify(data: &[u32], seed: u32) {
    let bad = data
        .iter()
        .enumerate()
        .position(|(i, &v)| v != pat(seed, i));
    assert_eq!(bad, None, "data of scope {seed} overwritten");
}

fn addr<T: ?Sized>(x: &T) -> usize {
    x as *const T as *const u8 as usize
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn nested_scopes_keep_outer_data() {
    isolated(|| {
        with_scratch(|a0| {
            assert_eq!(a0.pool().name(), "scratch");
            let x0 = fill(a0, 0, 10_000);
            with_scratch(|a1| {
                assert!(!std::ptr::eq(a0, a1), "each depth has its own arena");
                let x1 = fill(a1, 1, 50_000);
                with_scratch(|a2| {
                    let x2 = fill(a2, 2, 200_000); // several blocks
                    with_scratch(|a3| {
                        for round in 0..3 {
                            let x3 = fill(a3, 3 + round, 100_000);
                            with_scratch(|a4| {
                                let x4 = fill(a4, 10, 30_000);
                                verify(x4, 10);
                            });
                            verify(x3, 3 + round);
                        }
                        verify(x2, 2);
                        verify(x1, 1);
                        verify(x0, 0);
                    });
                    // Outer arenas keep allocating after an inner scope ended.
                    let more = fill(a2, 20, 100_000);
                    verify(x2, 2);
                    verify(more, 20);
                });
                verify(x1, 1);
                verify(x0, 0);
            });
            verify(x0, 0);
        });
    });
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn memory_is_reclaimed_at_exit() {
    isolated(|| {
        let first = with_scratch(|a| addr(a.alloc_val(1u64)));
        let second = with_scratch(|a| {
            assert_eq!(a.bytes_used(), 0, "a scope starts empty");
            addr(a.alloc_val(2u64))
        });
        assert_eq!(first, second, "the same depth reuses the same address");

        with_scratch(|outer| {
            let keep = fill(outer, 5, 1000);
            let mut seen = None;
            // Round 2 is the first whose address is compared: 3 rounds under Miri.
            for round in 0..if cfg!(miri) { 3 } else { 5 } {
                let (p, blocks) = with_scratch(|inner| {
                    assert_eq!(inner.bytes_used(), 0);
                    assert!(
                        inner.block_count() <= 1,
                        "only one block kept between scopes"
                    );
                    let small = inner.alloc_val(round);
                    let big = fill(inner, round, 300_000); // grows past the first block
                    assert_eq!(*small, round);
                    verify(big, round);
                    (addr(&big[0]), inner.block_count())
                });
                if round == 0 {
                    assert!(blocks > 1, "the first round must outgrow the first block");
                } else {
                    // The reset after round 0 swapped its blocks for one that holds the
                    // whole scope: from then on every round runs in that one block and
                    // starts at the same address.
                    assert_eq!(blocks, 1);
                    if round >= 2 {
                        assert_eq!(Some(p), seen, "round {round} did not reuse the memory");
                    }
                }
                seen = Some(p);
            }
            verify(keep, 5);
        });

        // Scratch arenas go through reset, so the watermark of a depth survives.
        let high = with_scratch(|a| a.high_watermark());
        assert!(high >= 8);
    });
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_panic_in_an_inner_scope_leaves_the_outer_scope_intact() {
    isolated(|| {
        // Arenas are identified by address: one per depth.
        let (depth0, depth1, depth2) =
            with_scratch(|a| with_scratch(|b| (addr(a), addr(b), with_scratch(addr))));
        assert!(depth0 != depth1 && depth1 != depth2 && depth0 != depth2);
        with_scratch(|outer| {
            assert_eq!(addr(outer), depth0);
            let data = fill(outer, 7, 20_000);
            let r = catch_unwind(AssertUnwindSafe(|| {
                with_scratch(|a| {
                    fill(a, 8, 100_000);
                    with_scratch(|b| {
                        fill(b, 9, 50_000);
                        panic!("inside a nested scope");
                    });
                })
            }));
            assert!(r.is_err());
            verify(data, 7);
            // The depth is back where it was: the next inner scope gets the depth-1 arena
            // again, empty (the panicking scope was reset), and its inner scope depth 2.
            with_scratch(|a| {
                assert_eq!(addr(a), depth1);
                assert_eq!(a.bytes_used(), 0);
                let x = fill(a, 12, 5000);
                with_scratch(|b| {
                    assert_eq!(addr(b), depth2);
                    assert_eq!(b.bytes_used(), 0);
                });
                verify(x, 12);
            });
            // The outer arena keeps working.
            let more = fill(outer, 11, 1000);
            verify(more, 11);
            verify(data, 7);
        });
        with_scratch(|a| {
            assert_eq!(addr(a), depth0, "depth 0 is depth 0 again");
            assert_eq!(a.bytes_used(), 0);
        });

        // A panic straight out of the outermost scope, then normal use.
        let r = catch_unwind(|| {
            with_scratch(|a| {
                fill(a, 1, 10);
                panic!("outermost");
            })
        });
        assert!(r.is_err());
        with_scratch(|a| {
            assert_eq!(addr(a), depth0);
            assert_eq!(with_scratch(addr), depth1);
        });
    });
}

type Job = Box<dyn FnOnce() + Send>;

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_stolen_task_runs_inside_another_scope() {
    // One thread: the outer task holds scratch data while it runs a task taken from a
    // queue, which uses scratch space itself.
    isolated(|| {
        let mut queue: VecDeque<Job> = VecDeque::new();
        for k in 0..if cfg!(miri) { 2 } else { 4u32 } {
            queue.push_back(Box::new(move || {
                with_scratch(|a| {
                    let mine = fill(a, 100 + k, 150_000);
                    with_scratch(|b| verify(fill(b, 200 + k, 10_000), 200 + k));
                    verify(mine, 100 + k);
                })
            }));
        }
        with_scratch(|outer| {
            let data = fill(outer, 1, 100_000);
            while let Some(job) = queue.pop_front() {
                job(); // "stolen" while `data` is live
                verify(data, 1);
            }
        });
    });

    // Several threads sharing one queue; every task steals others while its own scratch
    // data is live, up to a bounded depth.
    isolated(|| {
        let tasks = if cfg!(miri) { 24 } else { 200 };
        let queue: Mutex<VecDeque<u32>> = Mutex::new((0..tasks).collect());
        thread_local! {
            static DEPTH: Cell<u32> = const { Cell::new(0) };
        }
        fn run(task: u32, queue: &Mutex<VecDeque<u32>>) {
            DEPTH.with(|d| d.set(d.get() + 1));
            with_scratch(|a| {
                let mine = fill(a, task, 1000 + (task as usize % 7) * 3000);
                if DEPTH.with(|d| d.get()) < 6 {
                    for _ in 0..2 {
                        let stolen = queue.lock().unwrap().pop_front();
                        if let Some(t) = stolen {
                            run(t, queue);
                        }
                        verify(mine, task);
                    }
                }
                verify(mine, task);
            });
            DEPTH.with(|d| d.set(d.get() - 1));
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        loop {
                            let next = queue.lock().unwrap().pop_front();
                            match next {
                                Some(t) => run(t, &queue),
                                None => break,
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
        assert!(queue.lock().unwrap().is_empty());
    });
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn many_threads_at_once() {
    // Under Miri, 4 threads of 3 iterations.
    let (threads, iterations) = if cfg!(miri) { (4, 3) } else { (8, 50) };
    isolated(|| {
        let start = Barrier::new(threads as usize);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        for i in 0..iterations {
                            let seed = t * 1000 + i;
                            with_scratch(|a| {
                                let x = fill(a, seed, 5_000 + (i as usize % 5) * 10_000);
                                with_scratch(|b| {
                                    let y = fill(b, seed + 500, 20_000);
                                    verify(x, seed);
                                    verify(y, seed + 500);
                                });
                                verify(x, seed);
                            });
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    });
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn thread_exit_gives_scratch_blocks_back() {
    let _serial = serial();
    let before = scratch_pool().stats();
    // Under Miri, 1 round of 2 threads.
    let (rounds, threads) = if cfg!(miri) { (1, 2) } else { (4, 4) };
    for round in 0..rounds {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        with_scratch(|a| {
                            let x = fill(a, t, 100_000);
                            with_scratch(|b| {
                                let y = fill(b, t + 1, 200_000);
                                with_scratch(|c| verify(fill(c, t + 2, 300_000), t + 2));
                                verify(y, t + 1);
                            });
                            verify(x, t);
                        });
                        assert!(scratch_pool().stats().blocks_in_use > before.blocks_in_use);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
        let after = scratch_pool().stats();
        assert_eq!(
            (after.blocks_in_use, after.in_use),
            (before.blocks_in_use, before.in_use),
            "round {round}: exited threads kept scratch blocks"
        );
    }
    // A thread that panics inside a scope gives its blocks back too.
    let r = std::thread::spawn(|| {
        with_scratch(|a| {
            fill(a, 1, 100_000);
            with_scratch(|_| panic!("dies inside a scope"));
        })
    })
    .join();
    assert!(r.is_err());
    assert_eq!(scratch_pool().stats().blocks_in_use, before.blocks_in_use);
}

struct UsesScratchWhenDropped;

impl Drop for UsesScratchWhenDropped {
    fn drop(&mut self) {
        let sum = with_scratch(|a| fill(a, 3, 50_000).iter().map(|&x| x as u64).sum::<u64>());
        assert!(sum > 0);
    }
}

thread_local! {
    static LATE: UsesScratchWhenDropped = const { UsesScratchWhenDropped };
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn scratch_during_thread_teardown() {
    let _serial = serial();
    let before = scratch_pool().stats().blocks_in_use;
    // First use of scratch space comes from a thread-local destructor.
    std::thread::spawn(|| LATE.with(|_| ())).join().unwrap();
    assert_eq!(scratch_pool().stats().blocks_in_use, before);
    // Scratch used normally, then again from a thread-local destructor.
    std::thread::spawn(|| {
        LATE.with(|_| ());
        with_scratch(|a| verify(fill(a, 4, 1000), 4));
    })
    .join()
    .unwrap();
    assert_eq!(scratch_pool().stats().blocks_in_use, before);
}

/// A `ScratchBatch` holds one arena for many scopes: each scope starts at the same
/// address (the previous one was reset), a nested `with_scratch` gets another arena, and
/// dropping the batch frees its arena for the next claim. `with_scratch_stats` counts the
/// arenas and the bytes they hold.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_scratch_batch_reuses_one_arena_for_many_scopes() {
    isolated(|| {
        use nebula_memory::{Arena, scratch_batch, with_scratch_stats};
        let mut batch = scratch_batch();
        let first = batch.scope(|s| s.alloc_val(1u64) as *mut u64 as usize);
        for i in 0..100u64 {
            let (addr, inner) = batch.scope(|s| {
                let v = s.alloc_slice_fill_with(64, |k| i + k as u64);
                let inner = with_scratch(|t| {
                    let w = t.alloc_val(7u64);
                    *w + v[63]
                });
                (v.as_ptr() as usize, inner)
            });
            assert_eq!(
                addr, first,
                "scope {i} did not start where the last one did"
            );
            assert_eq!(inner, 7 + i + 63);
        }
        let during = with_scratch_stats();
        assert!(during.arenas >= 2, "{during:?}");
        drop(batch);
        // The batch's arena is free again: with_scratch gets it (the same first address).
        let again = with_scratch(|s| s.alloc_val(1u64) as *mut u64 as usize);
        assert_eq!(again, first);
        assert!(with_scratch_stats().bytes_held > 0);
    });
}
