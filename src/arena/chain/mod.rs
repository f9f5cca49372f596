//! The chain: the blocks an arena holds, and the only code that takes or gives them back.
//!
//! The blocks form a singly linked list through their headers' `next`:
//! `first → … → current → spare → …`. Blocks before `current` are full (their header's
//! `used` says how far they were filled); the cursor is in `current`; blocks after it are
//! empty spares a rewind left behind, reused before any new block is taken. With no block,
//! `current` is null and the cursor sits at the sentinel.
//!
//! Blocks come from the arena's pool ([`Chain::take_block`]) or, with `heap_fallback`,
//! from the system heap when the pool is exhausted ([`Chain::take_from_heap`]); they go
//! back one at a time through [`Chain::release`], the single place where a block leaves an
//! arena, called by the one walk that releases a list ([`Chain::release_list`]). They are
//! the only places any arena kind (`FrameArena` is a one-block chain) takes a block from
//! its pool or gives one back, the reset's replacement block included, and they count both
//! (`ArenaStats::blocks_taken`, `blocks_returned`). Those three are where the ledger hooks
//! in: a tagged chain charges each block to its tag (and the tag's budgets may refuse it)
//! and tells the ledger's event sink.
//!
//! **Growth.** A request that does not fit enters the next spare, or a new block of
//! `max(needed, clamp(bytes held, first_block, max_block))`, never more than the pool's
//! largest block: each block is at least the sum of the previous ones, and one oversized
//! request gets a block of its own. Only the refusal of the size the request needs counts
//! as an exhaustion. With `heap_fallback` the block comes from the heap, sized by the same
//! rule, and the episode is reported once until the pool serves the arena again.
//!
//! The chain runs under its lock, so it only records what a growth has to tell
//! ([`Reports`], in `reports`); the outermost operation emits it as its last step.

use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

use super::config::ArenaConfig;
use super::cursor::Cursor;
use super::policy::round_block;
use crate::block::{HEADER, MIN_BLOCK, MemoryBlock, Word};
use crate::error::AllocError;
use crate::ledger::{self, LedgerEvent, TagNode, UsedSlot};
use crate::poison;
use crate::pool::MemoryPool;

mod extend;
mod reports;
mod rewind;

pub use reports::heap_fallbacks;
pub(crate) use reports::{HEAP_FALLBACKS, Reports};

/// The blocks of one arena. The pool they come from is passed in by the arena (a
/// `Chain` holds no lifetime, so the arena stays covariant in its pool's lifetime even
/// though the chain sits in a mutex).
pub(crate) struct Chain {
    first: *mut MemoryBlock,
    current: *mut MemoryBlock,
    block_count: usize,
    /// Bytes of the blocks held (whole blocks, headers included).
    bytes_held: usize,
    /// Blocks taken from the system heap (`heap_fallback`), never kept by reset.
    heap_blocks: usize,
    /// Pool blocks taken and given back, ever.
    blocks_taken: u64,
    blocks_returned: u64,
    /// Heap blocks taken since the pool last served this arena (0: not in an exhaustion
    /// episode); only the first of an episode is reported.
    heap_episode: u64,
    /// Heap blocks taken, ever.
    heap_taken: u64,
    /// The ledger tag the blocks are charged to, and where the arena publishes its bytes
    /// in use for it; `None`: untagged, the ledger never hears of this chain.
    tag: Option<Tag>,
}

/// A block given back whose bytes its tag still counts (see `Chain::release_uncredited`).
#[must_use = "credit the tag with `Chain::credit`"]
#[derive(Clone, Copy)]
pub(super) struct Uncredited {
    size: usize,
    heap: bool,
}

/// A chain's ledger tag.
pub(crate) struct Tag {
    node: &'static TagNode,
    used: std::sync::Arc<UsedSlot>,
}

/// How `Chain::take_block` asks the pool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A size with a fallback: a refusal is not an exhaustion.
    Tentatively,
    /// The size needed: a refusal is an exhaustion (counted now, reported later).
    ForReal,
}

/// Pool operations of one arena, ever: blocks taken from and given back to its pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChainFigures {
    pub(crate) blocks_taken: u64,
    pub(crate) blocks_returned: u64,
    pub(crate) heap_blocks_taken: u64,
}

// SAFETY: the chain exclusively owns its blocks (raw pointers into its pool, which is
// `Sync`, or heap memory); moving the chain moves that ownership.
unsafe impl Send for Chain {}

/// A block of the chain, never null.
#[inline(always)]
fn nn(b: *mut MemoryBlock) -> NonNull<MemoryBlock> {
    debug_assert!(!b.is_null());
    // SAFETY: callers pass blocks of the chain, which are never null.
    unsafe { NonNull::new_unchecked(b) }
}

/// The first usable byte of a block.
#[inline]
fn data(b: *mut MemoryBlock) -> *mut u8 {
    MemoryBlock::data_of(nn(b)).as_ptr()
}

/// The cursor window of a block we own: its usable bytes.
fn window(b: *mut MemoryBlock) -> (*mut u8, *mut u8) {
    let start = data(b);
    // SAFETY: `b` is a live block of the chain; its usable bytes follow the header.
    (start, unsafe { start.add((*b).capacity()) })
}

/// The usable bytes of a block we own.
fn window_len(b: *mut MemoryBlock) -> usize {
    // SAFETY: `b` is a live block of the chain.
    unsafe { (*b).capacity() }
}

impl Chain {
    /// A chain with no block.
    pub(crate) const fn new() -> Chain {
        Chain {
            first: ptr::null_mut(),
            current: ptr::null_mut(),
            block_count: 0,
            bytes_held: 0,
            heap_blocks: 0,
            blocks_taken: 0,
            blocks_returned: 0,
            heap_episode: 0,
            heap_taken: 0,
            tag: None,
        }
    }

    /// Charges this (empty) chain's blocks to `node` from now on: nothing charged moves.
    pub(crate) fn set_tag(&mut self, node: &'static TagNode) {
        debug_assert_eq!(self.block_count, 0, "tagging a chain that holds blocks");
        self.tag = Some(Tag {
            node,
            used: node.register_arena(),
        });
    }

    /// Publishes the arena's bytes in use to its tag (a plain store; nothing if untagged).
    #[inline]
    pub(crate) fn publish_used(&self, bytes: usize) {
        if let Some(t) = &self.tag {
            t.used.publish(bytes);
        }
    }

    /// Pool blocks taken and given back so far.
    pub(crate) fn figures(&self) -> ChainFigures {
        ChainFigures {
            blocks_taken: self.blocks_taken,
            blocks_returned: self.blocks_returned,
            heap_blocks_taken: self.heap_taken,
        }
    }

    /// Blocks held, spares included.
    pub(crate) fn block_count(&self) -> usize {
        self.block_count
    }

    /// Bytes of the blocks held.
    pub(crate) fn bytes_held(&self) -> usize {
        self.bytes_held
    }

    /// Exactly one block, from the pool: the steady state `reset` handles from the cursor
    /// alone.
    pub(crate) fn is_single_pool_block(&self) -> bool {
        self.block_count == 1 && self.heap_blocks == 0
    }

    /// The block after the current one (or the first, with no current block).
    fn next_spare(&self) -> *mut MemoryBlock {
        if self.current.is_null() {
            self.first
        } else {
            // SAFETY: `current` is a block we own.
            unsafe { (*self.current).next }
        }
    }

    /// Makes room for a request whose window needs `needed` bytes: enters the next spare if
    /// its window is large enough, or a new block linked after the current one.
    ///
    /// Events to report (an exhaustion, a heap fallback) go to `reports`, for the caller
    /// to emit once it has released the chain's lock.
    ///
    /// # Errors
    /// The pool's refusal (after the heap, with `heap_fallback`).
    pub(crate) fn grow(
        &mut self,
        pool: &MemoryPool,
        cursor: &Cursor,
        needed: usize,
        config: &ArenaConfig,
        reports: &mut Reports,
    ) -> Result<(), AllocError> {
        let spare = self.next_spare();
        if !spare.is_null() && window_len(spare) >= needed {
            self.enter(cursor, spare);
            return Ok(());
        }
        let block = self.take(pool, needed, config, reports)?;
        // SAFETY: `block` is fresh and ours; `current` is ours. Link it after `current`,
        // before the spares.
        unsafe {
            (*block).next = spare;
            if self.current.is_null() {
                self.first = block;
            } else {
                (*self.current).next = block;
            }
        }
        self.enter(cursor, block);
        Ok(())
    }

    /// Moves the cursor into `block`, the successor of the current block (or the first):
    /// records how far the current block was filled and starts `block`'s window there.
    fn enter(&mut self, cursor: &Cursor, block: *mut MemoryBlock) {
        let mut base = 0;
        if !self.current.is_null() {
            let used = cursor.used_here();
            // SAFETY: `current` is ours; we record how far it was filled.
            unsafe { (*self.current).word = Word { used } };
            base = cursor.base() + used;
        }
        self.current = block;
        let (start, end) = window(block);
        cursor.enter(start, end, base);
        // SAFETY: `block` is ours and nothing of its window is in use.
        unsafe { poison::hide(start, end.addr() - start.addr()) };
    }

    /// A new block whose window holds at least `needed` bytes, sized by the growth rule: at
    /// least the bytes held so far (so a frame lives in a few blocks), between
    /// `first_block` and `max_block`; a request beyond `max_block` gets a block of its own
    /// size.
    fn take(
        &mut self,
        pool: &MemoryPool,
        needed: usize,
        config: &ArenaConfig,
        reports: &mut Reports,
    ) -> Result<*mut MemoryBlock, AllocError> {
        // A capped arena (`held_limit`) never asks past its cap, pool or heap.
        let room = config.held_limit.saturating_sub(self.bytes_held);
        if needed > room {
            return Err(AllocError::Full {
                pool: pool.name(),
                requested: needed,
                remaining: room,
            });
        }
        // A `max_block` below `first_block` (0 included) means "first_block, never more".
        let smallest = config.first_block.max(1);
        let normal = self
            .bytes_held
            .clamp(smallest, config.max_block.max(smallest));
        // Never more than the pool can ever hand out: a default sized for larger pools is
        // clamped (a `first_block` set too large was refused when the arena was made).
        let grown = round_block(normal.max(needed)).min(room);
        let size = grown.min(pool.max_usable().max(needed));
        // Ask for the grown size without reporting a refusal: the pool may still hold a
        // block that fits the request alone, and only that request's refusal is a real
        // exhaustion (counted by the pool now, reported by the arena after the lock).
        let block = if size > needed {
            self.take_block(pool, size, Ask::Tentatively)
                .or_else(|_| self.take_block(pool, needed, Ask::ForReal))
        } else {
            self.take_block(pool, needed, Ask::ForReal)
        };
        let e = match block {
            Ok(b) => {
                self.heap_episode = 0;
                return Ok(b);
            }
            Err(AllocError::Pool(e)) => e,
            // A budget refusal: the heap fallback does not get around it.
            Err(e) => return Err(e),
        };
        let exhausted = matches!(e, crate::error::PoolError::Exhausted { .. });
        // Heap blocks grow like pool blocks (the growth rule's size, without the pool's
        // clamp), so a long exhaustion costs a few heap blocks, not one per request.
        let heap = if config.heap_fallback {
            self.take_from_heap(grown)?
        } else {
            None
        };
        let Some(block) = heap else {
            if exhausted {
                reports.exhausted = Some(e.clone());
            }
            return Err(AllocError::Pool(e));
        };
        // One report per exhaustion episode (until the pool serves this arena again), with
        // the count so far, not one per heap block.
        self.heap_episode += 1;
        if self.heap_episode == 1 {
            if exhausted {
                reports.exhausted = Some(e.clone());
            }
            reports.heap_fallback = Some((pool.name(), needed, e));
        }
        Ok(block)
    }

    /// Makes this empty chain one block whose window (the cursor's) is exactly `usable`
    /// bytes: a fixed-capacity arena. A refusal is recorded in `reports` for the caller to
    /// emit once it can run user code.
    pub(crate) fn take_fixed(
        &mut self,
        pool: &MemoryPool,
        cursor: &Cursor,
        usable: usize,
        reports: &mut Reports,
    ) -> Result<(), crate::error::PoolError> {
        debug_assert!(
            self.first.is_null(),
            "take_fixed on a chain that holds blocks"
        );
        let block = match self.take_block(pool, usable, Ask::ForReal) {
            Ok(block) => block,
            Err(AllocError::Pool(e)) => {
                if matches!(e, crate::error::PoolError::Exhausted { .. }) {
                    reports.exhausted = Some(e.clone());
                }
                return Err(e);
            }
            Err(e) => unreachable!("a fixed-capacity chain has no tag, so no budget: {e}"),
        };
        self.first = block;
        self.enter(cursor, block);
        // The block holds at least `usable` bytes: narrow the window to exactly that.
        let start = cursor.start();
        cursor.enter(start, start.wrapping_add(usable), 0);
        Ok(())
    }

    /// Takes a block with at least `usable` bytes from the pool: with
    /// [`Chain::release`], the one place where a pool block comes to or leaves an arena
    /// (what [`ChainFigures`] counts, and where the ledger hooks in). The block is unlinked
    /// and empty; the caller links it.
    ///
    /// # Errors
    /// `AllocError::Pool` with the pool's refusal, or `AllocError::OverBudget` if the
    /// chain's tag (or a parent) may not hold another block of that size.
    pub(crate) fn take_block(
        &mut self,
        pool: &MemoryPool,
        usable: usize,
        ask: Ask,
    ) -> Result<*mut MemoryBlock, AllocError> {
        // What the pool will hand out: `usable` rounded to 16, plus the header (it may add
        // a remainder too small to split, less than `MIN_BLOCK`; settled below).
        let estimate = usable
            .checked_next_multiple_of(16)
            .and_then(|n| n.checked_add(HEADER))
            .map_or(usize::MAX, |n| n.max(MIN_BLOCK));
        if let Some(t) = &self.tag {
            t.node.charge(estimate, false)?;
        }
        let block = match ask {
            Ask::Tentatively => pool.allocate_block_quietly(usable),
            Ask::ForReal => pool.allocate_block_unreported(usable),
        };
        let block = match block {
            Ok(block) => block,
            Err(e) => {
                if let Some(t) = &self.tag {
                    t.node.uncharge(estimate, false);
                }
                return Err(AllocError::Pool(e));
            }
        };
        self.blocks_taken += 1;
        let b = self.adopt(block);
        if let Some(t) = &self.tag {
            // SAFETY: a fresh block we own.
            let size = unsafe { (*b).size };
            t.node.settle(estimate, size, false);
            pool.note_charged(size, true);
            tell_block(true, t.node.path, b.addr(), size, false);
        }
        Ok(b)
    }

    /// Bookkeeping for a fresh block we now own (from the pool or the heap).
    fn adopt(&mut self, block: NonNull<MemoryBlock>) -> *mut MemoryBlock {
        // SAFETY: a fresh block we own.
        unsafe {
            let b = block.as_ptr();
            (*b).next = ptr::null_mut();
            (*b).word = Word { used: 0 };
            self.bytes_held += (*b).size;
        }
        self.block_count += 1;
        block.as_ptr()
    }

    /// `heap_fallback`: the pool refused; take the block from the system heap (`None` if
    /// the heap refuses too).
    ///
    /// # Errors
    /// `AllocError::OverBudget` if the chain's tag may not hold it: the heap does not get
    /// around a budget.
    #[cold]
    fn take_from_heap(&mut self, needed: usize) -> Result<Option<*mut MemoryBlock>, AllocError> {
        let estimate = needed.saturating_add(HEADER);
        if let Some(t) = &self.tag {
            t.node.charge(estimate, true)?;
        }
        let Some(block) = MemoryBlock::heap(needed) else {
            if let Some(t) = &self.tag {
                t.node.uncharge(estimate, true);
            }
            return Ok(None);
        };
        self.heap_blocks += 1;
        self.heap_taken += 1;
        HEAP_FALLBACKS.fetch_add(1, Ordering::Relaxed);
        let b = self.adopt(block);
        if let Some(t) = &self.tag {
            // SAFETY: a fresh block we own.
            let size = unsafe { (*b).size };
            t.node.settle(estimate, size, true);
            tell_block(true, t.node.path, b.addr(), size, true);
        }
        Ok(Some(b))
    }

    /// Gives one block back to where it came from (its pool, or the heap). The one place
    /// a block leaves an arena.
    ///
    /// # Safety
    /// `block` is ours, unlinked (or about to be forgotten with its list), and nothing in
    /// it is used any more.
    unsafe fn release(&mut self, pool: &MemoryPool, block: *mut MemoryBlock) {
        // SAFETY: as the caller guarantees. Credited already: nothing is owed.
        let _credited = unsafe { self.release_crediting(pool, block, true) };
    }

    /// `release`, but the chain's tag keeps the block's bytes until [`credit`](Chain::credit)
    /// is given what this returns: a replacement taken in between then never sees its tag
    /// dip under a budget and cross it again, as it would not if the block were still held.
    ///
    /// # Safety
    /// As for `release`.
    pub(super) unsafe fn release_uncredited(
        &mut self,
        pool: &MemoryPool,
        block: *mut MemoryBlock,
    ) -> Uncredited {
        // SAFETY: as the caller guarantees.
        unsafe { self.release_crediting(pool, block, false) }
    }

    /// Credits the chain's tag with a block `release_uncredited` gave back.
    pub(super) fn credit(&mut self, pool: &MemoryPool, owed: Uncredited) {
        self.uncharge(pool, owed);
        if let Some(t) = &self.tag
            && !owed.heap
        {
            t.node.left(owed.size);
        }
    }

    /// Takes a block given back off the chain's tag.
    fn uncharge(&mut self, pool: &MemoryPool, block: Uncredited) {
        if let Some(t) = &self.tag {
            t.node.release(block.size, block.heap);
            if !block.heap {
                pool.note_charged(block.size, false);
            }
        }
    }

    /// `release`, crediting the tag now or (`credit_now == false`) leaving it owed.
    ///
    /// # Safety
    /// As for `release`.
    unsafe fn release_crediting(
        &mut self,
        pool: &MemoryPool,
        block: *mut MemoryBlock,
        credit_now: bool,
    ) -> Uncredited {
        // SAFETY: the caller hands over a dead block we own.
        unsafe {
            let size = (*block).size;
            let heap = (*block).is_heap();
            self.bytes_held -= size;
            self.block_count -= 1;
            let owed = Uncredited { size, heap };
            if credit_now {
                self.uncharge(pool, owed);
            } else if let Some(t) = &self.tag
                && !heap
            {
                t.node.leave(size);
            }
            if let Some(t) = &self.tag {
                tell_block(false, t.node.path, block.addr(), size, heap);
            }
            if heap {
                self.heap_blocks -= 1;
                MemoryBlock::free_heap(nn(block));
            } else {
                self.blocks_returned += 1;
                pool.free_block(nn(block));
            }
            owed
        }
    }

    /// Releases `head` and every block linked after it.
    ///
    /// # Safety
    /// The list is ours, no longer reachable from the chain, and nothing in it is used.
    unsafe fn release_list(&mut self, pool: &MemoryPool, head: *mut MemoryBlock) {
        let mut b = head;
        while !b.is_null() {
            // SAFETY: read the link before the block goes back.
            unsafe {
                let next = (*b).next;
                self.release(pool, b);
                b = next;
            }
        }
    }

    /// Gives the spares (the blocks after the current one) back to the pool.
    pub(crate) fn trim_spares(&mut self, pool: &MemoryPool) {
        let spares = if self.current.is_null() {
            std::mem::replace(&mut self.first, ptr::null_mut())
        } else {
            // SAFETY: `current` is ours.
            unsafe { std::mem::replace(&mut (*self.current).next, ptr::null_mut()) }
        };
        // SAFETY: unlinked above; spares hold nothing.
        unsafe { self.release_list(pool, spares) };
    }

    /// Gives every block back (the arena is being dropped).
    pub(crate) fn release_all(&mut self, pool: &MemoryPool, cursor: &Cursor) {
        let all = std::mem::replace(&mut self.first, ptr::null_mut());
        self.current = ptr::null_mut();
        cursor.leave();
        // SAFETY: unlinked above; the arena's owner proved nothing is borrowed.
        unsafe { self.release_list(pool, all) };
    }
}

/// Tells the ledger's receivers that a tagged arena took (`taken`) or gave back the block
/// of `bytes` at `addr`, from or to its pool or (`heap`) the system heap.
pub(super) fn tell_block(taken: bool, tag: &'static str, addr: usize, bytes: usize, heap: bool) {
    ledger::send(|| {
        if taken {
            LedgerEvent::BlockTaken {
                tag,
                addr,
                bytes,
                heap,
            }
        } else {
            LedgerEvent::BlockReturned {
                tag,
                addr,
                bytes,
                heap,
            }
        }
    });
}
