//! A history to and from the ledger's CSV (`LedgerSnapshot::write_csv_rows`, the file
//! `MemoryPlugin::ledger_csv` writes): [`History::from_csv`] reads one, by its header's
//! column names (a file from before the `budget_crossings` column reads too, without
//! crossing marks); [`History::write_csv`] writes a history in the same format, the
//! columns it does not keep left empty.
//!
//! Each row becomes the [`TagFigures`] the snapshot had, and goes through the same
//! recording as a live frame: the marks are judged by the same functions.

use std::fmt;
use std::io::{self, BufRead, Write};

use super::{History, LineFrame, LineHistory};
use crate::ledger::snapshot::{LedgerSnapshot, TagFigures};

/// Why a CSV could not be read as the ledger's: the line (1 is the header) and what to fix.
///
/// ```
/// use nebula_memory::ledger::History;
/// let err = History::from_csv("frame,tag\n1,a\n".as_bytes(), 10).unwrap_err();
/// assert_eq!(err.line(), 1);
/// assert!(err.to_string().contains("held_bytes"), "{err}");
/// ```
#[derive(Debug)]
pub struct CsvError {
    line: usize,
    message: String,
    source: Option<io::Error>,
}

impl CsvError {
    /// The line the error is on (1 is the header; 0: reading failed before any line).
    ///
    /// ```
    /// use nebula_memory::ledger::History;
    /// let err = History::from_csv("".as_bytes(), 10).unwrap_err();
    /// assert_eq!(err.line(), 0);
    /// ```
    pub fn line(&self) -> usize {
        self.line
    }

    fn at(line: usize, message: String) -> CsvError {
        CsvError {
            line,
            message,
            source: None,
        }
    }
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "ledger CSV, line {}: {}", self.line, self.message)
        } else {
            write!(f, "ledger CSV: {}", self.message)
        }
    }
}

impl std::error::Error for CsvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

/// The columns a history needs, by the names `LedgerSnapshot::write_csv_header` gives.
const NEEDED: [&str; 10] = [
    "frame",
    "tag",
    "held_bytes",
    "warn_budget_bytes",
    "limit_budget_bytes",
    "heap_live_bytes",
    "heap_allocs",
    "heap_alloc_bytes",
    "heap_rising_windows",
    "heap_frame_peak_bytes",
];
/// Optional: files written before it have no crossing marks.
const CROSSINGS: &str = "budget_crossings";

impl History {
    /// Reads a CSV the ledger wrote (`MemoryPlugin::ledger_csv`,
    /// [`LedgerSnapshot::write_csv_rows`], [`History::write_csv`]) into a history of its
    /// last `frames` frames (at most [`MAX_HISTORY_FRAMES`](super::MAX_HISTORY_FRAMES);
    /// fewer if the file has fewer). Frames must rise down the file.
    ///
    /// # Errors
    /// Reading, and a file that is not the ledger's CSV: a missing column, a field that is
    /// not a number, a frame that does not rise. The error names the line and the fix.
    ///
    /// ```
    /// use nebula_memory::ledger::{self, History, LedgerSnapshot};
    /// let mut csv = Vec::new();
    /// LedgerSnapshot::write_csv_header(&mut csv).unwrap();
    /// for frame in 1..=3 {
    ///     ledger::end_frame().write_csv_rows(&mut csv, frame).unwrap();
    /// }
    /// let history = History::from_csv(&csv[..], 600).unwrap();
    /// assert_eq!(history.frames().collect::<Vec<_>>(), [1, 2, 3]);
    ///
    /// let bad = History::from_csv("frame,tag,held_bytes\nx".as_bytes(), 600);
    /// assert!(bad.unwrap_err().to_string().contains("no column `warn_budget_bytes`"));
    /// ```
    pub fn from_csv(reader: impl BufRead, frames: usize) -> Result<History, CsvError> {
        let keep = frames.min(super::MAX_HISTORY_FRAMES);
        let mut records = Records { reader, line: 0 };
        let Some(header) = records.next_record()? else {
            return Err(CsvError::at(
                0,
                "the file is empty: a ledger CSV starts with the header \
                 LedgerSnapshot::write_csv_header writes"
                    .into(),
            ));
        };
        let column = |name: &str| header.iter().position(|h| h == name);
        let mut at = [0usize; NEEDED.len()];
        for (slot, name) in at.iter_mut().zip(NEEDED) {
            *slot = column(name).ok_or_else(|| {
                CsvError::at(
                    1,
                    format!(
                        "the header has no column `{name}`: is this a CSV the ledger wrote \
                         (MemoryPlugin::ledger_csv, LedgerSnapshot::write_csv_rows)?"
                    ),
                )
            })?;
        }
        let crossings_at = column(CROSSINGS);
        let mut build = Build::default();
        while let Some(fields) = records.next_record()? {
            let line = records.line;
            if fields.len() == 1 && fields[0].is_empty() {
                continue; // a blank line
            }
            if fields.len() < header.len() {
                return Err(CsvError::at(
                    line,
                    format!(
                        "{} fields, the header has {}: the row is cut short",
                        fields.len(),
                        header.len()
                    ),
                ));
            }
            let number = |i: usize| -> Result<u64, CsvError> {
                let field = fields[at[i]].trim();
                if field.is_empty() {
                    return Ok(0);
                }
                field.parse().map_err(|_| {
                    CsvError::at(
                        line,
                        format!(
                            "column `{}`: `{field}` is not a whole number of bytes or counts",
                            NEEDED[i]
                        ),
                    )
                })
            };
            let optional =
                |i: usize| number(i).map(|v| (!fields[at[i]].trim().is_empty()).then_some(v));
            let frame = number(0)?;
            let tag = fields[at[1]].as_str();
            if tag.is_empty() || tag.split('/').any(str::is_empty) {
                return Err(CsvError::at(
                    line,
                    format!("`{tag}` is not a tag: a '/'-separated path of non-empty segments"),
                ));
            }
            let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            let crossings = match crossings_at {
                Some(c) if !fields[c].trim().is_empty() => {
                    fields[c].trim().parse().map_err(|_| {
                        CsvError::at(
                            line,
                            format!("column `{CROSSINGS}`: `{}` is not a count", fields[c]),
                        )
                    })?
                }
                _ => 0,
            };
            let figures = TagFigures {
                held: size(number(2)?),
                warn_budget: optional(3)?.map(size),
                limit_budget: optional(4)?.map(size),
                heap_live: size(number(5)?),
                heap_allocs: number(6)?,
                heap_alloc_bytes: size(number(7)?),
                heap_rising_windows: u32::try_from(number(8)?).unwrap_or(u32::MAX),
                heap_frame_peak: size(number(9)?),
                budget_crossings: crossings,
                ..TagFigures::default()
            };
            build.row(line, frame, tag, &figures)?;
        }
        Ok(build.finish(keep))
    }

    /// Writes the history as the ledger's CSV (the header of
    /// [`LedgerSnapshot::write_csv_header`], a row per line per frame, oldest first); the
    /// columns it does not keep are empty, and `budget_crossings` counts from its first
    /// frame. [`History::from_csv`] reads it back to the same history.
    ///
    /// # Errors
    /// The writer's.
    ///
    /// ```
    /// use nebula_memory::ledger::{self, History};
    /// let mut history = History::new(4);
    /// history.record(&ledger::end_frame());
    /// let mut csv = Vec::new();
    /// history.write_csv(&mut csv).unwrap();
    /// let back = History::from_csv(&csv[..], 4).unwrap();
    /// assert_eq!(back.frames().collect::<Vec<_>>(), [1]);
    /// assert_eq!(back.lines().count(), history.lines().count());
    /// ```
    pub fn write_csv(&self, w: &mut impl Write) -> io::Result<()> {
        LedgerSnapshot::write_csv_header(w)?;
        let mut lines: Vec<&LineHistory> = self.lines.iter().collect();
        lines.sort_by(|a, b| crate::ledger::snapshot::tree_order(&a.tag, &b.tag));
        let mut crossings = vec![0u64; lines.len()];
        let mut budget_at = vec![0usize; lines.len()];
        for s in self.slots() {
            let frame = self.frames[s];
            for (i, l) in lines.iter().enumerate() {
                let f = l.ring[s];
                if f.flags & super::CROSSED != 0 {
                    crossings[i] = crossings[i].saturating_add(1);
                }
                while budget_at[i] + 1 < l.budgets.len()
                    && l.budgets[budget_at[i] + 1].frame <= frame
                {
                    budget_at[i] += 1;
                }
                let budget = l.budgets.get(budget_at[i]).filter(|b| b.frame <= frame);
                let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
                writeln!(
                    w,
                    "{frame},{},{},{},,,,,,,{},{},{},,{},,{},,{},{},{}",
                    crate::ledger::snapshot::csv_field(&l.tag),
                    l.depth,
                    f.held,
                    opt(budget.and_then(|b| b.warn)),
                    opt(budget.and_then(|b| b.limit)),
                    f.heap_live,
                    f.heap_allocs,
                    f.heap_alloc_bytes,
                    f.rising_windows,
                    f.heap_frame_peak,
                    crossings[i]
                )?;
            }
        }
        Ok(())
    }
}

/// A history growing frame by frame as a CSV is read, cut to the frames kept at the end.
#[derive(Default)]
struct Build {
    frames: Vec<u64>,
    lines: Vec<LineHistory>,
    by_tag: std::collections::HashMap<Box<str>, usize>,
}

impl Build {
    fn row(&mut self, line: usize, frame: u64, tag: &str, f: &TagFigures) -> Result<(), CsvError> {
        match self.frames.last() {
            Some(&last) if frame == last => {}
            Some(&last) if frame < last => {
                return Err(CsvError::at(
                    line,
                    format!(
                        "frame {frame} after frame {last}: frames must rise down the file \
                         (two runs' CSVs joined? read each by itself)"
                    ),
                ));
            }
            _ => {
                self.frames.push(frame);
                for l in &mut self.lines {
                    l.ring.push(LineFrame::default());
                }
            }
        }
        let n = self.frames.len();
        let i = match self.by_tag.get(tag) {
            Some(&i) => i,
            None => {
                self.lines.push(LineHistory {
                    tag: tag.into(),
                    depth: u16::try_from(tag.matches('/').count()).unwrap_or(u16::MAX),
                    ring: vec![LineFrame::default(); n],
                    budgets: Vec::new(),
                    crossings: 0,
                });
                self.by_tag.insert(tag.into(), self.lines.len() - 1);
                self.lines.len() - 1
            }
        };
        self.lines[i].put(n - 1, frame, f);
        Ok(())
    }

    /// The history of the last `keep` frames.
    fn finish(mut self, keep: usize) -> History {
        let cut = self.frames.len().saturating_sub(keep);
        self.frames.drain(..cut);
        for l in &mut self.lines {
            l.ring.drain(..cut);
        }
        let len = self.frames.len();
        let mut history = History {
            capacity: len,
            frames: self.frames,
            len,
            next: 0,
            lines: self.lines,
            by_tag: self.by_tag,
            row_lines: Vec::new(),
            row_tags: Vec::new(),
        };
        history.prune_budgets();
        history
    }
}

/// The CSV's records: fields split at commas outside quotes, `""` a quote inside them; a
/// quoted field may span lines.
struct Records<R> {
    reader: R,
    /// The line the last record ended on.
    line: usize,
}

impl<R: BufRead> Records<R> {
    fn next_record(&mut self) -> Result<Option<Vec<String>>, CsvError> {
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut any = false;
        loop {
            let mut text = String::new();
            let read = self.reader.read_line(&mut text).map_err(|e| CsvError {
                line: self.line + 1,
                message: format!("reading failed: {e}"),
                source: Some(e),
            })?;
            if read == 0 {
                if quoted {
                    return Err(CsvError::at(self.line, "a quoted field never ends".into()));
                }
                if !any {
                    return Ok(None);
                }
                fields.push(field);
                return Ok(Some(fields));
            }
            any = true;
            self.line += 1;
            let mut chars = text.chars().peekable();
            while let Some(c) = chars.next() {
                match (quoted, c) {
                    (true, '"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    (true, '"') => quoted = false,
                    (true, c) => field.push(c),
                    (false, '"') if field.is_empty() => quoted = true,
                    (false, ',') => fields.push(std::mem::take(&mut field)),
                    (false, '\n' | '\r') => {}
                    (false, c) => field.push(c),
                }
            }
            if !quoted {
                fields.push(field);
                return Ok(Some(fields));
            }
        }
    }
}
