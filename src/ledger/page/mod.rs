//! The memory page: the ledger's [`History`] as one self-contained HTML file, read in a
//! browser from disk with no network.
//!
//! What it shows: every line's live heap and held arena bytes over the frames, stacked by
//! the tree of tags (a parent folded into one band, or unfolded into its children and what
//! it holds itself); each frame's peak; heap bytes and calls allocated per frame; budget
//! crossings, RISING lines and spike frames marked on the chart and listed. Hovering gives
//! a frame's exact figures; choosing a line shows its own history with its budgets (and
//! the frames over them); dragging zooms to a range of frames; a click and a shift-click
//! compare two frames (what each line gained between them). Given a game's address, the
//! same page follows a running app over Bevy's remote protocol (feature `remote`,
//! `nebula_memory::bevy::remote`).
//!
//! **Written by** [`Page::write_to`] (any history: several runs in one page), the Bevy
//! plugin's exit report to an `.html` destination (`ExitReport::File`, or the
//! environment variable `NEBULA_MEMORY_REPORT=<path>`), `MemoryLedger::write_page`, and
//! from a CSV the ledger wrote ([`History::from_csv`]; `examples/ledger_page.rs`).
//!
//! **Made of** `page.html` (the frame), `page.css`, `draw.js` (the drawing: small pure
//! functions and a canvas, no library) and `data.js` (the runs decoded, live frames
//! appended), both tested by `tests/page/page.test.cjs` under Node, and `app.js` (what a
//! person does with it), each included whole (`include_str!`), and
//! the history as JSON ([`data`](self) module's format: run-length coded series, so a
//! steady line costs a few numbers however many frames). The page's Content Security
//! Policy allows no image, font, frame or script from anywhere: only the remote requests
//! a person asks for.

mod data;

use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::history::History;

use data::FORMAT;
#[cfg(feature = "remote")]
pub(crate) use data::{lines as write_lines, run as write_run};

const HTML: &str = include_str!("page.html");
const CSS: &str = include_str!("page.css");
const DRAW: &str = include_str!("draw.js");
const DATA_JS: &str = include_str!("data.js");
const APP: &str = include_str!("app.js");

/// A page of one or more runs' histories (a game's run; the demo's several runs, one
/// chosen at a time).
///
/// ```
/// use nebula_memory::ledger::{self, History, page::Page};
/// let mut history = History::new(60);
/// for _ in 0..3 {
///     history.record(&ledger::end_frame());
/// }
/// let mut html = Vec::new();
/// Page::new("my game").run("run 1", &history).write(&mut html).unwrap();
/// let html = String::from_utf8(html).unwrap();
/// assert!(html.starts_with("<!DOCTYPE html>") && html.contains("run 1"));
/// ```
#[derive(Debug, Default)]
pub struct Page<'h> {
    title: String,
    runs: Vec<(String, &'h History)>,
    call_sites: bool,
}

impl<'h> Page<'h> {
    /// A page titled `title`, with no run yet.
    ///
    /// ```
    /// let page = nebula_memory::ledger::page::Page::new("empty");
    /// # let _ = page;
    /// ```
    pub fn new(title: impl Into<String>) -> Page<'h> {
        Page {
            title: title.into(),
            runs: Vec::new(),
            call_sites: false,
        }
    }

    /// Shows each line's call sites (the process's sampled call stacks, `ledger::call_sites`)
    /// when the line is chosen: for a page of this process's own ledger, with sampling on
    /// (not for runs read from another process's CSV).
    ///
    /// ```
    /// use nebula_memory::ledger::{History, page::Page};
    /// let history = History::new(10);
    /// let page = Page::new("this process").run("now", &history).call_sites();
    /// # let _ = page;
    /// ```
    pub fn call_sites(mut self) -> Page<'h> {
        self.call_sites = true;
        self
    }

    /// Adds a run: `history`, shown as `name`.
    ///
    /// ```
    /// use nebula_memory::ledger::{History, page::Page};
    /// let (a, b) = (History::new(10), History::new(10));
    /// let page = Page::new("two runs").run("arena", &a).run("heap", &b);
    /// # let _ = page;
    /// ```
    pub fn run(mut self, name: impl Into<String>, history: &'h History) -> Page<'h> {
        self.runs.push((name.into(), history));
        self
    }

    /// Writes the page.
    ///
    /// # Errors
    /// The writer's.
    ///
    /// ```
    /// use nebula_memory::ledger::{History, page::Page};
    /// let mut out = Vec::new();
    /// Page::new("t").run("r", &History::new(1)).write(&mut out).unwrap();
    /// assert!(String::from_utf8(out).unwrap().ends_with("</html>\n"));
    /// ```
    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        // The frame's pieces, between its markers.
        let mut rest = HTML;
        while let Some(at) = rest.find("{{") {
            w.write_all(&rest.as_bytes()[..at])?;
            let end = rest[at..].find("}}").map_or(rest.len(), |e| at + e + 2);
            match &rest[at..end] {
                "{{title}}" => escape_html(w, &self.title)?,
                "{{css}}" => w.write_all(CSS.as_bytes())?,
                "{{draw}}" => w.write_all(DRAW.as_bytes())?,
                "{{data_js}}" => w.write_all(DATA_JS.as_bytes())?,
                "{{app}}" => w.write_all(APP.as_bytes())?,
                "{{data}}" => self.data(w)?,
                other => w.write_all(other.as_bytes())?,
            }
            rest = &rest[end..];
        }
        w.write_all(rest.as_bytes())
    }

    /// Writes the page to `path` (created, or truncated).
    ///
    /// # Errors
    /// Creating or writing the file; the message names the path.
    ///
    /// ```
    /// use nebula_memory::ledger::{History, page::Page};
    /// let err = Page::new("t").write_to("/no/such/dir/page.html").unwrap_err();
    /// assert!(err.to_string().contains("/no/such/dir/page.html"), "{err}");
    /// ```
    pub fn write_to(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        let named = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot write the memory page to {}: {e} (does its directory exist, and \
                     may this program write there?)",
                    path.display()
                ),
            )
        };
        let file = std::fs::File::create(path).map_err(named)?;
        let mut out = BufWriter::new(file);
        self.write(&mut out)
            .and_then(|()| out.flush())
            .map_err(named)
    }

    /// The data: `{"format", "title", "rising_windows", "runs": [..]}`.
    fn data(&self, w: &mut impl Write) -> io::Result<()> {
        write!(w, "{{\"format\":\"{FORMAT}\",\"title\":")?;
        data::string(w, &self.title)?;
        write!(
            w,
            ",\"rising_windows\":{},\"runs\":[",
            super::RISING_WINDOWS
        )?;
        let mut sites = data::Sites::new();
        if self.call_sites {
            let mut tags: Vec<&str> = self
                .runs
                .iter()
                .flat_map(|(_, h)| h.lines().map(|l| l.tag()))
                .collect();
            tags.sort_unstable();
            tags.dedup();
            for found in crate::ledger::sites::call_sites_of(&tags) {
                if !found.held.is_empty() || !found.churn.is_empty() {
                    sites.insert(found.tag.clone(), found);
                }
            }
        }
        for (i, (name, history)) in self.runs.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            data::run(w, name, history, None, false, &sites)?;
        }
        w.write_all(b"]}")
    }
}

/// Writes `s` as HTML text.
fn escape_html(w: &mut impl Write, s: &str) -> io::Result<()> {
    for c in s.chars() {
        match c {
            '<' => w.write_all(b"&lt;")?,
            '>' => w.write_all(b"&gt;")?,
            '&' => w.write_all(b"&amp;")?,
            '"' => w.write_all(b"&quot;")?,
            c => write!(w, "{c}")?,
        }
    }
    Ok(())
}
