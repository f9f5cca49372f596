// A plain reference from a double-buffered arena cannot live across `swap`.
use nebula_memory::{DoubleBufferedArena, scratch_pool};

fn main() {
    let mut frames = DoubleBufferedArena::new(scratch_pool());
    let h = frames.store(1u32);
    let value: &u32 = frames.get(h).unwrap();
    frames.swap();
    assert_eq!(*value, 1);
}
