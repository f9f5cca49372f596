//! The once-a-frame upkeep: the crate's idle per-thread arenas give memory back to the
//! pools, then the pools give free pages back to the OS.
//!
//! It sits above the per-thread arenas and the global pools because it drives both; the
//! Bevy plugin calls it at the end of every frame, other games call it once per frame. It
//! is needed because a steady arena makes no pool call at all: without a clock of their
//! own, the pools would never notice that their free memory has stayed idle.

use crate::global;
use crate::per_thread;

/// The once-a-frame upkeep. First, every [`SCRATCH_IDLE_PASSES`](crate::SCRATCH_IDLE_PASSES)
/// calls, each scratch arena the crate keeps on a thread's behalf (those of
/// [`with_scratch`](crate::with_scratch) and of the Bevy `Scratch`) that is free and was
/// idle, or held more than twice what it needed, over those calls gives all of its memory
/// back to the scratch pool; then [`MemoryPool::maintain`](crate::MemoryPool::maintain)
/// runs on each global pool that exists, giving free pages back to the OS where release
/// pressure has lasted past the purge delay (but not those a recent peak needed while it
/// is recalled: see [`MemoryPool::set_recall_window`](crate::MemoryPool::set_recall_window)).
/// Call it once per frame (the Bevy plugin does);
/// cheap when nothing is due: O(threads × scratch arenas per thread) at a window's end,
/// O(threads) otherwise, plus O(1) per pool, or O(free ranges) where a decommit pass runs.
///
/// ```
/// use nebula_memory::{Arena, maintain_global_pools, with_scratch, SCRATCH_IDLE_PASSES};
///
/// // A one-off spike one level deep...
/// with_scratch(|_| with_scratch(|inner| { inner.alloc_slice(8 << 20, 0u8); }));
/// // ...is given back within two windows of idle frames.
/// for _ in 0..2 * SCRATCH_IDLE_PASSES {
///     maintain_global_pools();
/// }
/// ```
pub fn maintain_global_pools() {
    per_thread::trim_idle();
    global::maintain_pools();
}
