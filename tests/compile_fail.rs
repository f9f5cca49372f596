//! Compile-time guarantees, proven with trybuild: scope, guard and scratch allocations
//! cannot escape, scratch memory and a thread's part of a shared arena cannot reach another
//! thread, `reset` cannot run while a borrow or a collection is alive (nor the game arena's
//! while an allocation from a guard is), a double-buffered reference cannot live across
//! `swap`, a Bevy `Scratch` item cannot reach another thread (a spawned closure, a
//! `par_iter` body), and types with destructors are refused by `alloc_val`.
//!
//! The expected compiler messages (`tests/ui/*.stderr`) are those of the stable toolchain
//! CI uses; `TRYBUILD=overwrite cargo test --test compile_fail` refreshes them.

#[test]
#[cfg_attr(
    any(miri, nebula_asan),
    ignore = "compiler messages are stable-toolchain specific"
)]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    // A passing case makes trybuild run `cargo build` rather than `cargo check`, which the
    // drop-glue refusal (a post-monomorphisation error) needs.
    t.pass("tests/ui/ok_usage.rs");
    t.compile_fail("tests/ui/scope_escape.rs");
    t.compile_fail("tests/ui/guard_escape.rs");
    t.compile_fail("tests/ui/scratch_escape.rs");
    t.compile_fail("tests/ui/scratch_to_thread.rs");
    t.compile_fail("tests/ui/reset_while_borrowed.rs");
    t.compile_fail("tests/ui/reset_while_collection_alive.rs");
    t.compile_fail("tests/ui/drop_glue_refused.rs");
    t.compile_fail("tests/ui/frame_ref_outlives_swap.rs");
    t.compile_fail("tests/ui/game_guard_escape.rs");
    #[cfg(feature = "bevy")]
    {
        t.compile_fail("tests/ui/scratch_param_to_thread.rs");
        t.compile_fail("tests/ui/scratch_in_par_iter.rs");
    }
}
