//! What the ledger sends its receivers ([`LedgerEvent`]), and which receivers are on.
//!
//! The switches sit here, beneath both the sink (`sink`: sending, and the recorder) and
//! the Tracy receiver (`tracy`), so that each turns itself on or off without importing the
//! other: `any_on` is the one relaxed load the block path pays when no receiver is on.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use crate::fork::{Level, Lock};

/// Something the ledger saw: see [`record_events`](super::record_events).
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
/// The recorder is on (`record_events`).
static RECORDING: AtomicBool = AtomicBool::new(false);
/// The Tracy receiver is on: a relaxed copy of its state, for `ANY`.
static TRACY: AtomicBool = AtomicBool::new(false);
/// Frame marks go out with each `end_frame`.
static FRAME_MARKS: AtomicBool = AtomicBool::new(false);

/// Serializes the updates of `ANY`: each computes it from both switches after storing its
/// own, so the last one to run sees both and no update can leave a stale `false` behind.
static UPDATING: Lock<()> = Lock::new(Level::Switches, ());

fn set(switch: &AtomicBool, on: bool) {
    let _serial = UPDATING.lock();
    switch.store(on, Relaxed);
    ANY.store(RECORDING.load(Relaxed) || TRACY.load(Relaxed), Relaxed);
}

/// Whether some receiver is on. O(1): one relaxed load.
#[inline]
pub(crate) fn any_on() -> bool {
    ANY.load(Relaxed)
}

/// Turns the recorder on or off.
pub(crate) fn set_recording(on: bool) {
    set(&RECORDING, on);
}

/// Whether the recorder is on.
pub(crate) fn recording() -> bool {
    RECORDING.load(Relaxed)
}

/// Turns the Tracy receiver's part of [`any_on`] on or off.
#[cfg(feature = "tracy")]
pub(crate) fn set_tracy(on: bool) {
    set(&TRACY, on);
}

/// Sets whether `end_frame` also sends a frame mark (for apps without another frame
/// marker, such as headless ones).
#[cfg(feature = "tracy")]
pub(crate) fn set_frame_marks(on: bool) {
    FRAME_MARKS.store(on, Relaxed);
}

/// Whether frame marks are on.
pub(crate) fn frame_marks() -> bool {
    FRAME_MARKS.load(Relaxed)
}
