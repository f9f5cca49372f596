//! Workloads W1–W6, nebula_memory against every peer, side by side in one run:
//!
//! - W1 burst-1M: 1,000,000 allocations of 8..=128 B (align 8), then free everything
//!   (arenas: one reset); ns per allocation and µs per free-all.
//! - W2 particles: per frame 1,000 allocations of 32 B (align 16), then free all / reset.
//! - W3 vec-push: one `Vec<u32>` pushed to 1,000,000 elements inside the allocator, then reset.
//! - W4 interleaved-vecs: 64 `Vec<u64>` grown round-robin to 1,000 elements each (growth
//!   mostly not at the top), then reset.
//! - W5 mixed-frame: per frame 200 allocations of 16..=4096 B with the alignment drawn from
//!   {8, 16, 32, 64}, plus 10 strings of 20..=200 B copied in, then reset; 10,000 frames.
//! - W6 two-threads: W2 on 2 threads at once, one arena per thread; scaling against 1 thread.
//!
//! W7 (pool churn) is `benches/pool_churn.rs`.
//!
//! Contenders:
//! - `nebula`: a [`MemoryArena`] (default config) over a private [`MemoryPool`] per workload,
//!   warmed up before timing and reset after every iteration, so steady state is measured.
//! - `nebula-hot` (W2 and W6 only): the same arena, each frame's allocations made through a
//!   [`HotCursor`](nebula_memory::HotCursor) taken for the frame (`arena.hot_cursor()`), as a
//!   user writes a hot loop: the bump position stays in registers and is written back
//!   once per frame.
//! - `limit`: a bare bump pointer over one pre-allocated buffer (benches/common), the floor.
//! - `system`: `std::alloc::System` (glibc), one `alloc` and one `dealloc` per object. For
//!   the vector workloads (W3, W4) a plain `std::vec::Vec`; this bench binary installs no
//!   `#[global_allocator]`, so std's `Vec` goes to `System`.
//! - `mimalloc`: `mimalloc::MiMalloc` used as an allocator object (`GlobalAlloc` methods, one
//!   free per object); for W3/W4 an `allocator_api2` `Vec` over a tiny `Allocator` wrapper of
//!   `MiMalloc` (`grow` = `realloc`), because the global allocator of one binary cannot be
//!   swapped per contender.
//! - `bumpalo` 3, `bump-scope` 2 (feature `allocator-api2-02`), `blink-alloc` 0.4 (its
//!   `Allocator` impl is for allocator-api2 0.4, so W3/W4 use a thin 0.2 wrapper over its
//!   inherent `allocate`/`resize`/`deallocate`, which are `#[inline(always)]`). All arenas are
//!   created with their defaults, warmed up, and reset after every iteration.
//!
//! Sizes come from a fixed-seed splitmix64 and are generated before any timing. Every
//! allocation gets at least one byte written (volatile; W3/W4 write every element, strings
//! are copied in).
//!
//! Reported units (the summary at the end converts criterion's per-iteration times):
//! W1 alloc ns per allocation and free-all µs per run; W2 µs per frame; W3 ns per push;
//! W4 µs per run (one run = 64 vectors x 1,000 round-robin pushes + reset; divide by 1,000
//! for one round-robin pass); W5 µs per frame; W6 µs of wall time per frame (`1t`) or per
//! pair of concurrent frames (`2t`), aggregate frames/s and the scaling factor.
//!
//! Run: `cargo bench --bench workloads` (one workload: `cargo bench --bench workloads -- W2`).

mod common;

use nebula_memory::Arena;
use std::alloc::{GlobalAlloc, Layout, System, handle_alloc_error};
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use allocator_api2::alloc::{AllocError, Allocator};
use allocator_api2::vec::Vec as AVec;
use blink_alloc::BlinkAlloc;
use bump_scope::traits::BumpAllocatorTyped;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main};
use mimalloc::MiMalloc;
use nebula_memory::{MemoryArena, MemoryPool};

use common::{Limit, SplitMix64};

const SEED: u64 = 0x5EED_0000_0000_0001;
/// Private pool of each nebula bench: reserving address space is cheap.
const POOL_CAPACITY: usize = 256 << 20;
/// Buffer of `limit` (W1 needs about 72 MiB).
const LIMIT_CAPACITY: usize = 256 << 20;
/// Iterations run before timing (and before criterion's own warm-up).
const WARM_ITERS: usize = 3;

const W1_OBJECTS: usize = 1_000_000;
const W2_OBJECTS: usize = 1_000;
const W3_PUSHES: usize = 1_000_000;
const W4_VECS: usize = 64;
const W4_LEN: usize = 1_000;
const W5_ALLOCS: usize = 200;
const W5_STRINGS: usize = 10;
/// W5 frames in the sequence: the definition's 10,000 distinct frames (sizes and
/// alignments drawn per allocation), played in order, then again from the start.
const W5_FRAMES: usize = 10_000;
/// Frames timed per batch in W5's paired comparisons.
const W5_BATCH: u32 = 2_000;

// ------------------------------------------------------------------------- helpers

#[inline(always)]
fn lay(size: usize, align: usize) -> Layout {
    match Layout::from_size_align(size, align) {
        Ok(l) => l,
        Err(_) => bad_layout(size, align),
    }
}

#[cold]
#[inline(never)]
fn bad_layout(size: usize, align: usize) -> ! {
    panic!("bad layout {size}/{align}")
}

/// Writes one byte so that the allocation is really touched.
#[inline(always)]
fn touch(p: NonNull<u8>, v: usize) {
    // SAFETY: every caller passes a fresh allocation of at least one byte.
    unsafe { p.as_ptr().write_volatile(v as u8) };
}

/// `allocator_api2` (0.2) allocator over `MiMalloc`'s `GlobalAlloc` methods.
#[derive(Clone, Copy)]
struct MiAlloc;

fn dangling(layout: Layout) -> NonNull<u8> {
    NonNull::new(std::ptr::without_provenance_mut(layout.align())).unwrap_or(NonNull::dangling())
}

// SAFETY: every non-empty block comes from mimalloc and goes back to it with its layout;
// `realloc` keeps the contents; empty blocks are dangling and never freed.
unsafe impl Allocator for MiAlloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(NonNull::slice_from_raw_parts(dangling(layout), 0));
        }
        // SAFETY: non-zero size.
        let p = unsafe { MiMalloc.alloc(layout) };
        NonNull::new(p)
            .map(|p| NonNull::slice_from_raw_parts(p, layout.size()))
            .ok_or(AllocError)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: allocated by `MiMalloc` with this layout (the caller's contract).
            unsafe { MiMalloc.dealloc(ptr.as_ptr(), layout) }
        }
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.resize(ptr, old, new) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.resize(ptr, old, new) }
    }
}

impl MiAlloc {
    /// Grow or shrink: mimalloc's `realloc` when both sizes are non-zero and the alignment
    /// is unchanged, else allocate, copy what both hold, free.
    ///
    /// # Safety
    /// `ptr` is live in this allocator with layout `old`.
    #[inline]
    unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 || new.size() == 0 || old.align() != new.align() {
            let q = self.allocate(new)?;
            // SAFETY: `q` is fresh, `ptr` live with `old.size()` bytes; we copy the bytes
            // both hold, then free the old block.
            unsafe {
                q.cast::<u8>()
                    .as_ptr()
                    .copy_from_nonoverlapping(ptr.as_ptr(), old.size().min(new.size()));
                self.deallocate(ptr, old);
            }
            return Ok(q);
        }
        // SAFETY: `ptr` is a live mimalloc block with layout `old`; `new.size()` is non-zero.
        let p = unsafe { MiMalloc.realloc(ptr.as_ptr(), old, new.size()) };
        NonNull::new(p)
            .map(|p| NonNull::slice_from_raw_parts(p, new.size()))
            .ok_or(AllocError)
    }
}

/// `allocator_api2` 0.2 view of a `BlinkAlloc` (whose own impl is for allocator-api2 0.4).
#[derive(Clone, Copy)]
struct BlinkRef<'a>(&'a BlinkAlloc);

// SAFETY: forwards to `BlinkAlloc`'s inherent methods, which have the same contracts as
// its own `Allocator` impl.
unsafe impl Allocator for BlinkRef<'_> {
    #[inline(always)]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.0.allocate(layout).map_err(|_| AllocError)
    }

    #[inline(always)]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's contract).
        unsafe { self.0.deallocate(ptr, layout.size()) }
    }

    #[inline(always)]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: `ptr` is live in this allocator with `old` (the caller's contract).
        unsafe { self.0.resize(ptr, old, new) }.map_err(|_| AllocError)
    }

    #[inline(always)]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: as in `grow`.
        unsafe { self.0.resize(ptr, old, new) }.map_err(|_| AllocError)
    }
}

/// W3 body: one vector pushed to `n` elements.
#[inline(always)]
fn push_in<A: Allocator>(a: A, n: usize) -> u64 {
    let mut v = AVec::new_in(a);
    for i in 0..n {
        v.push(i as u32);
    }
    black_box(v.as_ptr());
    u64::from(v[n / 2])
}

#[inline(always)]
fn push_std(n: usize) -> u64 {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(i as u32);
    }
    black_box(v.as_ptr());
    u64::from(v[n / 2])
}

/// W4 body: `W4_VECS` vectors grown round-robin to `W4_LEN` elements each.
#[inline(always)]
fn interleave_in<A: Allocator + Copy>(a: A) -> u64 {
    let mut vecs: [AVec<u64, A>; W4_VECS] = std::array::from_fn(|_| AVec::new_in(a));
    for j in 0..W4_LEN {
        for v in &mut vecs {
            v.push(j as u64);
        }
    }
    black_box(&vecs);
    vecs.iter().map(|v| v[W4_LEN - 1]).sum()
}

#[inline(always)]
fn interleave_std() -> u64 {
    let mut vecs: [Vec<u64>; W4_VECS] = std::array::from_fn(|_| Vec::new());
    for j in 0..W4_LEN {
        for v in &mut vecs {
            v.push(j as u64);
        }
    }
    black_box(&vecs);
    vecs.iter().map(|v| v[W4_LEN - 1]).sum()
}

// ------------------------------------------------------------------------- contenders

/// One allocator under test.
trait Contender {
    /// Heaps free every object; arenas do nothing per object and reset instead.
    const FREES_EACH: bool;
    fn alloc(&self, layout: Layout) -> NonNull<u8>;
    /// Allocates `s.len()` bytes (align 1) and copies `s` in.
    fn alloc_str(&self, s: &str) -> NonNull<u8> {
        let p = self.alloc(lay(s.len(), 1));
        // SAFETY: `p` is a fresh allocation of `s.len()` bytes.
        unsafe { p.as_ptr().copy_from_nonoverlapping(s.as_ptr(), s.len()) };
        p
    }
    /// # Safety
    /// `p` came from `alloc` on this contender with `layout` and is freed once.
    unsafe fn free(&self, _p: NonNull<u8>, _layout: Layout) {}
    /// W2's allocations of one frame: `W2_OBJECTS` of `layout`, each touched (and kept in
    /// `ptrs` by heaps, to free them). One at a time through `alloc`, unless a user of the
    /// allocator would hold something for such a loop (`nebula-hot`: a `HotCursor`).
    #[inline(always)]
    fn particles(&mut self, layout: Layout, ptrs: &mut Vec<NonNull<u8>>) {
        for i in 0..W2_OBJECTS {
            let p = self.alloc(layout);
            touch(p, i);
            if Self::FREES_EACH {
                ptrs.push(p);
            }
        }
    }
    fn reset(&mut self) {}
    /// W3: one vector pushed to `n` elements, then reset.
    fn vec_push(&mut self, n: usize) -> u64;
    /// W4: `W4_VECS` vectors grown round-robin, then reset.
    fn interleaved(&mut self) -> u64;
}

struct Nebula<'p>(MemoryArena<'p>);

impl Contender for Nebula<'_> {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        self.0.alloc(layout)
    }
    #[inline(always)]
    fn alloc_str(&self, s: &str) -> NonNull<u8> {
        NonNull::from(self.0.alloc_str(s)).cast()
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(&self.0, n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(&self.0);
        self.0.reset();
        r
    }
}

/// The arena with each W2 frame's allocations made through a `HotCursor`.
struct NebulaHot<'p>(MemoryArena<'p>);

impl Contender for NebulaHot<'_> {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        self.0.alloc(layout)
    }
    #[inline(always)]
    fn particles(&mut self, layout: Layout, _ptrs: &mut Vec<NonNull<u8>>) {
        let hot = self.0.hot_cursor();
        for i in 0..W2_OBJECTS {
            touch(hot.alloc(layout), i);
        }
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(&self.0, n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(&self.0);
        self.0.reset();
        r
    }
}

struct Floor(Limit);

impl Contender for Floor {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        self.0.alloc(layout)
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(&self.0, n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(&self.0);
        self.0.reset();
        r
    }
}

struct Sys;

impl Contender for Sys {
    const FREES_EACH: bool = true;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        // SAFETY: every layout of these workloads has a non-zero size.
        let p = unsafe { System.alloc(layout) };
        NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { System.dealloc(p.as_ptr(), layout) }
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        push_std(n)
    }
    fn interleaved(&mut self) -> u64 {
        interleave_std()
    }
}

struct Mi;

impl Contender for Mi {
    const FREES_EACH: bool = true;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        // SAFETY: every layout of these workloads has a non-zero size.
        let p = unsafe { MiMalloc.alloc(layout) };
        NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { MiMalloc.dealloc(p.as_ptr(), layout) }
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        push_in(MiAlloc, n)
    }
    fn interleaved(&mut self) -> u64 {
        interleave_in(MiAlloc)
    }
}

struct Bumpalo(bumpalo::Bump);

impl Contender for Bumpalo {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        self.0.alloc_layout(layout)
    }
    #[inline(always)]
    fn alloc_str(&self, s: &str) -> NonNull<u8> {
        NonNull::from(self.0.alloc_str(s)).cast()
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(&self.0, n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(&self.0);
        self.0.reset();
        r
    }
}

struct BumpScope(bump_scope::Bump);

impl Contender for BumpScope {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        BumpAllocatorTyped::allocate_layout(&self.0, layout)
    }
    #[inline(always)]
    fn alloc_str(&self, s: &str) -> NonNull<u8> {
        NonNull::from(self.0.alloc_str(s).into_mut()).cast()
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(&self.0, n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(&self.0);
        self.0.reset();
        r
    }
}

struct Blink(BlinkAlloc);

impl Contender for Blink {
    const FREES_EACH: bool = false;
    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        match self.0.allocate(layout) {
            Ok(p) => p.cast(),
            Err(_) => handle_alloc_error(layout),
        }
    }
    #[inline(always)]
    fn reset(&mut self) {
        self.0.reset();
    }
    fn vec_push(&mut self, n: usize) -> u64 {
        let r = push_in(BlinkRef(&self.0), n);
        self.0.reset();
        r
    }
    fn interleaved(&mut self) -> u64 {
        let r = interleave_in(BlinkRef(&self.0));
        self.0.reset();
        r
    }
}

fn new_pool(name: &'static str) -> MemoryPool {
    match MemoryPool::new(name, POOL_CAPACITY) {
        Ok(p) => p,
        Err(e) => panic!("cannot create pool {name}: {e}"),
    }
}

/// Runs `$body` once per contender, with `$name` bound to its name and `$make` to a
/// `Fn() -> Contender` (nebula's arenas take blocks from `$pool`).
macro_rules! each_contender {
    ($pool:expr, |$name:ident, $make:ident| $body:expr) => {{
        let pool: &MemoryPool = $pool;
        {
            let $name = "nebula";
            let $make = || Nebula(MemoryArena::new(pool));
            $body;
        }
        {
            let $name = "limit";
            let $make = || Floor(Limit::new(LIMIT_CAPACITY));
            $body;
        }
        {
            let $name = "system";
            let $make = || Sys;
            $body;
        }
        {
            let $name = "mimalloc";
            let $make = || Mi;
            $body;
        }
        {
            let $name = "bumpalo";
            let $make = || Bumpalo(bumpalo::Bump::new());
            $body;
        }
        {
            let $name = "bump-scope";
            let $make = || BumpScope(bump_scope::Bump::new());
            $body;
        }
        {
            let $name = "blink-alloc";
            let $make = || Blink(BlinkAlloc::new());
            $body;
        }
    }};
}

// ------------------------------------------------------------------------- recording

/// (workload key, contender, value in the workload's unit) for every routine call.
static SEEN: Mutex<Vec<(&'static str, &'static str, f64)>> = Mutex::new(Vec::new());

fn record(key: &'static str, name: &'static str, value: f64) {
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, name, value));
}

/// Median of the last `samples` values recorded for (`key`, `name`): criterion's
/// measurement samples (its warm-up calls come first).
fn median(key: &str, name: &str, samples: usize) -> Option<f64> {
    let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let all: Vec<f64> = seen
        .iter()
        .filter(|(k, n, _)| *k == key && *n == name)
        .map(|&(_, _, v)| v)
        .collect();
    if all.is_empty() {
        return None;
    }
    let mut last = all[all.len().saturating_sub(samples)..].to_vec();
    last.sort_by(f64::total_cmp);
    let n = last.len();
    Some(if n % 2 == 1 {
        last[n / 2]
    } else {
        (last[n / 2 - 1] + last[n / 2]) / 2.0
    })
}

fn group<'a>(
    c: &'a mut Criterion,
    title: &str,
    samples: usize,
    warm_ms: u64,
    measure_ms: u64,
) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(title);
    g.sample_size(samples)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(warm_ms))
        .measurement_time(Duration::from_millis(measure_ms));
    g
}

/// Times whole iterations of `one` (after `WARM_ITERS` untimed ones); records
/// `ns per iteration * scale`.
fn bench_loop<S>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    key: &'static str,
    name: &'static str,
    scale: f64,
    state: &mut S,
    mut one: impl FnMut(&mut S),
) {
    for _ in 0..WARM_ITERS {
        one(state);
    }
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                one(state);
            }
            let d = t.elapsed();
            record(key, name, d.as_secs_f64() * 1e9 / iters as f64 * scale);
            d
        })
    });
}

/// Like [`bench_loop`], but `one` times its own phase and returns it.
fn bench_phase<S>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    key: &'static str,
    name: &'static str,
    scale: f64,
    state: &mut S,
    mut one: impl FnMut(&mut S) -> Duration,
) {
    for _ in 0..WARM_ITERS {
        one(state);
    }
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut d = Duration::ZERO;
            for _ in 0..iters {
                d += one(state);
            }
            record(key, name, d.as_secs_f64() * 1e9 / iters as f64 * scale);
            d
        })
    });
}

/// Rounds of a paired comparison.
const PAIRED_ROUNDS: usize = 31;

/// (workload key, "nebula/other", median of the per-round time ratios).
static PAIRED: Mutex<Vec<(&'static str, &'static str, f64)>> = Mutex::new(Vec::new());

/// Times `iters` whole iterations of `one`.
fn timed<S>(state: &mut S, iters: u32, one: &mut impl FnMut(&mut S)) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        one(state);
    }
    t.elapsed()
}

/// A drift-resistant A/B comparison: alternates `ta` on `a` and `tb` on `b` (each returning
/// the time of one batch) for `PAIRED_ROUNDS` rounds, swapping the order every round, and
/// records the median of the per-round ratios `a / b`. Slow changes of the machine's speed
/// (this VM's speed varies by tens of percent from second to second) cancel out, which
/// they do not between two criterion benches run seconds apart.
/// Whether the command line's filters (criterion's positional arguments, e.g.
/// `cargo bench --bench workloads -- W2`) select workload `id` ("W1".."W6"): the paired
/// comparisons run outside criterion, so they check this themselves. Criterion's test and
/// list modes (`--test`, `--list`, as under `cargo test --benches`) skip them.
fn selected(id: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--test" || a == "--list") {
        return false;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.contains(id) || id.contains(f.as_str()))
}

fn paired<A, B>(
    key: &'static str,
    pair: &'static str,
    a: &mut A,
    mut ta: impl FnMut(&mut A) -> Duration,
    b: &mut B,
    mut tb: impl FnMut(&mut B) -> Duration,
) {
    if !selected(&key[..2]) {
        return;
    }
    // Warm both.
    ta(a);
    tb(b);
    let mut ratios: Vec<f64> = (0..PAIRED_ROUNDS)
        .map(|i| {
            let (x, y) = if i % 2 == 0 {
                let x = ta(a);
                (x, tb(b))
            } else {
                let y = tb(b);
                (ta(a), y)
            };
            x.as_secs_f64() / y.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let m = ratios[ratios.len() / 2];
    println!(
        "paired {key} {pair}: median ratio {m:.3} (p25 {:.3}, p75 {:.3}, {PAIRED_ROUNDS} alternating rounds)",
        ratios[ratios.len() / 4],
        ratios[ratios.len() * 3 / 4]
    );
    PAIRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, pair, m));
}

fn paired_ratio(key: &str, pair: &str) -> Option<f64> {
    PAIRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(k, p, _)| *k == key && *p == pair)
        .map(|&(_, _, r)| r)
}

fn nebula(pool: &MemoryPool) -> Nebula<'_> {
    Nebula(MemoryArena::new(pool))
}

fn floor() -> Floor {
    Floor(Limit::new(LIMIT_CAPACITY))
}

// ------------------------------------------------------------------------- W1

const W1_SAMPLES: usize = 10;

fn w1_sizes() -> Vec<u8> {
    let mut rng = SplitMix64(SEED);
    (0..W1_OBJECTS).map(|_| rng.range(8, 128) as u8).collect()
}

/// One W1 run: returns (alloc phase, free-all phase).
#[inline(always)]
fn w1_run<C: Contender>(
    c: &mut C,
    sizes: &[u8],
    ptrs: &mut Vec<NonNull<u8>>,
) -> (Duration, Duration) {
    ptrs.clear();
    let t0 = Instant::now();
    for (i, &s) in sizes.iter().enumerate() {
        let p = c.alloc(lay(usize::from(s), 8));
        touch(p, i);
        if C::FREES_EACH {
            ptrs.push(p);
        }
    }
    let t1 = Instant::now();
    if C::FREES_EACH {
        for (&p, &s) in ptrs.iter().zip(sizes) {
            // SAFETY: allocated just above with this layout, freed once.
            unsafe { c.free(p, lay(usize::from(s), 8)) };
        }
    }
    c.reset();
    let t2 = Instant::now();
    (t1 - t0, t2 - t1)
}

fn w1(c: &mut Criterion) {
    let sizes = w1_sizes();
    let mut ptrs: Vec<NonNull<u8>> = Vec::with_capacity(W1_OBJECTS);
    let pool = new_pool("w1-burst");
    let scale = 1.0 / W1_OBJECTS as f64;
    {
        let mut g = group(c, "W1 burst-1M alloc", W1_SAMPLES, 1000, 3000);
        each_contender!(&pool, |name, make| {
            let mut state = make();
            bench_phase(&mut g, "W1-alloc", name, scale, &mut state, |s| {
                w1_run(s, &sizes, &mut ptrs).0
            });
        });
        g.finish();
    }
    {
        // Timer overhead, for reading the arenas' free-all times (a single reset).
        let mut d: Vec<Duration> = (0..1001)
            .map(|_| {
                let t = Instant::now();
                t.elapsed()
            })
            .collect();
        d.sort();
        println!(
            "timer overhead (Instant::now + elapsed), median: {:?}",
            d[500]
        );
        let mut g = group(c, "W1 burst-1M free-all", W1_SAMPLES, 1000, 3000);
        each_contender!(&pool, |name, make| {
            let mut state = make();
            bench_phase(&mut g, "W1-free", name, 1e-3, &mut state, |s| {
                w1_run(s, &sizes, &mut ptrs).1
            });
        });
        g.finish();
    }
    let (mut n, mut l, mut sys) = (nebula(&pool), floor(), Sys);
    let mut ptrs2: Vec<NonNull<u8>> = Vec::with_capacity(W1_OBJECTS);
    paired(
        "W1-alloc",
        "nebula/limit",
        &mut n,
        |s| w1_run(s, &sizes, &mut ptrs).0,
        &mut l,
        |s| w1_run(s, &sizes, &mut ptrs2).0,
    );
    paired(
        "W1-total",
        "nebula/system",
        &mut n,
        |s| {
            let (a, f) = w1_run(s, &sizes, &mut ptrs);
            a + f
        },
        &mut sys,
        |s| {
            let (a, f) = w1_run(s, &sizes, &mut ptrs2);
            a + f
        },
    );
    // The floor against System on the same measure: what any arena can reach here.
    paired(
        "W1-total",
        "limit/system",
        &mut l,
        |s| {
            let (a, f) = w1_run(s, &sizes, &mut ptrs);
            a + f
        },
        &mut sys,
        |s| {
            let (a, f) = w1_run(s, &sizes, &mut ptrs2);
            a + f
        },
    );
}

// ------------------------------------------------------------------------- W2

const W2_SAMPLES: usize = 20;

#[inline(always)]
fn w2_frame<C: Contender>(c: &mut C, ptrs: &mut Vec<NonNull<u8>>) {
    let layout = lay(32, 16);
    c.particles(layout, ptrs);
    if C::FREES_EACH {
        for p in ptrs.drain(..) {
            // SAFETY: allocated just above with `layout`, freed once.
            unsafe { c.free(p, layout) };
        }
    }
    c.reset();
}

fn w2(c: &mut Criterion) {
    let pool = new_pool("w2-particles");
    let mut ptrs: Vec<NonNull<u8>> = Vec::with_capacity(W2_OBJECTS);
    let mut g = group(c, "W2 particles", W2_SAMPLES, 500, 2000);
    each_contender!(&pool, |name, make| {
        let mut state = make();
        bench_loop(&mut g, "W2", name, 1e-3, &mut state, |s| {
            w2_frame(s, &mut ptrs)
        });
    });
    let mut hot = NebulaHot(MemoryArena::new(&pool));
    bench_loop(&mut g, "W2", "nebula-hot", 1e-3, &mut hot, |s| {
        w2_frame(s, &mut ptrs)
    });
    g.finish();
    let (mut n, mut l) = (nebula(&pool), floor());
    let mut ptrs2: Vec<NonNull<u8>> = Vec::with_capacity(W2_OBJECTS);
    paired(
        "W2",
        "nebula/limit",
        &mut n,
        |s| timed(s, 2000, &mut |s| w2_frame(s, &mut ptrs)),
        &mut l,
        |s| timed(s, 2000, &mut |s| w2_frame(s, &mut ptrs2)),
    );
    paired(
        "W2",
        "nebula-hot/limit",
        &mut hot,
        |s| timed(s, 2000, &mut |s| w2_frame(s, &mut ptrs)),
        &mut l,
        |s| timed(s, 2000, &mut |s| w2_frame(s, &mut ptrs2)),
    );
}

// ------------------------------------------------------------------------- W3

const W3_SAMPLES: usize = 20;

fn w3(c: &mut Criterion) {
    let pool = new_pool("w3-vec-push");
    let mut g = group(c, "W3 vec-push", W3_SAMPLES, 500, 2000);
    each_contender!(&pool, |name, make| {
        let mut state = make();
        bench_loop(
            &mut g,
            "W3",
            name,
            1.0 / W3_PUSHES as f64,
            &mut state,
            |s| {
                black_box(s.vec_push(W3_PUSHES));
            },
        );
    });
    g.finish();
    let (mut n, mut l, mut sys) = (nebula(&pool), floor(), Sys);
    let mut one = |s: &mut Nebula<'_>| {
        black_box(s.vec_push(W3_PUSHES));
    };
    paired(
        "W3",
        "nebula/limit",
        &mut n,
        |s| timed(s, 4, &mut one),
        &mut l,
        |s| {
            timed(s, 4, &mut |s: &mut Floor| {
                black_box(s.vec_push(W3_PUSHES));
            })
        },
    );
    paired(
        "W3",
        "nebula/system",
        &mut n,
        |s| timed(s, 4, &mut one),
        &mut sys,
        |s| {
            timed(s, 4, &mut |s: &mut Sys| {
                black_box(s.vec_push(W3_PUSHES));
            })
        },
    );
}

// ------------------------------------------------------------------------- W4

const W4_SAMPLES: usize = 20;

fn w4(c: &mut Criterion) {
    let pool = new_pool("w4-interleaved");
    let mut g = group(c, "W4 interleaved-vecs", W4_SAMPLES, 500, 2000);
    each_contender!(&pool, |name, make| {
        let mut state = make();
        bench_loop(&mut g, "W4", name, 1e-3, &mut state, |s| {
            black_box(s.interleaved());
        });
    });
    g.finish();
    let (mut n, mut l, mut sys) = (nebula(&pool), floor(), Sys);
    let mut one = |s: &mut Nebula<'_>| {
        black_box(s.interleaved());
    };
    paired(
        "W4",
        "nebula/system",
        &mut n,
        |s| timed(s, 8, &mut one),
        &mut sys,
        |s| {
            timed(s, 8, &mut |s: &mut Sys| {
                black_box(s.interleaved());
            })
        },
    );
    paired(
        "W4",
        "nebula/limit",
        &mut n,
        |s| timed(s, 8, &mut one),
        &mut l,
        |s| {
            timed(s, 8, &mut |s: &mut Floor| {
                black_box(s.interleaved());
            })
        },
    );
}

// ------------------------------------------------------------------------- W5

const W5_SAMPLES: usize = 20;

/// One W5 operation, packed (the sequence holds 2.1 million): an allocation of `size`
/// bytes aligned to `1 << align_log`, or, with `align_log == STR`, a string of `size`
/// bytes copied in.
#[derive(Clone, Copy)]
struct Op {
    size: u16,
    align_log: u8,
}

const STR: u8 = u8::MAX;
const W5_OPS: usize = W5_ALLOCS + W5_STRINGS;

/// The whole W5 sequence, `W5_OPS` operations per frame. Each frame: 200 allocations of
/// 16..=4096 bytes with the alignment drawn from {8, 16, 32, 64}, and after every 20th a
/// string of 20..=200 bytes.
fn w5_ops() -> Vec<Op> {
    let mut rng = SplitMix64(SEED ^ 5);
    let mut ops = Vec::with_capacity(W5_FRAMES * W5_OPS);
    for _ in 0..W5_FRAMES {
        for i in 0..W5_ALLOCS {
            let size = rng.range(16, 4096) as u16;
            let align_log = 3 + rng.range(0, 3) as u8;
            ops.push(Op { size, align_log });
            if i % (W5_ALLOCS / W5_STRINGS) == W5_ALLOCS / W5_STRINGS - 1 {
                let size = rng.range(20, 200) as u16;
                ops.push(Op {
                    size,
                    align_log: STR,
                });
            }
        }
    }
    ops
}

struct W5<C> {
    c: C,
    next: usize,
    live: Vec<(NonNull<u8>, Layout)>,
}

impl<C> W5<C> {
    fn new(c: C) -> W5<C> {
        W5 {
            c,
            next: 0,
            live: Vec::with_capacity(W5_OPS),
        }
    }
}

/// The next frame of the sequence: its operations, then free all (heaps) and reset.
#[inline(always)]
fn w5_frame<C: Contender>(st: &mut W5<C>, ops: &[Op], text: &str) {
    let frame = &ops[st.next * W5_OPS..(st.next + 1) * W5_OPS];
    st.next = (st.next + 1) % W5_FRAMES;
    for (i, op) in frame.iter().enumerate() {
        let size = usize::from(op.size);
        if op.align_log == STR {
            let p = st.c.alloc_str(&text[..size]);
            if C::FREES_EACH {
                st.live.push((p, lay(size, 1)));
            }
        } else {
            let l = lay(size, 1 << op.align_log);
            let p = st.c.alloc(l);
            touch(p, i);
            if C::FREES_EACH {
                st.live.push((p, l));
            }
        }
    }
    if C::FREES_EACH {
        for (p, l) in st.live.drain(..) {
            // SAFETY: allocated just above with `l`, freed once.
            unsafe { st.c.free(p, l) };
        }
    }
    st.c.reset();
}

fn w5(c: &mut Criterion) {
    let ops = w5_ops();
    let text: String = (0..200)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let pool = new_pool("w5-mixed");
    let mut g = group(c, "W5 mixed-frame", W5_SAMPLES, 500, 2000);
    each_contender!(&pool, |name, make| {
        let mut state = W5::new(make());
        // Warm up on the first frames so that each arena has grown to the frame size.
        for _ in 0..100 {
            w5_frame(&mut state, &ops, &text);
        }
        bench_loop(&mut g, "W5", name, 1e-3, &mut state, |s| {
            w5_frame(s, &ops, &text)
        });
    });
    g.finish();
    let mut n = W5::new(nebula(&pool));
    let mut l = W5::new(floor());
    let mut b = W5::new(BumpScope(bump_scope::Bump::new()));
    paired(
        "W5",
        "nebula/limit",
        &mut n,
        |s: &mut W5<Nebula<'_>>| timed(s, W5_BATCH, &mut |s| w5_frame(s, &ops, &text)),
        &mut l,
        |s: &mut W5<Floor>| timed(s, W5_BATCH, &mut |s| w5_frame(s, &ops, &text)),
    );
    paired(
        "W5",
        "nebula/bump-scope",
        &mut n,
        |s: &mut W5<Nebula<'_>>| timed(s, W5_BATCH, &mut |s| w5_frame(s, &ops, &text)),
        &mut b,
        |s: &mut W5<BumpScope>| timed(s, W5_BATCH, &mut |s| w5_frame(s, &ops, &text)),
    );
}

// ------------------------------------------------------------------------- W6

const W6_SAMPLES: usize = 15;

/// W2 frames on `threads` threads at once, one contender (arena) per thread, created and
/// warmed up in the thread before a barrier. Records wall-clock µs per iteration (one
/// frame on each thread), from the first thread's start to the last thread's end.
fn w6_bench<C: Contender, F: Fn() -> C + Sync>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    key: &'static str,
    name: &'static str,
    make: &F,
    threads: usize,
) {
    g.bench_function(format!("{name}/{threads}t"), |b| {
        b.iter_custom(|iters| {
            let barrier = Barrier::new(threads);
            let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| {
                            let mut c = make();
                            let mut ptrs = Vec::with_capacity(W2_OBJECTS);
                            for _ in 0..WARM_ITERS {
                                w2_frame(&mut c, &mut ptrs);
                            }
                            barrier.wait();
                            let t0 = Instant::now();
                            for _ in 0..iters {
                                w2_frame(&mut c, &mut ptrs);
                            }
                            (t0, Instant::now())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| match h.join() {
                        Ok(span) => span,
                        Err(_) => panic!("W6 worker panicked"),
                    })
                    .collect()
            });
            let start = spans.iter().map(|s| s.0).min().unwrap_or_else(Instant::now);
            let end = spans.iter().map(|s| s.1).max().unwrap_or(start);
            let d = end - start;
            record(key, name, d.as_secs_f64() * 1e6 / iters as f64);
            d
        })
    });
}

/// Pure register arithmetic, no memory traffic.
fn spin(n: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..n {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
    }
    x
}

/// The machine's own 2-thread scaling for pure computation (no allocator involved): the
/// ceiling any allocator's W6 scaling can reach here. Median of 5 trials.
fn machine_ceiling() -> f64 {
    const N: u64 = 100_000_000;
    let mut s: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            black_box(spin(black_box(N)));
            let t1 = t.elapsed();
            let t = Instant::now();
            std::thread::scope(|sc| {
                let h: Vec<_> = (0..2).map(|_| sc.spawn(|| spin(black_box(N)))).collect();
                for h in h {
                    black_box(h.join().ok());
                }
            });
            2.0 * t1.as_secs_f64() / t.elapsed().as_secs_f64()
        })
        .collect();
    s.sort_by(f64::total_cmp);
    s[2]
}

static CEILING: Mutex<Option<f64>> = Mutex::new(None);

fn w6(c: &mut Criterion) {
    let ceiling = machine_ceiling();
    println!(
        "W6: {} CPUs reported; pure-compute 2-thread scaling on this machine = {ceiling:.2}x",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    *CEILING.lock().unwrap_or_else(|e| e.into_inner()) = Some(ceiling);
    let pool = new_pool("w6-two-threads");
    let mut g = group(c, "W6 two-threads", W6_SAMPLES, 500, 2000);
    each_contender!(&pool, |name, make| {
        w6_bench(&mut g, "W6-1t", name, &make, 1);
        w6_bench(&mut g, "W6-2t", name, &make, 2);
    });
    let make_hot = || NebulaHot(MemoryArena::new(&pool));
    w6_bench(&mut g, "W6-1t", "nebula-hot", &make_hot, 1);
    w6_bench(&mut g, "W6-2t", "nebula-hot", &make_hot, 2);
    g.finish();
}

// ------------------------------------------------------------------------- summary

const NAMES: [&str; 8] = [
    "nebula",
    "limit",
    "nebula-hot",
    "system",
    "mimalloc",
    "bumpalo",
    "bump-scope",
    "blink-alloc",
];

/// Best (lowest) median among the peers (neither `limit` nor nebula itself).
fn best_peer(key: &str, samples: usize) -> Option<(&'static str, f64)> {
    NAMES[3..]
        .iter()
        .filter_map(|&n| median(key, n, samples).map(|m| (n, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

fn summary(_c: &mut Criterion) {
    let rows: [(&str, &str, usize); 8] = [
        ("W1-alloc", "ns/alloc", W1_SAMPLES),
        ("W1-free", "µs/free-all", W1_SAMPLES),
        ("W2", "µs/frame", W2_SAMPLES),
        ("W3", "ns/push", W3_SAMPLES),
        ("W4", "µs/run", W4_SAMPLES),
        ("W5", "µs/frame", W5_SAMPLES),
        ("W6-1t", "µs/frame (1 thread)", W6_SAMPLES),
        ("W6-2t", "µs/2 frames (2 threads)", W6_SAMPLES),
    ];
    println!();
    println!("==== workloads summary: medians of criterion's measured samples ====");
    print!("{:<9} {:<24}", "workload", "unit");
    for n in NAMES {
        print!(" {n:>11}");
    }
    println!();
    for (key, unit, samples) in rows {
        if NAMES.iter().all(|n| median(key, n, samples).is_none()) {
            continue;
        }
        print!("{key:<9} {unit:<24}");
        for n in NAMES {
            match median(key, n, samples) {
                Some(m) if m < 10.0 => print!(" {m:>11.3}"),
                Some(m) => print!(" {m:>11.1}"),
                None => print!(" {:>11}", "-"),
            }
        }
        println!();
    }
    println!();
    println!("ratios (nebula / other; < 1 means nebula is faster):");
    for (key, _, samples) in rows {
        let Some(neb) = median(key, "nebula", samples) else {
            continue;
        };
        let lim = median(key, "limit", samples).map_or(f64::NAN, |l| neb / l);
        let sys = median(key, "system", samples).map_or(f64::NAN, |s| neb / s);
        let (best, bv) = best_peer(key, samples).unwrap_or(("-", f64::NAN));
        println!(
            "  {key:<9} vs limit {lim:6.3}   vs system {sys:7.4}   vs best peer ({best}) {:6.3}",
            neb / bv
        );
    }
    if let (Some(a), Some(f), Some(s)) = (
        median("W1-alloc", "nebula", W1_SAMPLES),
        median("W1-free", "nebula", W1_SAMPLES),
        median("W1-alloc", "system", W1_SAMPLES).zip(median("W1-free", "system", W1_SAMPLES)),
    ) {
        let neb_total = a * W1_OBJECTS as f64 + f * 1e3;
        let sys_total = s.0 * W1_OBJECTS as f64 + s.1 * 1e3;
        println!(
            "  W1 alloc+free-all total: nebula {:.3} ms, system {:.3} ms, system/nebula = {:.1}x",
            neb_total / 1e6,
            sys_total / 1e6,
            sys_total / neb_total
        );
    }
    println!();
    println!("W6 scaling (2 threads vs 1: 2 * t(1 frame, 1 thread) / t(2 concurrent frames)):");
    if let Some(c) = *CEILING.lock().unwrap_or_else(|e| e.into_inner()) {
        println!("  machine ceiling (pure compute) {c:.2}x");
    }
    for n in NAMES {
        if let (Some(t1), Some(t2)) = (
            median("W6-1t", n, W6_SAMPLES),
            median("W6-2t", n, W6_SAMPLES),
        ) {
            println!(
                "  {n:<12} 1 thread {:>10.0} frames/s   2 threads {:>10.0} frames/s   scaling {:.2}x",
                1e6 / t1,
                2e6 / t2,
                2.0 * t1 / t2
            );
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "MET" } else { "MISSED" }
}

/// The targets of the brief, judged on the paired ratios (drift-resistant) and, for
/// reference, on the ratio of criterion medians.
fn targets(_c: &mut Criterion) {
    let med = |key: &str, name: &str, samples: usize| median(key, name, samples);
    let ratio = |key: &str, other: &str, samples: usize| {
        Some(med(key, "nebula", samples)? / med(key, other, samples)?)
    };
    println!();
    println!("==== targets (paired ratio; ratio of criterion medians in brackets) ====");
    let check = |label: &str, paired: Option<f64>, medians: Option<f64>, limit: f64| {
        let p = paired.map_or("-".to_string(), |r| format!("{r:.3}"));
        let m = medians.map_or("-".to_string(), |r| format!("{r:.3}"));
        let ok = paired.or(medians).is_some_and(|r| r <= limit);
        println!(
            "  {label:<44} {p:>7} [{m:>7}]  <= {limit:<6.3} {}",
            verdict(ok)
        );
    };
    check(
        "W1 alloc, nebula/limit",
        paired_ratio("W1-alloc", "nebula/limit"),
        ratio("W1-alloc", "limit", W1_SAMPLES),
        1.15,
    );
    let w1_medians = (|| {
        let n = med("W1-alloc", "nebula", W1_SAMPLES)? * W1_OBJECTS as f64
            + med("W1-free", "nebula", W1_SAMPLES)? * 1e3;
        let s = med("W1-alloc", "system", W1_SAMPLES)? * W1_OBJECTS as f64
            + med("W1-free", "system", W1_SAMPLES)? * 1e3;
        Some(n / s)
    })();
    check(
        "W1 alloc+free-all, nebula/system (1/15=0.067)",
        paired_ratio("W1-total", "nebula/system"),
        w1_medians,
        1.0 / 15.0,
    );
    if let Some(r) = paired_ratio("W1-total", "limit/system") {
        println!(
            "  {:<44} {r:>7.3}            (the floor's own ratio: System is {:.1}x slower than limit)",
            "  reference: W1 alloc+free-all, limit/system",
            1.0 / r
        );
    }
    check(
        "W2 nebula/limit",
        paired_ratio("W2", "nebula/limit"),
        ratio("W2", "limit", W2_SAMPLES),
        1.2,
    );
    check(
        "W2 nebula-hot/limit (a HotCursor per frame)",
        paired_ratio("W2", "nebula-hot/limit"),
        med("W2", "nebula-hot", W2_SAMPLES)
            .zip(med("W2", "limit", W2_SAMPLES))
            .map(|(h, l)| h / l),
        1.2,
    );
    check(
        "W3 nebula/limit",
        paired_ratio("W3", "nebula/limit"),
        ratio("W3", "limit", W3_SAMPLES),
        1.1,
    );
    check(
        "W3 nebula/system (std Vec)",
        paired_ratio("W3", "nebula/system"),
        ratio("W3", "system", W3_SAMPLES),
        1.0,
    );
    check(
        "W4 nebula/system",
        paired_ratio("W4", "nebula/system"),
        ratio("W4", "system", W4_SAMPLES),
        1.2,
    );
    check(
        "W5 nebula/limit",
        paired_ratio("W5", "nebula/limit"),
        ratio("W5", "limit", W5_SAMPLES),
        1.2,
    );
    for (name, label) in [
        ("nebula", "W6 scaling on 2 threads, nebula"),
        ("nebula-hot", "W6 scaling on 2 threads, nebula-hot"),
    ] {
        if let (Some(t1), Some(t2)) = (
            med("W6-1t", name, W6_SAMPLES),
            med("W6-2t", name, W6_SAMPLES),
        ) {
            let scaling = 2.0 * t1 / t2;
            let ceiling = CEILING
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(f64::NAN);
            println!(
                "  {label:<44} {scaling:>7.2}x (machine ceiling {ceiling:.2}x)  >= 1.8  {}",
                verdict(scaling >= 1.8)
            );
        }
    }
}

criterion_group!(benches, w1, w2, w3, w4, w5, w6, summary, targets);
criterion_main!(benches);
