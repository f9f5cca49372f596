//! Where did my memory go? Tags, budgets, a per-frame CSV and (with `--features tracy`)
//! Tracy's memory view, in a small game loop without Bevy.
//!
//! ```sh
//! cargo run --release --example memory_ledger                   # table + CSV
//! cargo run --release --example memory_ledger --features tracy  # and Tracy (see README)
//! ```
//!
//! Three systems allocate their frame's temporaries from tagged arenas; one of them, the
//! path finder, runs away every 50th frame and is stopped by its hard budget while the
//! others go on. A fourth arena holds the level's assets from the first frame to the end
//! of `main`. At the end it prints the ledger's tree table, where the CSV went, and lines
//! a script can compare with a trace:
//!
//! ```text
//! ledger frames=300
//! ledger tag=<tag> taken=<n> returned=<n> held=<n> used=<n>   (one per tag)
//! ```
//!
//! `taken` and `returned` are the tag's blocks at the end (after the frame arenas went
//! back, before the assets do); `held` and `used` are the last frame's figures, the last
//! points of the tag's plots.
//!
//! With the `tracy` feature it says that Tracy is on and on which port, waits up to 10 s
//! for a profiler (`NEBULA_TRACY_WAIT=<seconds>`, 0 not to wait), runs, hands everything
//! to the profiler and stops the client (`TracyGuard::shutdown`) before the assets arena
//! goes back: that last block's free is counted by the ledger and never sent to the
//! stopped client. It prints `tracy end=<how> events=<n>` at the stop and
//! `tracy after-stop events=<n> returned-after-stop=<n>` at the end, the same `events`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use nebula_memory::ledger::{self, Budget, LedgerSnapshot};
use nebula_memory::{AllocError, Arena, ArenaConfig, MemoryArena, game_pool};

const FRAMES: u64 = 300;

fn main() -> std::io::Result<()> {
    #[cfg(feature = "tracy")]
    let tracy = profiler::start();

    ledger::set_budget("ai", Budget::Warn(3 << 20));
    ledger::set_budget("ai/pathfinding", Budget::Limit(2 << 20));
    let arena = |tag| MemoryArena::with_config(game_pool(), ArenaConfig::default().tag(tag));
    // The level's data: loaded once, kept to the end of `main`.
    let assets = arena("assets");
    assets.alloc_slice(96 << 10, 0u8);
    let mut meshing = arena("render/meshing");
    let mut culling = arena("render/culling");
    let mut paths = arena("ai/pathfinding");
    let mut perception = arena("ai/perception");

    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("memory_ledger");
    std::fs::create_dir_all(&dir)?;
    let csv_path = dir.join("ledger.csv");
    let mut csv = BufWriter::new(File::create(&csv_path)?);
    LedgerSnapshot::write_csv_header(&mut csv)?;

    let mut refused = 0;
    let mut last = LedgerSnapshot::default();
    for frame in 1..=FRAMES {
        // Steady work: quads for a few chunks, the visible set, what each agent sees.
        meshing.alloc_slice(40_000, [0f32; 4]);
        culling.alloc_slice(5_000, 0u32);
        perception.alloc_slice(20_000, 0u64);
        // Every 50th frame the path finder floods its open list, far past its budget.
        let nodes = if frame % 50 == 0 { 4_000_000 } else { 10_000 };
        match paths.try_alloc_slice(nodes, 0u64) {
            Ok(_) => {}
            Err(AllocError::OverBudget { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        let snap = ledger::end_frame(); // plots to Tracy, a snapshot for us
        snap.write_csv_rows(&mut csv, frame)?;
        last = snap;
        for a in [&mut meshing, &mut culling, &mut paths, &mut perception] {
            a.reset();
        }
    }
    csv.flush()?;
    println!(
        "{FRAMES} frames; the path finder's flood was refused {refused} times by its budget\n"
    );
    println!("{last}\n");
    println!(
        "per-frame rows (one per tag per frame): {}\n",
        csv_path.display()
    );

    // The frame arenas give their blocks back (Tracy sees each freed); the assets stay.
    drop((meshing, culling, paths, perception));
    let end = ledger::snapshot();
    println!("ledger frames={FRAMES}");
    for (tag, f) in end.tags() {
        let at_last_frame = last.tag(tag).unwrap_or_default();
        println!(
            "ledger tag={tag} taken={} returned={} held={} used={}",
            f.blocks_taken, f.blocks_returned, at_last_frame.held, at_last_frame.used
        );
    }

    #[cfg(feature = "tracy")]
    let sent_at_stop = profiler::finish(tracy);

    // After Tracy stopped: the ledger counts this block going back; Tracy is not told.
    drop(assets);

    #[cfg(feature = "tracy")]
    profiler::after_stop(sent_at_stop, &end);
    Ok(())
}

/// The Tracy side: on, waiting for a profiler, and everything handed over at the end.
#[cfg(feature = "tracy")]
mod profiler {
    use std::time::Duration;

    use nebula_memory::ledger::{self, LedgerSnapshot, TracyEnd, TracyGuard};

    const DEFAULT_WAIT: Duration = Duration::from_secs(10);

    /// `NEBULA_TRACY_WAIT`: how long to wait for a profiler before the first frame, in
    /// seconds (10 unless set; 0 not to wait).
    fn wait_limit() -> Duration {
        match std::env::var("NEBULA_TRACY_WAIT") {
            Err(_) => DEFAULT_WAIT,
            Ok(s) => match s.trim().parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
                _ => {
                    println!("NEBULA_TRACY_WAIT={s:?} is not a number of seconds; waiting 10 s");
                    DEFAULT_WAIT
                }
            },
        }
    }

    /// Starts the client and waits (up to `NEBULA_TRACY_WAIT`) for a profiler.
    pub fn start() -> TracyGuard {
        let tracy = ledger::enable_tracy(true); // a headless loop: the ledger marks the frames
        let port = tracy.port();
        let limit = wait_limit();
        if limit.is_zero() {
            println!("Tracy on: the client listens on port {port}; not waiting for a profiler");
        } else {
            println!(
                "Tracy on: waiting up to {:.0} s for a profiler on port {port} \
                 (NEBULA_TRACY_WAIT=0 to skip)",
                limit.as_secs_f64()
            );
        }
        if !tracy.port_is_fixed() {
            println!(
                "  (if {port} is taken, Tracy listens on the next free port up to 8105; \
                 TRACY_PORT=<port> fixes it)"
            );
        }
        if limit.is_zero() {
            return tracy;
        }
        if tracy.wait_for_profiler(limit) {
            println!("Tracy: profiler connected");
        } else {
            println!(
                "Tracy: no profiler yet; running anyway (one that connects before the end \
                 still gets the whole run)"
            );
        }
        tracy
    }

    /// Hands everything over and stops the client; returns how many events the ledger
    /// sent it.
    pub fn finish(tracy: TracyGuard) -> u64 {
        // SAFETY: this example is the only user of Tracy in its process (no Bevy, no
        // tracing-tracy, no spans of its own), now and after this call; the guard is on
        // the thread that called `enable_tracy`.
        let end = unsafe { tracy.shutdown() };
        let sent = ledger::tracy_events_sent();
        match end {
            TracyEnd::HandedOver => {
                println!("Tracy: the profiler has the whole run; client stopped")
            }
            TracyEnd::NoProfiler => {
                println!("Tracy: no profiler was connected; client stopped, nothing delivered")
            }
            other => println!("Tracy: {other:?}"),
        }
        let end = match end {
            TracyEnd::HandedOver => "handed-over",
            TracyEnd::NoProfiler => "no-profiler",
            _ => "other",
        };
        println!("tracy end={end} events={sent}");
        sent
    }

    /// Shows that what happened after the stop reached the ledger and not Tracy.
    pub fn after_stop(sent_at_stop: u64, at_stop: &LedgerSnapshot) {
        let now = ledger::end_frame(); // would send plots, were the receiver on
        let returned_after: u64 = now
            .tags()
            .filter(|(tag, _)| !tag.contains('/'))
            .map(|(tag, f)| {
                let before = at_stop.tag(tag).unwrap_or_default().blocks_returned;
                f.blocks_returned.saturating_sub(before)
            })
            .sum();
        let sent = ledger::tracy_events_sent();
        println!("tracy after-stop events={sent} returned-after-stop={returned_after}");
        assert_eq!(
            sent, sent_at_stop,
            "an event went to Tracy after its client stopped"
        );
    }
}
