//! The thread arenas: an arena for each thread, on the scratch pool, created on the
//! thread's first [`thread_arena_alloc`] and given back when the thread exits (the classic
//! per-thread frame arena of engines; not a [`FrameArena`](crate::FrameArena)).
//!
//! Each takes memory as it uses it: a [`MemoryArena`] that starts with a 32 KiB block and
//! grows through its chain like any other, capped at the capacity in force when it was made
//! ([`set_thread_arena_capacity`]; 4 MiB by default, a `held_limit` in its config refuses
//! past it). So 64 threads that allocate a little hold a little each, and the scratch pool
//! serves as many threads as their use fits, not as many as their caps fit.
//!
//! The classic API resets only the calling thread's arena ([`thread_arena_reset`]), so a
//! frame-end reset running on one thread could never reach the others. Instead of reaching
//! into other threads' arenas, the frame end is a process-wide **frame number**:
//! [`end_thread_arena_frame`] advances it, and each thread's arena, at its own thread's
//! next [`thread_arena_alloc`], sees that its contents belong to an earlier frame and
//! resets itself first. No thread ever writes another thread's arena, so ending the frame
//! is safe from any thread at any time: it cannot take memory from under a thread in the
//! middle of using it, nor race with its allocations. What a pointer from
//! `thread_arena_alloc` may rely on is stated there. For the same reason a thread's arena
//! gives a spike back only when that thread allocates again (its reset follows the reset
//! policy, like every arena's): memory of its last frame is still valid until then.
//!
//! Every thread's arena is also entered in a registry, for the all-threads statistics,
//! which the owning thread publishes in atomics as it allocates. The registry costs the
//! allocation path nothing else: a thread finds its own arena through its thread-local;
//! the registry's lock is taken when a thread's arena is created or destroyed and by the
//! statistics.

use std::alloc::Layout;
use std::cell::{Cell, OnceCell, UnsafeCell};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};

use crate::fork::{Level, Lock};

use crate::arena::{ArenaConfig, MemoryArena, Reports};
use crate::frame_arena::FrameArenaStats;
use crate::global::scratch_pool;

/// The most each thread arena may hold unless changed by
/// [`set_thread_arena_capacity`]: 4 MiB. An arena takes memory as it uses it (32 KiB
/// first), so the cap costs nothing until a thread needs it: 64 threads allocating a few
/// KiB a frame hold 32 KiB each, 2 MiB of the 64 MiB scratch pool. Past what the pool can
/// serve, `thread_arena_alloc` returns `None`; size the scratch pool
/// ([`configure_global_pools`](crate::configure_global_pools)) for threads × their peak.
pub const DEFAULT_THREAD_ARENA_CAPACITY: usize = 4 << 20;

/// Usable bytes of a thread arena's first block.
const FIRST_BLOCK: usize = 32 * 1024;

static THREAD_ARENA_CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_THREAD_ARENA_CAPACITY);

/// Sets the capacity (the cap on memory held) of thread arenas created from now on
/// (threads that already have one keep theirs). O(1).
///
/// ```
/// nebula_memory::set_thread_arena_capacity(1 << 20);
/// ```
pub fn set_thread_arena_capacity(bytes: usize) {
    THREAD_ARENA_CAPACITY.store(bytes, Relaxed);
}

/// Frames ended so far (see [`end_thread_arena_frame`]).
static FRAME: AtomicU64 = AtomicU64::new(0);

/// One thread's arena, shared with the registry.
struct ThreadArena {
    /// Used only by the owning thread, through `&` for allocation and `&mut` for resets.
    arena: UnsafeCell<MemoryArena<'static>>,
    /// The cap (usable bytes) it was made with.
    capacity: usize,
    /// The frame the arena's contents belong to. Written only by the owning thread.
    frame: AtomicU64,
    /// Figures the owning thread publishes for others: bytes in use (as of its last
    /// allocation or reset), bytes of blocks held (as of its last reset, or the last
    /// allocation that took its use past what it was known to hold), the most ever in use.
    used: AtomicUsize,
    held: AtomicUsize,
    high: AtomicUsize,
    /// A `thread_arena_alloc` of the owning thread is emitting its events: user code (a
    /// subscriber) runs inside it and may call back. Such a call allocates in the current
    /// frame, never starts a new one (the outer call's pointer must stay valid), and a
    /// `thread_arena_reset` there is refused. Touched only by the owning thread.
    reporting: Cell<bool>,
}

// SAFETY: a `MemoryArena` is `!Sync` because allocating is a load then a store of its
// cursor. The arena in a `ThreadArena` is used only by its own thread (through that
// thread's `THREAD_ARENA`), and so is `reporting`; other threads reach a `ThreadArena`
// only through the registry, to read the figures, which are atomics.
unsafe impl Sync for ThreadArena {}

/// Sets `reporting` for the length of an emission, and clears it after, also when a
/// subscriber panics.
struct Reporting<'a>(&'a Cell<bool>);

impl Drop for Reporting<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl ThreadArena {
    /// Allocates in the current frame, first resetting the arena if its contents belong to
    /// an earlier one. Only the owning thread calls this.
    ///
    /// The growth's events are emitted last, with the figures published, and with
    /// `reporting` set: a subscriber that ends the frame and allocates again gets bytes of
    /// this same frame, distinct from the ones this call returns.
    #[inline]
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        let now = FRAME.load(Acquire);
        if self.frame.load(Relaxed) != now && !self.reporting.get() {
            self.start_frame(now);
        }
        // SAFETY: only the owning thread reaches the arena, and it holds no `&mut` to it
        // here: resets happen in `start_frame` and `reset`, never while a call of this
        // module is under way on this thread (`reporting` keeps re-entrant ones away).
        let arena = unsafe { &*self.arena.get() };
        // The capacity caps the bytes in use (padding included), as the seed's fixed arena
        // had it: refuse what cannot fit before taking a block for it...
        if arena.bytes_used().saturating_add(layout.size()) > self.capacity {
            return None;
        }
        // ...and, near the cap, undo what fit only without its alignment padding.
        let near = arena
            .bytes_used()
            .saturating_add(layout.size())
            .saturating_add(layout.align())
            > self.capacity;
        let mark = near.then(|| arena.checkpoint());
        let mut reports = Reports::default();
        let mut p = arena.try_alloc_deferred(layout, &mut reports).ok();
        if let Some(mark) = mark
            && arena.bytes_used() > self.capacity
        {
            // SAFETY: nothing allocated after `mark` was handed out: the one allocation
            // since is refused here.
            unsafe { arena.rewind(mark) };
            p = None;
        }
        let used = arena.bytes_used();
        self.used.store(used, Relaxed);
        // `bytes_held` takes the chain's lock: read it only when the arena must have grown
        // (it uses more than it was last known to hold), not on every allocation.
        if used > self.held.load(Relaxed) {
            self.held.store(arena.bytes_held(), Relaxed);
        }
        if reports.pending() {
            self.emit(reports);
        }
        p
    }

    /// Emits a call's events with `reporting` set (see there).
    #[cold]
    #[inline(never)]
    fn emit(&self, reports: Reports) {
        let outer = self.reporting.replace(true);
        let _reset_after = (!outer).then(|| Reporting(&self.reporting));
        reports.emit();
    }

    #[cold]
    fn start_frame(&self, now: u64) {
        // SAFETY: `thread_arena_alloc`'s contract: a pointer it returned stays valid only
        // until its thread's first `thread_arena_alloc` in a later frame, which is this
        // call, made by the owning thread (no other thread allocates from or resets it);
        // no other reference to the arena is alive during the call.
        unsafe { self.reset() };
        self.frame.store(now, Relaxed);
    }

    /// Resets the arena and publishes its figures.
    ///
    /// # Safety
    /// Called by the owning thread; no pointer from the arena is used afterwards and no
    /// reference to it is alive.
    #[track_caller]
    unsafe fn reset(&self) {
        assert!(
            !self.reporting.get(),
            "thread_arena_reset called while this thread's thread_arena_alloc is emitting \
             an event (from a tracing subscriber): the pointer that call returns is still \
             in use"
        );
        // SAFETY: forwarded from the caller; `reporting` is clear, so no call of this
        // module holds a reference to the arena on this thread.
        let arena = unsafe { &mut *self.arena.get() };
        // Quietly: this may be the start of a frame inside `thread_arena_alloc`, which
        // reports at its end (`Reports::pending` includes budget crossings).
        arena.reset_quietly();
        self.high.store(arena.high_watermark(), Relaxed);
        self.used.store(0, Relaxed);
        self.held.store(arena.bytes_held(), Relaxed);
    }

    /// The arena's figures, as of the current frame: an arena whose contents belong to an
    /// earlier frame has nothing in use (its thread resets it at its next allocation).
    /// From any thread: what the owner published.
    fn stats(&self) -> FrameArenaStats {
        let mut used = self.used.load(Relaxed);
        if self.frame.load(Relaxed) != FRAME.load(Acquire) {
            used = 0;
        }
        FrameArenaStats {
            bytes_used: used,
            high_watermark: self.high.load(Relaxed).max(used),
            capacity: self.capacity,
            bytes_held: self.held.load(Relaxed),
            blocks_taken: 0,
            blocks_returned: 0,
        }
    }

    /// [`ThreadArena::stats`] with the pool operations, read from the arena itself: only
    /// for the owning thread.
    fn own_stats(&self) -> FrameArenaStats {
        // SAFETY: called by the owning thread, which holds no `&mut` to the arena here.
        let arena = unsafe { &*self.arena.get() };
        let all = arena.stats();
        FrameArenaStats {
            blocks_taken: all.blocks_taken,
            blocks_returned: all.blocks_returned,
            bytes_held: arena.bytes_held(),
            ..self.stats()
        }
    }
}

/// Every live thread arena.
static REGISTRY: Lock<Vec<Arc<ThreadArena>>> = Lock::new(Level::ThreadArenas, Vec::new());

/// A thread's arena, taken out of the registry when the thread exits (then the last `Arc`
/// goes and the block returns to the pool).
struct Registered(Arc<ThreadArena>);

impl Drop for Registered {
    fn drop(&mut self) {
        REGISTRY.lock().retain(|a| !Arc::ptr_eq(a, &self.0));
    }
}

thread_local! {
    static THREAD_ARENA: OnceCell<Registered> = const { OnceCell::new() };
}

/// Allocates from the current thread's thread arena, creating it (a block of the scratch
/// pool) on the thread's first call. `None` when the arena is full, the scratch pool cannot
/// supply it, or the thread is shutting down. O(1).
///
/// # How long the memory lives
/// The pointer stays valid until **this thread** either calls [`thread_arena_reset`], or
/// calls `thread_arena_alloc` again *in a later frame*: a frame ends when any thread calls
/// [`end_thread_arena_frame`] (the Bevy plugin does, at the end of every `App::update`),
/// and the thread's first allocation after that resets its arena before it allocates.
/// Nothing else ends it: no other thread touches this thread's arena, and ending the
/// frame alone frees nothing. So memory allocated in a frame can be used for the rest of
/// that frame, and after it until the thread allocates again; compare
/// [`thread_arena_frame`] before and after if a thread must know. The thread's exit
/// gives the arena back (a thread-local destructor that runs after the arena's must not
/// use its pointers; `thread_arena_alloc` returns `None` there).
///
/// A call made from inside another (a `tracing` subscriber told about this call's new
/// block, which ends the frame and allocates) never starts a new frame: the outer call's
/// pointer stays valid, and the two are distinct.
///
/// ```
/// use std::alloc::Layout;
/// let p = nebula_memory::thread_arena_alloc(Layout::new::<[u32; 16]>()).unwrap();
/// assert_eq!(p.as_ptr() as usize % 4, 0);
/// ```
pub fn thread_arena_alloc(layout: Layout) -> Option<NonNull<u8>> {
    THREAD_ARENA
        .try_with(|cell| match cell.get() {
            Some(mine) => mine.0.alloc(layout),
            // Registered past the scope that first needs it: untagged (`heap::untagged`).
            None => crate::heap::untagged(|| {
                let capacity = THREAD_ARENA_CAPACITY.load(Relaxed);
                // In use is capped at `capacity` (see `alloc`); held at what growth may
                // take for that: the first block plus one of `capacity`, and headers.
                let config = ArenaConfig::default()
                    .first_block_default(FIRST_BLOCK.min(capacity))
                    .max_block(capacity)
                    .held_limit(capacity.saturating_add(FIRST_BLOCK).saturating_add(4096))
                    .tag(crate::ledger::tags::THREAD_ARENAS);
                let mine = Arc::new(ThreadArena {
                    arena: UnsafeCell::new(MemoryArena::with_config(scratch_pool(), config)),
                    capacity,
                    frame: AtomicU64::new(FRAME.load(Acquire)),
                    used: AtomicUsize::new(0),
                    held: AtomicUsize::new(0),
                    high: AtomicUsize::new(0),
                    reporting: Cell::new(false),
                });
                REGISTRY.lock().push(Arc::clone(&mine));
                cell.get_or_init(|| Registered(mine))
            })
            .0
            .alloc(layout),
        })
        .ok()
        .flatten()
}

/// Resets the current thread's thread arena now (a no-op if it has none). O(1).
///
/// # Safety
/// No pointer returned by [`thread_arena_alloc`] on this thread is used afterwards.
///
/// # Panics
/// When called from inside this thread's `thread_arena_alloc` (a `tracing` subscriber
/// told about its new block): the pointer that call is about to return would be freed.
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<u64>());
/// // SAFETY: the allocation above is not used.
/// unsafe { nebula_memory::thread_arena_reset() };
/// assert_eq!(nebula_memory::thread_arena_stats().unwrap().bytes_used, 0);
/// ```
pub unsafe fn thread_arena_reset() {
    let _ = THREAD_ARENA.try_with(|cell| {
        if let Some(mine) = cell.get() {
            // SAFETY: forwarded from the caller; this is the arena's own thread, and no
            // reference to the arena outlives a call of this module.
            unsafe { mine.0.reset() }
            // Budget crossings of the reset, told now that it is complete.
            crate::ledger::emit_pending_warnings();
        }
    });
}

/// Ends the frame for the thread arena of every thread: each thread's arena is reset **by
/// its own thread**, at that thread's next [`thread_arena_alloc`] (see there for how long
/// memory lives). Safe from any thread at any time: it writes nothing but the frame
/// number, so it cannot free memory a thread is using or race with its allocations.
/// Returns the new frame number. O(1).
///
/// (This example runs in a process of its own: it ends the frame for every thread.)
///
/// ```standalone_crate
/// use std::alloc::Layout;
/// use nebula_memory::{all_thread_arenas_stats, end_thread_arena_frame, thread_arena_alloc};
///
/// let first = thread_arena_alloc(Layout::new::<[u8; 64]>()).unwrap();
/// assert!(all_thread_arenas_stats().bytes_used >= 64);
/// end_thread_arena_frame();
/// assert_eq!(all_thread_arenas_stats().bytes_used, 0, "the old frame counts for nothing");
/// // The thread's next allocation starts its arena over.
/// assert_eq!(thread_arena_alloc(Layout::new::<[u8; 64]>()).unwrap(), first);
/// ```
pub fn end_thread_arena_frame() -> u64 {
    FRAME.fetch_add(1, AcqRel) + 1
}

/// Frames ended so far by [`end_thread_arena_frame`]. O(1).
///
/// ```
/// let before = nebula_memory::thread_arena_frame();
/// assert!(nebula_memory::thread_arena_frame() >= before);
/// ```
pub fn thread_arena_frame() -> u64 {
    FRAME.load(Acquire)
}

/// The current thread's thread arena figures (as of the current frame), or `None` if the
/// thread has none yet. O(1).
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<u64>());
/// let s = nebula_memory::thread_arena_stats().unwrap();
/// assert!(s.bytes_used >= 8 && s.capacity > 0);
/// ```
pub fn thread_arena_stats() -> Option<FrameArenaStats> {
    THREAD_ARENA
        .try_with(|cell| cell.get().map(|mine| mine.0.own_stats()))
        .ok()
        .flatten()
}

/// Figures of every live thread's thread arena together, from [`all_thread_arenas_stats`].
///
/// ```
/// let all = nebula_memory::all_thread_arenas_stats();
/// assert!(all.bytes_used <= all.capacity);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadArenasStats {
    /// Threads with a thread arena.
    pub threads: usize,
    /// Bytes allocated since each arena's last reset, summed.
    pub bytes_used: usize,
    /// Each arena's high watermark, summed.
    pub high_watermark: usize,
    /// Caps (usable bytes), summed.
    pub capacity: usize,
    /// Bytes of scratch-pool blocks the arenas hold, summed.
    pub bytes_held: usize,
}

/// Every live thread's thread arena figures (as of the current frame), summed. While
/// threads allocate, a snapshot that may lag. O(threads).
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<[u8; 100]>());
/// let all = nebula_memory::all_thread_arenas_stats();
/// assert!(all.threads >= 1);
/// ```
pub fn all_thread_arenas_stats() -> ThreadArenasStats {
    REGISTRY
        .lock()
        .iter()
        .fold(ThreadArenasStats::default(), |mut t, arena| {
            let s = arena.stats();
            t.threads += 1;
            t.bytes_used += s.bytes_used;
            t.high_watermark += s.high_watermark;
            t.capacity += s.capacity;
            t.bytes_held += s.bytes_held;
            t
        })
}
