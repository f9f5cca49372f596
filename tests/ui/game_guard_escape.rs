// An allocation from the game arena cannot outlive the guard it came through, so it
// cannot be alive when the arena is reset.
use nebula_memory::Arena;
fn main() {
    let level = nebula_memory::game_arena();
    let guard = level.read();
    let hp = guard.alloc_val(100u32);
    drop(guard);
    level.wait_and_reset();
    assert_eq!(*hp, 100);
}
