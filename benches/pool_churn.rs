//! W7 "pool-churn": 100,000 random acquire/release operations of blocks sized uniformly
//! 4 KiB..=1 MiB with at most 256 live blocks, replayed identically against
//!
//! - `nebula`: a private [`MemoryPool`] of 512 MiB (the worst case is 256 MiB live),
//! - `system`: `std::alloc::System` (glibc malloc/free), `Layout` align 16,
//! - `mimalloc`: `mimalloc::MiMalloc` used as an allocator object through `GlobalAlloc`.
//!
//! **Reported time is nanoseconds per acquire+release pair.** One run of the sequence
//! performs `pairs` acquisitions (about 50,000) and the same number of releases (the blocks
//! still live at the end of the sequence are released inside the timed region too); the
//! routine divides each measured duration by `pairs`, so criterion's `time:` line and its
//! median are per pair, not per run.
//!
//! The operation sequence comes from a fixed-seed splitmix64 and is generated before any
//! timing. Every acquired block gets one byte written (volatile, so it cannot be elided).
//!
//! After the nebula runs the bench prints the pool's `largest_free / free` after everything
//! was released (1.0 means no fragmentation is left) and its `free_ranges` (should be 1).
//! At the end it prints a summary with the medians and the ratios nebula/System and
//! nebula/mimalloc, computed from the same samples criterion measured.
//!
//! Run: `cargo bench --bench pool_churn`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::hint::black_box;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use mimalloc::MiMalloc;
use nebula_memory::{MemoryBlock, MemoryPool};

// Only the PRNG is used here.
#[allow(dead_code)]
mod common;
use common::SplitMix64;

/// Operations in one run (acquires plus releases, not counting the final release-all).
const OPS: usize = 100_000;
/// Most blocks live at once.
const MAX_LIVE: usize = 256;
const MIN_SIZE: usize = 4 << 10;
const MAX_SIZE: usize = 1 << 20;
const SEED: u64 = 0x5EED_0007_C0FF_EE00;
/// Criterion samples per contender; the summary reads exactly this many last samples.
const SAMPLES: usize = 20;
/// Comfortably above the worst case of `MAX_LIVE * (MAX_SIZE + header)` = 256 MiB.
const POOL_CAPACITY: usize = 512 << 20;

#[derive(Clone, Copy)]
enum Op {
    /// Acquire a block of this many usable bytes and push it on the live list.
    Acquire(usize),
    /// Release the live block at this index (`swap_remove`).
    Release(usize),
}

/// The W7 sequence: a fair coin picks acquire or release, forced to acquire when nothing is
/// live and to release at `MAX_LIVE`. Returns the ops and the number of acquisitions.
fn make_ops() -> (Vec<Op>, usize) {
    let mut rng = SplitMix64(SEED);
    let mut ops = Vec::with_capacity(OPS);
    let mut live = 0usize;
    let mut acquires = 0usize;
    for _ in 0..OPS {
        let acquire = live == 0 || (live < MAX_LIVE && rng.next_u64() & 1 == 0);
        if acquire {
            ops.push(Op::Acquire(rng.range(MIN_SIZE, MAX_SIZE)));
            live += 1;
            acquires += 1;
        } else {
            ops.push(Op::Release(rng.range(0, live - 1)));
            live -= 1;
        }
    }
    (ops, acquires)
}

/// One allocator under test. `acquire` returns a handle and the first usable byte.
trait Contender {
    fn acquire(&mut self, size: usize) -> (*mut u8, *mut u8);
    /// # Safety
    /// `handle` came from `acquire(size)` on this contender and was not released yet.
    unsafe fn release(&mut self, handle: *mut u8, size: usize);
}

struct Nebula<'a>(&'a MemoryPool);

impl Contender for Nebula<'_> {
    #[inline]
    fn acquire(&mut self, size: usize) -> (*mut u8, *mut u8) {
        let block = match self.0.allocate_block(size) {
            Ok(b) => b,
            Err(e) => panic!("W7: nebula pool refused {size} bytes: {e}"),
        };
        (block.as_ptr().cast(), MemoryBlock::data_of(block).as_ptr())
    }

    #[inline]
    unsafe fn release(&mut self, handle: *mut u8, _size: usize) {
        // SAFETY: `handle` is a block pointer from `allocate_block` on this pool, released
        // once (the caller's contract).
        unsafe { self.0.free_block(NonNull::new_unchecked(handle.cast())) }
    }
}

/// `std::alloc::System` or `mimalloc::MiMalloc`, called through `GlobalAlloc`.
struct Heap<A: GlobalAlloc>(A);

fn layout(size: usize) -> Layout {
    match Layout::from_size_align(size, 16) {
        Ok(l) => l,
        Err(e) => panic!("W7: bad layout for {size} bytes: {e}"),
    }
}

impl<A: GlobalAlloc> Contender for Heap<A> {
    #[inline]
    fn acquire(&mut self, size: usize) -> (*mut u8, *mut u8) {
        // SAFETY: the layout has a non-zero size (>= 4 KiB).
        let p = unsafe { self.0.alloc(layout(size)) };
        assert!(!p.is_null(), "W7: allocator refused {size} bytes");
        (p, p)
    }

    #[inline]
    unsafe fn release(&mut self, handle: *mut u8, size: usize) {
        // SAFETY: `handle` was allocated by this allocator with this very layout.
        unsafe { self.0.dealloc(handle, layout(size)) }
    }
}

/// Replays `ops` once, releases whatever is still live, and returns the elapsed time.
fn run<C: Contender>(c: &mut C, ops: &[Op], live: &mut Vec<(*mut u8, usize)>) -> Duration {
    live.clear();
    let start = Instant::now();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire(size) => {
                let (handle, data) = c.acquire(size);
                // SAFETY: `data` points at >= `size` >= 1 writable bytes.
                unsafe { data.write_volatile(i as u8) };
                live.push((handle, size));
            }
            Op::Release(index) => {
                let (handle, size) = live.swap_remove(index);
                // SAFETY: acquired above with this size, released exactly once.
                unsafe { c.release(handle, size) };
            }
        }
    }
    for (handle, size) in live.drain(..) {
        // SAFETY: as above.
        unsafe { c.release(handle, size) };
    }
    let elapsed = start.elapsed();
    black_box(&*live);
    elapsed
}

thread_local! {
    /// Per-iteration nanoseconds per pair of every routine call, by contender.
    static SEEN: RefCell<Vec<(&'static str, f64)>> = const { RefCell::new(Vec::new()) };
}

/// Median of the last `SAMPLES` routine calls for `name`: criterion's measurement samples
/// (warm-up calls come first).
fn median_of(name: &str) -> Option<f64> {
    SEEN.with(|s| {
        let s = s.borrow();
        let all: Vec<f64> = s
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .collect();
        if all.is_empty() {
            return None;
        }
        let mut last = all[all.len().saturating_sub(SAMPLES)..].to_vec();
        last.sort_by(f64::total_cmp);
        let n = last.len();
        Some(if n % 2 == 1 {
            last[n / 2]
        } else {
            (last[n / 2 - 1] + last[n / 2]) / 2.0
        })
    })
}

fn bench_contender<C: Contender>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &'static str,
    contender: &mut C,
    ops: &[Op],
    pairs: usize,
) {
    let mut live = Vec::with_capacity(MAX_LIVE);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += run(contender, ops, &mut live);
            }
            let per_pair = total / pairs as u32;
            let ns = per_pair.as_secs_f64() * 1e9 / iters as f64;
            SEEN.with(|s| s.borrow_mut().push((name, ns)));
            per_pair
        })
    });
}

fn pool_churn(c: &mut Criterion) {
    let (ops, pairs) = make_ops();
    let pool = match MemoryPool::new("w7-pool-churn", POOL_CAPACITY) {
        Ok(p) => p,
        Err(e) => panic!("W7: cannot create the pool: {e}"),
    };
    println!(
        "W7 pool-churn: {OPS} ops + final release-all = {pairs} acquire+release pairs per run, \
         sizes {MIN_SIZE}..={MAX_SIZE} B, <= {MAX_LIVE} live; time below is PER PAIR"
    );

    let mut group = c.benchmark_group("W7 pool-churn (ns per acquire+release pair)");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    bench_contender(&mut group, "nebula", &mut Nebula(&pool), &ops, pairs);
    let s = pool.stats();
    println!(
        "nebula after releasing everything: largest_free / free = {} / {} = {:.6}, \
         free_ranges = {}, in_use = {}, high_watermark = {:.1} MiB, exhaustions = {}",
        s.largest_free,
        s.free,
        s.largest_free as f64 / s.free as f64,
        s.free_ranges,
        s.in_use,
        s.high_watermark as f64 / (1024.0 * 1024.0),
        s.exhaustions
    );

    bench_contender(&mut group, "system", &mut Heap(System), &ops, pairs);
    bench_contender(&mut group, "mimalloc", &mut Heap(MiMalloc), &ops, pairs);
    group.finish();

    if let (Some(n), Some(s), Some(m)) = (
        median_of("nebula"),
        median_of("system"),
        median_of("mimalloc"),
    ) {
        println!("W7 summary (median of the {SAMPLES} measured samples, ns per pair):");
        println!("  nebula   {n:9.1}");
        println!("  system   {s:9.1}");
        println!("  mimalloc {m:9.1}");
        println!("  nebula/system   = {:.3}", n / s);
        println!("  nebula/mimalloc = {:.3}", n / m);
    }
}

criterion_group!(benches, pool_churn);
criterion_main!(benches);
