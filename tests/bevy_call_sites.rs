//! Sampled call stacks in a Bevy app, as a game would turn them on: only the environment
//! variable `NEBULA_MEMORY_SAMPLE` set, `MemoryPlugin`'s exit report on. `keeper` keeps
//! 4 KiB a frame from `keep_history`, `churner` allocates and frees 100 KiB a frame in
//! 1 KiB pieces from `format_messages`, `other` a little from its own body. At exit the
//! report names `keep_history` with its file and line under `keeper`'s line, and the
//! estimates of both sites are within 10% of the exact figures, on compute pools of 1, 4
//! and 8 threads (each a child process: the sampler and Bevy's pools are process-wide).
#![cfg(all(feature = "bevy", not(miri)))]

mod common;

use std::alloc::System;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use bevy_app::{App, AppExit, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::TrackingAllocator;
use nebula_memory::bevy::{ExitReport, MemoryLedger, MemoryPlugin};
use nebula_memory::ledger;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const CHILD: &str = "NEBULA_CALL_SITES";
const FRAMES: u32 = 600;
const KEEP: usize = 4096;
const CHURN_PIECES: usize = 100;
const PIECE: usize = 1024;

fn in_child(threads: &str) {
    // A mean small against the sizes: the estimates' spread is then a few percent.
    common::in_child_with(CHILD, threads, &[("NEBULA_MEMORY_SAMPLE", "2K")]);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn call_sites_on_one_compute_thread() {
    in_child("1");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn call_sites_on_four_compute_threads() {
    in_child("4");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn call_sites_on_eight_compute_threads() {
    in_child("8");
}

/// The line of `keep_history`'s allocation.
static KEEP_LINE: AtomicU32 = AtomicU32::new(0);

#[inline(never)]
fn keep_history(kept: &mut Vec<Box<[u8]>>) {
    kept.push(black_box(vec![1u8; KEEP].into_boxed_slice()));
    KEEP_LINE.store(line!() - 1, Relaxed);
}

#[inline(never)]
fn format_messages() -> usize {
    let mut n = 0;
    for i in 0..CHURN_PIECES {
        n += black_box(vec![i as u8; PIECE]).len();
    }
    n
}

fn keeper(mut kept: Local<Vec<Box<[u8]>>>) {
    keep_history(&mut kept);
}

fn churner() {
    assert_eq!(format_messages(), CHURN_PIECES * PIECE);
}

fn other(mut frame: Local<u32>) {
    *frame += 1;
    black_box(vec![0u64; 32]);
}

fn quit(mut frame: Local<u32>, mut exit: MessageWriter<AppExit>) {
    *frame += 1;
    if *frame == FRAMES {
        exit.write(AppExit::Success);
    }
}

#[test]
fn child() {
    let Ok(threads) = std::env::var(CHILD) else {
        return; // run by the tests above only
    };
    let threads: usize = threads.parse().expect("a thread count");
    let report = std::env::temp_dir().join(format!(
        "nebula_call_sites_{}_{threads}.txt",
        std::process::id()
    ));
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: common::compute_threads(threads),
    })
    .add_plugins(MemoryPlugin {
        exit_report: ExitReport::File(report.clone()),
        ..Default::default()
    })
    .add_systems(Update, (keeper, churner, other, quit));
    assert_eq!(ledger::sampling(), Some(2048), "from the environment alone");
    while app.should_exit().is_none() {
        app.update();
    }

    let text = std::fs::read_to_string(&report).expect("the exit report was written");
    let _ = std::fs::remove_file(&report);
    println!("{text}");
    let line_of = |system: &str| {
        ledger::snapshot()
            .tags()
            .map(|(t, _)| t)
            .find(|t| t.starts_with("systems/") && t.ends_with(system))
            .unwrap_or_else(|| panic!("no line for {system}:\n{text}"))
    };
    let (keeper_line, churner_line) = (line_of("keeper"), line_of("churner"));

    // The report: under keeper's line, keep_history first, with file and line.
    let section = text
        .split(&format!("\n{keeper_line} ("))
        .nth(1)
        .unwrap_or_else(|| panic!("no call sites under {keeper_line}:\n{text}"));
    let first_site = section.lines().nth(1).unwrap_or("");
    let at = format!(
        "keep_history (tests/bevy_call_sites.rs:{})",
        KEEP_LINE.load(Relaxed)
    );
    assert!(
        first_site.contains("holds") && first_site.contains(&at),
        "expected `{at}` first under {keeper_line}:\n{text}"
    );

    // A RISING line: the sites whose live bytes rose, over the rising windows.
    let keeper_part = section.split("\nsystems/").next().unwrap_or("");
    let grown = keeper_part
        .split("allocated since frame")
        .nth(1)
        .unwrap_or_else(|| panic!("no growth under {keeper_line}:\n{text}"));
    assert!(grown.contains(&at), "the site that grew:\n{text}");

    // The memory page of this process: the chosen line shows its call sites.
    let page = report.with_extension("html");
    app.world()
        .resource::<MemoryLedger>()
        .write_page(&page)
        .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    let _ = std::fs::remove_file(&page);
    assert!(
        html.contains("{\"kind\":\"holds\",\"site\":") && html.contains(&at),
        "the page's data has keeper's sites"
    );

    // The estimates.
    let kept_bytes = (KEEP as u64) * u64::from(FRAMES);
    let sites = ledger::call_sites(keeper_line);
    let top = &sites.held[0];
    assert!(top.function.ends_with("keep_history"), "{sites}");
    assert!(
        (top.bytes as f64 / kept_bytes as f64 - 1.0).abs() <= 0.10,
        "keeper holds ~{} of {kept_bytes}",
        top.bytes
    );
    let sites = ledger::call_sites(churner_line);
    let churn = &sites.churn[0];
    assert!(churn.function.ends_with("format_messages"), "{sites}");
    let per_frame = (CHURN_PIECES * PIECE) as f64;
    assert!(
        (churn.bytes as f64 / per_frame - 1.0).abs() <= 0.10,
        "churner ~{} a frame of {per_frame}",
        churn.bytes
    );
}
