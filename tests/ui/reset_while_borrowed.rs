// `reset` cannot run while an allocation is borrowed.
use nebula_memory::Arena;
use nebula_memory::{MemoryArena, scratch_pool};

fn main() {
    let mut arena = MemoryArena::new(scratch_pool());
    let value = arena.alloc_val(7u64);
    arena.reset();
    println!("{value}");
}
