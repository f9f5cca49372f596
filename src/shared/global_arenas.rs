//! The process-wide shared arenas: engine lifetime and level lifetime.
//!
//! - [`engine_arena`]: data that lives as long as the engine (UI state, display and window
//!   resources). It is never reset, so a `&'static` to it is sound and every allocation
//!   from it lives for the rest of the process.
//! - [`game_arena`]: the level's data, reset on level change. A process-wide arena that can
//!   be reset needs proof that nothing still points into it. Here the proof is a read-write
//!   lock: allocating goes through a read guard ([`GameArena::read`]), every allocation
//!   borrows that guard, and [`GameArena::wait_and_reset`] takes the write lock, which it
//!   gets only once every guard (and so every allocation) is gone (on a thread that holds a
//!   guard itself it panics at once instead of waiting for ever). No `unsafe` contract for
//!   the caller, at the cost of one uncontended lock acquisition per guard (not per
//!   allocation).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Deref;

use parking_lot::{RwLock, RwLockReadGuard};

use super::SharedArena;
use crate::arena::{ArenaConfig, ArenaStats};
use crate::fork::Global;
use crate::global::{engine_pool, game_pool};
use crate::ledger::tags;

/// The engine's shared arena, on [`engine_pool`], created on first use. Never reset:
/// what is allocated from it stays for the life of the process. Any thread may allocate
/// from it. O(1).
///
/// ```
/// use nebula_memory::Arena;
/// let name: &'static str = nebula_memory::engine_arena().alloc_str("main window");
/// assert_eq!(name, "main window");
/// ```
pub fn engine_arena() -> &'static SharedArena<'static> {
    static ENGINE: Global<SharedArena<'static>> = Global::new();
    ENGINE.get_or_init(|| {
        SharedArena::with_config(engine_pool(), ArenaConfig::default().tag(tags::ENGINE))
    })
}

/// The level arena, on [`game_pool`], created on first use: allocate through
/// [`read`](GameArena::read), free everything with [`wait_and_reset`](GameArena::wait_and_reset) on level
/// change. O(1).
///
/// ```
/// use nebula_memory::Arena;
/// let level = nebula_memory::game_arena();
/// {
///     let arena = level.read();
///     let spawns = arena.alloc_slice_copy(&[(1.0f32, 2.0f32), (3.0, 4.0)]);
///     assert_eq!(spawns.len(), 2);
/// } // the guard, and every allocation borrowed from it, ends here
/// level.wait_and_reset(); // next level
/// ```
pub fn game_arena() -> &'static GameArena {
    static GAME: Global<GameArena> = Global::new();
    GAME.get_or_init(|| GameArena {
        arena: RwLock::new(SharedArena::with_config(
            game_pool(),
            ArenaConfig::default().tag(tags::GAME),
        )),
    })
}

/// A process-wide [`SharedArena`] that can be reset soundly: allocations borrow a read
/// guard, and [`wait_and_reset`](GameArena::wait_and_reset) waits for every guard to go. See
/// [`game_arena`].
pub struct GameArena {
    arena: RwLock<SharedArena<'static>>,
}

impl GameArena {
    /// A guard through which any number of threads allocate at once; it derefs to the
    /// [`SharedArena`]. Allocations borrow the guard, so they end with it. Hold it for a
    /// system run or a loading step, not for ever: [`wait_and_reset`](GameArena::wait_and_reset) waits for
    /// every guard. O(1) (an uncontended read lock).
    ///
    /// A thread that already holds a guard gets another at once, even while a reset waits
    /// for the lock (a nested call, or a `tracing` subscriber told about an allocation made
    /// through the first guard, would otherwise wait for a writer that waits for it).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::game_arena().read();
    /// let hp = arena.alloc_val(100u32);
    /// assert_eq!(*hp, 100);
    /// ```
    pub fn read(&self) -> GameArenaGuard<'_> {
        let guard = if GUARDS_HERE.get() > 0 {
            self.arena.read_recursive()
        } else {
            self.arena.read()
        };
        GUARDS_HERE.set(GUARDS_HERE.get() + 1);
        GameArenaGuard {
            guard,
            _stays_on_its_thread: PhantomData,
        }
    }

    /// Frees everything allocated for the level (see [`SharedArena::reset`]). Waits until
    /// no [`GameArenaGuard`] is left. O(threads + blocks).
    ///
    /// # Panics
    /// At once, if the calling thread holds a guard itself: it would wait for itself for
    /// ever. Drop the guard first, or use [`try_reset`](GameArena::try_reset).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let level = nebula_memory::game_arena();
    /// level.read().alloc_slice(1000, 0u8);
    /// level.wait_and_reset();
    /// assert_eq!(level.read().bytes_used(), 0);
    /// ```
    #[track_caller]
    pub fn wait_and_reset(&self) {
        let mine = GUARDS_HERE.get();
        if mine > 0 {
            panic!(
                "GameArena::wait_and_reset on a thread that holds {mine} of its guards: it \
                 would wait for itself for ever; drop the guard first, or use try_reset"
            );
        }
        self.arena.write().reset_quietly();
        // Told with the lock released: a subscriber may take a guard.
        crate::ledger::emit_pending_warnings();
    }

    /// [`wait_and_reset`](GameArena::wait_and_reset) if no guard is alive now; `false` (and nothing
    /// changes) otherwise. O(threads + blocks).
    ///
    /// ```
    /// let level = nebula_memory::game_arena();
    /// let guard = level.read();
    /// assert!(!level.try_reset(), "a guard is alive");
    /// drop(guard);
    /// assert!(level.try_reset());
    /// ```
    pub fn try_reset(&self) -> bool {
        match self.arena.try_write() {
            Some(mut arena) => {
                arena.reset_quietly();
                drop(arena);
                // Told with the lock released: a subscriber may take a guard.
                crate::ledger::emit_pending_warnings();
                true
            }
            None => false,
        }
    }

    /// The arena's summed statistics (see [`SharedArena::stats`]). O(threads × tags).
    ///
    /// ```
    /// println!("{}", nebula_memory::game_arena().stats());
    /// ```
    pub fn stats(&self) -> ArenaStats {
        self.arena.read().stats()
    }
}

impl std::fmt::Debug for GameArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GameArena")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A read guard of the [`game_arena`]: derefs to its [`SharedArena`]; every allocation
/// borrows it. From [`GameArena::read`].
///
/// So an allocation cannot outlive its guard, and cannot be alive when
/// [`wait_and_reset`](GameArena::wait_and_reset) frees the level's memory:
///
/// ```compile_fail,E0505
/// use nebula_memory::Arena;
/// let level = nebula_memory::game_arena();
/// let guard = level.read();
/// let hp = guard.alloc_val(100u32);
/// drop(guard); // cannot move out of `guard` because it is borrowed
/// level.wait_and_reset();
/// assert_eq!(*hp, 100);
/// ```
pub struct GameArenaGuard<'a> {
    guard: RwLockReadGuard<'a, SharedArena<'static>>,
    /// Counted in its thread's `GUARDS_HERE`, so it must be dropped there: not `Send`
    /// (whatever the lock's own guard is), still `Sync` (threads may share it to allocate).
    _stays_on_its_thread: PhantomData<std::sync::MutexGuard<'static, ()>>,
}

impl Drop for GameArenaGuard<'_> {
    fn drop(&mut self) {
        GUARDS_HERE.set(GUARDS_HERE.get() - 1);
    }
}

thread_local! {
    /// Game-arena guards alive on this thread (see `wait_and_reset`'s panic).
    static GUARDS_HERE: Cell<usize> = const { Cell::new(0) };
}

impl Deref for GameArenaGuard<'_> {
    type Target = SharedArena<'static>;
    fn deref(&self) -> &SharedArena<'static> {
        &self.guard
    }
}
