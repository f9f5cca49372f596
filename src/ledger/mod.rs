//! Where the memory goes: a process-wide ledger of tags, with budgets.
//!
//! Every arena can carry a **tag**, a `/`-separated path such as `"render/meshing"`, set in
//! its [`ArenaConfig`](crate::ArenaConfig::tag). When a tagged arena takes a block from its
//! pool, the block's whole size is charged to the tag and to each of its parents; when the
//! block goes back, it is uncharged. So each byte of a pool is charged once, to the
//! arena that holds it, and a parent's figures are its children's together. The crate's
//! own arenas carry tags: `engine` and `game` (the shared arenas), and under `scratch`:
//! `scratch/with_scratch`, `scratch/thread_arenas`, and with Bevy `scratch/systems`
//! (`Scratch`: each system's on its own line `scratch/systems/<name>`) and
//! `scratch/frame_memory` (`FrameMemory`). What no tag holds is shown as the untagged rest.
//!
//! **Block granularity is the point.** The ledger is touched only where an arena takes or
//! gives back a block (its slow path, a few times per frame at most) and by a plain store
//! of the frame's peak at reset: the bump path pays nothing, not even an atomic. Budgets
//! are checked in the same place: a [`Budget::Limit`] refuses the block (the arena's `try_`
//! forms return [`AllocError::OverBudget`](crate::AllocError::OverBudget); the heap
//! fallback does not get around it), a [`Budget::Warn`] sends one `tracing` WARN when the
//! tag's holdings cross it, and again only after they fell back below (a WARN reaches a
//! `tracing` subscriber: install one, or use Bevy's `LogPlugin`, or nothing is printed).
//!
//! A [`snapshot`] is a value: it prints as a tree table and writes CSV rows (one per tag
//! per frame). With a [`TrackingAllocator`](crate::TrackingAllocator) and sampling on
//! ([`set_sampling`], or `NEBULA_MEMORY_SAMPLE`), [`call_sites`] says where in the code a
//! line's heap comes from (sampled call stacks; see `sites`). With the `tracy` feature, `enable_tracy` shows each tag as a named memory
//! pool in Tracy, with per-frame plots of held and used bytes ([`end_frame`]).
//!
//! # Tracy
//!
//! With the `tracy` feature, each tag that takes blocks is a named memory pool in Tracy
//! (one allocation event per block taken, one free per block given back; a parent tag
//! never takes blocks itself, so it has no pool), and [`end_frame`] sends two plots per
//! tag, parents included: `<tag> held` and `<tag> used`, in bytes, one point a frame.
//!
//! The crate builds tracy-client with its `manual-lifetime` feature: the client starts when
//! `enable_tracy` asks (not in every process that links the crate), and nothing stops or
//! flushes it at exit, so a program that just returns from `main` ends before a profiler
//! got its data. Hence:
//!
//! - **A guard.** `enable_tracy` returns a `TracyGuard`. While one is alive the ledger
//!   sends its events to Tracy; when the last one is dropped it stops. The switch is a
//!   read-write lock: each event is handed to Tracy under the read lock, and turning the
//!   receiver off takes the write lock, so when the drop returns no thread is inside a
//!   Tracy call for the ledger and none will start one. Arenas that outlive the guard (the
//!   global ones, scratch arenas freed at thread exit) are still counted by the ledger and
//!   never reach Tracy.
//! - **Dropping leaves the client running.** tracy-client 0.19 cannot be told that its
//!   client stopped: after Tracy's raw shutdown, `Client::running()` still says yes, so any
//!   other Tracy user in the process (Bevy's `trace_tracy`, a `tracing-tracy` layer, the
//!   game's own spans) would write into a destroyed profiler. The crate cannot know whether
//!   such users exist, so the safe end turns only the crate's own events off; what the
//!   client queued is still sent to a profiler while the process lives.
//! - **Handing over is `unsafe` and waits for the profiler.** `TracyGuard::shutdown`
//!   turns the ledger's events off for good, then runs Tracy's own shutdown, which sends
//!   everything queued to a connected profiler and returns once the profiler has it. Its
//!   contract is Tracy's: nothing else in the process uses Tracy then or later. A program
//!   whose only Tracy user is this crate calls it last (the `memory_ledger` example does),
//!   after `TracyGuard::wait_for_profiler` gave a profiler time to connect.
//!
//! `tracy_events_sent` counts what the ledger handed to the client, so a test can check
//! that nothing was sent after the guard went.
//!
//! ```
//! use nebula_memory::ledger::{self, Budget};
//! use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool, AllocError};
//!
//! let pool = MemoryPool::new("doc-ledger", 8 << 20).unwrap();
//! ledger::set_budget("doc/ai", Budget::Limit(256 << 10));
//! let ai = MemoryArena::with_config(&pool, ArenaConfig::default().tag("doc/ai"));
//! let physics = MemoryArena::with_config(&pool, ArenaConfig::default().tag("doc/physics"));
//!
//! // The runaway system is stopped by its budget...
//! let err = ai.try_alloc_slice_copy(&[0u8; 300 << 10]).unwrap_err();
//! assert!(matches!(err, AllocError::OverBudget { tag: "doc/ai", .. }));
//! // ...while its sibling keeps allocating.
//! physics.alloc_slice(300 << 10, 0u8);
//! let snap = ledger::snapshot();
//! assert_eq!(snap.tag("doc").unwrap().held, snap.tag("doc/physics").unwrap().held);
//! ```

mod event;
mod growth;
mod heap;
mod history;
mod node;
pub mod page;
mod sink;
mod sites;
mod snapshot;
mod table;
#[cfg(feature = "tracy")]
mod tracy;
mod warnings;

pub use event::LedgerEvent;
pub(crate) use node::{TagNode, UsedSlot, check_tag, node};
#[cfg(feature = "bevy")]
pub(crate) use node::{heap_totals, node_named};
pub(crate) use sink::send;
pub use sink::{record_events, take_recorded_events};
pub(crate) use warnings::{emit_pending_warnings, warnings_pending};

/// The heap id of `tag` (made on first use, its spelling leaked only then), for code that
/// enters its scope often.
#[cfg_attr(not(feature = "bevy"), allow(dead_code))]
pub(crate) fn node_heap_id(tag: &str) -> u16 {
    node::node_named(tag).heap_id
}
pub use growth::{DEFAULT_GROWTH_WINDOW, RISING_WINDOWS, growth_window, set_growth_window};
use heap::untagged_heap;
pub use heap::{
    HeapScope, TagScope, current_scope, heap_tracking, heap_tracking_overhead, scope,
    set_heap_tracking,
};
pub use history::{
    BudgetChange, CROSSED, CsvError, History, LineFrame, LineHistory, MAX_HISTORY_FRAMES,
    OVER_LIMIT, OVER_WARN, UNTAGGED, UNTAGGED_HEAP,
};
pub use sites::{
    CallSite, CallSites, DEFAULT_SAMPLE_MEAN, FrameMark, call_sites, grown_since, mark_frame,
    sampling, set_sampling, set_sampling_seed,
};
pub use snapshot::{LedgerSnapshot, TagFigures};
pub use table::{FullTable, Warnings};
#[cfg(feature = "tracy")]
#[cfg_attr(docsrs, doc(cfg(feature = "tracy")))]
pub use tracy::{TracyEnd, TracyGuard, enable_tracy, tracy_events_sent};

use crate::global;

/// The tags of the crate's own arenas.
pub mod tags {
    /// [`engine_arena`](crate::engine_arena)'s blocks.
    pub const ENGINE: &str = "engine";
    /// [`game_arena`](crate::game_arena)'s blocks.
    pub const GAME: &str = "game";
    /// The parent of every tag on the scratch pool below.
    pub const SCRATCH: &str = "scratch";
    /// [`with_scratch`](crate::with_scratch)'s arenas.
    pub const WITH_SCRATCH: &str = "scratch/with_scratch";
    /// The thread arenas of [`thread_arena_alloc`](crate::thread_arena_alloc).
    pub const THREAD_ARENAS: &str = "scratch/thread_arenas";
    /// The Bevy `Scratch` system parameter's arenas (unless their config names another):
    /// the parent of each system's line `scratch/systems/<name>`, and the line of claims
    /// made outside the plugin's wrapped systems.
    pub const SCRATCH_SYSTEMS: &str = "scratch/systems";
    /// The Bevy `FrameMemory` resource's double-buffered arena.
    pub const FRAME_MEMORY: &str = "scratch/frame_memory";
}

/// A budget for a tag, in bytes held (pool blocks and heap-fallback blocks, the tag's
/// children included), plus, with a [`TrackingAllocator`](crate::TrackingAllocator), its
/// heap bytes at their peak within the frame (`TagFigures::heap_frame_peak`, read at each
/// snapshot: once a frame with the Bevy plugin), so a spike allocated and freed inside one
/// frame crosses it too: see [`set_budget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// One `tracing` WARN when the tag's holdings rise above this, again only after they
    /// fell back to it or below. The WARN goes to the app's `tracing` subscriber: a
    /// headless program without one (no Bevy `LogPlugin`, no `tracing_subscriber` set up)
    /// sees nothing; the snapshot's figures show the crossing either way.
    Warn(usize),
    /// A block that would take the tag's holdings above this is refused:
    /// `AllocError::OverBudget`. (The pool rounds each block up by at most 47 bytes after
    /// the check, so holdings can pass the limit by that much per block.)
    Limit(usize),
}

/// Sets a budget of `tag` (a `/`-separated path; a parent's budget covers its children):
/// a `Warn` and a `Limit` can both be set, by two calls. Applies to blocks taken from now
/// on; blocks held already stay. O(tags).
///
/// # Panics
/// If `tag` is not a path of non-empty segments.
///
/// ```
/// use nebula_memory::ledger::{self, Budget};
/// ledger::set_budget("doc/budget", Budget::Warn(1 << 20));
/// ledger::set_budget("doc/budget", Budget::Limit(2 << 20));
/// let f = ledger::snapshot().tag("doc/budget").unwrap();
/// assert_eq!((f.warn_budget, f.limit_budget), (Some(1 << 20), Some(2 << 20)));
/// ```
#[track_caller]
pub fn set_budget(tag: &'static str, budget: Budget) {
    check_tag("ledger::set_budget", tag);
    let n = node(tag);
    match budget {
        Budget::Warn(bytes) => n.set_warn(bytes),
        Budget::Limit(bytes) => n.set_limit(bytes),
    }
}

/// [`set_budget`] for a tag spelt at run time (a system's line). O(tags).
#[cfg(feature = "bevy")]
pub(crate) fn set_budget_named(tag: &str, budget: Budget) {
    let n = node::node_named(tag);
    match budget {
        Budget::Warn(bytes) => n.set_warn(bytes),
        Budget::Limit(bytes) => n.set_limit(bytes),
    }
}

/// Removes both budgets of `tag`. O(tags).
///
/// ```
/// use nebula_memory::ledger::{self, Budget};
/// ledger::set_budget("doc/cleared", Budget::Limit(1));
/// ledger::clear_budgets("doc/cleared");
/// assert_eq!(ledger::snapshot().tag("doc/cleared").unwrap().limit_budget, None);
/// ```
#[track_caller]
pub fn clear_budgets(tag: &'static str) {
    check_tag("ledger::clear_budgets", tag);
    node(tag).clear_budgets();
}

/// Every tag's figures now, and the untagged rest of the global pools and of the heap.
/// Heap figures count allocation and free calls since the last [`end_frame`]; the heap's
/// part of each budget is checked here (a crossing is reported by a WARN). O(tags ×
/// (tags + threads)).
///
/// ```
/// let snap = nebula_memory::ledger::snapshot();
/// assert!(snap.total() >= snap.untagged());
/// ```
pub fn snapshot() -> LedgerSnapshot {
    let mut snap = LedgerSnapshot::default();
    fill(&mut snap, false);
    emit_pending_warnings();
    snap
}

/// Takes a snapshot into `snap`, reusing its buffers; with `frame_end`, also starts the
/// next frame's heap call counts. Runs no user code.
fn fill(snap: &mut LedgerSnapshot, frame_end: bool) {
    node::with_nodes(|nodes| {
        // Each tag's own heap counters once, then each tag's subtree sums.
        snap.own_heap.clear();
        snap.own_heap
            .extend(nodes.iter().map(|n| n.own_heap(frame_end)));
        node::Subtree::sum(nodes, &snap.own_heap, &mut snap.sums);
        if snap.order.len() != nodes.len() {
            // Tags were added (the registry only grows): the tree order anew.
            snap.order.clear();
            snap.order.extend(0..nodes.len());
            snap.order
                .sort_unstable_by(|&a, &b| snapshot::tree_order(nodes[a].path, nodes[b].path));
        }
        snap.rows.clear();
        for &i in &snap.order {
            let n = nodes[i];
            let sum = snap.sums[i];
            let r = n.read(sum.used);
            let heap = node::Heap {
                live: sum.heap_live,
                peak: n.see_heap(sum.heap_live, sum.heap_frame_peak),
                allocs: sum.heap_allocs,
                frees: sum.heap_frees,
            };
            // Growth is watched on the tag's own heap: a parent does not rise for its
            // child, which is the line to look at.
            let rising = if frame_end {
                n.growth_frame_end(snap.own_heap[i].totals.live)
            } else {
                n.growth.rising()
            };
            let figures = TagFigures {
                held: r.held,
                peak_held: r.peak_held,
                used: r.used,
                heap_held: r.heap_held,
                blocks_taken: r.blocks_taken,
                blocks_returned: r.blocks_returned,
                heap_fallbacks: r.heap_fallbacks,
                warn_budget: r.warn,
                limit_budget: r.limit,
                heap_live: heap.live,
                heap_peak: heap.peak,
                heap_frame_peak: sum.heap_frame_peak,
                heap_allocs: heap.allocs,
                heap_frees: heap.frees,
                heap_alloc_bytes: sum.heap_alloc_bytes,
                heap_free_bytes: sum.heap_free_bytes,
                heap_rising_windows: rising,
                budget_crossings: n.crossings(),
            };
            snap.rows.push(snapshot::Row {
                tag: n.path,
                depth: n.path.matches('/').count(),
                figures,
            });
        }
    });
    snap.untagged = global::created_pools()
        .into_iter()
        .flatten()
        .map(|p| p.stats().in_use.saturating_sub(p.charged()))
        .fold(0usize, usize::saturating_add);
    snap.untagged_heap = untagged_heap(frame_end);
}

/// Ends a frame for the ledger: takes a [`snapshot`], sends each tag's held and used bytes
/// to the profiler as plots (and a frame mark if asked for), and returns the snapshot. The
/// Bevy plugin calls it at each frame's end; other games call it once a frame. O(tags).
///
/// ```
/// let snap = nebula_memory::ledger::end_frame();
/// assert!(snap.total() >= snap.untagged());
/// ```
pub fn end_frame() -> LedgerSnapshot {
    let mut snap = LedgerSnapshot::default();
    end_frame_into(&mut snap);
    snap
}

/// [`end_frame`] into a snapshot of the caller's, reusing its buffers: once warm, a frame
/// end allocates nothing (what the Bevy plugin does, into its `MemoryLedger`). O(tags).
///
/// ```
/// let mut snap = nebula_memory::ledger::LedgerSnapshot::default();
/// for _frame in 0..3 {
///     nebula_memory::ledger::end_frame_into(&mut snap);
/// }
/// assert!(snap.total() >= snap.untagged());
/// ```
pub fn end_frame_into(snap: &mut LedgerSnapshot) {
    end_frame_into_quietly(snap);
    // Told last: the snapshot and the plots are complete.
    emit_pending_warnings();
}

/// [`end_frame_into`] without telling budget warnings, for a caller with more to record
/// first (the Bevy plugin: its `MemoryLedger` and CSV row), which then calls
/// `emit_pending_warnings`.
#[cfg_attr(not(feature = "bevy"), allow(dead_code))]
pub(crate) fn end_frame_into_quietly(snap: &mut LedgerSnapshot) {
    fill(snap, true);
    crate::heap::sample::read_env();
    crate::heap::sample::frame_end();
    if crate::heap::sample::current_mean().is_some() {
        // The sampler's lock is taken around `fork` by the crate's handlers.
        crate::fork::install();
    }
    #[cfg(feature = "tracy")]
    tracy::name_sample_pools();
    let heap = crate::heap::counters::in_use();
    for (tag, f) in snap.tags() {
        send(|| LedgerEvent::Plot {
            tag,
            held: f.held,
            used: f.used,
        });
        if heap {
            send(|| LedgerEvent::HeapPlot {
                tag,
                live: f.heap_live,
            });
        }
    }
    if event::frame_marks() {
        send(|| LedgerEvent::FrameMark);
    }
}
