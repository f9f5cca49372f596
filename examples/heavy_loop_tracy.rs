//! The allocation-heavy Bevy loop of `heavy_loop/workload.rs` under what Bevy's
//! `trace_tracy_memory` feature installs: Tracy's `ProfiledAllocator` over the system
//! allocator, a call stack of depth 100 on every allocation and free, with the Tracy
//! client running (no profiler connected: the client queues the events). Its time against
//! `heavy_loop_plain`'s, next to the sampled call stacks' against tracking without them,
//! is README's "which to use when".
//!
//! `cargo run --release --features tracy --example heavy_loop_tracy [-- --frames N]`;
//! `TRACY=1 scripts/heavy_loop_cost.sh` runs it in turn with the plain one.

#[path = "heavy_loop/workload.rs"]
mod workload;

#[global_allocator]
static HEAP: tracy_client::ProfiledAllocator<std::alloc::System> =
    tracy_client::ProfiledAllocator::new(std::alloc::System, 100);

fn main() {
    let _client = tracy_client::Client::start();
    let mut app = workload::app(|_| {});
    workload::run("tracy (ProfiledAllocator, depth 100)", &mut app, |_| None);
}
