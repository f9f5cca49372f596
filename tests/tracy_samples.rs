//! Sampled heap allocations in Tracy (feature `tracy`; without it this binary has no
//! test), with the real client and no profiler: with the receiver on and sampling on, a
//! tag's sampled allocations and their frees are handed to Tracy (its pool named at a frame
//! end); a free of a sample taken before the pool had a name is not (Tracy would call it a
//! free of an unknown allocation); once the guard is gone nothing more is handed over.
#![cfg(all(feature = "tracy", not(miri)))]

use std::alloc::System;
use std::hint::black_box;

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

fn allocate(tag: &'static str, n: usize) -> Vec<Vec<u8>> {
    let _s = ledger::scope(tag);
    (0..n).map(|i| black_box(vec![i as u8; 512])).collect()
}

#[test]
fn sampled_allocations_and_their_frees_reach_tracy_while_the_guard_lives() {
    // SAFETY: no other thread reads the environment now: one test in this binary, and the
    // client (which reads it) is not started yet.
    unsafe { std::env::remove_var("TRACY_NO_EXIT") };
    ledger::set_sampling(Some(1)); // every allocation
    let tracy = ledger::enable_tracy(false);
    // Before the tag's pool has a name: kept, never shown.
    let early = allocate("tracy-samples/a", 10);
    ledger::end_frame(); // names the pools
    let sent = ledger::tracy_events_sent();
    drop(early);
    let after_early = ledger::tracy_events_sent();
    let late = allocate("tracy-samples/a", 100);
    let after_alloc = ledger::tracy_events_sent();
    assert!(
        after_alloc >= after_early + 100,
        "each sampled allocation told: {after_early} -> {after_alloc}"
    );
    drop(late);
    assert!(
        ledger::tracy_events_sent() >= after_alloc + 100,
        "and each of their frees"
    );
    // The early ones' frees were not told (the harness's own allocations may be).
    assert!(after_early - sent < 10, "{sent} -> {after_early}");
    drop(tracy);
    let gone = ledger::tracy_events_sent();
    let kept = allocate("tracy-samples/a", 100);
    drop(kept);
    assert_eq!(ledger::tracy_events_sent(), gone, "nothing after the guard");
    ledger::set_sampling(None);
}
