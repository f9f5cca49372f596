//! The memory page as a person sees it, in headless Chromium: a Bevy app whose systems
//! hoard past a budget, leak a little every frame and churn the heap writes its page when
//! it exits (the exit report to an `.html` path); the browser then lists as many series as
//! the ledger has lines, shows at the last frame under the pointer the leak's figure the
//! ledger recorded, marks the frames whose budget crossings the ledger counted and the line that
//! RISES, compares two frames with the ledger's own differences, logs no error, and its
//! screenshot is a drawing, not a blank. Skipped (with a message) outside CI when
//! Chromium or Node is missing. A `TrackingAllocator` is this binary's global allocator;
//! one test, so that no other test's tags are lines of its app.
#![cfg(all(feature = "bevy", not(miri)))]

use std::alloc::System;
use std::hint::black_box;

use bevy_app::{App, AppExit, Update};
use bevy_ecs::prelude::*;
use nebula_memory::TrackingAllocator;
use nebula_memory::bevy::{ExitReport, MemoryLedger, MemoryPlugin};
use nebula_memory::ledger::{self, Budget, CROSSED, History, LineHistory};
use serde_json::{Value, json};

#[path = "common/browser.rs"]
mod browser;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const FRAMES: u32 = 90;
const HOG_BUDGET: usize = 256 << 10;

#[derive(Resource, Default)]
struct Hoard(Vec<Vec<u8>>);

/// Each 100 bytes its own allocation, so that every frame's leak is one more block.
#[derive(Resource, Default)]
#[allow(clippy::vec_box)]
struct Leaked(Vec<Box<[u8; 100]>>);

/// Keeps 64 KiB a frame over frames 20-29 and 60-69, lets it all go at 40 and 80: two
/// crossings of its budget.
fn hog(mut hoard: ResMut<Hoard>, mut frame: Local<u32>) {
    *frame += 1;
    if (20..30).contains(&*frame) || (60..70).contains(&*frame) {
        hoard.0.push(vec![1u8; 64 << 10]);
    }
    if *frame == 40 || *frame == 80 {
        hoard.0 = Vec::new();
    }
}

/// 100 bytes kept every frame.
fn leak(mut leaked: ResMut<Leaked>) {
    leaked.0.push(Box::new([7; 100]));
}

/// 500 allocations a frame, none kept.
fn churn() {
    for i in 0..500u32 {
        black_box(vec![i; 16]);
    }
}

fn exit(mut frame: Local<u32>, mut exit: MessageWriter<AppExit>) {
    *frame += 1;
    if *frame == FRAMES {
        exit.write(AppExit::Success);
    }
}

/// A line's value as the page shows it by default: arena bytes held plus heap live.
fn shown(history: &History, line: &LineHistory) -> Vec<(u64, u64)> {
    history
        .figures(line)
        .map(|(f, x)| (f, x.held + x.heap_live))
        .collect()
}

fn line_ending<'h>(history: &'h History, name: &str) -> &'h LineHistory {
    history
        .lines()
        .find(|l| l.tag().ends_with(&format!("systems/{name}")))
        .unwrap_or_else(|| panic!("no line for {name}"))
}

#[test]
fn the_page_shows_the_ledger_in_a_browser() {
    let Some(tools) = browser::tools() else {
        return;
    };
    let dir = browser::out_dir("page_browser");
    let page = dir.join("app.html");
    let _ = std::fs::remove_file(&page);
    ledger::set_growth_window(10);
    let mut app = App::new();
    app.add_plugins(
        MemoryPlugin {
            exit_report: ExitReport::File(page.clone()),
            history_frames: 200,
            ..MemoryPlugin::isolated()
        }
        .budget_for(hog, Budget::Warn(HOG_BUDGET)),
    )
    .init_resource::<Hoard>()
    .init_resource::<Leaked>()
    .add_systems(Update, (hog, leak, churn, exit));
    for _ in 0..FRAMES {
        app.update();
    }
    let ledger = app.world().resource::<MemoryLedger>();
    let history = ledger.history();
    assert!(page.is_file(), "the exit report wrote no page");
    let hog_line = line_ending(history, "hog");
    let leak_line = line_ending(history, "leak");

    let shot = dir.join("app.png");
    let report = tools.run(
        &dir,
        json!([{ "kind": "static", "page": page, "screenshot": shot, "tag": leak_line.tag() }]),
        || {},
    );
    let r = &report["results"][0];
    println!("{}", serde_json::to_string_pretty(r).unwrap());
    assert_eq!(r["errors"], json!([]), "the console logged errors");

    // As many series as lines, the same ones.
    let mut series: Vec<String> = serde_json::from_value(r["series"].clone()).unwrap();
    let mut lines: Vec<String> = history.lines().map(|l| l.tag().to_owned()).collect();
    series.sort();
    lines.sort();
    assert_eq!(series, lines);
    assert_eq!(r["frames"], json!(history.len()));

    // Under the pointer, the last frame, and the leak's figure there (it differs from the
    // frame before's).
    let leak = shown(history, leak_line);
    let (last, leak_last) = *leak.last().unwrap();
    assert_ne!(leak[leak.len() - 2].1, leak_last);
    assert_eq!(r["hover"]["frame"], json!(last));
    assert_eq!(r["hover"]["value"]["bytes"], json!(leak_last));
    assert!(
        r["hover"]["tip"]
            .as_str()
            .unwrap()
            .contains(&format!("frame {last}"))
    );

    // The frames whose crossings the ledger counted, marked: two of them.
    let crossed: Vec<u64> = history
        .figures(hog_line)
        .filter(|(_, x)| x.flags & CROSSED != 0)
        .map(|(f, _)| f)
        .collect();
    assert_eq!(crossed.len(), 2, "the hog crosses its budget twice");
    let marks = r["marks"].as_array().unwrap();
    let marked = |kind: &str, tag: &str| -> Vec<u64> {
        marks
            .iter()
            .filter(|m| m["kind"] == kind && m["tag"] == tag)
            .map(|m| m["frame"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(marked("crossed", hog_line.tag()), crossed);
    // The leak RISES, from the frame the ledger says.
    let rising_from = history
        .figures(leak_line)
        .find(|(_, x)| x.rising())
        .map(|(f, _)| f)
        .expect("the leak rose for three windows of 10 frames");
    assert_eq!(marked("rising", leak_line.tag()), [rising_from]);
    assert!(r["chosen"].as_str().unwrap().starts_with(leak_line.tag()));

    // The first and the last frame compared: each line's gain as the ledger's figures say.
    let first = history.frames().next().unwrap();
    let rows = r["compare"]["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let line = history.line(row["tag"].as_str().unwrap()).unwrap();
        let v = shown(history, line);
        let at = |f: u64| v.iter().find(|x| x.0 == f).unwrap().1 as i64;
        assert_eq!(row["gained"], json!(at(last) - at(first)), "{row}");
    }
    assert!(
        rows.iter().any(|row| row["tag"] == leak_line.tag()),
        "the leak gained"
    );

    // A drawing, not a blank page.
    // A drawing, not a blank page: the chart's plot area mostly painted (the stack), the
    // page in many colours.
    let s: &Value = &r["screenshot"];
    assert!(s["width"].as_u64().unwrap() >= 1000, "{s}");
    assert!(s["chart_drawn_fraction"].as_f64().unwrap() > 0.3, "{s}");
    assert!(s["drawn_fraction"].as_f64().unwrap() > 0.05, "{s}");
    assert!(s["colours"].as_u64().unwrap() > 30, "{s}");
}
