//! Model-based property test of `MemoryPool`: random programs of acquire / release / trim /
//! "probe the largest free block" run against a reference model that knows every live
//! block, its address range and the bytes written into it.
//!
//! Checked after every step:
//! - every block handed out: header 16-aligned, `data()` = header + 32 and 16-aligned,
//!   `capacity() >= requested` (a multiple of 16), `total_size() == capacity() + 32`,
//!   `[header, data + capacity)` inside the pool and disjoint from every other live block;
//! - contents: each block is stamped over its whole capacity at acquire and verified intact
//!   at release (and after `trim`), so splits, merges and decommit passes never touch live
//!   bytes;
//! - stats: `in_use + free == capacity`, `blocks_in_use`, `in_use` (sum of `total_size()`),
//!   `high_watermark` (exact running max), `exhaustions`, `allocations` and `frees` (exact
//!   counts), and `free_ranges`
//!   equal to the number of gaps between live blocks: all free memory between two live
//!   blocks is one range, i.e. coalescing is immediate;
//! - refusals: `TooLarge` exactly when the request exceeds `capacity - 32` after rounding;
//!   `Exhausted` never on an empty pool, always with `largest_free < requested` and the
//!   current stats in its fields, and then `allocate_block(largest_free)` succeeds;
//! - after releasing everything: `in_use == 0`, one free range, `largest_free` back to its
//!   initial value and the whole region allocatable as one block again.
//!
//! Pool capacities vary per case (one page up to 4 MiB, not page multiples), as do the
//! retain limit (0, small, default, never) and the purge delay (default or zero: with
//! retain limit 0 and no delay every release decommits every dirty free range).

use std::collections::BTreeMap;
use std::ptr::NonNull;

use nebula_memory::{MemoryBlock, MemoryPool, PoolError};
use proptest::prelude::*;

mod common;
use common::{HEADER, assert_drained, stamp};

/// `common::verify` as a proptest failure.
fn verify(block: NonNull<MemoryBlock>, seed: u64) -> Result<(), TestCaseError> {
    common::verify(block, seed).map_err(TestCaseError::fail)
}

const NAME: &str = "model";
/// Longest random program; 80 steps under Miri.
const MAX_OPS: usize = if cfg!(miri) { 80 } else { 160 };

#[derive(Clone, Debug)]
enum SizeSpec {
    /// 1..=64 bytes.
    Tiny(u64),
    /// 1..=4 KiB.
    Small(u64),
    /// 1..=capacity/16.
    Medium(u64),
    /// 1..=3/4 of the capacity.
    Large(u64),
    /// From 64 bytes below the largest possible block to 64 bytes above the capacity.
    Edge(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Acquire(SizeSpec),
    /// Releases live block `x % live`.
    Release(u64),
    /// `allocate_block(largest_free)` must succeed and `allocate_block(largest_free + 1)`
    /// must be refused; the probe block is released again.
    ProbeLargest,
    Trim,
}

fn size_spec() -> impl Strategy<Value = SizeSpec> {
    prop_oneof![
        3 => any::<u64>().prop_map(SizeSpec::Tiny),
        4 => any::<u64>().prop_map(SizeSpec::Small),
        4 => any::<u64>().prop_map(SizeSpec::Medium),
        2 => any::<u64>().prop_map(SizeSpec::Large),
        1 => any::<u64>().prop_map(SizeSpec::Edge),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => size_spec().prop_map(Op::Acquire),
        8 => any::<u64>().prop_map(Op::Release),
        1 => Just(Op::ProbeLargest),
        1 => Just(Op::Trim),
    ]
}

fn capacity() -> impl Strategy<Value = usize> {
    // Every block is stamped and verified word by word: under Miri, at most 256 KiB.
    let max = if cfg!(miri) { 256 << 10 } else { 4 << 20 };
    prop_oneof![1usize..=16 << 10, (16usize << 10)..=max]
}

/// `None`: the pool's default.
fn retain_limit() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        Just(None),
        Just(Some(0)),
        Just(Some(usize::MAX)),
        (0usize..1 << 20).prop_map(Some)
    ]
}

/// `true`: purge delay zero, so a release that pushes the pressure over the retain limit
/// decommits every dirty free range at once, next to live blocks.
fn purge_now() -> impl Strategy<Value = bool> {
    any::<bool>()
}

fn in_range(x: u64, lo: usize, hi: usize) -> usize {
    let hi = hi.max(lo);
    lo + (x % (hi - lo + 1) as u64) as usize
}

fn resolve(spec: &SizeSpec, capacity: usize) -> usize {
    match *spec {
        SizeSpec::Tiny(x) => in_range(x, 1, 64),
        SizeSpec::Small(x) => in_range(x, 1, 4096),
        SizeSpec::Medium(x) => in_range(x, 1, capacity / 16),
        SizeSpec::Large(x) => in_range(x, 1, capacity / 4 * 3),
        SizeSpec::Edge(x) => in_range(x, capacity - HEADER - 64, capacity + 64),
    }
}

struct Live {
    block: NonNull<MemoryBlock>,
    seed: u64,
}

struct Model<'p> {
    pool: &'p MemoryPool,
    /// Bytes the region spans, read once from the fresh pool.
    capacity: usize,
    /// First byte of the region (found from the first block and `contains`).
    base: Option<usize>,
    /// Live blocks in hand-out order (released by index).
    live: Vec<Live>,
    /// Address ranges of the live blocks: start -> end.
    ranges: BTreeMap<usize, usize>,
    in_use: usize,
    high_watermark: usize,
    exhaustions: u64,
    allocations: u64,
    frees: u64,
    next_seed: u64,
    high_before: usize,
    /// Retain limit 0 and no purge delay: every release must leave nothing dirty.
    decommit_every_release: bool,
}

impl<'p> Model<'p> {
    /// Lowest address `contains` accepts, found by bisection from an address inside.
    fn find_base(&self, inside: usize) -> usize {
        let contains = |a: usize| self.pool.contains(std::ptr::without_provenance(a));
        let (mut lo, mut hi) = (inside.saturating_sub(self.capacity), inside);
        // Invariant: `hi` is inside, everything below `lo` is not.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if contains(mid) {
                hi = mid
            } else {
                lo = mid + 1
            }
        }
        hi
    }

    fn acquire(&mut self, n: usize) -> Result<Result<(), PoolError>, TestCaseError> {
        let before = self.pool.stats();
        let max_usable = self.capacity - HEADER;
        let result = self.pool.allocate_block(n);
        let too_large = n
            .checked_next_multiple_of(16)
            .is_none_or(|r| r > max_usable);
        let block = match result {
            Ok(block) => {
                prop_assert!(
                    !too_large,
                    "{} B granted beyond max_usable {}",
                    n,
                    max_usable
                );
                block
            }
            Err(e) => {
                prop_assert!(e.to_string().contains(NAME), "{}", e);
                let after = self.pool.stats();
                match e.clone() {
                    PoolError::TooLarge {
                        pool,
                        requested,
                        max_usable: m,
                    } => {
                        prop_assert!(too_large, "{} B refused as too large", n);
                        prop_assert_eq!((pool, requested, m), (NAME, n, max_usable));
                        prop_assert_eq!(after, before);
                    }
                    PoolError::Exhausted {
                        pool,
                        requested,
                        free,
                        largest_free,
                    } => {
                        prop_assert!(!too_large, "{} B: Exhausted instead of TooLarge", n);
                        prop_assert!(!self.live.is_empty(), "{} B refused by an empty pool", n);
                        prop_assert_eq!((pool, requested), (NAME, n));
                        prop_assert_eq!((free, largest_free), (after.free, after.largest_free));
                        prop_assert!(
                            largest_free < n,
                            "refused {} B, {} B available",
                            n,
                            largest_free
                        );
                        self.exhaustions += 1;
                        prop_assert_eq!(after.exhaustions, before.exhaustions + 1);
                        prop_assert_eq!(
                            Unchanged::from(after),
                            Unchanged::from(before),
                            "a refusal changed the pool"
                        );
                    }
                    other => prop_assert!(false, "unexpected error {:?}", other),
                }
                self.check_stats()?;
                return Ok(Err(e));
            }
        };

        let addr = block.as_ptr() as usize;
        // SAFETY: a live block we own; the pool only ever touches its flags atomically.
        let header = unsafe { block.as_ref() };
        let (cap, total) = (header.capacity(), header.total_size());
        let data = header.data().as_ptr() as usize;
        prop_assert_eq!(addr % 16, 0);
        prop_assert_eq!(data, addr + HEADER);
        prop_assert_eq!(MemoryBlock::data_of(block).as_ptr() as usize, data);
        prop_assert_eq!(data % 16, 0);
        prop_assert!(
            cap >= n && cap % 16 == 0,
            "asked {} B, got capacity {}",
            n,
            cap
        );
        prop_assert_eq!(total, cap + HEADER);
        let end = addr + total;
        prop_assert!(self.pool.contains(block.as_ptr().cast()));
        prop_assert!(self.pool.contains(std::ptr::without_provenance(end - 1)));
        let base = match self.base {
            Some(base) => base,
            None => {
                let base = self.find_base(addr);
                let contains = |a: usize| self.pool.contains(std::ptr::without_provenance(a));
                prop_assert!(contains(base + self.capacity - 1) && !contains(base + self.capacity));
                prop_assert_eq!(base % 4096, 0, "region base not page-aligned");
                self.base = Some(base);
                base
            }
        };
        prop_assert!(
            addr >= base && end <= base + self.capacity,
            "block outside the region"
        );
        if let Some((&s, &e)) = self.ranges.range(..addr).next_back() {
            prop_assert!(
                e <= addr,
                "[{:#x}, {:#x}) overlaps [{:#x}, {:#x})",
                addr,
                end,
                s,
                e
            );
        }
        if let Some((&s, &e)) = self.ranges.range(addr..).next() {
            prop_assert!(
                s >= end,
                "[{:#x}, {:#x}) overlaps [{:#x}, {:#x})",
                addr,
                end,
                s,
                e
            );
        }
        // Under ASan the bytes are poisoned until handed out: only plain debug builds look.
        #[cfg(all(debug_assertions, not(nebula_asan)))]
        {
            let p = MemoryBlock::data_of(block).as_ptr();
            for off in (0..cap).step_by(4093).chain(cap.saturating_sub(64)..cap) {
                // SAFETY: inside the block's usable bytes, which we own.
                let byte = unsafe { p.add(off).read() };
                prop_assert_eq!(byte, 0xCD, "byte {} of a fresh block is not 0xCD", off);
            }
        }
        self.next_seed += 1;
        let seed = self.next_seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
        stamp(block, seed);
        self.ranges.insert(addr, end);
        self.live.push(Live { block, seed });
        self.in_use += total;
        self.allocations += 1;
        self.high_watermark = self.high_watermark.max(self.in_use);
        self.check_stats()?;
        Ok(Ok(()))
    }

    fn release(&mut self, i: usize) -> Result<(), TestCaseError> {
        let Live { block, seed } = self.live.swap_remove(i);
        verify(block, seed)?;
        // SAFETY: reading our own live header before giving it back.
        let total = unsafe { block.as_ref() }.total_size();
        // SAFETY: from this pool, live, never used again.
        unsafe { self.pool.free_block(block) };
        self.ranges.remove(&(block.as_ptr() as usize));
        self.in_use -= total;
        self.frees += 1;
        if self.decommit_every_release {
            prop_assert_eq!(self.pool.trim(), 0, "a release left a dirty free range");
        }
        self.check_stats()
    }

    fn probe_largest(&mut self) -> Result<(), TestCaseError> {
        let largest = self.pool.stats().largest_free;
        if largest == 0 {
            prop_assert!(
                self.acquire(16)?.is_err(),
                "largest_free 0, yet 16 B were granted"
            );
            return Ok(());
        }
        prop_assert!(
            self.acquire(largest)?.is_ok(),
            "allocate_block(largest_free) refused"
        );
        let ok = self.live.len() - 1;
        self.release(ok)?;
        // One byte more must be refused (TooLarge when it exceeds the region).
        prop_assert!(
            self.acquire(largest + 1)?.is_err(),
            "largest_free {} understated",
            largest
        );
        Ok(())
    }

    fn trim(&mut self) -> Result<(), TestCaseError> {
        let ranges = self.pool.stats().free_ranges;
        let trimmed = self.pool.trim();
        prop_assert!(
            trimmed <= ranges,
            "trimmed {} of {} free ranges",
            trimmed,
            ranges
        );
        // Everything free is clean now.
        prop_assert_eq!(self.pool.trim(), 0);
        prop_assert_eq!(self.pool.maintain(), 0);
        for l in &self.live {
            verify(l.block, l.seed)?;
        }
        self.check_stats()
    }

    fn check_stats(&mut self) -> Result<(), TestCaseError> {
        let s = self.pool.stats();
        prop_assert_eq!(s.capacity, self.capacity);
        prop_assert_eq!(s.in_use + s.free, s.capacity);
        prop_assert_eq!(s.blocks_in_use, self.live.len());
        prop_assert_eq!(s.in_use, self.in_use);
        prop_assert_eq!(s.high_watermark, self.high_watermark);
        prop_assert!(s.high_watermark >= self.high_before && s.high_watermark >= s.in_use);
        self.high_before = s.high_watermark;
        prop_assert_eq!(s.exhaustions, self.exhaustions);
        prop_assert_eq!((s.allocations, s.frees), (self.allocations, self.frees));

        // Free memory is exactly the gaps between live blocks, one free range per gap.
        let (mut gaps, mut widest) = (0, 0);
        let mut note = |gap: usize| {
            if gap > 0 {
                gaps += 1;
                widest = widest.max(gap);
            }
        };
        match self.base {
            None => note(self.capacity),
            Some(base) => {
                let mut cursor = base;
                for (&start, &end) in &self.ranges {
                    note(start - cursor);
                    cursor = end;
                }
                note(base + self.capacity - cursor);
            }
        }
        prop_assert_eq!(
            s.free_ranges,
            gaps,
            "free ranges vs gaps between live blocks"
        );
        prop_assert!(widest == 0 || widest >= 48, "a free gap of {} B", widest);
        prop_assert_eq!(s.largest_free == 0, widest == 0);
        prop_assert!(s.largest_free <= widest.saturating_sub(HEADER));
        Ok(())
    }
}

/// The stats a refusal must leave alone (everything but `exhaustions`).
#[derive(Debug, PartialEq, Eq)]
struct Unchanged {
    in_use: usize,
    free: usize,
    largest_free: usize,
    blocks_in_use: usize,
    high_watermark: usize,
    free_ranges: usize,
    allocations: u64,
    frees: u64,
}

impl From<nebula_memory::PoolStats> for Unchanged {
    fn from(s: nebula_memory::PoolStats) -> Self {
        Unchanged {
            in_use: s.in_use,
            free: s.free,
            largest_free: s.largest_free,
            blocks_in_use: s.blocks_in_use,
            high_watermark: s.high_watermark,
            free_ranges: s.free_ranges,
            allocations: s.allocations,
            frees: s.frees,
        }
    }
}

fn run(
    capacity: usize,
    retain: Option<usize>,
    purge_now: bool,
    ops: &[Op],
    release_order: u64,
) -> Result<(), TestCaseError> {
    let pool = MemoryPool::new(NAME, capacity).unwrap();
    if let Some(limit) = retain {
        pool.set_retain_limit(limit);
    }
    if purge_now {
        pool.set_purge_delay(std::time::Duration::ZERO);
        pool.set_recall_window(std::time::Duration::ZERO);
    }
    let initial = pool.stats();
    prop_assert!(initial.capacity >= capacity && initial.capacity.is_multiple_of(4096));
    prop_assert_eq!(initial.largest_free, initial.capacity - HEADER);
    prop_assert_eq!((initial.in_use, initial.free_ranges), (0, 1));
    let mut m = Model {
        pool: &pool,
        capacity: initial.capacity,
        base: None,
        live: Vec::new(),
        ranges: BTreeMap::new(),
        in_use: 0,
        high_watermark: 0,
        exhaustions: 0,
        allocations: 0,
        frees: 0,
        next_seed: 0,
        high_before: 0,
        decommit_every_release: retain == Some(0) && purge_now,
    };
    m.check_stats()?;
    for op in ops {
        match op {
            Op::Acquire(spec) => {
                m.acquire(resolve(spec, m.capacity))?.ok();
            }
            Op::Release(i) => {
                if !m.live.is_empty() {
                    m.release((i % m.live.len() as u64) as usize)?;
                }
            }
            Op::ProbeLargest => m.probe_largest()?,
            Op::Trim => m.trim()?,
        }
    }
    // Release the rest in a scrambled order.
    let mut x = release_order | 1;
    while !m.live.is_empty() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m.release((x % m.live.len() as u64) as usize)?;
    }
    let s = pool.stats();
    prop_assert_eq!((s.in_use, s.blocks_in_use, s.free_ranges), (0, 0, 1));
    prop_assert_eq!(s.largest_free, initial.largest_free);
    // Fully coalesced: the whole region is one block again, starting at the base.
    let all = m.acquire(initial.largest_free)?;
    prop_assert!(all.is_ok());
    if let Some(base) = m.base {
        prop_assert_eq!(m.live[0].block.as_ptr() as usize, base);
    }
    m.release(0)?;
    Ok(())
}

/// 128 cases (fewer under Miri).
fn proptest_config() -> ProptestConfig {
    common::proptest_config(128)
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    #[cfg_attr(target_family = "wasm", ignore = "a reserved pool's model: on the web pools grow by segments (tests/segmented_pool.rs)")]
    fn random_programs_match_the_model(
        capacity in capacity(),
        retain in retain_limit(),
        purge_now in purge_now(),
        ops in prop::collection::vec(op(), 1..MAX_OPS),
        release_order in any::<u64>(),
    ) {
        run(capacity, retain, purge_now, &ops, release_order)?;
    }
}

/// Many small blocks in a small pool: long free lists, many exhaustions, deep coalescing.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "a reserved pool's model: on the web pools grow by segments (tests/segmented_pool.rs)"
)]
fn fill_then_drain_small_blocks() {
    // Every step checks the stats against all live blocks: too slow for Miri at full size.
    let steps: u64 = if cfg!(miri) { 150 } else { 3000 };
    for capacity in [4096, 64 << 10] {
        let ops: Vec<Op> = (0..steps)
            .map(|i| match i % 7 {
                3 | 6 => Op::Release(i * 7919),
                _ => Op::Acquire(SizeSpec::Tiny(i.wrapping_mul(0x9E37_79B9))),
            })
            .collect();
        run(capacity, Some(0), true, &ops, 12345).unwrap();
    }
}

/// `largest_free` is exact even when the largest free block is not the first of its size
/// class: two free blocks of one class (the larger one freed first), nothing else free.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "a reserved pool's model: on the web pools grow by segments (tests/segmented_pool.rs)"
)]
fn largest_free_looks_past_the_head_of_a_class() {
    let pool = MemoryPool::new(NAME, 1 << 20).unwrap();
    let big = pool.allocate_block(8288).unwrap();
    let guard1 = pool.allocate_block(16).unwrap();
    let small = pool.allocate_block(8160).unwrap();
    let guard2 = pool.allocate_block(16).unwrap();
    let rest = pool.allocate_block(pool.stats().largest_free).unwrap();
    assert_eq!(pool.stats().largest_free, 0);
    // SAFETY: a block of this pool, freed once, not used afterwards.
    unsafe { pool.free_block(big) };
    // SAFETY: as above.
    unsafe { pool.free_block(small) };
    let s = pool.stats();
    assert_eq!(s.free_ranges, 2);
    assert_eq!(s.largest_free, 8288, "{s:?}");
    assert!(matches!(
        pool.allocate_block(8289),
        Err(PoolError::Exhausted {
            largest_free: 8288,
            ..
        })
    ));
    let again = pool.allocate_block(8288).unwrap();
    assert_eq!(again, big);
    for b in [again, guard1, guard2, rest] {
        // SAFETY: live blocks of this pool, each freed once, not used afterwards.
        unsafe { pool.free_block(b) };
    }
    assert_drained(&pool);
    assert_eq!(pool.stats().largest_free, (1 << 20) - HEADER);
}
