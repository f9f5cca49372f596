//! Heap efficiency, measured the way allocator authors measure it (talc's `heap_efficiency`
//! benchmark): churn random blocks, biased towards allocation so the pool fills up, and at
//! the *first* refused request record how much of the pool is in use. A perfect allocator
//! reaches 1.0; in talc's figures dlmalloc reaches 97.7% and rlsf (TLSF) 97.3%.
//!
//! Next to the pool, the same request stream is replayed against an exact best-fit
//! reference allocator (same header and rounding rules, `BTreeSet` search) so that a
//! shortfall can be told apart from the workload's own fragmentation.
//!
//! `cargo test --release --test pool_efficiency -- --nocapture` prints the figures.
//!
//! Not under Miri: filling a 64 MiB pool with random blocks (and replaying it against the
//! reference allocator) is a measurement, millions of steps; `pool_model` and
//! `pool_threads` cover the same acquire / release / coalesce paths with Miri.
#![cfg(not(miri))]

use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;

use nebula_memory::{MemoryBlock, MemoryPool, PoolError};

mod common;
use common::{HEADER, SplitMix64, assert_drained};

const POOL: usize = 64 << 20;
const MIN_SIZE: usize = 64;
const MAX_SIZE: usize = 64 << 10;
/// Probability that a step allocates rather than frees a random live block. Low enough
/// that the pool churns for tens of thousands of steps before it fills (fragmentation has
/// time to build up), high enough that it does fill.
const P_ALLOC: f64 = 0.55;
const SEEDS: [u64; 8] = [1, 2, 3, 0xDEAD_BEEF, 42, 7777, 0x1234_5678_9ABC, 99];

/// The pool's block geometry: a 32-byte header (`HEADER`), usable bytes in multiples of 16,
/// at least 48 bytes in all, and a remainder is split off only when it can hold a block
/// itself.
const MIN_BLOCK: usize = 48;

/// An allocator whose only job is to request sizes in a reproducible order.
trait Heap {
    /// `Some((handle, total bytes taken))`, or `None` at a refusal.
    fn alloc(&mut self, n: usize) -> Option<(usize, usize)>;
    fn free(&mut self, handle: usize);
    /// `(in_use, capacity)`.
    fn usage(&self) -> (usize, usize);
}

/// `MemoryPool` behind the `Heap` trait; frees everything it still holds on drop.
struct Pool {
    pool: MemoryPool,
    live: BTreeMap<usize, NonNull<MemoryBlock>>,
}

impl Pool {
    fn new() -> Self {
        Pool {
            pool: MemoryPool::new("efficiency", POOL).unwrap(),
            live: BTreeMap::new(),
        }
    }
}

impl Heap for Pool {
    fn alloc(&mut self, n: usize) -> Option<(usize, usize)> {
        match self.pool.allocate_block(n) {
            Ok(block) => {
                // SAFETY: a live block of `pool`, ours until freed.
                let header = unsafe { block.as_ref() };
                assert!(header.capacity() >= n);
                // SAFETY: the data has at least `n >= 1` writable bytes; touch the memory.
                unsafe { MemoryBlock::data_of(block).as_ptr().write(1) };
                let total = header.total_size();
                self.live.insert(block.as_ptr() as usize, block);
                Some((block.as_ptr() as usize, total))
            }
            Err(PoolError::Exhausted {
                requested,
                free,
                largest_free,
                ..
            }) => {
                let s = self.pool.stats();
                assert_eq!((requested, free, largest_free), (n, s.free, s.largest_free));
                assert!(
                    largest_free < n,
                    "refused {n} B with {largest_free} B available"
                );
                None
            }
            Err(e) => panic!("unexpected refusal: {e}"),
        }
    }

    fn free(&mut self, handle: usize) {
        let block = self.live.remove(&handle).unwrap();
        // SAFETY: from this pool, freed once, not used afterwards.
        unsafe { self.pool.free_block(block) };
    }

    fn usage(&self) -> (usize, usize) {
        let s = self.pool.stats();
        (s.in_use, s.capacity)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (_, block) in std::mem::take(&mut self.live) {
            // SAFETY: from this pool, freed once, not used afterwards.
            unsafe { self.pool.free_block(block) };
        }
        assert_drained(&self.pool);
    }
}

/// Exact best fit (smallest free range that fits, lowest address among equals) with
/// immediate coalescing and the pool's block geometry: the yardstick for the pool.
struct BestFit {
    by_size: BTreeSet<(usize, usize)>,
    by_addr: BTreeMap<usize, usize>,
    taken: BTreeMap<usize, usize>,
    in_use: usize,
}

impl BestFit {
    fn new() -> Self {
        let mut h = BestFit {
            by_size: BTreeSet::new(),
            by_addr: BTreeMap::new(),
            taken: BTreeMap::new(),
            in_use: 0,
        };
        h.insert(0, POOL);
        h
    }

    fn insert(&mut self, addr: usize, size: usize) {
        self.by_size.insert((size, addr));
        self.by_addr.insert(addr, size);
    }

    fn remove(&mut self, addr: usize, size: usize) {
        self.by_size.remove(&(size, addr));
        self.by_addr.remove(&addr);
    }
}

impl Heap for BestFit {
    fn alloc(&mut self, n: usize) -> Option<(usize, usize)> {
        let need = (n.next_multiple_of(16) + HEADER).max(MIN_BLOCK);
        let (size, addr) = self.by_size.range((need, 0)..).next().copied()?;
        self.remove(addr, size);
        let take = if size - need >= MIN_BLOCK {
            self.insert(addr + need, size - need);
            need
        } else {
            size
        };
        self.in_use += take;
        self.taken.insert(addr, take);
        Some((addr, take))
    }

    fn free(&mut self, addr: usize) {
        let size = self.taken.remove(&addr).unwrap();
        self.in_use -= size;
        let (mut addr, mut size) = (addr, size);
        if let Some((&next, &next_size)) = self.by_addr.range(addr + size..).next()
            && next == addr + size
        {
            self.remove(next, next_size);
            size += next_size;
        }
        if let Some((&prev, &prev_size)) = self.by_addr.range(..addr).next_back()
            && prev + prev_size == addr
        {
            self.remove(prev, prev_size);
            addr = prev;
            size += prev_size;
        }
        self.insert(addr, size);
    }

    fn usage(&self) -> (usize, usize) {
        (self.in_use, POOL)
    }
}

struct Outcome {
    /// `in_use / capacity` at the first refusal (headers and rounding included).
    in_use_share: f64,
    /// Requested bytes of the live blocks / capacity at the first refusal.
    requested_share: f64,
    steps: usize,
    live: usize,
    refused: usize,
}

/// The first `n` seeds; under valgrind the first only (each seed is some 70,000 pool
/// operations, minutes there; every seed meets the bounds on its own).
fn seeds(n: usize) -> &'static [u64] {
    &SEEDS[..if common::under_valgrind() { 1 } else { n }]
}

/// Random churn until the first refusal: allocate (log-uniform size) with probability
/// `P_ALLOC`, otherwise free a random live block. The request stream depends only on the
/// seed, so every `Heap` sees the same requests up to its own first refusal.
fn churn(heap: &mut dyn Heap, seed: u64) -> Outcome {
    let mut rng = SplitMix64(seed);
    let mut live: Vec<(usize, usize)> = Vec::new();
    let mut requested_live = 0usize;
    let mut steps = 0;
    loop {
        steps += 1;
        if live.is_empty() || rng.next_f64() < P_ALLOC {
            let n = rng.log_uniform(MIN_SIZE, MAX_SIZE);
            match heap.alloc(n) {
                Some((handle, _)) => {
                    live.push((handle, n));
                    requested_live += n;
                }
                None => {
                    let (in_use, capacity) = heap.usage();
                    return Outcome {
                        in_use_share: in_use as f64 / capacity as f64,
                        requested_share: requested_live as f64 / capacity as f64,
                        steps,
                        live: live.len(),
                        refused: n,
                    };
                }
            }
        } else {
            let (handle, n) = live.swap_remove(rng.below(live.len()));
            requested_live -= n;
            heap.free(handle);
        }
    }
}

#[test]
fn heap_efficiency_at_first_refusal() {
    let (mut pool_sum, mut requested_sum, mut best_fit_sum) = (0.0, 0.0, 0.0);
    for &seed in seeds(SEEDS.len()) {
        let o = churn(&mut Pool::new(), seed);
        let reference = churn(&mut BestFit::new(), seed);
        assert!(o.requested_share <= o.in_use_share && o.in_use_share <= 1.0);
        println!(
            "seed {seed:#x}: in use {:.4}, requested {:.4} at the first refusal \
             ({} B refused after {} steps, {} live blocks); best fit {:.4}",
            o.in_use_share, o.requested_share, o.refused, o.steps, o.live, reference.in_use_share
        );
        pool_sum += o.in_use_share;
        requested_sum += o.requested_share;
        best_fit_sum += reference.in_use_share;
    }
    let n = seeds(SEEDS.len()).len();
    let (in_use, requested, best_fit) = (
        pool_sum / n as f64,
        requested_sum / n as f64,
        best_fit_sum / n as f64,
    );
    println!(
        "heap efficiency, {n} seeds, 64 MiB pool, sizes log-uniform {MIN_SIZE}..={MAX_SIZE} B, \
         P(alloc) = {P_ALLOC}: in use {:.2}%, requested bytes {:.2}%; exact best fit {:.2}%",
        in_use * 100.0,
        requested * 100.0,
        best_fit * 100.0
    );
    assert!(in_use >= 0.95, "heap efficiency {in_use:.4} < 0.95");
    // TLSF's good fit may not lose more than a little to an exact best-fit search.
    assert!(
        in_use >= best_fit - 0.02,
        "pool {in_use:.4} vs best fit {best_fit:.4}"
    );
}

/// talc's own mix (its `heap_efficiency` benchmark): 50% allocate `generate_size(10000)`,
/// 10% free, 40% "realloc" to a uniform size below 100,000 B. A pool block cannot grow, so a
/// realloc is a move: allocate the new block, then free the old one. Returns `(in use,
/// requested bytes)` as shares of the pool at the first refusal.
fn talc_mix(seed: u64) -> (f64, f64) {
    let mut heap = Pool::new();
    let mut rng = SplitMix64(seed);
    let mut live: Vec<(usize, usize)> = Vec::new();
    loop {
        let refused = match rng.below(10) {
            0..=4 => {
                let cap = 16 + rng.below(10_000 - 16);
                let n = 4 + rng.below(cap - 4);
                heap.alloc(n).map(|(h, _)| live.push((h, n))).is_none()
            }
            5 => {
                if !live.is_empty() {
                    heap.free(live.swap_remove(rng.below(live.len())).0);
                }
                false
            }
            _ if live.is_empty() => false,
            _ => {
                let i = rng.below(live.len());
                let n = 1 + rng.below(100_000 - 1);
                match heap.alloc(n) {
                    Some((h, _)) => {
                        let (old, _) = std::mem::replace(&mut live[i], (h, n));
                        heap.free(old);
                        false
                    }
                    None => true,
                }
            }
        };
        if refused {
            let (in_use, capacity) = heap.usage();
            let requested: usize = live.iter().map(|&(_, n)| n).sum();
            return (
                in_use as f64 / capacity as f64,
                requested as f64 / capacity as f64,
            );
        }
    }
}

#[test]
fn heap_efficiency_talc_mix() {
    let (mut in_use_sum, mut requested_sum) = (0.0, 0.0);
    let seeds = seeds(4);
    for &seed in seeds {
        let (in_use, requested) = talc_mix(seed);
        println!("talc mix, seed {seed:#x}: in use {in_use:.4}, requested {requested:.4}");
        in_use_sum += in_use;
        requested_sum += requested;
    }
    let n = seeds.len() as f64;
    let (in_use, requested) = (in_use_sum / n, requested_sum / n);
    println!(
        "heap efficiency, talc's mix (realloc = move), 64 MiB pool: in use {:.2}%, \
         requested bytes {:.2}%",
        in_use * 100.0,
        requested * 100.0
    );
    assert!(
        requested >= 0.95,
        "talc-mix efficiency {requested:.4} < 0.95"
    );
}
