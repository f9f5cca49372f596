//! `MemoryPlugin` and the frame end.
//!
//! The plugin inserts the resources (`ScratchArenas`, `EngineMemory`, `GameMemory`,
//! `FrameMemory`, `MemoryStats`, `MemoryBudgets`, `MemoryLedger`), registers the
//! diagnostics, wraps the systems for heap attribution (`attribution`), and adds
//! [`reset_frame_arenas_system`] to `Last` in [`MemorySystems::Reset`]. That system is
//! exclusive: it ends the scratch owners' frames (taking back the arenas of forgotten
//! items, trimming idle ones every 8 frames), swaps `FrameMemory` (whose buffers trim after
//! 30 oversized resets, about 60 frames), ends the thread arenas' frame, runs
//! `maintain_global_pools` and records `MemoryStats`. It is a safe `fn(&mut World)` that
//! relies on nothing but its `&mut World`; its parts run quietly and the budget warnings
//! are told once, at its end.

use std::path::PathBuf;

use bevy_app::{App, First, Last, Plugin};
use bevy_ecs::prelude::*;

use super::attribution::{
    AttributionConfig, SystemLines, attribute_systems, record_added_observer, record_observers,
};
use super::budget_watch::{BudgetWatch, watch_budgets};
use super::exactness::{Exactness, check_exactness};
use super::exit_report::{ExitReport, report_on_exit};
use super::ledger::{MemoryLedger, record_ledger_frame};
use super::resources::{
    EngineMemory, FrameMemory, GameMemory, ResetGameArena, reset_game_arena_on_request,
};
use super::scratch::{ScratchArenas, TaggedFrameEnds};
use super::stats::{
    FrameFigures, MemoryBudgets, MemoryStats, publish_memory_diagnostics, register_diagnostics,
};
use crate::arena::ArenaConfig;
use crate::error::PoolError;
use crate::global::{GlobalPoolConfig, configure_global_pools, global_pool_config};
use crate::ledger::{self, Budget};
use crate::maintain::maintain_global_pools;
use crate::per_thread::{
    DEFAULT_THREAD_ARENA_CAPACITY, SCRATCH_FIRST_BLOCK, all_thread_arenas_stats,
    end_thread_arena_frame, set_thread_arena_capacity,
};

/// The frames of every ledger line `MemoryLedger` keeps by default
/// (`MemoryPlugin::history_frames`): ten seconds at 60 frames a second.
///
/// ```
/// use nebula_memory::bevy::{DEFAULT_HISTORY_FRAMES, MemoryPlugin};
/// assert_eq!(MemoryPlugin::default().history_frames, DEFAULT_HISTORY_FRAMES);
/// ```
pub const DEFAULT_HISTORY_FRAMES: usize = 600;

/// The memory system in a Bevy app.
///
/// - Sizes the three global pools (before anything uses them) and the per-thread frame
///   arenas.
/// - Inserts the resources: [`ScratchArenas`] (behind the [`Scratch`](super::Scratch)
///   parameter), [`EngineMemory`], [`GameMemory`], [`FrameMemory`], [`MemoryStats`]
///   and [`MemoryBudgets`]; registers the [`ResetGameArena`] message and the memory
///   diagnostics.
/// - Sets the ledger's tag budgets (`tag_budgets`) and inserts [`MemoryLedger`], the
///   ledger's snapshot at each frame's end (written to `ledger_csv` if set).
/// - Adds to `Last`, in [`MemorySystems::Reset`]: the level-arena reset on request, then
///   [`reset_frame_arenas_system`], then the ledger's frame end, then the diagnostics
///   (one per top-level ledger tag among them).
///
/// ```standalone_crate
/// use nebula_memory::Arena;
/// use bevy_app::App;
/// use nebula_memory::bevy::{MemoryStats, MemoryPlugin, Scratch};
///
/// let mut app = App::new();
/// app.add_plugins(MemoryPlugin::default())
///     .add_systems(bevy_app::Update, |scratch: Scratch| {
///         let temp = scratch.alloc_slice(1000, 0u32);
///         assert_eq!(temp.len(), 1000);
///     });
/// app.update();
/// assert_eq!(app.world().resource::<MemoryStats>().scratch_bytes, 4000);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryPlugin {
    /// Sizes of the engine, game and scratch pools, or `None` (the default) to keep the
    /// sizes in force. Sizes are applied when the plugin is built, so the app must be
    /// built before anything touches a global pool: if a pool already exists with another
    /// size, building the plugin panics, naming the pool, the size in force and the fix.
    pub pools: Option<GlobalPoolConfig>,
    /// Capacity of each thread arena (`thread_arena_alloc`).
    pub thread_arena_capacity: usize,
    /// Block sizing and trimming of the scratch arenas behind `Scratch` and
    /// `TaggedScratch` (default: 4 KiB first blocks,
    /// [`SCRATCH_FIRST_BLOCK`](crate::SCRATCH_FIRST_BLOCK)).
    pub scratch: ArenaConfig,
    /// Block sizing and trimming of [`FrameMemory`] (default
    /// [`FrameMemory::default_config`]).
    pub frame_memory: ArenaConfig,
    /// Per-frame budgets: a WARN event when a figure passes 90% of its budget.
    pub budgets: MemoryBudgets,
    /// Debug builds: frames that blocks given back stay inaccessible (see
    /// [`MemoryPool::set_quarantine`](crate::MemoryPool::set_quarantine)), so a stale
    /// pointer into a freed block faults. `0` (the default) turns it off; release builds
    /// ignore it.
    pub quarantine_frames: u32,
    /// Ledger budgets per tag, set when the plugin is built (see
    /// [`ledger::set_budget`](crate::ledger::set_budget)).
    pub tag_budgets: Vec<(&'static str, Budget)>,
    /// A file to write the ledger's rows to each frame (one per tag, see
    /// [`LedgerSnapshot::write_csv_rows`](crate::ledger::LedgerSnapshot::write_csv_rows)),
    /// or `None`. Building the plugin panics if the file cannot be created.
    pub ledger_csv: Option<PathBuf>,
    /// Charge each system's heap allocations to the ledger tag `systems/<name>` (default
    /// `true`): every system of the app runs inside a [`ledger::scope`](crate::ledger::scope)
    /// of its own. Counts only with a [`TrackingAllocator`](crate::TrackingAllocator) as
    /// the global allocator; costs two thread-local writes per system run.
    pub attribute_systems: bool,
    /// Whether systems of the same name get a line each (`<name> #2`, the default) or
    /// share one.
    pub system_lines: SystemLines,
    /// Ledger budgets per system, by the system's full type name: see
    /// [`budget_for`](MemoryPlugin::budget_for), which fills it.
    pub system_budgets: Vec<(String, Budget)>,
    /// Where to write the ledger's table, or its memory page (a path ending in `.html`),
    /// when the app exits (default: nowhere). For a program that only calls `App::run`,
    /// which takes the app. The environment variable `NEBULA_MEMORY_REPORT=<path>`, read
    /// when the plugin is built, sets it without a change of code
    /// ([`REPORT_VAR`](super::REPORT_VAR)).
    pub exit_report: ExitReport,
    /// Frames of every ledger line that `MemoryLedger` keeps (its
    /// [`history`](super::MemoryLedger::history), what the memory page and the remote
    /// methods show): 40 bytes a line a frame, taken when a line first appears (the
    /// default, 600 frames, ten seconds at 60 frames a second: 24 KB a line, 4.8 MB for 200
    /// lines); 0 keeps none. At most [`MAX_HISTORY_FRAMES`](crate::ledger::MAX_HISTORY_FRAMES):
    /// building the plugin panics above it.
    pub history_frames: usize,
    /// The tag the app's system lines go under (`<tag>/systems/<name>`), or `None` for the
    /// top (`systems/<name>`, the default): two apps in one process (tests run in
    /// parallel) keep their figures apart. [`isolated`](MemoryPlugin::isolated) picks one.
    pub lines_under: Option<&'static str>,
}

impl MemoryPlugin {
    /// The default plugin with its app's system lines under a tag of their own, `apps/<n>`
    /// (`n` counts the isolated plugins made in the process): what a test that checks an
    /// app's figures ([`AllocationCheck`](super::AllocationCheck)) uses, so that other
    /// tests' apps running at the same time, with systems of the same names, do not count
    /// toward its lines.
    ///
    /// ```
    /// use nebula_memory::bevy::MemoryPlugin;
    /// let a = MemoryPlugin::isolated();
    /// let b = MemoryPlugin::isolated();
    /// assert_ne!(a.lines_under, b.lines_under);
    /// ```
    pub fn isolated() -> Self {
        static APPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = APPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The name lives for the process, kept by the ledger's registry (made now).
        let under = crate::ledger::node_named(&format!("apps/{n}")).path;
        MemoryPlugin {
            lines_under: Some(under),
            ..MemoryPlugin::default()
        }
    }

    /// Sets `budget` on the ledger line of every system made from `system` (a function or
    /// closure): named by the function, not by a typed-out tag. Like a tag budget, one that
    /// names no system of the app is reported once (a WARN after
    /// [`BUDGET_WATCH_FRAMES`](super::BUDGET_WATCH_FRAMES) frames). Needs
    /// `attribute_systems`.
    ///
    /// ```
    /// use nebula_memory::bevy::MemoryPlugin;
    /// use nebula_memory::ledger::Budget;
    ///
    /// fn physics_system() {}
    /// let plugin = MemoryPlugin::default().budget_for(physics_system, Budget::Warn(1 << 20));
    /// assert_eq!(plugin.system_budgets.len(), 1);
    /// assert!(plugin.system_budgets[0].0.ends_with("physics_system"));
    /// ```
    pub fn budget_for<M>(mut self, system: impl IntoSystem<(), (), M>, budget: Budget) -> Self {
        let name = IntoSystem::into_system(system).name().to_string();
        self.system_budgets.push((name, budget));
        self
    }
}

impl Default for MemoryPlugin {
    fn default() -> Self {
        MemoryPlugin {
            pools: None,
            thread_arena_capacity: DEFAULT_THREAD_ARENA_CAPACITY,
            scratch: ArenaConfig::default().first_block_default(SCRATCH_FIRST_BLOCK),
            frame_memory: FrameMemory::default_config(),
            budgets: MemoryBudgets::default(),
            quarantine_frames: 0,
            tag_budgets: Vec::new(),
            ledger_csv: None,
            attribute_systems: true,
            system_lines: SystemLines::default(),
            system_budgets: Vec::new(),
            exit_report: ExitReport::Off,
            history_frames: DEFAULT_HISTORY_FRAMES,
            lines_under: None,
        }
    }
}

/// The system sets of the memory plugin, to order your systems around the frame-end reset.
///
/// ```standalone_crate
/// use bevy_app::{App, Last};
/// use bevy_ecs::prelude::*;
/// use nebula_memory::bevy::{MemoryStats, MemoryPlugin, MemorySystems};
///
/// fn report(stats: Res<MemoryStats>) {
///     println!("{}", *stats);
/// }
/// let mut app = App::new();
/// app.add_plugins(MemoryPlugin::default())
///     .add_systems(Last, report.after(MemorySystems::Reset));
/// app.update();
/// ```
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub enum MemorySystems {
    /// The frame's end: level-arena reset on request, frame arenas reset, statistics.
    Reset,
}

impl Plugin for MemoryPlugin {
    fn build(&self, app: &mut App) {
        if let Some(pools) = self.pools {
            apply_pool_sizes(pools);
        }
        set_thread_arena_capacity(self.thread_arena_capacity);
        if cfg!(debug_assertions) && self.quarantine_frames > 0 {
            let pools = [
                crate::engine_pool(),
                crate::game_pool(),
                crate::scratch_pool(),
            ];
            for pool in pools {
                pool.set_quarantine(self.quarantine_frames);
            }
        }
        for &(tag, budget) in &self.tag_budgets {
            ledger::set_budget(tag, budget);
        }
        let exit_report = ExitReport::from_env().unwrap_or_else(|| self.exit_report.clone());
        app.insert_resource(BudgetWatch::new(self.tag_budgets.iter().map(|&(t, _)| t)))
            .insert_resource(exit_report)
            .insert_resource(AttributionConfig {
                lines: self.system_lines,
                under: self.lines_under,
                budgets: self
                    .system_budgets
                    .iter()
                    .map(|(name, budget)| (name.clone(), *budget, false))
                    .collect(),
            });
        let mut memory_ledger = match &self.ledger_csv {
            Some(path) => MemoryLedger::with_csv(path).unwrap_or_else(|e| {
                panic!(
                    "MemoryPlugin: cannot write the ledger CSV to {}: {e}",
                    path.display()
                )
            }),
            None => MemoryLedger::default(),
        };
        memory_ledger.keep_history(self.history_frames);
        app.insert_resource(ScratchArenas::with_config(self.scratch))
            .insert_resource(memory_ledger)
            .init_resource::<EngineMemory>()
            .init_resource::<GameMemory>()
            .insert_resource(FrameMemory::with_config(self.frame_memory))
            .init_resource::<MemoryStats>()
            .insert_resource(self.budgets)
            .add_message::<ResetGameArena>()
            .configure_sets(Last, MemorySystems::Reset)
            .add_systems(
                Last,
                (
                    reset_game_arena_on_request,
                    reset_frame_arenas_system,
                    end_ledger_frame,
                    publish_memory_diagnostics,
                )
                    .chain()
                    .in_set(MemorySystems::Reset),
            );
        if self.attribute_systems {
            app.add_systems(First, attribute_systems)
                .add_observer(record_added_observer)
                .init_resource::<Exactness>();
        }
        register_diagnostics(app);
    }

    /// Every plugin has added its systems and no schedule has run: wraps them all so that
    /// their heap allocations are charged to `systems/<name>` (see `attribute_systems`).
    fn finish(&self, app: &mut App) {
        if self.attribute_systems {
            attribute_systems(app.world_mut());
            record_observers(app.world_mut());
        }
    }
}

/// The ledger's part of the frame end: the frame's snapshot into `MemoryLedger` (and its
/// CSV row and diagnostics), then what reads it: budgets that name nothing, and the exit
/// report (and, once, whether attribution can be exact). One system, not four: Bevy's executor allocates for each system it runs.
fn end_ledger_frame(world: &mut World) {
    check_exactness(world);
    record_ledger_frame(world);
    watch_budgets(world);
    report_on_exit(world);
}

/// Sets the global pools' sizes, or panics when a pool that exists already has another
/// size: the app would otherwise run, silently, with pools of a size nobody asked for (a
/// WARN event is invisible in a headless app without a subscriber).
#[track_caller]
fn apply_pool_sizes(pools: GlobalPoolConfig) {
    match configure_global_pools(pools) {
        Ok(()) => return,
        Err(PoolError::AlreadyCreated { .. }) => {}
        Err(e) => panic!("MemoryPlugin: {e}"),
    }
    let in_force = global_pool_config();
    let sizes = [
        ("engine", pools.engine, in_force.engine),
        ("game", pools.game, in_force.game),
        ("scratch", pools.scratch, in_force.scratch),
    ];
    for (name, asked, actual) in sizes {
        if asked != actual {
            panic!(
                "MemoryPlugin: the {name} pool is already in use with {actual} bytes, so its \
                 size cannot become {asked}: build the app (or call \
                 nebula_memory::configure_global_pools) before anything touches a global pool, \
                 or leave `pools` at None"
            );
        }
    }
}

/// The frame's end, for every thread at once: records the frame's figures in
/// [`MemoryStats`], then
/// - resets every [`Scratch`](super::Scratch) arena of every thread (and gives a spike's
///   memory back once the reset policy sees quiet frames);
/// - swaps the double-buffered [`FrameMemory`] (frame N's data stays through frame N+1);
/// - ends the frame for the thread arena of **every** thread that has one
///   (`thread_arena_alloc`), Bevy's worker threads and any other: each is reset by its own
///   thread at that thread's next allocation (see [`end_thread_arena_frame`]);
/// - runs the pools' maintenance ([`maintain_global_pools`]): freed pages go back to the OS
///   after a peak, quarantined blocks are released.
///
/// It is an exclusive system (`&mut World`): no other system of the schedule runs while
/// it does, so no `Scratch` item is alive. `MemoryPlugin` adds it to `Last` in
/// [`MemorySystems::Reset`]; add it yourself (in your last schedule) if you do not use the
/// plugin. It is safe to run at any time: everything it resets is either borrowed through
/// the world it holds exclusively, or (the thread arenas) reset later by its owning thread.
///
/// Memory from `thread_arena_alloc` therefore lives through the frame it was allocated in,
/// and after it until its thread allocates from its thread arena again.
pub fn reset_frame_arenas_system(world: &mut World) {
    let scratch = world
        .get_resource_mut::<ScratchArenas>()
        .map(|mut arenas| arenas.end_frame())
        .unwrap_or_default();
    TaggedFrameEnds::end_frames(world);
    let frame_memory_bytes = world
        .get_resource_mut::<FrameMemory>()
        .map_or(0, |mut frames| frames.end_frame_quietly());
    let threads = all_thread_arenas_stats();
    end_thread_arena_frame();
    maintain_global_pools();
    let budgets = world
        .get_resource::<MemoryBudgets>()
        .copied()
        .unwrap_or_default();
    if let Some(mut stats) = world.get_resource_mut::<MemoryStats>() {
        stats.record(
            FrameFigures {
                scratch_bytes: scratch.peak_bytes,
                scratch_arenas: scratch.arenas,
                scratch_bytes_held: scratch.bytes_held,
                frame_memory_bytes,
                thread_arena_bytes: threads.bytes_used,
                thread_arenas: threads.threads,
            },
            &budgets,
        );
    }
    // Budget crossings of the frame end (a replaced block), told once it is complete: a
    // subscriber that panics finds every arena reset and the figures recorded.
    crate::ledger::emit_pending_warnings();
}
