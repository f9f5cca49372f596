//! The heap counters: per tag, bytes and calls of allocations and of frees, kept in shards
//! so that the allocation path writes memory no other thread writes.
//!
//! A thread takes a shard of its own at its first tracked allocation (one of
//! [`SHARDS`] - 1; later threads share shard 0, with atomic read-modify-writes). In its own
//! shard a thread adds with a plain load and store (`Relaxed` atomics: no lock prefix, no
//! data race with a snapshot reading them). A free is counted in the freeing thread's
//! shard, whichever thread allocated, so a shard may have freed more than it allocated;
//! the sum over the shards is the tag's. Shards are never given back: a thread-local with a destructor
//! cannot be registered from inside an allocation (registering one allocates).
//!
//! Nothing here allocates, locks or runs user code: it is called from inside `alloc`.

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

/// Tags the heap counters can tell apart: id 0 is the untagged line, ids are given to
/// tags in the order they are first used; a tag past the table counts as untagged.
pub(crate) const TAGS: usize = 1024;

/// Shards: 0 is shared (read-modify-write), 1.. are one thread's each.
pub(crate) const SHARDS: usize = 64;

/// The id of the untagged line.
pub(crate) const UNTAGGED: u16 = 0;

/// Bits of a packed counter that hold bytes; the bits above hold the number of calls.
const BYTES_BITS: u32 = 40;
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;
/// What one call adds to a packed counter's call field.
const ONE_CALL: u64 = 1 << BYTES_BITS;

/// One tag's counters in one shard, each a packed word (calls in the top 24 bits, bytes in
/// the low 40) so that an event is one load and one store:
/// - `up`: allocations (`alloc`, `realloc`) and the bytes they brought;
/// - `down`: frees and the bytes they gave back (a `realloc` adds its old size, no call).
///
/// Both fields wrap. Bytes live are `up - down` modulo 2^40 (exact while a tag holds less
/// than 1 TiB); a frame's calls are differences modulo 2^24 (exact up to 16 million calls
/// per tag and frame). Each TiB a shard counts carries one call too many into its call
/// field.
struct Counter {
    up: AtomicU64,
    down: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // the array repeat expression's element
const ZERO: Counter = Counter {
    up: AtomicU64::new(0),
    down: AtomicU64::new(0),
};

#[allow(clippy::declare_interior_mutable_const)]
const ZERO_SHARD: [Counter; TAGS] = [ZERO; TAGS];

/// All zero: the table lives in the zero-initialised data segment, and its pages become
/// resident as threads and tags touch them (a thread's rows for the tags it uses).
static TABLE: [[Counter; TAGS]; SHARDS] = [ZERO_SHARD; SHARDS];

/// Shards handed out so far (the next thread gets this one, if below `SHARDS`).
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(1);

/// Tracking is on: allocations are charged and get an entry in the owner map. Off, they
/// get none and are never counted.
static ON: AtomicBool = AtomicBool::new(true);

thread_local! {
    /// This thread's current tag (low 16 bits) and shard + 1 (high 16 bits; 0 before the
    /// thread's first tracked allocation). `const` and without a destructor: reading it
    /// never allocates and works until the thread's very end.
    static THREAD: Cell<u32> = const { Cell::new(0) };
}

/// Whether a tracking allocator has counted anything in this process (some thread took a
/// shard): without one installed, the heap figures are all zero and not worth plotting.
pub(crate) fn in_use() -> bool {
    NEXT_SHARD.load(Relaxed) > 1
}

/// Turns tracking on or off for allocations made from now on (frees of tracked ones are
/// still counted).
pub(crate) fn set_on(on: bool) {
    ON.store(on, Relaxed);
}

#[inline(always)]
pub(crate) fn is_on() -> bool {
    ON.load(Relaxed)
}

/// This thread's current tag.
#[inline]
pub(crate) fn current_tag() -> u16 {
    THREAD.with(|t| (t.get() & 0xFFFF) as u16)
}

/// Makes `id` this thread's current tag; returns the one it replaces.
#[inline]
pub(crate) fn set_tag(id: u16) -> u16 {
    THREAD.with(|t| {
        let v = t.get();
        t.set((v & 0xFFFF_0000) | u32::from(id));
        (v & 0xFFFF) as u16
    })
}

/// The calling thread's shard (taking one on its first call) and its current tag, both
/// within the table (masked: the table's sizes are powers of two).
#[inline(always)]
fn shard_and_tag() -> (usize, usize) {
    let v = THREAD.with(Cell::get);
    let shard = (v >> 16) as usize;
    if shard != 0 {
        return ((shard - 1) % SHARDS, (v & 0xFFFF) as usize % TAGS);
    }
    take_shard(v)
}

#[cold]
#[inline(never)]
fn take_shard(v: u32) -> (usize, usize) {
    let n = NEXT_SHARD.fetch_add(1, Relaxed);
    let shard = if n < SHARDS { n } else { 0 };
    THREAD.with(|t| t.set(v | ((shard as u32 + 1) << 16)));
    (shard, (v & 0xFFFF) as usize % TAGS)
}

/// Adds `delta` to a packed counter: a plain load and store in a thread's own shard, an
/// atomic add in the shared one.
#[inline(always)]
fn add(c: &AtomicU64, shard: usize, delta: u64) {
    if shard == 0 {
        c.fetch_add(delta, Relaxed);
    } else {
        c.store(c.load(Relaxed).wrapping_add(delta), Relaxed);
    }
}

/// A call moving `bytes`, modulo the byte field (which counts modulo 2^40 anyway), so that
/// no size carries into the call field.
#[inline(always)]
fn call(bytes: usize) -> u64 {
    ONE_CALL | (bytes as u64 & BYTES_MASK)
}

/// A new allocation of `size` bytes: counted on the thread's current tag, whose id (below
/// [`TAGS`]) goes in the allocation's owner map entry.
#[inline(always)]
pub(crate) fn charge(size: usize) -> u16 {
    let (shard, tag) = shard_and_tag();
    add(&TABLE[shard][tag].up, shard, call(size));
    tag as u16
}

/// A free of `size` bytes of an allocation charged to `id`: counted on that tag, in the
/// freeing thread's shard.
#[inline(always)]
pub(crate) fn credit(id: u16, size: usize) {
    let (shard, _) = shard_and_tag();
    add(
        &TABLE[shard][usize::from(id) % TAGS].down,
        shard,
        call(size),
    );
}

/// A reallocation from `old` to `new` bytes, kept on the tag `id` it was made under: an
/// allocation call of `new` bytes, and `old` bytes back (no free call).
#[inline(always)]
pub(crate) fn resize(id: u16, old: usize, new: usize) {
    let (shard, _) = shard_and_tag();
    let c = &TABLE[shard][usize::from(id) % TAGS];
    add(&c.up, shard, call(new));
    add(&c.down, shard, old as u64 & BYTES_MASK);
}

/// One tag's heap counters summed over the shards (see [`read`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeapReading {
    /// Bytes allocated and not yet freed.
    pub(crate) live: usize,
    /// Allocation calls (`realloc` included), modulo 2^24: compare two readings with
    /// [`calls_since`].
    pub(crate) allocs: u64,
    /// Free calls, modulo 2^24.
    pub(crate) frees: u64,
    /// Bytes allocated (`realloc`'s new sizes included) and bytes given back, ever, modulo
    /// 2^40: compare two readings with [`bytes_since`].
    pub(crate) up_bytes: u64,
    pub(crate) down_bytes: u64,
}

/// Bytes between two readings of a byte count (which wrap at 2^40).
pub(crate) fn bytes_since(now: u64, then: u64) -> usize {
    (now.wrapping_sub(then) & BYTES_MASK) as usize
}

/// Calls between two readings of a call count (which wrap at 2^24).
pub(crate) fn calls_since(now: u64, then: u64) -> u64 {
    now.wrapping_sub(then) & (u64::MAX >> BYTES_BITS)
}

/// The counters of tag `id`, summed over every shard in use. Read while other threads
/// allocate, a figure that may lag by the allocations under way. O(shards in use).
pub(crate) fn read(id: u16) -> HeapReading {
    let used = NEXT_SHARD.load(Relaxed).min(SHARDS);
    let (mut up, mut down) = (0u64, 0u64);
    let (mut allocs, mut frees) = (0u64, 0u64);
    for shard in TABLE.iter().take(used) {
        let c = &shard[usize::from(id) % TAGS];
        let (u, d) = (c.up.load(Relaxed), c.down.load(Relaxed));
        up = up.wrapping_add(u & BYTES_MASK);
        down = down.wrapping_add(d & BYTES_MASK);
        allocs = allocs.wrapping_add(u >> BYTES_BITS);
        frees = frees.wrapping_add(d >> BYTES_BITS);
    }
    // Bytes live modulo 2^40, as a signed 40-bit number: a free counted before the
    // allocation it frees (on another thread) can make a snapshot's sum dip below zero
    // for a moment.
    let net = up.wrapping_sub(down) & BYTES_MASK;
    let signed = ((net << (64 - BYTES_BITS)) as i64) >> (64 - BYTES_BITS);
    HeapReading {
        live: signed.max(0) as usize,
        allocs: allocs & (u64::MAX >> BYTES_BITS),
        frees: frees & (u64::MAX >> BYTES_BITS),
        up_bytes: up & BYTES_MASK,
        down_bytes: down & BYTES_MASK,
    }
}

/// Gives out tag ids, 1.. (0 is the untagged line).
static NEXT_TAG: AtomicUsize = AtomicUsize::new(1);

/// A heap id for a new tag: the next free one, or the untagged line once the table is full.
pub(crate) fn new_tag_id() -> u16 {
    let id = NEXT_TAG.fetch_add(1, Relaxed);
    if id < TAGS { id as u16 } else { UNTAGGED }
}
