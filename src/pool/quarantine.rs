//! Quarantine: freed blocks held out of circulation for a few frames (a debug aid).
//!
//! Unreal's "purgatory": with `MemoryPool::set_quarantine(n)`, a block given back is not
//! put on the free lists. It is marked `MAGIC_QUARANTINE`, its whole data pages are made
//! inaccessible, and it waits until `maintain` (called once per frame) has run `n` more
//! times. A stale pointer into memory an arena gave back then faults at once instead of
//! reading recycled memory. This module keeps the queue; the pool protects pages and
//! releases what comes out.

use std::collections::VecDeque;

use crate::block::MemoryBlock;

/// Freed blocks waiting to be released, oldest first.
pub(crate) struct Quarantine {
    /// How many `maintain` calls a block waits (0: the quarantine is off).
    pub(crate) frames: u32,
    /// Blocks waiting, with their size and the epoch at which each was freed.
    queue: VecDeque<(*mut MemoryBlock, usize, u64)>,
    /// Bytes of the blocks in `queue` (whole blocks).
    pub(crate) bytes: usize,
    /// `maintain` calls so far.
    epoch: u64,
}

impl Quarantine {
    /// An empty, disabled quarantine.
    pub(crate) fn new() -> Quarantine {
        Quarantine {
            frames: 0,
            queue: VecDeque::new(),
            bytes: 0,
            epoch: 0,
        }
    }

    /// Whether freed blocks are held back now.
    pub(crate) fn active(&self) -> bool {
        self.frames > 0
    }

    /// Queues a freed block of `size` bytes.
    pub(crate) fn hold(&mut self, block: *mut MemoryBlock, size: usize) {
        self.queue.push_back((block, size, self.epoch));
        self.bytes += size;
    }

    /// One frame has passed.
    pub(crate) fn tick(&mut self) {
        self.epoch += 1;
    }

    /// The oldest block whose wait is over, taken off the queue.
    pub(crate) fn pop_expired(&mut self) -> Option<*mut MemoryBlock> {
        let &(block, size, freed_at) = self.queue.front()?;
        if self.epoch - freed_at < u64::from(self.frames) {
            return None;
        }
        self.queue.pop_front();
        self.bytes -= size;
        Some(block)
    }
}
