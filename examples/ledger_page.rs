//! The memory page from a CSV the ledger wrote (`MemoryPlugin::ledger_csv`,
//! `LedgerSnapshot::write_csv_rows`, `History::write_csv`):
//!
//! `cargo run --example ledger_page -- ledger.csv page.html [frames]`
//!
//! keeps the last `frames` frames (all of them by default, up to
//! `ledger::MAX_HISTORY_FRAMES`) and writes the page, to open in a browser from disk. A
//! file that is not the ledger's CSV is refused with the line and the fix named.

use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;

use nebula_memory::ledger::{History, MAX_HISTORY_FRAMES, page::Page};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(csv), Some(html)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: ledger_page LEDGER.csv PAGE.html [FRAMES]");
        return ExitCode::FAILURE;
    };
    let frames = match args.get(3).map(|f| f.parse::<usize>()) {
        None => MAX_HISTORY_FRAMES,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("FRAMES is a number of frames, not {:?}", args[3]);
            return ExitCode::FAILURE;
        }
    };
    let file = match File::open(csv) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot open {csv}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let history = match History::from_csv(BufReader::new(file), frames) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{csv}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = std::path::Path::new(csv)
        .file_stem()
        .map_or("ledger".into(), |s| s.to_string_lossy().into_owned());
    if let Err(e) = Page::new(name.clone()).run(name, &history).write_to(html) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    println!(
        "wrote {html}: {} frames of {} lines",
        history.len(),
        history.lines().count()
    );
    ExitCode::SUCCESS
}
