//! What heap tracking costs: a `malloc`/`free` pair of 8 to 4096 bytes through the
//! system allocator, through `TrackingAllocator` over it (tracking on outside every scope,
//! on inside a scope, off), through mimalloc, and through `TrackingAllocator` over
//! mimalloc, side by side in one run.
//!
//! Two shapes of work: a pair (allocate, write a byte, free at once: the allocator's
//! hottest path, where the tracker's own instructions weigh most) and a ring of 1,024 live
//! allocations (free the oldest, allocate in its place: allocations that live a while).
//! Criterion measures the pairs; then a paired pass of each shape runs the variants in
//! turn, round after round, and prints each one's median per step and its ratio to its
//! inner allocator (the figures README quotes: a busy machine moves all variants of a
//! round together). `cargo bench --bench heap -- paired` runs the paired passes alone (a
//! filter no criterion benchmark's name matches); `cargo bench --bench heap` runs all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use mimalloc::MiMalloc;
use nebula_memory::{TrackingAllocator, ledger};

/// Sizes of the criterion runs.
const SIZES: [usize; 3] = [16, 256, 4096];

/// Sizes of the paired passes: also 8 bytes (under a granule: the tracker asks its inner
/// allocator for it 16-aligned) and 24 (not a multiple of the granule).
const PAIRED_SIZES: [usize; 5] = [8, 16, 24, 256, 4096];

/// How a variant runs: the allocator, and the tracking state around it.
#[derive(Clone, Copy)]
enum Setup {
    System,
    Tracked { on: bool, scoped: bool },
    MiMalloc,
    TrackedMiMalloc,
}

const VARIANTS: [(&str, Setup); 6] = [
    ("system", Setup::System),
    (
        "tracking on, no scope",
        Setup::Tracked {
            on: true,
            scoped: false,
        },
    ),
    (
        "tracking on, in a scope",
        Setup::Tracked {
            on: true,
            scoped: true,
        },
    ),
    (
        "tracking off",
        Setup::Tracked {
            on: false,
            scoped: false,
        },
    ),
    ("mimalloc", Setup::MiMalloc),
    ("tracking on over mimalloc", Setup::TrackedMiMalloc),
];

static TRACKED: TrackingAllocator = TrackingAllocator::new(System);
static TRACKED_MI: TrackingAllocator<MiMalloc> = TrackingAllocator::new(MiMalloc);

/// `n` allocate-write-free pairs of `layout` through `a`.
#[inline(never)]
fn pairs(a: &dyn GlobalAlloc, layout: Layout, n: u64) {
    for i in 0..n {
        // SAFETY: a non-zero layout; the pointer is written once and freed with it.
        unsafe {
            let p = a.alloc(layout);
            p.write(i as u8);
            a.dealloc(black_box(p), layout);
        }
    }
}

/// Live allocations in the ring of [`ring`].
const RING: usize = 1024;

/// `n` steps over a ring of [`RING`] live allocations of `layout` through `a`: each step
/// frees the oldest and allocates one in its place, writing a byte of it (allocations
/// that live a while, as a program's do, rather than one freed at once).
#[inline(never)]
fn ring(a: &dyn GlobalAlloc, layout: Layout, n: u64) {
    let mut live = [std::ptr::null_mut::<u8>(); RING];
    // SAFETY: non-zero layouts; each pointer is freed once, with its layout.
    unsafe {
        for p in &mut live {
            *p = a.alloc(layout);
        }
        for i in 0..n {
            let slot = &mut live[i as usize % RING];
            a.dealloc(black_box(*slot), layout);
            *slot = a.alloc(layout);
            slot.write(i as u8);
        }
        for p in live {
            a.dealloc(p, layout);
        }
    }
}

/// Runs `f` with `setup`'s allocator and tracking state.
fn with_setup<R>(setup: Setup, f: impl FnOnce(&dyn GlobalAlloc) -> R) -> R {
    match setup {
        Setup::System => f(&System),
        Setup::MiMalloc => f(&MiMalloc),
        Setup::TrackedMiMalloc => f(&TRACKED_MI),
        Setup::Tracked { on, scoped } => {
            ledger::set_heap_tracking(on);
            let scope = scoped.then(|| ledger::scope("bench/heap"));
            let r = f(&TRACKED);
            drop(scope);
            ledger::set_heap_tracking(true);
            r
        }
    }
}

fn criterion_runs(c: &mut Criterion) {
    for size in SIZES {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let mut g = c.benchmark_group(format!("heap pair {size} B (ns per alloc+free)"));
        g.measurement_time(Duration::from_secs(2));
        for (name, setup) in VARIANTS {
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| {
                    with_setup(setup, |a| {
                        let t = Instant::now();
                        pairs(a, layout, iters);
                        t.elapsed()
                    })
                })
            });
        }
        g.finish();
    }
}

/// The paired pass: `ROUNDS` rounds, each timing every variant once over `STEPS` steps of
/// `work` (the pair, then the ring).
fn paired(what: &str, work: fn(&dyn GlobalAlloc, Layout, u64)) {
    const ROUNDS: usize = 101;
    const STEPS: u64 = 200_000;
    println!(
        "\npaired pass, {what}: median ns per step over {ROUNDS} rounds, ratio to its inner allocator"
    );
    for size in PAIRED_SIZES {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let mut times = vec![Vec::with_capacity(ROUNDS); VARIANTS.len()];
        for _ in 0..ROUNDS {
            for (i, (_, setup)) in VARIANTS.iter().enumerate() {
                let ns = with_setup(*setup, |a| {
                    let t = Instant::now();
                    work(a, layout, STEPS);
                    t.elapsed().as_nanos() as f64 / STEPS as f64
                });
                times[i].push(ns);
            }
        }
        let medians: Vec<f64> = times
            .iter_mut()
            .map(|t| {
                t.sort_by(f64::total_cmp);
                t[t.len() / 2]
            })
            .collect();
        println!("  {size} B:");
        for (i, (name, setup)) in VARIANTS.iter().enumerate() {
            let base = match setup {
                Setup::System => None,
                Setup::Tracked { .. } => Some(medians[0]),
                Setup::MiMalloc => None,
                Setup::TrackedMiMalloc => Some(medians[4]),
            };
            let ratio = base.map_or(String::new(), |b| format!("  {:.3}x", medians[i] / b));
            println!("    {name:<26} {:>7.2} ns{ratio}", medians[i]);
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    criterion_runs(&mut c);
    c.final_summary();
    paired("alloc+free pair", pairs);
    paired(
        "ring of 1024 live allocations, free the oldest + alloc",
        ring,
    );
}
