//! The report: per-run figures, the checksums, the verdict against the demo's targets, and
//! the CSV of every frame.

use std::io::Write;
use std::path::Path;

use crate::runs::{FrameRecord, RunRecord};
use crate::state::NEEDS;
use crate::units::bytes;
use crate::workload::AFTER;

/// One run's figures.
pub struct Summary {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Mean time of the spike frames.
    pub spike: f64,
    pub own_per_frame: f64,
    pub bevy_per_frame: f64,
    pub own_total: u64,
    /// Held bytes: steady state (median before the first spike), at a spike and `AFTER`
    /// frames after one (the largest over the spikes).
    pub held: [i64; 3],
    pub rss: [i64; 3],
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Steady state, at the spike, after it, of `figure`.
fn phases(frames: &[FrameRecord], figure: impl Fn(&FrameRecord) -> i64) -> [i64; 3] {
    let spikes: Vec<usize> = (0..frames.len()).filter(|&i| frames[i].spike).collect();
    let first = spikes.first().copied().unwrap_or(frames.len());
    let mut before: Vec<i64> = frames[..first].iter().map(&figure).collect();
    before.sort_unstable();
    let steady = before.get(before.len() / 2).copied().unwrap_or(0);
    let at = spikes
        .iter()
        .map(|&i| figure(&frames[i]))
        .max()
        .unwrap_or(0);
    let after = spikes
        .iter()
        .filter_map(|&i| frames.get(i + AFTER))
        .map(&figure)
        .max()
        .unwrap_or(0);
    [steady, at, after]
}

pub fn summary(run: &RunRecord) -> Summary {
    let frames = &run.frames;
    let mut t: Vec<f64> = frames.iter().map(|f| f.micros).collect();
    t.sort_by(f64::total_cmp);
    let n = t.len() as f64;
    let spikes: Vec<f64> = frames
        .iter()
        .filter(|f| f.spike)
        .map(|f| f.micros)
        .collect();
    let own_total: u64 = frames.iter().map(|f| f.own_allocs).sum();
    Summary {
        mean: t.iter().sum::<f64>() / n,
        p50: percentile(&t, 0.5),
        p99: percentile(&t, 0.99),
        max: t[t.len() - 1],
        spike: spikes.iter().sum::<f64>() / spikes.len().max(1) as f64,
        own_per_frame: own_total as f64 / n,
        bevy_per_frame: frames.iter().map(|f| f.bevy_allocs).sum::<u64>() as f64 / n,
        own_total,
        held: phases(frames, |f| f.held),
        rss: phases(frames, |f| f.rss as i64),
    }
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

/// Prints the tables; returns whether the checksums agree.
pub fn print(runs: &[RunRecord], sums: &[Summary]) -> bool {
    println!();
    println!(
        "{:<14} {:>7} {:>7} {:>7} {:>7} {:>9} {:>11} {:>11}",
        "frame time ms", "mean", "p50", "p99", "max", "spike", "own allocs", "Bevy allocs"
    );
    for (r, s) in runs.iter().zip(sums) {
        println!(
            "{:<14} {:>7} {:>7} {:>7} {:>7} {:>9} {:>11.1} {:>11.1}",
            r.run.name,
            ms(s.mean),
            ms(s.p50),
            ms(s.p99),
            ms(s.max),
            ms(s.spike),
            s.own_per_frame,
            s.bevy_per_frame
        );
    }
    println!("  (allocations are per frame; spike: the mean of the spike frames)");
    println!();
    println!(
        "{:<14} {:>10} {:>10} {:>10}   {:>9} {:>9} {:>9}",
        "held", "steady", "at spike", "+120 fr.", "RSS", "at spike", "+120 fr."
    );
    for (r, s) in runs.iter().zip(sums) {
        println!(
            "{:<14} {:>10} {:>10} {:>10}   {:>9} {:>9} {:>9}",
            r.run.name,
            bytes(s.held[0]),
            bytes(s.held[1]),
            bytes(s.held[2]),
            bytes(s.rss[0]),
            bytes(s.rss[1]),
            bytes(s.rss[2])
        );
    }
    println!(
        "  held: arena = blocks its arenas hold (TaggedScratch, with_scratch, FrameMemory); heap = live \
         heap bytes above the level after warm-up; local-vec = capacity its Locals keep"
    );
    if let Some(arena) = runs.iter().find(|r| r.run.name == "arena") {
        let c = arena.closing;
        let last = arena.frames.last().copied().unwrap_or_default();
        println!(
            "  arena run at the end: the systems' TaggedScratch {}, with_scratch (scratch_batch) \
             {}, FrameMemory {}; scratch pool high watermark {}, {} exhaustions, {} heap fallbacks",
            bytes(last.systems_held as i64),
            bytes(last.with_scratch_held as i64),
            bytes(last.frame_memory_held as i64),
            bytes(c.pool_high_watermark as i64),
            c.exhaustions,
            c.heap_fallbacks
        );
    }
    print_needs(&runs[0]);
    print_tag_table(runs);
    print_systems_heap(runs);
    let first = &runs[0];
    let mismatch = runs[1..].iter().find_map(|other| {
        first
            .frames
            .iter()
            .zip(&other.frames)
            .position(|(a, b)| a.checksum != b.checksum)
            .map(|f| (other.run.name, f))
    });
    match mismatch {
        Some((name, f)) => {
            eprintln!(
                "checksums differ: {} and {name} disagree at frame {f}",
                first.run.name
            );
            false
        }
        None => {
            println!(
                "checksums: identical in all {} runs, every frame",
                runs.len()
            );
            true
        }
    }
}

/// What the work needed for its temporaries in a steady frame and at a spike, part by
/// part (the same in every run).
fn print_needs(run: &RunRecord) {
    println!();
    println!(
        "{:<26} {:>10} {:>10} {:>7}",
        "temporaries needed", "steady", "at spike", "x-fold"
    );
    let row = |name: &str, figure: &dyn Fn(&FrameRecord) -> i64| {
        let [steady, at, _] = phases(&run.frames, figure);
        println!(
            "{name:<26} {:>10} {:>10} {:>6.0}x",
            bytes(steady),
            bytes(at),
            at as f64 / steady.max(1) as f64
        );
    };
    row("physics (all three)", &|f| {
        f.needs[..3].iter().sum::<u64>() as i64
    });
    for (i, name) in NEEDS.iter().enumerate() {
        row(&format!("  {name}"), &|f| f.needs[i] as i64);
    }
    println!(
        "  (bytes of the data each temporary held, not capacities; the neighbour lists: every \
         entity's list together)"
    );
}

/// Where the arena run's memory went, tag by tag.
fn print_tag_table(runs: &[RunRecord]) {
    let Some(arena) = runs.iter().find(|r| !r.ledger.is_empty()) else {
        return;
    };
    println!();
    println!(
        "tag ledger of the arena run (its MemoryLedger after a steady frame, the first spike and {AFTER} frames after it):"
    );
    for line in &arena.ledger {
        println!("{line}");
    }
}

/// Each Bevy system's heap allocations in the tracked runs, side by side: what the plugin
/// charged to `systems/<name>` (no code of the demo names a system for it).
fn print_systems_heap(runs: &[RunRecord]) {
    let tracked: Vec<&RunRecord> = runs.iter().filter(|r| !r.systems.is_empty()).collect();
    if tracked.is_empty() {
        return;
    }
    // name -> per run: (steady allocations a frame, at spikes, bytes live).
    type PerRun = Vec<Option<(f64, f64, i64)>>;
    let mut rows: Vec<(String, PerRun)> = Vec::new();
    for (i, r) in tracked.iter().enumerate() {
        for line in &r.systems {
            let f: Vec<&str> = line.split('\t').collect();
            let [name, steady, spike, live] = f[..] else {
                continue;
            };
            let figures = (
                steady.parse().unwrap_or(0.0),
                spike.parse().unwrap_or(0.0),
                live.parse().unwrap_or(0),
            );
            let row = match rows.iter().position(|(n, _)| n == name) {
                Some(p) => p,
                None => {
                    rows.push((name.to_owned(), vec![None; tracked.len()]));
                    rows.len() - 1
                }
            };
            rows[row].1[i] = Some(figures);
        }
    }
    // The busiest first, by the first tracked run that allocates at all.
    let key =
        |r: &Vec<Option<(f64, f64, i64)>>| r.iter().flatten().map(|f| f.0).fold(0.0f64, f64::max);
    rows.sort_by(|a, b| key(&b.1).total_cmp(&key(&a.1)).then(a.0.cmp(&b.0)));
    println!();
    println!(
        "heap allocations by Bevy system (the tracking allocator and the plugin charge each \
         system's to systems/<name>, its par_iter bodies too: its batches' threads enter its \
         scope): a frame, steady and at spikes; bytes live at the end"
    );
    let mut head = format!("{:<34}", "system");
    for r in &tracked {
        head.push_str(&format!(" | {:>25}", r.run.name));
    }
    println!("{head}");
    let mut sub = format!("{:<34}", "");
    for _ in &tracked {
        sub.push_str(&format!(" | {:>8} {:>8} {:>7}", "steady", "spike", "live"));
    }
    println!("{sub}");
    for (name, figures) in &rows {
        let mut line = format!("{name:<34}");
        for f in figures {
            match f {
                Some((steady, spike, live)) => line.push_str(&format!(
                    " | {steady:>8.1} {spike:>8.1} {:>7}",
                    bytes(*live)
                )),
                None => line.push_str(&format!(" | {:>8} {:>8} {:>7}", "0", "0", "-")),
            }
        }
        println!("{line}");
    }
}

/// The verdict, from this run's figures: the three runs side by side, then each target met
/// or missed.
pub fn verdict(runs: &[RunRecord], sums: &[Summary]) {
    let find = |name: &str| {
        runs.iter()
            .position(|r| r.run.name == name)
            .map(|i| &sums[i])
    };
    let (Some(a), Some(h), Some(l)) = (find("arena"), find("heap"), find("local-vec")) else {
        return;
    };
    let three = |f: &dyn Fn(&Summary) -> String| format!("{} / {} / {}", f(a), f(h), f(l));
    let r = |x: f64, y: f64| x / y.max(f64::MIN_POSITIVE);
    let held_steady = r(a.held[0] as f64, l.held[0] as f64);
    let rss_after = r(a.rss[2] as f64, l.rss[2] as f64);
    println!();
    println!(
        "in one line: against Bevy's Local<Vec> the arenas took {:.0}% of its mean frame time \
         and {:.0}% at spikes, held {:.2}x its bytes in steady frames and {:.2}x {AFTER} frames \
         after a spike, with {:.2}x its RSS; against a fresh Vec each time, {:.0}% of the mean \
         frame and no heap allocation.",
        100.0 * r(a.mean, l.mean),
        100.0 * r(a.spike, l.spike),
        held_steady,
        r(a.held[2] as f64, l.held[2] as f64),
        rss_after,
        100.0 * r(a.mean, h.mean)
    );
    println!();
    println!("verdict, arena / heap / local-vec:");
    println!(
        "- frame time: mean {} ms, p50 {} ms, p99 {} ms, max {} ms, spike frame {} ms",
        three(&|s| ms(s.mean)),
        three(&|s| ms(s.p50)),
        three(&|s| ms(s.p99)),
        three(&|s| ms(s.max)),
        three(&|s| ms(s.spike))
    );
    println!(
        "- heap allocations per frame: own code {}, Bevy {}",
        three(&|s| format!("{:.1}", s.own_per_frame)),
        three(&|s| format!("{:.1}", s.bevy_per_frame))
    );
    println!(
        "- bytes held: steady {}, at the spike {}, {AFTER} frames after {}; RSS {AFTER} frames \
         after {}",
        three(&|s| bytes(s.held[0])),
        three(&|s| bytes(s.held[1])),
        three(&|s| bytes(s.held[2])),
        three(&|s| bytes(s.rss[2]))
    );
    if let Some(m) = find("heap+mimalloc") {
        println!(
            "- heap+mimalloc: mean {} ms, p99 {} ms, spike frame {} ms, RSS {AFTER} frames after \
             a spike {}",
            ms(m.mean),
            ms(m.p99),
            ms(m.spike),
            bytes(m.rss[2])
        );
    }
    if let Some(u) = find("heap untracked") {
        println!(
            "- heap tracking: the heap run's mean frame {} ms with the tracking allocator, {} ms \
             without ({:.3}x; target <= 1.05x)",
            ms(h.mean),
            ms(u.mean),
            r(h.mean, u.mean)
        );
    }
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("targets, arena against local-vec (this run; the README quotes the median of 3):");
    let target = |name: &str, ratio: f64, limit: f64| {
        println!(
            "- {name} <= {limit:.2}x: {} ({ratio:.3}x)",
            met(ratio <= limit)
        );
    };
    target("mean frame", r(a.mean, l.mean), 1.0);
    target("p99 frame", r(a.p99, l.p99), 1.05);
    target("spike frame", r(a.spike, l.spike), 1.05);
    target("bytes held in steady frames", held_steady, 1.25);
    target(
        &format!("bytes held {AFTER} frames after a spike"),
        r(a.held[2] as f64, l.held[2] as f64),
        0.1,
    );
    target(&format!("RSS {AFTER} frames after a spike"), rss_after, 1.0);
    println!(
        "- no heap allocation from the demo's own code in the arena run: {} ({} in {} frames)",
        met(a.own_total == 0),
        a.own_total,
        runs[0].frames.len()
    );
    let bevy = [a, h, l].map(|s| s.bevy_per_frame);
    let spread =
        bevy.iter().fold(f64::MIN, |m, &x| m.max(x)) - bevy.iter().fold(f64::MAX, |m, &x| m.min(x));
    println!(
        "- Bevy's allocations a frame the same in all three runs (within 0.5): {} ({})",
        met(spread <= 0.5),
        three(&|s| format!("{:.1}", s.bevy_per_frame))
    );
}

pub fn write_csv(path: &Path, runs: &[RunRecord]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "frame,run,spike,frame_time_us,own_allocs,bevy_allocs,held_bytes,live_heap_bytes,\
         rss_bytes,systems_held,with_scratch_held,frame_memory_held,need_grid,need_pairs,\
         need_neighbours,need_visible,need_lod,need_streaming,checksum"
    )?;
    for r in runs {
        for (i, f) in r.frames.iter().enumerate() {
            writeln!(
                out,
                "{i},{},{},{:.1},{},{},{},{},{},{},{},{},{},{}",
                r.run.name,
                u8::from(f.spike),
                f.micros,
                f.own_allocs,
                f.bevy_allocs,
                f.held,
                f.live_heap,
                f.rss,
                f.systems_held,
                f.with_scratch_held,
                f.frame_memory_held,
                f.needs.map(|n| n.to_string()).join(","),
                f.checksum
            )?;
        }
    }
    out.flush()
}
