//! Frame memory statistics: what each frame took from the arenas and the pools, checked
//! against budgets, logged with `tracing` and published as Bevy diagnostics.

use bevy_diagnostic::{Diagnostic, DiagnosticPath, Diagnostics, RegisterDiagnostic};
use bevy_ecs::prelude::*;

use crate::arena::Bytes;
use crate::global::created_pools;

/// Per-frame budgets. A frame whose figure passes 90% of its budget logs a WARN event;
/// `0` means no budget. Pools are always checked against 90% of their capacity.
///
/// ```
/// let budgets = nebula_memory::bevy::MemoryBudgets { scratch: 8 << 20, ..Default::default() };
/// assert_eq!(budgets.frame_memory, 0);
/// ```
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryBudgets {
    /// Bytes of `Scratch` memory per frame (the sum of each scratch arena's peak).
    pub scratch: usize,
    /// Bytes stored in [`FrameMemory`](super::FrameMemory) per frame.
    pub frame_memory: usize,
    /// The old name of `frame_memory`, still read when `frame_memory` is 0.
    #[deprecated(
        note = "renamed to `frame_memory`: a frame is a period, `FrameMemory` the resource"
    )]
    pub frame: usize,
    /// Bytes of the thread arenas (`thread_arena_alloc`) per frame, all threads.
    pub thread_arenas: usize,
}

/// Use of one global pool at a frame's end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool's name (empty while the pool does not exist yet).
    pub name: &'static str,
    /// Bytes of blocks handed out.
    pub in_use: usize,
    /// Bytes the pool spans.
    pub capacity: usize,
    /// The most bytes ever handed out at once.
    pub high_watermark: usize,
}

/// What the frame just ended took from the arenas and pools (scratch, `FrameMemory`, the
/// thread arenas, the global pools); updated by `reset_frame_arenas_system` in `Last` (read
/// it in a system ordered after
/// [`MemorySystems::Reset`](crate::bevy::MemorySystems::Reset), or in the next frame).
///
/// ```
/// let stats = nebula_memory::bevy::MemoryStats::default();
/// assert_eq!(stats.frame, 0);
/// println!("{stats}");
/// ```
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Frames ended so far.
    pub frame: u64,
    /// `Scratch` memory this frame: the sum over scratch arenas of the most each held.
    pub scratch_bytes: usize,
    /// The largest `scratch_bytes` of any frame.
    pub scratch_high_watermark: usize,
    /// Scratch arenas in all threads (one per thread and nesting depth reached).
    pub scratch_arenas: usize,
    /// Bytes of scratch-pool blocks the scratch arenas hold after the frame's reset: this
    /// app's share of the scratch pool, flat in a steady state.
    pub scratch_bytes_held: usize,
    /// Bytes stored in [`FrameMemory`](super::FrameMemory) this frame.
    pub frame_memory_bytes: usize,
    /// The largest `frame_memory_bytes` of any frame.
    pub frame_memory_high_watermark: usize,
    /// Bytes of all threads' thread arenas (`thread_arena_alloc`) this frame.
    pub thread_arena_bytes: usize,
    /// The largest `thread_arena_bytes` of any frame.
    pub thread_arena_high_watermark: usize,
    /// Threads with a thread arena.
    pub thread_arenas: usize,
    /// The engine, game and scratch pools.
    pub pools: [PoolUsage; 3],
    /// Requests the three pools refused this frame (each also logged a WARN event).
    pub exhaustions: u64,
    /// Requests the three pools refused since they were created.
    pub exhaustions_total: u64,
    /// Blocks arenas took from the system heap this frame because a pool was exhausted.
    pub heap_fallbacks: u64,
    /// Heap-fallback blocks since the process started.
    pub heap_fallbacks_total: u64,
    /// The old name of `frame_memory_bytes` (the same figure).
    #[deprecated(note = "renamed to `frame_memory_bytes`")]
    pub frame_bytes: usize,
    /// The old name of `frame_memory_high_watermark` (the same figure).
    #[deprecated(note = "renamed to `frame_memory_high_watermark`")]
    pub frame_high_watermark: usize,
}

impl std::fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "frame {}: scratch {} (peak {}, {} arenas), frame memory {} (peak {}), thread \
             arenas {} (peak {})",
            self.frame,
            Bytes(self.scratch_bytes),
            Bytes(self.scratch_high_watermark),
            self.scratch_arenas,
            Bytes(self.frame_memory_bytes),
            Bytes(self.frame_memory_high_watermark),
            Bytes(self.thread_arena_bytes),
            Bytes(self.thread_arena_high_watermark),
        )?;
        for p in self.pools.iter().filter(|p| !p.name.is_empty()) {
            write!(
                f,
                "; {} pool {}/{}",
                p.name,
                Bytes(p.in_use),
                Bytes(p.capacity)
            )?;
        }
        write!(
            f,
            "; {} exhaustions, {} heap fallbacks",
            self.exhaustions, self.heap_fallbacks
        )
    }
}

/// The figures of one frame's end, gathered before the arenas are reset.
pub(crate) struct FrameFigures {
    pub(crate) scratch_bytes: usize,
    pub(crate) scratch_arenas: usize,
    pub(crate) scratch_bytes_held: usize,
    pub(crate) frame_memory_bytes: usize,
    pub(crate) thread_arena_bytes: usize,
    pub(crate) thread_arenas: usize,
}

impl MemoryStats {
    /// Takes in a frame's figures and the pools' state, then logs: a DEBUG event with the
    /// figures, a WARN event for each figure past 90% of its budget or pool capacity.
    #[allow(deprecated)] // fills the old names, and reads the old budget field
    pub(crate) fn record(&mut self, figures: FrameFigures, budgets: &MemoryBudgets) {
        self.frame += 1;
        self.scratch_bytes = figures.scratch_bytes;
        self.scratch_high_watermark = self.scratch_high_watermark.max(figures.scratch_bytes);
        self.scratch_arenas = figures.scratch_arenas;
        self.scratch_bytes_held = figures.scratch_bytes_held;
        self.frame_memory_bytes = figures.frame_memory_bytes;
        self.frame_memory_high_watermark = self
            .frame_memory_high_watermark
            .max(figures.frame_memory_bytes);
        self.frame_bytes = self.frame_memory_bytes;
        self.frame_high_watermark = self.frame_memory_high_watermark;
        self.thread_arena_bytes = figures.thread_arena_bytes;
        self.thread_arena_high_watermark = self
            .thread_arena_high_watermark
            .max(figures.thread_arena_bytes);
        self.thread_arenas = figures.thread_arenas;
        let mut exhaustions = 0;
        for (usage, pool) in self.pools.iter_mut().zip(created_pools()) {
            *usage = match pool {
                Some(pool) => {
                    let s = pool.stats();
                    exhaustions += s.exhaustions;
                    PoolUsage {
                        name: pool.name(),
                        in_use: s.in_use,
                        capacity: s.capacity,
                        high_watermark: s.high_watermark,
                    }
                }
                None => PoolUsage::default(),
            };
        }
        self.exhaustions = exhaustions - self.exhaustions_total;
        self.exhaustions_total = exhaustions;
        let fallbacks = crate::arena::heap_fallbacks();
        self.heap_fallbacks = fallbacks - self.heap_fallbacks_total;
        self.heap_fallbacks_total = fallbacks;

        tracing::debug!(
            frame = self.frame,
            scratch_bytes = self.scratch_bytes,
            frame_memory_bytes = self.frame_memory_bytes,
            thread_arena_bytes = self.thread_arena_bytes,
            exhaustions = self.exhaustions,
            heap_fallbacks = self.heap_fallbacks,
            "{self}"
        );
        let frame_memory_budget = match budgets.frame_memory {
            0 => budgets.frame,
            set => set,
        };
        for (what, used, budget) in [
            ("scratch", self.scratch_bytes, budgets.scratch),
            ("frame", self.frame_memory_bytes, frame_memory_budget),
            (
                "thread arena",
                self.thread_arena_bytes,
                budgets.thread_arenas,
            ),
        ] {
            if past_ninety_percent(used, budget) {
                tracing::warn!(
                    frame = self.frame,
                    used,
                    budget,
                    "{what} memory at {} of its {} budget this frame",
                    Bytes(used),
                    Bytes(budget)
                );
            }
        }
        for p in &self.pools {
            if past_ninety_percent(p.in_use, p.capacity) {
                tracing::warn!(
                    frame = self.frame,
                    pool = p.name,
                    in_use = p.in_use,
                    capacity = p.capacity,
                    "pool '{}' at {} of {}",
                    p.name,
                    Bytes(p.in_use),
                    Bytes(p.capacity)
                );
            }
        }
    }
}

/// `used > 90% of budget` (no budget: never).
fn past_ninety_percent(used: usize, budget: usize) -> bool {
    budget > 0 && used.saturating_mul(10) > budget.saturating_mul(9)
}

/// Diagnostic paths `MemoryPlugin` registers (shown by Bevy's `LogDiagnosticsPlugin`).
pub mod paths {
    use super::DiagnosticPath;

    /// `Scratch` bytes per frame.
    pub const SCRATCH_BYTES: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/scratch_bytes");
    /// [`FrameMemory`](crate::bevy::FrameMemory) bytes per frame (the path keeps its first
    /// spelling, `frame_bytes`, for the dashboards that read it).
    pub const FRAME_MEMORY_BYTES: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/frame_bytes");
    /// The old name of [`FRAME_MEMORY_BYTES`].
    #[deprecated(note = "renamed to `FRAME_MEMORY_BYTES`")]
    pub const FRAME_BYTES: DiagnosticPath = FRAME_MEMORY_BYTES;
    /// Thread arena bytes per frame (`thread_arena_alloc`, all threads).
    pub const THREAD_ARENA_BYTES: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/thread_arena_bytes");
    /// Engine pool bytes in use.
    pub const ENGINE_POOL_IN_USE: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/engine_pool_in_use");
    /// Game pool bytes in use.
    pub const GAME_POOL_IN_USE: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/game_pool_in_use");
    /// Scratch pool bytes in use.
    pub const SCRATCH_POOL_IN_USE: DiagnosticPath =
        DiagnosticPath::const_new("nebula_memory/scratch_pool_in_use");
    /// Pool exhaustions per frame.
    pub const EXHAUSTIONS: DiagnosticPath = DiagnosticPath::const_new("nebula_memory/exhaustions");
}

/// Registers the diagnostics of [`paths`].
pub(crate) fn register_diagnostics(app: &mut bevy_app::App) {
    for path in [
        paths::SCRATCH_BYTES,
        paths::FRAME_MEMORY_BYTES,
        paths::THREAD_ARENA_BYTES,
        paths::ENGINE_POOL_IN_USE,
        paths::GAME_POOL_IN_USE,
        paths::SCRATCH_POOL_IN_USE,
    ] {
        app.register_diagnostic(Diagnostic::new(path).with_suffix(" B"));
    }
    app.register_diagnostic(Diagnostic::new(paths::EXHAUSTIONS));
}

/// Publishes the frame's figures as Bevy diagnostics.
pub(crate) fn publish_memory_diagnostics(
    mut diagnostics: Diagnostics,
    stats: Res<MemoryStats>,
    ledger: Option<Res<super::MemoryLedger>>,
) {
    if let Some(ledger) = ledger {
        for (path, held) in ledger.measurements() {
            diagnostics.add_measurement(path, || held);
        }
    }
    let s = *stats;
    diagnostics.add_measurement(&paths::SCRATCH_BYTES, || s.scratch_bytes as f64);
    diagnostics.add_measurement(&paths::FRAME_MEMORY_BYTES, || s.frame_memory_bytes as f64);
    diagnostics.add_measurement(&paths::THREAD_ARENA_BYTES, || s.thread_arena_bytes as f64);
    diagnostics.add_measurement(&paths::ENGINE_POOL_IN_USE, || s.pools[0].in_use as f64);
    diagnostics.add_measurement(&paths::GAME_POOL_IN_USE, || s.pools[1].in_use as f64);
    diagnostics.add_measurement(&paths::SCRATCH_POOL_IN_USE, || s.pools[2].in_use as f64);
    diagnostics.add_measurement(&paths::EXHAUSTIONS, || s.exhaustions as f64);
}
