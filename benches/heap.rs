//! What heap tracking costs: a `malloc`/`free` pair of 16, 256 and 4096 bytes through the
//! system allocator, through `TrackingAllocator` over it (tracking on outside every scope,
//! on inside a scope, off), through mimalloc, and through `TrackingAllocator` over
//! mimalloc, side by side in one run.
//!
//! Criterion measures each; then a paired pass runs the variants in turn, round after
//! round, and prints each one's median per pair and its ratio to its inner allocator (the
//! figure README quotes: a busy machine moves all variants of a round together).
//! `cargo bench --bench heap`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use mimalloc::MiMalloc;
use nebula_memory::{TrackingAllocator, ledger};

const SIZES: [usize; 3] = [16, 256, 4096];

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

/// The paired pass: `ROUNDS` rounds, each timing every variant once over `PAIRS` pairs.
fn paired() {
    const ROUNDS: usize = 41;
    const PAIRS: u64 = 200_000;
    println!(
        "\npaired pass: median ns per alloc+free pair over {ROUNDS} rounds, ratio to its inner allocator"
    );
    for size in SIZES {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let mut times = vec![Vec::with_capacity(ROUNDS); VARIANTS.len()];
        for _ in 0..ROUNDS {
            for (i, (_, setup)) in VARIANTS.iter().enumerate() {
                let ns = with_setup(*setup, |a| {
                    let t = Instant::now();
                    pairs(a, layout, PAIRS);
                    t.elapsed().as_nanos() as f64 / PAIRS as f64
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
    paired();
}
