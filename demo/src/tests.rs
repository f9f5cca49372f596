//! The demo's own app under the crate's allocation assertions (`AllocationCheck`), after a
//! warm-up and through a spike frame:
//!
//! - the arena run's four systems make no heap allocation in any frame on one compute
//!   thread (their `par_iter` batches are charged to them on any thread: a
//!   `ScratchBatch` enters its system's heap scope). On more than one, the system that
//!   calls `par_iter` (physics) carries Bevy's own allocations for it (the scope's task
//!   queue and its tasks, about 10 a frame whatever the number of entities, as many as the
//!   demo's `movement`, a `par_iter` with no temporaries, makes): held under a bound that
//!   does not grow with the work;
//! - the heap run's systems allocate every frame, and in the local-vec run the systems whose
//!   work outgrows their `Local` buffers at the spike allocate then: the assertions see
//!   allocations where there are some.
//!
//! The figures need a `TrackingAllocator` as the global allocator: this test binary is the
//! demo's, whose allocator (`alloc::Counting`) tracks unless `FRAME_LOOP_ALLOCATOR` says
//! otherwise, which the children below never inherit. Bevy's task pools are process-wide
//! (the first app's serve every later one), so each case runs in a child process of this
//! binary: the `child` test, which does nothing unless `FRAME_LOOP_TEST_CHILD` is set.

use bevy_app::{App, TaskPoolOptions};
use bevy_tasks::ComputeTaskPool;
use nebula_memory::bevy::{AllocationCheck, AllocationRecord};

use crate::alloc::{ALLOCATOR_VAR, Backend, backend};
use crate::state::{Mode, Tick};
use crate::systems::{app_on, four_compute_threads};
use crate::workload::{SPIKE_EVERY, is_spike};

const CHILD: &str = "FRAME_LOOP_TEST_CHILD";

/// A small world: the test is about where temporaries live, not about their size.
const ENTITIES: usize = 500;
/// Frames before recording: the first initialises the systems and makes their arenas, one
/// per compute thread.
const WARMUP: u32 = 5;
/// Frames recorded; the third is a spike frame (see [`app`]).
const FRAMES: u32 = 8;
/// The most heap allocations, and bytes, a frame that Bevy's `par_iter` may make in the
/// calling system on more than one compute thread: 7 to 13 allocations and up to 11 KiB
/// measured on 4 threads, alike at 500 and 5,000 entities and in spike frames (the heap
/// run's physics makes more than one allocation per entity).
const PAR_ITER_ALLOCS: u64 = 32;
const PAR_ITER_BYTES: usize = 32 << 10;

/// The four systems whose temporaries live where the run's mode says.
const SYSTEMS: [&str; 4] = [
    "physics_system",
    "cull_system",
    "lod_system",
    "stream_system",
];
/// The one of them that calls `par_iter`.
const PAR_ITER: &str = "physics_system";
/// The local-vec run's systems whose work grows at a spike (physics' contact pairs,
/// streaming's region): their `Local` buffers grow then.
const SPIKE_GROWN: [&str; 2] = ["physics_system", "stream_system"];

/// Runs the `child` test in a new process of this binary, with `case`.
fn in_child(case: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["tests::child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, case)
        .env_remove(ALLOCATOR_VAR)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {case} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn arena_systems_make_no_heap_allocations_on_one_compute_thread() {
    in_child("arena 1");
}

#[test]
fn arena_systems_make_no_heap_allocations_on_four_compute_threads() {
    in_child("arena 4");
}

#[test]
fn arena_systems_make_no_heap_allocations_on_the_default_compute_pool() {
    in_child("arena default");
}

#[test]
fn heap_and_local_vec_systems_allocate_on_four_compute_threads() {
    in_child("others 4");
}

#[test]
fn heap_and_local_vec_systems_allocate_on_the_default_compute_pool() {
    in_child("others default");
}

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD) else {
        return; // run by the tests above only
    };
    assert_eq!(backend(), Backend::Tracked, "the tracking allocator");
    let (modes, pools) = case.split_once(' ').expect("'<modes> <pools>'");
    let pools = match pools {
        "1" => TaskPoolOptions::with_num_threads(1),
        "4" => four_compute_threads(),
        "default" => TaskPoolOptions::default(),
        _ => panic!("unknown pools: {pools}"),
    };
    match modes {
        "arena" => arena(pools),
        "others" => {
            heap(pools);
            local_vec();
        }
        _ => panic!("unknown modes: {modes}"),
    }
}

/// The demo's app in `mode`, its clock set so that the third recorded frame is a spike
/// frame (the workload's size follows the clock alone) rather than after 125 frames.
fn app(mode: Mode, pools: TaskPoolOptions) -> App {
    let mut app = app_on(
        mode,
        ENTITIES,
        pools,
        nebula_memory::bevy::DEFAULT_HISTORY_FRAMES,
    );
    app.world_mut().resource_mut::<Tick>().0 = SPIKE_EVERY / 2 - u64::from(WARMUP) - 2;
    app
}

/// Records `app` after its warm-up.
fn record(app: &mut App) -> AllocationRecord {
    let record = AllocationCheck::frames(FRAMES).warmup(WARMUP).run(app);
    let tick = app.world().resource::<Tick>().0;
    assert!(
        is_spike(tick - u64::from(FRAMES) + 2),
        "the third recorded frame is a spike"
    );
    record
}

fn arena(pools: TaskPoolOptions) {
    let record = record(&mut app(Mode::Arena, pools));
    for system in SYSTEMS {
        if system == PAR_ITER && ComputeTaskPool::get().thread_num() > 1 {
            record.assert_allocs_at_most(system, PAR_ITER_ALLOCS);
            record.assert_bytes_at_most(system, PAR_ITER_BYTES);
        } else {
            record.assert_no_allocations(system);
        }
    }
}

fn heap(pools: TaskPoolOptions) {
    let record = record(&mut app(Mode::Heap, pools));
    for system in SYSTEMS {
        let allocs: Vec<u64> = record.frames_of(system).iter().map(|f| f.allocs).collect();
        assert!(
            allocs.iter().all(|&a| a > 0),
            "{system} in the heap run: a fresh Vec every frame, yet {allocs:?}"
        );
    }
    let physics = record.frames_of(PAR_ITER).iter().map(|f| f.allocs).min();
    assert!(
        physics > Some(PAR_ITER_ALLOCS),
        "physics in the heap run: a list per entity, above the bound for Bevy's own; yet {physics:?}"
    );
}

/// After the heap run, in the same process: on the pools that run made.
fn local_vec() {
    let record = record(&mut app(Mode::LocalVec, TaskPoolOptions::default()));
    for system in SPIKE_GROWN {
        let spike = record.frames_of(system)[2];
        assert!(
            spike.allocs > 0,
            "{system} in the local-vec run: its buffers grow at the spike, yet {spike:?}"
        );
    }
}
