//! Allocation assertions (`AllocationCheck`): each assertion fails, naming the system, the
//! figure and the frame, exactly when it should; isolated apps in parallel threads keep
//! their figures apart; a baseline catches a system that rises. A `TrackingAllocator` is
//! this binary's global allocator.
#![cfg(all(feature = "bevy", not(miri)))]

use std::alloc::System;
use std::hint::black_box;
use std::panic::{AssertUnwindSafe, catch_unwind};

use bevy_app::{App, Update};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{AllocationCheck, AllocationRecord, MemoryPlugin, Scratch};
use nebula_memory::{Arena, TrackingAllocator};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

/// Temporaries in the frame's scratch arena: no heap call.
fn arena_system(scratch: Scratch) {
    let list = scratch.alloc_slice_fill_with(1000, |i| i as u32);
    black_box(list);
}

/// Ten fresh vectors a frame, of 100 bytes each, all freed.
fn ten_a_frame() {
    for i in 0..10u8 {
        black_box(vec![i; 100]);
    }
}

#[derive(Resource, Default)]
struct Kept(Vec<Box<[u8]>>);

/// Keeps 1,000 bytes every frame: a leak.
fn leaky(mut kept: ResMut<Kept>) {
    kept.0.push(vec![0u8; 1000].into_boxed_slice());
}

fn app(leak: bool) -> App {
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::isolated())
        .init_resource::<Kept>()
        .add_systems(Update, (arena_system, ten_a_frame));
    if leak {
        app.add_systems(Update, leaky);
    }
    app
}

fn failure(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("the assertion should fail");
    err.downcast_ref::<String>().cloned().unwrap_or_default()
}

fn record(leak: bool) -> AllocationRecord {
    AllocationCheck::frames(30).run(&mut app(leak))
}

#[test]
fn each_assertion_fails_exactly_when_it_should() {
    let r = record(true);
    r.assert_no_allocations("arena_system");
    r.assert_not_growing("arena_system");
    r.assert_allocs_at_most("ten_a_frame", 10);
    r.assert_bytes_at_most("ten_a_frame", 1000);
    r.assert_not_growing("ten_a_frame");
    assert!(r.frames_of("ten_a_frame").iter().all(|f| f.allocs == 10));

    let msg = failure(|| r.assert_allocs_at_most("ten_a_frame", 9));
    assert!(
        msg.contains("'ten_a_frame'")
            && msg.contains("10 heap allocations")
            && msg.contains("frame 4"),
        "{msg}"
    );
    let msg = failure(|| r.assert_bytes_at_most("ten_a_frame", 999));
    assert!(msg.contains("1000 heap bytes"), "{msg}");
    let msg = failure(|| r.assert_no_allocations("ten_a_frame"));
    assert!(msg.contains("steady state"), "{msg}");
    let msg = failure(|| r.assert_not_growing("leaky"));
    assert!(msg.contains("'leaky' keeps growing"), "{msg}");
    let msg = failure(|| r.assert_no_allocations("no_such_system"));
    assert!(
        msg.contains("its lines: ") && msg.contains("leaky"),
        "{msg}"
    );
}

/// Two apps with systems of the same names, in parallel threads, on explicit compute
/// pools of 4 threads: each records only its own.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads")]
fn isolated_apps_in_parallel_do_not_see_each_other() {
    let runs: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let mut app = App::new();
                app.add_plugins(bevy_app::TaskPoolPlugin {
                    task_pool_options: bevy_app::TaskPoolOptions::with_num_threads(4),
                })
                .add_plugins(MemoryPlugin::isolated())
                .add_systems(Update, move || {
                    for _ in 0..=i {
                        black_box(vec![0u8; 64]);
                    }
                });
                let r = AllocationCheck::frames(20).run(&mut app);
                let systems: Vec<String> = r.systems().map(str::to_owned).collect();
                let system = systems
                    .iter()
                    .find(|s| s.contains("closure"))
                    .unwrap_or_else(|| panic!("no closure line: {systems:?}"));
                (i, r.frames_of(system).to_vec())
            })
        })
        .collect();
    for run in runs {
        let (i, frames) = run.join().unwrap();
        assert!(
            frames.iter().all(|f| f.allocs == i + 1),
            "app {i}: {:?}",
            frames.iter().map(|f| f.allocs).collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_baseline_catches_the_system_that_rose() {
    let dir = std::env::temp_dir().join(format!("nebula-baseline-{}", std::process::id()));
    let path = dir.join("app.csv");
    let _ = std::fs::remove_file(&path);
    record(false).check_baseline(&path, 0.10); // no file yet: written
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("ten_a_frame,10.00,1000.0"), "{text}");
    record(false).check_baseline(&path, 0.10); // the same figures: passes
    record(true).check_baseline(&path, 0.10); // a new system is listed, not failed

    // The same system (the same line) now leaking: caught, with the fix to accept it.
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::isolated())
        .init_resource::<Kept>()
        .add_systems(Update, (arena_system, leaky_ten_a_frame::ten_a_frame));
    let leaking = AllocationCheck::frames(30).run(&mut app);
    let msg = failure(|| leaking.check_baseline(&path, 0.10));
    assert!(
        msg.contains("system 'ten_a_frame': 12.")
            && msg.contains("heap allocations a frame, baseline 10.00")
            && msg.contains("NEBULA_MEMORY_BLESS=1 cargo test"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `ten_a_frame` that also leaks: the same line name, two more allocations a frame.
mod leaky_ten_a_frame {
    use super::{Kept, ResMut};
    pub fn ten_a_frame(mut kept: ResMut<Kept>) {
        super::ten_a_frame();
        kept.0.push(vec![0u8; 1000].into_boxed_slice());
        kept.0.push(vec![0u8; 1000].into_boxed_slice());
    }
}
