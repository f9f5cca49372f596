//! Segmented pools (`MemoryPool::segmented`, what `MemoryPool::new` makes on the web): the
//! memory taken follows the use, a block never crosses a segment, wholly free segments go
//! back at a purge pass, and a recurring spike reuses what the last one took.
//!
//! A model-based property test runs random programs of acquire / release / probe / trim
//! against a model of the live blocks, checking after every step: blocks aligned, inside
//! the pool, disjoint, contents intact; `in_use + free == capacity`; `reserved` never above
//! the capacity; refusals only when `largest_free` is short; and after releasing everything
//! and a purge pass, nothing held.

use std::collections::BTreeMap;
use std::ptr::NonNull;

use nebula_memory::{MemoryBlock, MemoryPool, PoolError};
use proptest::prelude::*;

mod common;
use common::{HEADER, KIB, MIB, panic_message, stamp, verify};

fn block_bytes(block: NonNull<MemoryBlock>) -> (usize, usize) {
    // SAFETY: the caller's live block.
    let total = unsafe { block.as_ref() }.total_size();
    (block.as_ptr().addr(), total)
}

#[test]
fn nothing_is_taken_until_a_block_is_asked_for_and_then_one_segment() {
    let pool = MemoryPool::segmented("seg-first", 64 * MIB, MIB).unwrap();
    let s = pool.stats();
    assert_eq!((s.capacity, s.reserved, s.in_use), (64 * MIB, 0, 0));
    assert_eq!(
        s.largest_free,
        64 * MIB - 2 * HEADER,
        "a segment of the whole capacity"
    );
    let a = pool.allocate_block(4 * KIB).unwrap();
    let b = pool.allocate_block(100 * KIB).unwrap();
    assert_eq!(pool.stats().reserved, MIB, "both fit in the first segment");
    assert!(pool.contains(a.as_ptr().cast()) && pool.contains(b.as_ptr().cast()));
    // SAFETY: from this pool, freed once, not used afterwards.
    unsafe {
        pool.free_block(a);
        pool.free_block(b);
    }
    assert_eq!(pool.stats().in_use, 0);
}

#[test]
fn a_block_larger_than_the_step_gets_a_segment_of_its_size() {
    let pool = MemoryPool::segmented("seg-large", 64 * MIB, MIB).unwrap();
    let big = pool.allocate_block(5 * MIB).unwrap();
    let s = pool.stats();
    assert!(s.reserved >= 5 * MIB + 2 * HEADER, "{s:?}");
    assert!(s.reserved <= 6 * MIB, "rounded up to the step only: {s:?}");
    if !cfg!(miri) {
        common::stamp(big, 7);
        verify(big, 7).unwrap();
    }
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(big) };
}

#[test]
fn the_capacity_bounds_what_the_segments_span() {
    let pool = MemoryPool::segmented("seg-cap", 4 * MIB, MIB).unwrap();
    let mut blocks = Vec::new();
    loop {
        match pool.allocate_block(200 * KIB) {
            Ok(b) => blocks.push(b),
            Err(PoolError::Exhausted { largest_free, .. }) => {
                assert!(largest_free < 200 * KIB);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let s = pool.stats();
    assert!(s.reserved <= s.capacity, "{s:?}");
    assert!(
        blocks.len() >= 16,
        "4 MiB holds at least 16 blocks of 200 KiB: {s:?}"
    );
    assert_eq!(s.exhaustions, 1);
    for b in blocks {
        // SAFETY: from this pool, freed once.
        unsafe { pool.free_block(b) };
    }
}

#[test]
fn wholly_free_segments_go_back_at_a_purge_pass_and_a_spike_that_recurs_reuses_them() {
    let pool = MemoryPool::segmented("seg-spike", 64 * MIB, MIB).unwrap();
    let spike = |pool: &MemoryPool| {
        let blocks: Vec<_> = (0..40)
            .map(|_| pool.allocate_block(256 * KIB).unwrap())
            .collect();
        let reserved = pool.stats().reserved;
        for b in blocks {
            // SAFETY: from this pool, freed once.
            unsafe { pool.free_block(b) };
        }
        reserved
    };
    let first = spike(&pool);
    assert!(first >= 10 * MIB, "{first}");
    assert!(
        first <= 10 * MIB * 9 / 8 + 2 * MIB,
        "slack bounded: {first}"
    );
    // Before the purge delay is over, the segments stay: the next spike takes nothing new.
    assert_eq!(pool.stats().reserved, first);
    assert_eq!(
        spike(&pool),
        first,
        "the second spike reused the first one's segments"
    );
    // A purge pass gives every wholly free segment back.
    assert!(pool.trim() >= 1);
    let s = pool.stats();
    assert_eq!((s.reserved, s.in_use, s.free_ranges), (0, 0, 0), "{s:?}");
    // And the pool still works.
    let b = pool.allocate_block(KIB).unwrap();
    assert_eq!(pool.stats().reserved, MIB);
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(b) };
}

#[test]
fn a_segment_with_a_block_in_use_is_kept() {
    let pool = MemoryPool::segmented("seg-keep", 16 * MIB, MIB).unwrap();
    let kept = pool.allocate_block(KIB).unwrap();
    common::stamp(kept, 3);
    let other: Vec<_> = (0..8)
        .map(|_| pool.allocate_block(512 * KIB).unwrap())
        .collect();
    for b in other {
        // SAFETY: from this pool, freed once.
        unsafe { pool.free_block(b) };
    }
    pool.trim();
    assert_eq!(
        pool.stats().reserved,
        MIB,
        "only the segment holding a block is left"
    );
    verify(kept, 3).unwrap();
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(kept) };
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn foreign_and_double_frees_are_refused_with_a_message() {
    let pool = MemoryPool::segmented("seg-bad", 16 * MIB, MIB).unwrap();
    let a = pool.allocate_block(KIB).unwrap();
    let outside = Box::new([0u128; 8]);
    let foreign = NonNull::from(&*outside).cast::<MemoryBlock>();
    // SAFETY: deliberately broken contract: the pool must detect it and panic.
    let msg = panic_message(|| unsafe { pool.free_block(foreign) });
    assert!(msg.contains("seg-bad") && msg.contains("foreign"), "{msg}");
    // SAFETY: from this pool.
    unsafe { pool.free_block(a) };
    // SAFETY: a double free: detected.
    let msg = panic_message(|| unsafe { pool.free_block(a) });
    assert!(msg.contains("double free"), "{msg}");
    assert!(pool.allocate_block(KIB).is_ok(), "the pool still works");
}

/// An arena that spilled over several blocks replaces them at its reset with one block:
/// on a segmented pool it gives them all back first (so that the new block can reuse
/// their memory), yet its tag's budget sees no dip, so no second crossing.
#[test]
fn a_replacement_at_reset_gives_every_block_back_first_and_is_no_new_crossing() {
    use nebula_memory::{ArenaConfig, MemoryArena, ledger};
    use std::sync::{Arc, Mutex};
    let pool = MemoryPool::segmented("seg-replace", 64 * MIB, MIB).unwrap();
    ledger::set_budget("seg/replaced", ledger::Budget::Warn(100 * KIB));
    let warnings = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&warnings);
    let subscriber = common::OnEvent(move |e: &tracing::Event<'_>| {
        let mut text = String::new();
        e.record(&mut |_: &tracing::field::Field, v: &dyn std::fmt::Debug| {
            text.push_str(&format!("{v:?} "));
        });
        if *e.metadata().level() == tracing::Level::WARN && text.contains("seg/replaced") {
            *seen.lock().unwrap() += 1;
        }
    });
    tracing::subscriber::with_default(subscriber, || {
        let mut arena = MemoryArena::with_config(
            &pool,
            ArenaConfig::default()
                .tag("seg/replaced")
                .first_block(16 * KIB),
        );
        for _ in 0..20 {
            nebula_memory::Arena::alloc_slice(&arena, 16 * KIB, 0u8);
        }
        assert!(arena.block_count() > 1);
        assert_eq!(*warnings.lock().unwrap(), 1, "one crossing");
        let before = pool.stats().reserved;
        arena.reset();
        assert_eq!(arena.block_count(), 1, "replaced by one block");
        assert_eq!(
            *warnings.lock().unwrap(),
            1,
            "the replacement is no new crossing"
        );
        assert!(
            pool.stats().reserved <= before,
            "the replacement reused their memory"
        );
    });
    ledger::clear_budgets("seg/replaced");
}

#[test]
fn bad_settings_are_refused() {
    assert!(matches!(
        MemoryPool::segmented("seg-zero", 0, MIB),
        Err(PoolError::InvalidCapacity { .. })
    ));
    assert!(matches!(
        MemoryPool::segmented("seg-step", MIB, 0),
        Err(PoolError::InvalidSegment { segment: 0, .. })
    ));
    let pool = MemoryPool::segmented("seg-huge", MIB, MIB).unwrap();
    assert!(matches!(
        pool.allocate_block(usize::MAX),
        Err(PoolError::TooLarge { .. })
    ));
    assert!(matches!(
        pool.allocate_block(0),
        Err(PoolError::ZeroSize { .. })
    ));
}

#[derive(Clone, Debug)]
enum Op {
    /// Acquire `1 + x % max` bytes, `max` one of a few scales.
    Acquire(u64, u8),
    /// Release live block `x % live`.
    Release(u64),
    /// `allocate_block(largest_free)` succeeds when `largest_free > 0`.
    ProbeLargest,
    /// A purge pass now.
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u64>(), 0u8..4).prop_map(|(x, s)| Op::Acquire(x, s)),
        4 => any::<u64>().prop_map(Op::Release),
        1 => Just(Op::ProbeLargest),
        1 => Just(Op::Trim),
    ]
}

struct Model {
    pool: MemoryPool,
    /// Live blocks: address -> (total size, stamp seed).
    live: BTreeMap<usize, (usize, u64, NonNull<MemoryBlock>)>,
    in_use: usize,
    seed: u64,
}

impl Model {
    fn acquire(&mut self, n: usize) -> Result<bool, TestCaseError> {
        let before = self.pool.stats();
        match self.pool.allocate_block(n) {
            Ok(block) => {
                let (addr, total) = block_bytes(block);
                prop_assert_eq!(addr % 16, 0);
                prop_assert!(total >= n + HEADER);
                prop_assert!(self.pool.contains(block.as_ptr().cast()));
                // Disjoint from its neighbours.
                if let Some((&a, &(t, _, _))) = self.live.range(..addr).next_back() {
                    prop_assert!(a + t <= addr, "overlaps the block before");
                }
                if let Some((&a, _)) = self.live.range(addr..).next() {
                    prop_assert!(addr + total <= a, "overlaps the block after");
                }
                self.seed += 1;
                stamp(block, self.seed);
                self.live.insert(addr, (total, self.seed, block));
                self.in_use += total;
                Ok(true)
            }
            Err(PoolError::Exhausted { largest_free, .. }) => {
                prop_assert!(largest_free < n, "refused {} with {} free", n, largest_free);
                prop_assert_eq!(largest_free, before.largest_free);
                Ok(false)
            }
            Err(PoolError::TooLarge { max_usable, .. }) => {
                prop_assert!(n > max_usable);
                Ok(false)
            }
            Err(e) => Err(TestCaseError::fail(format!("{e}"))),
        }
    }

    fn release(&mut self, x: u64) -> Result<(), TestCaseError> {
        if self.live.is_empty() {
            return Ok(());
        }
        let key = *self.live.keys().nth(x as usize % self.live.len()).unwrap();
        let (total, seed, block) = self.live.remove(&key).unwrap();
        verify(block, seed).map_err(TestCaseError::fail)?;
        // SAFETY: from this pool, live, freed once.
        unsafe { self.pool.free_block(block) };
        self.in_use -= total;
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let s = self.pool.stats();
        prop_assert_eq!(s.in_use, self.in_use);
        prop_assert_eq!(s.in_use + s.free, s.capacity);
        prop_assert_eq!(s.blocks_in_use, self.live.len());
        prop_assert!(s.reserved <= s.capacity);
        prop_assert!(s.reserved >= s.in_use);
        Ok(())
    }
}

proptest! {
    #![proptest_config(common::proptest_config(64))]

    #[test]
    fn random_programs_match_the_model(
        capacity in (1usize..=8).prop_map(|m| m * MIB + 12_345),
        step_kib in prop_oneof![Just(64usize), Just(256), Just(1024)],
        ops in proptest::collection::vec(op(), 1..if cfg!(miri) { 40 } else { 200 }),
    ) {
        let pool = MemoryPool::segmented("seg-model", capacity, step_kib * KIB).unwrap();
        let mut m = Model { pool, live: BTreeMap::new(), in_use: 0, seed: 0 };
        for op in ops {
            match op {
                Op::Acquire(x, scale) => {
                    // Under Miri, small blocks: it checks every byte stamped.
                    let max = if cfg!(miri) {
                        [256, 4 * KIB, 16 * KIB, 64 * KIB][scale as usize]
                    } else {
                        [256, 16 * KIB, 512 * KIB, capacity][scale as usize]
                    };
                    m.acquire(1 + (x as usize) % max)?;
                }
                Op::Release(x) => m.release(x)?,
                Op::ProbeLargest => {
                    let largest = m.pool.stats().largest_free;
                    if largest > 0 {
                        prop_assert!(m.acquire(largest)?, "allocate_block(largest_free) refused");
                        let (&addr, _) = m.live.iter().find(|(_, (t, _, _))| *t >= largest).unwrap();
                        let x = m.live.keys().position(|&a| a == addr).unwrap();
                        m.release(x as u64)?;
                    }
                }
                Op::Trim => {
                    m.pool.trim();
                    for (total, seed, block) in m.live.values() {
                        let _ = total;
                        verify(*block, *seed).map_err(TestCaseError::fail)?;
                    }
                }
            }
            m.check()?;
        }
        while !m.live.is_empty() {
            m.release(0)?;
        }
        m.pool.trim();
        let s = m.pool.stats();
        prop_assert_eq!((s.in_use, s.reserved, s.blocks_in_use), (0, 0, 0));
        prop_assert_eq!(s.allocations, s.frees);
    }
}
