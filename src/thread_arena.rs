//! The per-thread frame arena: a [`FrameArena`] for each thread, on the scratch pool,
//! created on the thread's first [`thread_arena_alloc`] and given back when the thread
//! exits.
//!
//! The classic API resets only the calling thread's arena ([`thread_arena_reset`]), so a
//! frame-end reset running on one thread could never reach the others. Every thread's
//! arena is therefore also entered in a registry, and [`thread_arena_reset_all`] resets all
//! of them from any one thread: what an engine's frame-end system (the Bevy plugin's
//! `reset_frame_arenas_system`) needs. The registry costs the allocation path nothing:
//! a thread still finds its own arena through its thread-local; the registry's lock is
//! taken when a thread's arena is created or destroyed and by the all-thread operations.
//!
//! Another thread may reset an arena while its own thread is idle: the arena's cursor and
//! watermark are atomics, so there is no data race, and the reset is `unsafe` with the
//! contract a frame end gives (no allocation from any thread meanwhile, no pointer from
//! before it used after).

use std::alloc::Layout;
use std::cell::OnceCell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;

use crate::frame::{FrameArena, FrameArenaStats};
use crate::global::scratch_pool;

/// Capacity of each thread's frame arena unless changed by
/// [`set_thread_arena_capacity`]: 4 MiB (16 MiB, a common choice, would let only four
/// threads fit in the default 64 MiB scratch pool).
pub const DEFAULT_THREAD_ARENA_CAPACITY: usize = 4 << 20;

static THREAD_ARENA_CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_THREAD_ARENA_CAPACITY);

/// Sets the capacity of thread frame arenas created from now on (threads that already have
/// one keep theirs). O(1).
///
/// ```
/// nebula_memory::set_thread_arena_capacity(1 << 20);
/// ```
pub fn set_thread_arena_capacity(bytes: usize) {
    THREAD_ARENA_CAPACITY.store(bytes, Relaxed);
}

/// One thread's frame arena, shared with the registry.
struct ThreadArena(FrameArena);

// SAFETY: a `FrameArena` is `!Sync` because allocating is a load then a store of its
// cursor. A `ThreadArena` is allocated from only by its own thread (through that thread's
// `THREAD_ARENA`); other threads reach it only through the registry, to read its figures
// (atomics) or, in `thread_arena_reset_all`, to reset it (atomic stores), whose contract
// forbids any allocation meanwhile.
unsafe impl Sync for ThreadArena {}

/// Every live thread arena.
static REGISTRY: Mutex<Vec<Arc<ThreadArena>>> = Mutex::new(Vec::new());

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

/// Allocates from the current thread's frame arena, creating it (a block of the scratch
/// pool) on the thread's first call. `None` when the arena is full, the scratch pool cannot
/// supply it, or the thread is shutting down. O(1).
///
/// ```
/// use std::alloc::Layout;
/// let p = nebula_memory::thread_arena_alloc(Layout::new::<[u32; 16]>()).unwrap();
/// assert_eq!(p.as_ptr() as usize % 4, 0);
/// ```
pub fn thread_arena_alloc(layout: Layout) -> Option<NonNull<u8>> {
    THREAD_ARENA
        .try_with(|cell| match cell.get() {
            Some(mine) => mine.0.0.alloc(layout),
            None => {
                let capacity = THREAD_ARENA_CAPACITY.load(Relaxed);
                let arena = FrameArena::try_new_in(scratch_pool(), capacity).ok()?;
                let mine = Arc::new(ThreadArena(arena));
                REGISTRY.lock().push(Arc::clone(&mine));
                cell.get_or_init(|| Registered(mine)).0.0.alloc(layout)
            }
        })
        .ok()
        .flatten()
}

/// Resets the current thread's frame arena (a no-op if it has none). O(1).
///
/// # Safety
/// No pointer returned by [`thread_arena_alloc`] on this thread is used afterwards.
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<u64>());
/// // SAFETY: the allocation above is not used.
/// unsafe { nebula_memory::thread_arena_reset() };
/// ```
pub unsafe fn thread_arena_reset() {
    let _ = THREAD_ARENA.try_with(|cell| {
        if let Some(mine) = cell.get() {
            // SAFETY: forwarded from the caller.
            unsafe { mine.0.0.reset() }
        }
    });
}

/// Resets the frame arena of every thread that has one, from any thread: the frame end
/// of an engine whose systems ran on many threads. O(threads).
///
/// # Safety
/// While it runs, no thread allocates with [`thread_arena_alloc`]; and no pointer that
/// `thread_arena_alloc` returned before the call, on any thread, is used after it. (A
/// frame-end system that runs alone, after every other system of the frame, gives both
/// for allocations made by systems.)
///
/// (This example runs in a process of its own: other examples allocate on their threads.)
///
/// ```standalone_crate
/// use std::alloc::Layout;
/// use std::sync::{Arc, Barrier};
///
/// let sync = Arc::new(Barrier::new(2));
/// let worker = std::thread::spawn({
///     let sync = Arc::clone(&sync);
///     move || {
///         nebula_memory::thread_arena_alloc(Layout::new::<[u8; 64]>()).unwrap();
///         sync.wait(); // frame done
///         sync.wait(); // reset done
///         assert_eq!(nebula_memory::thread_arena_stats().unwrap().bytes_used, 0);
///     }
/// });
/// sync.wait();
/// assert!(nebula_memory::thread_arenas_stats().bytes_used >= 64);
/// // SAFETY: the worker waits (it does not allocate) and never uses its allocation again.
/// unsafe { nebula_memory::thread_arena_reset_all() };
/// sync.wait();
/// worker.join().unwrap();
/// ```
pub unsafe fn thread_arena_reset_all() {
    for arena in REGISTRY.lock().iter() {
        // SAFETY: forwarded from the caller; the reset writes only atomics and the bytes
        // given back (debug fill), which no thread uses any more.
        unsafe { arena.0.reset() }
    }
}

/// The current thread's frame arena figures, or `None` if the thread has none yet. O(1).
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<u64>());
/// let s = nebula_memory::thread_arena_stats().unwrap();
/// assert!(s.bytes_used >= 8 && s.capacity > 0);
/// ```
pub fn thread_arena_stats() -> Option<FrameArenaStats> {
    THREAD_ARENA
        .try_with(|cell| cell.get().map(|mine| mine.0.0.stats()))
        .ok()
        .flatten()
}

/// Figures of every live thread's frame arena together, from [`thread_arenas_stats`].
///
/// ```
/// let all = nebula_memory::thread_arenas_stats();
/// assert!(all.bytes_used <= all.capacity);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadArenasStats {
    /// Threads with a frame arena.
    pub threads: usize,
    /// Bytes allocated since each arena's last reset, summed.
    pub bytes_used: usize,
    /// Each arena's high watermark, summed.
    pub high_watermark: usize,
    /// Usable bytes, summed.
    pub capacity: usize,
}

/// Every live thread's frame arena figures, summed. While threads allocate, a snapshot that
/// may lag. O(threads).
///
/// ```
/// use std::alloc::Layout;
/// nebula_memory::thread_arena_alloc(Layout::new::<[u8; 100]>());
/// let all = nebula_memory::thread_arenas_stats();
/// assert!(all.threads >= 1 && all.bytes_used >= 100);
/// ```
pub fn thread_arenas_stats() -> ThreadArenasStats {
    REGISTRY
        .lock()
        .iter()
        .fold(ThreadArenasStats::default(), |mut t, arena| {
            let s = arena.0.stats();
            t.threads += 1;
            t.bytes_used += s.bytes_used;
            t.high_watermark += s.high_watermark;
            t.capacity += s.capacity;
            t
        })
}
