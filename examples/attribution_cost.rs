//! What exact heap attribution costs: frames of an app with many systems, and of one with a
//! `par_iter` cut into many batches, under `AttributionLayer` and without it.
//!
//! `cargo run --release --example attribution_cost -- <mode>`, where `<mode>` is `none`
//! (no subscriber: Bevy's spans are disabled), `registry` (a plain `tracing_subscriber`
//! registry: Bevy's `trace` alone), or `layer` (the registry with `AttributionLayer`).
//! The crate's dev build has `bevy_ecs/trace`; each mode is a process of its own (a span is
//! enabled or not when it is made). Two compute threads: on one, Bevy runs a `par_iter`
//! inline, without batches or their span.

use std::time::Instant;

use bevy_app::{App, TaskPoolOptions, TaskPoolPlugin, TaskPoolThreadAssignmentPolicy, Update};
use bevy_ecs::batching::BatchingStrategy;
use bevy_ecs::prelude::*;
use nebula_memory::TrackingAllocator;
use nebula_memory::bevy::{AttributionLayer, MemoryPlugin};
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(std::alloc::System);

const SYSTEMS: usize = 200;
const BATCHES: usize = 2000;
const FRAMES: usize = 200;

#[derive(Component)]
struct Item(u64);

fn app(threads: usize) -> App {
    let compute = TaskPoolThreadAssignmentPolicy {
        min_threads: threads,
        max_threads: threads,
        percent: 1.0,
        on_thread_spawn: None,
        on_thread_destroy: None,
    };
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: TaskPoolOptions {
            compute,
            ..Default::default()
        },
    })
    .add_plugins(MemoryPlugin::default());
    app
}

/// Nanoseconds per frame of `app`: the least of 10 rounds of `FRAMES` frames (the machine
/// may be shared), after 100 to warm up.
fn per_frame(app: &mut App) -> f64 {
    for _ in 0..100 {
        app.update();
    }
    (0..10)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..FRAMES {
                app.update();
            }
            start.elapsed().as_nanos() as f64 / FRAMES as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "layer".into());
    match mode.as_str() {
        "none" => {}
        "registry" => {
            tracing::subscriber::set_global_default(tracing_subscriber::Registry::default())
                .expect("one subscriber")
        }
        "layer" => tracing::subscriber::set_global_default(
            tracing_subscriber::Registry::default().with(AttributionLayer::new()),
        )
        .expect("one subscriber"),
        other => panic!("mode {other}: none, registry or layer"),
    }
    // Many systems, each a trivial run.
    let mut systems = app(2);
    for _ in 0..SYSTEMS {
        systems.add_systems(Update, |mut n: Local<u64>| *n += 1);
    }
    let empty = {
        let mut empty = app(2);
        per_frame(&mut empty)
    };
    let many = per_frame(&mut systems);
    // One par_iter cut into `BATCHES` batches of one item.
    let mut batched = app(2);
    batched.add_systems(Update, |items: Query<&Item>| {
        items
            .par_iter()
            .batching_strategy(BatchingStrategy::fixed(1))
            .for_each(|item| {
                std::hint::black_box(item.0);
            });
    });
    batched
        .world_mut()
        .spawn_batch((0..BATCHES as u64).map(Item));
    let batches = per_frame(&mut batched);
    println!(
        "{mode}: empty frame {empty:.0} ns; {SYSTEMS} systems {many:.0} ns ({:.1} ns per system \
         run); {BATCHES} par_iter batches {batches:.0} ns ({:.1} ns per batch)",
        (many - empty) / SYSTEMS as f64,
        (batches - empty) / BATCHES as f64
    );
}
