//! The allocation-heavy Bevy loop of `heavy_loop/workload.rs` on the system allocator
//! alone, without `MemoryPlugin`: the baseline for `heavy_loop_tracked`. It counts no
//! allocations (a counter would be part of the cost it is the baseline for).
//!
//! `cargo run --release --example heavy_loop_plain [-- --frames N]`;
//! `scripts/heavy_loop_cost.sh` runs it in turn with the tracked one and does the sums.

#[path = "heavy_loop/workload.rs"]
mod workload;

#[global_allocator]
static HEAP: std::alloc::System = std::alloc::System;

fn main() {
    let mut app = workload::app(|_| {});
    workload::run("plain (System, no plugin)", &mut app, |_| None);
}
