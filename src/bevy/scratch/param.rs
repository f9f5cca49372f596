//! How `Scratch` and `TaggedScratch` plug into Bevy's ECS: system parameters whose access
//! is a read of their resource, and whose `get_param` claims one of its arenas.

use std::marker::PhantomData;

use bevy_ecs::change_detection::Tick;
use bevy_ecs::prelude::*;
use bevy_ecs::system::{
    ReadOnlySystemParam, SystemAccess, SystemMeta, SystemParam, SystemParamValidationError,
};
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;

use super::{
    Claim, Scratch, ScratchArenas, ScratchTag, TaggedFrameEnds, TaggedScratch, TaggedScratchArenas,
};
use crate::arena::ArenaConfig;

// SAFETY: access is exactly `Res<ScratchArenas>`'s (a read of that resource), delegated to
// its implementation; `get_param` reads the resource and claims a slot through its
// interior (state-flagged, lock-guarded) arena list, like a `Res<Mutex<_>>` would.
unsafe impl SystemParam for Scratch<'_> {
    type State = <Res<'static, ScratchArenas> as SystemParam>::State;
    type Item<'w, 's> = Scratch<'w>;

    fn init_state(world: &mut World) -> Self::State {
        Res::<ScratchArenas>::init_state(world)
    }

    fn init_access(
        state: &Self::State,
        system_meta: &mut SystemMeta,
        system_access: &mut SystemAccess,
        world: &mut World,
    ) {
        Res::<ScratchArenas>::init_access(state, system_meta, system_access, world);
    }

    unsafe fn get_param<'w, 's>(
        state: &'s mut Self::State,
        system_meta: &SystemMeta,
        world: UnsafeWorldCell<'w>,
        change_tick: Tick,
    ) -> Result<Self::Item<'w, 's>, SystemParamValidationError> {
        // SAFETY: forwarded from our caller, with the access `Res` registered.
        let arenas =
            unsafe { Res::<ScratchArenas>::get_param(state, system_meta, world, change_tick) }
                .map_err(|_| {
                    SystemParamValidationError::invalid::<Self>(
                        "no ScratchArenas resource: add nebula_memory::bevy::MemoryPlugin",
                    )
                })?
                .into_inner();
        let line = arenas.line_now();
        Ok(Scratch {
            claim: Claim::new::<Self>(&arenas.owner, line)?,
            owner: &arenas.owner,
            line,
        })
    }
}

// SAFETY: `Scratch` only reads the world (see above).
unsafe impl ReadOnlySystemParam for Scratch<'_> {}

// SAFETY: as for `Scratch`, with `Res<TaggedScratchArenas<T>>`'s access. `init_state`
// inserts the resource (it has `&mut World`) before registering that access.
unsafe impl<T: ScratchTag> SystemParam for TaggedScratch<'_, T> {
    type State = <Res<'static, TaggedScratchArenas<T>> as SystemParam>::State;
    type Item<'w, 's> = TaggedScratch<'w, T>;

    fn init_state(world: &mut World) -> Self::State {
        if !world.contains_resource::<TaggedScratchArenas<T>>() {
            let config = world
                .get_resource::<ScratchArenas>()
                .map_or_else(ArenaConfig::default, |a| a.owner.config());
            world.insert_resource(TaggedScratchArenas::<T>::with_config(config));
        }
        // Whoever inserted the resource, the frame end reaches it.
        world
            .get_resource_or_init::<TaggedFrameEnds>()
            .register::<T>();
        Res::<TaggedScratchArenas<T>>::init_state(world)
    }

    fn init_access(
        state: &Self::State,
        system_meta: &mut SystemMeta,
        system_access: &mut SystemAccess,
        world: &mut World,
    ) {
        Res::<TaggedScratchArenas<T>>::init_access(state, system_meta, system_access, world);
    }

    unsafe fn get_param<'w, 's>(
        state: &'s mut Self::State,
        system_meta: &SystemMeta,
        world: UnsafeWorldCell<'w>,
        change_tick: Tick,
    ) -> Result<Self::Item<'w, 's>, SystemParamValidationError> {
        // SAFETY: forwarded from our caller, with the access `Res` registered.
        let arenas = unsafe {
            Res::<TaggedScratchArenas<T>>::get_param(state, system_meta, world, change_tick)
        }
        .map_err(|_| {
            SystemParamValidationError::invalid::<Self>("its TaggedScratchArenas was removed")
        })?
        .into_inner();
        Ok(TaggedScratch {
            claim: Claim::new::<Self>(&arenas.owner, None)?,
            owner: &arenas.owner,
            _tag: PhantomData,
        })
    }
}

// SAFETY: `TaggedScratch` only reads the world once its state exists (see above).
unsafe impl<T: ScratchTag> ReadOnlySystemParam for TaggedScratch<'_, T> {}
