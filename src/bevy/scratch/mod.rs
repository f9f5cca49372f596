//! `Scratch`: a system parameter that hands a system an arena of its own for temporaries.
//!
//! The arenas belong to the system's parameter, not to a thread: the [`ScratchArenas`]
//! resource (or a [`TaggedScratchArenas<T>`]) holds them, and `get_param` claims a free one
//! on whichever thread the system runs (making one if all are busy). A system runs on one
//! thread at a time, so it needs as many arenas as it has claims alive at once, not one per
//! thread it ever ran on. Dropping the item resets the arena and frees it for the next
//! claim; the resource's frame end (which the plugin runs) trims idle arenas.
//!
//! **A line per system.** `ScratchArenas`' blocks are charged to the running system's own
//! ledger line, `scratch/systems/<name>` (named after its heap line `systems/<name>`, see
//! [`lines`]), its item's and its [`ScratchBatches`]' alike; `scratch/systems`, their
//! parent, is every system's total plus, on its own, the claims made outside any wrapped
//! system (no plugin, a one-shot `run_system_cached`, an observer). The arenas stay one
//! pool, under one rule: **an arena that holds blocks is one line's.** A claim takes a free
//! arena of its own line, else a free one that holds nothing (retagged: nothing charged
//! moves), else makes one; it never takes an arena holding another line's blocks. So
//! every block is charged to the line whose claim took it, from its taking to its return,
//! a reset's kept block included: a line's `held` is what its arenas keep for it between
//! runs, its peak its own runs' doing; no byte is moved, counted twice or lost, and
//! `scratch/systems` is exactly the sum. The price: retained blocks are kept per line (the
//! sum of the systems' needs, not the most the claims alive at once needed); an arena idle
//! for a trim window gives its blocks back and is anyone's again. `TaggedScratch<T>` and a
//! `ScratchArenas` whose config names a tag charge that one tag, whichever system claims.
//!
//! Why this is sound under Bevy's executor:
//! - **Work stealing.** A system blocked in `par_iter` or a task scope runs other systems on
//!   its own thread meanwhile. Those claim *other* arenas (a claim takes only a free one,
//!   by compare-and-swap), so nothing they do touches the suspended system's arena.
//! - **Two `Scratch` parameters in one system** claim two arenas; each frees only its own.
//! - **`mem::forget` of an item** leaves its arena busy and not reset. The resource's frame
//!   end ([`ScratchArenas::end_frame`], through `&mut` on the resource, so no item is alive)
//!   takes such arenas back. Nothing can still borrow one then: everything an item hands
//!   out borrows the item, whose lifetime is the system run; the `&mut` orders the frame
//!   end after the item's thread.
//! - **Lifetime.** An item and a `ScratchBatch` hold their arena's slot by `Arc`, so
//!   one kept past its thread's teardown (or its resource) still owns live memory.
//! - **Other threads.** An item is neither `Send` nor `Sync`, and what it derefs to
//!   (`MemoryArena`) is not `Sync`, so neither the item nor its memory can be captured by a
//!   task or closure that runs on another thread; [`ScratchBatches`] is what `par_iter`
//!   workers use instead, each batch claiming an arena of its own on its thread.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

use allocator_api2::alloc::{AllocError, Allocator};

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParamValidationError;
use bevy_tasks::ComputeTaskPool;

use crate::arena::{ArenaConfig, MemoryArena};
use crate::global::scratch_pool;
use crate::ledger::{self, HeapScope, TagNode};
use crate::per_thread::{
    ScratchBatch, ScratchOwner, Slot, batch_in, claim_held, release, slot_ptr,
};

pub(crate) mod lines;
mod param;

/// The scratch arenas behind [`Scratch`], which any thread may claim; inserted by
/// `MemoryPlugin`. It holds as many arenas as it had claims alive at once: an item's, and
/// a batch's per worker thread once [`Scratch::batches`] was used (whose first call makes
/// one per compute thread up front).
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::{Scratch, ScratchArenas};
///
/// let mut world = World::new();
/// world.insert_resource(ScratchArenas::default());
/// let sum = world
///     .run_system_cached(|scratch: Scratch| {
///         let squares = scratch.alloc_slice_fill_with(10, |i| i * i);
///         squares.iter().sum::<usize>()
///     })
///     .unwrap();
/// assert_eq!(sum, 285);
/// ```
#[derive(Resource)]
pub struct ScratchArenas {
    owner: Arc<ScratchOwner>,
    /// Each system's claims charge its own line under `scratch/systems` (the config named
    /// no tag; see [`lines`]).
    per_system: bool,
}

impl Default for ScratchArenas {
    fn default() -> Self {
        Self::with_config(
            ArenaConfig::default().first_block_default(crate::per_thread::SCRATCH_FIRST_BLOCK),
        )
    }
}

/// Figures of all scratch arenas at a frame's end, from [`ScratchArenas::end_frame`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchFrameStats {
    /// Sum over the arenas of the most each held at once during the frame.
    pub peak_bytes: usize,
    /// Scratch arenas the owner holds (see [`ScratchArenas`] for how many).
    pub arenas: usize,
    /// Bytes of scratch-pool blocks the arenas hold after the reset.
    pub bytes_held: usize,
}

/// Ends `owner`'s frame and returns its figures.
///
/// # Safety
/// No item that claimed one of `owner`'s arenas is alive (see `ScratchOwner::end_frame`).
unsafe fn end_owner_frame(owner: &ScratchOwner) -> ScratchFrameStats {
    // SAFETY: passed on from the caller.
    unsafe { owner.end_frame() };
    let f = owner.figures();
    ScratchFrameStats {
        peak_bytes: f.peak_bytes,
        arenas: f.arenas,
        bytes_held: f.bytes_held,
    }
}

impl ScratchArenas {
    /// Scratch arenas whose blocks follow `config`. Without a tag in `config`, each
    /// system's claims are charged to its own line `scratch/systems/<system>` (the
    /// plugin's wrapping names it; claims outside a wrapped system go to `scratch/systems`
    /// itself: see the module docs); with a tag, every claim is charged to that one tag.
    /// O(1).
    ///
    /// ```
    /// use nebula_memory::{ArenaConfig, bevy::ScratchArenas};
    /// let arenas = ScratchArenas::with_config(ArenaConfig::default().first_block(16 * 1024));
    /// ```
    #[track_caller]
    pub fn with_config(config: ArenaConfig) -> Self {
        config.check_against(scratch_pool());
        let per_system = config.tag.is_none();
        let config = if per_system {
            config.tag(crate::ledger::tags::SCRATCH_SYSTEMS)
        } else {
            config
        };
        ScratchArenas {
            owner: ScratchOwner::shared(config),
            per_system,
        }
    }

    /// The line a claim made now is for: the running system's, or `scratch/systems`
    /// (`None`: the config's one tag, any arena).
    fn line_now(&self) -> Option<&'static TagNode> {
        self.per_system
            .then(|| lines::line_of(ledger::current_scope()))
    }

    /// Ends the frame for these scratch arenas and returns the frame's figures. Arenas
    /// are reset whenever an item is dropped, so there is nothing to free here; the
    /// arena of an item that was `mem::forget`-ed is taken back, and every 8 frames free
    /// arenas that were idle or held more than twice their need give their memory back.
    /// `&mut self` proves no [`Scratch`] item is alive. O(arenas).
    ///
    /// ```
    /// let mut arenas = nebula_memory::bevy::ScratchArenas::default();
    /// assert_eq!(arenas.end_frame().peak_bytes, 0);
    /// ```
    pub fn end_frame(&mut self) -> ScratchFrameStats {
        // SAFETY: `&mut self`: every item borrows the resource, so none is alive.
        unsafe { end_owner_frame(&self.owner) }
    }
}

/// A system parameter: scratch memory for this system run, from an arena no other system
/// touches while the item lives. It derefs to [`MemoryArena`], so everything an arena does
/// works (`scratch.alloc_slice(..)`, `Vec::new_in(&*scratch)`, `hashbrown::HashMap::new_in(
/// &*scratch)`). What it allocated is given back when the item is dropped (the end of the
/// system run): the drop resets the arena. `Vec::new_in(&scratch)` works as well as
/// `Vec::new_in(&*scratch)`; either way the collection borrows the item, so it cannot
/// outlive the reset.
///
/// Needs the [`ScratchArenas`] resource (`MemoryPlugin` inserts it).
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::bevy::{Scratch, ScratchArenas};
///
/// #[derive(Component)]
/// struct Pos(f32, f32);
///
/// fn nearest_to_origin(scratch: Scratch, query: Query<&Pos>) -> f32 {
///     let mut dists = allocator_api2::vec::Vec::new_in(&*scratch);
///     dists.extend(query.iter().map(|p| p.0 * p.0 + p.1 * p.1));
///     dists.iter().cloned().fold(f32::MAX, f32::min)
/// }
///
/// let mut world = World::new();
/// world.insert_resource(ScratchArenas::default());
/// world.spawn(Pos(3.0, 4.0));
/// world.spawn(Pos(1.0, 0.0));
/// assert_eq!(world.run_system_cached(nearest_to_origin).unwrap(), 1.0);
/// ```
///
/// The item is `!Send + !Sync`: its arena is its thread's, so neither the item nor its
/// memory can reach a closure that runs on another thread, be it a spawned thread or the
/// body of `par_iter` (which runs on the compute pool).
///
/// ```compile_fail,E0277
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::Scratch;
///
/// fn system(scratch: Scratch) {
///     std::thread::scope(|s| {
///         s.spawn(|| scratch.alloc_val(1u8)); // `*const ()` cannot be shared between threads safely
///     });
/// }
/// let _ = bevy_ecs::system::IntoSystem::into_system(system);
/// ```
///
/// ```compile_fail,E0277
/// use bevy_ecs::prelude::*;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::Scratch;
///
/// #[derive(Component)]
/// struct Item(u32);
///
/// fn system(scratch: Scratch, items: Query<&Item>) {
///     items.par_iter().for_each(|item| {
///         scratch.alloc_val(item.0); // `*const ()` cannot be shared between threads safely
///     });
/// }
/// let _ = IntoSystem::into_system(system);
/// ```
pub struct Scratch<'w> {
    claim: Claim,
    /// The resource's owner (borrowed for the run), for [`Scratch::batches`].
    owner: &'w Arc<ScratchOwner>,
    /// The ledger line the item's arena is charged to, for its batches too.
    line: Option<&'static TagNode>,
}

/// Scratch batches of a system's arenas, for work it spreads over threads: `Send`, `Sync`
/// and `Copy`, so a `par_iter` closure takes it along; each [`batch`](Self::batch) claims
/// an arena of the system's parameter (its tag, its config) on the thread that asks, and
/// its scopes reset it (see [`ScratchBatch`]). Borrowed for the system run: from
/// [`Scratch::batches`] or [`TaggedScratch::batches`].
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::{ScratchTag, TaggedScratch};
///
/// #[derive(Component)]
/// struct Body(f32);
/// struct Physics;
/// impl ScratchTag for Physics {
///     const TAG: &'static str = "doc/physics";
/// }
///
/// fn step(scratch: TaggedScratch<Physics>, bodies: Query<&Body>) {
///     let batches = scratch.batches();
///     bodies.par_iter().for_each_init(
///         || batches.batch(), // once per batch of entities, on the thread that runs it
///         |batch, body| {
///             batch.scope(|s| {
///                 let contacts = s.alloc_slice(8, body.0); // charged to doc/physics
///                 assert_eq!(contacts.len(), 8);
///             });
///         },
///     );
/// }
///
/// // (An app's TaskPoolPlugin makes the compute pool; a bare `World` needs one.)
/// bevy_tasks::ComputeTaskPool::get_or_init(bevy_tasks::TaskPool::default);
/// let mut world = World::new();
/// world.spawn_batch((0..100).map(|i| Body(i as f32)));
/// world.run_system_cached(step).unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct ScratchBatches<'w> {
    owner: &'w Arc<ScratchOwner>,
    /// The heap scope of the system that asked for the batches: each batch's thread is in
    /// it while the batch lives, so a `par_iter` body's heap is charged to the system.
    scope: HeapScope,
    /// The ledger line of the item they came from: the batches' arenas are charged there.
    line: Option<&'static TagNode>,
}

impl<'w> ScratchBatches<'w> {
    /// The batches of `owner`, which first holds enough arenas for a batch on every thread
    /// of the compute pool at once (and the item, and the thread running the system, which
    /// takes batches too while it waits): after the first frames, claiming batches takes no
    /// heap allocation. A claim past that (a thread taking a second batch while it waits
    /// on the first, or finding the free arenas holding other lines' blocks) makes one
    /// more arena, the line's from then on.
    pub(super) fn of(owner: &'w Arc<ScratchOwner>, line: Option<&'static TagNode>) -> Self {
        let threads = ComputeTaskPool::try_get().map_or(1, |pool| pool.thread_num());
        owner.reserve_shared(threads.saturating_add(2));
        ScratchBatches {
            owner,
            scope: ledger::current_scope(),
            line,
        }
    }

    /// A batch on an arena of the system's parameter, claimed on the calling thread and
    /// charged to the system's line. O(arenas of the parameter).
    pub fn batch(&self) -> ScratchBatch {
        batch_in(self.owner, Some(self.scope), self.line)
    }
}

impl std::fmt::Debug for ScratchBatches<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchBatches").finish_non_exhaustive()
    }
}

impl Scratch<'_> {
    /// Scratch batches of this parameter's arenas, for work spread over threads (a
    /// `par_iter` body cannot use the item itself: it stays on its thread). O(1) after the
    /// system's first run, which makes an arena per compute thread.
    ///
    /// ```
    /// use bevy_ecs::prelude::*;
    /// use nebula_memory::Arena;
    /// use nebula_memory::bevy::{Scratch, ScratchArenas};
    ///
    /// fn sum_per_item(scratch: Scratch, items: Query<&Name>) {
    ///     let batches = scratch.batches();
    ///     items.par_iter().for_each_init(|| batches.batch(), |batch, name| {
    ///         batch.scope(|s| s.alloc_str(name.as_str()).len());
    ///     });
    /// }
    /// bevy_tasks::ComputeTaskPool::get_or_init(bevy_tasks::TaskPool::default);
    /// let mut world = World::new();
    /// world.insert_resource(ScratchArenas::default());
    /// world.spawn(Name::new("a"));
    /// world.run_system_cached(sum_per_item).unwrap();
    /// ```
    pub fn batches(&self) -> ScratchBatches<'_> {
        ScratchBatches::of(self.owner, self.line)
    }
}

/// A claimed arena of a thread's scratch stack, held busy until the drop resets and frees
/// it, and held alive by a reference count of its own (an item kept in a thread-local, or
/// got from a leaked world, may outlive its thread's stack).
struct Claim {
    slot: Arc<Slot>,
    _stays: ScratchStaysOnItsThread,
}

/// What makes a `Scratch` item neither `Send` nor `Sync`: its arena is one of its thread's,
/// bumped without atomics. A compiler error naming this type means the item (or memory it
/// handed out) was captured by a closure that may run on another thread, such as a
/// `par_iter` body: take [`Scratch::batches`] (or [`TaggedScratch::batches`]) there
/// instead, and a batch per thread with `for_each_init`.
struct ScratchStaysOnItsThread(PhantomData<*const ()>);

impl Claim {
    /// Claims an arena of `owner` on this thread for system parameter `P`, charged to
    /// `line` (`None`: the owner's tag).
    fn new<P>(
        owner: &Arc<ScratchOwner>,
        line: Option<&'static TagNode>,
    ) -> Result<Claim, SystemParamValidationError> {
        let slot = claim_held(owner, true, line).ok_or_else(|| {
            SystemParamValidationError::invalid::<P>(
                "this thread's storage is being torn down: no scratch arena for it",
            )
        })?;
        Ok(Claim {
            slot,
            _stays: ScratchStaysOnItsThread(PhantomData),
        })
    }

    #[inline(always)]
    fn arena(&self) -> &MemoryArena<'static> {
        // SAFETY: the claim holds the slot busy, so nothing else uses the arena, and alive
        // (its `Arc`).
        unsafe { self.slot.shared_arena() }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // SAFETY: claimed on this thread (the claim is not `Send`), held busy and alive
        // until now. Everything allocated through the item borrows it, so none of it is
        // alive.
        unsafe { release(slot_ptr(&self.slot)) }
    }
}

impl Deref for Scratch<'_> {
    type Target = MemoryArena<'static>;

    #[inline(always)]
    fn deref(&self) -> &MemoryArena<'static> {
        self.claim.arena()
    }
}

/// `Allocator` for a reference to a scratch item, forwarded to the arena it derefs to:
/// `Vec::new_in(&scratch)` as well as `Vec::new_in(&*scratch)`.
macro_rules! forward_allocator {
    ([$($generics:tt)*] $item:ty) => {
        // SAFETY: every call is forwarded to the `&MemoryArena` the item derefs to, whose
        // `Allocator` impl is sound. Memory handed out stays valid while the borrow of the
        // item does: the item's drop (the arena's reset) comes after every borrow of it.
        unsafe impl<$($generics)*> Allocator for &$item {
            #[inline(always)]
            fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                (&***self).allocate(layout)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                // SAFETY: forwarded from the caller's contract.
                unsafe { (&***self).deallocate(ptr, layout) }
            }

            #[inline]
            unsafe fn grow(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                // SAFETY: forwarded from the caller's contract.
                unsafe { (&***self).grow(ptr, old, new) }
            }

            #[inline]
            unsafe fn shrink(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                // SAFETY: forwarded from the caller's contract.
                unsafe { (&***self).shrink(ptr, old, new) }
            }
        }
    };
}

forward_allocator!([] Scratch<'_>);

mod tagged;
pub(crate) use tagged::TaggedFrameEnds;
pub use tagged::{ScratchTag, TaggedScratch, TaggedScratchArenas};

impl std::fmt::Debug for Scratch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").field("arena", &**self).finish()
    }
}
