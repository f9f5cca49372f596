//! The demo: a headless Bevy frame loop doing what a voxel game does every frame, run
//! three times on the same work so the arenas can be compared at a glance, plus a fourth
//! time with mimalloc as the global allocator.
//!
//! The work (see `workload` and `render`): a spatial grid; each entity's neighbour list,
//! built in `par_iter` on 4 compute threads; contact pairs; culling and LOD sorting; voxel
//! chunks streamed in and meshed. Every 250 frames a spike frame (an explosion and a region
//! streaming in) makes physics and streaming need 50-100 times their usual temporaries.
//!
//! The runs differ only in where the temporaries live (see `systems`): the crate's arenas,
//! a fresh `Vec` each time, or buffers kept in `Local`s (`Local<Parallel<Vec>>` for the
//! per-entity lists). Each runs in a process of its own, the runs taking turns. The demo
//! reports frame times, heap allocations per frame (its own code's and Bevy's apart), the
//! bytes each run holds before, at and after the spikes, and the process RSS; it checks
//! that every run computed the same checksums every frame, and writes the figures as CSV
//! and an SVG plot, and the memory page of the tracked runs' ledgers (`page`).
//!
//! `cargo run --release -p frame_loop [-- --frames N --entities N --out DIR --no-mimalloc]`
//! from the repository root (this is a package of the workspace). Without `--out`, the
//! files go to `frame_loop/` in the target directory this program was built in; with
//! `NEBULA_MEMORY_REPORT=<path>.html`, the page goes there too.

mod alloc;
mod page;
mod plot;
mod render;
mod report;
mod runs;
mod state;
mod systems;
mod tags;
#[cfg(test)]
mod tests;
mod units;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use runs::{RUNS, TURN, WARM_UP};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// The value after `name` on the command line.
fn value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn number(args: &[String], name: &str, default: usize) -> usize {
    value(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} takes a number, got {v}"))
    })
}

/// `--out`, else `frame_loop/` in the target directory this program was built in (it runs
/// from `<target>/<profile>/`, next to the `deps/` cargo keeps there), else under
/// `CARGO_TARGET_DIR` or `./target`.
fn out_dir(args: &[String]) -> PathBuf {
    if let Some(dir) = value(args, "--out") {
        return PathBuf::from(dir);
    }
    let built_in = std::env::current_exe().ok().and_then(|exe| {
        let profile = exe.parent()?;
        profile
            .join("deps")
            .is_dir()
            .then(|| profile.parent().map(Path::to_path_buf))?
    });
    let target = built_in
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("frame_loop")
}

/// `path` relative to the current directory when it lies under it.
fn shown(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    cwd.and_then(|c| path.strip_prefix(c).ok().map(|p| p.display().to_string()))
        .unwrap_or_else(|| path.display().to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let entities = number(&args, "--entities", 5_000).max(1);
    if let Some(name) = value(&args, "--child") {
        let run = RUNS.iter().find(|r| r.name == name).expect("a known run");
        assert_eq!(run.alloc, alloc::backend(), "the run's allocator");
        runs::child(*run, entities, number(&args, "--history", WARM_UP));
        return;
    }
    let frames = number(&args, "--frames", 1_000).max(1);
    let runs: Vec<runs::Run> = RUNS
        .into_iter()
        .filter(|r| match r.alloc {
            // The allocator is chosen from the environment, read without allocating: Unix.
            alloc::Backend::Tracked => true,
            alloc::Backend::System => cfg!(unix),
            alloc::Backend::Mimalloc => cfg!(unix) && !args.iter().any(|a| a == "--no-mimalloc"),
        })
        .collect();
    println!(
        "frame_loop: {frames} frames (after {WARM_UP} of warm-up), {entities} entities, 4 compute \
         threads, a spike frame every {} frames; {} runs, each in its own process, taking turns of \
         {TURN} frames",
        workload::SPIKE_EVERY,
        runs.len()
    );
    let started = Instant::now();
    let records = runs::run_all(&runs, frames, entities);
    let sums: Vec<report::Summary> = records.iter().map(report::summary).collect();
    let same = report::print(&records, &sums);
    report::verdict(&records, &sums);

    let dir = out_dir(&args);
    let (csv, svg, html) = (
        dir.join("frames.csv"),
        dir.join("frames.svg"),
        dir.join("frames.html"),
    );
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| report::write_csv(&csv, &records))
        .map_err(|e| e.to_string())
        .and_then(|()| plot::plot(&svg, &records, &sums).map_err(|e| e.to_string()))
        .and_then(|()| page::write(&html, &records, frames, entities));
    match written {
        Ok(()) => println!(
            "\nwrote {}, {} and {} (the memory page: open it in a browser) ({:.0} s in all)",
            shown(&csv),
            shown(&svg),
            shown(&html),
            started.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("could not write the CSV, the plot or the page: {e}"),
    }
    if let Some(report) =
        std::env::var_os(nebula_memory::bevy::REPORT_VAR).filter(|v| !v.is_empty())
    {
        let report = PathBuf::from(report);
        match page::write(&report, &records, frames, entities) {
            Ok(()) => println!(
                "wrote {} ({})",
                shown(&report),
                nebula_memory::bevy::REPORT_VAR
            ),
            Err(e) => eprintln!("{}: {e}", nebula_memory::bevy::REPORT_VAR),
        }
    }
    if !same {
        std::process::exit(1);
    }
}
