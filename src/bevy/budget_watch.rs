//! Budgets that name nothing: a tag budget whose tag nothing was charged to in the app's
//! first frames, or a system budget whose function no system was made from, is a typo or
//! a stale name; it is reported once (a WARN), never ignored in silence.

use bevy_ecs::prelude::*;

use super::attribution::AttributionConfig;
use super::ledger::MemoryLedger;
use crate::ledger::TagFigures;

/// Frames after which a budget's tag must have been charged (a second at 60 frames a
/// second: every system has run, every tagged arena taken its first block).
pub const BUDGET_WATCH_FRAMES: u32 = 60;

/// The plugin's tag budgets not yet seen charged, and the frames watched so far.
#[derive(Resource)]
pub(crate) struct BudgetWatch {
    frames: u32,
    unseen: Vec<&'static str>,
}

impl BudgetWatch {
    pub(crate) fn new(tags: impl IntoIterator<Item = &'static str>) -> BudgetWatch {
        BudgetWatch {
            frames: 0,
            unseen: tags.into_iter().collect(),
        }
    }
}

/// Whether anything was ever charged to a tag with these figures (heap bytes live now are
/// in `heap_peak`, the most ever live).
fn charged(f: &TagFigures) -> bool {
    f.blocks_taken > 0 || f.peak_held > 0 || f.heap_allocs > 0 || f.heap_peak > 0
}

/// After the ledger's frame end: crosses off the budgets' tags charged so far; after
/// [`BUDGET_WATCH_FRAMES`] frames, WARNs once for each left, and for each system budget
/// whose function no system was made from, then stops watching. Allocates nothing (the
/// checks read the frame's snapshot).
pub(crate) fn watch_budgets(world: &mut World) {
    let Some(mut watch) = world.get_resource_mut::<BudgetWatch>() else {
        return;
    };
    if watch.frames >= BUDGET_WATCH_FRAMES {
        return;
    }
    watch.frames += 1;
    let done = watch.frames >= BUDGET_WATCH_FRAMES;
    // Out of the resource while the ledger is read (no allocation: a move).
    let mut unseen = std::mem::take(&mut watch.unseen);
    if let Some(ledger) = world.get_resource::<MemoryLedger>() {
        unseen.retain(|tag| !ledger.tag(tag).is_some_and(|f| charged(&f)));
    }
    if !done {
        if let Some(mut watch) = world.get_resource_mut::<BudgetWatch>() {
            watch.unseen = unseen;
        }
        return;
    }
    for tag in unseen {
        tracing::warn!(
            tag,
            "MemoryPlugin: a budget names the tag {tag:?}, but nothing was charged to it in \
             the first {BUDGET_WATCH_FRAMES} frames (a system's line is `systems/<name>`; \
             `MemoryPlugin::budget_for` names a system by its function)"
        );
    }
    let config = world.get_resource::<AttributionConfig>();
    for (function, _, found) in config.iter().flat_map(|c| &c.budgets) {
        if !found {
            tracing::warn!(
                system = function.as_str(),
                "MemoryPlugin: a budget names the system {function}, but no system of the app \
                 was made from it"
            );
        }
    }
}
