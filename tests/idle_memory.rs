//! Idle memory goes back: a one-off spike in any arena the crate keeps on a thread's behalf
//! (a nested `with_scratch`, a Bevy `Scratch` system, `FrameMemory`) is given back to the
//! scratch pool within a bounded number of frames of `maintain_global_pools()`, after
//! which a large scratch allocation succeeds again.
//!
//! A test binary with one test: it measures the global scratch pool, which nothing else
//! in this process uses meanwhile. Not under Miri: 40 MiB spikes and 600 frames of a Bevy
//! app are far beyond what it runs in reasonable time.
#![cfg(all(feature = "bevy", not(miri)))]

use bevy_app::{App, Update};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{FrameMemory, MemoryPlugin, Scratch};
use nebula_memory::{Arena, MemoryArena, maintain_global_pools, scratch_pool, with_scratch};

const MIB: usize = 1 << 20;
/// Frames of ordinary use after each spike.
const AFTER: usize = 200;

/// Resident set size of this process (Linux; 0 elsewhere).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The scratch pool's `in_use` and the RSS, at one moment.
type Sample = (usize, usize);

fn sample() -> Sample {
    (in_use(), rss())
}

fn in_use() -> usize {
    scratch_pool().stats().in_use
}

/// After the spike, `AFTER` frames of `frame()` with maintenance; then the pool must be
/// back within 1 MiB of `before`, and 30 MiB must fit in it again.
fn assert_given_back(what: &str, before: Sample, during: Sample, mut frame: impl FnMut()) {
    let (before, rss_before) = before;
    let (during, rss_during) = during;
    for _ in 0..AFTER {
        frame();
    }
    let after = in_use();
    // The figures, for `cargo test --release --test idle_memory -- --nocapture`. Freed
    // pages go back to the OS once release pressure has lasted the pools' purge delay
    // (500 ms); the frames above take milliseconds, so with NEBULA_IDLE_RSS=1 the test
    // waits that long (as 200 real frames would) before it reads the RSS.
    if std::env::var_os("NEBULA_IDLE_RSS").is_some() {
        std::thread::sleep(std::time::Duration::from_millis(600));
        maintain_global_pools();
    }
    eprintln!(
        "{what}: scratch pool in use {} KiB before the spike, {} KiB at it, {} KiB {AFTER} \
         frames after; RSS {} MiB, {} MiB, {} MiB",
        before >> 10,
        during >> 10,
        after >> 10,
        rss_before >> 20,
        rss_during >> 20,
        rss() >> 20
    );
    assert!(
        after <= before + MIB,
        "{what}: the scratch pool held {before} bytes before the spike, {during} during it \
         and still {after} after {AFTER} frames"
    );
    // Asked for without touching it (release builds do not poison), so that the RSS
    // figures are the arenas' alone.
    let big = MemoryArena::new(scratch_pool());
    let block = big.try_alloc(std::alloc::Layout::from_size_align(30 * MIB, 16).unwrap());
    assert!(
        block.is_ok(),
        "{what}: 30 MiB no longer fit after the spike: {block:?}"
    );
}

#[test]
fn spikes_are_given_back_after_idle_frames() {
    // 1. A 40 MiB spike one level deep in `with_scratch`, then depth-0 use only.
    let depth0 = || {
        with_scratch(|s| {
            s.alloc_slice(10_000, 1u8);
        });
        maintain_global_pools();
    };
    depth0();
    let before = sample();
    with_scratch(|_outer| {
        with_scratch(|inner| {
            let spike = inner.alloc_slice(40 * MIB, 2u8);
            assert_eq!(spike[40 * MIB - 1], 2);
        })
    });
    let during = sample();
    assert!(during.0 > before.0 + 39 * MIB, "{before:?} -> {during:?}");
    assert_given_back("with_scratch at depth 1", before, during, depth0);

    // 2. and 3. A Bevy app whose `Scratch` system, then whose `FrameMemory`, spikes once.
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::default()).add_systems(
        Update,
        |scratch: Scratch, frames: Res<FrameMemory>, spike: Res<Spike>| {
            let scratch_bytes = spike.scratch.unwrap_or(10_000);
            assert_eq!(scratch.alloc_slice(scratch_bytes, 3u8).len(), scratch_bytes);
            let frame_bytes = spike.frame.unwrap_or(10_000);
            let stored = frames.current().alloc_slice(frame_bytes, 4u8);
            assert_eq!(stored.len(), frame_bytes);
        },
    );
    app.insert_resource(Spike::default());
    for (what, spike) in [
        (
            "a Bevy Scratch system",
            Spike {
                scratch: Some(40 * MIB),
                frame: None,
            },
        ),
        (
            "FrameMemory",
            Spike {
                scratch: None,
                frame: Some(40 * MIB),
            },
        ),
    ] {
        for _ in 0..10 {
            app.update();
        }
        let before = sample();
        app.insert_resource(spike);
        app.update();
        let during = sample();
        assert!(
            during.0 > before.0 + 39 * MIB,
            "{what}: {before:?} -> {during:?}"
        );
        app.insert_resource(Spike::default());
        assert_given_back(what, before, during, || app.update());
    }
}

/// What the test system allocates this frame beyond its usual 10,000 bytes of each.
#[derive(Resource, Clone, Copy, Default)]
struct Spike {
    scratch: Option<usize>,
    frame: Option<usize>,
}
