//! Programs with no `unsafe` of their own, the tracking allocator as their global
//! allocator, that must run right however they are optimised. The heap tracker once read
//! a tag trailer just past the caller's bytes, through the caller's pointer; rustc tells
//! LLVM a global allocation is exactly the size asked for, so once `dealloc` was inlined
//! into code like this, LLVM proved the read out of bounds and compiled the path to a trap
//! (SIGILL in `cargo build --release`, every run), while debug builds, Miri and the rest
//! of the suite stayed green.
//!
//! What matters is how this binary is compiled: CI runs it in debug (`cargo test`), with
//! the default release profile (`cargo test --release`) and with fat LTO and one codegen
//! unit (`cargo test --profile release-lto --test optimised_builds`). Each test failed in
//! the last two on the trailer design.

use std::alloc::System;
use std::hint::black_box;

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

/// The shape of Bevy's `PipeSystem::default_system_sets`: a vector appended to another,
/// the appended one freed right after its bytes were moved out.
#[inline(never)]
fn two(a: u128, b: u128) -> Vec<u128> {
    let mut v = vec![a];
    v.append(&mut vec![b]);
    v
}

#[test]
fn a_vector_appended_to_another() {
    assert_eq!(two(black_box(1), black_box(2)), [1, 2]);
}

/// The shape of a worker's short job: a scope, a small vector collected and dropped.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_spawned_thread_collects_in_a_scope_and_drops() {
    let live = || {
        ledger::snapshot()
            .tag("optimised/thread")
            .map_or(0, |f| f.heap_live)
    };
    let before = live();
    std::thread::spawn(|| {
        let _s = ledger::scope("optimised/thread");
        let v: Vec<u16> = (0..40).collect();
        drop(v);
    })
    .join()
    .unwrap();
    assert_eq!(live(), before, "whatever was allocated was credited back");
}

/// A shrinking `realloc` and the free right after it, through the raw `std::alloc` API:
/// LLVM folds `free(realloc(q, n))` into `free(q)`, so in release the tracker sees the
/// 1 MiB block freed with the new size (3 bytes). It credited the size it was given, and
/// the tag kept 1,048,573 bytes for ever; it credits what it charged now.
#[test]
fn a_shrinking_realloc_then_free_gives_back_all_it_charged() {
    let tag = "optimised/realloc";
    let live = || ledger::snapshot().tag(tag).map_or(0, |f| f.heap_live);
    let before = live();
    {
        let _s = ledger::scope(tag);
        shrink_then_free(black_box(1 << 20));
    }
    assert_eq!(live(), before, "the block's bytes were credited back");
}

#[inline(never)]
fn shrink_then_free(size: usize) {
    use std::alloc::{Layout, alloc, dealloc, realloc};
    let big = Layout::from_size_align(size, 8).unwrap();
    let small = Layout::from_size_align(3, 8).unwrap();
    // SAFETY: a non-zero layout; each pointer is freed once, with its layout.
    unsafe {
        let q = black_box(alloc(big));
        let r = realloc(q, big, 3);
        dealloc(r, small);
    }
}

#[cfg(feature = "bevy")]
mod bevy_app {
    //! After Bevy's own `many_components` stress test, smaller: entities with components
    //! registered at run time, and systems piped from a closure that hands each its
    //! component list (the pipe's default system sets once trapped at start-up).

    use std::alloc::Layout;
    use std::mem::ManuallyDrop;
    use std::num::Wrapping;

    use bevy_app::{App, Update};
    use bevy_ecs::component::{
        ComponentCloneBehavior, ComponentDescriptor, ComponentId, StorageType,
    };
    use bevy_ecs::prelude::*;
    use bevy_ecs::ptr::{OwningPtr, PtrMut};
    use bevy_ecs::system::QueryParamBuilder;
    use bevy_ecs::world::FilteredEntityMut;
    use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};
    use nebula_memory::ledger::Budget;

    /// A small deterministic generator (the stress test's seeded RNG's role).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    /// Some menial work over the components a system was given.
    fn base_system(components: In<Vec<ComponentId>>, mut query: Query<FilteredEntityMut>) {
        for mut entity in &mut query {
            let mut total = Wrapping(0u8);
            for (exponent, &id) in (1u32..).zip(components.0.iter()) {
                let Some(ptr) = entity.get_by_id(id) else {
                    continue;
                };
                // SAFETY: every component of this world is a `u8`.
                let value: u8 = unsafe { *ptr.deref::<u8>() };
                total += Wrapping(value.wrapping_pow(exponent));
            }
            for &id in &components.0 {
                if let Some(ptr) = entity.get_mut_by_id(id) {
                    // SAFETY: as above.
                    *unsafe { ptr.with_type::<u8>() } = total.0;
                }
            }
        }
    }

    #[test]
    fn an_app_with_piped_systems_and_a_tag_budget_runs() {
        let (entities, components, systems) = (500, 40, 40);
        let mut rng = Lcg(42);
        let mut app = App::new();
        app.add_plugins(MemoryPlugin {
            tag_budgets: vec![("optimised/stress", Budget::Warn(1 << 30))],
            ..MemoryPlugin::default()
        });
        let world = app.world_mut();
        let ids: Vec<ComponentId> = (0..components)
            .map(|i| {
                // SAFETY: a `u8` needs no drop and is `Send + Sync`.
                let descriptor = unsafe {
                    ComponentDescriptor::new_with_layout(
                        format!("Component{i}"),
                        StorageType::Table,
                        Layout::new::<u8>(),
                        None,
                        true,
                        false,
                        ComponentCloneBehavior::Default,
                        None,
                    )
                };
                world.register_component_with_descriptor(descriptor)
            })
            .collect();
        let mut schedule = Schedule::new(Update);
        for _ in 0..systems {
            let n = 1 + rng.below(9) as usize;
            let access: Vec<ComponentId> = (0..n)
                .map(|_| ids[rng.below(components) as usize])
                .collect();
            let writes: Vec<bool> = (0..n).map(|_| rng.below(2) == 0).collect();
            let built = access.clone();
            let system = (QueryParamBuilder::new(move |builder| {
                for (&id, &write) in built.iter().zip(&writes) {
                    if write {
                        builder.mut_id(id);
                    } else {
                        builder.ref_id(id);
                    }
                }
            }),)
                .build_state(world)
                .build_any_system(base_system);
            schedule.add_systems((move || access.clone()).pipe(system));
        }
        for _ in 0..entities {
            let n = 1 + rng.below(9) as usize;
            let mut these: Vec<ComponentId> = (0..n)
                .map(|_| ids[rng.below(components) as usize])
                .collect();
            these.sort();
            these.dedup();
            let mut values: Vec<ManuallyDrop<u8>> = these
                .iter()
                .map(|_| ManuallyDrop::new(rng.below(255) as u8))
                .collect();
            // SAFETY: the values are `ManuallyDrop` and not used after being moved into
            // the world; their vector still frees its buffer.
            let ptrs: Vec<OwningPtr<'_>> = values
                .iter_mut()
                .map(|v| unsafe { PtrMut::from(v).promote() })
                .collect();
            let mut entity = world.spawn_empty();
            // SAFETY: the ids are this world's and each pointer holds an initialised `u8`.
            unsafe { entity.insert_by_ids(&these, ptrs.into_iter()) };
        }
        app.add_schedule(schedule);
        for _ in 0..10 {
            app.update();
        }
        let ledger = app.world().resource::<MemoryLedger>();
        assert!(ledger.frame() >= 10);
        assert!(
            ledger.tags().any(|(tag, _)| tag.starts_with("systems/")),
            "the systems have lines in the ledger"
        );
    }
}
