//! Where heap attribution cannot be exact, and saying so: [`tag_task_pool_threads`] puts
//! Bevy's pool threads in lines of their own (`tasks/<pool>`), and the plugin checks once,
//! at the first frame's end, whether `par_iter` batches can reach the wrong system's line
//! (a compute pool of more than one thread and no [`AttributionLayer`] at work): if so, a
//! WARN names what to turn on, and the exit report repeats it.
//!
//! [`AttributionLayer`]: super::AttributionLayer

use std::sync::Arc;

use bevy_app::{TaskPoolOptions, TaskPoolThreadAssignmentPolicy};
use bevy_ecs::prelude::*;
use bevy_tasks::ComputeTaskPool;

use super::trace_layer::layer_state;
use crate::ledger;

/// The parent tag of the lines of Bevy's task pool threads (see [`tag_task_pool_threads`]).
///
/// ```
/// assert_eq!(nebula_memory::bevy::TASKS_TAG, "tasks");
/// ```
pub const TASKS_TAG: &str = "tasks";

/// `options` with a thread-start hook on each of Bevy's task pools that puts the thread in
/// a heap scope for its whole life: `tasks/compute`, `tasks/async_compute`, `tasks/io`.
/// What runs on a pool thread outside every system (a task spawned on
/// `AsyncComputeTaskPool`, a batch run by an idle worker without an `AttributionLayer`)
/// is charged to its pool's line instead of the untagged one; systems, and batches the
/// layer attributes, enter their own scopes above it. Hooks already set run first.
///
/// ```
/// use bevy_app::{TaskPoolOptions, TaskPoolPlugin};
/// use nebula_memory::bevy::tag_task_pool_threads;
///
/// let plugin = TaskPoolPlugin {
///     task_pool_options: tag_task_pool_threads(TaskPoolOptions::with_num_threads(8)),
/// };
/// # drop(plugin);
/// ```
pub fn tag_task_pool_threads(mut options: TaskPoolOptions) -> TaskPoolOptions {
    fn hook(policy: &mut TaskPoolThreadAssignmentPolicy, tag: &'static str) {
        let before = policy.on_thread_spawn.take();
        policy.on_thread_spawn = Some(Arc::new(move || {
            if let Some(f) = &before {
                f();
            }
            // Open for the thread's life: forgotten, its scope never ends (`ledger::scope`).
            std::mem::forget(ledger::scope(tag));
        }));
    }
    hook(&mut options.compute, "tasks/compute");
    hook(&mut options.async_compute, "tasks/async_compute");
    hook(&mut options.io, "tasks/io");
    options
}

/// What the plugin found, once, about attribution's exactness.
#[derive(Resource, Default)]
pub(crate) struct Exactness {
    checked: bool,
    /// Why the lines may be inexact, if they may.
    pub(crate) note: Option<String>,
}

/// Why `par_iter` batches may be charged to the wrong line, if they may: `threads`
/// compute threads, and whether a layer was made and has seen Bevy's spans.
pub(crate) fn inexact_because(threads: usize, made: bool, seen: bool) -> Option<String> {
    if threads <= 1 || seen {
        return None;
    }
    let what = if made {
        "an AttributionLayer is in a subscriber but has seen none of Bevy's spans: turn on \
         bevy_ecs's `trace` feature (Bevy's `trace`), keep bevy_ecs's INFO spans enabled, \
         and install the subscriber before the app's systems are made"
    } else {
        "turn on bevy_ecs's `trace` feature (Bevy's `trace`) and add \
         nebula_memory::bevy::AttributionLayer to the tracing subscriber (LogPlugin's \
         `custom_layer`, or the global default) before the app's systems are made"
    };
    Some(format!(
        "heap attribution is not exact: the compute pool has {threads} threads, so a \
         thread waiting in one system's par_iter runs other systems' batches and charges \
         them to the waiting system (idle workers charge theirs to no system, or to \
         tasks/compute with tag_task_pool_threads). To make the systems/ lines exact, {what}"
    ))
}

/// At the first frame's end (every schedule of the frame has been built): checks, and
/// warns once. Cheap afterwards.
pub(crate) fn check_exactness(world: &mut World) {
    let Some(mut exactness) = world.get_resource_mut::<Exactness>() else {
        return; // attribution is off
    };
    if exactness.checked {
        return;
    }
    exactness.checked = true;
    let threads = ComputeTaskPool::try_get().map_or(1, |pool| pool.thread_num());
    let (made, seen) = layer_state();
    exactness.note = inexact_because(threads, made, seen);
    if let Some(note) = &exactness.note {
        tracing::warn!("MemoryPlugin: {note}");
    }
}
