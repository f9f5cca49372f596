//! `TaggedScratch<T>`: a `Scratch` whose arenas are an owner of their own, charged to the
//! ledger tag `T::TAG` whichever system claims them (no per-system lines: the tag is the
//! line), and the frame ends that reach those owners.

use std::alloc::Layout;
use std::any::TypeId;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

use allocator_api2::alloc::{AllocError, Allocator};
use bevy_ecs::prelude::*;

use super::{Claim, ScratchBatches, ScratchFrameStats, end_owner_frame};
use crate::arena::{ArenaConfig, MemoryArena};
use crate::global::scratch_pool;
use crate::per_thread::ScratchOwner;

/// Names the ledger tag of a [`TaggedScratch`] parameter's arenas.
///
/// ```
/// struct Meshing;
/// impl nebula_memory::bevy::ScratchTag for Meshing {
///     const TAG: &'static str = "render/meshing";
/// }
/// ```
pub trait ScratchTag: Send + Sync + 'static {
    /// A `/`-separated ledger path (see [`ArenaConfig::tag`]).
    const TAG: &'static str;
}

/// The scratch arenas behind [`TaggedScratch<T>`]: an owner of scratch arenas of its
/// own, which any thread may claim, whose blocks are charged to `T::TAG`. The parameter
/// inserts it the first time a system uses it, with the
/// [`ScratchArenas`](super::ScratchArenas) config if there is one; an app may insert one of
/// its own config first.
#[derive(Resource)]
pub struct TaggedScratchArenas<T: ScratchTag> {
    pub(super) owner: Arc<ScratchOwner>,
    _tag: PhantomData<fn() -> T>,
}

impl<T: ScratchTag> TaggedScratchArenas<T> {
    /// Arenas whose blocks follow `config`, charged to `T::TAG`. O(1).
    ///
    /// # Panics
    /// As [`ScratchArenas::with_config`](super::ScratchArenas::with_config), or if `T::TAG`
    /// is not a valid tag.
    #[track_caller]
    pub fn with_config(config: ArenaConfig) -> Self {
        config.check_against(scratch_pool());
        TaggedScratchArenas {
            owner: ScratchOwner::shared(config.tag(T::TAG)),
            _tag: PhantomData,
        }
    }
}

impl<T: ScratchTag> TaggedScratchArenas<T> {
    /// Ends the frame for these arenas (see
    /// [`ScratchArenas::end_frame`](super::ScratchArenas::end_frame)): the arena of an item
    /// that was `mem::forget`-ed is taken back, idle ones trimmed. `&mut self` proves no
    /// [`TaggedScratch<T>`] item of these arenas is alive.
    /// [`reset_frame_arenas_system`](crate::bevy::reset_frame_arenas_system) calls it for every
    /// `T` a system of the world uses, whoever inserted the resource. O(arenas).
    ///
    /// ```
    /// struct Ai;
    /// impl nebula_memory::bevy::ScratchTag for Ai {
    ///     const TAG: &'static str = "doc/ai";
    /// }
    /// let mut arenas = nebula_memory::bevy::TaggedScratchArenas::<Ai>::with_config(
    ///     nebula_memory::ArenaConfig::default(),
    /// );
    /// assert_eq!(arenas.end_frame().arenas, 0);
    /// ```
    pub fn end_frame(&mut self) -> ScratchFrameStats {
        // SAFETY: `&mut self`: every item borrows the resource (through its world), so
        // none is alive.
        unsafe { end_owner_frame(&self.owner) }
    }
}

/// The frame ends of a world's [`TaggedScratchArenas`]: one function per tag type a
/// system of the world uses, registered by the parameter's `init_state`. Each reaches its
/// resource through the world it is given, so exclusive access to that world is the proof
/// that no item of it is alive; a resource moved to another world is that world's to end.
#[derive(Resource, Default)]
pub(crate) struct TaggedFrameEnds(Vec<(TypeId, FrameEnd)>);

/// Ends the frame of one tag type's arenas in the world it is given.
type FrameEnd = fn(&mut World);

impl TaggedFrameEnds {
    /// Registers the frame end of `TaggedScratchArenas<T>` (once per `T`).
    pub(super) fn register<T: ScratchTag>(&mut self) {
        let id = TypeId::of::<T>();
        if !self.0.iter().any(|(t, _)| *t == id) {
            self.0.push((id, end_tagged_frame::<T>));
        }
    }

    /// Ends the frame of every registered tag's arenas in `world` (those present).
    /// Allocates nothing.
    pub(crate) fn end_frames(world: &mut World) {
        if !world.contains_resource::<TaggedFrameEnds>() {
            return;
        }
        world.resource_scope(|world, ends: Mut<TaggedFrameEnds>| {
            for &(_, end) in &ends.0 {
                end(world);
            }
        });
    }
}

fn end_tagged_frame<T: ScratchTag>(world: &mut World) {
    if let Some(mut arenas) = world.get_resource_mut::<TaggedScratchArenas<T>>() {
        arenas.end_frame();
    }
}

/// A [`Scratch`](super::Scratch) whose arenas charge the ledger tag `T::TAG` instead of
/// the system's `scratch/systems/<name>`, so that scratch use shows on a line the app
/// names (shared by every system using `T`). Its arenas are its own (a block is never
/// shared by two tags, so every byte is charged once); everything else is as for
/// [`Scratch`](super::Scratch). Needs no resource: the first system that uses it inserts
/// [`TaggedScratchArenas<T>`].
///
/// ```standalone_crate
/// use bevy_app::{App, Update};
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, ScratchTag, TaggedScratch};
///
/// struct Meshing;
/// impl ScratchTag for Meshing {
///     const TAG: &'static str = "render/meshing";
/// }
///
/// fn mesh(scratch: TaggedScratch<Meshing>) {
///     let quads = scratch.alloc_slice(10_000, [0f32; 4]);
///     assert_eq!(quads.len(), 10_000);
/// }
///
/// let mut app = App::new();
/// app.add_plugins(MemoryPlugin::default()).add_systems(Update, mesh);
/// app.update();
/// let ledger = app.world().resource::<MemoryLedger>();
/// assert!(ledger.tag("render/meshing").unwrap().held >= 160_000);
/// ```
pub struct TaggedScratch<'w, T: ScratchTag> {
    pub(super) claim: Claim,
    /// The resource's owner (borrowed for the run), for [`TaggedScratch::batches`].
    pub(super) owner: &'w Arc<ScratchOwner>,
    pub(super) _tag: PhantomData<fn() -> T>,
}

impl<T: ScratchTag> TaggedScratch<'_, T> {
    /// Scratch batches of this parameter's arenas, charged to `T::TAG`, for work spread
    /// over threads (see [`ScratchBatches`]). O(1) after the system's first run, which
    /// makes an arena per compute thread.
    pub fn batches(&self) -> ScratchBatches<'_> {
        ScratchBatches::of(self.owner, None)
    }
}

impl<T: ScratchTag> Deref for TaggedScratch<'_, T> {
    type Target = MemoryArena<'static>;

    #[inline(always)]
    fn deref(&self) -> &MemoryArena<'static> {
        self.claim.arena()
    }
}

forward_allocator!([T: ScratchTag] TaggedScratch<'_, T>);

impl<T: ScratchTag> std::fmt::Debug for TaggedScratch<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggedScratch")
            .field("tag", &T::TAG)
            .field("arena", &**self)
            .finish()
    }
}
