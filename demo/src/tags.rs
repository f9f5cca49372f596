//! The ledger tags of the demo's systems (each system's `TaggedScratch` charges its own),
//! the arena run's tag table (the ledger's held bytes per tag in a steady frame, at the
//! first spike and `AFTER` frames after it, then the crate's own table at the end), and
//! each Bevy system's heap use, which the plugin charges to `systems/<name>`.

use nebula_memory::bevy::ScratchTag;
use std::collections::BTreeMap;

use nebula_memory::ledger::LedgerSnapshot;

use crate::units::bytes;
use crate::workload::AFTER;

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
        // The arena tags: every tag that held blocks at one of the three moments.
        let shown = |tag: &str| {
            [&self.steady, &spike, &self.after].iter().any(|s| {
                s.as_ref()
                    .and_then(|s| s.tag(tag))
                    .is_some_and(|f| f.held > 0)
            })
        };
        for (tag, _) in last.tags().filter(|(tag, _)| shown(tag)) {
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

/// Where the heap allocations of a run happen, system by system: from the ledger's
/// `systems/<name>` tags (the plugin charges each system's heap use to one) and the
/// crate's own `nebula_memory/<name>` lines, summed over
/// the measured frames, steady and spike frames apart.
#[derive(Default)]
pub struct SystemsHeap {
    /// Per system (and `(untagged heap)` for the rest): allocation calls in steady frames,
    /// in spike frames, and heap bytes live after the last frame.
    systems: BTreeMap<&'static str, (u64, u64, usize)>,
    steady_frames: u64,
    spike_frames: u64,
}

/// The line of the heap allocations outside every system and tag scope.
const OUTSIDE: &str = "(outside systems)";

impl SystemsHeap {
    /// Adds a measured frame, from the ledger snapshot taken at its end.
    pub fn frame(&mut self, spike: bool, ledger: &LedgerSnapshot) {
        if spike {
            self.spike_frames += 1;
        } else {
            self.steady_frames += 1;
        }
        let outside = ledger.untagged_heap();
        let rows = ledger
            .tags()
            .filter_map(|(tag, f)| {
                // The app's systems by name; the crate's own frame end by its tag.
                let own = tag.starts_with("nebula_memory/").then_some(tag);
                tag.strip_prefix("systems/").or(own).map(|name| (name, f))
            })
            .chain([(OUTSIDE, outside)]);
        for (name, f) in rows {
            let e = self.systems.entry(name).or_default();
            if spike {
                e.1 += f.heap_allocs;
            } else {
                e.0 += f.heap_allocs;
            }
            e.2 = f.heap_live;
        }
    }

    /// One line per system: `name steady spike live`, allocations a frame (means) and
    /// bytes live. Systems that never allocated are left out.
    pub fn lines(&self) -> Vec<String> {
        let per = |n: u64, frames: u64| n as f64 / frames.max(1) as f64;
        self.systems
            .iter()
            .filter(|&(_, &(steady, spike, live))| steady + spike > 0 || live > 0)
            .map(|(name, &(steady, spike, live))| {
                format!(
                    "{}\t{:.1}\t{:.1}\t{live}",
                    name,
                    per(steady, self.steady_frames),
                    per(spike, self.spike_frames)
                )
            })
            .collect()
    }
}
