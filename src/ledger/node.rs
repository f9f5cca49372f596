//! One tag of the ledger: its counters and budgets, and the registry that interns tags.
//!
//! A tag is a `/`-separated path. Each path has one [`TagNode`], created on first use and
//! never freed (a program names a bounded set of tags), so arenas and the registry hold
//! `&'static TagNode`s. Every counter of a node covers the node and its children: a block
//! charged to `"render/meshing"` is added to `"render/meshing"` and to `"render"` when it
//! is taken, so a snapshot reads figures and never adds them up.
//!
//! **Charging.** The chain's `take_block`, `take_from_heap` and `release` charge or
//! uncharge the whole block on the node and every parent. A hard budget is checked in the
//! same call: add, then undo on refusal, so two threads cannot both slip under it (one
//! read-modify-write of `total`); the pool's rounding is settled once the block came, at
//! most 47 bytes. Pools keep `charged` for the untagged rest. A warn budget's crossing is
//! recorded here and told after the chain lock is released, like every event. A reset
//! that replaces its block keeps the old one charged until the replacement is taken (no
//! budget dip); the peak leaves it out (`leaving`), since the pool never holds both.
//!
//! **Used.** What an arena uses is a plain store, at reset and on a new block, into a
//! [`UsedSlot`] of the arena's own, on cache lines of its own (a system's batch arenas
//! reset on several threads at once); a snapshot adds the slots up.
//!
//! A tag's heap id is given when its node is made, never inside an allocation (the heap
//! tracker's charge path must not allocate).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};

use crate::fork::{Level, Lock};

use super::growth::Growth;
use crate::error::AllocError;
use crate::heap::counters::{self, HeapReading};

/// No budget of this kind.
const NONE: usize = usize::MAX;

/// The bytes one arena used, as it last published them (see [`TagNode::used`]).
///
/// On cache lines of its own: an arena stores here at every reset, and arenas made
/// together (a system's batch arenas, used at once on as many threads) would otherwise get
/// neighbouring heap slots, and each thread's reset would take the line from the others.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct UsedSlot(AtomicUsize);

impl UsedSlot {
    /// Publishes the arena's bytes in use: a plain store, cheap enough for `reset`.
    #[inline]
    pub(crate) fn publish(&self, bytes: usize) {
        self.0.store(bytes, Relaxed);
    }
}

/// One tag's figures, its own and its children's together.
pub(crate) struct TagNode {
    pub(crate) path: &'static str,
    /// The tag one level up (`"render"` for `"render/meshing"`).
    pub(crate) parent: Option<&'static TagNode>,
    /// Where the node is in the registry (which only grows, parents before children).
    pub(crate) index: usize,
    /// Bytes of pool blocks charged now; its most ever.
    held: AtomicUsize,
    peak_held: AtomicUsize,
    /// Bytes of pool blocks already back in their pool that `held` still counts: a reset
    /// keeps its tag charged for the block it replaces until the replacement is taken
    /// (`Chain::release_uncredited`), so that a budget sees no dip. Left out of
    /// `peak_held`: the pool never held both.
    leaving: AtomicUsize,
    /// Bytes of heap-fallback blocks charged now.
    heap_held: AtomicUsize,
    /// `held + heap_held`, kept in one atomic so that a hard budget is checked with one
    /// read-modify-write: two charges (of either kind, on any threads) cannot both see room
    /// for one.
    pub(super) total: AtomicUsize,
    blocks_taken: AtomicU64,
    blocks_returned: AtomicU64,
    heap_fallbacks: AtomicU64,
    /// Budgets in bytes held (pool and heap blocks); `NONE` if unset.
    pub(super) warn: AtomicUsize,
    pub(super) limit: AtomicUsize,
    /// `held` is above `warn` and the crossing was reported (or is about to be): no second
    /// WARN until it fell back to `warn` or below.
    over_warn: AtomicBool,
    /// A crossing of `warn` waits to be reported (after the arena's lock is released).
    pub(super) warn_pending: AtomicBool,
    /// The arenas charging to exactly this tag, for `used`.
    arenas: Lock<Vec<Weak<UsedSlot>>>,
    /// This tag's id in the heap counters (`heap::counters`); 0 once the table is full.
    pub(crate) heap_id: u16,
    /// Heap bytes live under this tag and its children at the last snapshot: the heap's
    /// part of the budgets (the heap is counted per thread and summed at snapshots).
    pub(super) heap_seen: AtomicUsize,
    /// The frame's peak of heap bytes under this tag and its children at the last snapshot
    /// (`TagFigures::heap_frame_peak`): what the budgets' crossings are judged on.
    pub(super) heap_frame_seen: AtomicUsize,
    /// The most heap bytes live under this tag and its children ever: the largest of the
    /// frames' highs (an upper bound, see `TagFigures::heap_frame_peak`).
    heap_peak: AtomicUsize,
    /// This tag's own heap counts at the last frame end.
    heap_base: FrameBase,
    /// Whether its live heap keeps rising, window after window (leaks and growth).
    pub(crate) growth: Growth,
    /// Arena and heap bytes together are above `limit` and that was reported: the heap
    /// cannot be refused, only told about.
    over_limit: AtomicBool,
    pub(super) limit_pending: AtomicBool,
    /// Crossings of the warn budget or the limit, ever.
    crossings: AtomicU64,
}

/// Every tag so far. Tags are few and looked up only when an arena is made or a budget
/// set, so a list is enough.
static REGISTRY: Lock<Vec<&'static TagNode>> = Lock::new(Level::Tags, Vec::new());

/// A crossing of some warn budget waits to be reported.
pub(super) static ANY_WARN_PENDING: AtomicBool = AtomicBool::new(false);

/// Checks that `tag` is a `/`-separated path of non-empty segments; the panic names the
/// caller's field.
#[track_caller]
pub(crate) fn check_tag(field: &str, tag: &str) {
    assert!(
        !tag.is_empty() && tag.split('/').all(|s| !s.is_empty()),
        "{field}: tag {tag:?} is not a '/'-separated path of non-empty segments \
         (for example \"render/meshing\")"
    );
}

/// The node of `path`, created (with its parents) on first use. O(tags).
pub(crate) fn node(path: &'static str) -> &'static TagNode {
    // The registry and its nodes live for the process: untagged (see `heap::untagged`).
    crate::heap::untagged(|| {
        let mut registry = REGISTRY.lock();
        intern(&mut registry, path)
    })
}

/// [`node`] for a spelling that is not `'static` (a name made at run time): the spelling
/// is leaked only when the tag is new, so asking again (an app made again) leaks nothing.
/// O(tags).
#[cfg_attr(not(feature = "bevy"), allow(dead_code))]
pub(crate) fn node_named(path: &str) -> &'static TagNode {
    crate::heap::untagged(|| {
        let mut registry = REGISTRY.lock();
        match find(&registry, path) {
            Some(n) => n,
            None => intern(&mut registry, Box::leak(path.to_owned().into_boxed_str())),
        }
    })
}

/// The heap counts of exactly the tag `path` (not its children's), ever: allocation calls,
/// bytes allocated, bytes live; `None` for a tag never made. Unlike a snapshot's figures,
/// these do not depend on where frames end (any thread may end the ledger's frame), so
/// a test's own frames can be told apart by differences of two readings. O(tags).
#[cfg_attr(not(feature = "bevy"), allow(dead_code))]
pub(crate) fn heap_totals(path: &str) -> Option<(u64, u64, usize)> {
    let node = find(&REGISTRY.lock(), path)?;
    let r = counters::read(node.heap_id, false);
    Some((r.allocs, r.up_bytes, r.live))
}

fn find(registry: &[&'static TagNode], path: &str) -> Option<&'static TagNode> {
    registry.iter().find(|n| n.path == path).copied()
}

fn intern(registry: &mut Vec<&'static TagNode>, path: &'static str) -> &'static TagNode {
    if let Some(n) = find(registry, path) {
        return n;
    }
    let parent = path.rfind('/').map(|i| intern(registry, &path[..i]));
    let node: &'static TagNode = Box::leak(Box::new(TagNode {
        path,
        parent,
        index: registry.len(),
        held: AtomicUsize::new(0),
        peak_held: AtomicUsize::new(0),
        leaving: AtomicUsize::new(0),
        heap_held: AtomicUsize::new(0),
        total: AtomicUsize::new(0),
        blocks_taken: AtomicU64::new(0),
        blocks_returned: AtomicU64::new(0),
        heap_fallbacks: AtomicU64::new(0),
        warn: AtomicUsize::new(NONE),
        limit: AtomicUsize::new(NONE),
        over_warn: AtomicBool::new(false),
        warn_pending: AtomicBool::new(false),
        arenas: Lock::new(Level::TagArenas, Vec::new()),
        heap_id: crate::heap::counters::new_tag_id(),
        heap_seen: AtomicUsize::new(0),
        heap_frame_seen: AtomicUsize::new(0),
        heap_peak: AtomicUsize::new(0),
        heap_base: FrameBase::new(),
        growth: Growth::new(),
        over_limit: AtomicBool::new(false),
        limit_pending: AtomicBool::new(false),
        crossings: AtomicU64::new(0),
    }));
    registry.push(node);
    node
}

/// Every node so far, parents before children, in the order tags were first used (a
/// node's `index` is its place here).
pub(crate) fn all_nodes() -> Vec<&'static TagNode> {
    REGISTRY.lock().clone()
}

/// Runs `f` on every node so far, under the registry's lock (no copy of the list; a tag
/// made meanwhile waits). `f` takes no other lock of the ledger's but a node's `arenas`.
pub(crate) fn with_nodes<R>(f: impl FnOnce(&[&'static TagNode]) -> R) -> R {
    f(&REGISTRY.lock())
}

/// One tag's figures at one moment (see `TagFigures` for their meaning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) held: usize,
    pub(crate) peak_held: usize,
    pub(crate) heap_held: usize,
    pub(crate) used: usize,
    pub(crate) blocks_taken: u64,
    pub(crate) blocks_returned: u64,
    pub(crate) heap_fallbacks: u64,
    pub(crate) warn: Option<usize>,
    pub(crate) limit: Option<usize>,
    pub(crate) heap: Heap,
}

/// A heap line's counts at the last frame end: the counters are totals, and a frame's
/// figures are the difference (the tags' own lines, and the untagged one).
pub(crate) struct FrameBase {
    allocs: AtomicU64,
    frees: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
}

impl FrameBase {
    pub(crate) const fn new() -> FrameBase {
        FrameBase {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        }
    }

    /// The frame so far of the line read as `r`; with `frame_end`, `r` starts the next.
    pub(crate) fn frame(&self, r: HeapReading, frame_end: bool) -> OwnHeap {
        let own = OwnHeap {
            totals: r,
            allocs: counters::since(r.allocs, self.allocs.load(Relaxed)),
            frees: counters::since(r.frees, self.frees.load(Relaxed)),
            alloc_bytes: counters::since(r.up_bytes, self.up.load(Relaxed)) as usize,
            free_bytes: counters::since(r.down_bytes, self.down.load(Relaxed)) as usize,
        };
        if frame_end {
            self.allocs.store(r.allocs, Relaxed);
            self.frees.store(r.frees, Relaxed);
            self.up.store(r.up_bytes, Relaxed);
            self.down.store(r.down_bytes, Relaxed);
        }
        own
    }
}

/// A heap line's own counters at a snapshot: the totals, and the frame's calls and bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OwnHeap {
    pub(crate) totals: HeapReading,
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
    pub(crate) alloc_bytes: usize,
    pub(crate) free_bytes: usize,
}

/// A tag's figures summed over its subtree at a snapshot: arena bytes used and heap.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Subtree {
    pub(crate) used: usize,
    pub(crate) heap_live: usize,
    pub(crate) heap_frame_peak: usize,
    pub(crate) heap_allocs: u64,
    pub(crate) heap_frees: u64,
    pub(crate) heap_alloc_bytes: usize,
    pub(crate) heap_free_bytes: usize,
}

impl Subtree {
    fn add(&mut self, o: Subtree) {
        self.used = self.used.saturating_add(o.used);
        self.heap_live = self.heap_live.saturating_add(o.heap_live);
        self.heap_frame_peak = self.heap_frame_peak.saturating_add(o.heap_frame_peak);
        self.heap_allocs = self.heap_allocs.wrapping_add(o.heap_allocs);
        self.heap_frees = self.heap_frees.wrapping_add(o.heap_frees);
        self.heap_alloc_bytes = self.heap_alloc_bytes.saturating_add(o.heap_alloc_bytes);
        self.heap_free_bytes = self.heap_free_bytes.saturating_add(o.heap_free_bytes);
    }

    /// Each node's subtree sums, by registry index, into `sums`: its own figures, then a
    /// pass from the last node to the first adds each into its parent (parents come
    /// before their children, so a node is complete when its turn comes). O(tags).
    pub(crate) fn sum(nodes: &[&'static TagNode], own_heap: &[OwnHeap], sums: &mut Vec<Subtree>) {
        sums.clear();
        sums.extend(nodes.iter().zip(own_heap).map(|(n, h)| Subtree {
            used: n.own_used(),
            heap_live: h.totals.live,
            heap_frame_peak: h.totals.high,
            heap_allocs: h.allocs,
            heap_frees: h.frees,
            heap_alloc_bytes: h.alloc_bytes,
            heap_free_bytes: h.free_bytes,
        }));
        for i in (0..nodes.len()).rev() {
            if let Some(p) = nodes[i].parent {
                debug_assert!(p.index < i, "a parent after its child");
                let child = sums[i];
                sums[p.index].add(child);
            }
        }
    }
}

/// A tag's heap figures at a snapshot (its children's included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Heap {
    pub(crate) live: usize,
    pub(crate) peak: usize,
    /// Allocation and free calls since the last frame end.
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
}

fn budget(v: usize) -> Option<usize> {
    (v != NONE).then_some(v)
}

impl TagNode {
    /// This node, then each parent up to the top level.
    fn lineage(&'static self) -> impl Iterator<Item = &'static TagNode> {
        std::iter::successors(Some(self), |n| n.parent)
    }

    /// Sets the warn or the hard budget (`NONE` clears it).
    pub(crate) fn set_warn(&self, bytes: usize) {
        self.warn.store(bytes, Relaxed);
        self.over_warn.store(false, Relaxed);
    }

    pub(crate) fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Relaxed);
    }

    pub(crate) fn clear_budgets(&self) {
        self.set_warn(NONE);
        self.set_limit(NONE);
    }

    /// Registers an arena that charges to this tag; its slot carries what it publishes.
    pub(crate) fn register_arena(&'static self) -> Arc<UsedSlot> {
        // The list outlives the arena that grows it: untagged (see `heap::untagged`).
        crate::heap::untagged(|| {
            let slot = Arc::new(UsedSlot::default());
            let mut arenas = self.arenas.lock();
            arenas.retain(|w| w.strong_count() > 0);
            arenas.push(Arc::downgrade(&slot));
            slot
        })
    }

    /// Charges `bytes` to this tag and its parents before a block is taken: refused with
    /// `AllocError::OverBudget` (naming the tag whose hard budget it would pass, nearest
    /// first) and nothing charged, if any of them would then hold more than its limit.
    /// `heap`: the block comes from the system heap. Follow with [`TagNode::settle`] once
    /// the block is there, or [`TagNode::uncharge`] if it never comes.
    pub(crate) fn charge(&'static self, bytes: usize, heap: bool) -> Result<(), AllocError> {
        for (i, n) in self.lineage().enumerate() {
            // The decision is this one read-modify-write of `total`: whatever other
            // charges (pool or heap, any thread) come in the same instant, the one that
            // takes `total` past the limit sees it and is refused.
            let was = n.total.fetch_add(bytes, Relaxed);
            // The heap's part is as of the last snapshot: it cannot be refused itself,
            // but it leaves the tag's arenas less room.
            let heap_part = n.heap_seen.load(Relaxed);
            let now = was.saturating_add(bytes).saturating_add(heap_part);
            let limit = n.limit.load(Relaxed);
            if now > limit {
                n.total.fetch_sub(bytes, Relaxed);
                for m in self.lineage().take(i) {
                    m.total.fetch_sub(bytes, Relaxed);
                    if heap { &m.heap_held } else { &m.held }.fetch_sub(bytes, Relaxed);
                }
                return Err(AllocError::OverBudget {
                    tag: n.path,
                    budget: limit,
                    requested: bytes,
                    held: was.saturating_add(heap_part),
                });
            }
            if heap { &n.heap_held } else { &n.held }.fetch_add(bytes, Relaxed);
        }
        Ok(())
    }

    /// Takes back a charge whose block never came.
    pub(crate) fn uncharge(&'static self, bytes: usize, heap: bool) {
        for n in self.lineage() {
            if heap { &n.heap_held } else { &n.held }.fetch_sub(bytes, Relaxed);
            n.total.fetch_sub(bytes, Relaxed);
        }
    }

    /// The block of a charge of `charged` bytes came and has `actual` bytes (the pool
    /// rounds up a little): corrects the charge and counts the block.
    pub(crate) fn settle(&'static self, charged: usize, actual: usize, heap: bool) {
        for n in self.lineage() {
            let counter = if heap { &n.heap_held } else { &n.held };
            if actual >= charged {
                counter.fetch_add(actual - charged, Relaxed);
                n.total.fetch_add(actual - charged, Relaxed);
            } else {
                counter.fetch_sub(charged - actual, Relaxed);
                n.total.fetch_sub(charged - actual, Relaxed);
            }
            if heap {
                n.heap_fallbacks.fetch_add(1, Relaxed);
            } else {
                n.blocks_taken.fetch_add(1, Relaxed);
                // Bytes on their way out are not held: a reset's replacement would
                // otherwise count the block it replaces too, a spike twice.
                let held = n.held.load(Relaxed);
                n.peak_held
                    .fetch_max(held.saturating_sub(n.leaving.load(Relaxed)), Relaxed);
            }
            let total = n
                .total
                .load(Relaxed)
                .saturating_add(n.heap_seen.load(Relaxed));
            if total > n.warn.load(Relaxed) && !n.over_warn.swap(true, Relaxed) {
                n.warn_pending.store(true, Relaxed);
                n.crossings.fetch_add(1, Relaxed);
                ANY_WARN_PENDING.store(true, Relaxed);
            }
        }
    }

    /// A pool block of `bytes` went back to its pool but stays charged until
    /// [`TagNode::left`]: out of the peak meanwhile.
    pub(crate) fn leave(&'static self, bytes: usize) {
        for n in self.lineage() {
            n.leaving.fetch_add(bytes, Relaxed);
        }
    }

    /// The block of a [`TagNode::leave`] was credited (`release` first: a peak read in
    /// between is low by it, never high).
    pub(crate) fn left(&'static self, bytes: usize) {
        for n in self.lineage() {
            n.leaving.fetch_sub(bytes, Relaxed);
        }
    }

    /// A block of `bytes` went back to its pool (or the heap).
    pub(crate) fn release(&'static self, bytes: usize, heap: bool) {
        for n in self.lineage() {
            let counter = if heap { &n.heap_held } else { &n.held };
            counter.fetch_sub(bytes, Relaxed);
            let total = n.total.fetch_sub(bytes, Relaxed) - bytes;
            if !heap {
                n.blocks_returned.fetch_add(1, Relaxed);
            }
            if total.saturating_add(n.heap_seen.load(Relaxed)) <= n.warn.load(Relaxed) {
                n.over_warn.store(false, Relaxed);
            }
        }
    }

    /// The node's figures now, with `used`: what the arenas of this tag and of every tag
    /// below it published.
    pub(crate) fn read(&self, used: usize) -> Reading {
        Reading {
            held: self.held.load(Relaxed),
            peak_held: self.peak_held.load(Relaxed),
            heap_held: self.heap_held.load(Relaxed),
            used,
            blocks_taken: self.blocks_taken.load(Relaxed),
            blocks_returned: self.blocks_returned.load(Relaxed),
            heap_fallbacks: self.heap_fallbacks.load(Relaxed),
            warn: budget(self.warn.load(Relaxed)),
            limit: budget(self.limit.load(Relaxed)),
            heap: Heap::default(),
        }
    }

    /// Crossings of the warn budget or the limit, ever (read after `see_heap`, which may
    /// find one).
    pub(crate) fn crossings(&self) -> u64 {
        self.crossings.load(Relaxed)
    }

    /// The bytes used by the arenas charging to exactly this tag (not its children's).
    pub(crate) fn own_used(&'static self) -> usize {
        self.arenas
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| s.0.load(Relaxed))
            .fold(0usize, usize::saturating_add)
    }

    /// This tag's own heap counters (not its children's): totals, and this frame's calls
    /// and bytes; with `frame_end`, the next frame starts here (its counts, and its high:
    /// see `counters::read`).
    pub(crate) fn own_heap(&self, frame_end: bool) -> OwnHeap {
        self.heap_base
            .frame(counters::read(self.heap_id, frame_end), frame_end)
    }

    /// Records the heap bytes a snapshot found under this tag (its children's included),
    /// live now and the most this frame: the peak ever, and the heap's part of the budgets.
    /// Their crossings are checked here on the frame's peak, so that a spike that comes and
    /// goes within a frame crosses too (a crossing waits to be reported, like an arena's);
    /// the bytes live now are what an arena's next block is judged with.
    pub(crate) fn see_heap(&self, live: usize, frame_peak: usize) -> usize {
        let frame_peak = frame_peak.max(live);
        self.heap_seen.store(live, Relaxed);
        self.heap_frame_seen.store(frame_peak, Relaxed);
        let peak = self
            .heap_peak
            .fetch_max(frame_peak, Relaxed)
            .max(frame_peak);
        let total = self.total.load(Relaxed).saturating_add(frame_peak);
        if total > self.warn.load(Relaxed) {
            if !self.over_warn.swap(true, Relaxed) {
                self.warn_pending.store(true, Relaxed);
                self.crossings.fetch_add(1, Relaxed);
                ANY_WARN_PENDING.store(true, Relaxed);
            }
        } else {
            self.over_warn.store(false, Relaxed);
        }
        if total > self.limit.load(Relaxed) {
            if !self.over_limit.swap(true, Relaxed) {
                self.limit_pending.store(true, Relaxed);
                self.crossings.fetch_add(1, Relaxed);
                ANY_WARN_PENDING.store(true, Relaxed);
            }
        } else {
            self.over_limit.store(false, Relaxed);
        }
        peak
    }

    /// A frame ends with `live` heap bytes under this tag: one more frame of its growth
    /// window (see `growth`); a newly found rise waits to be reported. Returns the windows
    /// it has risen in, in a row.
    pub(crate) fn growth_frame_end(&self, live: usize) -> u32 {
        if self.growth.frame_end(live) {
            ANY_WARN_PENDING.store(true, Relaxed);
        }
        self.growth.rising()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool charge and a heap-fallback charge of one tag, on two threads, against a hard
    /// budget that fits one of them: at most one may pass. The check once added to one
    /// counter and read the other (both `Relaxed`), so under a weak memory model (Miri's
    /// emulation finds it) each thread could miss the other's charge and both passed.
    #[test]
    #[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
    fn a_limit_is_one_decision_for_pool_and_heap_charges() {
        let rounds = if cfg!(miri) { 40 } else { 2000 };
        for round in 0..rounds {
            let tag: &'static str = Box::leak(format!("m2/limit{round}").into_boxed_str());
            let n = node(tag);
            n.set_limit(100);
            let (pool, heap) = std::thread::scope(|s| {
                let pool = s.spawn(|| n.charge(60, false).is_ok());
                let heap = s.spawn(|| n.charge(60, true).is_ok());
                (pool.join().unwrap(), heap.join().unwrap())
            });
            assert!(
                !(pool && heap),
                "round {round}: both charges passed a limit of 100 that fits one of 60"
            );
            assert!(pool || heap, "round {round}: one of them fits");
        }
    }
}
