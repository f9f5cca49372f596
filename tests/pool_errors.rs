//! Every bad input to a `MemoryPool` has a defined outcome: an error naming the pool, or
//! (for a broken `free_block` contract the pool can detect) a panic naming the pool, after
//! which the pool is still fully usable.
//!
//! The `free_block` misuse tests break that function's safety contract on purpose, but only
//! in the ways its `# Panics` section promises to catch: the pointer is either rejected by
//! address alone, or points at a 16-aligned header slot inside the pool's own region,
//! which stays mapped, so reading it is defined.

use std::ptr::NonNull;

use nebula_memory::{MemoryBlock, MemoryPool, PoolError, PoolStats};

mod common;
use common::{HEADER, assert_drained, panic_message};

/// The pool works and is consistent: stats add up, with `live` given back it is one free
/// range again, and a block can be allocated, written and freed.
fn assert_usable(pool: &MemoryPool, live: &[NonNull<MemoryBlock>]) {
    let s = pool.stats();
    assert_eq!(s.in_use + s.free, s.capacity);
    assert_eq!(s.blocks_in_use, live.len());
    for &b in live {
        // SAFETY: each is a live block of `pool`, freed once here.
        unsafe { pool.free_block(b) };
    }
    assert_drained(pool);
    let b = pool.allocate_block(1000).unwrap();
    // SAFETY: a live block of `pool` with at least 1000 usable bytes.
    unsafe { MemoryBlock::data_of(b).as_ptr().write_bytes(0x5A, 1000) };
    // SAFETY: from `pool`, not used afterwards.
    unsafe { pool.free_block(b) };
    assert_eq!(pool.stats().free_ranges, 1);
}

/// The stats a refusal must not change (everything but `exhaustions`).
fn unchanged(a: PoolStats, b: PoolStats) -> bool {
    (
        a.in_use,
        a.free,
        a.largest_free,
        a.blocks_in_use,
        a.high_watermark,
        a.free_ranges,
    ) == (
        b.in_use,
        b.free,
        b.largest_free,
        b.blocks_in_use,
        b.high_watermark,
        b.free_ranges,
    ) && (a.allocations, a.frees) == (b.allocations, b.frees)
}

/// The bytes of the header that ends a segment, in a pool that grows by segments (as
/// `MemoryPool::new` makes on the web); none in a reserved region.
fn sentinel(pool: &MemoryPool) -> usize {
    if pool.grows_by_segments() { HEADER } else { 0 }
}

#[test]
fn zero_size_is_refused() {
    let pool = MemoryPool::new("zero", 1 << 20).unwrap();
    let before = pool.stats();
    let e = pool.allocate_block(0).unwrap_err();
    assert_eq!(e, PoolError::ZeroSize { pool: "zero" });
    assert!(e.to_string().contains("'zero'"), "{e}");
    let after = pool.stats();
    assert!(unchanged(before, after));
    assert_eq!(after.exhaustions, 0, "ZeroSize is not an exhaustion");
    assert_usable(&pool, &[]);
}

#[test]
fn impossible_sizes_are_too_large() {
    let pool = MemoryPool::new("big", 1 << 20).unwrap();
    let capacity = pool.stats().capacity;
    // A pool that grows by segments (the web) keeps a header at a segment's end.
    let max_usable = capacity - HEADER - sentinel(&pool);
    let before = pool.stats();
    for n in [
        usize::MAX,
        usize::MAX - 15,
        usize::MAX - 16,
        isize::MAX as usize,
        capacity + 1,
        capacity,
        max_usable + 1,
    ] {
        let e = pool.allocate_block(n).unwrap_err();
        assert_eq!(
            e,
            PoolError::TooLarge {
                pool: "big",
                requested: n,
                max_usable
            },
            "n = {n}"
        );
        assert!(e.to_string().contains("'big'"), "{e}");
    }
    let after = pool.stats();
    assert!(unchanged(before, after));
    assert_eq!(after.exhaustions, 0, "TooLarge is not an exhaustion");
    // The largest possible block is granted by an empty pool: the whole region (a
    // segment's whole but its end header).
    let all = pool.allocate_block(max_usable).unwrap();
    // SAFETY: a live block of `pool`.
    let total = unsafe { all.as_ref() }.total_size();
    assert_eq!(total, capacity - sentinel(&pool));
    assert_eq!(pool.stats().largest_free, 0);
    // SAFETY: from `pool`, not used afterwards.
    unsafe { pool.free_block(all) };
    assert_usable(&pool, &[]);
}

#[test]
fn zero_capacity_is_invalid() {
    let e = MemoryPool::new("empty", 0).unwrap_err();
    assert_eq!(
        e,
        PoolError::InvalidCapacity {
            pool: "empty",
            capacity: 0
        }
    );
    assert!(e.to_string().contains("'empty'"), "{e}");
}

/// Where a pool reserves its capacity up front. (On the web a pool takes segments as it
/// needs them, so its capacity is a cap and any capacity is accepted: see
/// tests/segmented_pool.rs.)
#[cfg(not(target_family = "wasm"))]
#[test]
fn unreservable_capacities_fail_without_panicking() {
    let capacities = [
        usize::MAX,
        usize::MAX - 4095,
        isize::MAX as usize,
        isize::MAX as usize + 1,
        1 << 62,
    ];
    // Under Miri the region comes from `std::alloc`, and Miri stops with "resource
    // exhaustion" on a 2^62-byte request instead of returning null: only the sizes refused
    // before any allocation (rounding overflow, beyond `isize::MAX`) are tried there.
    let capacities = if cfg!(miri) {
        &capacities[..4]
    } else {
        &capacities[..]
    };
    for &capacity in capacities {
        match MemoryPool::new("huge", capacity) {
            Err(
                e @ PoolError::ReserveFailed {
                    pool: "huge",
                    capacity: c,
                    ..
                },
            ) => {
                assert_eq!(c, capacity);
                assert!(e.to_string().contains("'huge'"), "{e}");
            }
            other => panic!("capacity {capacity:#x}: {other:?}"),
        }
    }
}

#[test]
fn tiny_capacity_is_rounded_up_to_a_page() {
    let pool = MemoryPool::new("tiny", 1).unwrap();
    let s = pool.stats();
    assert!(s.capacity >= 4096 && s.capacity.is_power_of_two(), "{s:?}");
    let b = pool.allocate_block(1).unwrap();
    // SAFETY: a live block of `pool`.
    assert_eq!(unsafe { b.as_ref() }.capacity(), 16);
    assert_usable(&pool, &[b]);
}

#[test]
fn exhaustion_then_recovery() {
    const N: usize = 60 << 10;
    let pool = MemoryPool::new("fill", 1 << 20).unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match pool.allocate_block(N) {
            Ok(b) => blocks.push(b),
            Err(e) => break e,
        }
    };
    // 1 MiB holds 17 blocks of 60 KiB + 32 B.
    assert_eq!(blocks.len(), 17);
    let s = pool.stats();
    let PoolError::Exhausted {
        pool: name,
        requested,
        free,
        largest_free,
    } = err.clone()
    else {
        panic!("expected Exhausted, got {err:?}");
    };
    assert_eq!((name, requested), ("fill", N));
    assert_eq!(free, s.free);
    assert_eq!(free, s.capacity - 17 * (N + HEADER));
    assert_eq!(largest_free, s.largest_free);
    assert_eq!(
        largest_free,
        free - HEADER - sentinel(&pool),
        "the rest is one free range"
    );
    assert!(largest_free < N);
    assert_eq!(s.exhaustions, 1);
    let msg = err.to_string();
    assert!(
        msg.contains("'fill'") && msg.contains(&N.to_string()),
        "{msg}"
    );

    // Every further refusal is counted.
    assert!(matches!(
        pool.allocate_block(N),
        Err(PoolError::Exhausted { .. })
    ));
    assert_eq!(pool.stats().exhaustions, 2);
    // What does fit is still granted.
    let rest = pool.allocate_block(largest_free).unwrap();
    assert_eq!(pool.stats().largest_free, 0);
    assert!(matches!(
        pool.allocate_block(1),
        Err(PoolError::Exhausted {
            requested: 1,
            largest_free: 0,
            ..
        })
    ));
    assert_eq!(pool.stats().exhaustions, 3);

    // Free one block in the middle: the same request fits again, in its place.
    let hole = blocks.remove(8);
    // SAFETY: from `pool`, not used afterwards.
    unsafe { pool.free_block(hole) };
    let again = pool.allocate_block(N).unwrap();
    assert_eq!(again, hole);
    blocks.push(again);
    blocks.push(rest);
    assert_eq!(pool.stats().exhaustions, 3);
    assert_usable(&pool, &blocks);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn double_free_panics_and_the_pool_survives() {
    let pool = MemoryPool::new("double", 1 << 20).unwrap();
    let a = pool.allocate_block(100).unwrap();
    let b = pool.allocate_block(100).unwrap();
    // SAFETY: from `pool`, freed once.
    unsafe { pool.free_block(b) };
    let before = pool.stats();
    // SAFETY: deliberately broken contract; `b` was freed; its header slot is inside the
    // region and now heads a free range, which the pool recognises.
    let msg = panic_message(|| unsafe { pool.free_block(b) });
    assert!(
        msg.contains("'double'") && msg.contains("double free"),
        "{msg}"
    );
    let after = pool.stats();
    assert!(unchanged(before, after), "{before:?} vs {after:?}");
    assert_usable(&pool, &[a]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn double_free_of_a_merged_block_panics_and_the_pool_survives() {
    // `b` is merged into the free range before it, so its header is no longer a header.
    let pool = MemoryPool::new("merged", 1 << 20).unwrap();
    let a = pool.allocate_block(100).unwrap();
    let b = pool.allocate_block(100).unwrap();
    let c = pool.allocate_block(100).unwrap();
    // SAFETY: from `pool`, each freed once.
    unsafe { pool.free_block(a) };
    // SAFETY: as above.
    unsafe { pool.free_block(b) };
    let before = pool.stats();
    assert_eq!(before.free_ranges, 2);
    // SAFETY: deliberately broken contract; `b`'s header slot is inside the region.
    let msg = panic_message(|| unsafe { pool.free_block(b) });
    assert!(
        msg.contains("'merged'") && msg.contains("free_block"),
        "{msg}"
    );
    assert!(unchanged(before, pool.stats()));
    assert_usable(&pool, &[c]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn block_of_another_pool_panics_naming_the_pool() {
    let mine = MemoryPool::new("mine", 1 << 20).unwrap();
    let other = MemoryPool::new("other", 1 << 20).unwrap();
    let kept = mine.allocate_block(64).unwrap();
    let foreign = other.allocate_block(64).unwrap();
    assert!(!mine.contains(foreign.as_ptr().cast()));
    let before = mine.stats();
    // SAFETY: deliberately broken contract; rejected by address, never dereferenced.
    let msg = panic_message(|| unsafe { mine.free_block(foreign) });
    assert!(msg.contains("'mine'") && msg.contains("foreign"), "{msg}");
    assert!(unchanged(before, mine.stats()));
    // The block is still fine in its own pool.
    assert_usable(&other, &[foreign]);
    assert_usable(&mine, &[kept]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn pointers_outside_the_region_panic() {
    let pool = MemoryPool::new("bounds", 1 << 20).unwrap();
    let a = pool.allocate_block(64).unwrap();
    let capacity = pool.stats().capacity;
    let base = a.as_ptr() as usize; // the first block of a fresh pool starts the region
    assert!(
        pool.contains(a.as_ptr().cast()) && !pool.contains(std::ptr::without_provenance(base - 1))
    );
    let local = std::mem::MaybeUninit::<MemoryBlock>::uninit();
    for p in [
        NonNull::<MemoryBlock>::dangling().as_ptr(),
        a.as_ptr().wrapping_byte_sub(4096),
        a.as_ptr().wrapping_byte_add(capacity),
        a.as_ptr().wrapping_byte_add(capacity - 16),
        local.as_ptr().cast_mut(),
    ] {
        let p = NonNull::new(p).unwrap();
        // SAFETY: deliberately broken contract; rejected by address, never dereferenced.
        let msg = panic_message(|| unsafe { pool.free_block(p) });
        assert!(
            msg.contains("'bounds'") && msg.contains("foreign"),
            "{p:p}: {msg}"
        );
    }
    assert_usable(&pool, &[a]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn misaligned_and_non_block_pointers_inside_the_region_panic() {
    let pool = MemoryPool::new("inner", 1 << 20).unwrap();
    let a = pool.allocate_block(4096).unwrap();
    let data = MemoryBlock::data_of(a).as_ptr();
    // SAFETY: `a` has 4096 usable bytes, ours.
    unsafe { data.write_bytes(0xAB, 4096) };
    let before = pool.stats();

    for off in [1, 8, 4] {
        let p = NonNull::new(a.as_ptr().wrapping_byte_add(off)).unwrap();
        // SAFETY: deliberately broken contract; misaligned, rejected before any read.
        let msg = panic_message(|| unsafe { pool.free_block(p) });
        assert!(
            msg.contains("'inner'") && msg.contains("foreign"),
            "+{off}: {msg}"
        );
    }
    // 16-aligned slots inside the region that are not block headers: inside a live block's
    // data (bytes 0xAB) and in the middle of the free range.
    for p in [
        data.wrapping_add(64),
        a.as_ptr().cast::<u8>().wrapping_add(512 << 10),
    ] {
        let p = NonNull::new(p.cast::<MemoryBlock>()).unwrap();
        // SAFETY: deliberately broken contract; a 16-aligned slot inside the mapped region.
        let msg = panic_message(|| unsafe { pool.free_block(p) });
        assert!(
            msg.contains("'inner'") && msg.contains("no valid block header"),
            "{msg}"
        );
    }
    assert!(unchanged(before, pool.stats()));
    // SAFETY: reading our own live block's data.
    let bytes = unsafe { std::slice::from_raw_parts(data, 4096) };
    assert!(
        bytes.iter().all(|&x| x == 0xAB),
        "a rejected free touched the block"
    );
    assert_usable(&pool, &[a]);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn overwritten_header_panics() {
    let pool = MemoryPool::new("header", 1 << 20).unwrap();
    let a = pool.allocate_block(256).unwrap();
    let b = pool.allocate_block(256).unwrap();
    let before = pool.stats();

    // The magic (offset 0, u32).
    let magic = a.as_ptr().cast::<u32>();
    // SAFETY: the header of our own live block; we put the original back below.
    let saved = unsafe { magic.read() };
    // SAFETY: as above (simulates a buffer underrun from the block before).
    unsafe { magic.write(0xDEAD_BEEF) };
    // SAFETY: deliberately broken contract; the pool must notice the bad magic.
    let msg = panic_message(|| unsafe { pool.free_block(a) });
    assert!(
        msg.contains("'header'") && msg.contains("no valid block header"),
        "{msg}"
    );
    // SAFETY: restore the header.
    unsafe { magic.write(saved) };

    // The total size (offset 8, usize): too large, too small, misaligned.
    let size = a.as_ptr().cast::<usize>().wrapping_add(1);
    // SAFETY: as above.
    let saved = unsafe { size.read() };
    for bad in [before.capacity * 2, 16, saved + 8, usize::MAX] {
        // SAFETY: as above.
        unsafe { size.write(bad) };
        // SAFETY: deliberately broken contract; the pool must notice the bad size.
        let msg = panic_message(|| unsafe { pool.free_block(a) });
        assert!(
            msg.contains("'header'") && msg.contains("corrupted size"),
            "{bad}: {msg}"
        );
    }
    // SAFETY: restore the header.
    unsafe { size.write(saved) };

    assert!(unchanged(before, pool.stats()));
    assert_usable(&pool, &[a, b]);
}

#[test]
fn every_error_names_its_pool() {
    let errors = [
        PoolError::Exhausted {
            pool: "p1",
            requested: 10,
            free: 5,
            largest_free: 4,
        },
        PoolError::ZeroSize { pool: "p1" },
        PoolError::TooLarge {
            pool: "p1",
            requested: 10,
            max_usable: 4,
        },
        PoolError::InvalidCapacity {
            pool: "p1",
            capacity: 0,
        },
        PoolError::InvalidSegment {
            pool: "p1",
            segment: 0,
        },
        PoolError::ReserveFailed {
            pool: "p1",
            capacity: 10,
            os_code: None,
        },
        PoolError::ReserveFailed {
            pool: "p1",
            capacity: 10,
            os_code: Some(12),
        },
        PoolError::CommitFailed {
            pool: "p1",
            requested: 10,
        },
        PoolError::AlreadyCreated { pool: "p1" },
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(msg.contains("'p1'"), "{e:?}: {msg}");
        let dynamic: &dyn std::error::Error = &e;
        assert!(dynamic.source().is_none());
    }
    let msg = PoolError::Exhausted {
        pool: "p1",
        requested: 10,
        free: 5,
        largest_free: 4,
    }
    .to_string();
    assert!(
        msg.contains("10") && msg.contains('5') && msg.contains('4'),
        "{msg}"
    );
}

// Reads freed bytes on purpose, which AddressSanitizer (rightly) reports.
#[cfg(all(debug_assertions, not(nebula_asan)))]
#[test]
fn debug_builds_poison_handed_out_and_given_back_bytes() {
    let pool = MemoryPool::new("poison", 1 << 20).unwrap();
    // Keep freed pages resident so they can be inspected.
    pool.set_retain_limit(usize::MAX);
    let a = pool.allocate_block(10_000).unwrap();
    let guard = pool.allocate_block(16).unwrap();
    // Take the rest, so that `a`'s range is the only free one once `a` is freed.
    let rest = pool.allocate_block(pool.stats().largest_free).unwrap();
    // SAFETY: a live block of `pool`.
    let cap = unsafe { a.as_ref() }.capacity();
    let data = MemoryBlock::data_of(a).as_ptr();
    // SAFETY: the usable bytes of our live block.
    let bytes = unsafe { std::slice::from_raw_parts(data, cap) };
    assert!(
        bytes.iter().all(|&x| x == 0xCD),
        "fresh block not filled with 0xCD"
    );
    // SAFETY: as above.
    unsafe { data.write_bytes(0x11, cap) };
    // SAFETY: from `pool`, not used afterwards (except for the inspection below).
    unsafe { pool.free_block(a) };
    // The freed bytes stay mapped inside the region and nobody else uses them (the pool
    // only writes the free range's header before them and its footer, the last 8 bytes,
    // since `guard` keeps the range from merging with what follows).
    // SAFETY: reading mapped, resident memory of the region that no one writes meanwhile.
    let stale = unsafe { std::slice::from_raw_parts(data, cap - 8) };
    assert!(
        stale.iter().all(|&x| x == 0xDD),
        "freed block not filled with 0xDD"
    );
    // A reused block is filled with 0xCD again, not left with 0xDD.
    let b = pool.allocate_block(10_000).unwrap();
    assert_eq!(b, a, "the only free range");
    // SAFETY: the usable bytes of our live block.
    let bytes = unsafe { std::slice::from_raw_parts(MemoryBlock::data_of(b).as_ptr(), cap) };
    assert!(bytes.iter().all(|&x| x == 0xCD));
    assert_usable(&pool, &[b, guard, rest]);
}
