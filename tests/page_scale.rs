//! The memory page at scale: 10,000 frames of 200 lines, recorded from the real ledger
//! (heap scopes under a `TrackingAllocator`, this binary's global allocator: lines that
//! churn, lines that keep and let go now and then, two that leak, a spike every 250
//! frames), written as a page and opened in headless Chromium. Prints the page's size and
//! its time to first paint (README, "The memory page"); fails over 10 s. Release builds
//! only (`cargo test --release --test page_scale -- --nocapture`): a debug build takes the
//! better part of a minute to record the frames. Skipped (with a message) outside CI when
//! Chromium or Node is missing.
#![cfg(not(miri))]

#[path = "common/browser.rs"]
mod browser;

use std::alloc::System;
use std::hint::black_box;
use std::time::Instant;

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger::{self, History, LedgerSnapshot, page::Page};
use serde_json::json;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const FRAMES: usize = 10_000;
const LINES: usize = 200;

#[test]
fn ten_thousand_frames_of_two_hundred_lines() {
    if cfg!(debug_assertions) {
        eprintln!("SKIPPED: the page at scale is measured in release builds only");
        return;
    }
    let Some(tools) = browser::tools() else {
        return;
    };
    // 200 lines: the two untagged ones, what the crate made, `scale` and its 10 parts, and
    // the systems, spread over the parts.
    let mut snap = LedgerSnapshot::default();
    ledger::end_frame_into(&mut snap);
    let leaves = LINES - (snap.tags().count() + 2) - 11;
    let tags: Vec<&'static str> = (0..leaves)
        .map(|i| &*Box::leak(format!("scale/part{}/system{}", i % 10, i / 10).into_boxed_str()))
        .collect();
    let mut kept: Vec<Vec<u8>> = tags.iter().map(|_| Vec::new()).collect();
    let mut leaked: Vec<Vec<u8>> = Vec::new();
    let mut history = History::new(FRAMES);
    let started = Instant::now();
    for frame in 0..FRAMES {
        for (i, tag) in tags.iter().enumerate() {
            let _scope = ledger::scope(tag);
            // Churn: a few temporaries a frame, their sizes varying.
            for k in 0..(1 + (frame + i) % 4) {
                black_box(vec![0u8; 64 + ((frame * 7 + i * 13 + k) % 512)]);
            }
            // Keeps some, lets go now and then.
            if (frame + i * 37) % 97 == 0 {
                kept[i] = vec![1u8; 1024 * (1 + (frame / 97 + i) % 16)];
            }
            if i < 2 {
                leaked.push(vec![2u8; 100]);
            }
            if frame % 250 == 0 && i % 20 == 0 {
                black_box(vec![3u8; 1 << 20]);
            }
        }
        ledger::end_frame_into(&mut snap);
        history.record(&snap);
    }
    let recorded = started.elapsed();
    assert_eq!(history.lines().count(), LINES, "the lines recorded");
    let dir = browser::out_dir("page_scale");
    let page = dir.join("scale.html");
    let written = Instant::now();
    Page::new("10,000 frames of 200 lines")
        .run("scale", &history)
        .write_to(&page)
        .unwrap();
    let write_time = written.elapsed();
    let size = std::fs::metadata(&page).unwrap().len();
    let report = tools.run(
        &dir,
        json!([{ "kind": "scale", "page": page, "screenshot": dir.join("scale.png") }]),
        || {},
    );
    let r = &report["results"][0];
    assert_eq!(r["errors"], json!([]), "the console logged errors: {r}");
    assert_eq!(r["frames"], json!(FRAMES));
    assert_eq!(r["lines"], json!(LINES));
    let paint = r["first_paint_ms"].as_f64().unwrap();
    println!(
        "page at scale: {FRAMES} frames x {LINES} lines: {size} bytes ({:.1} MiB), written in \
         {write_time:?}; first paint {paint:.0} ms after navigation ({} ms by the driver's \
         clock); history {} bytes; recording the frames took {recorded:?}",
        size as f64 / (1 << 20) as f64,
        r["wall_ms_to_first_paint"],
        history.memory_bytes(),
    );
    assert!(paint < 10_000.0, "first paint {paint} ms");
    assert!(
        r["screenshot"]["drawn_fraction"].as_f64().unwrap() > 0.05,
        "{r}"
    );
}
