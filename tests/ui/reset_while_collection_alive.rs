// `reset` cannot run while a collection allocates from the arena.
use allocator_api2::vec::Vec;
use nebula_memory::{MemoryArena, scratch_pool};

fn main() {
    let mut arena = MemoryArena::new(scratch_pool());
    let mut v = Vec::new_in(&arena);
    v.push(1u32);
    arena.reset();
    v.push(2);
}
