//! Rewinding to a checkpoint that lies *ahead* of the current position: the bytes after it
//! were already given back (a collection popped below it, or an earlier rewind went further
//! back), so a correct program can do this, and the position stays where it is. Stale and
//! foreign checkpoints still panic (`arena_api`).
//!
//! In debug builds every byte handed out is 0xCD and every byte given back 0xDD; the live
//! data checked below would show either if a rewind freed too much.

use allocator_api2::vec::Vec as AVec;
use nebula_memory::Arena;
use nebula_memory::{ArenaConfig, MemoryArena};

mod common;
use common::pool;

/// The case: take a checkpoint, drop a collection whose buffer was the top before
/// the checkpoint (its `deallocate` pops it), then rewind.
#[test]
fn a_collection_popped_below_the_checkpoint() {
    let pool = pool("ahead-pop");
    let arena = MemoryArena::new(&pool);
    let live = arena.alloc_slice_fill_with(16, |i| i as u32);
    let mut v: AVec<u64, _> = AVec::with_capacity_in(32, &arena);
    v.extend(0..32u64);
    let mark = arena.checkpoint();
    drop(v); // its buffer was the top: popped, the position is now below `mark`
    let below = arena.bytes_used();
    assert_eq!(below, 64, "only `live` is left");
    // SAFETY: nothing allocated after `mark` exists.
    unsafe { arena.rewind(mark) };
    assert_eq!(
        arena.bytes_used(),
        below,
        "the position did not move forward"
    );
    assert!(live.iter().enumerate().all(|(i, &x)| x == i as u32));
    // The next allocation goes where the vector was.
    let next = arena.alloc_val(7u64);
    assert_eq!(*next, 7);
    assert_eq!(arena.bytes_used(), below + 8);
}

/// A checkpoint in a block that became a spare after an earlier rewind, and then one in a
/// spare that was trimmed: both are ahead of the position.
#[test]
fn checkpoints_in_spares_and_trimmed_blocks() {
    let pool = pool("ahead-spare");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4096));
    let live = arena.alloc_slice(1000, 0x5Au8);
    let live_ptr = live.as_ptr();
    let early = arena.checkpoint();
    arena.alloc_slice(10_000, 1u8); // a second block
    let late = arena.checkpoint();
    assert_eq!(arena.block_count(), 2);
    // SAFETY: nothing after `early` is used again.
    unsafe { arena.rewind(early) };
    assert_eq!(arena.bytes_used(), 1000);
    // SAFETY: nothing after `late` exists.
    unsafe { arena.rewind(late) };
    assert_eq!(arena.bytes_used(), 1000, "a checkpoint in a spare is ahead");
    arena.trim_spares();
    assert_eq!(arena.block_count(), 1);
    // SAFETY: as above.
    unsafe { arena.rewind(late) };
    assert_eq!(
        arena.bytes_used(),
        1000,
        "a checkpoint in a trimmed block is ahead"
    );
    // SAFETY: the slice is still allocated (1000 bytes from the block start).
    let live = unsafe { std::slice::from_raw_parts(live_ptr, 1000) };
    assert!(live.iter().all(|&b| b == 0x5A));
    assert_eq!(arena.alloc_slice(3, 9u8), &[9, 9, 9]);
}

/// The checkpoint's block is before the current one, but a pop went below the checkpoint
/// before the arena moved on: the rewind frees the later block and stops at that block's
/// fill, below the checkpoint.
#[test]
fn a_checkpoint_above_the_fill_of_an_earlier_block() {
    let pool = pool("ahead-fill");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4096));
    let live = arena.alloc_slice(100, 0x11u8);
    let layout = std::alloc::Layout::from_size_align(200, 8).unwrap();
    let top = arena.alloc(layout);
    let mark = arena.checkpoint();
    // SAFETY: `top` is not used again.
    assert!(unsafe { arena.pop(top, layout) });
    let fill = arena.bytes_used(); // `live` and the padding before `top`
    assert!((100..108).contains(&fill));
    arena.alloc_slice(20_000, 2u8); // does not fit: a second block
    assert_eq!(arena.block_count(), 2);
    assert_eq!(arena.bytes_used(), fill + 20_000);
    // SAFETY: nothing allocated after `mark` is used again.
    unsafe { arena.rewind(mark) };
    assert_eq!(
        arena.bytes_used(),
        fill,
        "back to the first block's fill, below `mark`"
    );
    assert!(live.iter().all(|&b| b == 0x11));
    // The next allocation lands right after `live`, in the first block.
    let p = arena.alloc(layout);
    assert_eq!(p, top);
}

/// A scope whose inside rewound below the scope's own mark: the scope's exit leaves the
/// position alone.
#[test]
fn a_scope_exit_after_an_inner_rewind_below_its_mark() {
    let pool = pool("ahead-scope");
    let mut arena = MemoryArena::new(&pool);
    let outer = arena.checkpoint();
    arena.scope(|a| {
        a.alloc_slice(500, 3u8);
        // SAFETY: nothing allocated in the scope is used after this.
        unsafe { a.rewind(outer) };
        assert_eq!(a.bytes_used(), 0);
    });
    assert_eq!(arena.bytes_used(), 0);
    assert_eq!(arena.alloc_slice(2, 4u8), &[4, 4]);
}
