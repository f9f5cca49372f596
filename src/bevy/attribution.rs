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
//! Bevy and a layer in the app's subscriber: a cost and a setup step for every user. So
//! this module wraps the systems themselves, **before their first initialization**: the
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
//! **What it does not see.** Work a system hands to other threads (a `par_iter` body, a
//! task) runs in those threads' scopes: charge it with
//! `par_iter().for_each_init(|| ledger::scope("systems/…"), |_, item| …)`. Run conditions
//! are not wrapped. A system added to `First` after the app started is initialized before
//! this module sees it.

use std::any::TypeId;
use std::collections::HashSet;

use bevy_ecs::change_detection::{CheckChangeTicks, Tick};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ApplyDeferred, InternedScheduleLabel, Schedules, SystemKey};
use bevy_ecs::schedule::{InternedSystemSet, SystemWithAccess};
use bevy_ecs::system::{RunSystemError, System, SystemAccess, SystemIn, SystemStateFlags};
use bevy_ecs::utils::prelude::DebugName;
use bevy_ecs::world::DeferredWorld;
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;

use crate::ledger::{TagScope, node_heap_id};

/// The parent tag of every system's heap line.
pub const SYSTEMS_TAG: &str = "systems";

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
        // SAFETY: forwarded from our caller, with the wrapped system's own access (ours is
        // the one it returned from `initialize`).
        unsafe { self.inner.run_unsafe(input, world) }
    }

    #[cfg(feature = "hotpatching")]
    fn refresh_hotpatch(&mut self) {
        self.inner.refresh_hotpatch();
    }

    fn apply_deferred(&mut self, world: &mut World) {
        // Applying a system's commands is the system's work too.
        let _scope = TagScope::enter_id(self.tag);
        self.inner.apply_deferred(world);
    }

    fn queue_deferred(&mut self, world: DeferredWorld) {
        let _scope = TagScope::enter_id(self.tag);
        self.inner.queue_deferred(world);
    }

    fn initialize(&mut self, world: &mut World) -> SystemAccess {
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
/// back to its graph, wrappers included).
#[derive(Resource, Default)]
pub(crate) struct AttributedSystems(HashSet<(InternedScheduleLabel, SystemKey)>);

/// The heap tag of a system: `systems/<short name>`, a `/` in the name made a `:`.
fn tag_of(name: &DebugName) -> String {
    let short = name.shortname().to_string().replace('/', ":");
    let short = if short.is_empty() {
        "(unnamed)".to_owned()
    } else {
        short
    };
    format!("{SYSTEMS_TAG}/{short}")
}

/// Wraps every system of every schedule of `world` that is not wrapped yet and can be
/// (see the module docs). Cheap when there is nothing new: a schedule whose systems are
/// all initialized is skipped at once.
pub(crate) fn attribute_systems(world: &mut World) {
    let new = world.get_resource::<Schedules>().is_some_and(|schedules| {
        schedules
            .iter()
            .any(|(_, s)| !s.graph().systems.is_initialized())
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
    for (_, schedule) in schedules.iter_mut() {
        let label = schedule.label();
        let systems = &mut schedule.graph_mut().systems;
        if systems.is_initialized() {
            continue; // nothing new since the schedule was last built
        }
        let keys: Vec<SystemKey> = systems.iter().map(|(key, _, _)| key).collect();
        for key in keys {
            if done.0.contains(&(label, key)) {
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
            let tag = tag_of(&slot.system().name());
            let placeholder: Box<dyn System<In = (), Out = ()>> =
                Box::new(IntoSystem::into_system(|| {}));
            let inner = std::mem::replace(slot, SystemWithAccess::new(placeholder));
            *slot = SystemWithAccess::new(Box::new(Attributed {
                inner,
                tag: node_heap_id(&tag),
            }));
            done.0.insert((label, key));
        }
    }
    world.insert_resource(done);
    world.insert_resource(schedules);
}
