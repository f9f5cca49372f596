// The patterns the failing cases get wrong, done right: this must compile and run.
use nebula_memory::Arena;
use allocator_api2::vec::Vec;
use nebula_memory::{MemoryArena, scratch_pool, with_scratch};

fn main() {
    let mut arena = MemoryArena::new(scratch_pool());
    let n = arena.scope(|a| *a.alloc_val(1u32) + 1);
    assert_eq!(n, 2);
    {
        let mut v = Vec::new_in(&arena);
        v.push(1u32);
    }
    let boxed = arena.alloc_boxed(String::from("dropped properly"));
    assert_eq!(boxed.len(), 16);
    drop(boxed);
    arena.reset();
    let len = with_scratch(|s| s.alloc_slice(16, 0u8).len());
    assert_eq!(len, 16);
}
