//! The Bevy side: one app per run, whose systems call the shared work of `workload` and
//! `render` with the run's temporaries.
//!
//! - **arena**: a `TaggedScratch` for each system's temporaries (so the ledger shows each
//!   system on a line of its own, see `tags`); for each entity's list inside `par_iter`, a
//!   batch of the physics system's own arenas per batch of entities (`for_each_init` with
//!   `TaggedScratch::batches`: one arena claimed per batch, reset after each entity), each
//!   list starting at the longest list's length of the last frame; `FrameMemory` for the
//!   visible list handed from culling to LOD sorting.
//! - **heap**: a fresh `Vec` for every temporary, per entity too.
//! - **local-vec**: the Bevy idiom for reuse: `Local<Vec>` buffers cleared each run, and
//!   `Local<Parallel<Vec>>` (bevy_utils) for the per-entity lists, one per thread,
//!   borrowed once per batch (`for_each_init`, as Bevy documents it).
//!
//! Every system takes a `Frame` (see `state`: the run's mode, the frame's tick and where
//! it reports) and the temporaries of all three ways; only its run's are used.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use bevy_app::{
    App, Last, PostUpdate, TaskPoolOptions, TaskPoolPlugin, TaskPoolThreadAssignmentPolicy, Update,
};
use bevy_ecs::prelude::*;
use bevy_utils::Parallel;
use nebula_memory::allocator_api2::alloc::{Allocator, Global};
use nebula_memory::allocator_api2::vec::Vec as AVec;
use nebula_memory::bevy::{FrameMemory, MemoryPlugin, MemorySystems, TaggedScratch};
use nebula_memory::{FrameHandle, ScratchBatch, ledger};

use crate::alloc::own;
use crate::render::{cull, lod_sort, stream_chunks};
use crate::state::*;
use crate::tags;
use crate::workload::*;

/// The visible list, from culling to LOD sorting: a frame handle in the arena run, a
/// vector otherwise (fresh each frame in the heap run, reused in the local-vec run).
#[derive(Resource, Default)]
struct Visible {
    handle: Option<FrameHandle<[u32]>>,
    list: AVec<u32, Global>,
}

/// The shared body of the physics system: grid, per-entity steering in `par_iter` (each
/// entity's list from `with_list`, given what `init` made for the batch of entities the
/// calling thread runs), contact pairs. Returns the checksum.
#[allow(clippy::too_many_arguments)]
fn physics<A: Allocator, I>(
    entries: &mut AVec<Entry, A>,
    starts: &mut AVec<u32, A>,
    pairs: &mut AVec<(u32, u32), A>,
    query: &mut Query<(&Id, &Pos, &mut Steer)>,
    scale: f32,
    needs: &Needs,
    init: impl Fn() -> I + Send + Sync + Clone,
    with_list: impl Fn(&mut I, Grid<'_>, u32, [f32; 3], f32) -> Steer + Send + Sync + Clone,
) -> u64 {
    own(|| build_grid(entries, starts, query.iter().map(|(id, p, _)| (id.0, p.0))));
    needs.set(0, len_bytes(entries) + len_bytes(starts));
    let grid = Grid { entries, starts };
    query.par_iter_mut().for_each_init(
        || own(&init),
        |state, (id, p, mut steer)| {
            *steer = own(|| with_list(state, grid, id.0, p.0, FLOCK_RADIUS * scale));
        },
    );
    own(|| {
        let (steering, near) = query.iter().fold((0u64, 0usize), |(h, n), (_, _, s)| {
            let h = h.wrapping_add(s.hash ^ u64::from(s.v[0].to_bits()));
            (h, n + s.near as usize)
        });
        needs.set(2, near * size_of::<Near>());
        let sum = steering.wrapping_add(contacts(pairs, grid, CONTACT_RADIUS * scale));
        needs.set(1, len_bytes(pairs));
        sum
    })
}

#[derive(Default)]
struct PhysicsBuffers {
    entries: AVec<Entry, Global>,
    starts: AVec<u32, Global>,
    pairs: AVec<(u32, u32), Global>,
}

/// The arena run's capacity hint for the per-entity lists: the longest of the last frame.
#[derive(Default)]
struct ListHint {
    last: AtomicUsize,
}

fn physics_system(
    frame: Frame,
    scratch: TaggedScratch<tags::Physics>,
    mut local: Local<PhysicsBuffers>,
    mut lists: Local<Parallel<AVec<Near, Global>>>,
    hint: Local<ListHint>,
    mut query: Query<(&Id, &Pos, &mut Steer)>,
) {
    let hint_now = AtomicUsize::new(0);
    let scale = if frame.spike() { BLAST } else { 1.0 };
    let needs = &*frame.needs;
    let sum = match *frame.mode {
        Mode::Arena => {
            let a = &*scratch;
            let (mut entries, mut starts) = (AVec::new_in(a), AVec::new_in(a));
            let pairs = &mut AVec::new_in(a);
            // Each entity's list in a batch of this system's own arenas (charged to its
            // tag), starting at the longest list of the last frame, as a `Local` list
            // keeps its capacity: no regrowth from empty.
            let batches = scratch.batches();
            let start_cap = hint.last.load(Relaxed);
            let longest = &hint_now;
            let with_list = |batch: &mut ScratchBatch, g: Grid<'_>, id, p, r| {
                batch.scope(|s| {
                    let mut list = AVec::with_capacity_in(start_cap, s);
                    let steer = steer_one(&mut list, g, id, p, r);
                    // A read first: the shared line is written only when the longest grows.
                    if list.len() > longest.load(Relaxed) {
                        longest.fetch_max(list.len(), Relaxed);
                    }
                    steer
                })
            };
            let (q, s) = (&mut query, scale);
            let sum = physics(
                &mut entries,
                &mut starts,
                pairs,
                q,
                s,
                needs,
                move || batches.batch(),
                with_list,
            );
            hint.last.store(hint_now.load(Relaxed), Relaxed);
            sum
        }
        Mode::Heap => {
            let (mut entries, mut starts, pairs) = (AVec::new(), AVec::new(), &mut AVec::new());
            // Each batch's thread in this system's heap scope: the lists are charged to it.
            let scope = ledger::current_scope();
            let with_list = |_: &mut ledger::TagScope, g: Grid<'_>, id, p, r| {
                steer_one(&mut AVec::new(), g, id, p, r)
            };
            let (q, s) = (&mut query, scale);
            physics(
                &mut entries,
                &mut starts,
                pairs,
                q,
                s,
                needs,
                move || scope.enter(),
                with_list,
            )
        }
        Mode::LocalVec => {
            let PhysicsBuffers {
                entries,
                starts,
                pairs,
            } = &mut *local;
            entries.clear();
            starts.clear();
            pairs.clear();
            let lists = &*lists;
            let (q, s) = (&mut query, scale);
            let sum = physics(
                entries,
                starts,
                pairs,
                q,
                s,
                needs,
                || lists.borrow_local_mut(),
                |list, g, id, p, r| steer_one(list, g, id, p, r),
            );
            frame.keep(0, bytes(entries) + bytes(starts) + bytes(pairs));
            sum
        }
    };
    if *frame.mode == Mode::LocalVec {
        let kept: usize = lists.iter_mut().map(|l| bytes(l)).sum();
        frame.held.0[0].fetch_add(kept, Relaxed);
    }
    frame.checksum.add(sum);
}

fn cull_system(
    frame: Frame,
    scratch: TaggedScratch<tags::Culling>,
    frames: Res<FrameMemory>,
    mut visible: ResMut<Visible>,
    query: Query<(&Id, &Pos)>,
) {
    let items = query.iter().map(|(id, p)| (id.0, p.0));
    let needs = &frame.needs;
    let sum = own(|| match *frame.mode {
        Mode::Arena => {
            let mut out = AVec::new_in(&*scratch);
            let sum = cull(&mut out, items);
            needs.set(3, len_bytes(&out));
            visible.handle = Some(frames.store_slice(&out));
            sum
        }
        Mode::Heap => {
            let mut out = AVec::new();
            let sum = cull(&mut out, items);
            needs.set(3, len_bytes(&out));
            visible.list = out; // a fresh vector every frame
            sum
        }
        Mode::LocalVec => {
            visible.list.clear(); // the same vector, reused
            let sum = cull(&mut visible.list, items);
            needs.set(3, len_bytes(&visible.list));
            frame.keep(1, bytes(&visible.list));
            sum
        }
    });
    frame.checksum.add(sum);
}

#[derive(Default)]
struct LodBuffers {
    keys: AVec<(u32, u32), Global>,
    pos: AVec<[f32; 3], Global>,
}

/// LOD sorting with `pos` (positions by id) and `keys` as temporaries.
fn lod<A: Allocator>(
    keys: &mut AVec<(u32, u32), A>,
    pos: &mut AVec<[f32; 3], A>,
    visible: &[u32],
    query: &Query<(&Id, &Pos)>,
    needs: &Needs,
) -> u64 {
    pos.resize(query.iter().len(), [0.0; 3]);
    for (id, p) in query {
        pos[id.0 as usize] = p.0;
    }
    let sum = lod_sort(keys, visible, pos);
    needs.set(4, len_bytes(keys) + len_bytes(pos));
    sum
}

fn lod_system(
    frame: Frame,
    scratch: TaggedScratch<tags::Lod>,
    frames: Res<FrameMemory>,
    visible: Res<Visible>,
    mut local: Local<LodBuffers>,
    query: Query<(&Id, &Pos)>,
) {
    let needs = &frame.needs;
    let sum = own(|| match *frame.mode {
        Mode::Arena => {
            let list = visible.handle.and_then(|h| frames.get(h)).unwrap_or(&[]);
            let a = &*scratch;
            lod(
                &mut AVec::new_in(a),
                &mut AVec::new_in(a),
                list,
                &query,
                needs,
            )
        }
        Mode::Heap => lod(
            &mut AVec::new(),
            &mut AVec::new(),
            &visible.list,
            &query,
            needs,
        ),
        Mode::LocalVec => {
            let LodBuffers { keys, pos } = &mut *local;
            keys.clear();
            pos.clear();
            let sum = lod(keys, pos, &visible.list, &query, needs);
            frame.keep(2, bytes(keys) + bytes(pos));
            sum
        }
    });
    frame.checksum.add(sum);
}

#[derive(Default)]
struct StreamBuffers {
    voxels: AVec<u8, Global>,
    mask: AVec<u8, Global>,
    quads: AVec<[u8; 6], Global>,
}

/// Streaming with `voxels`, `mask` and `quads` as temporaries.
fn stream<A: Allocator>(
    voxels: &mut AVec<u8, A>,
    mask: &mut AVec<u8, A>,
    quads: &mut AVec<[u8; 6], A>,
    (first, count, batch): (u64, usize, usize),
    needs: &Needs,
) -> u64 {
    let sum = stream_chunks(voxels, mask, quads, first, count, batch);
    needs.set(5, len_bytes(voxels) + len_bytes(mask) + len_bytes(quads));
    sum
}

fn stream_system(
    frame: Frame,
    scratch: TaggedScratch<tags::Streaming>,
    mut local: Local<StreamBuffers>,
) {
    let (count, batch) = if frame.spike() {
        (REGION, REGION)
    } else {
        (CHUNKS_PER_FRAME, 1)
    };
    let work = (frame.tick.0 * REGION as u64, count, batch);
    let needs = &frame.needs;
    let sum = own(|| match *frame.mode {
        Mode::Arena => {
            let a = &*scratch;
            let (mut voxels, mut mask) = (AVec::new_in(a), AVec::new_in(a));
            stream(&mut voxels, &mut mask, &mut AVec::new_in(a), work, needs)
        }
        Mode::Heap => stream(
            &mut AVec::new(),
            &mut AVec::new(),
            &mut AVec::new(),
            work,
            needs,
        ),
        Mode::LocalVec => {
            let StreamBuffers {
                voxels,
                mask,
                quads,
            } = &mut *local;
            quads.clear();
            let sum = stream(voxels, mask, quads, work, needs);
            frame.keep(3, bytes(voxels) + bytes(mask) + bytes(quads));
            sum
        }
    });
    frame.checksum.add(sum);
}

/// The demo's task pools: Bevy's defaults but for a compute pool of exactly 4 threads, so
/// that `par_iter` spreads alike on every machine.
pub fn four_compute_threads() -> TaskPoolOptions {
    let compute = TaskPoolThreadAssignmentPolicy {
        min_threads: 4,
        max_threads: 4,
        percent: 1.0,
        on_thread_spawn: None,
        on_thread_destroy: None,
    };
    TaskPoolOptions {
        compute,
        ..Default::default()
    }
}

/// The app of one run: 4 compute threads, the memory plugin, `entities` entities.
pub fn app(mode: Mode, entities: usize, history_frames: usize) -> App {
    app_on(mode, entities, four_compute_threads(), history_frames)
}

/// The app of one run on the task pools `pools`, its ledger keeping `history_frames`
/// frames (the page's). Bevy's pools are process-wide: the first app of a process makes
/// them, and later apps run on those whatever they ask.
pub fn app_on(mode: Mode, entities: usize, pools: TaskPoolOptions, history_frames: usize) -> App {
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: pools,
    })
    .add_plugins(MemoryPlugin {
        history_frames,
        ..MemoryPlugin::default()
    })
    .insert_resource(mode)
    .init_resource::<Checksum>()
    .init_resource::<Tick>()
    .init_resource::<Visible>()
    .init_resource::<LocalHeld>()
    .init_resource::<Needs>()
    .add_systems(Update, movement)
    // Physics, culling and streaming run in parallel; LOD sorting needs the visible list.
    .add_systems(
        PostUpdate,
        (
            physics_system,
            stream_system,
            cull_system,
            lod_system.after(cull_system),
        ),
    )
    .add_systems(
        Last,
        (|mut tick: ResMut<Tick>| tick.0 += 1).after(MemorySystems::Reset),
    );
    spawn(app.world_mut(), entities);
    app.finish();
    app.cleanup();
    app
}
