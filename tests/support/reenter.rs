//! The re-entering subscriber of the class-1 torture tests: user code at every event the
//! crate emits, calling back into each public allocating, resetting and frame-ending entry
//! point on the same thread (or panicking), and the bookkeeping that checks the caller's
//! memory survived it.
//!
//! Every warn budget it uses is one byte, re-armed before each call (`set_budget` clears
//! the "already warned" mark), so every block a tagged arena takes emits an event; the
//! pools are small, so exhaustions and heap fallbacks come often too.
#![allow(dead_code)]

use std::alloc::Layout;
use std::cell::{Cell, OnceCell, RefCell};
use std::ptr::NonNull;
use std::sync::OnceLock;

use nebula_memory::ledger::{self, Budget};
use nebula_memory::{
    Arena, ArenaConfig, DoubleBufferedArena, FrameArena, HotCursor, MemoryArena, MemoryPool,
    SharedArena, end_thread_arena_frame, engine_arena, game_arena, maintain_global_pools,
    scratch_batch, thread_arena_alloc, with_scratch,
};

/// What the subscriber does after calling back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Calls every entry point, then returns.
    CallBack,
    /// Calls every entry point, then panics (at the outermost event only).
    Panic,
}

/// The tags whose warn budgets are re-armed: the crate's own and the tests' (`reenter/…`).
pub const TAGS: &[&str] = &["reenter", "engine", "game", "scratch"];

/// Sets every tag's warn budget to one byte again, so that its next block crosses it.
pub fn rearm() {
    for tag in TAGS {
        ledger::set_budget(tag, Budget::Warn(1));
    }
}

thread_local! {
    static MODE: Cell<Mode> = const { Cell::new(Mode::CallBack) };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static EVENTS: Cell<u64> = const { Cell::new(0) };
    /// Memory the subscriber allocated that must still be intact when the operation that
    /// emitted the event has returned (checked, then forgotten, by [`check`]); `true`
    /// marks thread-arena memory.
    static KEPT: RefCell<Vec<(Stamped, bool)>> = const { RefCell::new(Vec::new()) };
    /// A `thread_arena_alloc` of this thread is under way (its events are being told): a
    /// thread-arena call made now does not start a new frame.
    static IN_THREAD_ARENA: Cell<bool> = const { Cell::new(false) };
    /// A `'static` hot cursor the driver registers, which the subscriber allocates
    /// through (the cursor whose refill emitted the event, possibly).
    static HOT: OnceCell<&'static HotCursor<'static, 'static>> = const { OnceCell::new() };
}

pub fn set_mode(mode: Mode) {
    MODE.set(mode);
}

/// Events this thread's subscriber saw so far.
pub fn events() -> u64 {
    EVENTS.get()
}

/// Registers this thread's hot cursor for the subscriber (once per thread).
pub fn register_hot(hot: &'static HotCursor<'static, 'static>) {
    HOT.with(|h| {
        let _ = h.set(hot);
    });
}

/// A `tracing` subscriber that runs [`on_event`] for every event.
pub struct Reenter;

impl tracing::Subscriber for Reenter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        on_event();
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with the re-entering subscriber in `mode` on this thread.
pub fn with_subscriber<R>(mode: Mode, f: impl FnOnce() -> R) -> R {
    set_mode(mode);
    rearm();
    tracing::subscriber::with_default(Reenter, f)
}

/// Lowers `DEPTH` again, also when the subscriber panics.
struct Nested(u32);

impl Drop for Nested {
    fn drop(&mut self) {
        DEPTH.set(self.0);
    }
}

fn on_event() {
    EVENTS.set(EVENTS.get() + 1);
    let depth = DEPTH.get();
    // Calls made here emit events too: answer those once more, then stop.
    if depth >= 2 {
        return;
    }
    let _nested = Nested(depth);
    DEPTH.set(depth + 1);
    rearm();
    call_everything();
    if depth == 0 && MODE.get() == Mode::Panic {
        panic!("reenter: the subscriber panics");
    }
}

/// A stamped allocation: `words` u64s, word `i` = `seed ^ i` (never all zero).
#[derive(Clone, Copy, Debug)]
pub struct Stamped {
    pub ptr: NonNull<u64>,
    pub words: usize,
    pub seed: u64,
}

fn next_seed() -> u64 {
    thread_local! { static SEED: Cell<u64> = const { Cell::new(0x1234_5678) }; }
    SEED.set(
        SEED.get()
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407),
    );
    SEED.get() | 1
}

/// Which words are stamped and checked: all of them natively; under Miri, whose every
/// access costs thousands of native ones, every 64th and the last (enough to touch each
/// allocation's ends and pages; overlaps are found by address).
const STRIDE: usize = if cfg!(miri) { 64 } else { 1 };

/// The stamped word after `i` of `words` (`words` when there is none).
fn next_word(i: usize, words: usize) -> usize {
    if i + STRIDE >= words && i + 1 < words {
        words - 1
    } else {
        i + STRIDE
    }
}

impl Stamped {
    /// Stamps `words` u64s at `p` (fresh memory the caller owns).
    pub fn new(p: NonNull<u8>, words: usize) -> Stamped {
        assert!(p.as_ptr().addr().is_multiple_of(8), "misaligned: {p:p}");
        let s = Stamped {
            ptr: p.cast(),
            words,
            seed: next_seed(),
        };
        let mut i = 0;
        while i < words {
            // SAFETY: the caller hands over `words` u64s of fresh memory.
            unsafe { s.ptr.as_ptr().add(i).write(s.seed ^ i as u64) };
            i = next_word(i, words);
        }
        s
    }

    /// Panics if a word was overwritten.
    #[track_caller]
    pub fn check(&self) {
        let mut i = 0;
        while i < self.words {
            // SAFETY: the allocation is live (the caller's bookkeeping says so).
            let w = unsafe { self.ptr.as_ptr().add(i).read() };
            assert_eq!(
                w,
                self.seed ^ i as u64,
                "{:p}: word {i} of {} overwritten",
                self.ptr,
                self.words
            );
            i = next_word(i, self.words);
        }
    }

    pub fn range(&self) -> (usize, usize) {
        let a = self.ptr.as_ptr().addr();
        (a, a + self.words * 8)
    }
}

/// `thread_arena_alloc`, telling the subscriber that its events come from inside one.
pub fn thread_arena_alloc_marked(layout: Layout) -> Option<NonNull<u8>> {
    let outer = IN_THREAD_ARENA.replace(true);
    let p = thread_arena_alloc(layout);
    IN_THREAD_ARENA.set(outer);
    p
}

/// Checks every allocation of `live` (and those the subscriber kept) is intact and no two
/// overlap, then forgets the subscriber's.
#[track_caller]
pub fn check(live: &[Stamped]) {
    let kept: Vec<Stamped> = KEPT
        .with(|k| std::mem::take(&mut *k.borrow_mut()))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    let mut all: Vec<(usize, usize)> = Vec::with_capacity(live.len() + kept.len());
    for s in live.iter().chain(&kept) {
        s.check();
        if s.words > 0 {
            all.push(s.range());
        }
    }
    all.sort_unstable();
    for w in all.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "allocations overlap: {:#x?} and {:#x?}",
            w[0],
            w[1]
        );
    }
}

fn keep(s: Stamped) {
    KEPT.with(|k| k.borrow_mut().push((s, false)));
}

/// Stamps an allocation of `words` u64s made with `alloc`, if it succeeded.
fn stamp_with(words: usize, alloc: impl FnOnce(Layout) -> Option<NonNull<u8>>) -> Option<Stamped> {
    let layout = Layout::array::<u64>(words).unwrap();
    alloc(layout).map(|p| Stamped::new(p, words))
}

/// A small pool of its own for the subscriber's arenas, so they run dry often.
fn tiny_pool() -> &'static MemoryPool {
    static POOL: OnceLock<MemoryPool> = OnceLock::new();
    POOL.get_or_init(|| MemoryPool::new("reenter-sub", 512 * 1024).unwrap())
}

/// A never-reset shared arena with heap fallback, for the subscriber.
fn shared() -> &'static SharedArena<'static> {
    static SHARED: OnceLock<SharedArena<'static>> = OnceLock::new();
    SHARED.get_or_init(|| {
        SharedArena::with_config(
            tiny_pool(),
            ArenaConfig::default()
                .first_block(4096)
                .heap_fallback(true)
                .tag("reenter/sub/shared"),
        )
    })
}

/// Frame memory that is never swapped (the subscriber has no `&mut`).
fn frames() -> &'static DoubleBufferedArena<'static> {
    static FRAMES: OnceLock<DoubleBufferedArena<'static>> = OnceLock::new();
    FRAMES.get_or_init(|| {
        DoubleBufferedArena::with_config(
            tiny_pool(),
            ArenaConfig::default()
                .first_block(4096)
                .tag("reenter/sub/frames"),
        )
    })
}

/// Every public allocating, resetting and frame-ending entry point of the crate that is
/// reachable from a subscriber, on this thread. What must stay valid until the emitting
/// operation returns is kept for [`check`]; the rest is checked here and let go.
pub fn call_everything() {
    let words = 40; // 320 bytes: a few calls take a new 4 KiB block
    // Scratch space, nested, and a batch.
    with_scratch(|s| {
        let a = stamp_with(words, |l| s.try_alloc(l).ok());
        with_scratch(|t| {
            let b = stamp_with(words, |l| t.try_alloc(l).ok());
            b.iter().for_each(Stamped::check);
        });
        a.iter().for_each(Stamped::check);
    });
    let mut batch = scratch_batch();
    for _ in 0..2 {
        batch.scope(|s| {
            let a = stamp_with(words, |l| s.try_alloc(l).ok());
            a.iter().for_each(Stamped::check);
        });
    }
    drop(batch);
    // Process-wide arenas: the engine arena's memory lives for ever.
    if let Some(s) = stamp_with(words, |l| engine_arena().try_alloc(l).ok()) {
        keep(s);
    }
    {
        let guard = game_arena().read();
        let a = stamp_with(words, |l| guard.try_alloc(l).ok());
        a.iter().for_each(Stamped::check);
    }
    // Refused while a guard of this thread (the driver's) is alive; else a reset.
    game_arena().try_reset();
    // A shared arena (interface, and this thread's part) and frame memory, never reset.
    if let Some(s) = stamp_with(words, |l| shared().try_alloc(l).ok()) {
        keep(s);
    }
    if let Some(s) = shared().with_this_thread(|mine| stamp_with(words, |l| mine.try_alloc(l).ok()))
    {
        keep(s);
    }
    let handle = frames().store([7u64; 4]);
    assert_eq!(frames().get(handle), Some(&[7u64; 4]));
    // The driver's hot cursor, whichever state it is in.
    if let Some(hot) = HOT.with(|h| h.get().copied())
        && let Some(s) = stamp_with(words, |l| hot.try_alloc(l).ok())
    {
        keep(s);
    }
    // Arenas made, filled, reset and dropped here: a fixed one on the small pool (its
    // creation may be refused), and a growing one.
    if let Ok(fixed) = FrameArena::try_new_in(tiny_pool(), 8192) {
        let a = stamp_with(words, |l| fixed.alloc(l));
        a.iter().for_each(Stamped::check);
    }
    {
        let mut arena = MemoryArena::with_config(
            tiny_pool(),
            ArenaConfig::default()
                .first_block(4096)
                .tag("reenter/sub/arena"),
        );
        for _ in 0..3 {
            let a = stamp_with(600, |l| arena.try_alloc(l).ok());
            a.iter().for_each(Stamped::check);
        }
        arena.reset();
    }
    // A pool refusal reported straight from the pool.
    let _ = tiny_pool().allocate_block(1 << 30);
    // Frame ends and maintenance.
    maintain_global_pools();
    let _ = ledger::snapshot();
    let _ = ledger::end_frame();
    // Last, the thread arena: a new frame, then an allocation that must outlive the
    // emitting operation (no thread-arena call follows it here). Unless this runs inside
    // a thread-arena call, the allocation starts the new frame, which ends what the
    // thread allocated before (the documented lifetime).
    end_thread_arena_frame();
    if !IN_THREAD_ARENA.get() {
        KEPT.with(|k| k.borrow_mut().retain(|&(_, thread_arena)| !thread_arena));
    }
    if let Some(s) = stamp_with(8, thread_arena_alloc_marked) {
        KEPT.with(|k| k.borrow_mut().push((s, true)));
    }
}
