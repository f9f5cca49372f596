//! The arenas the crate keeps on each thread's behalf: the nestable scratch stack behind
//! [`with_scratch`], and the thread arenas behind [`thread_arena_alloc`] (the classic
//! per-thread frame arena API).
//!
//! Both live in thread-locals and are used only by their own thread: no other thread ever
//! writes them (see each module for how frame ends and statistics reach them anyway). The
//! scratch arenas of a Bevy resource are the exception, and [`owner`] says how: they
//! belong to their owner, not to a thread, and any thread may claim a free one.

mod owner;
mod scratch;
mod slot;
mod thread_arena;

#[cfg(feature = "bevy")]
pub(crate) use owner::ScratchOwner;
pub(crate) use scratch::trim_idle;
pub use scratch::{
    SCRATCH_FIRST_BLOCK, ScratchBatch, ScratchStats, scratch_batch, with_scratch,
    with_scratch_stats,
};
#[cfg(feature = "bevy")]
pub(crate) use scratch::{batch_in, claim_held, release};
pub use slot::SCRATCH_IDLE_PASSES;
#[cfg(feature = "bevy")]
pub(crate) use slot::{Slot, slot_ptr};
pub use thread_arena::{
    DEFAULT_THREAD_ARENA_CAPACITY, ThreadArenasStats, all_thread_arenas_stats,
    end_thread_arena_frame, set_thread_arena_capacity, thread_arena_alloc, thread_arena_frame,
    thread_arena_reset, thread_arena_stats,
};
