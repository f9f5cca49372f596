// A `Scratch` item (and so its memory) cannot be used from a closure that runs on
// another thread.
use nebula_memory::Arena;
use nebula_memory::bevy::Scratch;

fn system(scratch: Scratch) {
    std::thread::scope(|s| {
        s.spawn(|| scratch.alloc_val(1u8));
    });
}

fn main() {
    let _ = bevy_ecs::system::IntoSystem::into_system(system);
}
