// The scratch arena cannot be used from another thread.
use nebula_memory::Arena;
use nebula_memory::with_scratch;

fn main() {
    with_scratch(|s| {
        std::thread::scope(|t| {
            t.spawn(|| s.alloc_val(1u8));
        });
    });
}
