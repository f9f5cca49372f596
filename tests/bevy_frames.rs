//! The frame's end in a Bevy app with `MemoryPlugin`: every thread's frame memory reset,
//! systems ordered after it, frame handles across frames, the level arena's reset message,
//! statistics, budget warnings and diagnostics, and the trim after a spike. (Bevy's
//! default task pools.)
#![cfg(feature = "bevy")]

use nebula_memory::Arena;
use std::alloc::Layout;
use std::sync::{Arc, Mutex, mpsc};

use bevy_app::{App, Last, Update};
use bevy_diagnostic::DiagnosticsStore;
use bevy_ecs::prelude::*;
use nebula_memory::FrameHandle;
use nebula_memory::bevy::{
    FrameMemory, GameMemory, MemoryBudgets, MemoryPlugin, MemoryStats, MemorySystems,
    ResetGameArena, Scratch, paths, reset_frame_arenas_system,
};
use nebula_memory::{all_thread_arenas_stats, thread_arena_alloc, thread_arena_stats};
use tracing::{Event, Level, Subscriber, field::Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every frame end resets the thread arenas of the whole process, so the tests here, which
/// all run frames, run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn app() -> App {
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::default());
    app
}

/// One run of the frame-end system resets the frame arena of every thread that has one,
/// also of a thread Bevy knows nothing about.
#[test]
fn the_frame_end_resets_every_threads_arena() {
    let _serial = serial();
    let mut app = app();
    app.add_systems(Update, || {
        // A system's frame memory, on whichever worker thread it runs.
        thread_arena_alloc(Layout::new::<[u64; 32]>()).unwrap();
    });
    let (allocated_tx, allocated) = mpsc::channel();
    let (reset_tx, reset) = mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        thread_arena_alloc(Layout::new::<[u8; 1000]>()).unwrap();
        allocated_tx
            .send(thread_arena_stats().unwrap().bytes_used)
            .unwrap();
        reset.recv().unwrap(); // the frame ends meanwhile
        thread_arena_stats().unwrap().bytes_used
    });
    assert_eq!(allocated.recv().unwrap(), 1000);
    assert!(all_thread_arenas_stats().bytes_used >= 1000);
    app.update();
    reset_tx.send(()).unwrap();
    assert_eq!(
        other.join().unwrap(),
        0,
        "a non-Bevy thread's arena was reset too"
    );
    assert_eq!(all_thread_arenas_stats().bytes_used, 0);
    let stats = *app.world().resource::<MemoryStats>();
    assert!(stats.thread_arena_bytes >= 1000 + 256, "{stats}");
    assert!(stats.thread_arenas >= 2, "{stats}");
}

/// `reset_frame_arenas_system` is a safe function that any code with a `&mut World` can run
/// at any time (even on a `World::new()`): it must not take memory from under a thread
/// that is using it. A non-Bevy thread's value keeps its contents through such a frame end
/// (it was once reset from the calling thread: 0xDD in debug builds); the thread's own next
/// allocation starts its arena over, as `thread_arena_alloc` documents.
#[test]
fn a_stray_frame_end_leaves_a_threads_memory_alone() {
    let _serial = serial();
    let (allocated_tx, allocated) = mpsc::channel();
    let (ended_tx, ended) = mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let p = thread_arena_alloc(Layout::new::<u64>())
            .unwrap()
            .cast::<u64>();
        // SAFETY: 8 fresh bytes, ours until this thread allocates in a later frame.
        unsafe { p.as_ptr().write(1) };
        allocated_tx.send(()).unwrap();
        ended.recv().unwrap();
        // SAFETY: this thread has not allocated since: `p` is still valid.
        let kept = unsafe { p.as_ptr().read() };
        let again = thread_arena_alloc(Layout::new::<u64>())
            .unwrap()
            .cast::<u64>();
        (kept, again == p)
    });
    allocated.recv().unwrap();
    reset_frame_arenas_system(&mut World::new());
    ended_tx.send(()).unwrap();
    assert_eq!(
        other.join().unwrap(),
        (1, true),
        "(kept value, started over)"
    );
}

#[derive(Resource, Default)]
struct SeenAfterReset(Vec<(usize, usize, u64)>);

/// A system ordered after `MemorySystems::Reset` sees the frame memory empty and the
/// statistics of the frame that just ended.
#[test]
fn a_system_after_the_reset_sees_empty_arenas() {
    let _serial = serial();
    let mut app = app();
    app.init_resource::<SeenAfterReset>()
        .add_systems(Update, |frames: Res<FrameMemory>, scratch: Scratch| {
            frames.current().alloc_slice(500, 1u8);
            scratch.alloc_slice(300, 2u8);
            thread_arena_alloc(Layout::new::<[u8; 64]>()).unwrap();
        })
        .add_systems(
            Last,
            (|frames: Res<FrameMemory>,
              stats: Res<MemoryStats>,
              mut seen: ResMut<SeenAfterReset>| {
                seen.0.push((
                    frames.current().bytes_used() + all_thread_arenas_stats().bytes_used,
                    stats.scratch_bytes + stats.frame_memory_bytes,
                    stats.frame,
                ));
            })
            .after(MemorySystems::Reset),
        );
    for _ in 0..3 {
        app.update();
    }
    let seen = &app.world().resource::<SeenAfterReset>().0;
    assert_eq!(seen, &[(0, 800, 1), (0, 800, 2), (0, 800, 3)]);
}

#[derive(Component)]
struct Culled(FrameHandle<[u32]>);

#[derive(Resource, Default)]
struct Reads(Vec<Option<Vec<u32>>>);

/// A `FrameHandle` stored in a component is read back by a later system the same frame
/// and the next, and refused the frame after.
#[test]
fn a_stored_frame_handle_lives_one_frame_more() {
    let _serial = serial();
    fn store(frames: Res<FrameMemory>, mut commands: Commands, mut frame: Local<u32>) {
        *frame += 1;
        if *frame == 2 {
            commands.spawn(Culled(frames.store_slice(&[4, 8, 15])));
        }
    }
    fn read(frames: Res<FrameMemory>, culled: Query<&Culled>, mut reads: ResMut<Reads>) {
        for c in &culled {
            reads.0.push(frames.get(c.0).map(<[u32]>::to_vec));
        }
    }
    let mut app = app();
    app.init_resource::<Reads>()
        .add_systems(Update, (store, read).chain());
    for _ in 0..4 {
        app.update();
    }
    let reads = &app.world().resource::<Reads>().0;
    assert_eq!(
        reads,
        &[Some(vec![4, 8, 15]), Some(vec![4, 8, 15]), None],
        "stored in frame 2: read in frames 2 and 3, refused in frame 4"
    );
}

/// A `ResetGameArena` message frees the level arena at the frame's end.
#[test]
fn a_reset_message_frees_the_level_arena() {
    let _serial = serial();
    let mut app = app();
    app.add_systems(Update, |game: Res<GameMemory>| {
        game.read().alloc_slice(10_000, 0u8);
    });
    app.update();
    app.update();
    let used = |app: &App| {
        app.world()
            .resource::<GameMemory>()
            .arena()
            .stats()
            .bytes_used
    };
    assert_eq!(
        used(&app),
        20_000,
        "level data accumulates until the level changes"
    );
    app.world_mut().write_message(ResetGameArena);
    app.update(); // this frame's allocation, then the reset at its end
    assert_eq!(used(&app), 0);
    app.update();
    assert_eq!(used(&app), 10_000);
}

/// A `Scratch` item that is `mem::forget`-ed keeps its arena busy only until the frame's
/// end; later frames work as before.
#[test]
fn a_forgotten_scratch_item_is_freed_at_the_frame_end() {
    let _serial = serial();
    let mut app = app();
    app.add_systems(Update, |a: Scratch| {
        a.alloc_slice(100, 1u8);
        std::mem::forget(a);
    })
    .add_systems(Update, |b: Scratch| {
        assert_eq!(b.alloc_slice(100, 2u8), &[2u8; 100][..]);
    });
    for _ in 0..5 {
        app.update();
    }
    let stats = *app.world().resource::<MemoryStats>();
    assert!(stats.scratch_arenas <= 4, "arenas do not pile up: {stats}");
}

/// Captures (level, message) of every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), m.0));
    }
}

/// The frame's figures: a DEBUG event per frame, a WARN past 90% of a budget, and Bevy
/// diagnostics.
#[test]
fn statistics_budgets_and_diagnostics() {
    let _serial = serial();
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let mut app = App::new();
        app.add_plugins(MemoryPlugin {
            budgets: MemoryBudgets {
                scratch: 10_000,
                ..Default::default()
            },
            ..Default::default()
        })
        .add_systems(Update, |scratch: Scratch| {
            scratch.alloc_slice(9_500, 0u8); // 95% of the budget
        });
        app.update();
        app.update();
        let stats = *app.world().resource::<MemoryStats>();
        assert_eq!((stats.frame, stats.scratch_bytes), (2, 9_500));
        assert_eq!(stats.pools[2].name, "scratch");
        assert!(stats.pools[2].in_use > 0);
        let store = app.world().resource::<DiagnosticsStore>();
        let scratch = store.get(&paths::SCRATCH_BYTES).unwrap();
        assert_eq!(scratch.value(), Some(9_500.0));
        assert!(
            store
                .get(&paths::SCRATCH_POOL_IN_USE)
                .unwrap()
                .value()
                .unwrap()
                > 0.0
        );
    });
    let events = capture.0.lock().unwrap();
    let debug = events
        .iter()
        .filter(|(l, m)| *l == Level::DEBUG && m.contains("scratch"))
        .count();
    let warn = events
        .iter()
        .filter(|(l, m)| *l == Level::WARN && m.contains("scratch memory"))
        .count();
    assert_eq!(debug, 2, "{events:?}");
    assert_eq!(warn, 2, "{events:?}");
}

/// A spike of scratch memory is given back once quiet frames follow: by the reset policy
/// when the system keeps running on the thread that took the spike, by idle trimming
/// (`maintain_global_pools`, which the plugin runs each frame) when the executor moves it to
/// another thread. The scratch pool's use returns to where it was before the spike.
#[test]
fn the_frame_end_trims_scratch_after_a_spike() {
    const SPIKE: usize = 8 << 20;
    const WARM: u32 = 4;
    const QUIET: u32 = 4;
    let _serial = serial();
    let mut app = App::new();
    app.add_plugins(MemoryPlugin {
        scratch: nebula_memory::ArenaConfig::default().trim_after_resets(QUIET),
        ..Default::default()
    })
    .add_systems(Update, |scratch: Scratch, mut frame: Local<u32>| {
        *frame += 1;
        let bytes = if *frame == WARM + 1 { SPIKE } else { 10_000 };
        let buf = scratch.alloc_slice(bytes, 1u8);
        assert_eq!(buf.len(), bytes);
    });
    let scratch_pool = |app: &App| app.world().resource::<MemoryStats>().pools[2].in_use;
    for _ in 0..WARM {
        app.update();
    }
    let before = scratch_pool(&app);
    app.update(); // the spike
    let during = scratch_pool(&app);
    // The spike's block is kept for now (no larger than what the spike frame held).
    assert!(during > before + SPIKE / 2, "{before} -> {during}");
    // The kept block is far too large from here on; after QUIET such resets it is replaced,
    // and an arena used only now and then on another thread gives everything back within
    // two windows of SCRATCH_IDLE_PASSES frames.
    for _ in 0..2 * nebula_memory::SCRATCH_IDLE_PASSES as u32 + 1 {
        app.update();
    }
    let after = scratch_pool(&app);
    assert!(
        after < before + SPIKE / 8,
        "the spike was not given back: {before} before, {during} during, {after} after"
    );
    assert_eq!(app.world().resource::<MemoryStats>().scratch_bytes, 10_000);
}
