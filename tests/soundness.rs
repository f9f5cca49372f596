//! Regression tests for undefined behaviour that safe code (or code honouring an `unsafe`
//! contract) could once reach. Each failed before its fix: natively in a debug build where
//! the damage shows (a poisoned value), under Miri where it is undefined behaviour only.
//! `scripts/miri.sh` runs this binary.

mod common;

use nebula_memory::Arena;
use std::alloc::Layout;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::OnceLock;

use nebula_memory::{ArenaConfig, MemoryArena, MemoryBlock, MemoryPool, SharedArena};

use common::KIB;

/// `MemoryBlock::data_of` is safe, so it must accept any pointer: it once did in-bounds
/// pointer arithmetic (`add`) on whatever it was given, which Miri reports as UB for a
/// dangling pointer or a pointer to a 1-byte allocation.
#[test]
fn data_of_accepts_any_pointer() {
    let dangling = NonNull::<MemoryBlock>::dangling();
    let data = MemoryBlock::data_of(dangling);
    assert_eq!(data.as_ptr().addr(), dangling.as_ptr().addr() + 32);

    let byte = Box::new(0u8);
    let tiny = NonNull::from(&*byte).cast::<MemoryBlock>();
    assert_eq!(
        MemoryBlock::data_of(tiny).as_ptr().addr(),
        tiny.as_ptr().addr() + 32
    );
}

/// Growing the top in place returns (and poisons through) a pointer derived from the
/// arena's block, not the caller's: a pointer taken from the `&mut [u8]` of `alloc_slice`
/// only covers the old bytes, so writing the grown part through it is UB under Stacked
/// Borrows (Miri's default).
#[test]
fn in_place_growth_hands_out_a_pointer_that_covers_the_growth() {
    let pool = MemoryPool::new("grow_in_place", 1 << 20).unwrap();
    let arena = MemoryArena::new(&pool);
    let slice: &mut [u8] = arena.alloc_slice(16, 1u8);
    let p = NonNull::from(slice).cast::<u8>();
    let old = Layout::array::<u8>(16).unwrap();
    // SAFETY: `p` is the live top allocation of `old`; only the result is used afterwards.
    let q = unsafe { arena.realloc(p, old, 64) }.unwrap();
    assert_eq!(q, p, "the top grew in place");
    // SAFETY: `q` points at 64 bytes of ours.
    unsafe {
        q.as_ptr().add(40).write(7);
        assert_eq!(q.as_ptr().read(), 1);
        assert_eq!(q.as_ptr().add(40).read(), 7);
    }
}

/// The arena the re-entrant subscriber below allocates from, on a pool of its own.
fn reentry_arena() -> &'static SharedArena<'static> {
    static ARENA: OnceLock<SharedArena<'static>> = OnceLock::new();
    ARENA.get_or_init(|| {
        let pool = Box::leak(Box::new(MemoryPool::new("reentry", 256 * KIB).unwrap()));
        let config = ArenaConfig::default()
            .first_block(64 * KIB)
            .heap_fallback(true);
        SharedArena::with_config(pool, config)
    })
}

thread_local! {
    /// Armed: the next event allocates from `reentry_arena` and records the address here.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATED: Cell<Option<NonNull<u64>>> = const { Cell::new(None) };
}

/// Once armed, allocates 8 bytes from `reentry_arena` on the thread the event is emitted
/// on: safe code a game may well write in a `tracing` subscriber (a log line built in
/// frame memory, a global allocator backed by an arena).
fn allocate_when_armed(_: &tracing::Event<'_>) {
    if ARMED.replace(false) {
        let x = reentry_arena().alloc_val(0x1111_2222_3333_4444u64);
        ALLOCATED.set(Some(NonNull::from(x)));
    }
}

/// A moving `realloc` of the top whose growth reports an exhaustion: the subscriber
/// allocates X from the same arena while the growth is under way. X once landed in the
/// old block right after the old buffer, and the bookkeeping that forgets the moved
/// buffer then counted X as part of it (debug builds filled X with 0xDD; release builds
/// could hand X's bytes out again). Events are now emitted after the arena is done, and
/// the moved buffer is only forgotten while it still ends its block's fill.
#[test]
fn an_allocation_made_by_a_subscriber_during_a_moving_realloc_survives() {
    let arena = reentry_arena();
    // The part's first block (64 KiB).
    arena.with_this_thread(|mine| {
        mine.alloc_val(0u8);
    });
    let pool = arena.pool();
    let mut hold = Vec::new();
    while let Ok(b) = pool.allocate_block(pool.stats().largest_free.max(1)) {
        hold.push(b);
    }
    let old = Layout::from_size_align(KIB, 8).unwrap();
    let buf = arena.with_this_thread(|mine| mine.alloc(old));
    // SAFETY: `buf` is ours, `KIB` bytes.
    unsafe { buf.as_ptr().write_bytes(0x5A, KIB) };

    tracing::subscriber::with_default(common::OnEvent(allocate_when_armed), || {
        ARMED.set(true);
        // SAFETY: `buf` is the live top allocation of `old`; only the result is used after.
        let q = arena
            .with_this_thread(|mine| unsafe { mine.realloc(buf, old, 128 * KIB) })
            .unwrap();
        assert_ne!(q, buf, "the pool is full: the buffer moved (to the heap)");
        // SAFETY: `q` is live with at least `KIB` bytes, copied over from `buf`.
        let moved = unsafe { std::slice::from_raw_parts(q.as_ptr(), KIB) };
        assert!(moved.iter().all(|&b| b == 0x5A));
        let x = ALLOCATED
            .get()
            .expect("the subscriber allocated during the realloc");
        // SAFETY: X is a live allocation of the arena: nothing was reset or rewound.
        let x_now = unsafe { x.as_ptr().read() };
        assert_eq!(x_now, 0x1111_2222_3333_4444, "X was clobbered");
        let (x, q) = (x.as_ptr().addr(), q.as_ptr().addr());
        assert!(
            x + 8 <= q || x >= q + 128 * KIB,
            "X overlaps the moved buffer"
        );
    });

    for b in hold {
        // SAFETY: from this pool, not used afterwards.
        unsafe { pool.free_block(b) };
    }
}

/// A config with a first block of `usize::MAX` once overflowed a multiplication in the
/// reset policy (a panic in debug builds, a silent wrap in release). Set through the
/// builder such a size is refused up front (`arena_errors`); written to the field
/// directly it reaches the policy, which saturates.
#[test]
fn huge_first_block_then_reset_does_not_overflow() {
    let pool = MemoryPool::new("huge_first", 1 << 20).unwrap();
    let mut config = ArenaConfig::default();
    config.first_block = usize::MAX;
    let mut arena = MemoryArena::with_config(&pool, config);
    arena.alloc_val(1u64);
    arena.reset();
    arena.reset();
    assert_eq!(arena.alloc_val(2u64), &2);
}

/// `first_block(0).max_block(0)`, which the builder accepts, once panicked inside the
/// growth rule ("min > max") on the first allocation. 0 means the smallest block.
#[test]
fn zero_block_sizes_work() {
    let pool = MemoryPool::new("zero_sizes", 1 << 20).unwrap();
    let config = ArenaConfig::default().first_block(0).max_block(0);
    let arena = MemoryArena::with_config(&pool, config);
    let v = arena.alloc_slice_fill_with(1000, |i| i as u32);
    assert_eq!(v[999], 999);
    assert!(arena.block_count() >= 1);
}

/// A caller's pointer to a block that covers that block and nothing more (as one made
/// from the block's own bytes would).
fn exactly_the_block(block: NonNull<MemoryBlock>) -> NonNull<MemoryBlock> {
    // SAFETY: the block is live; `total_size` bytes from its header are the block.
    let total = unsafe { block.as_ref() }.total_size();
    // SAFETY: those bytes are the block's, which the caller owns.
    let bytes = unsafe { std::slice::from_raw_parts_mut(block.as_ptr().cast::<u8>(), total) };
    NonNull::from(bytes).cast()
}

/// `free_block` merges the block with its free neighbours, reading and writing their
/// headers and footers: through the pool's own pointer to its region, never through the
/// caller's, which covers the given block only (it once did; Miri: "tag does not exist in
/// the borrow stack" reading the next block's header).
#[test]
fn free_block_merges_through_the_pools_pointer_not_the_callers() {
    let pool = MemoryPool::new("narrow-free", 64 * KIB).unwrap();
    let whole = pool.stats().largest_free;
    let a = pool.allocate_block(64).unwrap();
    let b = pool.allocate_block(64).unwrap();
    let c = pool.allocate_block(64).unwrap();
    // SAFETY: each block is from this pool, freed once and not used afterwards.
    unsafe {
        pool.free_block(exactly_the_block(a));
        pool.free_block(exactly_the_block(b)); // a free block before it (its footer)
        pool.free_block(exactly_the_block(c)); // and the free tail after it
    }
    assert_eq!(pool.stats().blocks_in_use, 0);
    assert_eq!(
        pool.stats().largest_free,
        whole,
        "merged back into one range"
    );
    // The blocks it hands out now cover their data.
    let d = pool.allocate_block(1000).unwrap();
    // SAFETY: `d` is live with at least 1000 usable bytes.
    unsafe { MemoryBlock::data_of(d).as_ptr().write_bytes(7, 1000) };
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(d) };
}

/// The same through the quarantine, whose blocks are merged later by `maintain`.
#[test]
fn quarantined_blocks_are_held_by_the_pools_pointer() {
    let pool = MemoryPool::new("narrow-quarantine", 64 * KIB).unwrap();
    pool.set_quarantine(1);
    let a = pool.allocate_block(64).unwrap();
    // SAFETY: from this pool, freed once, not used afterwards.
    unsafe { pool.free_block(exactly_the_block(a)) };
    pool.maintain();
    pool.maintain();
    let b = pool.allocate_block(64).unwrap();
    // SAFETY: `b` is live with at least 64 usable bytes.
    unsafe { MemoryBlock::data_of(b).as_ptr().write_bytes(1, 64) };
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(b) };
}

/// `pop` may be given a pointer that only reads (made from a shared reference): the bytes
/// it gives back are poisoned through the arena's own pointer (debug builds), never
/// written through the caller's (it once did: "only grants SharedReadOnly" under Miri).
#[test]
fn pop_writes_nothing_through_the_callers_pointer() {
    let pool = MemoryPool::new("narrow-pop", 64 * KIB).unwrap();
    let arena = MemoryArena::new(&pool);
    let v: &mut u64 = arena.alloc_val(5u64);
    let p = NonNull::from(&*v).cast::<u8>();
    // SAFETY: the top allocation, made with this layout, not used afterwards.
    assert!(unsafe { arena.pop(p, Layout::new::<u64>()) });
    assert_eq!(arena.bytes_used(), 0);

    let frame = nebula_memory::FrameArena::new(256);
    let w: &mut u64 = frame.alloc_val(5u64).unwrap();
    let p = NonNull::from(&*w).cast::<u8>();
    // SAFETY: as above.
    assert!(unsafe { Arena::pop(&frame, p, Layout::new::<u64>()) });
    assert_eq!(frame.bytes_used(), 0);
}
