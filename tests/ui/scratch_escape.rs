// Scratch memory cannot leave the `with_scratch` call that allocated it.
use nebula_memory::Arena;
use nebula_memory::with_scratch;

fn main() {
    let escaped = with_scratch(|s| s.alloc_slice(16, 0u8));
    escaped[0] = 1;
}
