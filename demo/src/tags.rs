//! The ledger tags of the demo's systems (each system's `TaggedScratch` charges its own),
//! and the arena run's tag table: the ledger's held bytes per tag in a steady frame, at the
//! first spike and `AFTER` frames after it, then the crate's own table at the end.

use nebula_memory::bevy::ScratchTag;
use nebula_memory::ledger::LedgerSnapshot;

use crate::report::{AFTER, bytes};

/// The physics system's grid and contact pairs.
pub struct Physics;
impl ScratchTag for Physics {
    const TAG: &'static str = "demo/physics";
}

/// The culling system's visible list (before it is stored in `FrameMemory`).
pub struct Culling;
impl ScratchTag for Culling {
    const TAG: &'static str = "demo/culling";
}

/// LOD sorting's keys and positions.
pub struct Lod;
impl ScratchTag for Lod {
    const TAG: &'static str = "demo/lod";
}

/// The streamed chunks' voxels, masks and quads.
pub struct Streaming;
impl ScratchTag for Streaming {
    const TAG: &'static str = "demo/streaming";
}

/// The ledger at the frames the tag table shows, kept by the arena run's process (the
/// ledger is its own).
#[derive(Default)]
pub struct Watch {
    steady: Option<LedgerSnapshot>,
    /// The first spike: its frame and the ledger after it.
    spike: Option<(usize, LedgerSnapshot)>,
    after: Option<LedgerSnapshot>,
}

impl Watch {
    /// Looks at the ledger after measured frame `index`: `spike` if it was a spike frame,
    /// `next_spike` if the next one is.
    pub fn frame(&mut self, index: usize, spike: bool, next_spike: bool, ledger: &LedgerSnapshot) {
        if self.spike.is_none() && next_spike {
            self.steady = Some(ledger.clone());
        }
        if self.spike.is_none() && spike {
            self.spike = Some((index, ledger.clone()));
        }
        if let Some((at, _)) = self.spike
            && index == at + AFTER
        {
            self.after = Some(ledger.clone());
        }
    }

    /// The table's lines: held bytes per tag at the three moments, then `last`'s own table.
    pub fn table(&self, last: &LedgerSnapshot) -> Vec<String> {
        let held = |s: &Option<LedgerSnapshot>, tag: &str| {
            s.as_ref()
                .and_then(|s| s.tag(tag))
                .map_or("-".to_owned(), |f| bytes(f.held as i64))
        };
        let spike = self.spike.as_ref().map(|(_, s)| s.clone());
        let mut lines = vec![format!(
            "{:<24} {:>10} {:>10} {:>10}",
            "held by tag", "steady", "at spike", "+120 fr."
        )];
        for (tag, _) in last.tags() {
            let depth = tag.matches('/').count();
            let leaf = tag.rsplit('/').next().unwrap_or(tag);
            lines.push(format!(
                "{:<24} {:>10} {:>10} {:>10}",
                format!("{}{leaf}", "  ".repeat(depth)),
                held(&self.steady, tag),
                held(&spike, tag),
                held(&self.after, tag)
            ));
        }
        lines.push(String::new());
        lines.push("the ledger at the end (nebula_memory::bevy::MemoryLedger):".to_owned());
        lines.extend(last.to_string().lines().map(str::to_owned));
        lines
    }
}
