//! The arenas a system reaches as resources: engine lifetime, level lifetime, and frame
//! data that lives one frame longer.

use std::ops::Deref;

use bevy_ecs::prelude::*;

use crate::arena::ArenaConfig;
use crate::global::scratch_pool;
use crate::shared::DoubleBufferedArena;
use crate::shared::{GameArena, GameArenaGuard, SharedArena, engine_arena, game_arena};

/// The engine's shared arena ([`engine_arena`]) as a resource: allocate from any system,
/// on any thread; never reset, so allocations live for the process. Derefs to the
/// [`SharedArena`].
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::EngineMemory;
///
/// let mut world = World::new();
/// world.insert_resource(EngineMemory::default());
/// world.run_system_cached(|engine: Res<EngineMemory>| {
///     let title: &'static str = engine.arena().alloc_str("nebula");
///     assert_eq!(title, "nebula");
/// }).unwrap();
/// ```
#[derive(Resource)]
pub struct EngineMemory {
    arena: &'static SharedArena<'static>,
}

impl Default for EngineMemory {
    fn default() -> Self {
        EngineMemory {
            arena: engine_arena(),
        }
    }
}

impl EngineMemory {
    /// The engine arena itself, for allocations that outlive the system (`&'static`). O(1).
    ///
    /// ```
    /// let engine = nebula_memory::bevy::EngineMemory::default();
    /// assert_eq!(engine.arena().pool().name(), "engine");
    /// ```
    pub fn arena(&self) -> &'static SharedArena<'static> {
        self.arena
    }
}

impl Deref for EngineMemory {
    type Target = SharedArena<'static>;
    fn deref(&self) -> &SharedArena<'static> {
        self.arena
    }
}

/// The level arena ([`game_arena`]) as a resource: systems allocate level data through
/// [`read`](GameMemory::read); send a [`ResetGameArena`] message to free it all on level
/// change. `MemoryPlugin` resets it in `Last` with exclusive access to this resource, so no
/// system holds a guard then.
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::GameMemory;
///
/// let mut world = World::new();
/// world.insert_resource(GameMemory::default());
/// world.run_system_cached(|game: Res<GameMemory>| {
///     let level = game.read();
///     let spawns = level.alloc_slice_copy(&[(0.0f32, 1.0f32), (5.0, 2.0)]);
///     assert_eq!(spawns.len(), 2);
/// }).unwrap();
/// ```
#[derive(Resource)]
pub struct GameMemory {
    arena: &'static GameArena,
    /// A reset was asked for but a guard outside the schedule was alive: retried next frame.
    pending: bool,
}

impl Default for GameMemory {
    fn default() -> Self {
        GameMemory {
            arena: game_arena(),
            pending: false,
        }
    }
}

impl GameMemory {
    /// A guard to allocate through (see [`GameArena::read`]); allocations borrow it. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let game = nebula_memory::bevy::GameMemory::default();
    /// let hp = *game.read().alloc_val(100u32);
    /// assert_eq!(hp, 100);
    /// ```
    pub fn read(&self) -> GameArenaGuard<'_> {
        self.arena.read()
    }

    /// The process-wide level arena. O(1).
    ///
    /// ```
    /// let game = nebula_memory::bevy::GameMemory::default();
    /// assert_eq!(game.arena().stats().pool, "game");
    /// ```
    pub fn arena(&self) -> &'static GameArena {
        self.arena
    }

    /// Resets the level arena now if no guard is alive, else on a later call (a WARN event
    /// says so). Returns whether it was reset. O(threads + blocks).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut game = nebula_memory::bevy::GameMemory::default();
    /// game.read().alloc_slice(100, 0u8);
    /// assert!(game.reset_or_postpone());
    /// ```
    pub fn reset_or_postpone(&mut self) -> bool {
        self.pending = !self.arena.try_reset();
        if self.pending {
            tracing::warn!(
                "game arena reset postponed: a guard from outside the schedule is alive"
            );
        }
        !self.pending
    }
}

/// A message asking `MemoryPlugin` to reset the level arena at the end of this frame
/// (level change). Write it with `MessageWriter<ResetGameArena>`.
#[derive(Message, Clone, Copy, Debug, Default)]
pub struct ResetGameArena;

/// Resets the level arena when a [`ResetGameArena`] message came in (or a reset is still
/// pending). `ResMut<GameMemory>` keeps every system that holds a guard away meanwhile.
pub(crate) fn reset_game_arena_on_request(
    mut requests: MessageReader<ResetGameArena>,
    mut game: ResMut<GameMemory>,
) {
    let asked = requests.read().count() > 0;
    if asked || game.pending {
        game.reset_or_postpone();
    }
}

/// Frame data that lives one frame longer: a [`DoubleBufferedArena`] on the scratch pool
/// as a resource. Store a value with `store` and keep the [`FrameHandle`](crate::FrameHandle)
/// in a component or a resource; any later system this frame or the next reads it with
/// `get`. `MemoryPlugin` swaps the buffers at the frame's end.
///
/// Each buffer is reset every other frame, and gives a spike's memory back after
/// [`FRAME_MEMORY_TRIM_AFTER_RESETS`] resets that needed less than half of it (so within
/// about 60 frames), not the 120 resets of [`ArenaConfig::default`].
///
/// ```
/// use bevy_ecs::prelude::*;
/// use nebula_memory::FrameHandle;
/// use nebula_memory::bevy::FrameMemory;
///
/// #[derive(Resource)]
/// struct Visible(FrameHandle<[u32]>);
///
/// let mut world = World::new();
/// world.insert_resource(FrameMemory::default());
/// world.run_system_cached(|frames: Res<FrameMemory>, mut commands: Commands| {
///     commands.insert_resource(Visible(frames.store_slice(&[3, 1, 4])));
/// }).unwrap();
/// world.run_system_cached(|frames: Res<FrameMemory>, visible: Res<Visible>| {
///     assert_eq!(frames.get(visible.0), Some(&[3, 1, 4][..]));
/// }).unwrap();
/// ```
#[derive(Resource)]
pub struct FrameMemory {
    frames: DoubleBufferedArena<'static>,
}

/// Resets in a row that a [`FrameMemory`] buffer must be more than twice too large before
/// it is swapped for a smaller one: 30, about 60 frames, since each buffer is reset every
/// other frame.
pub const FRAME_MEMORY_TRIM_AFTER_RESETS: u32 = 30;

impl Default for FrameMemory {
    fn default() -> Self {
        Self::with_config(Self::default_config())
    }
}

impl FrameMemory {
    /// The default config: 4 KiB first blocks (one per thread that stores, in each of
    /// the two buffers), trimmed after [`FRAME_MEMORY_TRIM_AFTER_RESETS`] oversized resets,
    /// charged to the ledger tag `scratch/frame_memory`. O(1).
    ///
    /// ```
    /// let config = nebula_memory::bevy::FrameMemory::default_config();
    /// assert_eq!(config.first_block, 4 * 1024);
    /// ```
    pub fn default_config() -> ArenaConfig {
        ArenaConfig::default()
            .first_block_default(crate::per_thread::SCRATCH_FIRST_BLOCK)
            .trim_after_resets(FRAME_MEMORY_TRIM_AFTER_RESETS)
            .tag(crate::ledger::tags::FRAME_MEMORY)
    }

    /// Frame memory whose buffers follow `config` (without a tag in it, blocks are charged
    /// to `scratch/frame_memory`). A thread's part of a buffer that stored nothing at 2 of
    /// that buffer's resets in a row gives all its memory back. O(1).
    ///
    /// # Panics
    /// As [`SharedArena::with_config`](crate::SharedArena::with_config): a
    /// `first_block` the scratch pool can never serve.
    #[track_caller]
    pub fn with_config(config: ArenaConfig) -> Self {
        let config = if config.tag.is_none() {
            config.tag(crate::ledger::tags::FRAME_MEMORY)
        } else {
            config
        };
        FrameMemory {
            frames: DoubleBufferedArena::with_config(scratch_pool(), config),
        }
    }

    /// Ends the frame (see [`DoubleBufferedArena::swap`]); returns the bytes the frame
    /// stored. O(threads + blocks).
    ///
    /// ```
    /// let mut frames = nebula_memory::bevy::FrameMemory::default();
    /// frames.store(1u64);
    /// assert_eq!(frames.end_frame(), 8);
    /// ```
    pub fn end_frame(&mut self) -> usize {
        let used = self.end_frame_quietly();
        crate::ledger::emit_pending_warnings();
        used
    }

    /// [`end_frame`](Self::end_frame) without telling budget warnings (the plugin's frame
    /// end tells them once it is complete).
    pub(crate) fn end_frame_quietly(&mut self) -> usize {
        let used = self.frames.current().bytes_used();
        self.frames.swap_quietly();
        used
    }
}

impl Deref for FrameMemory {
    type Target = DoubleBufferedArena<'static>;
    fn deref(&self) -> &DoubleBufferedArena<'static> {
        &self.frames
    }
}
