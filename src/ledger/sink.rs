//! The one internal sink for the ledger's events: a block taken or given back by a tagged
//! arena, and once a frame each tag's plot values.
//!
//! Two receivers stand behind it, both the crate's own code (never user code: events are
//! sent while an arena's chain lock is held): a recorder that tests and tools read back
//! ([`record_events`], [`take_recorded_events`]), and with the `tracy` feature the Tracy
//! client (`tracy`). Nothing is sent when neither is on: one relaxed load per block.

use super::event::{LedgerEvent, any_on, recording, set_recording};
use crate::fork::{Level, Lock};

static RECORDED: Lock<Vec<LedgerEvent>> = Lock::new(Level::Recorded, Vec::new());

/// Starts (`true`) or stops recording the ledger's events in memory, for tests and tools
/// that check what a profiler would be sent; [`take_recorded_events`] reads them back.
/// Events of every thread are recorded, so a test filters them by its own tags. O(1).
///
/// ```
/// use nebula_memory::ledger::{self, LedgerEvent};
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
///
/// ledger::record_events(true);
/// let arena = MemoryArena::with_config(scratch_pool(), ArenaConfig::default().tag("doc/events"));
/// arena.alloc_val(1u32);
/// drop(arena);
/// let mine: Vec<_> = ledger::take_recorded_events()
///     .into_iter()
///     .filter(|e| matches!(e, LedgerEvent::BlockTaken { tag: "doc/events", .. }
///                           | LedgerEvent::BlockReturned { tag: "doc/events", .. }))
///     .collect();
/// assert_eq!(mine.len(), 2); // one block taken, one given back
/// ```
pub fn record_events(on: bool) {
    set_recording(on);
}

/// The events recorded since the last call (see [`record_events`]). O(events).
pub fn take_recorded_events() -> Vec<LedgerEvent> {
    std::mem::take(&mut *RECORDED.lock())
}

/// Sends one event to every receiver that is on. O(1) when none is.
#[inline]
pub(crate) fn send(event: impl FnOnce() -> LedgerEvent) {
    if any_on() {
        deliver(event());
    }
}

#[cold]
fn deliver(event: LedgerEvent) {
    #[cfg(feature = "tracy")]
    super::tracy::receive(&event);
    if recording() {
        RECORDED.lock().push(event);
    }
}
