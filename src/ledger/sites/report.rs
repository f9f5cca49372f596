//! Call sites written out: as text (the table's and the exit report's), CSV rows and
//! JSON.

/// Sites a text report shows of each kind.
const SHOWN: usize = 5;

use std::fmt;
use std::io;

use super::query::{call_sites, frames_ago, grown_since};
use super::rank::Where;
use super::types::{CallSite, CallSites};
use crate::ledger::table::Bytes;
use crate::ledger::{LedgerSnapshot, RISING_WINDOWS, TagFigures};

impl fmt::Display for CallSites {
    /// The top sites of each kind, indented, or a line saying why there are none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(mean) = self.mean else {
            return writeln!(
                f,
                "  call sites: sampling is off (NEBULA_MEMORY_SAMPLE=<mean bytes>, or ledger::set_sampling)"
            );
        };
        if !self.stacks {
            writeln!(f, "  call sites: no call stacks on this target")?;
        }
        if self.held.is_empty() && self.churn.is_empty() {
            return writeln!(
                f,
                "  call sites: none sampled yet (one sample per {} allocated on average)",
                Bytes(mean)
            );
        }
        if let Some(frame) = self.since {
            writeln!(f, "  allocated since frame {frame} and still held:")?;
        }
        for (kind, sites, unit) in [
            ("holds ", &self.held, ""),
            ("churns", &self.churn, "/frame"),
        ] {
            for s in sites.iter().take(SHOWN) {
                writeln!(
                    f,
                    "  {kind} {:>5.1}%  ~{}{unit}  {}{}",
                    s.share * 100.0,
                    Bytes(usize::try_from(s.bytes).unwrap_or(usize::MAX)),
                    s.function,
                    Where(&s.file, s.line)
                )?;
                if let Some(c) = s.callers.first() {
                    writeln!(f, "          called from {c}")?;
                }
            }
        }
        Ok(())
    }
}

impl CallSites {
    /// Writes the header of [`write_csv_rows`](Self::write_csv_rows)'s rows.
    ///
    /// ```
    /// let mut out = Vec::new();
    /// nebula_memory::ledger::CallSites::write_csv_header(&mut out).unwrap();
    /// assert!(out.starts_with(b"tag,kind,rank,"));
    /// ```
    pub fn write_csv_header(w: &mut impl io::Write) -> io::Result<()> {
        writeln!(w, "tag,kind,rank,bytes,share,samples,function,file,line")
    }

    /// One CSV row per site: `kind` is `held` (live bytes) or `churn` (bytes per frame);
    /// text fields quoted.
    ///
    /// ```
    /// let mut out = Vec::new();
    /// nebula_memory::ledger::call_sites("doc/csv").write_csv_rows(&mut out).unwrap();
    /// ```
    pub fn write_csv_rows(&self, w: &mut impl io::Write) -> io::Result<()> {
        for (kind, sites) in [("held", &self.held), ("churn", &self.churn)] {
            for (rank, s) in sites.iter().enumerate() {
                writeln!(
                    w,
                    "{},{kind},{},{},{:.6},{},{},{},{}",
                    quoted(&self.tag),
                    rank + 1,
                    s.bytes,
                    s.share,
                    s.samples,
                    quoted(&s.function),
                    quoted(s.file.as_deref().unwrap_or("")),
                    s.line.map_or(String::new(), |l| l.to_string())
                )?;
            }
        }
        Ok(())
    }

    /// The sites as one JSON object: `{"tag":..,"mean":..,"frames":..,"stacks":..,
    /// "held":[{"function":..,"file":..,"line":..,"bytes":..,"share":..,"samples":..,
    /// "callers":[..]}],"churn":[..]}`.
    ///
    /// ```
    /// let json = nebula_memory::ledger::call_sites("doc/json").to_json();
    /// assert!(json.starts_with("{\"tag\":\"doc/json\""));
    /// ```
    pub fn to_json(&self) -> String {
        let list = |sites: &[CallSite]| {
            let items: Vec<String> = sites
                .iter()
                .map(|s| {
                    let callers: Vec<String> = s.callers.iter().map(|c| json_str(c)).collect();
                    format!(
                        "{{\"function\":{},\"file\":{},\"line\":{},\"bytes\":{},\"share\":{:.6},\"samples\":{},\"callers\":[{}]}}",
                        json_str(&s.function),
                        s.file.as_deref().map_or("null".into(), json_str),
                        s.line.map_or("null".into(), |l| l.to_string()),
                        s.bytes,
                        s.share,
                        s.samples,
                        callers.join(",")
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        };
        format!(
            "{{\"tag\":{},\"mean\":{},\"frames\":{},\"stacks\":{},\"dropped\":{},\"held\":{},\"churn\":{}}}",
            json_str(&self.tag),
            self.mean.map_or("null".into(), |m| m.to_string()),
            self.frames,
            self.stacks,
            self.dropped,
            list(&self.held),
            list(&self.churn)
        )
    }
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Lines of the report that get their call sites besides the flagged ones: the top few
/// by heap churn and by heap live (leaves: a parent's sites are its children's).
const TOP_LINES: usize = 3;

impl LedgerSnapshot {
    /// Where in the code the heap of the lines that matter comes from: each line flagged
    /// RISING or over a budget, and the three busiest leaves by heap allocated this frame
    /// and by heap live, each with its top call sites ([`call_sites`](super::call_sites)).
    /// What the Bevy plugin's exit report prints under the table when sampling is on.
    /// With sampling off, one line saying how to turn it on. Symbolises stacks: not for
    /// every frame. O(lines + samples).
    ///
    /// ```
    /// let snap = nebula_memory::ledger::snapshot();
    /// println!("{snap}\n{}", snap.call_site_report());
    /// ```
    pub fn call_site_report(&self) -> String {
        crate::heap::sample::read_env();
        let Some(mean) = crate::heap::sample::current_mean() else {
            return "call sites: sampling is off (NEBULA_MEMORY_SAMPLE=<mean bytes>, or \
                    ledger::set_sampling)\n"
                .to_string();
        };
        let rows: Vec<(&'static str, TagFigures)> = self.tags().collect();
        let leaf = |tag: &str| {
            !rows
                .iter()
                .any(|(t, _)| t.strip_prefix(tag).is_some_and(|r| r.starts_with('/')))
        };
        let mut chosen: Vec<(&'static str, &'static str)> = Vec::new();
        for (tag, x) in &rows {
            if x.heap_rising_windows >= RISING_WINDOWS {
                chosen.push((tag, "RISING"));
            } else if x.over_warn() || x.over_limit() {
                chosen.push((tag, "over budget"));
            }
        }
        type Key = fn(&TagFigures) -> usize;
        let keys: [(Key, &str); 2] = [
            (|x| x.heap_alloc_bytes, "top churn"),
            (|x| x.heap_live, "top live heap"),
        ];
        for (key, why) in keys {
            let mut by: Vec<_> = rows.iter().filter(|(t, x)| leaf(t) && key(x) > 0).collect();
            by.sort_by_key(|(_, x)| std::cmp::Reverse(key(x)));
            for (tag, _) in by.into_iter().take(TOP_LINES) {
                if !chosen.iter().any(|(t, _)| t == tag) {
                    chosen.push((tag, why));
                }
            }
        }
        let mut out = format!(
            "call sites (sampled heap: one sample per {} allocated on average; estimates):\n",
            Bytes(mean)
        );
        if !crate::heap::sample::stack::AVAILABLE {
            out.push_str("  no call stacks on this target\n");
        }
        for (tag, why) in chosen {
            out.push_str(&format!("{tag} ({why}):\n{}", call_sites(tag)));
            let rising = self.tag(tag).map_or(0, |x| x.heap_rising_windows);
            if rising >= RISING_WINDOWS {
                // The sites whose live bytes rose: what was allocated over the rising
                // windows and is still held.
                let frames = u64::from(rising) * u64::from(crate::ledger::growth_window());
                let grown = grown_since(frames_ago(frames), tag);
                out.push_str(&grown.to_string());
            }
        }
        out
    }
}
