//! The heap counters: per tag, bytes and calls of allocations and of frees, and the most
//! bytes live since the frame began, kept in shards so that the allocation path writes
//! memory no other thread writes.
//!
//! A thread takes a shard of its own at its first tracked allocation (one of
//! [`SHARDS`] - 1; later threads share shard 0, with atomic read-modify-writes). In its own
//! shard a thread adds with a plain load and store (`Relaxed` atomics: no lock prefix, no
//! data race with a snapshot reading them). A free is counted in the freeing thread's
//! shard, whichever thread allocated, so a shard may have freed more than it allocated;
//! the sum over the shards is the tag's. Shards are never given back: a thread-local with a
//! destructor cannot be registered from inside an allocation (registering one allocates).
//!
//! **The fast path.** The thread-local holds pointers, not indices: to the current tag's
//! counters in the thread's shard (what an allocation adds to) and to the shard's row
//! (what a free adds to, at the freed allocation's tag). Both are null until the thread
//! has a shard of its own, so one null test sends the first allocation, and every one of a
//! thread that shares shard 0, to the out-of-line path.
//!
//! **The frame's high.** Each counter also keeps `high`: the most the shard's net bytes
//! (allocated less freed, which a shard that frees other threads' allocations may take
//! below zero) reached since the frame's start; an allocation raises it, a frame end sets
//! it back to the net. At any moment the tag's live bytes are the sum of the shards' nets,
//! so the sum of the shards' highs bounds the most the tag had live within the frame from
//! above, and equals it when one thread made the frame's allocations and frees.
//!
//! Nothing here allocates, locks or runs user code: it is called from inside `alloc`.

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};

/// Tags the heap counters can tell apart: id 0 is the untagged line, ids are given to
/// tags in the order they are first used; a tag past the table counts as untagged.
/// Under Miri a smaller table (each access to the static costs Miri in proportion to its
/// size): the same code, other sizes.
pub(crate) const TAGS: usize = if cfg!(miri) { 256 } else { 1024 };

/// Shards: 0 is shared (read-modify-write), 1.. are one thread's each (Miri: see `TAGS`;
/// its threads past the 15th share shard 0, which Miri then checks too).
pub(crate) const SHARDS: usize = if cfg!(miri) { 16 } else { 64 };

/// The id of the untagged line.
pub(crate) const UNTAGGED: u16 = 0;

/// One tag's counters in one shard, each a plain word so that an event is an add to
/// memory (no packing to undo on the hot path); all wrap, and a frame's figures are
/// differences of two readings:
/// - `allocs`, `up`: allocation calls (`alloc`, `realloc`) and the bytes they brought;
/// - `frees`: free calls;
/// - `net`: bytes brought less bytes given back (by frees, and a `realloc`'s old size), in
///   this shard: below zero in a shard that frees more than it allocated. The bytes given
///   back are `up - net`, so a free adds to two words, not three;
/// - `high`: the most `net` reached since the frame began;
/// - `left`, `mean`: the bytes left before the sampler's next sample (see
///   [`sample`](super::sample): the allocation that takes it below zero goes to the
///   sampler; 0 in the all-zero table, so a counter's first allocation does) and the mean
///   it was drawn with (0: a poll, drawn while sampling was off).
///
/// 64 bytes, a cache line: a thread's event touches one line of its own shard.
#[repr(C, align(64))]
struct Counter {
    allocs: AtomicU64,
    up: AtomicU64,
    frees: AtomicU64,
    net: AtomicI64,
    high: AtomicI64,
    left: AtomicI64,
    mean: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // the array repeat expression's element
const ZERO: Counter = Counter {
    allocs: AtomicU64::new(0),
    up: AtomicU64::new(0),
    frees: AtomicU64::new(0),
    net: AtomicI64::new(0),
    high: AtomicI64::new(0),
    left: AtomicI64::new(0),
    mean: AtomicU64::new(0),
};

type Row = [Counter; TAGS];

/// All zero: the table lives in the zero-initialised data segment, and its pages become
/// resident as threads and tags touch them (a thread's rows for the tags it uses).
static TABLE: [Row; SHARDS] = [const { [ZERO; TAGS] }; SHARDS];

/// Shards handed out so far (the next thread gets this one, if below `SHARDS`).
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(1);

/// Tracking is on: allocations are charged and get an entry in the owner map. Off, they
/// get none and are never counted.
static ON: AtomicBool = AtomicBool::new(true);

/// What a thread knows of its place in the table.
struct Local {
    /// Its current tag's counters in its own shard; null until it has one of its own.
    counter: Cell<*const Counter>,
    /// Its own shard's row; null likewise.
    row: Cell<*const Row>,
    /// Its current tag.
    tag: Cell<u16>,
    /// It has asked for a shard (and, with `row` still null, shares shard 0).
    asked: Cell<bool>,
}

thread_local! {
    /// `const` and without a destructor: reading it never allocates and works until the
    /// thread's very end.
    static LOCAL: Local = const {
        Local {
            counter: Cell::new(std::ptr::null()),
            row: Cell::new(std::ptr::null()),
            tag: Cell::new(UNTAGGED),
            asked: Cell::new(false),
        }
    };
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
    LOCAL.with(|l| l.tag.get())
}

/// Makes `id` (taken modulo [`TAGS`]) this thread's current tag; returns the one it
/// replaces. The current tag is always below `TAGS`: the charge path puts it in an owner
/// map entry as it is.
#[inline]
pub(crate) fn set_tag(id: u16) -> u16 {
    let id = id % TAGS as u16;
    LOCAL.with(|l| {
        let row = l.row.get();
        if !row.is_null() {
            // SAFETY: `row` is one of `TABLE`'s rows (a static); the index is masked.
            l.counter
                .set(unsafe { &raw const (*row)[usize::from(id) % TAGS] });
        }
        l.tag.replace(id)
    })
}

/// A byte count as a signed one: a size fits (`Layout` keeps it within `isize::MAX`).
#[inline(always)]
fn signed(bytes: usize) -> i64 {
    bytes as i64
}

/// An allocation event on a counter of the calling thread's own shard (no other thread
/// writes its counts; a frame end may set `high`): `calls` calls, `up` bytes brought,
/// `down` bytes given back; raises the high. Returns whether the bytes brought crossed
/// the sampler's threshold (`left` went below zero: a subtraction from memory and a
/// sign test).
#[inline(always)]
fn own_alloc(c: &Counter, calls: u64, up: usize, down: usize) -> bool {
    own_add(&c.allocs, calls);
    own_add(&c.up, up as u64);
    let left = c.left.load(Relaxed).wrapping_sub(signed(up));
    c.left.store(left, Relaxed);
    let crossed = left < 0;
    let n = c
        .net
        .load(Relaxed)
        .wrapping_add(signed(up))
        .wrapping_sub(signed(down));
    c.net.store(n, Relaxed);
    if n > c.high.load(Relaxed) {
        c.high.store(n, Relaxed);
    }
    crossed
}

/// A free of `size` bytes on a counter of the calling thread's own shard.
#[inline(always)]
fn own_free(c: &Counter, size: usize) {
    own_add(&c.frees, 1);
    c.net
        .store(c.net.load(Relaxed).wrapping_sub(signed(size)), Relaxed);
}

/// Adds to a counter of the calling thread's own shard: a load and a store (no other
/// thread writes it), which compile to one add to memory.
#[inline(always)]
fn own_add(c: &AtomicU64, by: u64) {
    c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
}

/// The same events on a counter of the shared shard, with read-modify-writes. Its high
/// is approximate under contention (a net read between other threads' events).
fn shared_alloc(c: &Counter, calls: u64, up: usize, down: usize) -> bool {
    c.allocs.fetch_add(calls, Relaxed);
    c.up.fetch_add(up as u64, Relaxed);
    let delta = signed(up).wrapping_sub(signed(down));
    let n = c.net.fetch_add(delta, Relaxed).wrapping_add(delta);
    c.high.fetch_max(n, Relaxed);
    c.left
        .fetch_sub(signed(up), Relaxed)
        .wrapping_sub(signed(up))
        < 0
}

fn shared_free(c: &Counter, size: usize) {
    c.frees.fetch_add(1, Relaxed);
    c.net.fetch_sub(signed(size), Relaxed);
}

/// A new allocation of `size` bytes: counted on the thread's current tag, whose id (below
/// [`TAGS`]) `record` puts in the allocation's owner map entry; then, if the sampler
/// takes the allocation (see [`sample`](super::sample)), `sampled` gets the id (and may
/// rewrite the entry). Both run inside: the common path is the counts, the record's store
/// and one sign test, with no flag carried back to the caller.
#[inline(always)]
pub(crate) fn charge(size: usize, record: impl FnOnce(u16), sampled: impl FnOnce(u16, Crossing)) {
    // The thread-local read alone in its closure (the rest inside it made `with` too
    // large to inline), and the closures called only here (passed to a call, their
    // captures would be stored to the stack on every allocation).
    let (c, id) = LOCAL.with(|l| (l.counter.get(), l.tag.get()));
    let (c, id, crossed) = if c.is_null() {
        charge_slow(size)
    } else {
        // SAFETY: a non-null `counter` points into `TABLE` (a static), in this thread's
        // own shard (see `set_tag`, `counter_of`).
        let c = unsafe { &*c };
        (c, id, own_alloc(c, 1, size, 0))
    };
    record(id);
    if crossed || size >= super::sample::ALWAYS {
        sampled(id, Crossing(c, crossed));
    }
}

/// A counter whose sampling threshold an allocation crossed (or not: one too large to
/// leave to chance), for the record's cold path to ask [`Crossing::sample`].
#[derive(Clone, Copy)]
pub(crate) struct Crossing(&'static Counter, bool);

impl Crossing {
    /// Whether the sampler takes the allocation of `size` bytes; draws the counter's next
    /// threshold.
    pub(crate) fn sample(self, size: usize) -> bool {
        sample_check(self.0, self.1, size)
    }
}

/// `charge`'s counting for a thread without a shard of its own (or its first
/// allocation): the counter charged, the tag's id, and whether the threshold was crossed.
#[cold]
#[inline(never)]
fn charge_slow(size: usize) -> (&'static Counter, u16, bool) {
    LOCAL.with(|l| {
        let tag = l.tag.get() % TAGS as u16;
        match counter_of(l, tag) {
            Ok(c) => (c, tag, own_alloc(c, 1, size, 0)),
            Err(c) => (c, tag, shared_alloc(c, 1, size, 0)),
        }
    })
}

/// The sampler's decision for a counter whose threshold was crossed, or an allocation
/// too large to leave to chance; draws the next threshold. A threshold drawn while
/// sampling was off (a poll) only arms the counter: sampling turned on reaches each
/// counter within [`sample::POLL`](super::sample::POLL) bytes of its allocations.
/// (The draw replaces what is left, so bytes past the threshold do not count towards the
/// next: the exponential's lack of memory makes that the same distribution.)
#[cold]
#[inline(never)]
fn sample_check(c: &Counter, crossed: bool, size: usize) -> bool {
    let mean = super::sample::mean();
    let drawn_with = c.mean.load(Relaxed);
    if crossed || drawn_with != mean {
        let gap = if mean == 0 {
            super::sample::POLL
        } else {
            super::sample::draw(mean)
        };
        c.left
            .store(i64::try_from(gap).unwrap_or(i64::MAX), Relaxed);
        c.mean.store(mean, Relaxed);
    }
    mean != 0 && ((crossed && drawn_with == mean) || size >= super::sample::ALWAYS)
}

/// The counter of tag `id` for the calling thread: in its own shard (taking one on the
/// first call), or `Err` with the shared shard's. Only the counter is borrowed, never a
/// row or the table whole (Miri checks every byte a reference covers, at every use).
fn counter_of(l: &Local, id: u16) -> Result<&'static Counter, &'static Counter> {
    let id = usize::from(id) % TAGS;
    if !l.asked.get() {
        l.asked.set(true);
        let n = NEXT_SHARD.fetch_add(1, Relaxed);
        if n < SHARDS {
            l.row.set(&raw const TABLE[n]);
            l.counter
                .set(&raw const TABLE[n][usize::from(l.tag.get()) % TAGS]);
        }
    }
    let row = l.row.get();
    if row.is_null() {
        return Err(&TABLE[0][id]);
    }
    // SAFETY: a non-null `row` is one of `TABLE`'s rows (a static), this thread's own.
    Ok(unsafe { &(*row)[id] })
}

/// A free of `size` bytes of an allocation charged to `id`: counted on that tag, in the
/// freeing thread's shard.
#[inline(always)]
pub(crate) fn credit(id: u16, size: usize) {
    LOCAL.with(|l| {
        let row = l.row.get();
        if row.is_null() {
            return credit_slow(l, id, size);
        }
        // SAFETY: a non-null `row` is this thread's own shard's row in `TABLE`.
        own_free(unsafe { &(*row)[usize::from(id) % TAGS] }, size);
    })
}

#[cold]
#[inline(never)]
fn credit_slow(l: &Local, id: u16, size: usize) {
    match counter_of(l, id) {
        Ok(c) => own_free(c, size),
        Err(c) => shared_free(c, size),
    }
}

/// A reallocation from `old` to `new` bytes, kept on the tag `id` it was made under: an
/// allocation call of `new` bytes, and `old` bytes back (no free call).
#[inline(always)]
pub(crate) fn resize(id: u16, old: usize, new: usize) -> Option<Crossing> {
    LOCAL.with(|l| {
        let (c, crossed) = match counter_of(l, id) {
            Ok(c) => (c, own_alloc(c, 1, new, old)),
            Err(c) => (c, shared_alloc(c, 1, new, old)),
        };
        (crossed || new >= super::sample::ALWAYS).then_some(Crossing(c, crossed))
    })
}

/// One tag's heap counters summed over the shards (see [`read`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeapReading {
    /// Bytes allocated and not yet freed.
    pub(crate) live: usize,
    /// The most bytes live since the frame began, bounded from above: the sum of each
    /// shard's high (see the module docs); at least `live`.
    pub(crate) high: usize,
    /// Allocation calls (`realloc` included) and free calls, ever, wrapping: compare two
    /// readings with [`since`].
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
    /// Bytes allocated (`realloc`'s new sizes included) and bytes given back, ever,
    /// wrapping.
    pub(crate) up_bytes: u64,
    pub(crate) down_bytes: u64,
}

/// A count's growth between two readings (counts wrap). A reading taken while another
/// thread is between the words of one event can have its bytes given back ahead by that
/// event's size, and the next reading then seem to go back: such a step reads as 0.
pub(crate) fn since(now: u64, then: u64) -> u64 {
    let d = now.wrapping_sub(then);
    if d > i64::MAX as u64 { 0 } else { d }
}

/// The counters of tag `id`, summed over every shard in use; with `frame_end`, each
/// shard's high starts the next frame at the shard's net (the reading has this frame's).
/// Read while other threads allocate, a figure that may lag by the allocations under way
/// (an allocation under way as a frame ends may count in the next frame's high). O(shards
/// in use).
pub(crate) fn read(id: u16, frame_end: bool) -> HeapReading {
    let used = NEXT_SHARD.load(Relaxed).min(SHARDS);
    let mut r = HeapReading::default();
    let (mut net, mut high) = (0i64, 0i64);
    // Indexed, not iterated: the counter alone is borrowed (see `counter_of`).
    #[allow(clippy::needless_range_loop)]
    for shard in 0..used {
        let c = &TABLE[shard][usize::from(id) % TAGS];
        r.allocs = r.allocs.wrapping_add(c.allocs.load(Relaxed));
        r.frees = r.frees.wrapping_add(c.frees.load(Relaxed));
        let n = c.net.load(Relaxed);
        let up = c.up.load(Relaxed);
        r.up_bytes = r.up_bytes.wrapping_add(up);
        r.down_bytes = r.down_bytes.wrapping_add(up.wrapping_sub(n as u64));
        let h = if frame_end {
            c.high.swap(n, Relaxed)
        } else {
            c.high.load(Relaxed)
        };
        net = net.wrapping_add(n);
        // A shard's high is at least its net (an allocation raises it, a frame end sets
        // it to the net; frees lower only the net).
        high = high.saturating_add(h.max(n));
    }
    // A free counted before the allocation it frees (on another thread) can make a
    // snapshot's sum dip below zero for a moment.
    r.live = usize::try_from(net).unwrap_or(0);
    r.high = usize::try_from(high).unwrap_or(0).max(r.live);
    r
}

/// Gives out tag ids, 1.. (0 is the untagged line).
static NEXT_TAG: AtomicUsize = AtomicUsize::new(1);

/// A heap id for a new tag: the next free one, or the untagged line once the table is full.
pub(crate) fn new_tag_id() -> u16 {
    let id = NEXT_TAG.fetch_add(1, Relaxed);
    if id < TAGS { id as u16 } else { UNTAGGED }
}
