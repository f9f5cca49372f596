//! A line's samples grouped into call sites and ranked.

use std::collections::HashMap;
use std::fmt;

use super::symbols::{Frame, Symbols};
use super::types::CallSite;
use crate::heap::sample::table::Site;

/// Callers kept with a site, for context.
const CALLERS: usize = 3;

/// The sites of `figures` (bytes, samples by site slot), grouped by their first frame
/// (one function and line reached through several stacks is one site), bytes divided by
/// `per` (frames, for churn), largest first, with shares.
pub(super) fn rank(
    symbols: &mut Symbols,
    sites: &HashMap<u32, &Site>,
    figures: &HashMap<u32, (u64, u64)>,
    per: u64,
) -> Vec<CallSite> {
    // Keyed by the site's function, file and line.
    type Key = (String, Option<String>, Option<u32>);
    let mut grouped: HashMap<Key, (CallSite, u64)> = HashMap::new();
    for (slot, &(bytes, samples)) in figures {
        let Some(site) = sites.get(slot) else {
            continue;
        };
        let frames = symbols.frames(site.stack.frames());
        let (function, file, line, callers) = match frames.split_first() {
            Some((top, rest)) => (
                top.function.clone(),
                top.file.clone(),
                top.line,
                callers(top, rest),
            ),
            None => (
                "unknown (no call stack)".to_string(),
                None,
                None,
                Vec::new(),
            ),
        };
        let e = grouped
            .entry((function.clone(), file.clone(), line))
            .or_insert_with(|| {
                let site = CallSite {
                    function,
                    file,
                    line,
                    callers,
                    bytes: 0,
                    share: 0.0,
                    samples: 0,
                };
                (site, 0)
            });
        e.1 = e.1.saturating_add(bytes);
        e.0.samples += samples;
    }
    let per = per.max(1);
    let total: u64 = grouped.values().map(|(_, b)| *b).sum();
    let mut out: Vec<CallSite> = grouped
        .into_values()
        .map(|(mut s, bytes)| {
            s.bytes = bytes / per;
            s.share = if total == 0 {
                0.0
            } else {
                bytes as f64 / total as f64
            };
            s
        })
        .filter(|s| s.share > 0.0)
        .collect();
    out.sort_by(|a, b| {
        b.share
            .total_cmp(&a.share)
            .then(a.function.cmp(&b.function))
    });
    out
}

/// The few frames above a site, as `function (file:line)`.
fn callers(top: &Frame, rest: &[Frame]) -> Vec<String> {
    let mut out = Vec::new();
    let mut inlined = top.inlined;
    for f in rest.iter().filter(|f| !f.trim).take(CALLERS) {
        let mark = if inlined { " [inlined]" } else { "" };
        out.push(format!("{}{}{mark}", f.function, Where(&f.file, f.line)));
        inlined = f.inlined;
    }
    out
}

/// ` (file:line)`, or nothing without a file.
pub(super) struct Where<'a>(pub(super) &'a Option<String>, pub(super) Option<u32>);

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(file), Some(line)) => write!(f, " ({file}:{line})"),
            (Some(file), None) => write!(f, " ({file})"),
            _ => Ok(()),
        }
    }
}
