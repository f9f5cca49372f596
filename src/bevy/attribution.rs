//! Heap allocations charged to the system that makes them: with a
//! [`TrackingAllocator`](crate::TrackingAllocator) as the global allocator and
//! `MemoryPlugin`, each system's heap use is the ledger's `systems/<name>` line, with no
//! change to the systems.
//!
//! **How.** Bevy 0.20 offers three places to hook in: the system spans of `bevy_ecs`'s
//! `trace` feature (through a `tracing` layer), a custom executor, and a schedule build
//! pass. A custom executor cannot reach the systems it runs (their list is private), and a
//! build pass runs after the systems were initialized, when a system can no longer be
//! swapped for another without losing its access. The spans need `trace` compiled into
//! Bevy and a layer in the app's subscriber: a cost and a setup step for every user, taken
//! only for what wrapping cannot reach (`trace_layer`). So this module wraps the systems
//! themselves, **before their first initialization**: the
//! plugin's `finish` (when every plugin has added its systems and no schedule has run) and
//! then, for systems added later, an exclusive system in `First`, which reaches every
//! other schedule's new systems before their schedule initializes them. A wrapper
//! forwards every call to the system it wraps and enters the system's tag scope around
//! running it and applying its commands.
//!
//! **Why it is sound.** A system is swapped only while its access is still
//! `SystemAccess::None`: either it was never initialized (then the schedule initializes
//! the wrapper, which initializes the system and returns its real access), or it has no
//! access at all (then the wrapper's empty access is the truth). A system already
//! initialized with some access is left alone, since its recorded access would be lost.
//! `ApplyDeferred` sync points, which the executor recognizes by type, are left alone too.
//!
//! **Every system a line of its own.** A system's line is `systems/<short name>`; a second
//! system of the same name (the same function added twice, or Bevy's piped and closure
//! systems, whose names say little) gets `systems/<short name> #2`, and so on, in the
//! order they are wrapped: equal names never merge silently. Grouping them is the app's
//! choice ([`SystemLines::ByName`]). The crate's own systems (the frame end) are lines
//! under `nebula_memory/`, apart from the app's (the wrapping itself runs unwrapped: it
//! allocates only when new systems appear). Bevy's
//! `Main::run_main` is the system that runs the main schedules one after the other: its
//! line is what Bevy's executor allocates around the systems it runs (task queues,
//! schedule buffers), not any system's work.
//!
//! **Scratch lines.** Wrapping a system also registers its `Scratch` line, the heap line
//! under `scratch/systems` (`systems/<name>` gives `scratch/systems/<name>`), by the heap
//! id its runs are in: a claim finds it from its thread's scope (`scratch::lines`).
//!
//! **Budgets by system.** [`MemoryPlugin::budget_for`](super::MemoryPlugin::budget_for)
//! names a system by its function; the budget is set on the line of every system wrapped
//! with that function's name.
//!
//! **Work on other threads.** A system's `Scratch::batches()` / `TaggedScratch::batches()`
//! enter its scope on whichever thread runs them. A plain `par_iter` batch is charged to its
//! system only with [`AttributionLayer`](super::AttributionLayer) (Bevy's `trace` spans):
//! without it, a thread waiting in one system's `par_iter` charges the other systems'
//! batches it runs to the waiting system, and an idle worker charges its batches to no
//! system (its pool's line with [`tag_task_pool_threads`](super::tag_task_pool_threads)).
//! The plugin checks once, at the first frame's end, and warns when that can happen (a
//! compute pool of more than one thread, no layer at work; see `exactness`). With the
//! layer, observers, one-shot systems and run conditions get lines of their own
//! (`observers/<name>`, `runs/<name>`). A wrapped system's initialization runs in its
//! scope too: its state is its memory, and its queries' batches are charged to the scope
//! they were made in.
//!
//! **What it does not see.** Run conditions are not wrapped. A system added to `First` after the app started is initialized before
//! this module sees it.

use std::any::TypeId;
use std::collections::{HashMap, HashSet};

use bevy_ecs::change_detection::{CheckChangeTicks, Tick};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ApplyDeferred, InternedScheduleLabel, Schedules, SystemKey};
use bevy_ecs::schedule::{InternedSystemSet, SystemWithAccess};
use bevy_ecs::system::{RunSystemError, System, SystemAccess, SystemIn, SystemStateFlags};
use bevy_ecs::utils::prelude::DebugName;
use bevy_ecs::world::DeferredWorld;
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;

use super::scratch::lines;
use super::trace_layer::{CRATE_SYSTEMS_TAG, Mark, record_observer};
use crate::ledger::{self, Budget, TagScope, node_heap_id};

/// The parent tag of every system's heap line.
pub const SYSTEMS_TAG: &str = "systems";

/// How systems of the same name are shown in the ledger (`MemoryPlugin::system_lines`).
///
/// ```
/// use nebula_memory::bevy::{MemoryPlugin, SystemLines};
/// let plugin = MemoryPlugin {
///     system_lines: SystemLines::ByName,
///     ..Default::default()
/// };
/// # let _ = plugin;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SystemLines {
    /// Each system a line of its own: the second of a name is `<name> #2`, and so on.
    #[default]
    PerSystem,
    /// Systems of the same short name share one line.
    ByName,
}

/// What the plugin asked of the wrapping: how to name lines, and the budgets to set on
/// the lines of the systems of a function (by the function's full name), each with
/// whether a system of it was found yet.
#[derive(Resource, Default)]
pub(crate) struct AttributionConfig {
    pub(crate) lines: SystemLines,
    /// The tag the app's system lines go under instead of the top (`MemoryPlugin::isolated`).
    pub(crate) under: Option<&'static str>,
    pub(crate) budgets: Vec<(String, Budget, bool)>,
}

/// A schedule system that runs in its tag's heap scope.
struct Attributed {
    inner: SystemWithAccess,
    /// The heap id of `systems/<name>`.
    tag: u16,
}

impl System for Attributed {
    type In = ();
    type Out = ();

    fn name(&self) -> DebugName {
        self.inner.name()
    }

    // The executor and stepping recognise systems by their type: forwarded.
    fn system_type(&self) -> TypeId {
        self.inner.system_type()
    }

    fn flags(&self) -> SystemStateFlags {
        self.inner.flags()
    }

    unsafe fn run_unsafe(
        &mut self,
        input: SystemIn<'_, Self>,
        world: UnsafeWorldCell,
    ) -> Result<(), RunSystemError> {
        let _scope = TagScope::enter_id(self.tag);
        let _mark = Mark::enter(true);
        // SAFETY: forwarded from our caller, with the wrapped system's own access (ours is
        // the one it returned from `initialize`).
        unsafe { self.inner.run_unsafe(input, world) }
    }

    #[cfg(feature = "hotpatching")]
    fn refresh_hotpatch(&mut self) {
        self.inner.refresh_hotpatch();
    }

    fn apply_deferred(&mut self, world: &mut World) {
        // Applying a system's commands is the system's work too (an observer they trigger
        // is not: marked as no own run).
        let _scope = TagScope::enter_id(self.tag);
        let _mark = Mark::enter(false);
        self.inner.apply_deferred(world);
    }

    fn queue_deferred(&mut self, world: DeferredWorld) {
        let _scope = TagScope::enter_id(self.tag);
        let _mark = Mark::enter(false);
        self.inner.queue_deferred(world);
    }

    fn initialize(&mut self, world: &mut World) -> SystemAccess {
        // The system's state is its memory; and its queries' `par_for_each` spans, made
        // here, name this scope (`AttributionLayer`).
        let _scope = TagScope::enter_id(self.tag);
        let _mark = Mark::enter(false);
        self.inner.initialize(world)
    }

    fn check_change_tick(&mut self, check: CheckChangeTicks) {
        self.inner.check_change_tick(check);
    }

    fn default_system_sets(&self) -> Vec<InternedSystemSet> {
        self.inner.default_system_sets()
    }

    fn get_last_run(&self) -> Tick {
        self.inner.get_last_run()
    }

    fn set_last_run(&mut self, last_run: Tick) {
        self.inner.set_last_run(last_run);
    }
}

/// The systems already wrapped, by schedule and key (a rebuilt schedule hands its systems
/// back to its graph, wrappers included), and how many systems took each line so far.
#[derive(Resource, Default)]
pub(crate) struct AttributedSystems {
    done: HashSet<(InternedScheduleLabel, SystemKey)>,
    lines: HashMap<String, u32>,
    /// Each schedule's number of systems when it was last scanned: a schedule that has not
    /// run yet (so is not initialized) is not scanned again, every frame, for nothing.
    scanned: HashMap<InternedScheduleLabel, usize>,
}

/// The heap tag of a system named `name` (`full`: its full name): `systems/<short name>`
/// (`nebula_memory/<short name>` for the crate's own; `<under>/systems/<short name>` for
/// an app's under a tag of its own), a `/` in the name made a `:`; with
/// [`SystemLines::PerSystem`], ` #n` after the name of the n-th system to take it.
fn tag_of(
    name: &DebugName,
    full: &str,
    config: &AttributionConfig,
    taken: &mut HashMap<String, u32>,
) -> String {
    let lines = config.lines;
    let short = name.shortname().to_string().replace('/', ":");
    let short = if short.is_empty() {
        "(unnamed)".to_owned()
    } else {
        short
    };
    let parent = if full.starts_with("nebula_memory::") {
        CRATE_SYSTEMS_TAG
    } else {
        SYSTEMS_TAG
    };
    let line = match config.under {
        Some(under) if parent == SYSTEMS_TAG => format!("{under}/{parent}/{short}"),
        _ => format!("{parent}/{short}"),
    };
    let n = taken.entry(line.clone()).or_insert(0);
    *n += 1;
    if *n == 1 || lines == SystemLines::ByName {
        line
    } else {
        format!("{line} #{n}")
    }
}

/// The scratch line of the system whose heap line is `line` (see `scratch::lines`): the
/// line under `scratch/systems` without its own `systems` segment. `systems/<name>` gives
/// `scratch/systems/<name>`, `<under>/systems/<name>` gives
/// `scratch/systems/<under>/<name>`, and a crate system's `nebula_memory/<name>` gives
/// `scratch/systems/nebula_memory/<name>`.
fn scratch_line(line: &str, under: Option<&str>) -> String {
    let own = |l: &str| {
        l.strip_prefix(SYSTEMS_TAG)
            .and_then(|r| r.strip_prefix('/'))
            .map(str::to_owned)
    };
    let rest = own(line)
        .or_else(|| {
            let u = under?;
            let name = own(line.strip_prefix(u)?.strip_prefix('/')?)?;
            Some(format!("{u}/{name}"))
        })
        .unwrap_or_else(|| line.to_owned());
    format!("{}/{rest}", ledger::tags::SCRATCH_SYSTEMS)
}

/// Wraps every system of every schedule of `world` that is not wrapped yet and can be
/// (see the module docs). Cheap when there is nothing new: a schedule whose systems are
/// all initialized is skipped at once.
pub(crate) fn attribute_systems(world: &mut World) {
    let scanned = world
        .get_resource::<AttributedSystems>()
        .map(|a| &a.scanned);
    let new = world.get_resource::<Schedules>().is_some_and(|schedules| {
        schedules.iter().any(|(_, s)| {
            let systems = &s.graph().systems;
            !systems.is_initialized()
                && scanned.and_then(|m| m.get(&s.label())) != Some(&systems.len())
        })
    });
    if !new {
        return;
    }
    let Some(mut schedules) = world.remove_resource::<Schedules>() else {
        return;
    };
    let mut done = world
        .remove_resource::<AttributedSystems>()
        .unwrap_or_default();
    let mut config = world
        .remove_resource::<AttributionConfig>()
        .unwrap_or_default();
    for (_, schedule) in schedules.iter_mut() {
        let label = schedule.label();
        let systems = &mut schedule.graph_mut().systems;
        if systems.is_initialized() {
            continue; // nothing new since the schedule was last built
        }
        let keys: Vec<SystemKey> = systems.iter().map(|(key, _, _)| key).collect();
        for key in keys {
            if done.done.contains(&(label, key)) {
                continue;
            }
            let Some(slot) = systems.get_mut(key) else {
                continue;
            };
            if *slot.access() != SystemAccess::None
                || slot.system().system_type() == TypeId::of::<ApplyDeferred>()
            {
                continue;
            }
            let name = slot.system().name();
            let full = name.to_string();
            let tag = tag_of(&name, &full, &config, &mut done.lines);
            for (function, budget, found) in &mut config.budgets {
                if *function == full {
                    *found = true;
                    ledger::set_budget_named(&tag, *budget);
                }
            }
            let heap_id = node_heap_id(&tag);
            lines::register(heap_id, &scratch_line(&tag, config.under));
            let placeholder: Box<dyn System<In = (), Out = ()>> =
                Box::new(IntoSystem::into_system(|| {}));
            let inner = std::mem::replace(slot, SystemWithAccess::new(placeholder));
            *slot = SystemWithAccess::new(Box::new(Attributed {
                inner,
                tag: heap_id,
            }));
            done.done.insert((label, key));
        }
        done.scanned.insert(label, systems.len());
    }
    world.insert_resource(config);
    world.insert_resource(done);
    world.insert_resource(schedules);
}

/// Records the names of the world's observers, for `AttributionLayer`'s `observers/<name>`
/// lines (the plugin's `finish`: the observers added while the app was built).
pub(crate) fn record_observers(world: &mut World) {
    let mut observers = world.query::<&Observer>();
    for observer in observers.iter(world) {
        record_observer(observer.system_name().to_string());
    }
}

/// An observer of observers: each one added later is recorded before it can run.
pub(crate) fn record_added_observer(add: On<Add<Observer>>, observers: Query<&Observer>) {
    if let Ok(observer) = observers.get(add.entity) {
        record_observer(observer.system_name().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::scratch_line;

    #[test]
    fn a_scratch_line_is_the_systems_line_under_scratch_systems() {
        let cases = [
            ("systems/mesh", None, "scratch/systems/mesh"),
            ("systems/mesh #2", None, "scratch/systems/mesh #2"),
            (
                "apps/3/systems/mesh",
                Some("apps/3"),
                "scratch/systems/apps/3/mesh",
            ),
            (
                "nebula_memory/reset",
                Some("apps/3"),
                "scratch/systems/nebula_memory/reset",
            ),
            (
                "nebula_memory/reset",
                None,
                "scratch/systems/nebula_memory/reset",
            ),
        ];
        for (line, under, scratch) in cases {
            assert_eq!(scratch_line(line, under), scratch, "{line} under {under:?}");
        }
    }
}
