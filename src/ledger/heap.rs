//! Heap scopes: which tag the calling thread's heap allocations are charged to (with a
//! [`TrackingAllocator`](crate::TrackingAllocator) as the global allocator), and the
//! untagged line.
//!
//! **Scopes end in any order.** Each thread keeps a stack of the scopes it entered
//! ([`Scopes`]); a guard holds its entry's place. Dropping the innermost guard pops its
//! entry and every entry beneath it whose guard was dropped already; dropping another one
//! only marks its entry ended. So the top entry is always open, and the thread is always
//! in the innermost scope still open (untagged when none is), whatever order guards are
//! dropped in: restoring "the tag before me" would leave a thread charged to a scope that
//! ended (two Bevy batches on one worker, dropped in the order they were made, did).
//!
//! The stack is a `const` thread-local without a destructor, as the heap counters' state
//! is (`heap::counters`): guards may be dropped during the thread's teardown, and nothing
//! here allocates. It holds [`DEPTH`] entries: a scope entered while that many are on the
//! stack (open ones, and ended ones under an open one) changes nothing, so its allocations
//! are charged to the innermost scope on the stack. A guard leaked with `mem::forget`
//! leaves its scope open, and its entry on the stack, for the rest of the thread.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::Relaxed;

use super::node::{FrameBase, check_tag, node};
use super::snapshot::TagFigures;
use crate::heap::counters::{self, UNTAGGED};

/// Charges the calling thread's heap allocations to `tag` until the returned guard is
/// dropped. Scopes nest, and end in any order: the thread is always in the innermost
/// scope still open (untagged outside every scope), so dropping an outer guard before an
/// inner one ends the outer scope without leaving the inner one. Up to 64 scopes deep per
/// thread; a scope entered deeper changes nothing. A free is always
/// credited to the tag its allocation was made under, on whichever thread and in whatever
/// scope. Needs a [`TrackingAllocator`](crate::TrackingAllocator) as the global allocator
/// to count anything. O(tags) (the tag is looked up; made on first use).
///
/// The guard is neither `Send` nor `Sync`: the scope belongs to the thread that entered it.
/// In Bevy, `MemoryPlugin` enters a scope `systems/<name>` around every system run; work
/// a system hands to other threads runs in those threads' scopes, which [`current_scope`]
/// carries there (`for_each_init(|| scope.enter(), ..)`; Bevy's `par_iter` batches need
/// no recipe with `nebula_memory::bevy::AttributionLayer`).
///
/// # Panics
/// If `tag` is not a `/`-separated path of non-empty segments.
///
/// ```
/// use nebula_memory::ledger;
/// let outer = ledger::scope("doc/scope/ai");
/// {
///     let _inner = ledger::scope("doc/scope/ai/pathfinding");
///     // allocations here are charged to doc/scope/ai/pathfinding
/// }
/// // ... and here to doc/scope/ai again
/// drop(outer);
///
/// // Out of order: `b` stays current until it ends, then nothing is.
/// let a = ledger::scope("doc/scope/a");
/// let b = ledger::scope("doc/scope/b");
/// let in_b = ledger::current_scope();
/// drop(a);
/// assert_eq!(ledger::current_scope(), in_b);
/// drop(b);
/// assert_ne!(ledger::current_scope(), in_b);
/// ```
#[track_caller]
pub fn scope(tag: &'static str) -> TagScope {
    check_tag("ledger::scope", tag);
    TagScope::enter_id(node(tag).heap_id)
}

/// A heap scope's guard, from [`scope`] or [`HeapScope::enter`]: dropping it ends the
/// scope, and the thread is in the innermost scope still open (see [`scope`]).
///
/// ```compile_fail
/// // A scope belongs to the thread that entered it.
/// let scope = nebula_memory::ledger::scope("doc/scope/moved");
/// std::thread::spawn(move || drop(scope));
/// ```
#[must_use = "the scope ends when the guard is dropped"]
pub struct TagScope {
    /// Its entry's place in the thread's stack; `INERT` if the stack was full.
    at: u32,
    _not_send: PhantomData<*const ()>,
}

/// Open scopes (and ended ones under them) a thread's stack holds; see the module docs.
pub(crate) const DEPTH: usize = 64;
/// An entry whose guard was dropped (the entry's low 16 bits are its tag's heap id).
const ENDED: u32 = 1 << 16;
/// A guard with no entry: entered on a full stack.
const INERT: u32 = u32::MAX;

/// One thread's heap scopes: `entries[..len]`, oldest first; the top one is open.
struct Scopes {
    len: Cell<usize>,
    entries: [Cell<u32>; DEPTH],
}

thread_local! {
    /// `const` and without a destructor: usable until the thread's very end, never
    /// allocating.
    static SCOPES: Scopes = const {
        Scopes {
            len: Cell::new(0),
            entries: [const { Cell::new(0) }; DEPTH],
        }
    };
}

impl TagScope {
    /// Enters the scope of a tag's heap id (a tag looked up beforehand). O(1).
    pub(crate) fn enter_id(id: u16) -> TagScope {
        let at = SCOPES.with(|s| {
            let len = s.len.get();
            let Some(entry) = s.entries.get(len) else {
                return INERT; // full: the thread stays in the innermost scope
            };
            entry.set(u32::from(id));
            s.len.set(len + 1);
            counters::set_tag(id);
            len as u32
        });
        TagScope {
            at,
            _not_send: PhantomData,
        }
    }
}

impl Drop for TagScope {
    /// O(1), and O(entries ended beneath) when it pops them.
    fn drop(&mut self) {
        if self.at == INERT {
            return; // entered on a full stack: it changed nothing
        }
        let at = self.at as usize; // below `DEPTH`
        SCOPES.with(|s| {
            // A live guard's entry is on the stack (entries are popped only once their
            // guards are gone, and the guard is not `Send`): `at < len`.
            let len = s.len.get();
            debug_assert!(
                at < len,
                "a heap scope's entry left the stack before its guard"
            );
            if at.saturating_add(1) < len {
                // Not the innermost: the open top stays current; popped later.
                if let Some(e) = s.entries.get(at) {
                    e.set(e.get() | ENDED);
                }
                return;
            }
            let mut top = at;
            while let Some(below) = top.checked_sub(1)
                && s.entries[below].get() & ENDED != 0
            {
                top = below;
            }
            s.len.set(top);
            let current = match top.checked_sub(1) {
                // An open entry: its tag, the low 16 bits.
                Some(i) => s.entries[i].get() as u16,
                None => UNTAGGED,
            };
            counters::set_tag(current);
        });
    }
}

/// The heap scope a thread is in, as a value another thread can enter: what work handed
/// to other threads (a `par_iter` body, a task) needs to be charged where it was handed
/// out. `Copy` and `Send`; [`enter`](HeapScope::enter) on the other thread.
///
/// ```
/// use nebula_memory::ledger;
/// let _s = ledger::scope("doc/handed/work");
/// let here = ledger::current_scope();
/// std::thread::scope(|t| {
///     t.spawn(move || {
///         let _in = here.enter(); // this thread's allocations: doc/handed/work
///     });
/// });
/// ```
///
/// In Bevy, one line charges a task a system spawns to the system (the system runs in its
/// `systems/<name>` scope): `let scope = ledger::current_scope();` then
/// `let _in = scope.enter();` inside the task. (For Bevy's `par_iter`, the recipe
/// `for_each_init(|| scope.enter(), ..)` charges the system's batches right, but a thread
/// waiting in its `par_iter` still charges to it the other systems' plain batches it runs:
/// `nebula_memory::bevy::AttributionLayer` makes every batch its system's, recipe or not.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapScope {
    id: u16,
}

/// The calling thread's heap scope (the untagged line outside every scope). O(1).
///
/// ```
/// let outside = nebula_memory::ledger::current_scope();
/// let _s = nebula_memory::ledger::scope("doc/current");
/// assert_ne!(nebula_memory::ledger::current_scope(), outside);
/// ```
pub fn current_scope() -> HeapScope {
    HeapScope {
        id: counters::current_tag(),
    }
}

impl HeapScope {
    /// The scope's heap id (0: outside every scope, or a tag past the counters' table).
    #[cfg_attr(not(feature = "bevy"), allow(dead_code))]
    pub(crate) fn id(self) -> u16 {
        self.id
    }

    /// Charges the calling thread's heap allocations to this scope's tag until the guard
    /// is dropped, like [`scope`] (guards end in any order). O(1).
    pub fn enter(self) -> TagScope {
        TagScope::enter_id(self.id)
    }
}

impl std::fmt::Debug for TagScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagScope").finish_non_exhaustive()
    }
}

/// Turns heap tracking on (the default) or off, process-wide, for allocations made from
/// now on: off, the [`TrackingAllocator`](crate::TrackingAllocator) counts nothing (frees
/// of allocations made while it was on are still credited). O(1).
///
/// ```
/// nebula_memory::ledger::set_heap_tracking(false);
/// assert!(!nebula_memory::ledger::heap_tracking());
/// nebula_memory::ledger::set_heap_tracking(true);
/// ```
pub fn set_heap_tracking(on: bool) {
    counters::set_on(on);
}

/// Whether heap tracking is on (see [`set_heap_tracking`]). O(1).
///
/// ```
/// let _on = nebula_memory::ledger::heap_tracking();
/// ```
pub fn heap_tracking() -> bool {
    counters::is_on()
}

/// Bytes heap tracking takes for its own bookkeeping: the table that records which tag
/// each live allocation was charged to (the heap itself is not in it), at most 2 bytes per
/// 16 bytes of heap address space in use. On Linux, the bytes of it resident now (it
/// reserves an eighth of the address space on 64-bit unix, 16 TiB on x86-64, and only the
/// pages that cover heap in use become resident); elsewhere the bytes mapped for it, an
/// upper bound. 0 until a [`TrackingAllocator`](crate::TrackingAllocator) has allocated.
/// O(1), except on Linux with the flat table: it reads the process's memory map (O(its
/// mappings), allocates).
///
/// ```
/// let overhead = nebula_memory::ledger::heap_tracking_overhead();
/// println!("heap tracking's table: {overhead} bytes");
/// ```
pub fn heap_tracking_overhead() -> usize {
    crate::heap::owners::overhead()
}

/// The untagged line's counts at the last frame end.
static UNTAGGED_BASE: FrameBase = FrameBase::new();
static UNTAGGED_PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The heap allocated outside every scope, as figures; with `frame_end`, starts its next
/// frame.
pub(super) fn untagged_heap(frame_end: bool) -> TagFigures {
    let own = UNTAGGED_BASE.frame(counters::read(UNTAGGED, frame_end), frame_end);
    let r = own.totals;
    let peak = UNTAGGED_PEAK.fetch_max(r.high, Relaxed).max(r.high);
    TagFigures {
        heap_live: r.live,
        heap_peak: peak,
        heap_frame_peak: r.high,
        heap_allocs: own.allocs,
        heap_frees: own.frees,
        heap_alloc_bytes: own.alloc_bytes,
        heap_free_bytes: own.free_bytes,
        ..TagFigures::default()
    }
}
