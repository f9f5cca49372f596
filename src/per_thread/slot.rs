//! One scratch arena and the state that makes a claim on it exclusive: a [`Slot`].
//!
//! A slot's **state** is free, busy (a scope, a batch or a Bevy item uses it) or being
//! trimmed. Whoever moves it out of free with a compare-and-swap (`Acquire`) has the arena
//! to itself until it stores free again (`Release`): a scope on the thread whose stack holds
//! the slot, a batch or a Bevy item on whichever thread claimed it, the maintaining thread
//! or a shared owner's frame end for a trim. A free arena holds nothing alive (freeing
//! resets it). Slots know their owner only by id; where a slot lives (a thread's stack, an
//! owner's list) is the business of `scratch` and `owner`. A slot records the ledger tag
//! its arena's blocks are charged to (`line`), which a shared owner's claim may change only
//! while the arena holds nothing.
//!
//! **The trim window.** A slot records the most one claim used in the current window of
//! [`SCRATCH_IDLE_PASSES`] passes; at the window's end, [`trim_if_oversized`] gives every
//! block back if the slot is free and was idle, or held more than twice that need.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, AtomicUsize};

use crate::arena::{ArenaConfig, MemoryArena, block_need};
use crate::global::scratch_pool;
use crate::ledger::{self, TagNode};

/// The length, in calls of [`maintain_global_pools`](crate::maintain_global_pools), of the
/// window over which a scratch arena (of [`with_scratch`](crate::with_scratch) or of a Bevy
/// `Scratch`) must have needed the memory it holds: 8. At the end of each window, a free
/// arena that was idle, or held more than twice what its busiest claim of the window used,
/// gives all of it back. Where the Bevy plugin maintains once a frame, a spike's memory is
/// back within 16 frames.
pub const SCRATCH_IDLE_PASSES: u64 = 8;

const FREE: u8 = 0;
const BUSY: u8 = 1;
const TRIMMING: u8 = 2;

/// One scratch arena: in a thread's stack (`with_scratch`) or in a shared owner's list.
pub(crate) struct Slot {
    /// `FREE`, `BUSY` or `TRIMMING`: whoever moved it out of `FREE` (with a compare-and-
    /// swap) has the arena to itself until it stores `FREE` again.
    state: AtomicU8,
    arena: UnsafeCell<MemoryArena<'static>>,
    /// The owner's id: only its scopes claim this arena.
    pub(super) owner_id: u64,
    /// The owner's frame in which a Bevy item claimed the arena, or [`NOT_RECLAIMED`] for a
    /// claim that no frame end may take back (a scope, a batch). Written by the claimer,
    /// read by a shared owner's frame end (`&mut` on its resource).
    pub(super) claimed_in: AtomicU64,
    /// Published when the arena is freed or trimmed, for other threads' figures: bytes of
    /// blocks held, and the largest `bytes_used` of one claim since the owner last asked.
    pub(super) held: AtomicUsize,
    pub(super) peak: AtomicUsize,
    /// The largest `bytes_used` of one claim in the current trim window.
    window_peak: AtomicUsize,
    /// The ledger tag the arena's blocks are charged to (null: untagged). Changed only by a
    /// shared owner's claim, under the owner's lock, while the arena holds no block
    /// ([`Slot::adopt_for`]); read under that lock.
    pub(super) line: AtomicPtr<TagNode>,
}

// SAFETY: the arena (`Send`) is used only by whoever holds the slot's state out of `FREE`
// (the compare-and-swap that takes it is `Acquire`, the store that gives it back `Release`,
// so each holder sees the last one's writes), on whichever thread. Everything else is
// atomic or immutable.
unsafe impl Sync for Slot {}
// SAFETY: as above: nothing in a slot is bound to a thread.
unsafe impl Send for Slot {}

impl Slot {
    /// A new arena of the owner `owner_id`, following its `config`, claimed (busy) with
    /// `claimed_in`.
    pub(super) fn new_busy(config: ArenaConfig, owner_id: u64, claimed_in: u64) -> Arc<Slot> {
        Self::new(config, owner_id, BUSY, claimed_in)
    }

    /// A new free arena of the owner `owner_id`, following its `config`.
    pub(super) fn new_free(config: ArenaConfig, owner_id: u64) -> Arc<Slot> {
        Self::new(config, owner_id, FREE, NOT_RECLAIMED)
    }

    fn new(config: ArenaConfig, owner_id: u64, state: u8, claimed_in: u64) -> Arc<Slot> {
        let line = config.tag.map_or(std::ptr::null_mut(), |t| {
            std::ptr::from_ref(ledger::node(t)).cast_mut()
        });
        Arc::new(Slot {
            state: AtomicU8::new(state),
            arena: UnsafeCell::new(MemoryArena::with_config(scratch_pool(), config)),
            owner_id,
            claimed_in: AtomicU64::new(claimed_in),
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            window_peak: AtomicUsize::new(0),
            line: AtomicPtr::new(line),
        })
    }

    /// Whether the arena's blocks are charged to `line`.
    pub(super) fn is_of(&self, line: &'static TagNode) -> bool {
        std::ptr::eq(self.line.load(Relaxed), line)
    }

    /// Makes the claimed arena `line`'s if it holds no block (retagged: nothing charged
    /// moves) or is `line`'s already; `false`, and nothing changed, if it holds blocks of
    /// another tag.
    ///
    /// # Safety
    /// The caller holds the slot busy (and no reference to its arena), and holds its
    /// owner's lock (which orders the writes of `line`).
    pub(super) unsafe fn adopt_for(&self, line: &'static TagNode) -> bool {
        if self.is_of(line) {
            return true;
        }
        // SAFETY: per the contract, the arena is the caller's alone.
        let arena = unsafe { self.arena() };
        if arena.bytes_held() != 0 {
            return false;
        }
        arena.retag(line);
        self.line
            .store(std::ptr::from_ref(line).cast_mut(), Relaxed);
        true
    }

    /// Gives back a claim that used nothing of the arena (no reset needed: it was reset
    /// when last freed, and nothing was allocated since).
    ///
    /// # Safety
    /// The caller holds the slot busy and allocated nothing from it.
    pub(super) unsafe fn unclaim(&self) {
        self.state.store(FREE, Release);
    }

    /// Moves the slot from free to busy: the caller has the arena to itself until it frees
    /// it. `false` if it was not free.
    pub(super) fn try_claim(&self) -> bool {
        self.state
            .compare_exchange(FREE, BUSY, Acquire, Relaxed)
            .is_ok()
    }

    /// Whether a claim holds the slot.
    pub(super) fn is_busy(&self) -> bool {
        self.state.load(Acquire) == BUSY
    }

    /// Takes back a busy slot whose claimer is gone: resets and frees it.
    ///
    /// # Safety
    /// The slot is busy, and its claimer (and everything it handed out) is gone, so the
    /// claim passes to the caller.
    pub(super) unsafe fn reclaim(&self) {
        // SAFETY: forwarded: the claim is the caller's, nothing of the arena is in use.
        unsafe { self.free() }
    }

    /// The arena. Only for the holder of the slot's state.
    ///
    /// # Safety
    /// The caller moved the state out of `FREE` and has not given it back, and holds no
    /// other reference from this function.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn arena(&self) -> &mut MemoryArena<'static> {
        // SAFETY: per the contract, the caller has the arena to itself.
        unsafe { &mut *self.arena.get() }
    }

    /// The arena, shared. Only for the holder of the slot's state.
    ///
    /// # Safety
    /// The caller moved the state out of `FREE` and has not given it back, and holds no
    /// reference from [`Slot::arena`].
    pub(crate) unsafe fn shared_arena(&self) -> &MemoryArena<'static> {
        // SAFETY: per the contract, nobody has the arena mutably.
        unsafe { &*self.arena.get() }
    }

    /// Records a claim's peak for the figures and the trim window. Only the holder writes
    /// larger values, so the read-modify-write is needed only when the peak is a new high
    /// (another thread may reset `peak` to 0 meanwhile).
    #[inline]
    pub(super) fn note_peak(&self, peak: usize) {
        if peak > self.peak.load(Relaxed) {
            self.peak.fetch_max(peak, Relaxed);
        }
        if peak > self.window_peak.load(Relaxed) {
            self.window_peak.fetch_max(peak, Relaxed);
        }
    }

    /// Resets the arena, publishes its figures and frees it.
    ///
    /// # Safety
    /// The caller holds the slot busy and nothing allocated from the arena is used any
    /// more.
    pub(super) unsafe fn free(&self) {
        // SAFETY: forwarded from the caller.
        let arena = unsafe { self.arena() };
        self.note_peak(arena.peak_since_reset());
        // Quietly: freeing runs in drops, also while unwinding, where user code must not
        // run (a budget crossing stays pending for the next operation that reports).
        arena.reset_quietly();
        self.held.store(arena.bytes_held(), Relaxed);
        self.state.store(FREE, Release);
    }
}

/// The pointer to a slot that claims hand out: `Arc::as_ptr`'s, whose provenance covers the
/// `Arc`'s counts too (so `claim_held` may take a count through it).
pub(crate) fn slot_ptr(slot: &Arc<Slot>) -> NonNull<Slot> {
    NonNull::new(Arc::as_ptr(slot).cast_mut()).expect("an Arc's pointer is not null")
}

/// `claimed_in` of a claim that is not a Bevy item's: a batch may live past its frame (in a
/// thread-local, leaked), so a frame end must never make its arena look forgotten.
pub(super) const NOT_RECLAIMED: u64 = u64::MAX;

/// Gives every block of `slot`'s arena back if it is free and was idle in the window ending
/// now, or held more than twice what its busiest claim of the window needed and more than
/// its first block; starts the slot's next window. Returns the bytes given back.
pub(super) fn trim_if_oversized(slot: &Slot) -> usize {
    if slot
        .state
        .compare_exchange(FREE, TRIMMING, Acquire, Relaxed)
        .is_err()
    {
        return 0; // in use: its window goes on until a pass finds it free
    }
    let needed = slot.window_peak.swap(0, Relaxed);
    // SAFETY: we moved the state out of `FREE`; a free arena holds nothing alive, and no
    // other reference to it exists until we store `FREE` again.
    let arena = unsafe { slot.arena() };
    let held = arena.bytes_held();
    // An idle arena gives everything back; a used one keeps its first block (plus a
    // granule for the header and rounding) or twice its need, whichever is more.
    let first = arena.config().first_block.saturating_add(4096);
    let keep = block_need(needed).saturating_mul(2).max(first);
    let mut given = 0;
    if held > 0 && (needed == 0 || held > keep) {
        given = held;
        arena.reset_and_release();
        slot.held.store(0, Relaxed);
    }
    slot.state.store(FREE, Release);
    given
}
