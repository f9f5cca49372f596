//! The drop policy, checked at compile time: a helper that hands out a plain `&mut T`
//! refuses a `T` with drop glue, whose destructor the arena would never run.

/// Fails the build when `$t` has drop glue: its destructor would never run.
macro_rules! refuse_drop {
    ($t:ty) => {
        const {
            assert!(
                !std::mem::needs_drop::<$t>(),
                "this type has a destructor, which an arena never runs: use alloc_boxed \
                 (an ArenaBox drops its value)"
            )
        }
    };
}
pub(super) use refuse_drop;
