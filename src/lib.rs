//! # nebula_memory
//!
//! The memory system AAA engines build by hand, for Rust game engines (Bevy first):
//!
//! - [`MemoryPool`]: a reserved region of address space split into 16-byte-aligned
//!   [`MemoryBlock`]s in O(1) (TLSF), coalescing on release and giving memory back to the OS.
//!   Three global pools: [`engine_pool`], [`game_pool`], [`scratch_pool`].
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

mod block;
mod error;
mod global;
pub mod poison;
mod pool;
mod vm;

pub use block::MemoryBlock;
pub use error::{AllocError, PoolError};
pub use global::{GlobalPoolConfig, configure_global_pools, engine_pool, game_pool, scratch_pool};
pub use pool::{MemoryPool, PoolStats};
