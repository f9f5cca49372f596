//! Errors of pools and arenas.
//!
//! Every refusal carries the name of the pool and the numbers a person needs to fix a
//! budget, and leaves the pool or arena fully usable.

use std::fmt;

/// Why a [`MemoryPool`](crate::MemoryPool) refused a request.
///
/// ```
/// use nebula_memory::{MemoryPool, PoolError};
///
/// let pool = MemoryPool::new("tiny", 64 * 1024).unwrap();
/// let err = pool.allocate_block(1 << 30).unwrap_err();
/// assert!(matches!(err, PoolError::TooLarge { pool: "tiny", .. }));
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// No free range is large enough right now. Counted in
    /// [`PoolStats::exhaustions`](crate::PoolStats::exhaustions) and reported by a `tracing`
    /// WARN event inside a `pool_exhausted` span.
    Exhausted {
        /// The pool's name.
        pool: &'static str,
        /// The `min_usable` that was asked for.
        requested: usize,
        /// Free bytes at the refusal (headers of free ranges included).
        free: usize,
        /// The largest `min_usable` that would have succeeded at the refusal.
        largest_free: usize,
    },
    /// `allocate_block(0)`: a block must hold at least one byte.
    ZeroSize {
        /// The pool's name.
        pool: &'static str,
    },
    /// The request can never be met: it is larger than the whole pool (or overflows).
    TooLarge {
        /// The pool's name.
        pool: &'static str,
        /// The `min_usable` that was asked for.
        requested: usize,
        /// The most an empty pool could hand out.
        max_usable: usize,
    },
    /// `MemoryPool::new` with a capacity of zero.
    InvalidCapacity {
        /// The pool's name.
        pool: &'static str,
        /// The capacity asked for.
        capacity: usize,
    },
    /// `MemoryPool::segmented` with a segment size of zero.
    InvalidSegment {
        /// The pool's name.
        pool: &'static str,
        /// The segment size asked for.
        segment: usize,
    },
    /// The operating system refused to reserve the address space: an address-space limit
    /// (`ulimit -v`, a container's), or a system that does not overcommit.
    ReserveFailed {
        /// The pool's name.
        pool: &'static str,
        /// The capacity asked for.
        capacity: usize,
        /// The OS error code, when there was one.
        os_code: Option<i32>,
    },
    /// The operating system refused to commit memory for a block (Windows commit limit).
    CommitFailed {
        /// The pool's name.
        pool: &'static str,
        /// The `min_usable` that was asked for.
        requested: usize,
    },
    /// `configure_global_pools` after a global pool was already created.
    AlreadyCreated {
        /// The name of the pool that exists already.
        pool: &'static str,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PoolError::Exhausted {
                pool,
                requested,
                free,
                largest_free,
            } => write!(
                f,
                "memory pool '{pool}' exhausted: asked for {requested} bytes, \
                 {free} bytes free, largest free block {largest_free} bytes (a global \
                 pool's size is set before first use with configure_global_pools, in Bevy \
                 MemoryPlugin::pools; ArenaConfig::heap_fallback lets an arena go on)"
            ),
            PoolError::ZeroSize { pool } => {
                write!(f, "memory pool '{pool}': a block of 0 bytes was requested")
            }
            PoolError::TooLarge {
                pool,
                requested,
                max_usable,
            } => write!(
                f,
                "memory pool '{pool}': {requested} bytes can never fit (at most {max_usable}; \
                 a global pool's size is set before first use with configure_global_pools, \
                 in Bevy MemoryPlugin::pools)"
            ),
            PoolError::InvalidCapacity { pool, capacity } => write!(
                f,
                "memory pool '{pool}': invalid capacity {capacity} (a pool spans at least 1 \
                 byte and at most isize::MAX bytes in whole pages)"
            ),
            PoolError::InvalidSegment { pool, segment } => write!(
                f,
                "memory pool '{pool}': invalid segment size {segment} (MemoryPool::segmented \
                 takes segments of at least 1 byte)"
            ),
            PoolError::ReserveFailed {
                pool,
                capacity,
                os_code,
            } => {
                write!(
                    f,
                    "memory pool '{pool}': could not reserve {capacity} bytes"
                )?;
                if let Some(code) = os_code {
                    write!(f, " ({})", std::io::Error::from_raw_os_error(code))?;
                }
                write!(
                    f,
                    ": the address space is limited (ulimit -v, a container) or not \
                     overcommitted; ask for less (a global pool's size is set before first \
                     use with configure_global_pools, in Bevy MemoryPlugin::pools) or raise \
                     the limit"
                )
            }
            PoolError::CommitFailed { pool, requested } => write!(
                f,
                "memory pool '{pool}': the OS refused to commit {requested} bytes"
            ),
            PoolError::AlreadyCreated { pool } => write!(
                f,
                "global pool '{pool}' already exists; configure pools before first use"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// Why an arena allocation failed.
///
/// Returned by the `try_` forms of [`MemoryArena`](crate::MemoryArena)'s methods; the
/// panicking forms print it.
///
/// ```
/// use nebula_memory::{AllocError, Arena, MemoryArena, MemoryPool};
///
/// let pool = MemoryPool::new("small", 64 * 1024).unwrap();
/// let arena = MemoryArena::new(&pool);
/// let err = arena.try_alloc_slice(1 << 20, 0u8).unwrap_err();
/// assert!(matches!(err, AllocError::Pool(_)));
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The arena needed a new block and its pool refused.
    Pool(PoolError),
    /// The size of a slice or string overflowed `isize::MAX`, or a layout was invalid.
    Layout {
        /// The pool the arena draws from.
        pool: &'static str,
    },
    /// A fixed-capacity arena ([`FrameArena`](crate::FrameArena)) has no room left.
    Full {
        /// The pool the arena's block is from.
        pool: &'static str,
        /// Bytes asked for.
        requested: usize,
        /// Bytes left in the arena (alignment padding may also be needed).
        remaining: usize,
    },
    /// The arena needed a new block and a hard budget of its ledger tag (or of a parent
    /// tag) refused it ([`Budget::Limit`](crate::ledger::Budget::Limit)).
    OverBudget {
        /// The tag whose budget refused: the arena's own or a parent.
        tag: &'static str,
        /// That tag's hard budget, in bytes held.
        budget: usize,
        /// Bytes of the block asked for.
        requested: usize,
        /// Bytes the tag held when it refused.
        held: usize,
    },
}

impl AllocError {
    pub(crate) fn layout(pool: &'static str) -> Self {
        AllocError::Layout { pool }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Pool(e) => write!(f, "arena allocation failed: {e}"),
            AllocError::Layout { pool } => write!(
                f,
                "arena on pool '{pool}': requested size overflows isize::MAX"
            ),
            AllocError::Full {
                pool,
                requested,
                remaining,
            } => write!(
                f,
                "fixed-capacity arena on pool '{pool}' is full: asked for {requested} bytes, \
                 {remaining} left (a thread arena's cap is set with set_thread_arena_capacity, \
                 in Bevy MemoryPlugin::thread_arena_capacity)"
            ),
            AllocError::OverBudget {
                tag,
                budget,
                requested,
                held,
            } => write!(
                f,
                "memory tag '{tag}' is over its budget: a block of {requested} bytes would take \
                 it past its limit of {budget} bytes (it holds {held}; the limit is set with \
                 ledger::set_budget, in Bevy MemoryPlugin::tag_budgets)"
            ),
        }
    }
}

impl std::error::Error for AllocError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AllocError::Pool(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PoolError> for AllocError {
    fn from(e: PoolError) -> Self {
        AllocError::Pool(e)
    }
}

/// Panics with `e`'s message, at the caller of the failing helper.
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn alloc_failed(e: &AllocError) -> ! {
    panic!("nebula_memory: {e}")
}

/// The value, or a panic with the error's message at the caller of the failing helper: the
/// panicking form of every `try_` helper.
#[inline(always)]
#[track_caller]
pub(crate) fn or_panic<T>(r: Result<T, AllocError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => alloc_failed(&e),
    }
}
