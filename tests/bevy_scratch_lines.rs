//! Each system's `Scratch` memory on a ledger line of its own, `scratch/systems/<name>`,
//! under `scratch/systems`, on compute pools of 1, 4 and 8 threads: two systems whose
//! `Scratch` use has known, different sizes, and one whose `par_iter` takes
//! `ScratchBatches`. And the `scratch/systems` peak of a 4 MiB spike: the most the
//! line's blocks held at once, not that plus the block a reset replaced.
//!
//! The ledger and Bevy's task pools are process-wide, so each case runs in a child process
//! of this binary (the `child` test, which does nothing unless `NEBULA_SCRATCH_LINES` is
//! set). What a line held at each moment is replayed from the ledger's own block events
//! (`ledger::record_events`), each naming the tag its block was charged to.
#![cfg(feature = "bevy")]

mod common;

use std::hint::black_box;

use bevy_app::{App, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::Arena;
use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, Scratch};
use nebula_memory::ledger::{self, LedgerEvent, TagFigures};

const CHILD: &str = "NEBULA_SCRATCH_LINES";

/// Runs the `child` test in a new process of this binary, in `mode`.
fn in_child(mode: &str) {
    common::in_child(CHILD, mode);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn each_system_has_its_scratch_line_on_one_compute_thread() {
    in_child("1");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn each_system_has_its_scratch_line_on_four_compute_threads() {
    in_child("4");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn each_system_has_its_scratch_line_on_eight_compute_threads() {
    in_child("8");
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
        n => lines(n.parse().expect("a thread count")),
    }
}

/// A headless app whose compute pool has exactly `threads` threads, with the memory
/// plugin.
fn app(threads: usize) -> App {
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: common::compute_threads(threads),
    })
    .add_plugins(MemoryPlugin::default());
    assert_eq!(
        bevy_tasks::ComputeTaskPool::get().thread_num(),
        threads,
        "the compute pool's size"
    );
    app
}

/// The parent line of every system's scratch line.
const PARENT: &str = "scratch/systems";
/// What `big` and `small` allocate each run, what each `batched` item does, and what a
/// `Scratch` run outside the wrapped systems does.
const BIG: usize = 300 << 10;
const SMALL: usize = 40 << 10;
const PER_ITEM: usize = 512;
const OUTSIDE: usize = 12 << 10;
const ITEMS: u32 = 10_000;
/// A block's header, and the most the arena's growth and the pool round a block past its
/// request (the block granule).
const HEADER: usize = 32;
const GRANULE: usize = 4096;

fn big(scratch: Scratch) {
    let bytes = scratch.alloc_slice(BIG, 1u8);
    assert_eq!(black_box(bytes)[BIG - 1], 1);
}

fn small(scratch: Scratch) {
    let bytes = scratch.alloc_slice(SMALL, 2u8);
    assert_eq!(black_box(bytes)[SMALL - 1], 2);
}

#[derive(Component)]
struct Item(u32);

fn batched(scratch: Scratch, items: Query<&Item>) {
    let batches = scratch.batches();
    items.par_iter().for_each_init(
        || batches.batch(),
        |batch, item| {
            batch.scope(|s| {
                let bytes = s.alloc_slice(PER_ITEM, item.0 as u8);
                assert_eq!(black_box(bytes)[PER_ITEM - 1], item.0 as u8);
            });
        },
    );
}

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
    tag == PARENT || tag.starts_with("scratch/systems/")
}

fn line(ledger: &MemoryLedger, tag: &str) -> TagFigures {
    ledger
        .tag(tag)
        .unwrap_or_else(|| panic!("no ledger line {tag}:\n{}", **ledger))
}

/// Two systems with `Scratch` uses of known sizes and one with `ScratchBatches` in a
/// `par_iter`, on `threads` compute threads: each system's line holds its own blocks and
/// nothing else, the parent line their sum plus what a run outside the systems took.
fn lines(threads: usize) {
    ledger::record_events(true);
    let mut app = app(threads);
    app.add_systems(Update, (big, small, batched));
    app.world_mut().spawn_batch((0..ITEMS).map(Item));
    for _ in 0..12 {
        app.update();
    }
    // Outside the wrapped systems: charged to the parent line itself.
    app.world_mut()
        .run_system_cached(|scratch: Scratch| {
            black_box(scratch.alloc_slice(OUTSIDE, 3u8));
        })
        .unwrap();
    app.update();
    let events = ledger::take_recorded_events();
    let ledger = app.world().resource::<MemoryLedger>();
    let context = format!("{threads} compute threads:\n{}", **ledger);

    // Each exact line: one block, sized for its system's own use, the line's figures
    // those of the blocks the ledger's events charged to it.
    for (name, bytes) in [("big", BIG), ("small", SMALL)] {
        let tag = format!("{PARENT}/{name}");
        let f = line(ledger, &tag);
        let r = replay(&events, |t| t == tag);
        let block = HEADER + bytes..HEADER + bytes + GRANULE;
        assert_eq!(r.taken.len(), 1, "{tag} took {:?}\n{context}", r.taken);
        assert!(block.contains(&r.taken[0]), "{tag}: {r:?}\n{context}");
        assert_eq!((f.held, f.peak_held), (r.held, r.most), "{tag}\n{context}");
        assert_eq!(f.used, bytes, "{tag}: its arena's use each run\n{context}");
    }
    // The batches' line: blocks of the per-item size only (each batch's arena keeps its
    // first block), one per batch alive at once at most, and the runs' items and
    // nothing else in use.
    let tag = format!("{PARENT}/batched");
    let f = line(ledger, &tag);
    let r = replay(&events, |t| t == tag);
    assert!(
        !r.taken.is_empty() && r.taken.iter().all(|&b| b <= GRANULE + HEADER),
        "{tag}: {r:?}\n{context}"
    );
    assert_eq!((f.held, f.peak_held), (r.held, r.most), "{tag}\n{context}");
    assert!(
        f.held >= HEADER + PER_ITEM && f.held <= (threads + 2) * (GRANULE + HEADER),
        "{tag}: {f:?}\n{context}"
    );
    // The run outside the systems: on the parent line itself, one block.
    let own = replay(&events, |t| t == PARENT);
    assert_eq!(own.taken.len(), 1, "{PARENT} itself: {own:?}\n{context}");
    assert!(
        (HEADER + OUTSIDE..HEADER + OUTSIDE + GRANULE).contains(&own.held),
        "{PARENT} itself: {own:?}\n{context}"
    );
    // The parent: the sum of its children and its own, the most they held at once.
    let parent = line(ledger, PARENT);
    let children: usize = ledger
        .tags()
        .filter(|(t, _)| t.starts_with("scratch/systems/") && t.matches('/').count() == 2)
        .map(|(_, f)| f.held)
        .sum();
    assert_eq!(parent.held, children + own.held, "{context}");
    let all = replay(&events, under_parent);
    assert_eq!(
        (parent.held, parent.peak_held),
        (all.held, all.most),
        "{context}"
    );
    assert!(
        ledger
            .tags()
            .filter(|(t, _)| t.starts_with("scratch/systems/"))
            .all(|(t, _)| ["big", "small", "batched"].contains(&&t[PARENT.len() + 1..])),
        "only the systems' lines: {context}"
    );
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

/// The spike's reset replaced its three blocks by one: the parent line's peak (and the
/// system's) is the most its blocks held at once (4,206,688 bytes), where it used to be
/// that plus the replacement, counted while the block it replaced, already back in the
/// pool, was still charged (8,400,960 bytes: "8.0 MiB").
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
    let tag = format!("{PARENT}/spike");
    let f = line(ledger, &tag);
    let own = replay(&events, |t| t == tag);
    assert_eq!((f.held, f.peak_held), (own.held, own.most), "{}", **ledger);
}
