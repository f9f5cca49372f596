//! Class 2 of the soundness rules: a handle to per-thread state keeps that state alive, or
//! cannot outlive its thread's teardown.
//!
//! Each test runs code from a thread-local destructor registered *before* the crate's own
//! thread-locals, so it runs after them: after the `thread_local` crate gave the thread's
//! id back (a thread started meanwhile takes it, and with it the slot of every
//! `ThreadLocal`), after the scratch stack and the thread arena were destroyed. Meanwhile
//! other threads start and allocate from the same arenas. Before the fixes, a shared
//! arena's part kept past that point was bumped by two threads at once (F2), a scratch
//! batch used its freed arena (F6, undefined behaviour under Miri), and every thread that
//! allocated during its exit left a block behind for ever (F8).
//!
//! A process of its own: the tests rely on which thread ids are free, so they run one at a
//! time and no other test runs threads beside them.

mod common;

use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use nebula_memory::{
    Arena, ArenaConfig, DoubleBufferedArena, FrameHandle, MemoryArena, MemoryPool, ScratchBatch,
    SharedArena, engine_arena, game_arena, scratch_batch, thread_arena_alloc, with_scratch,
};

/// One test at a time (they depend on which thread ids are free).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn leaked_pool(name: &'static str, bytes: usize) -> &'static MemoryPool {
    common::leak(MemoryPool::new(name, bytes).unwrap())
}

/// A never-reset shared arena of its own pool.
fn shared(name: &'static str) -> &'static SharedArena<'static> {
    common::leak(SharedArena::with_config(
        leaked_pool(name, 16 << 20),
        ArenaConfig::default().first_block(16 * 1024),
    ))
}

/// Work for a thread's exit: run by a thread-local destructor that the thread registers
/// before it touches the crate, so it runs after the crate's own.
struct AtExit(Vec<Box<dyn FnOnce()>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        for f in self.0.drain(..) {
            f();
        }
    }
}

thread_local! {
    static AT_EXIT: RefCell<AtExit> = const { RefCell::new(AtExit(Vec::new())) };
}

/// Registers this thread's `AT_EXIT` destructor now, before the crate's thread-locals.
fn register_first() {
    AT_EXIT.with(|_| ());
}

fn at_exit(f: impl FnOnce() + 'static) {
    AT_EXIT.with(|a| a.borrow_mut().0.push(Box::new(f)));
}

static STEP: AtomicUsize = AtomicUsize::new(0);

fn wait_for(step: usize) {
    while STEP.load(SeqCst) < step {
        std::thread::yield_now();
    }
}

/// Values stamped by thread `who`, allocation `i`: distinct for every thread and index.
fn stamp(who: u64, i: u64) -> [u64; 2] {
    [who, i ^ 0x5A5A_5A5A_5A5A_5A5A]
}

/// Allocates `n` stamped pairs through `alloc`, checks they are all intact afterwards, and
/// returns their addresses.
fn stamp_many<'a>(who: u64, n: u64, alloc: impl Fn([u64; 2]) -> &'a mut [u64; 2]) -> Vec<usize> {
    let mut held: Vec<&'a mut [u64; 2]> = Vec::new();
    for i in 0..n {
        held.push(alloc(stamp(who, i)));
        if i % 64 == 0 {
            std::thread::yield_now(); // let the other side run meanwhile
        }
    }
    for (i, v) in held.iter().enumerate() {
        assert_eq!(
            **v,
            stamp(who, i as u64),
            "thread {who}: allocation {i} overwritten"
        );
    }
    held.iter()
        .map(|v| std::ptr::from_ref::<[u64; 2]>(v).addr())
        .collect()
}

fn overlaps(a: &[usize], b: &[usize]) -> usize {
    let a: HashSet<usize> = a.iter().copied().collect();
    b.iter().filter(|x| a.contains(x)).count()
}

const N: u64 = if cfg!(miri) { 200 } else { 20_000 };

/// F2: a thread's part of a shared arena, used late in the thread's exit while a new
/// thread (with the exiting thread's id) allocates: the late code gets a part of its own.
/// Before: `this_thread()` returned a `&'static MemoryArena` for `engine_arena()` or any
/// `'static` arena; kept in a thread-local, it kept bumping the part the new thread got
/// (6,031 of 20,000 addresses handed to both threads). Now the part is reachable only
/// inside `with_this_thread`, which looks it up at the time of the call.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_part_used_late_in_a_threads_exit_is_never_a_new_threads_part() {
    let _serial = serial();
    STEP.store(0, SeqCst);
    let arena = shared("teardown-f2");
    static LATE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    std::thread::spawn(move || {
        register_first();
        arena.alloc_val(1u64); // this thread's part, and its id in the arena
        at_exit(move || {
            STEP.store(1, SeqCst);
            wait_for(2);
            let late = arena.with_this_thread(|mine| stamp_many(1, N, |v| mine.alloc_val(v)));
            *LATE.lock().unwrap() = late;
            STEP.store(3, SeqCst);
        });
    });
    wait_for(1);
    let new = std::thread::spawn(move || {
        STEP.store(2, SeqCst);
        let mine = stamp_many(2, N, |v| arena.alloc_val(v));
        wait_for(3);
        mine
    })
    .join()
    .unwrap();
    let shared_addrs = overlaps(&LATE.lock().unwrap(), &new);
    assert_eq!(
        shared_addrs, 0,
        "{shared_addrs} addresses handed to both threads"
    );
}

/// F6: a `ScratchBatch` kept in a thread-local destroyed after the scratch stack. Before,
/// it held a raw pointer to its arena's slot, which the stack's destruction freed: the
/// batch's next scope used freed memory (Miri: undefined behaviour). Now the batch holds
/// the slot by a reference count.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_scratch_batch_kept_past_the_scratch_stack_still_has_its_arena() {
    let _serial = serial();
    std::thread::spawn(|| {
        register_first();
        let mut batch: ScratchBatch = scratch_batch();
        at_exit(move || {
            let sum = batch.scope(|s| {
                s.alloc_slice_fill_with(100, |i| i as u64)
                    .iter()
                    .sum::<u64>()
            });
            drop(batch);
            assert_eq!(sum, 4950);
        });
    })
    .join()
    .unwrap();
}

/// F8: parts made for code that allocates during a thread's exit were never reused, so a
/// never-reset shared arena kept one more block for every such thread (61 blocks after 60
/// threads). Late parts are now claimed for one call at a time and reused.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn parts_for_late_allocations_are_reused() {
    let _serial = serial();
    let arena = shared("teardown-f8");
    let threads = if cfg!(miri) { 6 } else { 60 };
    for t in 0..threads {
        std::thread::spawn(move || {
            register_first();
            arena.alloc_val(t as u64);
            at_exit(move || {
                let v = arena.alloc_val(!(t as u64));
                assert_eq!(*v, !(t as u64));
            });
        })
        .join()
        .unwrap();
    }
    // One thread at a time: each reuses the exited one's id (so its part) and, late in its
    // exit, the one late part.
    assert!(
        arena.block_count() <= 2,
        "{} blocks held after {threads} threads that exited one after the other",
        arena.block_count()
    );
}

/// Every per-thread handle of the crate, used from a destructor that runs after the
/// crate's thread-locals are gone, while other threads start and use the same arenas.
/// Whatever the handle, the late code and the new threads never get the same bytes, and
/// everything each of them wrote is intact when it checks.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn every_per_thread_handle_is_sound_late_in_a_threads_exit() {
    let _serial = serial();
    let rounds = if cfg!(miri) { 2 } else { 12 };
    let n = if cfg!(miri) { 40 } else { 2_000 };
    let arena = shared("teardown-all");
    let hot_pool = leaked_pool("teardown-hot", 8 << 20);
    let frames: &'static DoubleBufferedArena<'static> = common::leak(DoubleBufferedArena::new(
        leaked_pool("teardown-double", 8 << 20),
    ));
    static LATE_ADDRS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    for round in 0..rounds {
        STEP.store(0, SeqCst);
        let who = 1000 + round as u64;
        std::thread::spawn(move || {
            register_first();
            // Touch every kind of per-thread state, so each has a thread-local destructor
            // registered after ours.
            arena.alloc_val(0u64);
            engine_arena().alloc_val(0u64);
            let guard = game_arena().read();
            guard.alloc_val(0u64);
            drop(guard);
            with_scratch(|s| {
                s.alloc_val(0u64);
            });
            thread_arena_alloc(Layout::new::<u64>()).unwrap();
            let mut batch = scratch_batch();
            let kept: FrameHandle<u64> = frames.store(who);
            // A hot cursor over a leaked arena (the arena belongs to no thread).
            let hot_arena: &'static mut MemoryArena<'static> =
                common::leak(MemoryArena::new(hot_pool));
            let hot = &*common::leak(hot_arena.hot_cursor());
            at_exit(move || {
                STEP.store(1, SeqCst);
                wait_for(2);
                let mut mine = Vec::new();
                // The shared arena, through its interface and through this thread's part.
                mine.extend(stamp_many(who, n, |v| arena.alloc_val(v)));
                mine.extend(
                    arena.with_this_thread(|part| stamp_many(who, n, |v| part.alloc_val(v))),
                );
                // The process-wide arenas.
                mine.extend(stamp_many(who, n, |v| engine_arena().alloc_val(v)));
                let guard = game_arena().read();
                stamp_many(who, n, |v| guard.alloc_val(v));
                drop(guard);
                // Scratch space: a fresh scope, and the batch kept from before.
                with_scratch(|s| stamp_many(who, n, |v| s.alloc_val(v)));
                batch.scope(|s| stamp_many(who, n, |v| s.alloc_val(v)));
                drop(batch);
                // The thread arena is gone: `None`, never another thread's bytes.
                assert!(thread_arena_alloc(Layout::new::<u64>()).is_none());
                mine.extend(stamp_many(who, n, |v| hot.alloc_val(v)));
                // Frame memory stored before the exit is still there.
                assert_eq!(frames.get(kept), Some(&who));
                LATE_ADDRS.lock().unwrap().extend(mine);
                STEP.store(3, SeqCst);
            });
        });
        wait_for(1);
        // New threads (one of which takes the exiting thread's id) allocate meanwhile.
        let news: Vec<_> = (0..2)
            .map(|k| {
                let who = 2000 + 10 * round as u64 + k;
                std::thread::spawn(move || {
                    if k == 0 {
                        STEP.store(2, SeqCst);
                    }
                    let mut mine = stamp_many(who, n, |v| arena.alloc_val(v));
                    mine.extend(stamp_many(who, n, |v| engine_arena().alloc_val(v)));
                    with_scratch(|s| stamp_many(who, n, |v| s.alloc_val(v)));
                    let mut batch = scratch_batch();
                    batch.scope(|s| stamp_many(who, n, |v| s.alloc_val(v)));
                    wait_for(3);
                    mine
                })
            })
            .collect();
        for t in news {
            let theirs = t.join().unwrap();
            let late = LATE_ADDRS.lock().unwrap();
            assert_eq!(
                overlaps(&late, &theirs),
                0,
                "round {round}: bytes handed to two threads"
            );
        }
        LATE_ADDRS.lock().unwrap().clear();
    }
}
