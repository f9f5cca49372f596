//! The ledger over time: the last N frames of every line's figures, in a ring.
//!
//! A [`History`] copies, at each frame end, seven figures of every line of the frame's
//! [`LedgerSnapshot`] (the one per-frame record that the table, the CSV rows, the Tracy
//! plots and the exit report also read): arena bytes held, live heap, the heap's peak
//! within the frame, heap bytes and calls allocated in the frame, the growth windows it
//! rose in, and three marks (over its warn budget, over its limit, a budget crossing
//! counted in the frame), judged exactly as the table marks them. Budgets are kept as a
//! list of changes per line. The memory page (`page`) and Bevy's remote methods read it;
//! none of them computes a figure of its own.
//!
//! **Memory.** A line's ring is made whole when the line first appears: [`LineFrame`] is
//! 40 bytes, so a history holds `40 × lines × frames` bytes plus 8 a frame (600 frames of
//! 200 lines: 4.8 MB), stated by [`History::memory_bytes`]. Nothing grows after that but
//! the lines (the registry only grows) and a line's list of budget changes (one entry per
//! change still inside the ring). Once every line is seen, recording a frame allocates
//! nothing.
//!
//! **Cost.** Recording copies each line's figures into its ring: O(lines), no lookup
//! (the snapshot's rows are mapped to lines once, again only when tags are added). For an
//! app of 800 lines it is measured in `benches/ledger.rs` (README, "The memory page": 24
//! µs a frame on a loaded 2-core machine, beside the 83 µs of the frame end's snapshot).
//!
//! The two untagged lines of a snapshot are lines here too, at the top level:
//! [`UNTAGGED`] (pool bytes no tag holds, as `held`) and [`UNTAGGED_HEAP`] (the heap
//! outside every scope), so that the top-level lines add up to the snapshot's totals.

mod csv;

use std::collections::HashMap;

pub use csv::CsvError;

use super::RISING_WINDOWS;
use super::snapshot::{LedgerSnapshot, TagFigures};

/// The line of pool bytes no tag holds ([`LedgerSnapshot::untagged`]), as the CSV names it.
///
/// ```
/// let mut h = nebula_memory::ledger::History::new(1);
/// let snap = nebula_memory::ledger::snapshot();
/// h.record(&snap);
/// let line = h.line(nebula_memory::ledger::UNTAGGED).unwrap();
/// assert_eq!(h.figures(line).last().unwrap().1.held, snap.untagged() as u64);
/// ```
pub const UNTAGGED: &str = "(untagged)";
/// The line of the heap outside every scope ([`LedgerSnapshot::untagged_heap`]).
///
/// ```
/// let mut h = nebula_memory::ledger::History::new(1);
/// h.record(&nebula_memory::ledger::snapshot());
/// assert!(h.line(nebula_memory::ledger::UNTAGGED_HEAP).is_some());
/// ```
pub const UNTAGGED_HEAP: &str = "(untagged heap)";

/// The most frames a [`History`] keeps: a day at 60 frames a second would be 5,184,000;
/// this is about 4.8 hours, 42 MB a line.
///
/// ```
/// use nebula_memory::ledger::{History, MAX_HISTORY_FRAMES};
/// assert_eq!(History::new(MAX_HISTORY_FRAMES).capacity(), MAX_HISTORY_FRAMES);
/// ```
pub const MAX_HISTORY_FRAMES: usize = 1 << 20;

/// [`LineFrame::flags`]: the line was over its warn budget at the frame's end (arena
/// bytes held plus the heap's peak within the frame, as the table judges it).
///
/// ```
/// use nebula_memory::ledger::{self, Budget, History, OVER_WARN};
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
/// ledger::set_budget("doc/over_warn", Budget::Warn(1));
/// let arena = MemoryArena::with_config(scratch_pool(), ArenaConfig::default().tag("doc/over_warn"));
/// arena.alloc_val(1u64);
/// let mut h = History::new(1);
/// h.record(&ledger::snapshot());
/// let line = h.line("doc/over_warn").unwrap();
/// assert_ne!(h.figures(line).last().unwrap().1.flags & OVER_WARN, 0);
/// ```
pub const OVER_WARN: u8 = 1;
/// [`LineFrame::flags`]: the line was over its hard limit at the frame's end.
///
/// ```
/// use nebula_memory::ledger::{CROSSED, OVER_LIMIT, OVER_WARN};
/// assert_eq!(OVER_WARN | OVER_LIMIT | CROSSED, 7); // three bits of `LineFrame::flags`
/// ```
pub const OVER_LIMIT: u8 = 2;
/// [`LineFrame::flags`]: the ledger counted a crossing of one of the line's budgets during
/// the frame (`TagFigures::budget_crossings` rose).
///
/// ```
/// use nebula_memory::ledger::{self, Budget, CROSSED, History};
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
/// ledger::set_budget("doc/crossed", Budget::Warn(1));
/// let mut h = History::new(4);
/// h.record(&ledger::snapshot());
/// let arena = MemoryArena::with_config(scratch_pool(), ArenaConfig::default().tag("doc/crossed"));
/// arena.alloc_val(1u64); // crosses the budget
/// h.record(&ledger::snapshot());
/// let line = h.line("doc/crossed").unwrap();
/// let flags: Vec<u8> = h.figures(line).map(|(_, f)| f.flags & CROSSED).collect();
/// assert_eq!(flags, [0, CROSSED]);
/// ```
pub const CROSSED: u8 = 4;

/// One line's figures in one frame (see [`TagFigures`] for each figure's meaning). Sizes
/// beyond 2^64 bytes do not occur; calls beyond `u32::MAX` in one frame and growth windows
/// beyond `u16::MAX` are kept at those values.
///
/// ```
/// assert_eq!(std::mem::size_of::<nebula_memory::ledger::LineFrame>(), 40);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineFrame {
    /// Bytes of pool blocks held (`TagFigures::held`).
    pub held: u64,
    /// Heap bytes live at the frame's end (`TagFigures::heap_live`).
    pub heap_live: u64,
    /// The most heap bytes live within the frame (`TagFigures::heap_frame_peak`).
    pub heap_frame_peak: u64,
    /// Heap bytes allocated in the frame (`TagFigures::heap_alloc_bytes`).
    pub heap_alloc_bytes: u64,
    /// Heap allocation calls in the frame (`TagFigures::heap_allocs`).
    pub heap_allocs: u32,
    /// Growth windows in a row the line's own live heap rose in
    /// (`TagFigures::heap_rising_windows`); RISING from [`RISING_WINDOWS`] on.
    pub rising_windows: u16,
    /// [`OVER_WARN`], [`OVER_LIMIT`], [`CROSSED`].
    pub flags: u8,
}

impl LineFrame {
    /// The frame's figures of a line whose crossings count was `crossings_before` at the
    /// frame before.
    pub(crate) fn of(f: &TagFigures, crossings_before: u64) -> LineFrame {
        let mut flags = 0;
        if f.over_warn() {
            flags |= OVER_WARN;
        }
        if f.over_limit() {
            flags |= OVER_LIMIT;
        }
        if f.budget_crossings > crossings_before {
            flags |= CROSSED;
        }
        LineFrame {
            held: f.held as u64,
            heap_live: f.heap_live as u64,
            heap_frame_peak: f.heap_frame_peak as u64,
            heap_alloc_bytes: f.heap_alloc_bytes as u64,
            heap_allocs: u32::try_from(f.heap_allocs).unwrap_or(u32::MAX),
            rising_windows: u16::try_from(f.heap_rising_windows).unwrap_or(u16::MAX),
            flags,
        }
    }

    /// Whether the line's heap was RISING (for [`RISING_WINDOWS`] windows or more).
    ///
    /// ```
    /// let f = nebula_memory::ledger::LineFrame::default();
    /// assert!(!f.rising());
    /// ```
    pub fn rising(&self) -> bool {
        u32::from(self.rising_windows) >= RISING_WINDOWS
    }
}

/// A change of a line's budgets, in force from `frame` on.
///
/// ```
/// use nebula_memory::ledger::{Budget, History};
/// nebula_memory::ledger::set_budget("doc/budget_change", Budget::Warn(4096));
/// let mut history = History::new(8);
/// history.record(&nebula_memory::ledger::snapshot());
/// let line = history.line("doc/budget_change").unwrap();
/// assert_eq!(line.budgets()[0].warn, Some(4096));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetChange {
    /// The first frame with these budgets.
    pub frame: u64,
    /// The warn budget, if set.
    pub warn: Option<u64>,
    /// The hard limit, if set.
    pub limit: Option<u64>,
}

/// One line's history: its ring of [`LineFrame`]s (the slots of the [`History`]'s frame
/// ring, read with [`History::figures`]) and its budget changes.
///
/// ```
/// let mut h = nebula_memory::ledger::History::new(4);
/// h.record(&nebula_memory::ledger::snapshot());
/// for line in h.lines() {
///     println!("{}: {:?}", line.tag(), h.figures(line).last());
/// }
/// ```
#[derive(Clone, Debug)]
pub struct LineHistory {
    tag: Box<str>,
    depth: u16,
    ring: Vec<LineFrame>,
    budgets: Vec<BudgetChange>,
    /// `TagFigures::budget_crossings` at the last frame recorded.
    crossings: u64,
}

impl LineHistory {
    /// The line's tag (a `/`-separated path, or [`UNTAGGED`] / [`UNTAGGED_HEAP`]).
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(4);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert!(h.lines().any(|l| l.tag() == nebula_memory::ledger::UNTAGGED_HEAP));
    /// ```
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Its depth in the tree of tags: 0 for a top-level line.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(4);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert!(h.lines().all(|l| l.depth() == l.tag().matches('/').count()));
    /// ```
    pub fn depth(&self) -> usize {
        usize::from(self.depth)
    }

    /// Its budget changes still in force within the history (the first may be older than
    /// the oldest frame kept), oldest first; empty for a line never budgeted.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(4);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert!(h.line(nebula_memory::ledger::UNTAGGED).unwrap().budgets().is_empty());
    /// ```
    pub fn budgets(&self) -> &[BudgetChange] {
        &self.budgets
    }
}

/// The last N frames of every line of the ledger (see the module's docs: memory, cost).
/// `MemoryPlugin` keeps one in its `MemoryLedger`; other games record one per frame.
///
/// ```
/// use nebula_memory::ledger::{self, History, LedgerSnapshot};
/// let mut snap = LedgerSnapshot::default();
/// let mut history = History::new(600); // ten seconds at 60 frames a second
/// for _frame in 0..3 {
///     ledger::end_frame_into(&mut snap);
///     history.record(&snap);
/// }
/// assert_eq!(history.frames().collect::<Vec<_>>(), [1, 2, 3]);
/// let untagged = history.line(ledger::UNTAGGED).unwrap();
/// assert_eq!(history.figures(untagged).last().unwrap().1.held, snap.untagged() as u64);
/// ```
#[derive(Clone, Debug, Default)]
pub struct History {
    capacity: usize,
    /// The frame ring: each slot's frame number (`len` of them valid); the next frame goes
    /// to `next`.
    frames: Vec<u64>,
    len: usize,
    next: usize,
    lines: Vec<LineHistory>,
    by_tag: HashMap<Box<str>, usize>,
    /// The snapshot rows' lines, and each row's tag's address, as last mapped.
    row_lines: Vec<usize>,
    row_tags: Vec<usize>,
}

impl History {
    /// A history of the last `frames` frames (0 keeps nothing, at no cost).
    ///
    /// # Panics
    /// If `frames` is over [`MAX_HISTORY_FRAMES`].
    ///
    /// ```
    /// let h = nebula_memory::ledger::History::new(120);
    /// assert_eq!((h.capacity(), h.len()), (120, 0));
    /// ```
    #[track_caller]
    pub fn new(frames: usize) -> History {
        assert!(
            frames <= MAX_HISTORY_FRAMES,
            "ledger::History::new: {frames} frames is over the most a history keeps, \
             MAX_HISTORY_FRAMES ({MAX_HISTORY_FRAMES}); each line takes 40 bytes a frame"
        );
        History {
            capacity: frames,
            ..History::default()
        }
    }

    /// The frames it keeps at most.
    ///
    /// ```
    /// assert_eq!(nebula_memory::ledger::History::new(7).capacity(), 7);
    /// ```
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The frames it holds now (at most [`capacity`](Self::capacity)).
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(2);
    /// for _ in 0..5 {
    ///     h.record(&nebula_memory::ledger::snapshot());
    /// }
    /// assert_eq!(h.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no frame.
    ///
    /// ```
    /// assert!(nebula_memory::ledger::History::new(2).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it holds: its rings, its lines' names and budget changes, its maps. An
    /// upper bound of what it will hold is `40 × lines × capacity` plus 8 a frame.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(100);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert!(h.memory_bytes() >= 40 * 100 * h.lines().count());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let lines: usize = self
            .lines
            .iter()
            .map(|l| {
                l.ring.capacity() * size_of::<LineFrame>()
                    + l.budgets.capacity() * size_of::<BudgetChange>()
                    + 2 * l.tag.len()
                    + size_of::<LineHistory>()
                    + size_of::<(Box<str>, usize)>()
            })
            .sum();
        lines
            + self.frames.capacity() * size_of::<u64>()
            + (self.row_lines.capacity() + self.row_tags.capacity()) * size_of::<usize>()
    }

    /// The frame numbers held, oldest first.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(2);
    /// for _ in 0..3 {
    ///     h.record(&nebula_memory::ledger::snapshot());
    /// }
    /// assert_eq!(h.frames().collect::<Vec<_>>(), [2, 3]);
    /// ```
    pub fn frames(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.slots().map(|s| self.frames[s])
    }

    /// The last frame recorded, if any.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(2);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert_eq!(h.last_frame(), Some(1));
    /// ```
    pub fn last_frame(&self) -> Option<u64> {
        (self.len > 0).then(|| self.frames[self.slot_back(1)])
    }

    /// Every line, in the order they were first seen (parents before their children).
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(2);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert!(h.lines().count() >= 2); // the two untagged lines at least
    /// ```
    pub fn lines(&self) -> impl ExactSizeIterator<Item = &LineHistory> + '_ {
        self.lines.iter()
    }

    /// The line of `tag`, if it was seen.
    ///
    /// ```
    /// let h = nebula_memory::ledger::History::new(2);
    /// assert!(h.line("doc/never").is_none());
    /// ```
    pub fn line(&self, tag: &str) -> Option<&LineHistory> {
        self.by_tag.get(tag).map(|&i| &self.lines[i])
    }

    /// A line's figures in each frame held, oldest first, with the frame's number (zeros
    /// for frames before the line was first seen, and for a line of another history).
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(4);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// let line = h.line(nebula_memory::ledger::UNTAGGED_HEAP).unwrap();
    /// assert_eq!(h.figures(line).count(), 1);
    /// ```
    pub fn figures<'a>(
        &'a self,
        line: &'a LineHistory,
    ) -> impl ExactSizeIterator<Item = (u64, LineFrame)> + 'a {
        self.slots().map(move |s| {
            (
                self.frames[s],
                line.ring.get(s).copied().unwrap_or_default(),
            )
        })
    }

    /// Records the frame's `snapshot` as the next frame (number 1 for the first). O(lines);
    /// allocates only for lines not seen before.
    ///
    /// ```
    /// let mut h = nebula_memory::ledger::History::new(4);
    /// h.record(&nebula_memory::ledger::snapshot());
    /// assert_eq!(h.len(), 1);
    /// ```
    pub fn record(&mut self, snapshot: &LedgerSnapshot) {
        if self.capacity == 0 {
            return;
        }
        let frame = self.last_frame().map_or(1, |f| f.saturating_add(1));
        let slot = self.begin_frame(frame);
        let rows = &snapshot.rows;
        let mapped = self.row_tags.len() == rows.len()
            && self
                .row_tags
                .iter()
                .zip(rows)
                .all(|(&a, r)| a == r.tag.as_ptr() as usize);
        if !mapped {
            self.row_lines.clear();
            self.row_tags.clear();
            for r in rows {
                let line = self.line_index(r.tag);
                self.row_lines.push(line);
                self.row_tags.push(r.tag.as_ptr() as usize);
            }
        }
        let untagged = self.line_index(UNTAGGED);
        let untagged_heap = self.line_index(UNTAGGED_HEAP);
        if self.lines.len() != rows.len() + 2 {
            // Lines this snapshot does not have (another snapshot's, or a CSV's): zero.
            for l in &mut self.lines {
                l.ring[slot] = LineFrame::default();
            }
        }
        for (r, &line) in rows.iter().zip(&self.row_lines) {
            self.lines[line].put(slot, frame, &r.figures);
        }
        let pools = TagFigures {
            held: snapshot.untagged,
            ..TagFigures::default()
        };
        self.lines[untagged].put(slot, frame, &pools);
        self.lines[untagged_heap].put(slot, frame, &snapshot.untagged_heap);
        self.prune_budgets();
    }

    /// The ring's slots held, oldest first.
    fn slots(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        let start = self.slot_back(self.len);
        (0..self.len).map(move |i| (start + i) % self.capacity.max(1))
    }

    /// The slot `back` frames before the next one.
    fn slot_back(&self, back: usize) -> usize {
        (self.next + self.capacity - back) % self.capacity.max(1)
    }

    /// Takes the next slot for `frame` (the oldest frame's, once the ring is full).
    fn begin_frame(&mut self, frame: u64) -> usize {
        if self.frames.is_empty() {
            self.frames = vec![0; self.capacity];
        }
        let slot = self.next;
        self.frames[slot] = frame;
        self.next = (slot + 1) % self.capacity;
        self.len = (self.len + 1).min(self.capacity);
        slot
    }

    /// The line of `tag`, made (its ring zeroed) when new.
    fn line_index(&mut self, tag: &str) -> usize {
        if let Some(&i) = self.by_tag.get(tag) {
            return i;
        }
        let i = self.lines.len();
        self.lines.push(LineHistory {
            tag: tag.into(),
            depth: u16::try_from(tag.matches('/').count()).unwrap_or(u16::MAX),
            ring: vec![LineFrame::default(); self.capacity],
            budgets: Vec::new(),
            crossings: 0,
        });
        self.by_tag.insert(tag.into(), i);
        i
    }

    /// Drops budget changes that an older one within the ring no longer needs: the one in
    /// force at the oldest frame stays.
    fn prune_budgets(&mut self) {
        let Some(oldest) = self.frames().next() else {
            return;
        };
        for l in &mut self.lines {
            let stale = l.budgets.iter().skip(1).take_while(|b| b.frame <= oldest);
            let n = stale.count();
            if n > 0 {
                l.budgets.drain(..n);
            }
        }
    }
}

impl LineHistory {
    /// Writes the frame's figures into `slot`, and a budget change if there was one.
    fn put(&mut self, slot: usize, frame: u64, f: &TagFigures) {
        self.ring[slot] = LineFrame::of(f, self.crossings);
        self.crossings = f.budget_crossings;
        let (warn, limit) = (
            f.warn_budget.map(|b| b as u64),
            f.limit_budget.map(|b| b as u64),
        );
        let now = self
            .budgets
            .last()
            .map_or((None, None), |b| (b.warn, b.limit));
        if now != (warn, limit) {
            self.budgets.push(BudgetChange { frame, warn, limit });
        }
    }
}
