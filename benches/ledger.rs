//! What the tag ledger costs: the same arena work with the arena untagged and tagged
//! (`ArenaConfig::tag`), side by side in one run.
//!
//! - W1 burst-1M: 1,000,000 allocations of 8..=128 B (align 8, one byte written each),
//!   then one reset; ns per allocation (the reset included).
//! - W5 mixed-frame: per frame 200 allocations of 16..=4096 B with the alignment drawn from
//!   {8, 16, 32, 64} and 10 strings of 20..=200 B copied in, then reset; µs per frame.
//! - reset: a steady frame's reset alone (one 32 B allocation, then reset); ns.
//! - block churn: a 256 KiB allocation that needs a block of its own, then
//!   `reset_and_release` (every block back): one block taken and returned per iteration,
//!   the ledger's whole per-block work; ns per take+return.
//!
//! - frame end at 800 lines: an app's ledger of 800 lines (40 parents of 19 systems each,
//!   as a large Bevy app has): the frame end that fills the snapshot
//!   (`ledger::end_frame_into`), and the history's share of it (`History::record` of 600
//!   frames), µs per frame.
//!
//! The ledger is touched only when a block comes or goes and by one store at reset, so the
//! first three should not move; the fourth shows the per-block price. `cargo bench --bench
//! ledger`.

use std::alloc::Layout;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nebula_memory::ledger::{self, History, LedgerSnapshot};
use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool};

#[allow(dead_code)]
mod common;
use common::SplitMix64;

fn arena(pool: &MemoryPool, tagged: bool) -> MemoryArena<'_> {
    let config = ArenaConfig::default();
    let config = if tagged {
        config.tag("bench/ledger")
    } else {
        config
    };
    MemoryArena::with_config(pool, config)
}

fn variants() -> [(&'static str, bool); 2] {
    [("untagged", false), ("tagged", true)]
}

fn w1(c: &mut Criterion, pool: &MemoryPool) {
    let mut rng = SplitMix64(42);
    let sizes: Vec<usize> = (0..1_000_000).map(|_| rng.range(8, 128)).collect();
    let mut g = c.benchmark_group("ledger W1 burst-1M (ns per allocation)");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for (name, tagged) in variants() {
        let mut a = arena(pool, tagged);
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for &s in &sizes {
                    let p = a.alloc(Layout::from_size_align(s, 8).unwrap());
                    // SAFETY: at least 8 fresh bytes.
                    unsafe { p.as_ptr().write(s as u8) };
                }
                a.reset();
            })
        });
    }
    g.finish();
}

fn w5(c: &mut Criterion, pool: &MemoryPool) {
    let mut rng = SplitMix64(5);
    let frames: Vec<(Vec<Layout>, Vec<String>)> = (0..1000)
        .map(|_| {
            let layouts = (0..200)
                .map(|_| {
                    let align = 8 << rng.range(0, 3);
                    Layout::from_size_align(rng.range(16, 4096), align).unwrap()
                })
                .collect();
            let strings = (0..10).map(|_| "x".repeat(rng.range(20, 200))).collect();
            (layouts, strings)
        })
        .collect();
    let mut g = c.benchmark_group("ledger W5 mixed-frame (per frame)");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (name, tagged) in variants() {
        let mut a = arena(pool, tagged);
        let mut i = 0;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let (layouts, strings) = &frames[i % frames.len()];
                i += 1;
                for l in layouts {
                    let p = a.alloc(*l);
                    // SAFETY: at least 16 fresh bytes.
                    unsafe { p.as_ptr().write(1) };
                }
                for s in strings {
                    black_box(a.alloc_str(s));
                }
                a.reset();
            })
        });
    }
    g.finish();
}

fn reset(c: &mut Criterion, pool: &MemoryPool) {
    let mut g = c.benchmark_group("ledger steady reset");
    for (name, tagged) in variants() {
        let mut a = arena(pool, tagged);
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                black_box(a.alloc(Layout::new::<[u64; 4]>()));
                a.reset();
            })
        });
    }
    g.finish();
}

fn churn(c: &mut Criterion, pool: &MemoryPool) {
    let mut g = c.benchmark_group("ledger block churn (take + return)");
    for (name, tagged) in variants() {
        let mut a = arena(pool, tagged);
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                black_box(a.alloc(Layout::from_size_align(256 << 10, 16).unwrap()));
                a.reset_and_release();
            })
        });
    }
    g.finish();
}

/// 800 lines: 40 parents, 19 children each (the registry's own lines come on top).
fn frame_end(c: &mut Criterion) {
    for p in 0..40 {
        for s in 0..19 {
            let tag: &'static str = Box::leak(format!("bench/app{p}/system{s}").into_boxed_str());
            ledger::clear_budgets(tag);
        }
    }
    let mut snap = LedgerSnapshot::default();
    ledger::end_frame_into(&mut snap);
    let lines = snap.tags().count();
    let mut g = c.benchmark_group(format!("ledger frame end, {lines} lines (per frame)"));
    g.bench_function("end_frame_into", |b| {
        b.iter(|| ledger::end_frame_into(black_box(&mut snap)))
    });
    let mut history = History::new(600);
    g.bench_function("History::record (600 frames)", |b| {
        b.iter(|| history.record(black_box(&snap)))
    });
    g.finish();
    println!(
        "history of {} lines, 600 frames: {} bytes",
        history.lines().count(),
        history.memory_bytes()
    );
}

fn all(c: &mut Criterion) {
    let pool = MemoryPool::new("bench-ledger", 512 << 20).expect("a 512 MiB pool");
    w1(c, &pool);
    w5(c, &pool);
    reset(c, &pool);
    churn(c, &pool);
    frame_end(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
