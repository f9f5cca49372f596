//! Who scratch arenas belong to: [`with_scratch`](crate::with_scratch), or one Bevy
//! `ScratchArenas` / `TaggedScratchArenas<T>` resource.
//!
//! An owner's arenas follow its config (and so its ledger tag) and count in its figures.
//! Two kinds:
//! - **per thread** (`with_scratch`): each thread's stack holds the owner's arenas for
//!   that thread, claimed without a lock on the fast path, one per nesting depth (see
//!   [`scratch`](super::scratch));
//! - **shared** (a Bevy resource): the owner holds its arenas itself, and a claim on any
//!   thread takes a free one. A system runs on one thread at a time, so a system's scratch
//!   needs as many arenas as it has claims alive at once (its item, and one batch per
//!   thread of a `par_iter`), not one per thread it ever ran on: an arena per thread held
//!   four times what a system needed on a 4-thread compute pool.
//!
//! **Lines.** A shared owner's claim may name the ledger tag it is for (a Bevy system's
//! scratch line). An arena that holds blocks is then one line's: the claim takes a free
//! arena of its line, else a free one holding nothing (its chain retagged, which moves no
//! charge), else makes one; never one holding another line's blocks. Each block is charged
//! to one tag from its taking to its return, so each line is exact and their parent is
//! their sum. A claim without a line (`TaggedScratch`, a tagged config) takes any free
//! arena, all of one tag.
//!
//! A shared owner's frame end ([`ScratchOwner::end_frame`], reached through `&mut` on its
//! resource, so no item of it is alive) takes back the arenas of items that were
//! `mem::forget`-ed, and, at the end of each window of [`SCRATCH_IDLE_PASSES`] frames,
//! gives back the memory of free arenas that were idle or held more than twice what their
//! busiest claim of the window needed.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};

use crate::fork::{BoxedLock, Level};

use super::slot::{NOT_RECLAIMED, SCRATCH_IDLE_PASSES, Slot, trim_if_oversized};
use crate::arena::ArenaConfig;
use crate::ledger::TagNode;

/// Who scratch arenas belong to (see the module docs).
pub(crate) struct ScratchOwner {
    pub(super) id: u64,
    pub(super) config: ArenaConfig,
    /// Frames this owner has ended (shared owners).
    frame: AtomicU64,
    /// How many arenas a shared owner holds (its list's length, readable without the lock).
    shared_arenas: AtomicUsize,
    /// Where the owner's arenas are.
    arenas: Arenas,
}

enum Arenas {
    /// In the threads' stacks; weakly here, for the figures (a thread's exit frees them).
    PerThread(BoxedLock<Vec<Weak<Slot>>>),
    /// Here, for any thread to claim.
    Shared(BoxedLock<Vec<Arc<Slot>>>),
}

/// The figures of one owner's arenas, from [`ScratchOwner::figures`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "bevy"), allow(dead_code))] // used by the Bevy owners
pub(crate) struct OwnerFigures {
    /// Sum over the arenas of the most one claim used since the last call.
    pub(crate) peak_bytes: usize,
    /// Arenas (of live threads, for a per-thread owner).
    pub(crate) arenas: usize,
    /// Bytes of blocks they hold (as of when each was last freed or trimmed).
    pub(crate) bytes_held: usize,
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

#[cfg_attr(not(feature = "bevy"), allow(dead_code))] // some of it only for the Bevy owners
impl ScratchOwner {
    fn with(config: ArenaConfig, arenas: Arenas) -> Arc<ScratchOwner> {
        Arc::new(ScratchOwner {
            id: NEXT_OWNER.fetch_add(1, Relaxed),
            config,
            frame: AtomicU64::new(0),
            shared_arenas: AtomicUsize::new(0),
            arenas,
        })
    }

    /// An owner whose arenas live in the threads' stacks (`with_scratch`).
    pub(crate) fn per_thread(config: ArenaConfig) -> Arc<ScratchOwner> {
        Self::with(
            config,
            Arenas::PerThread(BoxedLock::new(Level::Owners, Vec::new())),
        )
    }

    /// An owner that holds its arenas itself, for any thread to claim (a Bevy resource).
    pub(crate) fn shared(config: ArenaConfig) -> Arc<ScratchOwner> {
        Self::with(
            config,
            Arenas::Shared(BoxedLock::new(Level::Owners, Vec::new())),
        )
    }

    /// The config the owner's arenas follow.
    pub(crate) fn config(&self) -> ArenaConfig {
        self.config
    }

    /// Whether the owner holds its arenas itself.
    pub(super) fn is_shared(&self) -> bool {
        matches!(self.arenas, Arenas::Shared(_))
    }

    /// Records a new arena of a per-thread owner, for its figures.
    pub(super) fn note_thread_arena(&self, slot: &Arc<Slot>) {
        if let Arenas::PerThread(list) = &self.arenas {
            let mut list = list.lock();
            list.retain(|s| s.strong_count() > 0);
            list.push(Arc::downgrade(slot));
        }
    }

    /// Claims a free arena of a shared owner on the calling thread, making one if none
    /// fits; with `item`, as a Bevy item's (its frame recorded: a frame end may take it
    /// back once the item is gone), else as a batch's (never taken back). With a `line`,
    /// the arena is that ledger tag's (see the module docs): one of its own, else one
    /// holding nothing (retagged), else a new one; without, any free one. The slot comes
    /// with a reference count of its own.
    pub(super) fn claim_shared(
        self: &Arc<Self>,
        item: bool,
        line: Option<&'static TagNode>,
    ) -> Arc<Slot> {
        let Arenas::Shared(list) = &self.arenas else {
            unreachable!("claim_shared on a per-thread owner");
        };
        let claimed_in = if item {
            self.frame.load(Acquire)
        } else {
            NOT_RECLAIMED
        };
        let mut list = list.lock();
        let found = match line {
            None => list.iter().find(|slot| slot.try_claim()),
            Some(line) => list
                .iter()
                .find(|slot| slot.is_of(line) && slot.try_claim())
                .or_else(|| {
                    // `held` is a hint (published at the last free); the arena decides.
                    list.iter().find(|slot| {
                        if slot.held.load(Relaxed) != 0 || !slot.try_claim() {
                            return false;
                        }
                        // SAFETY: claimed just now, under the owner's lock; nothing of it
                        // is borrowed.
                        let adopted = unsafe { slot.adopt_for(line) };
                        if !adopted {
                            // SAFETY: claimed just now, nothing allocated from it.
                            unsafe { slot.unclaim() };
                        }
                        adopted
                    })
                }),
        };
        if let Some(slot) = found {
            slot.claimed_in.store(claimed_in, Relaxed);
            return Arc::clone(slot);
        }
        let config = line.map_or(self.config, |l| self.config.tag(l.path));
        // Kept by the owner past this claim's scope: untagged (see `heap::untagged`).
        let slot = crate::heap::untagged(|| {
            let slot = Slot::new_busy(config, self.id, claimed_in);
            list.push(Arc::clone(&slot));
            slot
        });
        self.shared_arenas.store(list.len(), Relaxed);
        slot
    }

    /// Makes a shared owner hold at least `arenas` arenas (new ones free and empty: an
    /// arena takes a block at its first allocation), so that claims up to that many at
    /// once allocate nothing on the heap. A load when it already does.
    pub(crate) fn reserve_shared(self: &Arc<Self>, arenas: usize) {
        if self.shared_arenas.load(Relaxed) >= arenas {
            return;
        }
        let Arenas::Shared(list) = &self.arenas else {
            return;
        };
        let mut list = list.lock();
        crate::heap::untagged(|| {
            while list.len() < arenas {
                list.push(Slot::new_free(self.config, self.id));
            }
        });
        self.shared_arenas.store(list.len(), Relaxed);
    }

    /// Ends the owner's frame: takes back the arenas of items that were `mem::forget`-ed
    /// (busy, claimed by an item, and no item is alive now), and at the end of each window
    /// of [`SCRATCH_IDLE_PASSES`] frames trims the free ones (see the module docs). Only
    /// shared owners hold arenas to do this with. Allocates nothing.
    ///
    /// # Safety
    /// No item that claimed one of this owner's arenas is alive.
    pub(crate) unsafe fn end_frame(&self) {
        let frame = self.frame.fetch_add(1, AcqRel) + 1;
        let Arenas::Shared(list) = &self.arenas else {
            return;
        };
        let list = list.lock();
        for slot in list.iter() {
            if slot.is_busy() && slot.claimed_in.load(Relaxed) != NOT_RECLAIMED {
                // SAFETY: claimed by an item (not a batch), and no item is alive (the
                // caller's promise): it was forgotten, and everything it handed out
                // borrowed it. Its claim passes to us, and we give it back.
                unsafe { slot.reclaim() };
            }
        }
        if frame.is_multiple_of(SCRATCH_IDLE_PASSES) {
            for slot in list.iter() {
                trim_if_oversized(slot);
            }
        }
    }

    /// The owner's arenas and the bytes they hold, leaving the peaks alone.
    pub(crate) fn held(&self) -> (usize, usize) {
        let mut n = (0, 0usize);
        self.each_arena(|slot| {
            n.0 += 1;
            n.1 = n.1.saturating_add(slot.held.load(Relaxed));
        });
        n
    }

    /// The owner's figures, and restarts the peaks.
    pub(crate) fn figures(&self) -> OwnerFigures {
        let mut f = OwnerFigures::default();
        self.each_arena(|slot| {
            f.arenas += 1;
            f.bytes_held = f.bytes_held.saturating_add(slot.held.load(Relaxed));
            f.peak_bytes = f.peak_bytes.saturating_add(slot.peak.swap(0, Relaxed));
        });
        f
    }

    /// Runs `f` on every arena of the owner (of live threads, for a per-thread owner).
    fn each_arena(&self, mut f: impl FnMut(&Slot)) {
        match &self.arenas {
            Arenas::PerThread(list) => list.lock().retain(|slot| match slot.upgrade() {
                Some(slot) => {
                    f(&slot);
                    true
                }
                None => false,
            }),
            Arenas::Shared(list) => list.lock().iter().for_each(|slot| f(slot)),
        }
    }
}
