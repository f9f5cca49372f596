//! The soundness rules in a Bevy app: the frame end reaches a tagged scratch resource only
//! through the world that holds it (F4), whoever inserted it (F7); a `Scratch` item kept
//! past its thread's scratch stack still has its arena (F6); and the torture subscriber of
//! `tests/reentrancy.rs` against `Scratch`, `TaggedScratch` and `FrameMemory`.
//!
//! A process of its own: it sets warn budgets on the crate's own tags.
#![cfg(feature = "bevy")]

mod common;
#[path = "support/reenter.rs"]
mod reenter;

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use bevy_app::{App, Update};
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemState;
use nebula_memory::bevy::{
    FrameMemory, MemoryPlugin, Scratch, ScratchArenas, ScratchTag, TaggedScratch,
    TaggedScratchArenas, reset_frame_arenas_system,
};
use nebula_memory::{Arena, ArenaConfig, FrameHandle, ledger};
use reenter::{Mode, Stamped, check};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Moved;
impl ScratchTag for Moved {
    const TAG: &'static str = "bevy_soundness/moved";
}

/// F4: the frame end kept its own `Arc` of every tagged owner. Moving the resource to
/// another world (safe: `remove_resource` + `insert_resource`) and ending world A's frame
/// then ended the owner's frame under a live item of world B; the next claim in B took
/// that item's arena as "forgotten", reset it, and handed it to a second item.
#[test]
fn a_frame_end_never_reaches_a_tagged_resource_moved_to_another_world() {
    let _serial = serial();
    let mut world_a = World::new();
    SystemState::<TaggedScratch<Moved>>::new(&mut world_a);
    let arenas = world_a
        .remove_resource::<TaggedScratchArenas<Moved>>()
        .unwrap();
    let mut world_b = World::new();
    world_b.insert_resource(arenas);
    let mut first_state = SystemState::<TaggedScratch<Moved>>::new(&mut world_b);
    let mut second_state = SystemState::<TaggedScratch<Moved>>::new(&mut world_b);

    let first = first_state.get(&world_b).unwrap();
    let kept = first.alloc_val(0xAAAA_AAAA_u64);
    reset_frame_arenas_system(&mut world_a);
    let second = second_state.get(&world_b).unwrap();
    let other = second.alloc_val(0xBBBB_BBBB_u64);
    assert_ne!(std::ptr::from_ref(kept), std::ptr::from_ref(other));
    assert_eq!(
        *kept, 0xAAAA_AAAA,
        "the first item's memory was handed to the second"
    );
    drop(second);
    drop(first);
}

struct Inserted;
impl ScratchTag for Inserted {
    const TAG: &'static str = "bevy_soundness/inserted";
}

/// F7: a `TaggedScratchArenas<T>` the app inserted itself never got frame ends, so the
/// arena of a forgotten item was never reclaimed: each frame that forgot one made another.
#[test]
fn a_tagged_resource_the_app_inserted_gets_frame_ends() {
    let _serial = serial();
    let mut world = World::new();
    world.insert_resource(TaggedScratchArenas::<Inserted>::with_config(
        ArenaConfig::default().first_block(16 * 1024),
    ));
    let mut state = SystemState::<TaggedScratch<Inserted>>::new(&mut world);
    for _ in 0..5 {
        let item = state.get(&world).unwrap();
        item.alloc_val(1u64);
        std::mem::forget(item);
        reset_frame_arenas_system(&mut world);
    }
    let frame = world
        .resource_mut::<TaggedScratchArenas<Inserted>>()
        .end_frame();
    assert_eq!(
        frame.arenas, 1,
        "each frame's forgotten item left its arena busy for good"
    );
    let taken = ledger::snapshot().tag(Inserted::TAG).unwrap().blocks_taken;
    assert_eq!(taken, 1, "the forgotten arena was not reclaimed");
}

thread_local! {
    static LATE: RefCell<Late> = const { RefCell::new(Late(None)) };
}

/// A `Scratch` item used from a thread-local destructor that runs after the scratch
/// stack's.
struct Late(Option<Scratch<'static>>);

impl Drop for Late {
    fn drop(&mut self) {
        if let Some(scratch) = self.0.take() {
            let v = scratch.alloc_slice_fill_with(100, |i| i as u64);
            assert_eq!(v.iter().sum::<u64>(), 4950);
            drop(scratch);
        }
    }
}

/// F6 for Bevy: a `Scratch<'static>` (from a leaked world) kept in a thread-local
/// destroyed after the scratch stack held a raw pointer to its arena's slot, which the
/// stack's destruction freed (valgrind and ASan see the use after free).
#[test]
fn a_scratch_item_kept_past_its_threads_stack_still_has_its_arena() {
    let _serial = serial();
    std::thread::spawn(|| {
        LATE.with(|_| ()); // registered before the crate's thread-locals: destroyed after
        let world = common::leak(World::new());
        world.insert_resource(ScratchArenas::default());
        let state = common::leak(SystemState::<Scratch>::new(world));
        let world: &'static World = world;
        let item: Scratch<'static> = state.get(world).unwrap();
        item.alloc_val(1u8);
        LATE.with(|l| l.borrow_mut().0 = Some(item));
    })
    .join()
    .unwrap();
}

// ---------------------------------------------------------------------------- the torture

struct Physics;
impl ScratchTag for Physics {
    const TAG: &'static str = "scratch/bevy_soundness/physics";
}

#[derive(Resource, Default)]
struct Kept(Vec<FrameHandle<[u64]>>);

/// A system with every Bevy scratch parameter, its memory checked after every allocation,
/// and frame memory read back a frame later.
fn torture_system(
    scratch: Scratch,
    tagged: TaggedScratch<Physics>,
    frames: Res<FrameMemory>,
    mut kept: ResMut<Kept>,
) {
    let mut live = Vec::new();
    for i in 0..if cfg!(miri) { 4 } else { 40 } {
        let words = 1 + (i * 37) % 700;
        let layout = std::alloc::Layout::array::<u64>(words).unwrap();
        reenter::rearm();
        if let Ok(p) = scratch.try_alloc(layout) {
            live.push(Stamped::new(p, words));
        }
        check(&live);
        reenter::rearm();
        if let Ok(p) = tagged.try_alloc(layout) {
            live.push(Stamped::new(p, words));
        }
        check(&live);
    }
    for &h in &kept.0 {
        assert!(
            frames
                .get(h)
                .is_none_or(|v| v.iter().all(|&w| w == v.len() as u64))
        );
    }
    reenter::rearm();
    let words = 300;
    if let Ok(h) = frames.try_store_slice(&vec![words as u64; words]) {
        kept.0.push(h);
    }
}

/// The torture subscriber against the Bevy parameters and the plugin's frame end: every
/// block a system's scratch takes emits an event, and the subscriber calls back into
/// every entry point (then, in the second half, panics). Each system run checks what it
/// holds; the app goes on after a panic.
#[test]
fn a_subscriber_calling_back_inside_bevy_scratch_sees_only_consistent_arenas() {
    let _serial = serial();
    for mode in [Mode::CallBack, Mode::Panic] {
        let mut app = App::new();
        app.add_plugins(MemoryPlugin::default())
            .init_resource::<Kept>()
            .add_systems(Update, torture_system);
        let before = reenter::events();
        reenter::with_subscriber(mode, || {
            for _ in 0..if cfg!(miri) { 3 } else { 30 } {
                // A panic unwinds out of the frame: the next one goes on from there.
                let _ = catch_unwind(AssertUnwindSafe(|| app.update()));
                check(&[]);
            }
        });
        assert!(reenter::events() > before, "{mode:?}: no event was emitted");
    }
}
