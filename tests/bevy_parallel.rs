//! `Scratch` under Bevy's multi-threaded executor, with 4 compute threads (a test binary of
//! its own: Bevy's task pools are process-wide and the first configuration wins).
#![cfg(feature = "bevy")]

mod common;

use nebula_memory::Arena;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use allocator_api2::vec::Vec as AVec;
use bevy_app::{App, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{MemoryPlugin, MemoryStats, Scratch};

/// A headless app whose compute pool has exactly 4 threads (on a 2-core machine Bevy's
/// default would give it one), with the memory plugin.
fn app() -> App {
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: common::compute_threads(4),
    })
    .add_plugins(MemoryPlugin::default());
    app
}

/// `n` frames; fewer under valgrind (scripts/valgrind.sh sets `NEBULA_UNDER_VALGRIND`),
/// which runs 30-50 times slower.
fn frames(n: usize) -> usize {
    if std::env::var_os("NEBULA_UNDER_VALGRIND").is_some() {
        n / 20
    } else {
        n
    }
}

/// Whether the long runs take their full length: in an optimised build, or with
/// `NEBULA_FULL_SIZE=1` (CI runs this binary so after `cargo test`, on the same debug
/// build). An ordinary debug `cargo test` runs a third of the frames, with the same
/// assertions: unoptimised, and with the standard library's debug checks, the systems'
/// sorts made 3,000 frames take 20-45 s.
fn full_size() -> bool {
    cfg!(not(debug_assertions)) || std::env::var_os("NEBULA_FULL_SIZE").is_some_and(|v| v == "1")
}

#[derive(Resource, Default)]
struct Checks {
    failures: AtomicUsize,
    runs: AtomicUsize,
    threads: Mutex<HashSet<std::thread::ThreadId>>,
}

#[derive(Resource, Default)]
struct Frame(u64);

/// A system that builds, sorts and sums a frame-dependent list in scratch memory and
/// checks the sum against the same computation on the heap.
fn worker<const K: u64>(scratch: Scratch, frame: Res<Frame>, checks: Res<Checks>) {
    let n = 2_000 + (frame.0 as usize * 7 + K as usize * 13) % 500;
    let value = |i: usize| (i as u64).wrapping_mul(2_654_435_761 ^ K ^ frame.0) % 10_007;
    let mut list = AVec::with_capacity_in(16, &*scratch);
    list.extend((0..n).map(value));
    list.sort_unstable();
    let pairs = scratch.alloc_slice_fill_with(n / 2, |i| list[2 * i] + list[2 * i + 1]);
    let got: u64 = pairs.iter().sum::<u64>() + if n % 2 == 1 { list[n - 1] } else { 0 };
    let want: u64 = (0..n).map(value).sum();
    if got != want || !list.is_sorted() {
        checks.failures.fetch_add(1, Ordering::Relaxed);
    }
    checks.runs.fetch_add(1, Ordering::Relaxed);
    checks
        .threads
        .lock()
        .unwrap()
        .insert(std::thread::current().id());
}

/// Several parallel `Scratch` systems for thousands of frames (1,000 in an ordinary debug
/// run, see `full_size`): results are right, the systems run on several threads, and
/// scratch-pool usage is bounded after a warm-up.
#[test]
fn parallel_scratch_systems_for_thousands_of_frames() {
    let n = frames(if full_size() { 3_000 } else { 1_000 });
    let mut app = app();
    app.init_resource::<Checks>()
        .init_resource::<Frame>()
        .add_systems(
            Update,
            (
                worker::<1>,
                worker::<2>,
                worker::<3>,
                worker::<4>,
                worker::<5>,
            ),
        );
    app.finish();
    app.cleanup();
    // What this app's scratch arenas hold after each frame's reset (not the global
    // scratch pool's figures, which the other tests of this binary move at the same time).
    let mut held = Vec::with_capacity(n);
    for f in 0..n {
        app.world_mut().resource_mut::<Frame>().0 = f as u64;
        app.update();
        held.push(app.world().resource::<MemoryStats>().scratch_bytes_held);
    }
    let checks = app.world().resource::<Checks>();
    assert_eq!(checks.failures.load(Ordering::Relaxed), 0);
    assert_eq!(checks.runs.load(Ordering::Relaxed), 5 * n);
    let threads = checks.threads.lock().unwrap().len();
    assert!(threads >= 2, "the systems ran on {threads} thread(s)");
    let stats = *app.world().resource::<MemoryStats>();
    assert_eq!(stats.frame, n as u64);
    // Each arena's peak is at least one system's list (systems share a thread's arena one
    // after the other, so the sum is less than five lists).
    assert!(stats.scratch_bytes >= 2_000 * 8, "{stats}");
    assert!((1..=8).contains(&stats.scratch_arenas), "{stats}");
    // The arenas' memory stays bounded: at most 8 arenas, each holding what one frame of
    // its systems needs (a 16 KiB list each, plus the first block and the reset policy's
    // margin, well under 64 KiB). It is not flat: idle trimming (`maintain_global_pools`,
    // run by the plugin) gives back an arena its thread stopped using, and the arena takes
    // a block again when the executor sends work there, which depends on scheduling (under
    // valgrind held went 118,880 -> 159,872 bytes that way). A leak, or arenas piling up
    // over the thousands of frames, would pass the bound.
    const BOUND: usize = 8 * 64 * 1024;
    let warm = n / 3;
    if let Some(over) = (warm..n).find(|&f| held[f] > BOUND) {
        panic!(
            "the scratch arenas hold {} bytes at frame {over}, over {BOUND}; frames {}..: {:?}",
            held[over],
            over.saturating_sub(2),
            &held[over.saturating_sub(2)..(over + 3).min(n)]
        );
    }
    assert!(held[n - 1] > 0, "the scratch arenas hold blocks");
}

#[derive(Component)]
struct Item(u32);

/// Where the `outer` system of this thread is waiting, if it is (0: not waiting).
const NOT_WAITING: u8 = 0;
const IN_SCOPE: u8 = 1;
const IN_PAR_ITER: u8 = 2;

thread_local! {
    static OUTER_WAITS: std::cell::Cell<u8> = const { std::cell::Cell::new(NOT_WAITING) };
}

#[derive(Resource, Default)]
struct Nesting {
    in_scope: AtomicUsize,
    in_par_iter: AtomicUsize,
    corrupted: AtomicUsize,
}

/// Holds scratch memory across a task scope and a `par_iter`, during which work stealing
/// runs other systems on this thread; checks its memory afterwards.
fn outer(scratch: Scratch, items: Query<&Item>, nesting: Res<Nesting>) {
    let mine = scratch.alloc_slice_fill_with(4_096, |i| (i * 31) as u32);
    // Tasks that block (as I/O or a lock would): the thread waits for them and runs
    // other systems meanwhile.
    OUTER_WAITS.set(IN_SCOPE);
    bevy_tasks::ComputeTaskPool::get().scope(|s| {
        for _ in 0..8 {
            s.spawn(async { std::thread::sleep(std::time::Duration::from_millis(3)) });
        }
    });
    OUTER_WAITS.set(IN_PAR_ITER);
    items.par_iter().for_each(|item| {
        std::thread::sleep(std::time::Duration::from_micros(400));
        std::hint::black_box(item.0);
    });
    OUTER_WAITS.set(NOT_WAITING);
    let more = scratch.alloc_slice(100, 7u8);
    if !mine.iter().enumerate().all(|(i, &x)| x == (i * 31) as u32) || more != [7u8; 100] {
        nesting.corrupted.fetch_add(1, Ordering::Relaxed);
    }
}

/// A scratch user that may be stolen onto `outer`'s thread while `outer` waits.
fn inner<const K: u8>(scratch: Scratch, nesting: Res<Nesting>) {
    match OUTER_WAITS.get() {
        IN_SCOPE => nesting.in_scope.fetch_add(1, Ordering::Relaxed),
        IN_PAR_ITER => nesting.in_par_iter.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
    let junk = scratch.alloc_slice(8_192, K);
    // Long enough that several are still queued while `outer` waits.
    std::thread::sleep(std::time::Duration::from_millis(2));
    if junk.iter().any(|&b| b != K) {
        nesting.corrupted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Scratch users nested on one thread by work stealing (while a system waits in a task
/// scope or in `par_iter`) each get an arena of their own: the waiting system's memory is
/// intact afterwards.
#[test]
fn nested_scratch_users_through_work_stealing() {
    let n = frames(100);
    let mut app = app();
    app.init_resource::<Nesting>()
        .add_systems(
            Update,
            (
                outer, inner::<1>, inner::<2>, inner::<3>, inner::<4>, inner::<5>, inner::<6>,
            ),
        )
        .add_systems(
            Update,
            (
                inner::<7>,
                inner::<8>,
                inner::<9>,
                inner::<10>,
                inner::<11>,
                inner::<12>,
            ),
        );
    app.world_mut().spawn_batch((0..200).map(Item));
    app.finish();
    app.cleanup();
    let mut arenas = 0;
    // At least `n` frames, and on until a run was nested (how often work stealing nests
    // a system depends on the machine's timing; at most 10x longer).
    for frame in 0..10 * n {
        app.update();
        arenas = arenas.max(app.world().resource::<MemoryStats>().scratch_arenas);
        let nesting = app.world().resource::<Nesting>();
        let nested =
            nesting.in_scope.load(Ordering::Relaxed) + nesting.in_par_iter.load(Ordering::Relaxed);
        if frame + 1 >= n && nested > 0 {
            break;
        }
    }
    let nesting = app.world().resource::<Nesting>();
    assert_eq!(nesting.corrupted.load(Ordering::Relaxed), 0);
    let (scope, par) = (
        nesting.in_scope.load(Ordering::Relaxed),
        nesting.in_par_iter.load(Ordering::Relaxed),
    );
    let nested = scope + par;
    println!(
        "{nested} inner runs started on the thread of a waiting `outer` ({scope} in a scope, \
         {par} in par_iter); at most {arenas} scratch arenas"
    );
    assert!(
        nested > 0,
        "work stealing never nested a system: the test proves nothing"
    );
    // The systems' arenas are shared by all threads: as many as claims were alive at
    // once, and a nested run's claim is one more (the waiting system still holds its own).
    assert!(arenas >= 2, "a nested run took an arena of its own");
}

/// Two `Scratch` parameters in one system are two arenas; they are dropped in declaration
/// order, each rewinding only its own.
#[test]
fn two_scratch_parameters_in_one_system() {
    let mut app = app();
    app.add_systems(Update, |a: Scratch, b: Scratch| {
        let x = a.alloc_slice(1_000, 1u8);
        let y = b.alloc_slice(1_000, 2u8);
        assert!(!std::ptr::eq(&*a, &*b), "two items, one arena");
        assert!(x.iter().all(|&v| v == 1) && y.iter().all(|&v| v == 2));
        assert_eq!((a.bytes_used(), b.bytes_used()), (1_000, 1_000));
    });
    for _ in 0..frames(100) {
        app.update();
    }
    let stats = *app.world().resource::<MemoryStats>();
    assert_eq!(stats.scratch_bytes, 2_000, "{stats}");
}

#[derive(Component)]
struct Body(u32);

fn spread(scratch: Scratch, bodies: Query<&Body>, checks: Res<Checks>) {
    let batches = scratch.batches();
    bodies.par_iter().for_each_init(
        || batches.batch(),
        |batch, body| {
            batch.scope(|s| {
                let v = s.alloc_slice(64, body.0);
                if v.iter().any(|&x| x != body.0) {
                    checks.failures.fetch_add(1, Ordering::Relaxed);
                }
            });
        },
    );
    checks.runs.fetch_add(1, Ordering::Relaxed);
}

/// A system's first run makes the arenas its batches need (one per compute thread, the
/// item's and the waiting thread's): the later runs claim them, making none.
#[test]
fn batches_make_their_arenas_in_the_first_run() {
    let mut app = app();
    app.init_resource::<Checks>().add_systems(Update, spread);
    app.world_mut().spawn_batch((0..4_000).map(Body));
    app.finish();
    app.cleanup();
    app.update();
    let first = app.world().resource::<MemoryStats>().scratch_arenas;
    assert!(
        first >= 4 + 2,
        "an arena per compute thread, and two: {first}"
    );
    for _ in 0..frames(200) {
        app.update();
        let now = app.world().resource::<MemoryStats>().scratch_arenas;
        assert_eq!(now, first, "a later run made an arena");
    }
    let checks = app.world().resource::<Checks>();
    assert_eq!(checks.failures.load(Ordering::Relaxed), 0);
    assert_eq!(checks.runs.load(Ordering::Relaxed), frames(200) + 1);
}
