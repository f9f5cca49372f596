//! `HotCursor`: allocation through the caller-held bump position, growth across blocks
//! through its slow path, the write-back on drop, and the same results as the arena itself
//! for any sequence of requests (a proptest against the arena as the model).

use std::alloc::Layout;

use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool};
use proptest::prelude::*;

fn pool(name: &'static str) -> MemoryPool {
    MemoryPool::new(name, 64 << 20).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn allocations_are_aligned_disjoint_and_keep_their_values() {
    let pool = pool("hot-values");
    let mut arena = MemoryArena::new(&pool);
    let hot = arena.hot_cursor();
    let mut all = Vec::new();
    for i in 0..1000u64 {
        let v = hot.alloc_val([i; 3]);
        assert_eq!(v.as_ptr() as usize % 8, 0);
        all.push(v);
    }
    let s = hot.alloc_str("hot");
    let f = hot.alloc_fmt(format_args!("{}-{}", "n", 7));
    for (i, v) in all.iter().enumerate() {
        assert_eq!(**v, [i as u64; 3]);
    }
    assert_eq!((&*s, &*f), ("hot", "n-7"));
    assert_eq!(hot.bytes_used(), 1000 * 24 + 3 + 3);
}

#[test]
fn the_position_is_written_back_on_drop() {
    let pool = pool("hot-writeback");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_val(1u32);
    let before = arena.checkpoint();
    {
        let hot = arena.hot_cursor();
        hot.alloc_slice_copy(&[0u8; 100]);
        hot.alloc_val(2u64);
    }
    // 4 + 100, padded to 8, + 8.
    assert_eq!(arena.bytes_used(), 112);
    assert_ne!(arena.checkpoint(), before);
    // The arena continues after what the cursor handed out.
    let next = arena.alloc_val(3u8) as *mut u8 as usize;
    let hot = arena.hot_cursor();
    assert_eq!(hot.bytes_used(), 113);
    let after = hot.alloc_val(4u8) as *mut u8 as usize;
    assert_eq!(after, next + 1);
    drop(hot);
    // SAFETY: nothing allocated after `before` is used again.
    unsafe { arena.rewind(before) };
    assert_eq!(arena.bytes_used(), 4);
}

#[test]
fn growth_across_blocks_goes_through_the_slow_path() {
    let pool = pool("hot-growth");
    let config = ArenaConfig::default().first_block(4096).max_block(16 << 10);
    let mut arena = MemoryArena::with_config(&pool, config);
    let mut ptrs = Vec::new();
    {
        let hot = arena.hot_cursor();
        for i in 0..10_000u32 {
            let v = hot.alloc_val(i);
            ptrs.push(v as *mut u32);
        }
        for (i, &p) in ptrs.iter().enumerate() {
            // SAFETY: every pointer is a live allocation of this arena (not reset since).
            assert_eq!(unsafe { *p }, i as u32);
        }
        assert_eq!(hot.bytes_used(), 40_000);
    }
    assert!(arena.block_count() > 2, "{}", arena.block_count());
    assert_eq!(arena.bytes_used(), 40_000);
    assert_eq!(arena.stats().blocks_taken, arena.block_count() as u64);
    arena.reset();
    assert_eq!(arena.bytes_used(), 0);
    // After the reset (one block kept), the cursor starts from the arena's new position.
    let hot = arena.hot_cursor();
    hot.alloc_slice(1000, 0u32);
    drop(hot);
    assert_eq!((arena.bytes_used(), arena.block_count()), (4000, 1));
}

#[test]
fn an_empty_arena_takes_its_first_block_through_the_cursor() {
    let pool = pool("hot-first");
    let mut arena = MemoryArena::new(&pool);
    assert_eq!(arena.block_count(), 0);
    let hot = arena.hot_cursor();
    let x = hot.alloc_val(5u16);
    assert_eq!(*x, 5);
    drop(hot);
    assert_eq!((arena.block_count(), arena.bytes_used()), (1, 2));
}

#[test]
fn pop_and_realloc_act_on_the_cursors_top() {
    let pool = pool("hot-top");
    let mut arena = MemoryArena::new(&pool);
    let hot = arena.hot_cursor();
    let layout = Layout::new::<[u8; 64]>();
    let a = Arena::alloc(&hot, layout);
    let b = Arena::alloc(&hot, layout);
    // SAFETY: neither allocation is used again.
    unsafe {
        assert!(!Arena::pop(&hot, a, layout), "not the top");
        assert!(Arena::pop(&hot, b, layout));
    }
    assert_eq!(hot.bytes_used(), 64);
    // SAFETY: `a` is live with `layout` and now the top; only the result is used.
    let grown = unsafe { Arena::realloc(&hot, a, layout, 256) }.unwrap();
    assert_eq!(grown, a, "the top grows in place");
    assert_eq!(hot.bytes_used(), 256);
    // Bumping continues after the grown top.
    let c = Arena::alloc(&hot, Layout::new::<u8>());
    assert_eq!(c.as_ptr() as usize, a.as_ptr() as usize + 256);
    // Collected in place: the buffer grows at the top.
    let v = hot.alloc_slice_from_iter(0..1000u32);
    assert_eq!(v.iter().sum::<u32>(), 999 * 1000 / 2);
    drop(hot);
    assert_eq!(arena.bytes_used(), 256 + 1 + 3 + 4000);
}

#[test]
fn errors_leave_the_cursor_usable() {
    let pool = MemoryPool::new("hot-small", 1 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let hot = arena.hot_cursor();
    hot.alloc_val(1u64);
    let huge = Layout::from_size_align(8 << 20, 8).unwrap();
    assert!(hot.try_alloc(huge).is_err());
    assert!(hot.try_alloc_slice(usize::MAX / 2, 0u32).is_err());
    assert_eq!(*hot.alloc_val(9u8), 9);
    assert_eq!(hot.bytes_used(), 9);
    drop(hot);
    assert_eq!(arena.bytes_used(), 9);
}

#[test]
#[should_panic(expected = "nebula_memory")]
fn the_panicking_form_panics_with_the_errors_message() {
    let pool = MemoryPool::new("hot-panic", 1 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let hot = arena.hot_cursor();
    Arena::alloc(&hot, Layout::from_size_align(8 << 20, 8).unwrap());
}

#[test]
fn a_leaked_cursor_leaves_the_last_written_back_position() {
    let pool = pool("hot-leak");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_val(1u64);
    let hot = arena.hot_cursor();
    hot.alloc_val(2u64);
    std::mem::forget(hot);
    // The arena is usable again; the leaked cursor's bytes are simply handed out again.
    assert_eq!(arena.bytes_used(), 8);
    assert_eq!(*arena.alloc_val(3u64), 3);
    arena.reset();
    assert_eq!(arena.bytes_used(), 0);
}

/// A request: a size and an alignment (log 2).
fn request() -> impl Strategy<Value = (usize, u32)> {
    prop_oneof![
        4 => (0usize..64, 0u32..5),
        2 => (64usize..4096, 0u32..7),
        // Under Miri, which checks every byte the debug build poisons, smaller large ones.
        1 => (4096usize..if cfg!(miri) { 8192 } else { 40_000 }, 0u32..13),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: if cfg!(miri) { None } else { ProptestConfig::default().failure_persistence },
        ..ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 64 })
    })]

    /// Through a cursor, any sequence of requests (some dropping the cursor and taking a
    /// new one in between) leaves the arena where the same requests made on the arena
    /// itself leave another: same figures, same offsets from the block start, and every
    /// allocation aligned, disjoint from the others and holding what was written.
    #[test]
    fn a_cursor_does_what_the_arena_does(
        ops in prop::collection::vec((request(), any::<bool>()), 1..200),
    ) {
        let config = ArenaConfig::default().first_block(4096).max_block(64 << 10);
        let (pa, pb) = (pool("hot-model-a"), pool("hot-model-b"));
        let model = MemoryArena::with_config(&pa, config);
        let mut arena = MemoryArena::with_config(&pb, config);
        let mut live: Vec<(*mut u8, usize, u8)> = Vec::new();
        let mut next = 0;
        while next < ops.len() {
            let hot = arena.hot_cursor();
            while next < ops.len() {
                let ((size, align_log), renew) = ops[next];
                let layout = Layout::from_size_align(size, 1 << align_log).unwrap();
                let expect = model.alloc(layout);
                let got = Arena::alloc(&hot, layout);
                prop_assert_eq!(got.as_ptr() as usize % layout.align(), 0);
                prop_assert_eq!(hot.bytes_used(), model.bytes_used());
                prop_assert_eq!(
                    got.as_ptr() as usize % 4096,
                    expect.as_ptr() as usize % 4096,
                    "same offsets in the same blocks"
                );
                let fill = next as u8;
                // SAFETY: a fresh allocation of `size` bytes.
                unsafe { got.as_ptr().write_bytes(fill, size) };
                live.push((got.as_ptr(), size, fill));
                next += 1;
                if renew {
                    break;
                }
            }
            drop(hot);
            prop_assert_eq!(arena.bytes_used(), model.bytes_used());
            prop_assert_eq!(arena.block_count(), model.block_count());
        }
        live.sort_by_key(|l| l.0 as usize);
        for w in live.windows(2) {
            prop_assert!(w[0].0 as usize + w[0].1 <= w[1].0 as usize, "overlap");
        }
        for &(p, size, fill) in &live {
            // SAFETY: live allocations of this arena (not reset since).
            let bytes = unsafe { std::slice::from_raw_parts(p, size) };
            prop_assert!(bytes.iter().all(|&b| b == fill));
        }
    }
}
