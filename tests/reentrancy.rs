//! Class 1 of the soundness rules: no user code runs while an operation of the crate is
//! half done. A `tracing` subscriber is user code; these tests make the crate emit an event
//! in the middle of the operations that once emitted one too early, and have the
//! subscriber panic or call back into the crate there. Each failed before its fix: natively
//! (a pointer outside every block, one allocation handed to two callers) and under Miri.
//!
//! A process of its own: it sets warn budgets on the crate's own tags (`scratch/...`), and
//! the thread-arena case ends frames for every thread.

mod common;

use std::alloc::Layout;
use std::cell::{Cell, OnceCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Mutex;

use nebula_memory::ledger::{self, Budget};
use nebula_memory::{
    Arena, ArenaConfig, DoubleBufferedArena, HotCursor, MemoryArena, MemoryPool,
    end_thread_arena_frame, thread_arena_alloc,
};

use common::{KIB, OnEvent};

/// The tests of this binary change process-wide state (budgets of the crate's tags, the
/// thread arenas' frame): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool that lives for the process (what a `&'static` arena needs).
fn leaked_pool(name: &'static str) -> &'static MemoryPool {
    common::leak(MemoryPool::new(name, 4 << 20).unwrap())
}

/// An arena whose every first block crosses its tag's warn budget of one byte, so taking
/// it emits a WARN event.
fn warned_arena<'p>(pool: &'p MemoryPool, tag: &'static str) -> MemoryArena<'p> {
    ledger::set_budget(tag, Budget::Warn(1));
    MemoryArena::with_config(pool, ArenaConfig::default().tag(tag).first_block(4 * KIB))
}

/// Checks that `[p, p + len)` lies inside `pool` and is writable and readable as ours.
#[track_caller]
fn check_owned(pool: &MemoryPool, p: NonNull<u8>, len: usize, fill: u8) {
    assert!(
        pool.contains(p.as_ptr()) && pool.contains(p.as_ptr().wrapping_add(len - 1)),
        "{p:p} (+{len}) is not memory of pool '{}'",
        pool.name()
    );
    // SAFETY: checked to lie in the pool; the test owns the allocation.
    unsafe {
        p.as_ptr().write_bytes(fill, len);
        assert!(
            std::slice::from_raw_parts(p.as_ptr(), len)
                .iter()
                .all(|&b| b == fill)
        );
    }
}

/// F1: the `HotCursor` slow path took a block, whose budget WARN reached a subscriber
/// that panicked. The unwinding cursor wrote its stale position (the sentinel) into the
/// arena, whose window was the new block by then: the next allocation got the sentinel's
/// address.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn a_subscriber_that_panics_in_a_hot_cursor_refill_leaves_the_arena_whole() {
    let _serial = serial();
    let pool = MemoryPool::new("reentry-f1", 1 << 20).unwrap();
    let mut arena = warned_arena(&pool, "reentry/f1");
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        tracing::subscriber::with_default(OnEvent(|_: &tracing::Event<'_>| panic!("boom")), || {
            let hot = arena.hot_cursor();
            hot.alloc_val(1u64); // the first block: a WARN, a panic
        })
    }));
    assert!(unwound.is_err(), "the subscriber was meant to panic");
    let layout = Layout::new::<[u64; 4]>();
    let p = arena.alloc(layout);
    check_owned(&pool, p, layout.size(), 0x11);
    // The cursor still works after the panic, and hands out fresh memory.
    let hot = arena.hot_cursor();
    let q = hot.alloc(layout);
    assert_ne!(p, q);
    check_owned(&pool, q, layout.size(), 0x22);
    drop(hot);
    // The allocation whose event panicked was made (8 bytes), then the two above.
    assert_eq!(arena.bytes_used(), 8 + 2 * 32);
}

thread_local! {
    /// F1b's cursor, over a leaked arena, reachable from the subscriber.
    static HOT: OnceCell<&'static HotCursor<'static, 'static>> = const { OnceCell::new() };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static INNER: Cell<Option<NonNull<u8>>> = const { Cell::new(None) };
}

/// F1b: the same without a panic. A subscriber allocating through the very cursor whose
/// refill emitted the event found the cursor's registers not yet reloaded, and refilled
/// from the stale position: a position outside the arena's window.
#[test]
fn a_subscriber_may_allocate_through_the_hot_cursor_being_refilled() {
    let _serial = serial();
    let pool = leaked_pool("reentry-f1b");
    let arena: &'static mut MemoryArena<'static> = common::leak(warned_arena(pool, "reentry/f1b"));
    let hot: &'static HotCursor<'static, 'static> = common::leak(arena.hot_cursor());
    HOT.with(|h| h.set(hot).ok().unwrap());
    let layout = Layout::new::<[u64; 8]>();
    let reenter = move |_: &tracing::Event<'_>| {
        if DEPTH.replace(DEPTH.get() + 1) == 0 {
            let q = HOT.with(|h| h.get().unwrap().alloc(layout));
            INNER.set(Some(q));
        }
        DEPTH.set(DEPTH.get() - 1);
    };
    let outer = tracing::subscriber::with_default(OnEvent(reenter), || hot.alloc(layout));
    let inner = INNER.get().expect("the first block emitted a WARN");
    check_owned(pool, outer, layout.size(), 0x33);
    check_owned(pool, inner, layout.size(), 0x44);
    assert!(
        outer.as_ptr().addr() + layout.size() <= inner.as_ptr().addr()
            || inner.as_ptr().addr() + layout.size() <= outer.as_ptr().addr(),
        "outer {outer:p} and inner {inner:p} overlap"
    );
    // Both are still intact.
    check_owned(pool, outer, layout.size(), 0x33);
    assert_eq!(hot.bytes_used(), 2 * layout.size());
}

/// F3: `thread_arena_alloc`'s slow path emitted the budget WARN while it still held the
/// arena; a subscriber that ended the frame and allocated reset the arena under it, and
/// both calls returned the same bytes (under Miri: a `&mut` made while a protected `&` was
/// live).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_subscriber_that_ends_the_frame_inside_thread_arena_alloc_gets_its_own_bytes() {
    let _serial = serial();
    // A thread of its own, so that its thread arena is new and takes its first block here.
    std::thread::spawn(|| {
        ledger::set_budget("scratch/thread_arenas", Budget::Warn(1));
        let layout = Layout::new::<[u8; 64]>();
        let reenter = move |_: &tracing::Event<'_>| {
            if DEPTH.replace(DEPTH.get() + 1) == 0 {
                end_thread_arena_frame();
                let q = thread_arena_alloc(layout).expect("room for 64 bytes");
                // SAFETY: 64 fresh bytes of this thread's arena.
                unsafe { q.as_ptr().write_bytes(0x55, 64) };
                INNER.set(Some(q));
            }
            DEPTH.set(DEPTH.get() - 1);
        };
        let outer = tracing::subscriber::with_default(OnEvent(reenter), || {
            thread_arena_alloc(layout).expect("room for 64 bytes")
        });
        let inner = INNER.get().expect("the first block emitted a WARN");
        assert_ne!(outer, inner, "both calls got the same bytes");
        // SAFETY: the outer allocation is live (this thread has not allocated since).
        unsafe { outer.as_ptr().write_bytes(0x66, 64) };
        // SAFETY: the inner one too: it was made after the frame ended, and nothing since.
        let kept = unsafe { std::slice::from_raw_parts(inner.as_ptr(), 64) };
        assert!(
            kept.iter().all(|&b| b == 0x55),
            "the outer write clobbered the inner bytes"
        );
        ledger::clear_budgets("scratch/thread_arenas");
    })
    .join()
    .unwrap();
}

/// Found by the torture below: `swap` reset the older buffer, whose replacement block
/// crossed a budget, and told the subscriber before renewing the buffer's stamp. A
/// subscriber that panicked there left the old stamp in place, so a handle into the freed
/// frame still passed `get`.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn a_subscriber_that_panics_in_a_swap_leaves_no_stale_handle() {
    let _serial = serial();
    let pool = MemoryPool::new("reentry-swap", 4 << 20).unwrap();
    let mut frames = DoubleBufferedArena::with_config(
        &pool,
        ArenaConfig::default()
            .first_block(4 * KIB)
            .tag("reentry/swap"),
    );
    let old = frames.store_slice(&[7u64; 16]);
    // Spread the frame over several blocks, so its reset replaces them with one.
    for _ in 0..8 {
        frames.store_slice(&[1u64; 256]);
    }
    frames.swap(); // `old`'s frame is now the previous one: still readable
    assert!(frames.get(old).is_some());
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        tracing::subscriber::with_default(OnEvent(|_: &tracing::Event<'_>| panic!("boom")), || {
            ledger::set_budget("reentry/swap", Budget::Warn(1));
            frames.swap(); // resets `old`'s frame: its replacement block crosses the budget
        })
    }));
    assert!(
        unwound.is_err(),
        "the replacement block was meant to emit a WARN"
    );
    assert_eq!(
        frames.get(old),
        None,
        "a handle into a reset frame passed `get`"
    );
    // The arena goes on.
    let h = frames.store(3u32);
    assert_eq!(frames.get(h), Some(&3));
}

/// A hot cursor's moving realloc told its events before reloading the registers: a
/// subscriber allocating through the cursor refilled from the stale position.
#[test]
fn a_subscriber_may_allocate_through_a_hot_cursor_during_its_realloc() {
    let _serial = serial();
    let pool = leaked_pool("reentry-hot-realloc");
    let arena = common::leak(warned_arena(pool, "reentry/hotrealloc"));
    let hot: &'static HotCursor<'static, 'static> = common::leak(arena.hot_cursor());
    let small = Layout::new::<[u64; 4]>();
    let buf = hot.alloc(small);
    thread_local! {
        static HOT2: OnceCell<&'static HotCursor<'static, 'static>> = const { OnceCell::new() };
    }
    HOT2.with(|h| h.set(hot).ok().unwrap());
    let reenter = |_: &tracing::Event<'_>| {
        if DEPTH.replace(DEPTH.get() + 1) == 0 {
            // More than the old block has left: a refill, from wherever the registers are.
            let q = HOT2.with(|h| h.get().unwrap().alloc(Layout::new::<[u64; 1024]>()));
            INNER.set(Some(q));
        }
        DEPTH.set(DEPTH.get() - 1);
    };
    INNER.set(None);
    // Grow the top past its block: it moves to a new block, which crosses the budget.
    ledger::set_budget("reentry/hotrealloc", Budget::Warn(1));
    let grown = tracing::subscriber::with_default(OnEvent(reenter), || {
        // SAFETY: `buf` is the live top with `small`; only the result is used afterwards.
        unsafe { hot.realloc(buf, small, 64 * KIB) }.unwrap()
    });
    let inner = INNER.get().expect("the new block emitted a WARN");
    check_owned(pool, grown, 64 * KIB, 0x77);
    check_owned(pool, inner, 8 * KIB, 0x88);
    let (g, i) = (grown.as_ptr().addr(), inner.as_ptr().addr());
    assert!(
        i + 8 * KIB <= g || g + 64 * KIB <= i,
        "the inner allocation overlaps the grown one"
    );
    check_owned(pool, grown, 64 * KIB, 0x77);
}

// ---------------------------------------------------------------------------- the torture

#[path = "support/reenter.rs"]
mod reenter;

use nebula_memory::{
    FrameArena, SharedArena, engine_arena, game_arena, scratch_batch, thread_arena_frame,
    thread_arena_reset, with_scratch,
};
use reenter::{Mode, Stamped, check, with_subscriber};

/// Operations per arena kind and mode: fewer under Miri and valgrind, which check each
/// access and are tens of times slower.
fn ops() -> usize {
    if cfg!(miri) {
        6
    } else if common::under_valgrind() {
        60
    } else {
        300
    }
}

/// A small pool, so the drivers' arenas take blocks (and run dry) often.
fn small_pool(name: &'static str) -> &'static MemoryPool {
    common::leak(MemoryPool::new(name, 1 << 20).unwrap())
}

/// A pool that runs dry after a few blocks: exhaustions, then heap fallbacks.
fn tiny_pool(name: &'static str) -> &'static MemoryPool {
    common::leak(MemoryPool::new(name, 32 * KIB).unwrap())
}

/// A tagged config whose blocks are small (so an arena takes one every few operations),
/// with heap fallback.
fn config(tag: &'static str) -> ArenaConfig {
    ArenaConfig::default()
        .first_block(4 * KIB)
        .max_block(8 * KIB)
        .heap_fallback(true)
        .tag(tag)
}

/// Runs one operation of a driver. In `Panic` mode the subscriber panics at the first
/// event the operation emits: `None` then (the operation's result is lost, never its
/// consistency), and the caller keeps checking everything it still holds.
fn op<R>(mode: Mode, f: impl FnOnce() -> R) -> Option<R> {
    reenter::rearm(); // the operation's next block emits an event
    match mode {
        Mode::CallBack => Some(f()),
        Mode::Panic => {
            let r = catch_unwind(AssertUnwindSafe(f)).ok();
            if r.is_none() {
                // What the subscriber kept before it panicked is still valid now.
                check(&[]);
            }
            r
        }
    }
}

/// Sizes in u64 words: mostly small, sometimes a few KiB (a new block).
fn words(i: usize) -> usize {
    match i % 7 {
        0 => 300 + (i % 5) * 100,
        _ => 1 + (i * 13) % 60,
    }
}

/// One driver per arena kind; each checks after every operation that what it holds (and
/// what the subscriber kept) is intact and disjoint.
fn drive_memory_arena(mode: Mode) {
    let mut arena = MemoryArena::with_config(small_pool("torture-mem"), config("reenter/mem"));
    let mut live: Vec<(Stamped, Layout)> = Vec::new();
    for i in 0..ops() {
        match i % 11 {
            // Grow the newest allocation (in place, or moved to a new block).
            3 | 8 if !live.is_empty() => {
                let (old, layout) = live.pop().unwrap();
                let new_words = old.words * 3 + 50;
                // SAFETY: `old` is live with `layout`; only the result is used afterwards.
                let r = op(mode, || unsafe {
                    arena.realloc(old.ptr.cast(), layout, new_words * 8)
                });
                if let Some(Ok(q)) = r {
                    // The first words moved along; stamp the whole buffer afresh.
                    // SAFETY: `q` holds the old words.
                    assert_eq!(unsafe { q.cast::<u64>().read() }, old.seed);
                    let layout = Layout::array::<u64>(new_words).unwrap();
                    live.push((Stamped::new(q, new_words), layout));
                }
            }
            // Pop the newest.
            5 if !live.is_empty() => {
                let (top, layout) = live.pop().unwrap();
                // SAFETY: `top` is not used again.
                unsafe { arena.pop(top.ptr.cast(), layout) };
            }
            10 => {
                live.clear();
                op(mode, || arena.reset_and_release());
            }
            _ => {
                let layout = Layout::array::<u64>(words(i)).unwrap();
                if let Some(Ok(p)) = op(mode, || arena.try_alloc(layout)) {
                    live.push((Stamped::new(p, words(i)), layout));
                }
            }
        }
        check(&live.iter().map(|(s, _)| *s).collect::<Vec<_>>());
    }
}

/// A hot cursor over a leaked arena, which the subscriber also allocates through.
fn drive_hot_cursor(mode: Mode) {
    let arena = common::leak(MemoryArena::with_config(
        small_pool("torture-hot"),
        config("reenter/hot"),
    ));
    let hot: &'static HotCursor<'static, 'static> = common::leak(arena.hot_cursor());
    reenter::register_hot(hot);
    let mut live: Vec<(Stamped, Layout)> = Vec::new();
    for i in 0..ops() {
        match i % 9 {
            // Grow the newest (in place, or moved to a new block).
            4 if !live.is_empty() => {
                let (old, layout) = live.pop().unwrap();
                let new_words = old.words * 3 + 50;
                // SAFETY: `old` is live with `layout`; only the result is used afterwards.
                let r = op(mode, || unsafe {
                    hot.realloc(old.ptr.cast(), layout, new_words * 8)
                });
                if let Some(Ok(q)) = r {
                    let layout = Layout::array::<u64>(new_words).unwrap();
                    live.push((Stamped::new(q, new_words), layout));
                }
            }
            7 if !live.is_empty() => {
                let (top, layout) = live.pop().unwrap();
                // SAFETY: `top` is not used again.
                unsafe { hot.pop(top.ptr.cast(), layout) };
            }
            _ => {
                let layout = Layout::array::<u64>(words(i)).unwrap();
                if let Some(Ok(p)) = op(mode, || hot.try_alloc(layout)) {
                    live.push((Stamped::new(p, words(i)), layout));
                }
            }
        }
        check(&live.iter().map(|(s, _)| *s).collect::<Vec<_>>());
    }
}

/// Hot cursors made and dropped around each allocation: the drop (on unwinding too)
/// writes the position back.
fn drive_hot_cursor_drops(mode: Mode) {
    let mut arena =
        MemoryArena::with_config(small_pool("torture-hot-drop"), config("reenter/hotdrop"));
    let mut live = Vec::new();
    for i in 0..ops() {
        let layout = Layout::array::<u64>(words(i)).unwrap();
        let r = op(mode, || {
            let hot = arena.hot_cursor();
            hot.try_alloc(layout).ok()
        });
        if let Some(Some(p)) = r {
            live.push(Stamped::new(p, words(i)));
        }
        check(&live);
        if i % 10 == 9 {
            live.clear();
            op(mode, || arena.reset_and_release());
        }
    }
}

fn drive_shared_arena(mode: Mode) {
    let mut arena = SharedArena::with_config(tiny_pool("torture-shared"), config("reenter/shared"));
    let mut live = Vec::new();
    for i in 0..ops() {
        let layout = Layout::array::<u64>(words(i)).unwrap();
        let r = if i % 2 == 0 {
            op(mode, || arena.try_alloc(layout))
        } else {
            op(mode, || {
                arena.with_this_thread(|mine| mine.try_alloc(layout))
            })
        };
        if let Some(Ok(p)) = r {
            live.push(Stamped::new(p, words(i)));
        }
        check(&live);
        if i % 30 == 29 {
            live.clear();
            op(mode, || arena.reset());
        }
    }
}

/// Fixed arenas: allocation never grows, so the events come from making one on a pool
/// that is full (each try reports the exhaustion).
fn drive_frame_arena(mode: Mode) {
    let pool = small_pool("torture-fixed");
    let fixed = FrameArena::try_new_in(pool, 512 * KIB).unwrap();
    let _filler = FrameArena::try_new_in(pool, 400 * KIB).unwrap();
    let mut live = Vec::new();
    for i in 0..ops() {
        if i % 3 == 0 {
            op(mode, || {
                assert!(FrameArena::try_new_in(pool, 512 * KIB).is_err())
            });
        }
        let layout = Layout::array::<u64>(words(i)).unwrap();
        if let Some(p) = fixed.alloc(layout) {
            live.push(Stamped::new(p, words(i)));
        }
        check(&live);
        if i % 40 == 39 {
            live.clear();
            // SAFETY: nothing allocated from `fixed` is used any more (`live` is cleared).
            unsafe { fixed.reset() };
        }
    }
}

/// The thread arena, on a thread of its own so that its arena starts empty.
fn drive_thread_arena(mode: Mode) {
    std::thread::spawn(move || {
        with_subscriber(mode, || {
            let mut live = Vec::new();
            let mut live_frame = thread_arena_frame();
            for i in 0..ops() {
                reenter::rearm();
                // A subscriber may have ended the frame: then this call starts a new one,
                // and what the thread allocated before is gone (the documented lifetime).
                if thread_arena_frame() != live_frame {
                    live.clear();
                    live_frame = thread_arena_frame();
                }
                let layout = Layout::array::<u64>(words(i)).unwrap();
                if let Some(Some(p)) = op(mode, || reenter::thread_arena_alloc_marked(layout)) {
                    live.push(Stamped::new(p, words(i)));
                }
                check(&live);
                match i % 60 {
                    29 => {
                        live.clear();
                        end_thread_arena_frame();
                    }
                    59 => {
                        live.clear();
                        // SAFETY: nothing from this thread's arena is used any more.
                        unsafe { thread_arena_reset() };
                    }
                    _ => {}
                }
            }
            assert!(
                reenter::events() > 0,
                "the thread arena never emitted an event"
            );
        })
    })
    .join()
    .unwrap();
}

fn drive_scratch(mode: Mode) {
    // Ten requests an iteration, a tenth of the others' operations; under Miri one (its
    // first request, 19 KiB, is past the 4 KiB first block: events).
    for i in 0..(ops() / 10).max(1) {
        reenter::rearm();
        op(mode, || {
            with_scratch(|s| {
                let mut live = Vec::new();
                for k in 0..10 {
                    // Past the 4 KiB first block now and then.
                    let words = words(i * 10 + k) * 8;
                    let layout = Layout::array::<u64>(words).unwrap();
                    if let Ok(p) = s.try_alloc(layout) {
                        live.push(Stamped::new(p, words));
                    }
                    check(&live);
                }
            })
        });
        op(mode, || {
            let mut batch = scratch_batch();
            for k in 0..3 {
                batch.scope(|s| {
                    let mut live = Vec::new();
                    for j in 0..4 {
                        let layout = Layout::array::<u64>(words(i + k + j) * 4).unwrap();
                        if let Ok(p) = s.try_alloc(layout) {
                            live.push(Stamped::new(p, words(i + k + j) * 4));
                        }
                        check(&live);
                    }
                });
            }
        });
    }
}

fn drive_double_buffered(mode: Mode) {
    let mut frames =
        DoubleBufferedArena::with_config(tiny_pool("torture-double"), config("reenter/double"));
    let mut handles = Vec::new();
    for i in 0..ops() {
        if let Some(Ok(h)) = op(mode, || frames.try_store_slice(&vec![i as u64; words(i)])) {
            handles.push((h, i));
        }
        for &(h, j) in &handles {
            assert!(
                frames
                    .get(h)
                    .is_some_and(|v| v.iter().all(|&w| w == j as u64))
            );
        }
        check(&[]);
        if i % 10 == 9 {
            op(mode, || {
                frames.swap();
                frames.swap();
            });
            handles.clear();
        }
    }
}

fn drive_engine_and_game(mode: Mode) {
    let mut forever = Vec::new();
    // The engine arena never resets, and earlier runs may have left room in the part this
    // thread gets: take 16 KiB pieces until one takes a block (an event).
    let before = reenter::events();
    for _ in 0..256 {
        if reenter::events() > before {
            break;
        }
        let layout = Layout::array::<u64>(2048).unwrap();
        if let Some(Ok(p)) = op(mode, || engine_arena().try_alloc(layout)) {
            check(&[Stamped::new(p, 2048)]);
        }
    }
    // Two rounds under Miri: these requests are the largest, and each event calls every
    // entry point back.
    for i in 0..if cfg!(miri) { 2 } else { ops() } {
        // Larger requests: these arenas start with 64 KiB blocks.
        let layout = Layout::array::<u64>(words(i) * 16).unwrap();
        if let Some(Ok(p)) = op(mode, || engine_arena().try_alloc(layout)) {
            forever.push(Stamped::new(p, words(i) * 16));
        }
        // The subscriber tries to reset the game arena: refused while this guard lives.
        let guard = game_arena().read();
        let mut level = Vec::new();
        for k in 0..3 {
            let layout = Layout::array::<u64>(words(i + k) * 16).unwrap();
            if let Some(Ok(p)) = op(mode, || guard.try_alloc(layout)) {
                level.push(Stamped::new(p, words(i + k) * 16));
            }
            let all: Vec<_> = forever.iter().chain(&level).copied().collect();
            check(&all);
        }
        drop(guard);
        check(&forever);
    }
}

/// Every arena kind and handle, with a subscriber that calls every entry point back on
/// each event, then with one that also panics: what each driver holds stays intact and
/// disjoint from everything else, and every arena keeps working.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_subscriber_calling_back_into_every_entry_point_sees_only_consistent_arenas() {
    let _serial = serial();
    type Driver = fn(Mode);
    let kinds: &[(&str, Driver)] = &[
        ("MemoryArena", drive_memory_arena),
        ("HotCursor", drive_hot_cursor),
        ("HotCursor (dropped)", drive_hot_cursor_drops),
        ("SharedArena", drive_shared_arena),
        ("FrameArena", drive_frame_arena),
        ("thread_arena_alloc", drive_thread_arena),
        ("with_scratch / scratch_batch", drive_scratch),
        ("DoubleBufferedArena", drive_double_buffered),
        ("engine_arena / game_arena", drive_engine_and_game),
    ];
    for mode in [Mode::CallBack, Mode::Panic] {
        for (name, drive) in kinds {
            // A fresh thread per run: the per-thread arenas (scratch, thread arena) start
            // empty, so the first blocks they take emit events in both modes.
            let seen = std::thread::scope(|s| {
                s.spawn(|| {
                    with_subscriber(mode, || drive(mode));
                    reenter::events()
                })
                .join()
                .unwrap()
            });
            // (The thread-arena driver's events are its own thread's: it checks them.)
            assert!(
                seen > 0 || *name == "thread_arena_alloc",
                "{name}, {mode:?}: no event was emitted, so nothing was tortured"
            );
        }
    }
}
