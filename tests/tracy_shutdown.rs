//! `TracyGuard::shutdown` with the real Tracy client (feature `tracy`; without it this
//! binary has no test). A test binary of its own: the shutdown stops the client for the
//! rest of the process, and `enable_tracy` panics afterwards.
//!
//! With no profiler connected (tests run without one) the shutdown returns at once. Then
//! nothing reaches the stopped client: not the blocks of arenas that outlived it (a tagged
//! arena, the global scratch and thread arenas), not a frame's plots and frame mark, and
//! the guards still alive do nothing harmful. (`TRACY_NO_EXIT=1` would make Tracy wait for
//! a profiler without limit; the test removes it before the client starts.)
#![cfg(feature = "tracy")]

use std::time::Duration;

use nebula_memory::ledger::{self, TracyEnd};
use nebula_memory::{Arena, ArenaConfig, MemoryArena, engine_arena, game_pool};

mod common;
use common::KIB;

#[test]
fn nothing_reaches_the_client_after_its_shutdown() {
    const TAG: &str = "shutdown/outlives";
    // SAFETY: no other thread of this process reads the environment now: this binary has
    // one test, and the client (which reads it) is not started yet.
    unsafe { std::env::remove_var("TRACY_NO_EXIT") };
    let arena = MemoryArena::with_config(game_pool(), ArenaConfig::default().tag(TAG));
    let tracy = ledger::enable_tracy(true);
    let other = ledger::enable_tracy(false);
    let sent = ledger::tracy_events_sent();
    arena.alloc_slice(200 * KIB, 1u8);
    ledger::end_frame();
    assert!(
        ledger::tracy_events_sent() > sent,
        "the client took nothing"
    );
    assert!(!tracy.wait_for_profiler(Duration::from_millis(20)));

    // SAFETY: this test binary uses Tracy through the ledger only, and the guard is on the
    // thread that called `enable_tracy` (a guard cannot leave it).
    let end = unsafe { tracy.shutdown() };
    assert_eq!(end, TracyEnd::NoProfiler);
    let at_stop = ledger::tracy_events_sent();
    let at_stop_figures = ledger::snapshot().tag(TAG).unwrap();

    // After the stop: the arena that outlived the client gives its blocks back, new blocks
    // are taken and given back (a tagged arena, the global scratch, the thread arenas and
    // the engine arena), a frame ends with its plots and frame mark.
    drop(arena);
    let late = MemoryArena::with_config(game_pool(), ArenaConfig::default().tag(TAG));
    late.alloc_slice(300 * KIB, 1u8);
    drop(late);
    nebula_memory::with_scratch(|s| {
        s.alloc_slice(512 * KIB, 0u8);
    });
    nebula_memory::thread_arena_alloc(std::alloc::Layout::from_size_align(64 * KIB, 16).unwrap());
    nebula_memory::end_thread_arena_frame();
    engine_arena().alloc_slice(4 * KIB, 0u8);
    ledger::end_frame();
    assert_eq!(
        ledger::tracy_events_sent(),
        at_stop,
        "sent to the stopped client"
    );
    let f = ledger::snapshot().tag(TAG).unwrap();
    assert!(
        f.blocks_taken > at_stop_figures.blocks_taken,
        "the ledger still counts"
    );
    assert_eq!((f.held, f.blocks_returned), (0, f.blocks_taken));

    // The other guard: no profiler, no second shutdown, a harmless drop.
    assert!(!other.wait_for_profiler(Duration::from_millis(20)));
    // SAFETY: as above.
    assert_eq!(unsafe { other.shutdown() }, TracyEnd::AlreadyStopped);
    let message = common::panic_message(|| {
        let _third = ledger::enable_tracy(false);
    });
    assert!(message.contains("after TracyGuard::shutdown"), "{message}");
    ledger::end_frame();
    assert_eq!(ledger::tracy_events_sent(), at_stop);
}
