//! Budgets see a spike inside a frame: a tag's heap is judged on its peak within the frame
//! (`TagFigures::heap_frame_peak`), not only on what is live at the frame's end, and each
//! crossing is told once. A `TrackingAllocator` is this binary's global allocator; the
//! frames are the ledger's own (`ledger::end_frame`), one test at a time.
#![cfg(not(miri))]

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::sync::Mutex;

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger::{self, Budget};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const MIB: usize = 1 << 20;

/// The tests end ledger frames: one at a time.
static FRAMES: Mutex<()> = Mutex::new(());

/// The WARNs about `tag` told so far.
fn warnings_about(tag: &str) -> Vec<String> {
    let events = common::warnings().lock().unwrap_or_else(|e| e.into_inner());
    events.iter().filter(|t| t.contains(tag)).cloned().collect()
}

/// One frame of a system that allocates `spike` bytes and frees them again, keeping
/// nothing, then the frame's end.
fn frame(tag: &'static str, spike: usize) {
    {
        let _scope = ledger::scope(tag);
        if spike > 0 {
            drop(black_box(vec![7u8; spike]));
        }
    }
    ledger::end_frame();
}

#[test]
fn a_limit_sees_a_spike_that_comes_and_goes_within_a_frame() {
    common::warnings();
    let _frames = FRAMES.lock().unwrap_or_else(|e| e.into_inner());
    const TAG: &str = "hbp/limit";
    ledger::set_budget(TAG, Budget::Limit(MIB));
    frame(TAG, 4 * MIB);
    let told = warnings_about(TAG);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("hard limit") && told[0].contains(&(4 * MIB).to_string()),
        "the WARN names the frame's peak: {told:?}"
    );
    let f = ledger::snapshot().tag(TAG).unwrap();
    assert_eq!(f.heap_live, 0, "nothing is kept");

    // Quiet frames end the crossing; each later spike is a crossing of its own, told once.
    for round in 0..3 {
        for _ in 0..5 {
            frame(TAG, 1000);
        }
        frame(TAG, 2 * MIB);
        frame(TAG, 2 * MIB); // still over: no second WARN
        assert_eq!(warnings_about(TAG).len(), 2 + round, "round {round}");
    }
    ledger::clear_budgets(TAG);
}

#[test]
fn a_warn_budget_under_the_peak_stays_quiet() {
    common::warnings();
    let _frames = FRAMES.lock().unwrap_or_else(|e| e.into_inner());
    const TAG: &str = "hbp/quiet";
    ledger::set_budget(TAG, Budget::Warn(8 * MIB));
    for _ in 0..10 {
        frame(TAG, 4 * MIB);
    }
    assert!(warnings_about(TAG).is_empty(), "{:?}", warnings_about(TAG));
    ledger::clear_budgets(TAG);
}
