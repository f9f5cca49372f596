//! The ledger following the global allocator: a `TrackingAllocator` is this binary's
//! global allocator, so every heap allocation of the process is charged to the calling
//! thread's scope (or the untagged line). Each test uses tags of its own; figures are
//! compared as differences, since the harness allocates too. Allocations the test only
//! measures go through `black_box`: an optimised build may leave out a heap allocation
//! nothing reads (CI runs this binary in release too).
//!
//! Not under Miri (megabytes per test through the global allocator are slow there): the
//! allocator's logic is Miri-checked by `tests/heap_model.rs`; this binary runs natively
//! and under TSan.
#![cfg(not(miri))]

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::sync::Mutex;

use nebula_memory::ledger::{self, Budget};
use nebula_memory::{AllocError, Arena, ArenaConfig, MemoryArena, MemoryPool, TrackingAllocator};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

/// Tests that end ledger frames (which restart every tag's call counts) or wait for a
/// budget WARN (told on whichever thread reports next) run one at a time.
static FRAMES: Mutex<()> = Mutex::new(());

fn frames() -> std::sync::MutexGuard<'static, ()> {
    FRAMES.lock().unwrap_or_else(|e| e.into_inner())
}

fn heap_live(tag: &str) -> usize {
    ledger::snapshot().tag(tag).map_or(0, |f| f.heap_live)
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_scope_charges_its_tag_and_its_parents_and_a_free_anywhere_credits_it() {
    let v = {
        let _s = ledger::scope("ht/basic/leaf");
        black_box(vec![7u8; 100_000])
    };
    let snap = ledger::snapshot();
    let (leaf, parent) = (
        snap.tag("ht/basic/leaf").unwrap(),
        snap.tag("ht/basic").unwrap(),
    );
    assert!(leaf.heap_live >= 100_000, "{leaf:?}");
    assert_eq!(
        parent.heap_live, leaf.heap_live,
        "a parent includes its children"
    );
    // Freed on another thread, in another scope: credited to the tag it was made under.
    std::thread::spawn(move || {
        let _other = ledger::scope("ht/basic/other");
        drop(v);
    })
    .join()
    .unwrap();
    assert!(heap_live("ht/basic/leaf") < 100_000);
    assert!(heap_live("ht/basic/other") < 100_000);
}

#[test]
fn scopes_nest_and_restore_the_outer_tag() {
    let _outer = ledger::scope("ht/nest/outer");
    let inner_bytes = {
        let _inner = ledger::scope("ht/nest/outer/inner");
        black_box(vec![0u64; 10_000])
    };
    let outer_bytes = black_box(vec![0u64; 20_000]); // back in the outer scope
    let snap = ledger::snapshot();
    let inner = snap.tag("ht/nest/outer/inner").unwrap().heap_live;
    let outer = snap.tag("ht/nest/outer").unwrap().heap_live;
    assert!((80_000..160_000).contains(&inner), "inner {inner}");
    assert!(
        outer >= inner + 160_000,
        "outer {outer} includes the inner and its own"
    );
    drop((inner_bytes, outer_bytes));
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_thread_that_exits_with_live_allocations_leaves_them_charged_until_freed() {
    let kept = std::thread::spawn(|| {
        let _s = ledger::scope("ht/exit");
        black_box(vec![1u32; 50_000])
    })
    .join()
    .unwrap();
    assert!(heap_live("ht/exit") >= 200_000);
    drop(kept);
    assert!(heap_live("ht/exit") < 200_000);
}

#[test]
fn a_frame_counts_its_allocation_and_free_calls() {
    let _frames = frames();
    ledger::end_frame();
    {
        let _s = ledger::scope("ht/calls");
        for i in 0..10 {
            drop(black_box(vec![i as u8; 1000]));
        }
    }
    let f = ledger::end_frame().tag("ht/calls").unwrap();
    assert_eq!((f.heap_allocs, f.heap_frees), (10, 10), "{f:?}");
    let f = ledger::end_frame().tag("ht/calls").unwrap();
    assert_eq!(
        (f.heap_allocs, f.heap_frees),
        (0, 0),
        "a new frame starts at zero"
    );
}

#[test]
fn allocations_outside_every_scope_land_on_the_untagged_line() {
    let before = ledger::snapshot().untagged_heap().heap_live;
    let v = black_box(vec![0u8; 1 << 20]);
    let snap = ledger::snapshot();
    assert!(snap.untagged_heap().heap_live >= before + (1 << 20) - (64 << 10));
    assert!(snap.heap_total() >= 1 << 20);
    let text = snap.to_string();
    assert!(text.contains("(untagged heap)"), "{text}");
    drop(v);
}

#[test]
fn pool_blocks_and_heap_fallback_blocks_are_not_heap() {
    let pool = MemoryPool::new("ht-fallback", 64 << 10).unwrap();
    let _s = ledger::scope("ht/fallback");
    let before = heap_live("ht/fallback");
    let arena = MemoryArena::with_config(
        &pool,
        ArenaConfig::default()
            .heap_fallback(true)
            .tag("ht/fallback/arena"),
    );
    arena.alloc_slice(1 << 20, 0u8); // past the pool: a heap-fallback block
    let snap = ledger::snapshot();
    let f = snap.tag("ht/fallback/arena").unwrap();
    assert!(f.heap_held >= 1 << 20, "{f:?}");
    let heap = snap.tag("ht/fallback").unwrap().heap_live;
    assert!(
        heap < before + (64 << 10),
        "the fallback block was counted as heap too: {heap} (before {before})"
    );
}

/// What `f` returns, and the events about `tag` told (on any thread) from its start. A
/// crossing is told by whichever thread reports next, possibly a moment after `f`
/// returned: with `expect` it waits (up to 10 s) for one to arrive, so that none is told
/// later, inside another test.
fn warnings_about<R>(tag: &'static str, expect: bool, f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let events = common::warnings();
    let from = events.lock().unwrap_or_else(|e| e.into_inner()).len();
    let r = f();
    let about = || -> Vec<String> {
        let events = events.lock().unwrap_or_else(|e| e.into_inner());
        events[from..]
            .iter()
            .filter(|t| t.contains(tag))
            .cloned()
            .collect()
    };
    let start = std::time::Instant::now();
    while expect && about().is_empty() && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (r, about())
}

#[test]
fn a_warn_budget_counts_heap_bytes() {
    let _frames = frames();
    ledger::set_budget("ht/warn", Budget::Warn(1 << 20));
    let _s = ledger::scope("ht/warn");
    let (big, warned) = warnings_about("ht/warn", true, || {
        let big = black_box(vec![0u8; 2 << 20]);
        ledger::snapshot();
        big
    });
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("warn budget"), "{warned:?}");
    let ((), again) = warnings_about("ht/warn", false, || {
        ledger::snapshot();
    });
    assert!(again.is_empty(), "one WARN per crossing: {again:?}");
    drop(big);
}

#[test]
fn a_limit_never_refuses_the_heap_but_reports_it_and_leaves_the_arenas_less_room() {
    let _frames = frames();
    const LIMIT: usize = 4 << 20;
    ledger::set_budget("ht/limit", Budget::Limit(LIMIT));
    let _s = ledger::scope("ht/limit");
    // The heap is never refused: this goes past the limit.
    let (big, warned) = warnings_about("ht/limit", true, || {
        let big = black_box(vec![1u8; LIMIT + (1 << 20)]);
        ledger::snapshot();
        big
    });
    assert!(
        warned.iter().any(|w| w.contains("never refused")),
        "{warned:?}"
    );
    // Arena blocks of the tag are refused while the heap keeps it over the limit.
    let pool = MemoryPool::new("ht-limit", 16 << 20).unwrap();
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().tag("ht/limit/arena"));
    let refused = arena.try_alloc_slice_copy(&[0u8; 1024]).unwrap_err();
    assert!(
        matches!(
            refused,
            AllocError::OverBudget {
                tag: "ht/limit",
                ..
            }
        ),
        "{refused}"
    );
    drop(big);
    ledger::snapshot(); // the heap's part is read again
    assert!(arena.try_alloc_slice_copy(&[0u8; 1024]).is_ok());
    ledger::clear_budgets("ht/limit");
}

#[test]
fn csv_rows_carry_the_heap_columns_and_an_untagged_heap_row() {
    let _s = ledger::scope("ht/csv");
    let v = black_box(vec![0u8; 4096]);
    let mut out = Vec::new();
    ledger::LedgerSnapshot::write_csv_header(&mut out).unwrap();
    ledger::snapshot().write_csv_rows(&mut out, 3).unwrap();
    let text = String::from_utf8(out).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert_eq!(
        &header[12..],
        [
            "heap_live_bytes",
            "heap_peak_bytes",
            "heap_allocs",
            "heap_frees",
            "heap_alloc_bytes",
            "heap_free_bytes",
            "heap_rising_windows",
            "heap_frame_peak_bytes",
            "budget_crossings"
        ]
    );
    for line in text.lines().filter(|l| !l.contains('"')) {
        assert_eq!(line.split(',').count(), header.len(), "{line}");
    }
    let row = text.lines().find(|l| l.starts_with("3,ht/csv,")).unwrap();
    let live: usize = row.split(',').nth(12).unwrap().parse().unwrap();
    assert!(live >= 4096, "{row}");
    assert!(text.lines().any(|l| l.starts_with("3,(untagged heap),")));
    drop(v);
}

/// A frame's heap bytes: what was allocated and freed under a tag since the last frame
/// end, including what came and went within the frame (which `heap_live` cannot show).
#[test]
fn a_frame_counts_the_bytes_allocated_and_freed_under_a_tag() {
    let _frames = frames();
    ledger::end_frame();
    let kept = {
        let _s = ledger::scope("ht/frame_bytes");
        let kept: Vec<u8> = black_box(Vec::with_capacity(1000));
        drop(black_box(Vec::<u8>::with_capacity(3000)));
        kept
    };
    let f = ledger::end_frame().tag("ht/frame_bytes").unwrap();
    assert_eq!(
        (f.heap_alloc_bytes, f.heap_free_bytes),
        (4000, 3000),
        "{f:?}"
    );
    assert_eq!(f.heap_live, 1000);
    drop(kept);
    let f = ledger::end_frame().tag("ht/frame_bytes").unwrap();
    assert_eq!((f.heap_alloc_bytes, f.heap_free_bytes), (0, 1000), "{f:?}");
}

/// A frame's peak catches what came and went within the frame: exactly, when one thread
/// did it; and the next frame starts from what is live.
#[test]
fn a_frames_peak_is_what_was_live_at_its_height_within_the_frame() {
    let _frames = frames();
    ledger::end_frame();
    let kept = {
        let _s = ledger::scope("ht/frame_peak/one");
        let kept: Vec<u8> = black_box(Vec::with_capacity(1000));
        drop(black_box(Vec::<u8>::with_capacity(10 << 20)));
        drop(black_box(Vec::<u8>::with_capacity(3 << 20)));
        kept
    };
    let snap = ledger::end_frame();
    let f = snap.tag("ht/frame_peak/one").unwrap();
    assert_eq!(f.heap_live, 1000, "{f:?}");
    assert_eq!(f.heap_frame_peak, 1000 + (10 << 20), "{f:?}");
    assert_eq!(f.heap_peak, 1000 + (10 << 20), "{f:?}");
    // The parent's peak is its children's summed (here: the one child).
    let parent = snap.tag("ht/frame_peak").unwrap();
    assert_eq!(parent.heap_frame_peak, 1000 + (10 << 20), "{parent:?}");

    // The next frame starts at what is live; the peak ever stays.
    {
        let _s = ledger::scope("ht/frame_peak/one");
        drop(black_box(Vec::<u8>::with_capacity(2000)));
    }
    let f = ledger::end_frame().tag("ht/frame_peak/one").unwrap();
    assert_eq!(f.heap_frame_peak, 3000, "{f:?}");
    assert_eq!(f.heap_peak, 1000 + (10 << 20), "{f:?}");
    drop(kept);
    let f = ledger::end_frame().tag("ht/frame_peak/one").unwrap();
    assert_eq!((f.heap_live, f.heap_frame_peak), (0, 1000), "{f:?}");
    let f = ledger::end_frame().tag("ht/frame_peak/one").unwrap();
    assert_eq!((f.heap_live, f.heap_frame_peak), (0, 0), "{f:?}");
}

/// With several threads, the frame's peak is each thread's summed: never below the true
/// peak, never above what was live at the start plus what the frame allocated.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_frames_peak_over_threads_is_bounded_both_ways() {
    use std::sync::Barrier;
    let _frames = frames();
    ledger::end_frame();
    let here = {
        let _s = ledger::scope("ht/frame_peak/threads");
        ledger::current_scope()
    };
    // Two threads each hold 1 MiB at once (between the barriers) and free it; then each
    // allocates and frees 2 MiB, one after the other. The true peak is 2 MiB (both 1 MiB
    // together, or one 2 MiB alone).
    let together = Barrier::new(2);
    let turns = std::sync::Mutex::new(());
    std::thread::scope(|t| {
        for _ in 0..2 {
            t.spawn(|| {
                let _in = here.enter();
                let v: Vec<u8> = black_box(Vec::with_capacity(1 << 20));
                together.wait();
                drop(v);
                together.wait();
                let _one_at_a_time = turns.lock().unwrap();
                drop(black_box(Vec::<u8>::with_capacity(2 << 20)));
            });
        }
    });
    let f = ledger::end_frame().tag("ht/frame_peak/threads").unwrap();
    assert_eq!(f.heap_live, 0, "{f:?}");
    assert!(f.heap_frame_peak >= 2 << 20, "below the true peak: {f:?}");
    assert!(
        f.heap_frame_peak <= f.heap_alloc_bytes,
        "above live at the start plus the frame's allocations: {f:?}"
    );
    // Each thread's own high was 2 MiB: the bound is their sum.
    assert_eq!(f.heap_frame_peak, 4 << 20, "{f:?}");
}

/// A tag that keeps heap every frame is reported once as rising, with the windows it rose
/// in; a tag that allocates and frees every frame is not.
#[test]
fn a_tag_whose_heap_keeps_rising_is_reported_once_and_a_steady_one_is_not() {
    use std::sync::{Arc, Mutex as StdMutex};
    let _frames = frames();
    let reports = Arc::new(StdMutex::new(Vec::<String>::new()));
    let sink = reports.clone();
    let subscriber = common::OnEvent(move |event: &tracing::Event<'_>| {
        struct Text<'a>(&'a mut String);
        impl tracing::field::Visit for Text<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0.push_str(&format!("{v:?}"));
                }
            }
        }
        let mut text = String::new();
        event.record(&mut Text(&mut text));
        if text.contains("rose in each") {
            sink.lock().unwrap().push(text);
        }
    });
    const WINDOW: u32 = 4;
    ledger::set_growth_window(WINDOW);
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(64);
    let (mut leaky, mut steady) = (Vec::new(), Vec::new());
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..WINDOW * 8 {
            {
                let _s = ledger::scope("ht/growth/leaky");
                kept.push(black_box(vec![1u8; 1024])); // a KiB a frame, kept
            }
            {
                let _s = ledger::scope("ht/growth/steady");
                drop(black_box(vec![2u8; 4096])); // allocated and freed
            }
            let snap = ledger::end_frame();
            leaky.push(snap.tag("ht/growth/leaky").unwrap().heap_rising_windows);
            steady.push(snap.tag("ht/growth/steady").unwrap().heap_rising_windows);
        }
    });
    ledger::set_growth_window(ledger::DEFAULT_GROWTH_WINDOW);
    assert!(
        leaky.last().is_some_and(|&w| w >= ledger::RISING_WINDOWS),
        "{leaky:?}"
    );
    assert!(steady.iter().all(|&w| w == 0), "{steady:?}");
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains("ht/growth/leaky"), "{reports:?}");
    drop(kept);
}

#[cfg(feature = "bevy")]
mod bevy_systems {
    use bevy_app::{App, Update};
    use bevy_ecs::prelude::*;
    use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};
    use nebula_memory::ledger;

    #[derive(Resource, Default)]
    struct Kept(Vec<Vec<u64>>);

    fn allocating_system(mut kept: ResMut<Kept>) {
        kept.0.push(vec![0u64; 1000]); // 8 KB a frame, kept
        drop(std::hint::black_box(vec![0u8; 100])); // and one freed at once
    }

    fn quiet_system(mut n: Local<u32>) {
        *n += 1;
    }

    /// With the plugin and the tracking allocator, each system's heap allocations are
    /// charged to `systems/<name>` with no change to the systems.
    #[test]
    fn each_systems_heap_is_charged_to_it() {
        let _frames = super::frames();
        let mut app = App::new();
        app.add_plugins(MemoryPlugin::default())
            .init_resource::<Kept>()
            .add_systems(Update, (allocating_system, quiet_system));
        for _ in 0..10 {
            app.update();
        }
        let snap = ledger::snapshot();
        let busy = snap
            .tag("systems/allocating_system")
            .expect("a line for the system");
        assert!(busy.heap_live >= 10 * 8000, "{busy:?}");
        let quiet = snap
            .tag("systems/quiet_system")
            .expect("a line for every system");
        assert_eq!(quiet.heap_live, 0, "{quiet:?}");
        // The last frame's calls, from the plugin's snapshot at the frame's end: the kept
        // vector, the dropped one, and the outer vector's growth now and then.
        let frame = app.world().resource::<MemoryLedger>();
        let f = frame.tag("systems/allocating_system").unwrap();
        assert!(f.heap_allocs >= 2 && f.heap_frees >= 1, "{f:?}");
        // Systems added after the app started are charged too.
        fn late_system(mut kept: ResMut<Kept>) {
            kept.0.push(vec![0u64; 500]);
        }
        app.add_systems(Update, late_system);
        app.update();
        let late = ledger::snapshot()
            .tag("systems/late_system")
            .map(|f| f.heap_live);
        assert!(late.is_some_and(|b| b >= 4000), "{late:?}");
    }

    /// The plugin's own frame end (resets, the ledger's snapshot and CSV, the
    /// diagnostics) allocates nothing once warm: its systems' lines show no call.
    #[test]
    fn the_plugins_frame_end_allocates_nothing() {
        use nebula_memory::Arena;
        use nebula_memory::bevy::{FrameMemory, Scratch, ScratchTag, TaggedScratch};
        struct Ui;
        impl ScratchTag for Ui {
            const TAG: &'static str = "ht/ui";
        }
        fn frame_work(s: Scratch, t: TaggedScratch<Ui>, f: Res<FrameMemory>) {
            s.alloc_slice(1000, 0u8);
            t.alloc_slice(1000, 0u8);
            f.store(1u32);
        }
        let _frames = super::frames();
        ledger::snapshot(); // tells any crossing still waiting, before the frames measured
        let csv = std::env::temp_dir().join(format!("ht_frame_end_{}.csv", std::process::id()));
        let mut app = App::new();
        app.add_plugins(MemoryPlugin {
            ledger_csv: Some(csv.clone()),
            ..MemoryPlugin::default()
        })
        .add_systems(Update, frame_work);
        for _ in 0..40 {
            app.update();
        }
        // A frame may still allocate once for something new in the process: a top-level
        // tag another test made meanwhile gets its diagnostic paths, a budget crossing of
        // another test is told. A steady cost shows in every frame; so some frame of the
        // next 20 allocates nothing at all.
        let systems = [
            "nebula_memory/reset_game_arena_on_request",
            "nebula_memory/reset_frame_arenas_system",
            "nebula_memory/end_ledger_frame",
            "nebula_memory/publish_memory_diagnostics",
            "systems/frame_work",
        ];
        {
            let ledger = app.world().resource::<MemoryLedger>();
            for system in systems {
                assert!(ledger.tag(system).is_some(), "no line {system}");
            }
        }
        let mut seen = Vec::new();
        let quiet = (0..20).any(|_| {
            app.update();
            let ledger = app.world().resource::<MemoryLedger>();
            let calls: Vec<_> = systems
                .iter()
                .map(|system| {
                    let f = ledger.tag(system).unwrap_or_default();
                    (*system, f.heap_allocs, f.heap_frees)
                })
                .filter(|&(_, allocs, frees)| (allocs, frees) != (0, 0))
                .collect();
            let quiet = calls.is_empty();
            seen.push(calls);
            quiet
        });
        assert!(quiet, "every frame allocated: {seen:?}");
        let _ = std::fs::remove_file(csv);
    }

    /// Systems of the same name get a line each (`<name> #2`), never one merged line;
    /// `SystemLines::ByName` groups them when the app asks; the crate's own systems are
    /// lines under `nebula_memory/`, apart from the app's.
    #[test]
    fn every_system_is_told_apart_and_the_crates_own_stand_aside() {
        use nebula_memory::bevy::SystemLines;
        fn keeps(bytes: usize) -> impl FnMut(ResMut<Kept>) {
            move |mut kept: ResMut<Kept>| kept.0.push(vec![0u64; bytes / 8])
        }
        let _frames = super::frames();
        for lines in [SystemLines::PerSystem, SystemLines::ByName] {
            let mut app = App::new();
            app.add_plugins(MemoryPlugin {
                system_lines: lines,
                ..MemoryPlugin::default()
            })
            .init_resource::<Kept>()
            // Three closures made by one function: one name, three systems.
            .add_systems(Update, (keeps(8_000), keeps(16_000), keeps(24_000)).chain());
            let name = app
                .world()
                .resource::<MemoryLedger>()
                .tags()
                .map(|(t, _)| t)
                .find(|t| t.starts_with("systems/") && t.contains("keeps"))
                .map(str::to_owned);
            app.update();
            let ledger = app.world().resource::<MemoryLedger>();
            let line = name.unwrap_or_else(|| {
                ledger
                    .tags()
                    .map(|(t, _)| t)
                    .find(|t| t.starts_with("systems/") && t.contains("keeps"))
                    .expect("a line for the closures")
                    .to_owned()
            });
            let base = line.split(" #").next().unwrap().to_owned();
            let live = |tag: &str| ledger.tag(tag).map(|f| f.heap_live);
            match lines {
                SystemLines::PerSystem => {
                    let each = [
                        live(&base),
                        live(&format!("{base} #2")),
                        live(&format!("{base} #3")),
                    ];
                    let mut sizes: Vec<usize> = each.iter().map(|b| b.unwrap_or(0)).collect();
                    sizes.sort_unstable();
                    assert!(
                        sizes[0] >= 8_000 && sizes[1] >= 16_000 && sizes[2] >= 24_000,
                        "{base}: {each:?}"
                    );
                    assert!(sizes[2] < 48_000, "each line is one system's: {each:?}");
                }
                SystemLines::ByName => {
                    assert!(
                        live(&base).is_some_and(|b| b >= 48_000),
                        "{:?}",
                        live(&base)
                    );
                    // (The line exists if the first app made it: it charges nothing now.)
                    assert_eq!(live(&format!("{base} #2")).unwrap_or(0), 0);
                }
            }
            for own in ["end_ledger_frame", "publish_memory_diagnostics"] {
                assert!(
                    ledger.tag(&format!("nebula_memory/{own}")).is_some(),
                    "{own}"
                );
                assert_eq!(ledger.tag(&format!("systems/{own}")), None, "{own}");
            }
        }
    }

    /// A budget names a system by its function and lands on that system's line.
    #[test]
    fn a_budget_names_a_system_by_its_function() {
        use nebula_memory::ledger::Budget;
        fn budgeted_system(mut kept: ResMut<Kept>) {
            kept.0.push(vec![0u64; 100]);
        }
        let _frames = super::frames();
        let mut app = App::new();
        app.add_plugins(MemoryPlugin::default().budget_for(budgeted_system, Budget::Warn(1 << 30)))
            .init_resource::<Kept>()
            .add_systems(Update, budgeted_system);
        app.update();
        let f = ledger::snapshot()
            .tag("systems/budgeted_system")
            .expect("the system's line");
        assert_eq!(f.warn_budget, Some(1 << 30));
    }

    /// A tag budget nothing is charged to and a system budget no system is made from are
    /// each reported once, after the watch's frames; budgets that name something are not.
    #[test]
    fn a_budget_that_names_nothing_is_reported_once() {
        use nebula_memory::bevy::BUDGET_WATCH_FRAMES;
        use nebula_memory::ledger::Budget;
        use std::sync::{Arc, Mutex as StdMutex};
        fn never_added() {}
        fn present_system(mut kept: ResMut<Kept>) {
            kept.0.push(vec![0u64; 10]);
        }
        let _frames = super::frames();
        let warnings = Arc::new(StdMutex::new(Vec::<String>::new()));
        let sink = warnings.clone();
        let subscriber = crate::common::OnEvent(move |event: &tracing::Event<'_>| {
            if *event.metadata().level() == tracing::Level::WARN {
                let mut text = String::new();
                struct Text<'a>(&'a mut String);
                impl tracing::field::Visit for Text<'_> {
                    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                        if f.name() == "message" {
                            self.0.push_str(&format!("{v:?}"));
                        }
                    }
                }
                event.record(&mut Text(&mut text));
                if text.contains("a budget names") {
                    sink.lock().unwrap().push(text);
                }
            }
        });
        tracing::subscriber::with_default(subscriber, || {
            let mut app = App::new();
            app.add_plugins(
                MemoryPlugin {
                    tag_budgets: vec![
                        ("ht/no/such/tag", Budget::Warn(1)),
                        ("systems/present_system", Budget::Warn(1 << 30)),
                    ],
                    ..MemoryPlugin::default()
                }
                .budget_for(never_added, Budget::Warn(1))
                .budget_for(present_system, Budget::Warn(1 << 30)),
            )
            .init_resource::<Kept>()
            .add_systems(Update, present_system)
            // On this thread, where the test's subscriber is.
            .edit_schedule(bevy_app::Last, |s| {
                s.set_executor(bevy_ecs::schedule::SingleThreadedExecutor::new());
            });
            for _ in 0..BUDGET_WATCH_FRAMES - 2 {
                app.update();
            }
            assert!(warnings.lock().unwrap().is_empty(), "reported too early");
            for _ in 0..BUDGET_WATCH_FRAMES {
                app.update();
            }
        });
        let warnings = warnings.lock().unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings.iter().any(|w| w.contains("ht/no/such/tag")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("never_added")),
            "{warnings:?}"
        );
    }

    /// A `par_iter` body runs on worker threads: its heap is charged to its system when
    /// the body's batches come from the system's `Scratch::batches()`, or when its
    /// `for_each_init` enters the scope `ledger::current_scope()` took in the system.
    #[test]
    fn par_iter_bodies_are_charged_to_their_system() {
        use nebula_memory::bevy::Scratch;
        #[derive(Component)]
        struct Item(u32);
        fn batched(scratch: Scratch, items: Query<&Item>) {
            let batches = scratch.batches();
            items.par_iter().for_each_init(
                || batches.batch(),
                |_, item| drop(std::hint::black_box(vec![item.0; 16])),
            );
        }
        fn helped(items: Query<&Item>) {
            let scope = ledger::current_scope();
            items.par_iter().for_each_init(
                || scope.enter(),
                |_, item| drop(std::hint::black_box(vec![item.0; 16])),
            );
        }
        const ITEMS: u32 = 4000;
        let _frames = super::frames();
        let mut app = App::new();
        app.add_plugins(MemoryPlugin::default())
            .add_systems(Update, (batched, helped));
        app.world_mut().spawn_batch((0..ITEMS).map(Item));
        for _ in 0..3 {
            app.update();
        }
        let ledger = app.world().resource::<MemoryLedger>();
        for system in ["systems/batched", "systems/helped"] {
            let f = ledger.tag(system).expect("a line for the system");
            assert!(
                f.heap_allocs >= u64::from(ITEMS) && f.heap_frees >= u64::from(ITEMS),
                "{system}: {f:?}"
            );
        }
    }
}
