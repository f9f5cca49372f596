//! Failures of a `MemoryArena`, each with a defined outcome after which the arena keeps
//! working: an exhausted pool (panic messages naming the pool and the size, `AllocError`s
//! from every `try_` form, the value handed back by a failed `try_alloc_boxed`, recovery
//! once space is freed elsewhere), layout overflow (huge counts, `realloc` to `usize::MAX`)
//! and a failing `Display` in `alloc_fmt`.
//!
//! Each test uses a private pool, so pool counters are not disturbed by tests running in
//! parallel.

use nebula_memory::Arena;
use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::rc::Rc;

use nebula_memory::{AllocError, MemoryArena, MemoryPool, PoolError};

mod common;
use common::{Counted, KIB, assert_drained, panic_message, pool};

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

// ------------------------------------------------------------------ exhausted pool

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
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
                let _ = arena.alloc_labelled(layout, "t");
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
        assert_exhausted(arena.try_alloc_labelled(layout, "t").unwrap_err());
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

// ------------------------------------------------------------------ layout errors

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
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
        .try_alloc(Layout::from_size_align(1 << (usize::BITS - 4), 4096).unwrap())
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

// ------------------------------------------------------------------ configs and pools

/// A `first_block` set with the builder that the pool can never serve is refused where the
/// config meets the pool, naming the field and both sizes (it was once quietly replaced by
/// a block of the request's size: the user believed memory was reserved that was not).
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn a_first_block_the_pool_can_never_serve_is_refused() {
    let pool = MemoryPool::new("small_for_config", 64 * KIB).unwrap();
    let most = 64 * KIB - 32;
    for asked in [1 << 30, usize::MAX, most + 1] {
        let config = nebula_memory::ArenaConfig::default().first_block(asked);
        for msg in [
            panic_message(|| drop(MemoryArena::with_config(&pool, config))),
            panic_message(|| drop(nebula_memory::SharedArena::with_config(&pool, config))),
        ] {
            assert!(msg.contains("ArenaConfig::first_block"), "{msg}");
            assert!(msg.contains(&asked.to_string()), "{msg}");
            assert!(msg.contains(&most.to_string()), "{msg}");
            assert!(msg.contains("small_for_config"), "{msg}");
        }
    }
    // The largest possible block is fine, and so are the defaults (clamped to the pool).
    let exact = MemoryArena::with_config(
        &pool,
        nebula_memory::ArenaConfig::default().first_block(most),
    );
    exact.alloc_val(1u8);
    assert_eq!(exact.bytes_held(), 64 * KIB);
    drop(exact);
    let defaults = MemoryArena::new(&pool); // first block 64 KiB > what this pool holds
    assert_eq!(defaults.alloc_slice(1000, 7u8).len(), 1000);
    assert!(defaults.bytes_held() <= 64 * KIB);
}

/// A refusal's message names the setting that would have avoided it.
#[test]
fn messages_name_the_setting_to_change() {
    use nebula_memory::ledger::{self, Budget};
    let pool = common::pool_of("settings", 256 * KIB);
    let arena = MemoryArena::new(&pool);
    let exhausted = arena
        .try_alloc_slice_copy(&[0u8; 200 * KIB])
        .and_then(|_| arena.try_alloc_slice_copy(&[0u8; 200 * KIB]));
    let text = exhausted.unwrap_err().to_string();
    assert!(
        text.contains("configure_global_pools") && text.contains("MemoryPlugin::pools"),
        "{text}"
    );
    let too_large = pool.allocate_block(1 << 30).unwrap_err().to_string();
    assert!(too_large.contains("configure_global_pools"), "{too_large}");
    ledger::set_budget("errors/settings", Budget::Limit(1024));
    let tagged = MemoryArena::with_config(
        &pool,
        nebula_memory::ArenaConfig::default().tag("errors/settings"),
    );
    let over = tagged
        .try_alloc_slice_copy(&[0u8; 4096])
        .unwrap_err()
        .to_string();
    assert!(
        over.contains("ledger::set_budget") && over.contains("MemoryPlugin::tag_budgets"),
        "{over}"
    );
}
