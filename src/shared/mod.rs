//! `SharedArena`: one arena many threads allocate from at once.
//!
//! A shared arena is a [`MemoryArena`] per thread: each thread that allocates gets its own
//! slot (a cursor and a chain of blocks from the common pool) the first time it does, and
//! bumps in it with no atomic read-modify-write and no lock, finding it through a one-entry
//! thread-local cache (`LAST`). The pool's lock is taken only when a thread's block is
//! full. This is the design of Unreal's concurrent linear allocator; a single block bumped
//! with compare-and-swap by every thread was measured against it and loses: 4x slower on
//! one thread and no scaling on two (the `workloads` bench, W6).
//!
//! The slots live in a [`ThreadLocal`], which gives each `SharedArena` its own per-thread
//! storage and lets `reset(&mut self)` reach every thread's slot through `iter_mut`.
//!
//! **Shared means shared.** Everything on `SharedArena` itself concerns the whole arena:
//! allocation through the [`Arena`] interface (which lands in the calling thread's part),
//! and figures (`bytes_used`, `stats`, …) that add up every thread's part. What concerns
//! one thread's part only (checkpoints and `rewind`, per-part figures, a hot loop without
//! the part lookup) is reached inside [`SharedArena::with_this_thread`], whose name says
//! so.
//!
//! **Why a closure.** A thread's part belongs to the thread only while it holds its thread
//! id: the id, and with it the part, passes to a thread started after it exits. A
//! reference to the part kept past that point (in a thread-local whose destructor runs
//! late in the thread's exit, say) would let two threads bump one cursor. The closure's
//! reference cannot be kept, so every use of a part begins with finding the caller's
//! part, on the thread making the call, at that moment.
//!
//! The price of a part per thread is memory: after a reset each part keeps the one block
//! the reset policy chooses, so the arena holds up to a block per thread that ever
//! allocated. A thread that exits leaves its part to the next new thread (and code that
//! allocates late in a thread's exit borrows one of a few *late* parts for the length of
//! one call, so those are reused too); a part nobody allocated from at 2 resets in a row
//! gives its blocks back, as schedulers move work between threads (Bevy runs a system that
//! stores to `FrameMemory` on any thread, and parts kept for every thread it ran on held
//! several frames' worth). This suits a fixed pool of worker threads (a job system, Bevy's
//! task pools); with threads that come and go quickly against a small pool, idle parts can
//! hold blocks a new thread would need.
//!
//! [`engine_arena`] and [`game_arena`] are the process-wide shared arenas for engine- and
//! level-lifetime data.

mod double_buffered;
mod global_arenas;
mod stats;

use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use thread_local::ThreadLocal;

use crate::arena::{ArenaConfig, MemoryArena};
use crate::arena_trait::Arena;
use crate::error::AllocError;
use crate::pool::MemoryPool;

pub use double_buffered::{DoubleBufferedArena, FrameHandle};
pub use global_arenas::{GameArena, GameArenaGuard, engine_arena, game_arena};

/// One thread's part of a shared arena, on cache lines of its own (slots of one
/// `ThreadLocal` bucket are adjacent in memory, and each thread writes its cursor on
/// every allocation).
#[repr(align(128))]
struct Slot<'pool>(MemoryArena<'pool>, IdleResets);

/// Resets in a row at which a thread's part had allocated nothing since the one before;
/// touched only through `&mut` (by `reset`).
#[derive(Default)]
struct IdleResets(u32);

/// Resets in a row a part may be idle before it gives its blocks back: a thread that
/// allocates at every other reset keeps its block, one that stopped gives it back soon.
/// Short, because a scheduler moves work between threads: Bevy's executor runs a system
/// on whichever thread is free, so a system storing to frame memory touches a different
/// part from frame to frame, and parts kept for threads that stored a few frames ago
/// held several times what one frame needs. A part that comes back takes one pool block.
const IDLE_RESETS_BEFORE_RELEASE: u32 = 2;

// SAFETY: a `&Slot` gives a `&MemoryArena`. Everything a shared reference to an arena can
// reach is an atomic or behind a lock, except the cursor's bump, which is a load followed
// by a store and so must not run on two threads at once. `SharedArena` allocates (bumps,
// pops, resizes, rewinds) only through the calling thread's own part, found by
// `with_part` at the time of the call:
// - a slot of `slots`, which `ThreadLocal::get_or` gives to the thread holding its thread
//   id, and which passes to another thread only after the first released that id (in its
//   TLS teardown). `LAST` caches it only while the id is held: see `LastGuard`;
// - or, for a call made after this thread's `LastGuard` was destroyed, a part of `late`
//   claimed for that call alone (its `busy` flag).
// The `&MemoryArena` is handed only to a closure, for the call: it cannot be kept past a
// point where the thread id may change hands. Parts of other threads are reached only by
// `fold_parts`, for statistics, which reads atomics and takes locks, and by `&mut self`
// methods.
unsafe impl Sync for Slot<'_> {}

/// A part of `SharedArena::late`, owned through a raw pointer (from `Box::leak`): the
/// list may grow (moving its elements) while a thread uses a part, and moving a `Box`
/// would assert uniqueness over the part under that thread's feet.
struct LatePart<'pool>(NonNull<LateSlot<'pool>>);

/// A late part and whether a call is using it: a thread late in its exit claims a free one
/// (compare-and-swap `false` → `true`, `Acquire`) for one call and gives it back
/// (`Release`), so each is used by one thread at a time and reused by the next.
struct LateSlot<'pool> {
    part: Slot<'pool>,
    busy: AtomicBool,
}

// SAFETY: a `LatePart` owns its `LateSlot` as a `Box` would; a `Slot` is `Send` and the
// flag is atomic.
unsafe impl Send for LatePart<'_> {}

impl Drop for LatePart<'_> {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak` in `claim_late_part`; dropped by `reset(&mut self)` or
        // with the arena, when no call can be using the part.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A late part claimed for one call; gives it back when dropped (also on unwinding).
struct LateClaim<'a, 'pool> {
    slot: &'a LateSlot<'pool>,
}

impl Drop for LateClaim<'_, '_> {
    fn drop(&mut self) {
        self.slot.busy.store(false, Ordering::Release);
    }
}

/// A paged arena that many threads allocate from at once, through the [`Arena`] interface.
///
/// Each thread bumps in blocks of its own, so allocation costs what it costs in a
/// `MemoryArena` plus a lookup of the thread's part; the newest allocation *of the calling
/// thread* can be popped or grown in place. Operations on one thread's part alone
/// (checkpoints, `rewind`, per-part figures) go through
/// [`with_this_thread`](SharedArena::with_this_thread). Memory stays valid until
/// [`reset`](SharedArena::reset) (which needs `&mut self`, so no allocation can still be
/// borrowed) or drop. `&SharedArena` is an `allocator_api2` allocator, so
/// `Vec::new_in(&shared)` and `hashbrown::HashMap::new_in(&shared)` work from any thread.
///
/// ```
/// use nebula_memory::{Arena, MemoryPool, SharedArena};
///
/// let pool = MemoryPool::new("level", 16 << 20).unwrap();
/// let mut arena = SharedArena::new(&pool);
/// std::thread::scope(|s| {
///     for t in 0..4u32 {
///         let arena = &arena;
///         s.spawn(move || {
///             let ids = arena.alloc_slice_fill_with(100, |i| t * 100 + i as u32);
///             assert_eq!(ids[99], t * 100 + 99);
///         });
///     }
/// });
/// assert_eq!(arena.bytes_used(), 4 * 400);
/// arena.reset();
/// assert_eq!(arena.bytes_used(), 0);
/// ```
pub struct SharedArena<'pool> {
    slots: ThreadLocal<Slot<'pool>>,
    /// Parts for calls made after the calling thread's `LastGuard` was destroyed (late in
    /// its TLS teardown, when its thread id may already be another thread's), each claimed
    /// for one call. Freed by `reset` and drop.
    late: Mutex<Vec<LatePart<'pool>>>,
    /// The key of [`LAST`]: unique in the process (never reused), and replaced after every
    /// mutable walk of the slots, so a slot pointer cached before one never matches after.
    key: u64,
    pool: &'pool MemoryPool,
    config: ArenaConfig,
    generation: u64,
}

thread_local! {
    /// The shared arena this thread last allocated from (its key) and this thread's slot in
    /// it: a one-entry cache in front of `ThreadLocal::get_or`, so that the common case
    /// (a thread allocating from one arena over and over) costs a thread-local read and
    /// one comparison. `TORN_DOWN` once this thread's `LAST_GUARD` is destroyed. No
    /// destructor, so it stays readable through the whole teardown.
    static LAST: Cell<(u64, *const ())> = const { Cell::new((0, ptr::null())) };
    /// See [`LastGuard`]. First touched right after the thread's first `get_or`.
    static LAST_GUARD: LastGuard = const { LastGuard };
}

/// `LAST`'s key once the thread's cache is closed: no arena ever has it.
const TORN_DOWN: u64 = u64::MAX;

/// Ends `LAST`'s validity before the thread gives its thread id back.
///
/// The `thread_local` crate gives a thread's id (and so its slot in every `ThreadLocal`)
/// back to a free list in a TLS destructor, its thread guard; a thread started afterwards
/// gets the same id and the same slots. A cache entry used after that point would let two
/// live threads bump one cursor. This guard is first touched right after the thread's
/// first `ThreadLocal::get_or`, which registers the crate's guard if it is not yet, so it
/// is registered after it; TLS destructors run in reverse order of registration (the
/// C runtime's `__cxa_thread_atexit_impl` list on Linux, `_tlv_atexit` on macOS, std's own
/// list elsewhere), so this one runs first and closes the cache while the id is still
/// this thread's. Code that runs later in the teardown (another TLS destructor that
/// allocates) borrows a part of `late` for each call.
struct LastGuard;

impl Drop for LastGuard {
    fn drop(&mut self) {
        LAST.set((TORN_DOWN, ptr::null()));
    }
}

/// A key no shared arena has had before (see `SharedArena::key`).
fn new_key() -> u64 {
    static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
    NEXT_KEY.fetch_add(1, Ordering::Relaxed)
}

impl<'pool> SharedArena<'pool> {
    /// An empty shared arena over `pool`. Takes no memory until a thread allocates. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// assert_eq!(arena.bytes_held(), 0);
    /// ```
    pub fn new(pool: &'pool MemoryPool) -> Self {
        Self::with_config(pool, ArenaConfig::default())
    }

    /// An empty shared arena whose per-thread parts follow `config`. O(1).
    ///
    /// ```
    /// use nebula_memory::{Arena, ArenaConfig, SharedArena};
    /// let config = ArenaConfig::default().first_block(16 * 1024);
    /// let arena = SharedArena::with_config(nebula_memory::game_pool(), config);
    /// arena.alloc_val(1u8);
    /// assert!(arena.bytes_held() < 64 * 1024);
    /// ```
    #[track_caller]
    pub fn with_config(pool: &'pool MemoryPool, config: ArenaConfig) -> Self {
        config.check_against(pool);
        SharedArena {
            slots: ThreadLocal::new(),
            late: Mutex::new(Vec::new()),
            key: new_key(),
            pool,
            config,
            generation: 0,
        }
    }

    /// The pool every thread's part takes its blocks from. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::engine_pool());
    /// assert_eq!(arena.pool().name(), "engine");
    /// ```
    pub fn pool(&self) -> &'pool MemoryPool {
        self.pool
    }

    /// The rules each thread's part was created with. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::engine_pool());
    /// assert_eq!(arena.config().first_block, 64 * 1024);
    /// ```
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// Runs `f` with the calling thread's part of the arena (created on the thread's first
    /// use): a `MemoryArena` whose checkpoints, `rewind` and figures concern this thread's
    /// allocations only. Hot loops also run inside it, saving the part lookup that each
    /// `Arena` call on the `SharedArena` makes. O(1) plus `f`.
    ///
    /// The reference lives for the call only: a part belongs to a thread while the thread
    /// holds its thread id, which passes to a new thread after this one exits, so no
    /// reference to a part may be kept. Allocations made through it borrow it too; for
    /// memory that outlives the call, allocate through the `SharedArena` itself (it lives
    /// until [`reset`](SharedArena::reset) either way).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// let sum = arena.with_this_thread(|mine| {
    ///     let mut sum = 0;
    ///     for i in 0..1000u32 {
    ///         sum += *mine.alloc_val(i);
    ///     }
    ///     sum
    /// });
    /// assert_eq!((sum, arena.bytes_used()), (499_500, 4000));
    /// ```
    ///
    /// The part cannot be kept past the call:
    ///
    /// ```compile_fail
    /// let arena = nebula_memory::engine_arena();
    /// let mine: &nebula_memory::MemoryArena<'static> = arena.with_this_thread(|mine| mine);
    /// ```
    ///
    /// Nor reach another thread (a part is `!Sync`, so the reference is not `Send`); other
    /// threads allocate through the `SharedArena`, into their own parts:
    ///
    /// ```compile_fail,E0277
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.with_this_thread(|mine| {
    ///     std::thread::scope(|t| {
    ///         t.spawn(|| mine.alloc_val(1u8)); // `Cell<()>` cannot be shared between threads safely
    ///     });
    /// });
    /// ```
    #[inline]
    pub fn with_this_thread<R>(&self, f: impl FnOnce(&MemoryArena<'pool>) -> R) -> R {
        self.with_part(f)
    }

    /// Runs `f` on the calling thread's part: the one-entry cache `LAST` when it names this
    /// arena, else the slow lookup. Every use of a part goes through here.
    #[inline(always)]
    pub(crate) fn with_part<R>(&self, f: impl FnOnce(&MemoryArena<'pool>) -> R) -> R {
        let (key, slot) = LAST.with(Cell::get);
        if key == self.key {
            // SAFETY: `LAST` holds this thread's slot of the arena with this key, cached
            // from a `&Slot` that `ThreadLocal::get_or` returned while this thread held its
            // thread id, and it is closed (`LastGuard`) before the thread gives the id
            // back, so the slot is still this thread's. Keys are never reused, so the arena
            // is `self`, alive; a `ThreadLocal` never moves or drops an entry while it lives
            // (moving the arena moves only the pointers to its buckets), so the slot is
            // still there. The pointer is still valid for shared access: the only unique
            // borrows of the slots (`iter_mut`, in `reset` and `trim_spares`) replace the
            // key afterwards, so a pointer cached before one of them never matches again.
            // The reference given to `f` cannot outlive the call, made on this thread.
            return f(unsafe { &(*slot.cast::<Slot<'pool>>()).0 });
        }
        self.with_part_slow(key, f)
    }

    /// `with_part` when the cache names another arena: looks the slot up (creating it on
    /// the thread's first use) and caches it; late in the thread's teardown, a late part
    /// for this call.
    #[cold]
    #[inline(never)]
    fn with_part_slow<R>(&self, cached: u64, f: impl FnOnce(&MemoryArena<'pool>) -> R) -> R {
        if cached == TORN_DOWN {
            let claim = self.claim_late_part();
            return f(&claim.slot.part.0);
        }
        // The slot and the `thread_local` crate's bucket it may start outlive the scope
        // this call runs in: untagged (see `heap::untagged`).
        let slot = crate::heap::untagged(|| {
            self.slots.get_or(|| {
                Slot(
                    MemoryArena::with_config(self.pool, self.config),
                    IdleResets::default(),
                )
            })
        });
        // Touching the guard after `get_or` registers its destructor after the thread-id
        // guard's (see `LastGuard`). If it is already being destroyed the slot is still
        // this thread's for this call (the id goes back later), but it is not cached.
        if LAST_GUARD.try_with(|_| ()).is_ok() {
            LAST.set((self.key, ptr::from_ref(slot).cast()));
        }
        f(&slot.0)
    }

    /// A late part for one call of a thread whose `LastGuard` is gone (its thread id may
    /// already belong to a thread started since, so the slot of that id is not its own any
    /// more): a free one of `late`, or a new one. Rare: only TLS destructors that allocate
    /// during thread exit come here, and the parts are reused, so the arena holds as many
    /// as such calls ever ran at once.
    fn claim_late_part(&self) -> LateClaim<'_, 'pool> {
        let mut late = self.late.lock();
        for part in late.iter() {
            // SAFETY: a live late part (the list owns it; only `&mut self` frees it).
            let slot = unsafe { part.0.as_ref() };
            if slot
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return LateClaim { slot };
            }
        }
        let slot = NonNull::from(Box::leak(Box::new(LateSlot {
            part: Slot(
                MemoryArena::with_config(self.pool, self.config),
                IdleResets::default(),
            ),
            busy: AtomicBool::new(true),
        })));
        late.push(LatePart(slot));
        LateClaim {
            // SAFETY: just made, owned by `self.late` until `reset(&mut self)` or drop,
            // and claimed for this call alone.
            slot: unsafe { slot.as_ref() },
        }
    }

    /// Allocates `layout` in the calling thread's part. O(1) amortised.
    ///
    /// # Errors
    /// As [`MemoryArena::try_alloc`]: the pool could not supply a block for this thread.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// let p = arena.try_alloc(Layout::from_size_align(64, 64).unwrap()).unwrap();
    /// assert_eq!(p.as_ptr() as usize % 64, 0);
    /// ```
    #[inline]
    pub fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.with_part(|part| part.try_alloc(layout))
    }

    /// Frees everything every thread allocated. Each thread's part keeps one block chosen
    /// by the reset policy (see [`MemoryArena::reset`]), except that a part that allocated
    /// nothing at the last 2 resets in a row gives every block back: only threads that
    /// use the arena hold memory for it, and one that uses it at every other reset does
    /// not take and return a block each time. O(threads + blocks).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_slice(10_000, 0u8);
    /// arena.reset();
    /// assert_eq!(arena.bytes_used(), 0);
    /// assert_eq!(arena.generation(), 1);
    /// ```
    pub fn reset(&mut self) {
        self.reset_quietly();
        // Budget crossings of replacement blocks, told once every part is reset.
        crate::ledger::emit_pending_warnings();
    }

    /// [`reset`](SharedArena::reset) inside a larger operation of the crate: runs no user
    /// code.
    pub(crate) fn reset_quietly(&mut self) {
        for slot in self.slots.iter_mut() {
            let Slot(part, idle) = slot;
            idle.0 = if part.peak_since_reset() == 0 {
                idle.0.saturating_add(1)
            } else {
                0
            };
            if idle.0 >= IDLE_RESETS_BEFORE_RELEASE && part.bytes_held() > 0 {
                part.reset_and_release();
            } else {
                part.reset_quietly();
            }
        }
        // Late parts belong to threads that were exiting; their blocks go back.
        self.late.get_mut().clear();
        self.key = new_key(); // slot pointers cached before `iter_mut` are stale
        self.generation += 1;
    }

    /// Gives every thread's cached spare blocks back to the pool. O(threads + spares).
    ///
    /// ```
    /// let mut arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.trim_spares();
    /// ```
    pub fn trim_spares(&mut self) {
        for slot in self.slots.iter_mut() {
            slot.0.trim_spares();
        }
        for part in self.late.get_mut() {
            // SAFETY: `&mut self`: no thread uses a late part now.
            unsafe { part.0.as_mut() }.part.0.trim_spares();
        }
        self.key = new_key(); // slot pointers cached before `iter_mut` are stale
    }
}

/// The arena interface, on the calling thread's part: typed helpers allocate there, and
/// `pop` / `realloc` act on the newest allocation *of the calling thread* (an allocation of
/// another thread is never the top here: `pop` returns `false`, a grow copies).
// SAFETY: every call works on the calling thread's part, a `MemoryArena` whose impl is
// sound, found at the time of the call on the calling thread (`with_part`), so no two
// threads bump one part. Memory handed out stays valid until `reset(&mut self)` or drop.
unsafe impl<'pool> Arena for SharedArena<'pool> {
    #[inline(always)]
    fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.with_part(|part| part.try_alloc(layout))
    }

    #[inline(always)]
    #[track_caller]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        self.with_part(|part| part.alloc(layout))
    }

    #[inline]
    unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        // SAFETY: forwarded from the caller.
        self.with_part(|part| unsafe { part.pop(ptr, layout) })
    }

    #[inline]
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: forwarded from the caller: `ptr` is live in this arena; if it is another
        // thread's, it is not this thread's top and is copied, never extended.
        self.with_part(|part| unsafe { part.realloc(ptr, old, new_size) })
    }

    fn pool_name(&self) -> &'static str {
        self.pool.name()
    }
}

impl fmt::Debug for SharedArena<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArena")
            .field("threads", &self.threads())
            .field("stats", &self.stats())
            .finish()
    }
}

/// The summed [`stats`](SharedArena::stats), after the number of threads:
/// `4 threads: arena on 'game': 1.6 KiB used (peak 1.6 KiB), …`.
impl fmt::Display for SharedArena<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threads = self.threads();
        let s = if threads == 1 { "" } else { "s" };
        write!(f, "{threads} thread{s}: {}", self.stats())
    }
}
