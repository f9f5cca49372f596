// A type with a destructor is refused: the arena would never run it. `alloc_boxed` is the
// way to store such a value.
use nebula_memory::Arena;
use nebula_memory::{MemoryArena, scratch_pool};

fn main() {
    let arena = MemoryArena::new(scratch_pool());
    let s = arena.alloc_val(String::from("leaked"));
    s.push('!');
}
