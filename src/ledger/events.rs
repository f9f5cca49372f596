//! The one internal sink for the ledger's events: a block taken or given back by a tagged
//! arena, and once a frame each tag's plot values.
//!
//! Two receivers stand behind it, both the crate's own code (never user code: events are
//! sent while an arena's chain lock is held): a recorder that tests and tools read back
//! ([`record_events`], [`take_recorded_events`]), and with the `tracy` feature the Tracy
//! client. Nothing is sent when neither is on: one relaxed load per block.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;

/// Something the ledger saw: see [`record_events`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerEvent {
    /// A tagged arena took a block: from its pool, or (`heap`) from the system heap.
    BlockTaken {
        /// The arena's tag.
        tag: &'static str,
        /// The block's address (its header).
        addr: usize,
        /// The block's size, header included.
        bytes: usize,
        /// The block came from the system heap (`heap_fallback`).
        heap: bool,
    },
    /// A tagged arena gave a block back.
    BlockReturned {
        /// The arena's tag.
        tag: &'static str,
        /// The block's address (its header).
        addr: usize,
        /// The block's size, header included.
        bytes: usize,
        /// The block goes back to the system heap.
        heap: bool,
    },
    /// Once a frame ([`end_frame`](super::end_frame)), for each tag: the bytes it holds
    /// and the bytes its arenas last published as used.
    Plot {
        /// The tag.
        tag: &'static str,
        /// Bytes of pool blocks held.
        held: usize,
        /// Bytes in use, as the arenas last published them.
        used: usize,
    },
    /// Once a frame, for each tag, with heap tracking in use (a
    /// [`TrackingAllocator`](crate::TrackingAllocator) counted something): the heap bytes
    /// live under the tag.
    HeapPlot {
        /// The tag.
        tag: &'static str,
        /// Heap bytes live (`TagFigures::heap_live`).
        live: usize,
    },
    /// A frame ended (only with frame marks on, see `enable_tracy`).
    FrameMark,
}

/// Some receiver is on: the one check on the block path when none is.
static ANY: AtomicBool = AtomicBool::new(false);
static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDED: Mutex<Vec<LedgerEvent>> = Mutex::new(Vec::new());
/// Frame marks go out with each `end_frame`.
static FRAME_MARKS: AtomicBool = AtomicBool::new(false);

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
    RECORDING.store(on, Relaxed);
    update_any();
}

/// The events recorded since the last call (see [`record_events`]). O(events).
pub fn take_recorded_events() -> Vec<LedgerEvent> {
    std::mem::take(&mut *RECORDED.lock())
}

/// Serializes the updates of `ANY`: each computes it from both switches after storing its
/// own, so the last one to run sees both and no update can leave a stale `false` behind.
static UPDATING: Mutex<()> = Mutex::new(());

fn update_any() {
    let _serial = UPDATING.lock();
    #[cfg(feature = "tracy")]
    let tracy = super::tracy_sink::is_on();
    #[cfg(not(feature = "tracy"))]
    let tracy = false;
    ANY.store(RECORDING.load(Relaxed) || tracy, Relaxed);
}

/// Sets whether `end_frame` also sends a frame mark (for apps without another frame
/// marker, such as headless ones).
#[cfg(feature = "tracy")]
pub(crate) fn set_frame_marks(on: bool) {
    FRAME_MARKS.store(on, Relaxed);
}

/// Turns the Tracy receiver's effect on the `ANY` check on.
#[cfg(feature = "tracy")]
pub(crate) fn receiver_changed() {
    update_any();
}

/// Sends one event to every receiver that is on. O(1) when none is.
#[inline]
pub(crate) fn send(event: impl FnOnce() -> LedgerEvent) {
    if ANY.load(Relaxed) {
        deliver(event());
    }
}

#[cold]
fn deliver(event: LedgerEvent) {
    #[cfg(feature = "tracy")]
    super::tracy_sink::receive(&event);
    if RECORDING.load(Relaxed) {
        RECORDED.lock().push(event);
    }
}

/// Whether frame marks are on.
pub(crate) fn frame_marks() -> bool {
    FRAME_MARKS.load(Relaxed)
}
