//! The allocation-heavy Bevy loop of `heavy_loop/workload.rs` with the crate's
//! `TrackingAllocator` as the global allocator and `MemoryPlugin`: its time against
//! `heavy_loop_plain`'s is what tracking costs per allocation on a real frame loop.
//!
//! `cargo run --release --example heavy_loop_tracked [-- --frames N]`;
//! `scripts/heavy_loop_cost.sh` runs it in turn with the plain one and does the sums.

use std::alloc::System;

use nebula_memory::TrackingAllocator;
use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};

#[path = "heavy_loop/workload.rs"]
mod workload;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

/// The frame's heap allocation calls (`alloc` and `realloc`), every thread's: the top-level
/// tags (a parent's figures include its children's) and the untagged heap.
fn allocations(app: &bevy_app::App) -> Option<u64> {
    let ledger = app.world().resource::<MemoryLedger>();
    let tagged: u64 = ledger
        .tags()
        .filter(|(tag, _)| !tag.contains('/'))
        .map(|(_, f)| f.heap_allocs)
        .sum();
    Some(tagged + ledger.untagged_heap().heap_allocs)
}

fn main() {
    let mut app = workload::app(|app| {
        app.add_plugins(MemoryPlugin::default());
    });
    workload::run(
        "tracked (TrackingAllocator + MemoryPlugin)",
        &mut app,
        allocations,
    );
}
