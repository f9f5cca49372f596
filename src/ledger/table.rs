//! The ledger as tables a person reads: [`LedgerSnapshot`]'s `Display` is the compact
//! table, sized to 100 columns for names of the usual length, [`FullTable`] every column
//! and line, [`Warnings`] what a person should look at (lines rising, over a budget now or
//! ever).
//!
//! **The compact table** shows the columns that say something: with arenas idle (no tag
//! holds a block) only the heap's (live now; this frame's peak, calls and bytes), with the
//! heap untracked only the arenas', with both the most telling of each; and the lines that
//! say something: a line with nothing held,
//! live or counted this frame, and no mark, is folded into a count at the end. Marks, not
//! budgets, stand at the end of a line (`RISING`, `OVER WARN`, `OVER LIMIT`); the full
//! table has the budgets.

use std::fmt;

use super::RISING_WINDOWS;
use super::snapshot::{LedgerSnapshot, Row, TagFigures};

/// Bytes in binary units, one decimal.
pub(crate) struct Bytes(pub(crate) usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut unit = 0;
        while v >= 1024.0 && unit < UNITS.len() - 1 {
            v /= 1024.0;
            unit += 1;
        }
        let text = if unit == 0 {
            format!("{} B", self.0)
        } else {
            format!("{v:.1} {}", UNITS[unit])
        };
        f.pad(&text)
    }
}

/// A line's name in the tree: its last segment, indented by its depth.
fn name(r: &Row) -> String {
    let leaf = r.tag.rsplit('/').next().unwrap_or(r.tag);
    format!("{}{leaf}", "  ".repeat(r.depth))
}

/// The marks of a line: its heap rising, its holdings over a budget now.
fn marks(x: &TagFigures) -> String {
    let mut out = String::new();
    if x.heap_rising_windows >= RISING_WINDOWS {
        out.push_str(" RISING");
    }
    if x.over_warn() {
        out.push_str(" OVER WARN");
    }
    if x.over_limit() {
        out.push_str(" OVER LIMIT");
    }
    out
}

/// Whether a line says nothing now: nothing held or live, nothing counted this frame, no
/// mark.
fn idle(x: &TagFigures) -> bool {
    x.held == 0
        && x.heap_held == 0
        && x.heap_live == 0
        && x.heap_frame_peak == 0
        && x.heap_allocs == 0
        && x.heap_frees == 0
        && marks(x).is_empty()
}

/// Which column groups a snapshot's tables show.
struct Shown {
    arenas: bool,
    heap: bool,
}

impl Shown {
    fn of(s: &LedgerSnapshot) -> Shown {
        Shown {
            arenas: s.untagged > 0
                || s.rows.iter().any(|r| {
                    let x = &r.figures;
                    x.held > 0 || x.peak_held > 0 || x.heap_held > 0
                }),
            heap: s.heap_total() > 0 || s.untagged_heap.heap_allocs > 0,
        }
    }
}

impl fmt::Display for LedgerSnapshot {
    /// The compact tree table (see the module docs of `ledger::table`): one line per tag
    /// that says something, children indented under their parent, then the untagged lines
    /// and the total. `{:#}` prints [`full_table`](LedgerSnapshot::full_table) instead.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return write!(f, "{}", self.full_table());
        }
        let shown = Shown::of(self);
        let rows: Vec<&Row> = self.rows.iter().filter(|r| !idle(&r.figures)).collect();
        let width = rows.iter().map(|r| name(r).len()).fold(15, usize::max);
        // The columns of a line, by the groups shown.
        let cols = |x: &TagFigures| -> String {
            match (shown.arenas, shown.heap) {
                (true, true) => format!(
                    " {:>9} {:>9}  {:>9} {:>9} {:>6} {:>6}",
                    Bytes(x.held),
                    Bytes(x.peak_held),
                    Bytes(x.heap_live),
                    Bytes(x.heap_frame_peak),
                    x.heap_allocs,
                    x.heap_frees
                ),
                (false, true) => format!(
                    " {:>9}  {:>9} {:>6} {:>6} {:>9} {:>9}",
                    Bytes(x.heap_live),
                    Bytes(x.heap_frame_peak),
                    x.heap_allocs,
                    x.heap_frees,
                    Bytes(x.heap_alloc_bytes),
                    Bytes(x.heap_free_bytes)
                ),
                _ => format!(
                    " {:>9} {:>9} {:>9} {:>7} {:>8}",
                    Bytes(x.held),
                    Bytes(x.peak_held),
                    Bytes(x.used),
                    x.blocks_taken,
                    x.blocks_returned
                ),
            }
        };
        let (over, head) = match (shown.arenas, shown.heap) {
            (true, true) => (
                format!(
                    "{:-^19}  {:-^34}",
                    " arena blocks ", " heap (peak this frame) "
                ),
                format!(
                    "{:>9} {:>9}  {:>9} {:>9} {:>6} {:>6}",
                    "held", "peak", "live", "peak", "allocs", "frees"
                ),
            ),
            (false, true) => (
                format!("{:^9}  {:-^44}", "heap", " heap this frame "),
                format!(
                    "{:>9}  {:>9} {:>6} {:>6} {:>9} {:>9}",
                    "live", "peak", "allocs", "frees", "allocated", "freed"
                ),
            ),
            _ => (
                format!("{:-^47}", " arena blocks (pool memory) "),
                format!(
                    "{:>9} {:>9} {:>9} {:>7} {:>8}",
                    "held", "peak", "used", "taken", "returned"
                ),
            ),
        };
        writeln!(f, "{:<width$} {over}", "")?;
        writeln!(f, "{:<width$} {head}", "tag")?;
        for r in &rows {
            writeln!(
                f,
                "{:<width$}{}{}",
                name(r),
                cols(&r.figures),
                marks(&r.figures)
            )?;
        }
        if shown.arenas && self.untagged > 0 {
            writeln!(f, "{:<width$} {:>9}", "(untagged)", Bytes(self.untagged))?;
        }
        if shown.heap {
            let mut untagged = self.untagged_heap;
            untagged.held = 0;
            untagged.peak_held = 0;
            writeln!(f, "{:<width$}{}", "(untagged heap)", cols(&untagged))?;
        }
        if shown.arenas || !shown.heap {
            write!(f, "{:<width$} {:>9}", "total", Bytes(self.total()))?;
            if shown.heap {
                write!(f, "  (heap {})", Bytes(self.heap_total()))?;
            }
        } else {
            write!(
                f,
                "{:<width$} {:>9}",
                "total heap",
                Bytes(self.heap_total())
            )?;
        }
        let folded = self.rows.len() - rows.len();
        if folded > 0 {
            write!(
                f,
                "\n({folded} idle lines folded; `{{:#}}` shows every line and column)"
            )?;
        }
        if shown.heap {
            write!(
                f,
                "\n(allocs: alloc and realloc calls; a realloc's old bytes are in `freed`, with \
                 no free call)"
            )?;
        }
        Ok(())
    }
}

impl LedgerSnapshot {
    /// Every line and every column: the arenas' (held, peak held, used, heap-fallback
    /// bytes, blocks taken and returned), the heap's (live and peak ever; this frame's peak,
    /// calls and bytes), budgets and marks. Also `format!("{snapshot:#}")`. O(tags).
    ///
    /// ```
    /// let snap = nebula_memory::ledger::snapshot();
    /// let full = snap.full_table().to_string();
    /// assert!(full.contains("fallback") && full.contains("budget"));
    /// assert_eq!(full, format!("{snap:#}"));
    /// ```
    pub fn full_table(&self) -> FullTable<'_> {
        FullTable(self)
    }

    /// What a person should look at, a line each: tags whose heap keeps rising, tags over
    /// a budget now, tags that crossed one earlier. Empty (`is_empty`) when there is
    /// nothing. O(tags).
    ///
    /// ```
    /// use nebula_memory::ledger::{self, Budget};
    /// ledger::set_budget("doc/warned", Budget::Warn(0));
    /// let _s = ledger::scope("doc/warned");
    /// let kept = vec![1u8; 64];
    /// let snap = ledger::snapshot();
    /// # let _ = &kept;
    /// // With a `TrackingAllocator` installed the heap crosses the budget; without one,
    /// // nothing is charged and there is nothing to say.
    /// let text = snap.warnings().to_string();
    /// assert_eq!(snap.warnings().is_empty(), text.is_empty());
    /// ```
    pub fn warnings(&self) -> Warnings<'_> {
        Warnings(self)
    }
}

/// [`LedgerSnapshot::full_table`]: prints every line and column.
pub struct FullTable<'a>(&'a LedgerSnapshot);

impl fmt::Display for FullTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snap = self.0;
        let heap = Shown::of(snap).heap;
        let width = snap.rows.iter().map(|r| name(r).len()).fold(15, usize::max);
        let heap_cols = |x: &TagFigures| {
            if heap {
                format!(
                    " {:>10} {:>10} | {:>10} {:>7} {:>7} {:>10} {:>10}",
                    Bytes(x.heap_live),
                    Bytes(x.heap_peak),
                    Bytes(x.heap_frame_peak),
                    x.heap_allocs,
                    x.heap_frees,
                    Bytes(x.heap_alloc_bytes),
                    Bytes(x.heap_free_bytes)
                )
            } else {
                String::new()
            }
        };
        write!(f, "{:<width$} {:-^62}", "", " arena blocks (pool memory) ")?;
        if heap {
            write!(
                f,
                " {:-^21} | {:-^48}",
                " heap now, ever ", " heap this frame "
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "{:<width$} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
            "tag", "held", "peak held", "used", "fallback", "taken", "returned"
        )?;
        if heap {
            write!(
                f,
                " {:>10} {:>10} | {:>10} {:>7} {:>7} {:>10} {:>10}",
                "live", "peak", "peak", "allocs", "frees", "allocated", "freed"
            )?;
        }
        writeln!(f, "  budget")?;
        for r in &snap.rows {
            let x = &r.figures;
            let budget = match (x.warn_budget, x.limit_budget) {
                (None, None) => String::new(),
                (Some(w), None) => format!("warn {}", Bytes(w)),
                (None, Some(l)) => format!("limit {}", Bytes(l)),
                (Some(w), Some(l)) => format!("warn {}, limit {}", Bytes(w), Bytes(l)),
            };
            writeln!(
                f,
                "{:<width$} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}{}  {budget}{}",
                name(r),
                Bytes(x.held),
                Bytes(x.peak_held),
                Bytes(x.used),
                Bytes(x.heap_held),
                x.blocks_taken,
                x.blocks_returned,
                heap_cols(x),
                marks(x),
            )?;
        }
        writeln!(f, "{:<width$} {:>10}", "(untagged)", Bytes(snap.untagged))?;
        if heap {
            let blank = "";
            writeln!(
                f,
                "{:<width$} {blank:>10} {blank:>10} {blank:>10} {blank:>9} {blank:>9} \
                 {blank:>9}{}",
                "(untagged heap)",
                heap_cols(&snap.untagged_heap)
            )?;
        }
        write!(f, "{:<width$} {:>10}", "total", Bytes(snap.total()))?;
        if heap {
            write!(f, "  (heap {})", Bytes(snap.heap_total()))?;
        }
        Ok(())
    }
}

/// [`LedgerSnapshot::warnings`]: a line per tag that rises or crossed a budget.
pub struct Warnings<'a>(&'a LedgerSnapshot);

impl Warnings<'_> {
    /// Whether there is nothing to say. O(tags).
    ///
    /// ```
    /// let snap = nebula_memory::ledger::LedgerSnapshot::default();
    /// assert!(snap.warnings().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        !self.0.rows.iter().any(|r| worth_a_warning(&r.figures))
    }
}

fn worth_a_warning(x: &TagFigures) -> bool {
    !marks(x).is_empty() || x.budget_crossings > 0
}

impl fmt::Display for Warnings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in self.0.rows.iter().filter(|r| worth_a_warning(&r.figures)) {
            let x = &r.figures;
            write!(f, "{}:", r.tag)?;
            if x.heap_rising_windows >= RISING_WINDOWS {
                write!(
                    f,
                    " live heap RISING for {} growth windows ({} live now);",
                    x.heap_rising_windows,
                    Bytes(x.heap_live)
                )?;
            }
            let reached = x.reached();
            if let Some(w) = x.warn_budget.filter(|&w| reached > w) {
                write!(
                    f,
                    " over its warn budget of {} ({});",
                    Bytes(w),
                    Bytes(reached)
                )?;
            }
            if let Some(l) = x.limit_budget.filter(|&l| reached > l) {
                write!(f, " over its limit of {} ({});", Bytes(l), Bytes(reached))?;
            }
            if x.budget_crossings > 0 {
                write!(f, " crossed a budget {} times", x.budget_crossings)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
