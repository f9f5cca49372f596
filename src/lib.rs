//! # nebula_memory
//!
//! The memory system AAA engines build by hand, for Rust game engines (Bevy first):
//!
//! - [`MemoryPool`]: a reserved region of address space split into 16-byte-aligned
//!   [`MemoryBlock`]s in O(1) (TLSF), coalescing on release and giving memory back to the OS.
//!   Three global pools: [`engine_pool`], [`game_pool`], [`scratch_pool`].
//! - [`MemoryArena`]: a paged bump arena over one pool's blocks: a few instructions per
//!   allocation, LIFO [`pop`](MemoryArena::pop), in-place [`realloc`](MemoryArena::realloc)
//!   of the newest allocation, checkpoints and safe scopes, and a `reset` that keeps the one
//!   block the next frame needs. `&MemoryArena` is an `allocator_api2` allocator.
//! - [`FrameArena`] and the per-thread frame arena ([`thread_arena_alloc`]): the classic
//!   fixed-capacity frame arena API, on the scratch pool; and [`with_scratch`] for safe,
//!   nestable scratch space.
//!
//! See `ARCHITECTURE.md` for the layers and their invariants.
//!
//! ```
//! use nebula_memory::MemoryPool;
//!
//! let pool = MemoryPool::new("example", 4 << 20).unwrap();
//! let block = pool.allocate_block(16 * 1024).unwrap();
//! // SAFETY: from this pool, not used afterwards.
//! unsafe { pool.free_block(block) };
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod alloc_api;
mod arena;
#[cfg(feature = "bevy")]
pub mod bevy;
mod block;
mod double;
mod error;
mod frame;
mod global;
mod interface;
pub mod poison;
mod pool;
mod scratch;
mod shared;
mod thread_arena;
mod vm;

pub use arena::{ArenaConfig, ArenaScope, ArenaStats, Checkpoint, MemoryArena, heap_fallbacks};
pub use double::{DoubleBufferedArena, FrameHandle};
pub use frame::{FrameArena, FrameArenaStats};
pub use interface::{Arena, ArenaBox};
pub use scratch::with_scratch;
pub use shared::{GameArena, GameArenaGuard, SharedArena, engine_arena, game_arena};
pub use thread_arena::{
    DEFAULT_THREAD_ARENA_CAPACITY, ThreadArenasStats, all_thread_arenas_stats,
    end_thread_arena_frame, set_thread_arena_capacity, thread_arena_alloc, thread_arena_frame,
    thread_arena_reset, thread_arena_stats,
};

pub use block::MemoryBlock;
pub use error::{AllocError, PoolError};
pub use global::{
    GlobalPoolConfig, configure_global_pools, engine_pool, game_pool, global_pool_config,
    maintain_global_pools, scratch_pool,
};
pub use pool::{MemoryPool, PoolStats};

/// The names most code needs, with the [`Arena`] trait that brings the typed helpers:
/// `use nebula_memory::prelude::*;`.
///
/// ```
/// use nebula_memory::prelude::*;
///
/// let frame = MemoryArena::new(scratch_pool());
/// let ids = frame.alloc_slice_copy(&[1u32, 2, 3]);
/// let mut list = allocator_api2::vec::Vec::new_in(&frame);
/// list.extend(ids.iter().map(|i| i * 10));
/// assert_eq!(list.iter().sum::<u32>(), 60);
/// ```
pub mod prelude {
    pub use crate::{
        AllocError, Arena, ArenaBox, ArenaConfig, Checkpoint, DoubleBufferedArena, FrameArena,
        FrameHandle, MemoryArena, MemoryPool, SharedArena, engine_arena, engine_pool, game_arena,
        game_pool, scratch_pool, with_scratch,
    };
    pub use allocator_api2;
}

/// The `allocator-api2` crate (0.2) whose `Allocator` trait the arenas implement: its
/// `vec::Vec`, `boxed::Box` and friends take an arena with `new_in(&arena)`. Re-exported
/// so that collection code needs no extra dependency with a matching version.
pub use allocator_api2;

/// README.md's example, compiled and run as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
