//! What stays charged to a heap scope after the threads that allocated in it have ended:
//! nothing of the crate's. Its own bookkeeping that outlives a call (the global pools, the
//! tag registry, the scratch and thread-arena registries, a `SharedArena`'s per-thread
//! slots and the `thread_local` crate's buckets behind them) is made lazily by whichever
//! call needs it first, and was charged for ever to the scope that call ran in (16 KB
//! after the first `with_scratch` or `thread_arena_alloc` in a scope, 2-5 KB of buckets for
//! a `SharedArena`); it is made untagged now. What the runtime keeps is told apart in the
//! heap module's docs ("What stays charged").
//!
//! A binary of its own: the first use of those structures in the process must happen
//! here. Threads run one at a time, so that no lock is contended (a contended
//! `parking_lot` lock makes its parking table, a runtime structure).
#![cfg(not(miri))]

use std::alloc::{Layout, System};
use std::hint::black_box;

use nebula_memory::{
    Arena, SharedArena, TrackingAllocator, engine_pool, ledger, thread_arena_alloc, with_scratch,
};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const TAG: &str = "threads/short-lived";

fn live() -> usize {
    ledger::snapshot().tag(TAG).map_or(0, |f| f.heap_live)
}

/// One short-lived thread's work in the scope: a vector, a scratch scope, the thread
/// arena, a part of `shared`; and a panic while holding memory if `panics`.
fn one_thread(shared: &'static SharedArena<'static>, panics: bool) {
    let r = std::thread::spawn(move || {
        let _s = ledger::scope(TAG);
        let v = black_box(vec![7u8; 100]);
        with_scratch(|a| {
            black_box(a.alloc_val(5u64));
        });
        black_box(thread_arena_alloc(Layout::new::<[u64; 4]>()));
        shared.with_this_thread(|a| {
            black_box(a.alloc_val(9u32));
        });
        if panics {
            panic!("held {} bytes", v.len());
        }
    })
    .join();
    assert_eq!(r.is_err(), panics);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn threads_that_ended_leave_nothing_charged_to_their_scope() {
    // In a static, not leaked: valgrind's leak check runs over this binary.
    static SHARED: std::sync::OnceLock<SharedArena<'static>> = std::sync::OnceLock::new();
    let shared: &'static SharedArena<'static> =
        SHARED.get_or_init(|| SharedArena::new(engine_pool()));
    let before = live();
    // The first threads make the crate's lazy structures; later ones reuse them.
    for n in [1, 63, 192] {
        for _ in 0..n {
            one_thread(shared, false);
        }
        assert_eq!(live(), before, "after {n} more threads");
    }
    // Threads that panic while holding memory: unwinding frees it. The hook prints
    // nothing (the default one writes into the test harness's captured output, a buffer
    // that lives until the test ends: see the heap module's docs).
    std::panic::set_hook(Box::new(|_| {}));
    for _ in 0..50 {
        one_thread(shared, true);
    }
    let _ = std::panic::take_hook();
    assert_eq!(live(), before, "after 50 panicking threads");
}
