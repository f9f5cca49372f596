//! Keeping a pool healthy between allocations: giving free pages back to the OS (the
//! purge policy) and releasing quarantined blocks, once per frame or when due.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{MemoryPool, State};
use crate::block::{DIRTY, HEADER, MAGIC_USED, MemoryBlock};

impl MemoryPool {
    /// Runs a decommit pass if the purge policy says one is due; `maintained`: called from
    /// `maintain` (a pass of the frame clock). The pass leaves as many dirty bytes as the
    /// policy allows (the recall of a recent peak).
    pub(super) fn purge_if_due(&self, st: &mut State, maintained: bool) -> usize {
        let in_use = st.counters.in_use;
        if st.purge.due(maintained, in_use) {
            let keep = st.purge.allowance(in_use);
            self.decommit_dirty(st, keep)
        } else {
            0
        }
    }

    /// One decommit pass: gives back the pages of dirty free ranges, leaving at most `keep`
    /// bytes of them resident (the first ranges in the index's order, the last of them in
    /// part: its start), and
    /// restarts the release pressure from what it left. O(free ranges); under the lock,
    /// because a range must not be handed out while its pages are being dropped. Returns
    /// the number of ranges decommitted.
    fn decommit_dirty(&self, st: &mut State, keep: usize) -> usize {
        // A segmented pool gives wholly free segments back first (whatever their pages),
        // unless the recall keeps some dirty memory.
        let mut count = if keep == 0 {
            self.release_free_segments(st)
        } else {
            0
        };
        let mut kept = 0usize;
        let state = &*st;
        state.index.for_each(|b| {
            // SAFETY: a free block on our lists, under the lock. Its interior (between the
            // header and the footer, which stay committed) is dead memory of its span.
            unsafe {
                if (*b).flags.load(Relaxed) & DIRTY != 0 {
                    let size = (*b).size;
                    // What may stay resident of this range: its first `stay` bytes.
                    let stay = (keep - kept).min(size);
                    kept += stay;
                    if stay == size {
                        return;
                    }
                    let interior = b.cast::<u8>().add(HEADER);
                    let from = stay.max(HEADER) - HEADER;
                    // Between the header and the footer, which stay committed.
                    let len = (size - HEADER - 8).saturating_sub(from);
                    if len == 0 {
                        return;
                    }
                    self.decommit(state, interior.add(from), len);
                    if stay <= HEADER {
                        // Wholly decommitted; a range partly resident stays dirty.
                        (*b).flags.fetch_and(!DIRTY, Relaxed);
                    }
                    count += 1;
                }
            }
        });
        st.purge.passed(kept);
        count
    }

    /// Sets the release pressure (bytes freed minus bytes acquired since the last decommit
    /// pass) above which free pages are given back to the OS once the purge delay has
    /// passed (default: capacity / 64, at most 4 MiB). After a peak, resident free memory
    /// falls to about this much once the peak's recall has passed
    /// ([`set_recall_window`](MemoryPool::set_recall_window)). O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_retain_limit(0);
    /// ```
    pub fn set_retain_limit(&self, bytes: usize) {
        self.state.lock().purge.retain_limit = bytes;
    }

    /// Sets how long release pressure must stay above the retain limit before a release or
    /// [`maintain`](MemoryPool::maintain) decommits (default 500 ms). As many calls of
    /// `maintain` as the delay is frames at 60 a second (30 for the default) also end it,
    /// whichever comes first. A delay rides out free-then-reallocate churn (a level
    /// unloaded, the next one loaded) without faulting every page in again;
    /// `Duration::ZERO` decommits as soon as the limit is crossed, `Duration::MAX` never
    /// (until [`trim`](MemoryPool::trim)). O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_purge_delay(std::time::Duration::ZERO);
    /// ```
    pub fn set_purge_delay(&self, delay: Duration) {
        self.state.lock().purge.set_delay(delay);
    }

    /// Sets the recall window: how long the free pages a *recurring* peak of use needed
    /// stay resident after it (default 10 s; as many calls of
    /// [`maintain`](MemoryPool::maintain) as that is frames at 60 a second, 600 for the
    /// default, also end it, whichever comes first), so that a spike that comes back finds
    /// them and pays no page faults. A peak recurs when it returns after use had fallen
    /// below half of it; its window then stretches to twice its period (up to 4 times the
    /// window set here). A first, one-off peak keeps nothing: its pages go back after the
    /// purge delay. Past the window, half of what is kept goes back per purge delay.
    /// `Duration::ZERO` turns the recall off; `Duration::MAX` keeps a recurring peak's
    /// pages until [`trim`](MemoryPool::trim). O(1).
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_purge_delay(Duration::ZERO);
    /// pool.set_retain_limit(0);
    /// let peak = |pool: &nebula_memory::MemoryPool| {
    ///     let block = pool.allocate_block(256 * 1024).unwrap();
    ///     // SAFETY: from this pool, not used afterwards.
    ///     unsafe { pool.free_block(block) };
    /// };
    /// peak(&pool);
    /// assert_eq!(pool.maintain(), 0, "a first peak's pages went back at its release");
    /// peak(&pool);
    /// assert_eq!(pool.maintain(), 0, "it came back: its pages stay for the next return");
    /// pool.set_recall_window(Duration::ZERO);
    /// assert_eq!(pool.maintain(), 1, "no recall: the free range goes back");
    /// ```
    pub fn set_recall_window(&self, window: Duration) {
        self.state.lock().purge.set_recall(window);
    }

    /// Gives free pages back to the OS if release pressure has stayed above the retain
    /// limit for the purge delay, and releases quarantined blocks whose wait is over.
    /// Cheap when nothing is due (a lock and a comparison); call it once per frame (see
    /// [`maintain_global_pools`](crate::maintain_global_pools)), since a steady arena
    /// workload makes no pool call that could run it. O(1), or O(free ranges) when a pass
    /// runs. Returns the number of ranges decommitted.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// assert_eq!(pool.maintain(), 0);
    /// ```
    pub fn maintain(&self) -> usize {
        let mut st = self.state.lock();
        st.quarantine.tick();
        while let Some(b) = st.quarantine.pop_expired() {
            // SAFETY: a quarantined block of this pool: dead, out of every list, its header
            // accessible; its data pages are made accessible again before it is released.
            unsafe {
                let size = (*b).size;
                let data = MemoryBlock::data_of(NonNull::new_unchecked(b)).as_ptr();
                self.protect(&st, data, size - HEADER, true);
                (*b).magic = MAGIC_USED;
                self.release_locked(&mut st, b);
            }
        }
        self.purge_if_due(&mut st, true)
    }

    /// Debug aid after Unreal's "purgatory": blocks given back with
    /// [`free_block`](MemoryPool::free_block) stay out of circulation, their data pages
    /// inaccessible (`mprotect(PROT_NONE)`), until [`maintain`](MemoryPool::maintain) has
    /// been called `frames` more times (call it once per frame). A stale pointer into a
    /// block an arena gave back then faults at once instead of reading recycled memory.
    /// `0` (the default) turns it off; blocks already waiting are released by the next
    /// `maintain`. Whole pages only: the first and last partial page of a block stay
    /// accessible. On targets without page protection the blocks are only delayed. O(1).
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// pool.set_quarantine(4);
    /// let block = pool.allocate_block(64 * 1024).unwrap();
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// assert_eq!(pool.stats().quarantined, 64 * 1024 + 32);
    /// for _ in 0..4 {
    ///     pool.maintain();
    /// }
    /// assert_eq!(pool.stats().in_use, 0);
    /// ```
    pub fn set_quarantine(&self, frames: u32) {
        self.state.lock().quarantine.frames = frames;
    }

    /// Gives the pages of every free range that may hold resident memory back to the OS
    /// now (each range's header and footer stay). O(free ranges). Returns the number of
    /// ranges decommitted.
    ///
    /// ```
    /// let pool = nebula_memory::MemoryPool::new("doc", 1 << 20).unwrap();
    /// assert_eq!(pool.trim(), 0); // nothing was ever touched
    /// let block = pool.allocate_block(4096).unwrap();
    /// // SAFETY: from this pool, not used afterwards.
    /// unsafe { pool.free_block(block) };
    /// assert_eq!(pool.trim(), 1);
    /// ```
    pub fn trim(&self) -> usize {
        let mut st = self.state.lock();
        self.decommit_dirty(&mut st, 0)
    }
}
