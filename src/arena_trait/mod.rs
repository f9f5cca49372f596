//! [`Arena`]: the one interface every arena of the crate speaks, and the typed helpers
//! written once on top of it.
//!
//! An arena kind implements one method, [`Arena::try_alloc`] (and, where it can do
//! better than the defaults, `alloc`, `pop` and `realloc`). Everything else (values,
//! slices, strings, formatted text, [`ArenaBox`]) is a provided method here, so code that
//! takes `&impl Arena` works with a [`MemoryArena`](crate::MemoryArena), a
//! [`SharedArena`](crate::SharedArena), a [`FrameArena`](crate::FrameArena), the arena of
//! [`with_scratch`](crate::with_scratch) and everything that derefs to one of them.
//!
//! `MemoryArena`, `SharedArena` and `FrameArena` implement it; every other arena derefs to
//! one. The `allocator_api2` `Allocator` is a separate matter (`alloc_api`).
//!
//! **Errors, one rule.** Every helper has a `try_` form returning
//! [`AllocError`](crate::AllocError) and a panicking form that panics with that error's
//! message (it names the pool and the size), at the caller's line (`#[track_caller]`).
//!
//! **Drop policy.** An arena frees memory without running destructors, so every helper
//! here that returns a plain `&mut` refuses, **at compile time**, a type with drop glue
//! (the build fails with a message pointing to [`Arena::alloc_boxed`]). `alloc_boxed`
//! accepts any type and returns an [`ArenaBox`], which runs the destructor when dropped.
//!
//! The trait is `unsafe` because the helpers trust what `try_alloc` returns:
//!
//! ```compile_fail,E0200
//! // Without `unsafe`, an implementation does not compile: the helpers trust it.
//! struct Liar;
//! impl nebula_memory::Arena for Liar {
//!     fn try_alloc(
//!         &self,
//!         _: std::alloc::Layout,
//!     ) -> Result<std::ptr::NonNull<u8>, nebula_memory::AllocError> {
//!         Ok(std::ptr::NonNull::dangling())
//!     }
//!     fn pool_name(&self) -> &'static str {
//!         "liar"
//!     }
//! }
//! ```
//!
//! Files: `arena` (the trait, and the [`ArenaBox`] type its boxed helpers return), `boxed`
//! (what an `ArenaBox` offers its holder), `growing` (the buffer behind
//! `alloc_slice_from_iter` and `alloc_fmt`), `drop_check` (the drop policy).

mod arena;
mod boxed;
mod drop_check;
mod growing;

pub use arena::{Arena, ArenaBox};
