//! The three process-wide pools: engine, game and scratch.
//!
//! Each is created on first use. Sizes default to budgets that suit a mid-sized game
//! (engine 256 MiB, game 512 MiB, scratch 64 MiB) and can be changed by
//! [`configure_global_pools`] before any of them exists. Creating a pool only reserves
//! address space, so the defaults cost almost no memory until used.

use std::ptr;
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::{Acquire, Release};

use crate::fork::{Level, Lock};

use crate::error::PoolError;
use crate::pool::MemoryPool;

/// Sizes of the three global pools, in bytes.
///
/// ```
/// use nebula_memory::GlobalPoolConfig;
///
/// let config = GlobalPoolConfig { scratch: 128 << 20, ..GlobalPoolConfig::default() };
/// assert_eq!(config.engine, 256 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalPoolConfig {
    /// Capacity of [`engine_pool`]: engine systems' long-lived memory (default 256 MiB).
    pub engine: usize,
    /// Capacity of [`game_pool`]: game state and entities (default 512 MiB).
    pub game: usize,
    /// Capacity of [`scratch_pool`]: frame and scratch arenas (default 64 MiB).
    pub scratch: usize,
}

impl Default for GlobalPoolConfig {
    fn default() -> Self {
        GlobalPoolConfig {
            engine: 256 << 20,
            game: 512 << 20,
            scratch: 64 << 20,
        }
    }
}

struct Config {
    sizes: GlobalPoolConfig,
    /// Set (under the lock) by the first pool to be created; configuration is closed then.
    frozen: Option<&'static str>,
}

/// The sizes, and the making of the pools: a pool is made under this lock (not in a
/// `OnceLock`, which a fork during the making would leave half made in the child).
static CONFIG: Lock<Config> = Lock::new(
    Level::Config,
    Config {
        sizes: GlobalPoolConfig {
            engine: 256 << 20,
            game: 512 << 20,
            scratch: 64 << 20,
        },
        frozen: None,
    },
);
static ENGINE: AtomicPtr<MemoryPool> = AtomicPtr::new(ptr::null_mut());
static GAME: AtomicPtr<MemoryPool> = AtomicPtr::new(ptr::null_mut());
static SCRATCH: AtomicPtr<MemoryPool> = AtomicPtr::new(ptr::null_mut());

/// The pool in `slot`, if made. O(1): one load.
fn made(slot: &AtomicPtr<MemoryPool>) -> Option<&'static MemoryPool> {
    // SAFETY: a non-null pointer is a leaked pool published with `Release` by `pool`,
    // never freed nor written again.
    unsafe { slot.load(Acquire).as_ref() }
}

/// The pool in `slot`, made (under `CONFIG`) if it is not yet.
#[inline]
fn pool(
    slot: &'static AtomicPtr<MemoryPool>,
    name: &'static str,
    size: fn(&GlobalPoolConfig) -> usize,
) -> &'static MemoryPool {
    match made(slot) {
        Some(p) => p,
        None => create(slot, name, size),
    }
}

/// Sets the sizes of the three global pools. Call it once, early in `main`, before anything
/// touches a global pool. O(1).
///
/// # Errors
/// [`PoolError::AlreadyCreated`] (naming the pool) if any global pool exists already;
/// the sizes are then left as they were. [`PoolError::InvalidCapacity`] for a size of 0.
///
/// ```
/// use nebula_memory::{configure_global_pools, engine_pool, GlobalPoolConfig, PoolError};
///
/// let config = GlobalPoolConfig { engine: 32 << 20, game: 64 << 20, scratch: 16 << 20 };
/// configure_global_pools(config).unwrap();
/// assert_eq!(engine_pool().stats().capacity, 32 << 20);
/// assert!(matches!(configure_global_pools(config), Err(PoolError::AlreadyCreated { .. })));
/// ```
pub fn configure_global_pools(config: GlobalPoolConfig) -> Result<(), PoolError> {
    let mut c = CONFIG.lock();
    if let Some(pool) = c.frozen {
        return Err(PoolError::AlreadyCreated { pool });
    }
    for (pool, capacity) in [
        ("engine", config.engine),
        ("game", config.game),
        ("scratch", config.scratch),
    ] {
        if capacity == 0 {
            return Err(PoolError::InvalidCapacity { pool, capacity });
        }
    }
    c.sizes = config;
    Ok(())
}

/// The sizes the global pools have (once created) or will have. O(1).
///
/// ```
/// let sizes = nebula_memory::global_pool_config();
/// assert!(sizes.scratch > 0);
/// ```
pub fn global_pool_config() -> GlobalPoolConfig {
    CONFIG.lock().sizes
}

/// Creates a global pool, untagged (see `heap::untagged`): its state lives for the process.
#[cold]
fn create(
    slot: &'static AtomicPtr<MemoryPool>,
    name: &'static str,
    size: fn(&GlobalPoolConfig) -> usize,
) -> &'static MemoryPool {
    crate::heap::untagged(|| create_tagless(slot, name, size))
}

fn create_tagless(
    slot: &'static AtomicPtr<MemoryPool>,
    name: &'static str,
    size: fn(&GlobalPoolConfig) -> usize,
) -> &'static MemoryPool {
    let mut c = CONFIG.lock();
    if let Some(p) = made(slot) {
        return p; // made by another thread meanwhile
    }
    c.frozen.get_or_insert(name);
    let capacity = size(&c.sizes);
    let pool = MemoryPool::new(name, capacity)
        .unwrap_or_else(|e| panic!("nebula_memory: cannot create the global pool: {e}"));
    let pool: &'static MemoryPool = Box::leak(Box::new(pool));
    slot.store(ptr::from_ref(pool).cast_mut(), Release);
    pool
}

/// The engine pool ("engine", 256 MiB unless configured), created on first use. O(1).
///
/// # Panics
/// If the OS refuses to reserve its address space on first use.
///
/// ```
/// assert_eq!(nebula_memory::engine_pool().name(), "engine");
/// ```
pub fn engine_pool() -> &'static MemoryPool {
    pool(&ENGINE, "engine", |c| c.engine)
}

/// The game pool ("game", 512 MiB unless configured), created on first use. O(1).
///
/// # Panics
/// If the OS refuses to reserve its address space on first use.
///
/// ```
/// assert_eq!(nebula_memory::game_pool().name(), "game");
/// ```
pub fn game_pool() -> &'static MemoryPool {
    pool(&GAME, "game", |c| c.game)
}

/// The scratch pool ("scratch", 64 MiB unless configured), created on first use. Frame
/// arenas and scratch arenas draw from it. O(1).
///
/// # Panics
/// If the OS refuses to reserve its address space on first use.
///
/// ```
/// assert_eq!(nebula_memory::scratch_pool().name(), "scratch");
/// ```
pub fn scratch_pool() -> &'static MemoryPool {
    pool(&SCRATCH, "scratch", |c| c.scratch)
}

/// Runs [`MemoryPool::maintain`] on each global pool that exists; the second half of
/// [`maintain_global_pools`](crate::maintain_global_pools). Returns the ranges decommitted.
pub(crate) fn maintain_pools() -> usize {
    created_pools()
        .into_iter()
        .flatten()
        .map(MemoryPool::maintain)
        .sum()
}

/// The engine, game and scratch pools, those created so far (without creating any).
pub(crate) fn created_pools() -> [Option<&'static MemoryPool>; 3] {
    [made(&ENGINE), made(&GAME), made(&SCRATCH)]
}
