//! The `scratch/systems` peak of a 4 MiB `Scratch` spike: the most the line's blocks held
//! at once, not that plus the block a reset replaced.
//!
//! The ledger and Bevy's task pools are process-wide, so each case runs in a child process
//! of this binary (the `child` test, which does nothing unless `NEBULA_SCRATCH_LINES` is
//! set). What a line held at each moment is replayed from the ledger's own block events
//! (`ledger::record_events`), each naming the tag its block was charged to.
#![cfg(feature = "bevy")]

use std::hint::black_box;

use bevy_app::{App, TaskPoolOptions, TaskPoolPlugin, TaskPoolThreadAssignmentPolicy, Update};
use bevy_ecs::prelude::*;
use nebula_memory::Arena;
use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, Scratch};
use nebula_memory::ledger::{self, LedgerEvent, TagFigures};

const CHILD: &str = "NEBULA_SCRATCH_LINES";

/// Runs the `child` test in a new process of this binary, in `mode`.
fn in_child(mode: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .output()
        .expect("the test binary runs");
    assert!(
        out.status.success(),
        "child {mode} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn a_spikes_reset_does_not_double_the_lines_peak() {
    in_child("spike");
}

#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return; // run by the tests above only
    };
    match mode.as_str() {
        "spike" => spike_lines(),
        _ => panic!("unknown mode {mode}"),
    }
}

/// A headless app whose compute pool has exactly `threads` threads, with the memory
/// plugin.
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
    assert_eq!(
        bevy_tasks::ComputeTaskPool::get().thread_num(),
        threads,
        "the compute pool's size"
    );
    app
}

/// The line of `Scratch`'s arenas.
const PARENT: &str = "scratch/systems";

/// The ledger's block events of the tags `of` picks, replayed as one line: what it holds
/// after them, the most it held at once, and the blocks it took.
#[derive(Default, Debug)]
struct Replay {
    held: usize,
    most: usize,
    /// Sizes of the blocks taken.
    taken: Vec<usize>,
}

fn replay(events: &[LedgerEvent], mut of: impl FnMut(&str) -> bool) -> Replay {
    let mut r = Replay::default();
    for e in events {
        match *e {
            LedgerEvent::BlockTaken {
                tag,
                bytes,
                heap: false,
                ..
            } if of(tag) => {
                r.held += bytes;
                r.most = r.most.max(r.held);
                r.taken.push(bytes);
            }
            LedgerEvent::BlockReturned {
                tag,
                bytes,
                heap: false,
                ..
            } if of(tag) => r.held -= bytes,
            _ => {}
        }
    }
    r
}

fn under_parent(tag: &str) -> bool {
    tag == PARENT
}

fn line(ledger: &MemoryLedger, tag: &str) -> TagFigures {
    ledger
        .tag(tag)
        .unwrap_or_else(|| panic!("no ledger line {tag}:\n{}", **ledger))
}

/// One system that uses a little scratch, and once a 4 MiB spike after two small
/// allocations (so the frame spills over three blocks and the reset replaces them by one).
fn spike(scratch: Scratch, mut frame: Local<u32>) {
    *frame += 1;
    if *frame == 3 {
        black_box(scratch.alloc_slice(3000, 1u8));
        black_box(scratch.alloc_slice(3000, 1u8));
        black_box(scratch.alloc_slice(4 << 20, 1u8));
    } else {
        black_box(scratch.alloc_slice(100, 1u8));
    }
}

/// The spike's reset replaced its three blocks by one: the line's peak is the most its
/// blocks held at once (4,206,688 bytes), where it used to be that plus the replacement,
/// counted while the block it replaced, already back in the pool, was still charged
/// (8,400,960 bytes: "8.0 MiB").
fn spike_lines() {
    ledger::record_events(true);
    let mut app = app(1);
    app.add_systems(Update, spike);
    for _ in 0..6 {
        app.update();
    }
    let events = ledger::take_recorded_events();
    let ledger = app.world().resource::<MemoryLedger>();
    let all = replay(&events, under_parent);
    let parent = line(ledger, PARENT);
    assert!(
        all.taken.len() >= 4 && all.most < 2 * (4 << 20),
        "the spike spilled and its blocks were replaced: {all:?}\n{}",
        **ledger
    );
    assert_eq!(
        (parent.held, parent.peak_held),
        (all.held, all.most),
        "{PARENT}: the most it held is the replayed most\n{}",
        **ledger
    );
}
