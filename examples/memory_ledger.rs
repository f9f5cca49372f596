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
//! others go on. At the end it prints the ledger's tree table and where the CSV went.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use nebula_memory::ledger::{self, Budget, LedgerSnapshot};
use nebula_memory::{AllocError, Arena, ArenaConfig, MemoryArena, game_pool};

const FRAMES: u64 = 300;

fn main() -> std::io::Result<()> {
    #[cfg(feature = "tracy")]
    ledger::enable_tracy(true); // a headless loop: the ledger marks the frames

    ledger::set_budget("ai", Budget::Warn(3 << 20));
    ledger::set_budget("ai/pathfinding", Budget::Limit(2 << 20));
    let arena = |tag| MemoryArena::with_config(game_pool(), ArenaConfig::default().tag(tag));
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
    let mut last = None;
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
        last = Some(snap);
        for a in [&mut meshing, &mut culling, &mut paths, &mut perception] {
            a.reset();
        }
    }
    csv.flush()?;
    println!(
        "{FRAMES} frames; the path finder's flood was refused {refused} times by its budget\n"
    );
    if let Some(snap) = last {
        println!("{snap}\n");
    }
    println!(
        "per-frame rows (one per tag per frame): {}",
        csv_path.display()
    );
    Ok(())
}
