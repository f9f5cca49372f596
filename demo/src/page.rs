//! The memory page of the demo's tracked runs: each child sends its ledger's history of
//! every frame as the ledger's CSV (`History::write_csv`); the page is read back from
//! those (`History::from_csv`), one run each, chosen in the page.

use std::path::Path;

use nebula_memory::ledger::{History, page::Page};

use crate::runs::{RunRecord, WARM_UP};

/// Writes the page of the runs that sent a history to `path`.
pub fn write(
    path: &Path,
    runs: &[RunRecord],
    frames: usize,
    entities: usize,
) -> Result<(), String> {
    let histories: Vec<(&str, History)> = runs
        .iter()
        .filter(|r| !r.history.is_empty())
        .map(|r| {
            History::from_csv(r.history.as_bytes(), WARM_UP + frames)
                .map(|h| (r.run.name, h))
                .map_err(|e| format!("the {} run's history: {e}", r.run.name))
        })
        .collect::<Result<_, _>>()?;
    let title = format!(
        "frame_loop: {frames} frames after {WARM_UP} of warm-up, {entities} entities, its runs"
    );
    let page = histories
        .iter()
        .fold(Page::new(title), |page, (name, h)| page.run(*name, h));
    page.write_to(path).map_err(|e| e.to_string())
}
