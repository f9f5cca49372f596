//! Bevy integration (feature `bevy`, on by default): the memory system in a Bevy 0.20 app.
//!
//! ```standalone_crate
//! use bevy_app::{App, Update};
//! use bevy_ecs::prelude::*;
//! use nebula_memory::bevy::{FrameMemory, MemoryPlugin, Scratch};
//!
//! #[derive(Component)]
//! struct Speed(f32);
//!
//! fn fastest(scratch: Scratch, query: Query<&Speed>) {
//!     // Temporaries of this system run: no heap allocation, gone when it returns.
//!     let mut speeds = allocator_api2::vec::Vec::new_in(&*scratch);
//!     speeds.extend(query.iter().map(|s| s.0));
//!     speeds.sort_by(f32::total_cmp);
//! }
//!
//! let mut app = App::new();
//! app.add_plugins(MemoryPlugin::default()).add_systems(Update, fastest);
//! app.world_mut().spawn(Speed(3.0));
//! app.update(); // the frame ends: every thread's per-frame memory is reset
//! ```
//!
//! - [`Scratch`]: a system parameter with an arena of its own for the run's temporaries.
//! - [`EngineMemory`], [`GameMemory`] (reset with a [`ResetGameArena`] message) and
//!   [`FrameMemory`] (frame N's data through frame N+1, with `FrameHandle`s): the shared
//!   arenas as resources.
//! - [`reset_frame_arenas_system`] in [`MemorySystems::Reset`] (`Last`): every thread's
//!   frame memory reset at the frame's end; [`MemoryStats`] and Bevy diagnostics.
//! - [`MemoryLedger`]: the tag ledger's snapshot at each frame's end, a diagnostic per
//!   top-level tag, and optionally a per-frame CSV.
//! - Heap attribution (with a `TrackingAllocator`): each system's heap on `systems/<name>`.
//!   Exact on a compute pool of any size with [`AttributionLayer`] (Bevy's `trace`
//!   feature, the layer in the subscriber before the systems are made), which also puts
//!   observers and one-shot systems on lines of their own; [`tag_task_pool_threads`] puts
//!   Bevy's pool threads on `tasks/<pool>`.

mod alloc_check;
mod attribution;
mod budget_watch;
mod exactness;
mod exit_report;
mod ledger;
mod plugin;
#[cfg(feature = "remote")]
#[cfg_attr(docsrs, doc(cfg(feature = "remote")))]
pub mod remote;
mod resources;
mod scratch;
mod stats;
mod trace_layer;

pub use alloc_check::{AllocationCheck, AllocationRecord, BLESS_VAR, FrameFigures};
pub use attribution::{SYSTEMS_TAG, SystemLines};
pub use budget_watch::BUDGET_WATCH_FRAMES;
pub use exactness::{TASKS_TAG, tag_task_pool_threads};
pub use exit_report::{ExitReport, REPORT_VAR};
pub use ledger::MemoryLedger;
pub use plugin::{DEFAULT_HISTORY_FRAMES, MemoryPlugin, MemorySystems, reset_frame_arenas_system};
pub use resources::{
    EngineMemory, FRAME_MEMORY_TRIM_AFTER_RESETS, FrameMemory, GameMemory, ResetGameArena,
};
pub use scratch::{
    Scratch, ScratchArenas, ScratchBatches, ScratchFrameStats, ScratchTag, TaggedScratch,
    TaggedScratchArenas,
};
pub use stats::{MemoryBudgets, MemoryStats, PoolUsage, paths};
pub use trace_layer::{AttributionLayer, CRATE_SYSTEMS_TAG, EXECUTOR_TAG, OBSERVERS_TAG, RUNS_TAG};

/// Renamed [`MemoryStats`]: the figures of the whole frame's memory, not of the
/// `FrameMemory` resource (see CHANGELOG, "Names").
#[deprecated(note = "renamed to `MemoryStats`")]
pub type FrameMemoryStats = MemoryStats;

/// Renamed [`ScratchFrameStats`] (see CHANGELOG, "Names").
#[deprecated(note = "renamed to `ScratchFrameStats`")]
pub type ScratchFrame = ScratchFrameStats;
