//! The `MemoryArena` API surface, one behaviour per test: every typed helper and its `try_`
//! form, failure on an exhausted pool (panic messages and `AllocError`s), layout overflow,
//! large alignments, zero-sized requests, `pop` and `realloc` at and below the top,
//! checkpoints and rewind (block caching, stale and foreign checkpoints), scopes (also when
//! the closure panics), `ArenaBox` destructors, tags, stats, heap fallback and `Send`.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::rc::Rc;

use nebula_memory::{AllocError, ArenaBox, ArenaConfig, MemoryArena, MemoryPool, PoolError};

mod common;
use common::{KIB, assert_drained, panic_message, pool};

/// A 64 KiB pool named "tiny" with 60 KiB taken by another owner, so about 4 KiB is free:
/// small requests still get a block, a request of 8 KiB finds the pool exhausted.
fn with_tiny_pool(f: impl FnOnce(&MemoryPool)) {
    let pool = MemoryPool::new("tiny", 64 * KIB).unwrap();
    let hog = pool.allocate_block(60 * KIB).unwrap();
    f(&pool);
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(hog) };
    assert_drained(&pool);
}

const BIG: usize = 8 * KIB;

/// Checks `e` is the tiny pool's `Exhausted` refusal; returns the size it asked for.
fn exhausted(e: AllocError) -> usize {
    match e {
        AllocError::Pool(PoolError::Exhausted {
            pool, requested, ..
        }) => {
            assert_eq!(pool, "tiny");
            requested
        }
        other => panic!("expected AllocError::Pool(Exhausted), got {other:?}"),
    }
}

/// `exhausted`, asking for at least `BIG` bytes (the request that failed).
fn assert_exhausted(e: AllocError) {
    let requested = exhausted(e);
    assert!(requested >= BIG, "requested {requested}");
}

// ------------------------------------------------------------------ typed helpers

#[test]
fn typed_helpers_return_the_right_values() {
    let pool = pool("typed");
    let arena = MemoryArena::new(&pool);

    let v = arena.alloc_val(41u64);
    *v += 1;
    let t = arena.try_alloc_val((1u8, 2u16, 3u32)).unwrap();
    assert_eq!(*t, (1, 2, 3));

    let w = arena.alloc_with(|| [7u32; 100]);
    assert!(w.iter().all(|&x| x == 7));
    let big = arena.try_alloc_with(|| [[3u16; 64]; 64]).unwrap();
    assert_eq!(big[63][63], 3);

    let s = arena.alloc_slice(10, 0xDEADu32);
    assert_eq!(s, &[0xDEAD; 10]);
    let s2 = arena.try_alloc_slice(5, -1i64).unwrap();
    assert_eq!(s2, &[-1; 5]);

    let c = arena.alloc_slice_copy(&[1u16, 2, 3]);
    c[0] = 10;
    assert_eq!(c, &[10, 2, 3]);
    let c2 = arena.try_alloc_slice_copy(b"bytes").unwrap();
    assert_eq!(c2, b"bytes");

    let words = ["alpha", "beta", "gamma"];
    assert_eq!(arena.alloc_slice_clone(&words), &words);
    assert_eq!(
        arena.try_alloc_slice_clone(&[1.5f32, 2.5]).unwrap(),
        &[1.5, 2.5]
    );

    let f = arena.alloc_slice_fill_with(100, |i| (i * i) as u32);
    assert!(f.iter().enumerate().all(|(i, &x)| x == (i * i) as u32));
    let f2 = arena.try_alloc_slice_fill_with(3, |i| i as u8).unwrap();
    assert_eq!(f2, &[0, 1, 2]);

    let it = arena.alloc_slice_from_iter(0..1000u32);
    assert!(it.iter().enumerate().all(|(i, &x)| x == i as u32));
    // Unknown length (lower size hint 0): the buffer grows at the top.
    let evens = arena
        .try_alloc_slice_from_iter((0..10_000u64).filter(|n| n % 2 == 0))
        .unwrap();
    assert_eq!(evens.len(), 5000);
    assert!(evens.iter().enumerate().all(|(i, &x)| x == 2 * i as u64));
    let empty = arena.alloc_slice_from_iter(std::iter::empty::<u32>());
    assert!(empty.is_empty());

    let st = arena.alloc_str("hello");
    st.make_ascii_uppercase();
    assert_eq!(st, "HELLO");
    assert_eq!(arena.try_alloc_str("wörld").unwrap(), "wörld");
    assert_eq!(arena.alloc_str(""), "");

    assert_eq!(arena.alloc_fmt(format_args!("{}x{}", 16, 9)), "16x9");
    assert_eq!(arena.alloc_fmt(format_args!("literal")), "literal");
    assert_eq!(
        arena
            .try_alloc_fmt(format_args!("{}-{:03}", "chunk", 7))
            .unwrap(),
        "chunk-007"
    );

    let p = arena.alloc(Layout::from_size_align(100, 32).unwrap());
    assert_eq!(p.as_ptr() as usize % 32, 0);
    let q = arena
        .try_alloc(Layout::from_size_align(10, 256).unwrap())
        .unwrap();
    assert_eq!(q.as_ptr() as usize % 256, 0);

    // Everything written above is still intact.
    assert_eq!(*v, 42);
    assert_eq!(*t, (1, 2, 3));
    assert_eq!(s, &[0xDEAD; 10]);
    assert_eq!(c, &[10, 2, 3]);
    assert_eq!(st, "HELLO");
}

#[test]
fn helpers_work_across_many_blocks() {
    // Under Miri: 40 slices, 6 000 numbers collected, 2 000 formatted (still far larger
    // than the first block).
    let (slice_count, collect_from, numbers) = if cfg!(miri) {
        (40usize, 6_000u32, 2_000)
    } else {
        (200, 100_000, 10_000)
    };
    let pool = pool("typed-blocks");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let mut slices = Vec::new();
    for n in 0..slice_count {
        slices.push(arena.alloc_slice_fill_with(n * 13, |i| (i ^ n) as u32));
    }
    // A collected iterator of unknown length and a formatted string, both far larger than
    // the first block: they grow at the top and move between blocks.
    let collected = arena.alloc_slice_from_iter((0..collect_from).filter(|x| x % 3 != 0));
    let text = arena.alloc_fmt(format_args!(
        "{}",
        (0..numbers)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    ));
    assert!(arena.block_count() > 3);
    for (n, s) in slices.iter().enumerate() {
        assert_eq!(s.len(), n * 13);
        assert!(s.iter().enumerate().all(|(i, &x)| x == (i ^ n) as u32));
    }
    assert_eq!(
        collected.len(),
        (collect_from - collect_from.div_ceil(3)) as usize
    );
    assert!(collected.iter().all(|x| x % 3 != 0));
    assert!(text.starts_with("0,1,2,"));
    assert!(text.ends_with(&format!(",{},{}", numbers - 2, numbers - 1)));
    assert_eq!(pool.stats().in_use, arena.bytes_held());
}

// ------------------------------------------------------------------ exhausted pool

#[test]
fn panicking_forms_name_the_pool_and_the_size() {
    with_tiny_pool(|pool| {
        let arena = MemoryArena::new(pool);
        let expect = |msg: String, size: Option<usize>| {
            assert!(
                msg.contains("'tiny'"),
                "message does not name the pool: {msg}"
            );
            assert!(msg.contains("exhausted"), "message does not say why: {msg}");
            if let Some(size) = size {
                assert!(
                    msg.contains(&format!("{size} bytes")),
                    "message does not name the size {size}: {msg}"
                );
            }
        };
        let layout = Layout::from_size_align(BIG, 8).unwrap();
        expect(
            panic_message(|| {
                let _ = arena.alloc(layout);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_tagged(layout, "t");
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_val([0u8; BIG]);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_with(|| [0u8; BIG]);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_slice(BIG / 4, 0u32);
            }),
            Some(BIG),
        );
        let src = vec![1u16; BIG / 2];
        expect(
            panic_message(|| {
                let _ = arena.alloc_slice_copy(&src);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_slice_clone(&src);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_slice_fill_with(BIG, |i| i as u8);
            }),
            Some(BIG),
        );
        let text = "x".repeat(BIG);
        expect(
            panic_message(|| {
                let _ = arena.alloc_str(&text);
            }),
            Some(BIG),
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_boxed([0u8; BIG]);
            }),
            Some(BIG),
        );
        // The growing helpers name the pool and the pool's refusal.
        expect(
            panic_message(|| {
                let _ = arena.alloc_slice_from_iter(0..(BIG / 8) as u64);
            }),
            None,
        );
        expect(
            panic_message(|| {
                let _ = arena.alloc_fmt(format_args!("{text}{text}"));
            }),
            None,
        );
    });
}

#[test]
fn try_forms_report_exhaustion_and_the_arena_keeps_working() {
    with_tiny_pool(|pool| {
        let mut arena = MemoryArena::new(pool);
        let small = arena.alloc_val(7u32); // a small block still fits
        assert_eq!(*small, 7);
        let layout = Layout::from_size_align(BIG, 16).unwrap();
        assert_exhausted(arena.try_alloc(layout).unwrap_err());
        assert_exhausted(arena.try_alloc_tagged(layout, "t").unwrap_err());
        assert_exhausted(arena.try_alloc_val([0u8; BIG]).unwrap_err());
        let mut called = false;
        assert_exhausted(
            arena
                .try_alloc_with(|| {
                    called = true;
                    [0u8; BIG]
                })
                .unwrap_err(),
        );
        assert!(
            !called,
            "try_alloc_with called f although allocation failed"
        );
        assert_exhausted(arena.try_alloc_slice(BIG, 0u8).unwrap_err());
        let src = vec![3u8; BIG];
        assert_exhausted(arena.try_alloc_slice_copy(&src).unwrap_err());
        assert_exhausted(arena.try_alloc_slice_clone(&src).unwrap_err());
        assert_exhausted(arena.try_alloc_slice_fill_with(BIG, |_| 0u8).unwrap_err());
        assert_exhausted(
            arena
                .try_alloc_slice_from_iter(src.iter().copied())
                .unwrap_err(),
        );
        let text = "y".repeat(BIG);
        assert_exhausted(arena.try_alloc_str(&text).unwrap_err());
        assert_exhausted(arena.try_alloc_fmt(format_args!("{text}!")).unwrap_err());
        let (back, e) = match arena.try_alloc_boxed([5u8; BIG]) {
            Err(x) => x,
            Ok(_) => panic!("boxed allocation should fail"),
        };
        assert_exhausted(e);
        assert_eq!(back, [5u8; BIG], "the value comes back with the error");

        // Still usable: the earlier value is intact, small allocations work.
        assert_eq!(*small, 7);
        let again = arena.alloc_slice(100, 1u8);
        assert_eq!(again, &[1u8; 100]);
        // An iterator of unknown length grows its buffer until the pool refuses (the
        // blocks it filled stay with the arena until reset).
        exhausted(
            arena
                .try_alloc_slice_from_iter(src.iter().copied().filter(|_| true))
                .unwrap_err(),
        );
        assert_eq!(*small, 7);
        assert_eq!(again, &[1u8; 100]);
        arena.reset();
        assert_eq!(arena.bytes_used(), 0);
        let after = arena.alloc_slice_fill_with(200, |i| i as u16);
        assert_eq!(after[199], 199);
        assert_eq!(pool.stats().in_use - (60 * KIB + 32), arena.bytes_held());
    });
}

#[test]
fn exhaustion_then_space_freed_elsewhere() {
    let pool = MemoryPool::new("tiny", 64 * KIB).unwrap();
    let hog = pool.allocate_block(60 * KIB).unwrap();
    let mut arena = MemoryArena::new(&pool);
    assert_exhausted(arena.try_alloc_slice(BIG, 0u8).unwrap_err());
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(hog) };
    let s = arena.try_alloc_slice(BIG, 9u8).unwrap();
    assert!(s.iter().all(|&b| b == 9));
    arena.reset();
    assert_eq!(arena.block_count(), 1);
    drop(arena);
    assert_drained(&pool);
}

#[test]
fn huge_counts_are_layout_errors() {
    let pool = pool("huge");
    let arena = MemoryArena::new(&pool);
    let layout_err = |e: AllocError| {
        assert!(
            matches!(e, AllocError::Layout { pool: "huge" }),
            "expected AllocError::Layout, got {e:?}"
        );
        assert!(e.to_string().contains("'huge'"), "{e}");
    };
    layout_err(arena.try_alloc_slice(usize::MAX, 0u64).unwrap_err());
    layout_err(
        arena
            .try_alloc_slice(isize::MAX as usize / 2 + 1, 0u16)
            .unwrap_err(),
    );
    layout_err(
        arena
            .try_alloc_slice_fill_with(usize::MAX / 4, |_| 0u32)
            .unwrap_err(),
    );
    layout_err(
        arena
            .try_alloc_slice_from_iter(std::iter::repeat_n(0u64, usize::MAX))
            .unwrap_err(),
    );
    let p = arena.alloc(Layout::new::<u64>());
    // SAFETY: `p` is live with this layout; on error it is untouched.
    let r = unsafe { arena.realloc(p, Layout::new::<u64>(), usize::MAX) };
    layout_err(r.unwrap_err());
    // A valid layout larger than the pool is the pool's refusal, not a layout error.
    let e = arena
        .try_alloc(Layout::from_size_align(1 << 40, 4096).unwrap())
        .unwrap_err();
    assert!(
        matches!(e, AllocError::Pool(PoolError::TooLarge { .. })),
        "{e:?}"
    );
    // Panicking forms report the layout error too.
    let msg = panic_message(|| {
        let _ = arena.alloc_slice(usize::MAX, 0u64);
    });
    assert!(msg.contains("'huge'") && msg.contains("overflow"), "{msg}");
    // Nothing was allocated by the failures; zero-sized elements never overflow.
    assert_eq!(arena.bytes_used(), 8);
    // (One closure call per element: fewer under Miri.)
    let count = if cfg!(miri) { 1 << 10 } else { 1 << 20 };
    let units = arena.alloc_slice(count, ());
    assert_eq!(units.len(), count);
    assert_eq!(arena.bytes_used(), 8);
}

// ------------------------------------------------------------------ alignment, zero size

#[test]
fn large_alignments_are_honoured() {
    let pool = pool("align");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * KIB));
    for shift in 0..=12 {
        let align = 1usize << shift;
        for size in [1, 3, 17, 4096] {
            let p = arena.alloc(Layout::from_size_align(size, align).unwrap());
            assert_eq!(p.as_ptr() as usize % align, 0, "align {align}");
            // SAFETY: `size` fresh bytes.
            unsafe { p.as_ptr().write_bytes(0xAB, size) };
        }
    }
    // Alignments beyond the block size.
    let mut held = Vec::new();
    for shift in [16, 17, 20] {
        let align = 1usize << shift;
        let layout = Layout::from_size_align(100, align).unwrap();
        let p = arena.alloc(layout);
        assert_eq!(p.as_ptr() as usize % align, 0, "align {align}");
        // SAFETY: 100 fresh bytes.
        unsafe { p.as_ptr().write_bytes(shift as u8, 100) };
        held.push((p, shift as u8));
        let z = arena.alloc(Layout::from_size_align(0, align).unwrap());
        assert_eq!(z.as_ptr() as usize % align, 0, "zero-sized, align {align}");
    }
    for (p, byte) in held {
        // SAFETY: live 100-byte allocations.
        let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), 100) };
        assert!(s.iter().all(|&b| b == byte));
    }
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    let v = arena.alloc_val(Aligned4096([9; 64]));
    assert_eq!(v as *mut Aligned4096 as usize % 4096, 0);
    assert_eq!(v.0[63], 9);
}

#[repr(C, align(4096))]
struct Aligned4096([u8; 64]);

#[test]
fn zero_sized_allocations() {
    let pool = pool("zst");
    let arena = MemoryArena::new(&pool);
    // On a fresh arena zero-sized requests take no block.
    for align in [1, 2, 8, 64, 4096] {
        let p = arena.alloc(Layout::from_size_align(0, align).unwrap());
        assert_eq!(p.as_ptr() as usize % align, 0);
    }
    let unit = arena.alloc_val(());
    *unit = ();
    let empty: &mut [u64] = arena.alloc_slice(0, 0u64);
    assert!(empty.is_empty());
    assert_eq!(arena.alloc_slice_copy::<u32>(&[]), &[] as &[u32]);
    assert_eq!(arena.alloc_str(""), "");
    assert_eq!(arena.alloc_fmt(format_args!("")), "");
    assert_eq!((arena.block_count(), arena.bytes_used()), (0, 0));
    assert_drained(&pool);

    // Once there is a block, zero-sized requests are served in it and cost no bytes
    // (beyond alignment padding).
    arena.alloc_val(1u8);
    let used = arena.bytes_used();
    let z = arena.alloc(Layout::from_size_align(0, 1).unwrap());
    assert_eq!(arena.bytes_used(), used);
    // SAFETY: a zero-sized top: popping it is a no-op that reports success.
    assert!(unsafe { arena.pop(z, Layout::from_size_align(0, 1).unwrap()) });
    let units = arena.alloc_slice_fill_with(1000, |_| ());
    assert_eq!(units.len(), 1000);
    assert_eq!(arena.bytes_used(), used);
}

// ------------------------------------------------------------------ pop, realloc

#[test]
fn pop_only_the_top() {
    let pool = pool("pop");
    let other_pool = MemoryPool::new("pop-other", 1 << 20).unwrap();
    let arena = MemoryArena::new(&pool);
    let other = MemoryArena::new(&other_pool);
    // 100 is a multiple of the alignment: no padding between `a` and `b`, so popping `b`
    // makes `a` the top again.
    let layout = Layout::from_size_align(100, 4).unwrap();
    let a = arena.alloc(layout);
    let b = arena.alloc(layout);
    let foreign_top = other.alloc(layout);
    // SAFETY: 100 fresh bytes each.
    unsafe {
        a.as_ptr().write_bytes(1, 100);
        b.as_ptr().write_bytes(2, 100);
    }
    let used = arena.bytes_used();
    let mut stack = [0u8; 100];
    // SAFETY: none of these is this arena's top: each call is a no-op.
    unsafe {
        assert!(!arena.pop(a, layout), "non-top");
        assert!(!arena.pop(foreign_top, layout), "another arena's top");
        assert!(
            !arena.pop(NonNull::from(&mut stack).cast(), layout),
            "stack pointer"
        );
        assert!(
            !arena.pop(b, Layout::from_size_align(99, 4).unwrap()),
            "wrong size"
        );
    }
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(other.bytes_used(), 100);
    // SAFETY: live allocations of 100 bytes.
    unsafe {
        assert!(
            std::slice::from_raw_parts(a.as_ptr(), 100)
                .iter()
                .all(|&x| x == 1)
        );
        assert!(
            std::slice::from_raw_parts(b.as_ptr(), 100)
                .iter()
                .all(|&x| x == 2)
        );
    }
    // SAFETY: `b` is the top and is not used again.
    assert!(unsafe { arena.pop(b, layout) });
    assert_eq!(arena.bytes_used(), used - 100);
    // Popped twice: no longer the top.
    // SAFETY: a no-op.
    assert!(!unsafe { arena.pop(b, layout) });
    // `a` is now the top and its bytes come back to the next allocation.
    // SAFETY: `a` is the top and is not used again.
    assert!(unsafe { arena.pop(a, layout) });
    assert_eq!(arena.alloc(layout), a);
}

#[test]
fn realloc_in_place_at_the_top_and_copies_below_it() {
    let pool = pool("realloc");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * KIB));
    let fill = |p: NonNull<u8>, n: usize, seed: u8| {
        for i in 0..n {
            // SAFETY: callers pass live allocations of at least `n` bytes.
            unsafe { p.as_ptr().add(i).write(seed.wrapping_add(i as u8)) };
        }
    };
    let check = |p: NonNull<u8>, n: usize, seed: u8| {
        for i in 0..n {
            // SAFETY: as in `fill`.
            let b = unsafe { p.as_ptr().add(i).read() };
            assert_eq!(b, seed.wrapping_add(i as u8), "byte {i}");
        }
    };
    let l64 = Layout::from_size_align(64, 16).unwrap();
    let low = arena.alloc(l64);
    fill(low, 64, 10);
    let top = arena.alloc(l64);
    fill(top, 64, 20);

    // SAFETY: each pointer passed to `realloc` in this test is live with the given
    // layout and only the result is used afterwards.
    let grown = unsafe { arena.realloc(top, l64, 4096) }.unwrap();
    assert_eq!(grown, top, "the top grows in place");
    check(grown, 64, 20);
    let l4096 = Layout::from_size_align(4096, 16).unwrap();
    let used = arena.bytes_used();
    // SAFETY: as above.
    let shrunk = unsafe { arena.realloc(grown, l4096, 32) }.unwrap();
    assert_eq!(shrunk, top, "the top shrinks in place");
    assert_eq!(
        arena.bytes_used(),
        used - 4064,
        "shrinking the top gives bytes back"
    );
    check(shrunk, 32, 20);

    // Below the top: a shrink keeps the pointer, a grow copies.
    // SAFETY: as above.
    let low2 = unsafe { arena.realloc(low, l64, 16) }.unwrap();
    assert_eq!(low2, low);
    let l16 = Layout::from_size_align(16, 16).unwrap();
    // SAFETY: as above.
    let low3 = unsafe { arena.realloc(low2, l16, 1000) }.unwrap();
    assert_ne!(low3, low, "a non-top allocation must not grow in place");
    assert_eq!(low3.as_ptr() as usize % 16, 0);
    check(low3, 16, 10);
    check(shrunk, 32, 20); // the old top is untouched by the copy

    // The top grown beyond its block moves to a new block, contents preserved.
    let l1000 = Layout::from_size_align(1000, 16).unwrap();
    fill(low3, 1000, 30);
    let blocks = arena.block_count();
    // SAFETY: as above.
    let moved = unsafe { arena.realloc(low3, l1000, 90_000) }.unwrap();
    assert_ne!(moved, low3);
    assert!(arena.block_count() > blocks);
    check(moved, 1000, 30);
    // And in the new block (90 112 usable bytes) it is the top again: growing stays in
    // place while the block has room.
    let l90k = Layout::from_size_align(90_000, 16).unwrap();
    // SAFETY: as above.
    let again = unsafe { arena.realloc(moved, l90k, 90_100) }.unwrap();
    assert_eq!(again, moved);
    check(again, 1000, 30);
}

// ------------------------------------------------------------------ checkpoints

#[test]
fn rewind_across_blocks_keeps_and_reuses_them() {
    let pool = pool("rewind");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let keep = arena.alloc_slice_fill_with(100, |i| i as u32);
    let mark = arena.checkpoint();
    let used = arena.bytes_used();
    let layout = Layout::from_size_align(3000, 8).unwrap();
    let first: Vec<NonNull<u8>> = (0..40).map(|_| arena.alloc(layout)).collect();
    let blocks = arena.block_count();
    assert!(blocks >= 3, "expected several blocks, got {blocks}");
    let held = arena.bytes_held();
    let ops = pool.stats();
    // SAFETY: nothing allocated after `mark` is used again.
    unsafe { arena.rewind(mark) };
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(
        arena.block_count(),
        blocks,
        "rewind keeps the blocks cached"
    );
    assert_eq!(arena.bytes_held(), held);
    // The same program again lands on the same addresses, with no pool operation.
    let second: Vec<NonNull<u8>> = (0..40).map(|_| arena.alloc(layout)).collect();
    assert_eq!(first, second, "the cached blocks are reused in order");
    let after = pool.stats();
    assert_eq!(
        (after.allocations, after.frees),
        (ops.allocations, ops.frees),
        "reusing cached blocks must not touch the pool"
    );
    assert!(keep.iter().enumerate().all(|(i, &x)| x == i as u32));
    // Rewinding twice to the same checkpoint is fine; a checkpoint is Copy.
    // SAFETY: as above.
    unsafe { arena.rewind(mark) };
    // SAFETY: as above.
    unsafe { arena.rewind(mark) };
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(mark, arena.checkpoint());
}

#[test]
fn rewind_to_an_empty_arena_checkpoint() {
    let pool = pool("rewind-empty");
    let arena = MemoryArena::new(&pool);
    let start = arena.checkpoint();
    if cfg!(miri) {
        // The same layout in 1 000 closure calls, not 100 000.
        arena.alloc_slice(1_000, [1u8; 100]);
    } else {
        arena.alloc_slice(100_000, 1u8);
    }
    // SAFETY: nothing is used again.
    unsafe { arena.rewind(start) };
    assert_eq!(arena.bytes_used(), 0);
    assert!(arena.block_count() >= 1);
    let s = arena.alloc_slice(10, 2u8);
    assert_eq!(s, &[2; 10]);
}

#[test]
fn stale_checkpoints_panic() {
    let pool = pool("stale");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_val(1u64);
    let before_reset = arena.checkpoint();
    arena.alloc_val(2u64);
    arena.reset();
    arena.alloc_slice(100, 0u8);
    let used = arena.bytes_used();
    // SAFETY: the call panics before touching anything.
    let msg = panic_message(|| unsafe { arena.rewind(before_reset) });
    assert!(msg.contains("'stale'"), "{msg}");
    assert_eq!(arena.bytes_used(), used);

    // A checkpoint ahead of the current position (invalidated by an earlier rewind).
    let a = arena.checkpoint();
    arena.alloc_slice(100, 0u8);
    let ahead = arena.checkpoint();
    // SAFETY: nothing after `a` is used again.
    unsafe { arena.rewind(a) };
    // SAFETY: the call panics before touching anything.
    let msg = panic_message(|| unsafe { arena.rewind(ahead) });
    assert!(msg.contains("'stale'"), "{msg}");
    assert_eq!(arena.bytes_used(), used);
    // The arena is still fine.
    assert_eq!(arena.alloc_slice(3, 7u8), &[7, 7, 7]);
}

#[test]
fn foreign_checkpoints_panic() {
    let pool = pool("mine");
    let mine = MemoryArena::new(&pool);
    let theirs = MemoryArena::new(&pool);
    mine.alloc_val(1u32);
    theirs.alloc_val(2u32);
    let foreign = theirs.checkpoint();
    let used = mine.bytes_used();
    // SAFETY: the call panics before touching anything.
    let msg = panic_message(|| unsafe { mine.rewind(foreign) });
    assert!(msg.contains("'mine'"), "{msg}");
    assert_eq!(mine.bytes_used(), used);
    assert_eq!(theirs.bytes_used(), 4);
}

// ------------------------------------------------------------------ scopes

#[test]
fn scopes_free_what_they_allocated() {
    let pool = pool("scope");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    arena.alloc_val(5u64);
    let used = arena.bytes_used();
    let sum = arena.scope(|a| {
        let xs = a.alloc_slice_fill_with(10_000, |i| i as u64);
        xs.iter().sum::<u64>()
    });
    assert_eq!(sum, 10_000 * 9_999 / 2);
    assert_eq!(arena.bytes_used(), used);
    let blocks = arena.block_count();
    assert!(blocks > 1);
    {
        let scope = arena.scope_guard();
        let s = scope.alloc_str("temporary");
        assert_eq!(s, "temporary");
        if cfg!(miri) {
            // The same layout in 500 closure calls, not 50 000.
            scope.alloc_slice(500, [0u8; 100]);
        } else {
            scope.alloc_slice(50_000, 0u8);
        }
        assert!(scope.bytes_used() > used);
    }
    assert_eq!(arena.bytes_used(), used);
    assert_eq!(
        arena.block_count(),
        blocks,
        "blocks stay cached after a scope"
    );
}

#[test]
fn scopes_free_on_panic() {
    let pool = pool("scope-panic");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let keep = arena.alloc_slice_fill_with(64, |i| i as u8) as *const [u8];
    let used = arena.bytes_used();
    let r = catch_unwind(AssertUnwindSafe(|| {
        arena.scope(|a| {
            if cfg!(miri) {
                // The same layout in 800 closure calls, not 20 000.
                a.alloc_slice(800, [1u32; 25]);
            } else {
                a.alloc_slice(20_000, 1u32);
            }
            panic!("inside scope");
        })
    }));
    assert!(r.is_err());
    assert_eq!(arena.bytes_used(), used, "scope freed nothing on panic");
    let r = catch_unwind(AssertUnwindSafe(|| {
        let g = arena.scope_guard();
        if cfg!(miri) {
            g.alloc_slice(800, [1u32; 25]);
        } else {
            g.alloc_slice(20_000, 1u32);
        }
        panic!("inside guard");
    }));
    assert!(r.is_err());
    assert_eq!(arena.bytes_used(), used, "guard freed nothing on panic");
    // SAFETY: `keep` was allocated before both scopes, which only freed their own memory.
    let keep = unsafe { &*keep };
    assert!(keep.iter().enumerate().all(|(i, &x)| x == i as u8));
    assert_eq!(arena.alloc_slice(2, 3u8), &[3, 3]);
}

// ------------------------------------------------------------------ ArenaBox

struct Counted(Rc<Cell<usize>>, u64);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn arena_box_runs_destructors_exactly_once() {
    let pool = pool("box");
    let arena = MemoryArena::new(&pool);
    let drops = Rc::new(Cell::new(0));

    let used = arena.bytes_used();
    let b = arena.alloc_boxed(Counted(drops.clone(), 7));
    assert_eq!(b.1, 7);
    assert_eq!(drops.get(), 0);
    drop(b);
    assert_eq!(drops.get(), 1, "drop runs the destructor once");
    assert_eq!(
        arena.bytes_used(),
        used,
        "a dropped top box gives its bytes back"
    );

    let b = arena
        .try_alloc_boxed(Counted(drops.clone(), 8))
        .ok()
        .unwrap();
    let inner = ArenaBox::into_inner(b);
    assert_eq!(drops.get(), 1, "into_inner does not drop");
    assert_eq!(inner.1, 8);
    drop(inner);
    assert_eq!(drops.get(), 2);

    let b = arena.alloc_boxed(Counted(drops.clone(), 9));
    let leaked: &mut Counted = ArenaBox::leak(b);
    leaked.1 += 1;
    assert_eq!(leaked.1, 10);
    assert_eq!(drops.get(), 2, "leak never drops");
    let leaked_ptr: *mut Counted = leaked;

    // Boxes below the top: the destructor still runs once; the bytes stay until reset.
    let mut boxes: Vec<_> = (0..10)
        .map(|i| arena.alloc_boxed(Counted(drops.clone(), i)))
        .collect();
    let mut names = arena.alloc_boxed(vec![String::from("a")]);
    names.push("b".into());
    assert_eq!(names.len(), 2);
    for (i, b) in boxes.iter_mut().enumerate() {
        b.1 += i as u64;
    }
    boxes.remove(3);
    assert_eq!(drops.get(), 3);
    drop(boxes);
    assert_eq!(drops.get(), 12);
    drop(names);
    assert_eq!(drops.get(), 12);
    let dbg = format!("{:?}", arena.alloc_boxed(vec![1, 2]));
    assert_eq!(dbg, "[1, 2]");
    // Clean up what `leak` leaked on purpose (its `Rc`), so leak checkers (Miri, valgrind)
    // stay quiet.
    // SAFETY: the leaked value is initialised and not used again.
    unsafe { std::ptr::drop_in_place(leaked_ptr) };
    assert_eq!(drops.get(), 13);
}

#[test]
fn arena_box_of_a_failed_allocation_hands_the_value_back() {
    with_tiny_pool(|pool| {
        let arena = MemoryArena::new(pool);
        let drops = Rc::new(Cell::new(0));
        let payload = [Counted(drops.clone(), 1), Counted(drops.clone(), 2)];
        let big = (payload, [0u8; BIG]);
        let (back, e) = match arena.try_alloc_boxed(big) {
            Err(x) => x,
            Ok(_) => panic!("should not fit"),
        };
        assert_exhausted(e);
        assert_eq!(drops.get(), 0);
        drop(back);
        assert_eq!(drops.get(), 2);
    });
}

// ------------------------------------------------------------------ tags and stats

#[test]
fn tags_are_counted_and_cleared_by_reset() {
    let pool = pool("tags");
    let mut arena = MemoryArena::new(&pool);
    arena.alloc_tagged(Layout::new::<[u8; 48]>(), "mesh");
    arena.alloc_tagged(Layout::new::<[u8; 16]>(), "mesh");
    arena.try_alloc_tagged(Layout::new::<u64>(), "ai").unwrap();
    arena.alloc_val(0u64); // untagged
    assert_eq!(arena.tag_bytes("mesh"), 64);
    assert_eq!(arena.tag_bytes("ai"), 8);
    assert_eq!(arena.tag_bytes("none"), 0);
    assert_eq!(arena.stats().tags, vec![("mesh", 64), ("ai", 8)]);
    let text = arena.stats().to_string();
    assert!(text.contains("mesh") && text.contains("64 B"), "{text}");
    arena.reset();
    assert_eq!(arena.tag_bytes("mesh"), 0);
    assert!(arena.stats().tags.is_empty());
}

#[test]
fn stats_are_consistent_and_readable() {
    let pool = pool("stats");
    let mut arena = MemoryArena::new(&pool);
    let s = arena.stats();
    assert_eq!(
        (s.pool, s.bytes_used, s.block_count, s.bytes_held),
        ("stats", 0, 0, 0)
    );
    arena.alloc_val(0u8);
    arena.alloc_val(0u32); // 3 bytes of padding first
    assert_eq!(arena.bytes_used(), 8);
    // A second block.
    if cfg!(miri) {
        // The same layout in 3 000 closure calls, not 300 000.
        arena.alloc_slice(3_000, [1u8; 100]);
    } else {
        arena.alloc_slice(300_000, 1u8);
    }
    let s = arena.stats();
    assert_eq!(s.bytes_used, arena.bytes_used());
    assert_eq!(s.block_count, 2);
    assert_eq!(s.bytes_held, pool.stats().in_use);
    assert!(s.high_watermark >= s.bytes_used);
    let text = s.to_string();
    assert!(text.contains("arena on 'stats'"), "{text}");
    assert!(text.contains("2 blocks"), "{text}");
    assert!(text.contains("KiB"), "{text}");
    let peak = arena.high_watermark();
    arena.reset();
    assert_eq!(
        arena.high_watermark(),
        peak,
        "the high watermark survives reset"
    );
    assert_eq!(arena.generation(), 1);
    let text = arena.stats().to_string();
    assert!(text.contains("1 block,"), "{text}");
    assert!(text.contains("0 B used"), "{text}");
    assert!(format!("{arena:?}").contains("MemoryArena"));
}

#[test]
fn trim_spares_gives_cached_blocks_back() {
    let pool = pool("trim");
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    arena.alloc_val(1u8);
    arena.scope(|a| {
        for _ in 0..20 {
            a.alloc_slice(3000, 0u8);
        }
    });
    assert!(arena.block_count() > 1);
    arena.trim_spares();
    assert_eq!(arena.block_count(), 1);
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    assert_eq!(pool.stats().blocks_in_use, 1);
}

// ------------------------------------------------------------------ heap fallback

#[test]
fn heap_fallback_when_the_pool_is_exhausted() {
    let pool = MemoryPool::new("fallback", 256 * KIB).unwrap();
    let config = ArenaConfig::default()
        .first_block(16 * KIB)
        .heap_fallback(true);
    let mut arena = MemoryArena::with_config(&pool, config);
    let first = arena.alloc_val(1u64);
    assert_eq!(*first, 1);
    let held_pool_only = arena.bytes_held();
    // Take everything else in the pool.
    let hog = pool
        .allocate_block(pool.stats().largest_free)
        .expect("the rest of the pool");
    let before = pool.stats();
    assert_eq!(before.largest_free, 0);

    // 200 000 bytes (20 000 under Miri): less than the pool's capacity, more than it has
    // free.
    let n = if cfg!(miri) { 5_000 } else { 50_000 };
    let big = arena.alloc_slice_fill_with(n, |i| i as u32);
    big[n - 1] += 1;
    assert_eq!(big[n - 1], n as u32);
    assert!(
        big.iter()
            .take(n - 1)
            .enumerate()
            .all(|(i, &x)| x == i as u32)
    );
    let boxed = arena.alloc_boxed(String::from("on the heap"));
    assert_eq!(&*boxed, "on the heap");
    drop(boxed);
    assert!(arena.block_count() >= 2);
    assert!(arena.bytes_held() >= held_pool_only + 4 * n);
    let after = pool.stats();
    assert_eq!(
        (after.in_use, after.allocations, after.frees),
        (before.in_use, before.allocations, before.frees),
        "heap blocks do not come from the pool"
    );

    arena.reset();
    assert_eq!(
        arena.bytes_held(),
        held_pool_only,
        "reset frees the heap block"
    );
    assert_eq!(arena.block_count(), 1);
    assert_eq!(pool.stats().in_use, before.in_use);
    assert_eq!(arena.alloc_slice(10, 4u8), &[4; 10]);

    // An arena whose only block came from the heap holds nothing after reset.
    let mut heap_only = MemoryArena::with_config(&pool, config);
    assert_eq!(heap_only.alloc_slice(1000, 5u8), &[5; 1000]);
    assert_eq!(heap_only.block_count(), 1);
    heap_only.reset();
    assert_eq!((heap_only.block_count(), heap_only.bytes_held()), (0, 0));
    assert_eq!(heap_only.alloc_slice(1000, 6u8), &[6; 1000]);
    drop(heap_only);

    // Without fallback, the same request fails.
    let strict = MemoryArena::with_config(&pool, ArenaConfig::default());
    assert!(matches!(
        strict.try_alloc_slice(50_000, 0u32),
        Err(AllocError::Pool(PoolError::Exhausted { .. }))
    ));
    drop(strict);
    drop(arena);
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(hog) };
    assert_drained(&pool);
}

// ------------------------------------------------------------------ Send

fn assert_send<T: Send>() {}

#[test]
fn arenas_move_between_threads() {
    assert_send::<MemoryArena<'static>>();
    let n = if cfg!(miri) { 5_000 } else { 100_000 };
    let pool = pool("send");
    let arena = MemoryArena::new(&pool);
    arena.alloc_val(1u8);
    let mut arena = std::thread::scope(|s| {
        s.spawn(move || {
            let xs = arena.alloc_slice_fill_with(n, |i| i as u32);
            assert!(xs.iter().enumerate().all(|(i, &x)| x == i as u32));
            arena
        })
        .join()
        .unwrap()
    });
    assert!(arena.bytes_used() >= 4 * n);
    arena.reset();
    assert_eq!(arena.bytes_used(), 0);

    // With a 'static pool the arena goes to a plain spawned thread and comes back.
    let global = MemoryArena::new(nebula_memory::game_pool());
    let global = std::thread::spawn(move || {
        let s = global.alloc_str("made elsewhere");
        assert_eq!(s, "made elsewhere");
        global
    })
    .join()
    .unwrap();
    assert_eq!(global.bytes_used(), 14);
    drop(global);
    drop(arena);
    assert_drained(&pool);
}

// ------------------------------------------------------------------ misc

struct Failing;

impl fmt::Display for Failing {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        Err(fmt::Error)
    }
}

#[test]
fn a_failing_display_is_an_error_not_a_panic() {
    let pool = pool("fmt");
    let arena = MemoryArena::new(&pool);
    let e = arena
        .try_alloc_fmt(format_args!("abc{}", Failing))
        .unwrap_err();
    assert!(matches!(e, AllocError::Layout { pool: "fmt" }), "{e:?}");
    assert_eq!(arena.alloc_fmt(format_args!("{}", 12)), "12");
}

#[test]
fn drop_returns_every_block() {
    let pool = pool("drop");
    {
        let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
        for i in 0..100 {
            if cfg!(miri) {
                // The same layout in `i` closure calls, not `i * 100`.
                arena.alloc_slice(i, [0u8; 100]);
            } else {
                arena.alloc_slice(i * 100, 0u8);
            }
        }
        assert!(pool.stats().blocks_in_use > 1);
    }
    assert_drained(&pool);
}

// ------------------------------------------------------------------ growing below the top

/// The buffers behind `alloc_slice_from_iter` and `alloc_fmt` grow at the top; when the
/// iterator or a `Display` impl allocates from the same arena meanwhile, the buffer is no
/// longer the top and must be copied, never grown over the newer allocations.
#[test]
fn growing_buffers_survive_allocations_made_meanwhile() {
    // Under Miri, 800 items and 300 writes (still several blocks).
    let (items, writes) = if cfg!(miri) {
        (800u32, 300u32)
    } else {
        (5000, 2000)
    };
    let pool = pool("interleave");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    let refs = arena.alloc_slice_from_iter((0..items).map(|i| {
        // Each item is itself an arena allocation made while the slice grows.
        let v: &u32 = arena.alloc_val(i * 7);
        v
    }));
    assert_eq!(refs.len(), items as usize);
    assert!(refs.iter().enumerate().all(|(i, &&v)| v == i as u32 * 7));

    struct Noisy<'a, 'p>(&'a MemoryArena<'p>, u32);
    impl fmt::Display for Noisy<'_, '_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for i in 0..self.1 {
                // Allocates between the writes, so the text buffer is not the top.
                let tmp = self.0.alloc_slice(37, i as u8);
                write!(f, "{}:{};", i, tmp[36])?;
            }
            Ok(())
        }
    }
    let text = arena.alloc_fmt(format_args!("<{}>", Noisy(&arena, writes)));
    let want: String = std::iter::once("<".to_string())
        .chain((0..writes).map(|i| format!("{i}:{};", i as u8)))
        .chain(std::iter::once(">".to_string()))
        .collect();
    assert_eq!(&*text, want.as_str());
    assert!(refs.iter().enumerate().all(|(i, &&v)| v == i as u32 * 7));
    assert!(arena.block_count() > 2);
}

#[repr(align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Aligned64(u32);

#[test]
fn collected_slices_of_unusual_types() {
    let pool = pool("collect");
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(4 * KIB));
    arena.alloc_val(1u8); // the buffer does not start 64-aligned by accident
    let xs = arena.alloc_slice_from_iter((0..1000).filter(|_| true).map(Aligned64));
    assert_eq!(xs.as_ptr() as usize % 64, 0);
    assert!(xs.iter().enumerate().all(|(i, x)| x.0 == i as u32));
    let count = if cfg!(miri) { 1_000 } else { 100_000 };
    let units = arena.alloc_slice_from_iter(std::iter::repeat_n((), count));
    assert_eq!(units.len(), count);
    let copies = arena.alloc_slice_copy(&[Aligned64(7); 3]);
    assert_eq!(copies.as_ptr() as usize % 64, 0);
    assert_eq!(copies[2], Aligned64(7));
}
