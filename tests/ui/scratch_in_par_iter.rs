// Scratch memory cannot be reached from the closure of `par_iter`, which runs on the
// compute pool's threads.
use nebula_memory::Arena;
use bevy_ecs::prelude::*;
use nebula_memory::bevy::Scratch;

#[derive(Component)]
struct Item(u32);

fn system(scratch: Scratch, items: Query<&Item>) {
    items.par_iter().for_each(|item| {
        scratch.alloc_val(item.0);
    });
}

fn main() {
    let _ = IntoSystem::into_system(system);
}
