//! A user's program with the tracking allocator as its global allocator, small enough for
//! Miri: small boxes and strings, vectors grown and shrunk, a heap scope, and a second
//! thread freeing what the first allocated. CI runs it under Miri with no flags (Stacked
//! Borrows) and with `-Zmiri-tree-borrows`, as a user would: Miri checks every program
//! that installs the tracker, so the tracker's own calls must pass both models.
//!
//! Run with `cargo +nightly miri run --no-default-features --example miri_tracked`
//! (natively with `cargo run --example miri_tracked`).

use std::alloc::System;

use nebula_memory::{TrackingAllocator, ledger};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

fn main() {
    let tag = "example/miri";
    let live = || ledger::snapshot().tag(tag).map_or(0, |f| f.heap_live);
    let before = live();

    let (boxes, text, mut numbers) = {
        let _scope = ledger::scope(tag);
        let boxes: Vec<Box<u8>> = (0..8).map(Box::new).collect();
        let mut text = String::from("a");
        for word in ["b", "cd", "efghijklmnop", "qrstuvwxyz0123456789"] {
            text.push_str(word);
        }
        let mut numbers: Vec<u64> = Vec::new();
        for i in 0..40 {
            numbers.push(i);
        }
        numbers.truncate(3);
        numbers.shrink_to_fit(); // a realloc to 24 bytes
        numbers.push(7); // and grown again
        (boxes, text, numbers)
    };
    assert!(live() > before, "the scope's allocations are charged to it");
    numbers.shrink_to(1); // a realloc to 32 bytes outside the scope: still the tag's
    drop(Box::new(7u8)); // a small box outside every scope
    assert_eq!(numbers, [0, 1, 2, 7]);
    assert_eq!(text.len(), 36);

    // A second thread frees the first's allocations: credited to the tag they were made
    // under.
    std::thread::spawn(move || {
        let _elsewhere = ledger::scope("example/miri-other");
        assert_eq!(boxes.iter().map(|b| usize::from(**b)).sum::<usize>(), 28);
        drop((boxes, text, numbers));
    })
    .join()
    .unwrap();
    assert_eq!(live(), before, "everything freed was credited back");
    println!("ok: the tag's heap bytes went back to {before}");
}
