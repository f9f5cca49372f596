// An allocation made inside a scope cannot be returned out of it.
use nebula_memory::Arena;
use nebula_memory::{MemoryArena, scratch_pool};

fn main() {
    let mut arena = MemoryArena::new(scratch_pool());
    let escaped: &mut u32 = arena.scope(|a| a.alloc_val(1u32));
    *escaped += 1;
}
