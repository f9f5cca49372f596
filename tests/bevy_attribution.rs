//! Heap attribution under Bevy's multi-threaded executor with `AttributionLayer` (and
//! `bevy_ecs/trace`, on in the crate's dev build): every system's line is the work its own
//! code does, on compute pools of 1, 4 and 8 threads; observers are on lines of their own;
//! without the layer the plugin says the lines are inexact. Bevy's task pools and the
//! global subscriber are process-wide, so each case runs in a child process of this binary
//! (the `child` test, which does nothing unless `NEBULA_ATTRIBUTION_CHILD` is set).
#![cfg(feature = "bevy")]

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bevy_app::{App, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{
    AttributionLayer, MemoryLedger, MemoryPlugin, Scratch, tag_task_pool_threads,
};
use nebula_memory::{Arena, TrackingAllocator};
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const CHILD: &str = "NEBULA_ATTRIBUTION_CHILD";

/// Runs the `child` test in a new process of this binary, in `mode`.
fn in_child(mode: &str) {
    common::in_child(CHILD, mode);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn every_line_is_its_systems_on_one_compute_thread() {
    in_child("1");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn every_line_is_its_systems_on_four_compute_threads() {
    in_child("4");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn every_line_is_its_systems_on_eight_compute_threads() {
    in_child("8");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn without_the_layer_the_plugin_warns() {
    in_child("warn");
}

#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return; // run by the tests above only
    };
    match mode.as_str() {
        "warn" => warns(),
        n => exact(n.parse().expect("a thread count")),
    }
}

/// A headless app whose compute pool has exactly `threads` threads, each pool's threads
/// on a `tasks/<pool>` line, with the memory plugin.
fn app(threads: usize) -> App {
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: tag_task_pool_threads(common::compute_threads(threads)),
    })
    .add_plugins(MemoryPlugin::default());
    app
}

/// What one system's own code allocated: calls and bytes.
struct Own {
    allocs: AtomicU64,
    bytes: AtomicU64,
}

impl Own {
    const fn new() -> Own {
        Own {
            allocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
    /// Allocates `n` bytes, counts them, frees them.
    fn alloc_and_free(&self, n: usize) {
        drop(black_box(Vec::<u8>::with_capacity(n)));
        self.count(n);
    }
    fn count(&self, n: usize) {
        self.allocs.fetch_add(1, Relaxed);
        self.bytes.fetch_add(n as u64, Relaxed);
    }
    /// The counts since the last call.
    fn take(&self) -> (u64, u64) {
        (self.allocs.swap(0, Relaxed), self.bytes.swap(0, Relaxed))
    }
}

static PLAIN: Own = Own::new();
static BATCHED: Own = Own::new();
static KEEPER: Own = Own::new();
static SPIKY: Own = Own::new();
static PING: Own = Own::new();
static PONG: Own = Own::new();

const ITEMS: usize = 10_000;
const SPIKE: usize = 4 << 20;
const SPIKE_EVERY: u32 = 4;
const PING_BYTES: usize = 7777;
const PONG_BYTES: usize = 5555;

#[derive(Component)]
struct Item(u32);

/// A plain `par_iter`, no recipe: 200 bytes per item.
fn plain_par(items: Query<&Item>) {
    items.par_iter().for_each(|item| {
        PLAIN.alloc_and_free(200 + (item.0 % 2) as usize);
    });
}

/// `Scratch::batches()` in a `par_iter`, and 150 heap bytes per item.
fn scratch_batches(scratch: Scratch, items: Query<&Item>) {
    let batches = scratch.batches();
    items.par_iter().for_each_init(
        || batches.batch(),
        |batch, item| {
            batch.scope(|s| black_box(s.alloc_slice_fill_with(8, |i| item.0 + i as u32)).len());
            BATCHED.alloc_and_free(150);
        },
    );
}

#[derive(Resource)]
struct Kept(Vec<Vec<u8>>);

/// Keeps 1,000 bytes a frame.
fn keeper(mut kept: ResMut<Kept>) {
    kept.0.push(black_box(Vec::with_capacity(1000)));
    KEEPER.count(1000);
}

/// 4 MiB allocated and freed within the frame, every `SPIKE_EVERY` frames.
fn spiky(mut frame: Local<u32>) {
    *frame += 1;
    if (*frame).is_multiple_of(SPIKE_EVERY) {
        SPIKY.alloc_and_free(SPIKE);
    }
}

#[derive(Event)]
struct Ping;

#[derive(Event)]
struct Pong;

/// Triggers `Ping` through its commands (the observer runs when they are applied).
fn pinger(mut commands: Commands) {
    commands.trigger(Ping);
}

/// Triggers `Pong` from inside its own run.
fn ponger(world: &mut World) {
    world.trigger(Pong);
}

fn on_ping(_ping: On<Ping>) {
    PING.alloc_and_free(PING_BYTES);
}

fn on_pong(_pong: On<Pong>) {
    PONG.alloc_and_free(PONG_BYTES);
}

/// Whether `line` is within 2% of `own` (exact when `own` is 0).
fn close(line: u64, own: u64) -> bool {
    line.abs_diff(own) * 50 <= own
}

fn exact(threads: usize) {
    tracing::subscriber::set_global_default(
        tracing_subscriber::Registry::default().with(AttributionLayer::new()),
    )
    .expect("the child's only subscriber");
    let mut app = app(threads);
    app.insert_resource(Kept(Vec::with_capacity(1000)))
        .add_systems(
            Update,
            (plain_par, scratch_batches, keeper, spiky, pinger, ponger),
        )
        .add_observer(on_ping)
        .add_observer(on_pong);
    app.world_mut().spawn_batch((0..ITEMS as u32).map(Item));
    assert_eq!(
        bevy_tasks::ComputeTaskPool::get().thread_num(),
        threads,
        "the compute pool's size"
    );
    // The first frames initialize the systems (charged to their lines) and warm buffers up:
    // among them each thread's span stack in `tracing-subscriber`'s registry, which grows
    // (allocates) the first time a thread enters spans that deep, in whichever system's
    // scope it is then (3 frames of warm-up left it to frame 2 or 4 on 8 threads, 3 runs
    // in 25 under load).
    for _ in 0..30 {
        app.update();
    }
    for s in [&PLAIN, &BATCHED, &KEEPER, &SPIKY, &PING, &PONG] {
        s.take();
    }
    let lines = [
        ("systems/plain_par", &PLAIN),
        ("systems/scratch_batches", &BATCHED),
        ("systems/keeper", &KEEPER),
        ("systems/spiky", &SPIKY),
        ("observers/on_ping", &PING),
        ("observers/on_pong", &PONG),
        ("systems/pinger", &Own::new()),
        ("systems/ponger", &Own::new()),
    ];
    let mut failures = Vec::new();
    for frame in 0..2 * SPIKE_EVERY {
        app.update();
        let ledger = app.world().resource::<MemoryLedger>();
        for (line, own) in &lines {
            let f = ledger.tag(line).unwrap_or_default();
            let (allocs, bytes) = own.take();
            let got = (f.heap_allocs, f.heap_alloc_bytes as u64);
            if !close(got.0, allocs) || !close(got.1, bytes) {
                failures.push(format!(
                    "frame {frame}: {line} has {got:?} (calls, bytes), its code made {:?}",
                    (allocs, bytes)
                ));
            }
        }
    }
    let ledger = app.world().resource::<MemoryLedger>();
    assert!(
        failures.is_empty(),
        "{threads} compute threads:\n{}\n{}",
        failures.join("\n"),
        **ledger
    );
}

/// Collects WARN events' messages.
struct Warnings;

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut m = Message(String::new());
            event.record(&mut m);
            WARNINGS.lock().unwrap().push(m.0);
        }
    }
}

fn warns() {
    tracing::subscriber::set_global_default(tracing_subscriber::Registry::default().with(Warnings))
        .expect("the child's only subscriber");
    let mut app = app(4);
    app.add_systems(Update, plain_par);
    app.world_mut().spawn_batch((0..100).map(Item));
    for _ in 0..3 {
        app.update();
    }
    let warnings = WARNINGS.lock().unwrap();
    let told: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("heap attribution is not exact"))
        .collect();
    assert_eq!(told.len(), 1, "{warnings:?}");
    assert!(
        told[0].contains("4 threads")
            && told[0].contains("`trace`")
            && told[0].contains("AttributionLayer"),
        "{}",
        told[0]
    );
}
