//! The per-thread scratch stack: the arenas behind [`with_scratch`] and the Bevy `Scratch`
//! parameter, and how idle ones give their memory back.
//!
//! One thread-local arena with checkpoint/rewind is unsound when scopes nest: an inner
//! rewind would free what the outer scope allocated while the inner one ran. Instead each
//! thread keeps a stack of arenas (the RAD Debugger's answer to scratch conflicts, made
//! automatic), each with a **state**: free, busy (a scope or a `Scratch` item uses it) or
//! being trimmed. A scope *claims* a free arena of its thread, uses it alone, and on leaving
//! resets it and frees it. Nested scopes, and tasks that work stealing runs inside a scope
//! on the same thread, find the outer arenas busy and claim others, so an arena is never
//! reset while a scope still uses it.
//!
//! Arenas belong to an **owner**: `with_scratch` is one, every Bevy `ScratchArenas`
//! resource another. A scope claims only its owner's arenas, so each owner's figures are its
//! own (a Bevy app's do not move when unrelated code nests `with_scratch` on its threads),
//! and each owner's arenas follow its [`ArenaConfig`].
//!
//! **Idle memory goes back.** A free arena is always reset, so it holds at most the block
//! its reset policy kept. But the policy only runs when the arena is used, and an arena at
//! some nesting depth, or on a thread the executor rarely picks, may not be used again for
//! a long time. So [`maintain_global_pools`](crate::maintain_global_pools) is a second
//! clock: time is cut into windows of [`SCRATCH_IDLE_PASSES`] calls, and at each window's
//! end every free arena that was idle in it, or holds more than twice what its busiest
//! claim of the window needed and more than its first block, gives *every* block back. The maintaining thread claims the arena for that with the same state, so it never
//! touches an arena in use. A one-off spike therefore costs its memory for at most two
//! windows, not for the thread's life.
//!
//! The only cross-thread accesses to a thread's stack are that trim (through the state)
//! and figures published in atomics when an arena is freed. (A Bevy owner's slots are
//! outside every stack and claimed by any thread, through the same state: see `owner`.)

use std::cell::{Cell, OnceCell};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use super::owner::ScratchOwner;
use super::slot::{NOT_RECLAIMED, SCRATCH_IDLE_PASSES, Slot, slot_ptr, trim_if_oversized};
use crate::arena::{ArenaConfig, MemoryArena};
use crate::fork::{BoxedLock, Global, Level, Lock};
use crate::global::scratch_pool;
use crate::ledger::{HeapScope, TagNode, TagScope};

/// Maintenance passes so far: the clock of idle trimming.
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The `with_scratch` owner.
fn with_scratch_owner() -> &'static Arc<ScratchOwner> {
    static OWNER: Global<Arc<ScratchOwner>> = Global::new();
    OWNER.get_or_init(|| {
        // Made by the first `with_scratch`, kept for the process: untagged (`heap::untagged`).
        crate::heap::untagged(|| {
            ScratchOwner::per_thread(
                ArenaConfig::default()
                    .first_block_default(SCRATCH_FIRST_BLOCK)
                    .tag(crate::ledger::tags::WITH_SCRATCH),
            )
        })
    })
}

/// The first block of the crate's scratch arenas (`with_scratch`, the Bevy `Scratch` and
/// `TaggedScratch` parameters and `FrameMemory` by default): 4 KiB, the block granule.
/// There is one per thread and nesting depth (`with_scratch`), per claim alive at once
/// (a system's item, each batch of its `par_iter`), per thread that stores (frame memory),
/// and most scratch use is small; a larger need grows the arena, and its reset keeps one
/// block sized for it (the need plus an eighth), so the blocks follow the need.
pub const SCRATCH_FIRST_BLOCK: usize = 4 * 1024;

/// One thread's scratch arenas. The lock is the owner thread's on every claim
/// (uncontended) and a maintaining thread's while it trims.
struct Stack {
    slots: BoxedLock<Vec<StackSlot>>,
}

/// A slot of a thread's stack, and its owner, to notice it is gone (then the slot is
/// removed at the next trim).
struct StackSlot {
    slot: Arc<Slot>,
    owner: Weak<ScratchOwner>,
}

/// Every live thread's stack, for trimming.
static STACKS: Lock<Vec<Arc<Stack>>> = Lock::new(Level::Stacks, Vec::new());

/// A thread's stack, taken out of `STACKS` when the thread exits (then its arenas go back
/// to the pool; no scope can be alive on an exiting thread's stack).
struct Registered(Arc<Stack>);

impl Drop for Registered {
    fn drop(&mut self) {
        STACKS.lock().retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

thread_local! {
    static STACK: OnceCell<Registered> = const { OnceCell::new() };
    /// The `with_scratch` arena this thread freed last: tried first by its next claim,
    /// which then takes no lock. Valid while `STACK` is (slots of the `with_scratch` owner
    /// leave the stack only with it), so it is read only inside `STACK.try_with`.
    static LAST_FREED: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
}

/// Claims a free `with_scratch` (per-thread owner) arena on the calling thread, making one
/// if all are busy. `None` if the thread's storage is being torn down.
pub(crate) fn claim(owner: &Arc<ScratchOwner>) -> Option<NonNull<Slot>> {
    STACK
        .try_with(|cell| {
            let stack = &cell
                .get_or_init(|| {
                    // The registry outlives the thread: untagged (`heap::untagged`).
                    crate::heap::untagged(|| {
                        let stack = Arc::new(Stack {
                            slots: BoxedLock::new(Level::Stack, Vec::new()),
                        });
                        STACKS.lock().push(Arc::clone(&stack));
                        Registered(stack)
                    })
                })
                .0;
            if Arc::ptr_eq(owner, with_scratch_owner()) {
                let last = LAST_FREED.with(Cell::get);
                // SAFETY: a slot of this thread's stack (only `with_scratch` slots are
                // recorded), which is alive: we are inside `STACK.try_with`.
                if let Some(slot) = unsafe { last.as_ref() }
                    && slot.try_claim()
                {
                    // The recorded pointer itself (from `slot_ptr`), not one made from the
                    // reference: `claim_held` needs the `Arc`'s provenance.
                    return NonNull::new(last.cast_mut()).expect("a recorded slot");
                }
            }
            claim_in(stack, owner)
        })
        .ok()
}

/// A claim for a holder that may outlive the thread's stack (a [`ScratchBatch`], a Bevy
/// item kept in a thread-local destroyed after the stack's, or got from a leaked world):
/// the slot comes with a reference count of its own, so it stays alive however the
/// thread's teardown is ordered. From a shared owner's arenas for a Bevy owner (`item`:
/// an item's claim, which its owner's frame end may take back once the item is gone; else
/// a batch's; `line`: the ledger tag it is for, see `ScratchOwner::claim_shared`), from
/// this thread's stack for `with_scratch`. `None` if the thread's storage is being torn
/// down. Give it back with [`release`].
pub(crate) fn claim_held(
    owner: &Arc<ScratchOwner>,
    item: bool,
    line: Option<&'static TagNode>,
) -> Option<Arc<Slot>> {
    if owner.is_shared() {
        return Some(owner.claim_shared(item, line));
    }
    let slot = claim(owner)?;
    // SAFETY: `claim` returned a slot of this thread's stack, which holds an `Arc` of it
    // (the pointer is `Arc::as_ptr`'s, as `Arc::into_raw` would give it) and is alive:
    // its thread is running this call. Adding a count and taking it as an `Arc` is then
    // what `Arc::clone` does.
    Some(unsafe {
        Arc::increment_strong_count(slot.as_ptr());
        Arc::from_raw(slot.as_ptr())
    })
}

fn claim_in(stack: &Stack, owner: &Arc<ScratchOwner>) -> NonNull<Slot> {
    let mut slots = stack.slots.lock();
    for held in slots.iter().filter(|h| h.slot.owner_id == owner.id) {
        if held.slot.try_claim() {
            return slot_ptr(&held.slot);
        }
    }
    // The crate's bookkeeping, kept past the scope that first needs it: untagged (see
    // `heap::untagged`).
    crate::heap::untagged(|| {
        let slot = Slot::new_busy(owner.config, owner.id, NOT_RECLAIMED);
        owner.note_thread_arena(&slot);
        let claimed = slot_ptr(&slot);
        slots.push(StackSlot {
            slot,
            owner: Arc::downgrade(owner),
        });
        claimed
    })
}

/// Frees a claimed arena: resets it and makes it claimable again.
///
/// # Safety
/// `slot` came from [`claim`] on this thread (or from [`claim_held`] on any) and is not
/// freed yet, and is alive (its thread's stack, or the caller's `Arc`, holds it); nothing
/// allocated from its arena since the claim is used any more.
pub(crate) unsafe fn release(slot: NonNull<Slot>) {
    // SAFETY: per the contract: alive, held busy by the caller, nothing of it in use.
    unsafe { slot.as_ref().free() }
}

/// Records `slot` as the `with_scratch` arena this thread freed last, if the thread's
/// stack (which keeps it alive) is still there.
fn note_freed(slot: NonNull<Slot>) {
    let _ = STACK.try_with(|_| LAST_FREED.set(slot.as_ptr()));
}

/// One pass of idle trimming (called by `maintain_global_pools`). At the end of each
/// window of [`SCRATCH_IDLE_PASSES`] passes, every free scratch arena that holds more than
/// it needed in the window gives all of it back (see the module docs), and arenas of
/// owners that are gone are removed; other passes do nothing. Returns the bytes given back.
pub(crate) fn trim_idle() -> usize {
    let now = PASSES.fetch_add(1, Relaxed) + 1;
    if !now.is_multiple_of(SCRATCH_IDLE_PASSES) {
        return 0; // nothing to do between windows: no lock, no allocation
    }
    // Under the registry's lock, so that no list is copied (the trim allocates nothing).
    // The lock order is the registry's, then a stack's: a thread takes a stack's lock
    // only after leaving the registry's (`claim`), and registers or leaves with the
    // registry's alone.
    let stacks = STACKS.lock();
    let mut given = 0;
    for stack in stacks.iter() {
        stack.slots.lock().retain(|held| {
            if held.owner.strong_count() == 0 {
                // The owner is gone, so no scope of it runs (a scope borrows its owner's
                // `Arc`; a batch holds its slot's own). Dropping the slot gives its memory
                // back.
                given += held.slot.held.load(Relaxed);
                return false;
            }
            given += trim_if_oversized(&held.slot);
            true
        });
    }
    given
}

/// Runs `f` with scratch space for the current thread; everything `f` allocates is
/// reclaimed when `f` returns (or panics). Nested calls, including calls from tasks that
/// work stealing runs inside `f` on this thread, each get their own arena, so an inner
/// scope never frees memory an outer one still uses. O(1) plus the reset of one arena.
///
/// An arena left holding memory (after a spike) while no scope uses it gives it back after
/// [`SCRATCH_IDLE_PASSES`] calls of [`maintain_global_pools`](crate::maintain_global_pools).
///
/// ```
/// use nebula_memory::Arena;
/// use nebula_memory::with_scratch;
///
/// let total = with_scratch(|outer| {
///     let xs = outer.alloc_slice_fill_with(100, |i| i as u32);
///     let inner_sum = with_scratch(|inner| {
///         let doubled = inner.alloc_slice_from_iter(xs.iter().map(|x| x * 2));
///         doubled.iter().sum::<u32>()
///     });
///     xs[99] + inner_sum // `xs` is intact after the inner scope
/// });
/// assert_eq!(total, 99 + 9900);
/// ```
///
/// The scratch memory cannot leave the call that allocated it, returned or stored
/// outside:
///
/// ```compile_fail
/// use nebula_memory::Arena;
/// let escaped = nebula_memory::with_scratch(|s| s.alloc_slice(16, 0u8)); // lifetime may not live long enough
/// escaped[0] = 1;
/// ```
///
/// ```compile_fail,E0521
/// use nebula_memory::Arena;
/// let mut escaped = None;
/// nebula_memory::with_scratch(|s| escaped = Some(s.alloc_slice(16, 0u8))); // borrowed data escapes the closure
/// escaped.unwrap()[0] = 1;
/// ```
///
/// Nor can it reach another thread: the arena is `!Sync`, so `&MemoryArena` is not `Send`.
///
/// ```compile_fail,E0277
/// use nebula_memory::Arena;
/// nebula_memory::with_scratch(|s| {
///     std::thread::scope(|t| {
///         t.spawn(|| s.alloc_val(1u8)); // `Cell<()>` cannot be shared between threads safely
///     });
/// });
/// ```
pub fn with_scratch<R>(f: impl FnOnce(&MemoryArena<'static>) -> R) -> R {
    /// Frees the claimed arena, also when the closure panics.
    struct Exit(NonNull<Slot>);
    impl Drop for Exit {
        fn drop(&mut self) {
            // SAFETY: claimed below on this thread, whose stack is alive (a scope runs on
            // its thread, and the stack's destructor cannot run inside it); the scope has
            // ended, so nothing it allocated is borrowed any more (the closure's reference
            // cannot escape it).
            unsafe { release(self.0) };
            note_freed(self.0);
        }
    }
    match claim(with_scratch_owner()) {
        Some(slot) => {
            let exit = Exit(slot);
            // SAFETY: the slot is busy for this scope alone until `exit` frees it, and it
            // lives while this thread's stack does. Shared access only from here on.
            f(unsafe { exit.0.as_ref().shared_arena() })
        }
        // Thread-local storage is being torn down: a private arena serves this call.
        None => f(&MemoryArena::new(scratch_pool())),
    }
}

/// A [`with_scratch`] arena claimed once and kept for many short scopes: each
/// [`scope`](ScratchBatch::scope) gets the arena to itself and resets it on leaving (the
/// steady reset: a few stores), so per-item temporaries in a hot loop cost a bump each
/// instead of a claim each. Made for Bevy's `par_iter().for_each_init`, whose `init` runs
/// once per batch on the thread that runs it:
///
/// ```
/// use nebula_memory::{Arena, scratch_batch};
///
/// let items: Vec<u32> = (0..1000).collect();
/// let mut batch = scratch_batch();
/// let total: u32 = items
///     .iter()
///     .map(|&i| {
///         batch.scope(|s| {
///             let neighbours = s.alloc_slice_fill_with(8, |k| i + k as u32);
///             neighbours.iter().sum::<u32>()
///         })
///     })
///     .sum();
/// assert_eq!(total, (0..1000).map(|i| 8 * i + 28).sum::<u32>());
/// ```
///
/// The batch holds its arena busy until it is dropped, so nested [`with_scratch`] calls
/// (and other batches) get other arenas; it is neither `Send` nor `Sync`. It keeps its
/// arena alive itself (a reference count), so a batch kept in a thread-local whose
/// destructor runs after the scratch stack's still has it.
pub struct ScratchBatch {
    arena: BatchArena,
    /// The largest `bytes_used` of its scopes, for the arena's figures and trim window.
    peak: usize,
    /// The arena is `with_scratch`'s (not a Bevy owner's).
    with_scratch: bool,
    /// The heap scope the batch's thread is in while it lives (a Bevy system's, for a
    /// batch of its `par_iter`); left after the arena is freed (fields drop after `drop`).
    _scope: Option<TagScope>,
    _not_send: PhantomData<*const ()>,
}

enum BatchArena {
    /// A slot of this thread's stack, held busy (and alive: the `Arc`).
    Claimed(Arc<Slot>),
    /// Thread-local storage is being torn down: an arena of the batch's own.
    Private(Box<MemoryArena<'static>>),
}

/// Claims a [`with_scratch`] arena of the calling thread for a [`ScratchBatch`]. O(1).
///
/// Late in the thread's exit, when its scratch arenas are gone, the batch gets an arena of
/// its own instead (a `MemoryArena` on the scratch pool, in a heap box), given back when
/// the batch is dropped.
pub fn scratch_batch() -> ScratchBatch {
    batch_of(with_scratch_owner())
}

/// A [`ScratchBatch`] on an arena of `owner` (`with_scratch`'s, or a Bevy `Scratch` or
/// `TaggedScratch` resource's), claimed on the calling thread. A batch is never a frame's
/// item: no frame end takes its arena back, however long it lives.
pub(crate) fn batch_of(owner: &Arc<ScratchOwner>) -> ScratchBatch {
    batch_in(owner, None, None)
}

/// [`batch_of`], its thread's heap allocations charged to `scope` while it lives, its
/// arena `line`'s (see `ScratchOwner::claim_shared`).
pub(crate) fn batch_in(
    owner: &Arc<ScratchOwner>,
    scope: Option<HeapScope>,
    line: Option<&'static TagNode>,
) -> ScratchBatch {
    let arena = match claim_held(owner, false, line) {
        Some(slot) => BatchArena::Claimed(slot),
        None => BatchArena::Private(Box::new(MemoryArena::with_config(
            scratch_pool(),
            owner.config,
        ))),
    };
    ScratchBatch {
        arena,
        peak: 0,
        with_scratch: Arc::ptr_eq(owner, with_scratch_owner()),
        _scope: scope.map(HeapScope::enter),
        _not_send: PhantomData,
    }
}

impl ScratchBatch {
    /// Runs `f` with the batch's arena; everything `f` allocates is freed when it returns.
    /// O(1) plus `f`.
    pub fn scope<R>(&mut self, f: impl FnOnce(&MemoryArena<'static>) -> R) -> R {
        let arena: &mut MemoryArena<'static> = match &mut self.arena {
            // SAFETY: the batch holds the slot busy and alive (and is not `Send`, so this
            // is the claiming thread), and no reference to the arena outlives a `scope`.
            BatchArena::Claimed(slot) => unsafe { slot.arena() },
            BatchArena::Private(arena) => arena,
        };
        let r = f(arena);
        // `f`'s reference ended with the call (`R` cannot borrow it): nothing it allocated
        // is reachable.
        self.peak = self.peak.max(arena.peak_since_reset());
        arena.reset();
        r
    }
}

impl Drop for ScratchBatch {
    fn drop(&mut self) {
        if let BatchArena::Claimed(slot) = &self.arena {
            slot.note_peak(self.peak);
            let slot = slot_ptr(slot);
            // SAFETY: claimed on this thread, held busy and alive (our `Arc`) until now,
            // and every scope has ended, so nothing of the arena is in use.
            unsafe { release(slot) };
            // Only `with_scratch` arenas take the fast path of its next claim.
            if self.with_scratch {
                note_freed(slot);
            }
        }
    }
}

impl std::fmt::Debug for ScratchBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchBatch")
            .field("peak", &self.peak)
            .finish_non_exhaustive()
    }
}

/// Figures of the arenas behind [`with_scratch`] (and [`ScratchBatch`]) on every live
/// thread, from [`with_scratch_stats`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchStats {
    /// Arenas on live threads (one per thread and nesting depth reached).
    pub arenas: usize,
    /// Bytes of scratch-pool blocks they hold (as of when each was last freed or trimmed).
    pub bytes_held: usize,
}

/// The figures of [`with_scratch`]'s arenas on every live thread. O(arenas).
///
/// ```
/// nebula_memory::with_scratch(|s| { nebula_memory::Arena::alloc_val(s, 1u8); });
/// let stats = nebula_memory::with_scratch_stats();
/// assert!(stats.arenas >= 1 && stats.bytes_held > 0);
/// ```
pub fn with_scratch_stats() -> ScratchStats {
    let (arenas, bytes_held) = with_scratch_owner().held();
    ScratchStats { arenas, bytes_held }
}
