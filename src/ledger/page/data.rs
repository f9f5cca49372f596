//! The history as the page's data: JSON that the page's script reads, embedded in the
//! page and returned by the remote methods (`bevy::remote`), one writer for both.
//!
//! A run is `{"name", "frames", "lines": [{"tag", "depth", "budgets", "held", "live",
//! "peak", "alloc", "calls", "rising", "flags"}]}`, lines in tree order. Each series is a
//! list of whole numbers, run-length coded: a negative number `-k` repeats the value before
//! it `k` more times (figures are never negative), so a steady line costs a few numbers
//! whatever the frames; `frames` codes the steps between frame numbers the same way (the
//! first step from 0). `budgets` lists `[frame, warn, limit]` changes (`null`: unset);
//! `flags` are `LineFrame::flags`. Strings are escaped so that no `<` ends the page's
//! script element early.

use std::io::{self, Write};

use crate::ledger::history::{History, LineFrame, LineHistory};
use crate::ledger::snapshot::tree_order;

/// The format's name and version, in every document.
pub(crate) const FORMAT: &str = "nebula_memory.ledger/1";

/// Writes `s` as a JSON string, with `<`, `>` and `&` as `\u` escapes.
pub(crate) fn string(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(b"\"")?;
    for c in s.chars() {
        match c {
            '"' => w.write_all(b"\\\"")?,
            '\\' => w.write_all(b"\\\\")?,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => write!(w, "\\u{:04x}", c as u32)?,
            c if (c as u32) < 0x20 => write!(w, "\\u{:04x}", c as u32)?,
            c => write!(w, "{c}")?,
        }
    }
    w.write_all(b"\"")
}

/// Writes `values` run-length coded (see the module's docs).
fn series(w: &mut impl Write, values: impl Iterator<Item = u64>) -> io::Result<()> {
    w.write_all(b"[")?;
    let mut last: Option<u64> = None;
    let mut repeats = 0u64;
    let mut first = true;
    let sep = |w: &mut dyn Write, first: &mut bool| -> io::Result<()> {
        if !std::mem::take(first) {
            w.write_all(b",")?;
        }
        Ok(())
    };
    for v in values {
        if last == Some(v) {
            repeats += 1;
            continue;
        }
        if repeats > 0 {
            sep(w, &mut first)?;
            write!(w, "-{repeats}")?;
            repeats = 0;
        }
        sep(w, &mut first)?;
        write!(w, "{v}")?;
        last = Some(v);
    }
    if repeats > 0 {
        sep(w, &mut first)?;
        write!(w, "-{repeats}")?;
    }
    w.write_all(b"]")
}

fn optional(w: &mut impl Write, v: Option<u64>) -> io::Result<()> {
    match v {
        Some(v) => write!(w, "{v}"),
        None => w.write_all(b"null"),
    }
}

/// A series of the run: its key and its figure.
type Field = (&'static str, fn(&LineFrame) -> u64);

/// The history's lines in tree order.
fn tree(history: &History) -> Vec<&LineHistory> {
    let mut lines: Vec<&LineHistory> = history.lines().collect();
    lines.sort_by(|a, b| tree_order(a.tag(), b.tag()));
    lines
}

/// Call sites by line, for the lines of a page of this process's own ledger.
pub(crate) type Sites = std::collections::HashMap<String, crate::ledger::CallSites>;

/// Writes one run: the frames of `history` after `since` (all with `None`); `alone`: a
/// document of its own (the remote method's), with the format and the last frame; each
/// line with its call sites in `sites` as `"sites": [{kind, site, bytes, share, calls}]`
/// (`kind` "holds" or "churns", `bytes` a frame for the latter, `calls` the samples).
pub(crate) fn run(
    w: &mut impl Write,
    name: &str,
    history: &History,
    since: Option<u64>,
    alone: bool,
    sites: &Sites,
) -> io::Result<()> {
    let after = |f: u64| since.is_none_or(|s| f > s);
    w.write_all(b"{")?;
    if alone {
        write!(w, "\"format\":\"{FORMAT}\",\"last\":")?;
        optional(w, history.last_frame())?;
        w.write_all(b",")?;
    }
    w.write_all(b"\"name\":")?;
    string(w, name)?;
    w.write_all(b",\"frames\":")?;
    let mut previous = 0u64;
    let steps = history.frames().filter(|&f| after(f)).map(|f| {
        let step = f.saturating_sub(previous);
        previous = f;
        step
    });
    series(w, steps)?;
    w.write_all(b",\"lines\":[")?;
    for (i, line) in tree(history).into_iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(b"{\"tag\":")?;
        string(w, line.tag())?;
        write!(w, ",\"depth\":{},\"budgets\":[", line.depth())?;
        for (j, b) in line.budgets().iter().enumerate() {
            if j > 0 {
                w.write_all(b",")?;
            }
            write!(w, "[{},", b.frame)?;
            optional(w, b.warn)?;
            w.write_all(b",")?;
            optional(w, b.limit)?;
            w.write_all(b"]")?;
        }
        w.write_all(b"]")?;
        let fields: [Field; 7] = [
            ("held", |f| f.held),
            ("live", |f| f.heap_live),
            ("peak", |f| f.heap_frame_peak),
            ("alloc", |f| f.heap_alloc_bytes),
            ("calls", |f| u64::from(f.heap_allocs)),
            ("rising", |f| u64::from(f.rising_windows)),
            ("flags", |f| u64::from(f.flags)),
        ];
        for (key, get) in fields {
            write!(w, ",\"{key}\":")?;
            let values = history
                .figures(line)
                .filter(|&(f, _)| after(f))
                .map(|(_, x)| get(&x));
            series(w, values)?;
        }
        if let Some(found) = sites.get(line.tag()) {
            line_sites(w, found)?;
        }
        w.write_all(b"}")?;
    }
    w.write_all(b"]}")
}

/// `,"sites":[..]`: a line's top call sites of each kind.
fn line_sites(w: &mut impl Write, found: &crate::ledger::CallSites) -> io::Result<()> {
    w.write_all(b",\"sites\":[")?;
    let kinds = [("holds", &found.held), ("churns", &found.churn)];
    let mut first = true;
    for (kind, list) in kinds {
        for s in list.iter().take(10) {
            if !first {
                w.write_all(b",")?;
            }
            first = false;
            write!(w, "{{\"kind\":\"{kind}\",\"site\":")?;
            let place = match (&s.file, s.line) {
                (Some(f), Some(l)) => format!("{} ({f}:{l})", s.function),
                _ => s.function.clone(),
            };
            string(w, &place)?;
            write!(
                w,
                ",\"bytes\":{},\"share\":{:.4},\"calls\":{}}}",
                s.bytes, s.share, s.samples
            )?;
        }
    }
    w.write_all(b"]")
}

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// Writes the lines' tree: `{"format", "lines": [{"tag", "depth", "parent"}]}`, in tree
/// order (`parent` is `null` at the top).
pub(crate) fn lines(w: &mut impl Write, history: &History) -> io::Result<()> {
    write!(w, "{{\"format\":\"{FORMAT}\",\"lines\":[")?;
    for (i, line) in tree(history).into_iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(b"{\"tag\":")?;
        string(w, line.tag())?;
        write!(w, ",\"depth\":{},\"parent\":", line.depth())?;
        match line.tag().rfind('/') {
            Some(i) => string(w, &line.tag()[..i])?,
            None => w.write_all(b"null")?,
        }
        w.write_all(b"}")?;
    }
    w.write_all(b"]}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coded(values: &[u64]) -> String {
        let mut out = Vec::new();
        series(&mut out, values.iter().copied()).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Decodes what `series` wrote, as the page's script does (`NMDraw.decode`).
    fn decoded(text: &str) -> Vec<u64> {
        let mut out = Vec::new();
        let inner = text.trim_start_matches('[').trim_end_matches(']');
        for n in inner.split(',').filter(|s| !s.is_empty()) {
            let n: i128 = n.parse().unwrap();
            if n < 0 {
                let last = *out.last().unwrap();
                out.extend(std::iter::repeat_n(last, n.unsigned_abs() as usize));
            } else {
                out.push(n as u64);
            }
        }
        out
    }

    #[test]
    fn series_are_run_length_coded_and_decode_to_themselves() {
        let cases: [&[u64]; 6] = [
            &[],
            &[5],
            &[0, 0, 0, 0],
            &[1, 2, 2, 3, 3, 3, 1],
            &[7, 7, 8],
            &[u64::MAX, u64::MAX],
        ];
        for values in cases {
            let text = coded(values);
            assert_eq!(decoded(&text), values, "{text}");
        }
        assert_eq!(coded(&[4; 1000]), "[4,-999]");
    }

    #[test]
    fn strings_cannot_end_the_script_element() {
        let mut out = Vec::new();
        string(&mut out, "a</script><!--\"\\\n").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert_eq!(text, "\"a\\u003c/script\\u003e\\u003c!--\\\"\\\\\\u000a\"");
    }
}
