//! What a growth has to tell the outside world (a pool's refusal, a heap fallback, budget
//! crossings), recorded under the chain lock and told by the outermost operation, and the
//! process-wide count of heap-fallback blocks.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::PoolError;
use crate::ledger;

/// Blocks taken from the system heap by any arena, ever (see [`heap_fallbacks`]).
pub(crate) static HEAP_FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// How many blocks arenas with `heap_fallback` have taken from the system heap because
/// their pool was exhausted, since the process started (each also logged a WARN event).
/// O(1).
///
/// ```
/// let before = nebula_memory::heap_fallbacks();
/// assert!(nebula_memory::heap_fallbacks() >= before);
/// ```
pub fn heap_fallbacks() -> u64 {
    HEAP_FALLBACKS.load(Ordering::Relaxed)
}

/// What the chain has to tell the outside world about a growth, told only once the
/// whole operation that grew it is complete.
///
/// Reporting means calling `tracing`, and a subscriber is user code: it may allocate from
/// this very arena on this very thread, reset or end a frame of another, or panic. Under
/// the chain lock that would deadlock (the lock is not re-entrant); in the middle of a
/// growth it would bump into a block the growth is about to record as full; and in the
/// middle of a caller's operation (a `HotCursor` whose registers are not reloaded yet, a
/// thread arena about to publish its figures) it would see, or unwind through, a state
/// that is between two consistent ones. So the chain only *records* here, every layer
/// passes the record up, and the outermost operation calls [`Reports::emit`] as its very
/// last step, with everything written back.
#[derive(Default)]
#[must_use = "reports are emitted with `emit` once the operation is complete"]
pub(crate) struct Reports {
    /// The pool refused the block the arena needed (counted by the pool already).
    pub(super) exhausted: Option<PoolError>,
    /// The block came from the system heap instead (`heap_fallback`): the pool, the bytes
    /// asked for and the pool's refusal.
    pub(super) heap_fallback: Option<(&'static str, usize, PoolError)>,
}

impl Reports {
    /// Whether [`emit`](Reports::emit) would run user code: an event of this operation, or
    /// a budget crossing of any thread waiting to be reported.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.exhausted.is_some() || self.heap_fallback.is_some() || ledger::warnings_pending()
    }

    /// Emits the recorded events (and budget crossings waiting to be reported). Runs user
    /// code: call it only where the crate's state and the caller's are consistent, with no
    /// lock of the crate held. O(1) when nothing is pending.
    #[inline]
    pub(crate) fn emit(self) {
        if self.pending() {
            self.emit_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_now(self) {
        ledger::emit_pending_warnings();
        if let Some(cause) = &self.exhausted {
            crate::pool::report_exhausted(cause);
        }
        if let Some((name, bytes, cause)) = self.heap_fallback {
            let so_far = heap_fallbacks();
            tracing::warn!(
                pool = name,
                bytes,
                heap_fallbacks = so_far,
                "pool '{name}' refused ({cause}); arena falls back to the system heap for \
                 {bytes} bytes ({so_far} heap blocks so far in this process; this arena's \
                 further fallbacks are not reported until its pool serves it again)"
            );
        }
    }
}
