//! The ledger's tables as a person reads them: the compact table fits 100 columns, shows
//! the column groups that say something and folds idle lines; `{:#}` shows everything;
//! the warnings list what rose or crossed a budget. A `TrackingAllocator` is this binary's
//! global allocator; one test, so that no other test's tags show.
#![cfg(not(miri))]

use std::alloc::System;
use std::hint::black_box;

use nebula_memory::ledger::{self, Budget};
use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool, TrackingAllocator};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

fn widest(table: &str) -> usize {
    table.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn the_compact_table_fits_100_columns_and_says_what_matters() {
    // Heap only: the heap's columns, no arena columns.
    let kept = {
        let _s = ledger::scope("lt/systems/a_fairly_long_system_name");
        black_box(vec![1u8; 4096])
    };
    {
        let _s = ledger::scope("lt/systems/idle_system");
    }
    ledger::set_budget("lt/systems/budgeted", Budget::Warn(1000));
    {
        let _s = ledger::scope("lt/systems/budgeted");
        drop(black_box(vec![2u8; 10_000])); // crosses within the frame, keeps nothing
    }
    let snap = ledger::end_frame();
    let table = snap.to_string();
    println!("{table}\n\n{snap:#}\n\n{}", snap.warnings());
    assert!(
        widest(&table) <= 100,
        "{} columns:\n{table}",
        widest(&table)
    );
    assert!(table.contains("a_fairly_long_system_name"), "{table}");
    assert!(
        !table.contains("idle_system"),
        "an idle line is folded:\n{table}"
    );
    assert!(table.contains("idle lines folded"), "{table}");
    assert!(!table.contains("held"), "no arena holds a block:\n{table}");
    assert!(
        table.contains("realloc"),
        "the realloc accounting is stated:\n{table}"
    );

    // Everything, on request.
    let full = format!("{snap:#}");
    assert_eq!(full, snap.full_table().to_string());
    assert!(full.contains("idle_system") && full.contains("fallback") && full.contains("warn"));

    // The warnings: the budgeted line is over its budget this frame (its peak) and crossed
    // it once; the line that keeps 4 KiB under no budget is not listed.
    let warnings = snap.warnings().to_string();
    assert!(!snap.warnings().is_empty());
    assert!(warnings.contains("lt/systems/budgeted"), "{warnings}");
    assert!(warnings.contains("crossed a budget 1 times"), "{warnings}");
    assert!(!warnings.contains("a_fairly_long"), "{warnings}");
    let next = ledger::end_frame();
    let later = next.warnings().to_string();
    assert!(
        later.contains("crossed a budget 1 times") && !later.contains("over its warn"),
        "a quiet frame: the crossing is remembered, not over now:\n{later}"
    );

    // Arenas too: both groups, still within 100 columns.
    let pool = MemoryPool::new("lt", 8 << 20).unwrap();
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().tag("lt/arenas/meshing"));
    arena.alloc_slice_copy(&[0u8; 10_000]);
    let snap = ledger::end_frame();
    let table = snap.to_string();
    println!("{table}");
    assert!(
        widest(&table) <= 100,
        "{} columns:\n{table}",
        widest(&table)
    );
    assert!(
        table.contains("held") && table.contains("meshing"),
        "{table}"
    );
    drop(kept);
}
