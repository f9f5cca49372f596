// A thread's part of a shared arena cannot be handed to another thread.
use nebula_memory::Arena;
use nebula_memory::{SharedArena, scratch_pool};

fn main() {
    let shared = SharedArena::new(scratch_pool());
    std::thread::scope(|s| {
        let mine = shared.this_thread();
        s.spawn(move || mine.alloc_val(1u8));
    });
}
