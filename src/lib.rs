//! # nebula_memory
//!
//! The memory system AAA engines build by hand, for Rust game engines (Bevy first): global
//! block pools, paged growable arenas on top of them, per-frame scratch memory that resets
//! in O(1), and the figures to size it all.
//!
//! ## Which arena do I use?
//!
//! | memory for… | use | lives | threads | freed by | who frees it |
//! |---|---|---|---|---|---|
//! | a function's temporaries | [`with_scratch`] | the closure | the calling thread | the closure's return | the crate |
//! | a Bevy system's temporaries | `bevy::Scratch` | the system run | the system's thread | the system's return | the crate |
//! | one frame, one thread | [`MemoryArena`] | until `reset` | one at a time (`Send`) | [`reset`](MemoryArena::reset) (`&mut`) | your frame loop |
//! | one frame, many threads | [`SharedArena`] | until `reset` | any, at once | [`reset`](SharedArena::reset) (`&mut`) | your frame loop |
//! | frame N's results, read in frame N+1 | [`DoubleBufferedArena`] (Bevy: `FrameMemory`) | two frames | any | [`swap`](DoubleBufferedArena::swap) (`&mut`) | your frame loop / the Bevy plugin |
//! | the level | [`game_arena`] (Bevy: `GameMemory`) | until level change | any | [`GameArena::wait_and_reset`] (waits for guards) | you, on level change |
//! | the engine's lifetime | [`engine_arena`] (Bevy: `EngineMemory`) | the process | any | never | — |
//! | the classic fixed frame arena | [`FrameArena`], [`thread_arena_alloc`] | until reset | one | `unsafe reset` / the thread's next frame | you / the Bevy plugin |
//!
//! Every arena speaks the [`Arena`] trait (`use nebula_memory::prelude::*;`): values,
//! slices, strings and formatted text, each with a `try_` form. `&MemoryArena`,
//! `&SharedArena` and Bevy's `&Scratch` are `allocator_api2` allocators, so collections
//! live in them: `allocator_api2::vec::Vec::new_in(&arena)`,
//! `hashbrown::HashMap::new_in(&arena)` ([`allocator_api2`] is re-exported).
//!
//! Underneath, a [`MemoryPool`] is one reserved region of address space split into
//! 16-byte-aligned [`MemoryBlock`]s in O(1) (TLSF); the three global pools are
//! [`engine_pool`], [`game_pool`] and [`scratch_pool`]. Arenas take whole blocks from a
//! pool and bump-allocate inside them (a handful of instructions per allocation).
//!
//! ## A game loop
//!
//! ```
//! use nebula_memory::prelude::*;
//!
//! struct Enemy { pos: (f32, f32), hp: u32 }
//!
//! // Loaded once: lives as long as the engine.
//! let names: &'static str = engine_arena().alloc_str("goblin");
//!
//! let mut frame = MemoryArena::new(game_pool());
//! for tick in 0..3 {
//!     // This frame's data: no heap allocation, freed all at once below.
//!     let enemies = frame.alloc_slice_fill_with(100, |i| Enemy {
//!         pos: (i as f32, tick as f32),
//!         hp: 10,
//!     });
//!     let mut visible = allocator_api2::vec::Vec::new_in(&frame);
//!     visible.extend(enemies.iter().filter(|e| e.pos.0 < 50.0).map(|e| e.hp));
//!     // A helper's temporaries, gone when the closure returns.
//!     let nearest = with_scratch(|scratch| {
//!         let d = scratch.alloc_slice_from_iter(enemies.iter().map(|e| e.pos.0 + e.pos.1));
//!         d.iter().cloned().fold(f32::MAX, f32::min)
//!     });
//!     assert_eq!((visible.len(), nearest), (50, tick as f32));
//!     drop(visible);
//!     frame.reset(); // everything from this frame, in O(1) when the frame is steady
//! }
//! assert_eq!(names, "goblin");
//! ```
//!
//! ## Where did my memory go?
//!
//! Give an arena a tag (`ArenaConfig::default().tag("render/meshing")`) and every block it
//! takes is charged to that tag in the process-wide [`ledger`], with budgets that warn or
//! refuse per tag, a tree table, a CSV row per tag per frame and, with the `tracy`
//! feature, Tracy's memory view. The bump path pays nothing for it.
//!
//! With Bevy, add `nebula_memory::bevy::MemoryPlugin` and take a `Scratch` parameter in
//! your systems; see the `nebula_memory::bevy` module. `ARCHITECTURE.md` describes the
//! layers and their invariants.
//!
//! ## `fork()`
//!
//! On unix the crate takes its process-wide locks (the pools', the ledger's, the scratch
//! stacks') around `fork()` with `pthread_atfork` handlers, so a child of a multi-threaded
//! process can use the ledger, the pools, scratch memory and the heap tracker. An arena
//! (or a `GameArena` guard) another thread was using at the fork is that thread's, as a
//! mutex of the program's would be: the child cannot use it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod alloc_api;
mod arena;
mod arena_trait;
#[cfg(feature = "bevy")]
#[cfg_attr(docsrs, doc(cfg(feature = "bevy")))]
pub mod bevy;
mod block;
mod deprecated;
mod error;
mod fork;
mod frame_arena;
mod global;
mod heap;
pub mod ledger;
mod maintain;
mod per_thread;
pub mod poison;
mod pool;
mod shared;
mod vm;

pub use arena::{
    ArenaConfig, ArenaScope, ArenaStats, Checkpoint, HotCursor, MemoryArena, heap_fallbacks,
};

pub use arena_trait::{Arena, ArenaBox};
pub use frame_arena::{FrameArena, FrameArenaStats};
pub use per_thread::{
    DEFAULT_THREAD_ARENA_CAPACITY, ThreadArenasStats, all_thread_arenas_stats,
    end_thread_arena_frame, set_thread_arena_capacity, thread_arena_alloc, thread_arena_frame,
    thread_arena_reset, thread_arena_stats,
};
pub use per_thread::{
    SCRATCH_FIRST_BLOCK, SCRATCH_IDLE_PASSES, ScratchBatch, ScratchStats, scratch_batch,
    with_scratch, with_scratch_stats,
};
pub use shared::{
    DoubleBufferedArena, FrameHandle, GameArena, GameArenaGuard, SharedArena, engine_arena,
    game_arena,
};

pub use block::MemoryBlock;
pub use error::{AllocError, PoolError};
pub use global::{
    GlobalPoolConfig, configure_global_pools, engine_pool, game_pool, global_pool_config,
    scratch_pool,
};
pub use heap::TrackingAllocator;
pub use maintain::maintain_global_pools;
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

/// README.md's examples, compiled and run as doctests so they cannot rot. Each is a whole
/// program, `fn main` written out, that compiles pasted into a fresh `main.rs`: no
/// statements left to rustdoc's implicit `main`, no hidden `# ` lines (GitHub shows them).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
