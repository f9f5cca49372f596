// An allocation made through a scope guard cannot outlive the guard.
use nebula_memory::Arena;
use nebula_memory::{MemoryArena, scratch_pool};

fn main() {
    let mut arena = MemoryArena::new(scratch_pool());
    let escaped;
    {
        let guard = arena.scope_guard();
        escaped = guard.alloc_val(1u32);
    }
    *escaped += 1;
}
