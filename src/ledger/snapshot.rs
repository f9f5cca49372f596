//! A snapshot of the ledger: every tag's figures at one moment, as a value that prints as
//! a tree table (`table`) and writes CSV rows.
//!
//! Filling one reads each node's own figures once, then one pass from the last node to
//! the first adds each into its parent (the registry only grows, parents before children):
//! O(tags × threads) for the heap shards, O(tags) for the rest. A snapshot refilled each
//! frame keeps its tree order and recomputes it only when tags were added.

use std::fmt;
use std::io;

/// One tag's figures; a parent's include its children's.
///
/// ```
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
/// let arena = MemoryArena::with_config(scratch_pool(), ArenaConfig::default().tag("doc/figures"));
/// arena.alloc_val(1u64);
/// let f = nebula_memory::ledger::snapshot().tag("doc/figures").unwrap();
/// assert_eq!(f.held, arena.bytes_held());
/// assert_eq!(f.blocks_taken, 1);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagFigures {
    /// Bytes of pool blocks charged to the tag (and its children) now, headers included.
    pub held: usize,
    /// The most `held` ever.
    pub peak_held: usize,
    /// Bytes the tag's arenas use, as each last published it: at each reset (the peak of
    /// the frame that ended) and whenever it takes a block. The bump path publishes
    /// nothing, so an arena that is never reset shows its use as of its last new block.
    pub used: usize,
    /// Bytes of arena blocks taken from the system heap because the pool was exhausted
    /// (heap fallback), charged now (not in `held`: they are not pool memory; not in
    /// `heap_live` either: the crate takes them from the system allocator directly).
    pub heap_held: usize,
    /// Pool blocks taken, ever.
    pub blocks_taken: u64,
    /// Pool blocks given back, ever.
    pub blocks_returned: u64,
    /// Blocks taken from the system heap because the pool was exhausted, ever.
    pub heap_fallbacks: u64,
    /// The warn budget in bytes held (pool and heap), if set.
    pub warn_budget: Option<usize>,
    /// The hard budget in bytes held (pool and heap), if set.
    pub limit_budget: Option<usize>,
    /// Heap bytes allocated under the tag (and its children) through the
    /// [`TrackingAllocator`](crate::TrackingAllocator) and not yet freed, at the snapshot.
    /// Not in `held` or `heap_held`: each byte is counted once.
    pub heap_live: usize,
    /// The most heap bytes live under the tag ever: the largest `heap_frame_peak` of any
    /// frame (running; an upper bound, as that is).
    pub heap_peak: usize,
    /// The most heap bytes live under the tag since the last frame end, what was allocated
    /// and freed within the frame included (per frame). Each thread keeps the most its own
    /// allocations less its own frees reached; this is their sum: exactly the peak when
    /// one thread made the frame's allocations and frees of the tag (a system's own work),
    /// otherwise an upper bound of it, at most the live bytes at the frame's start plus
    /// `heap_alloc_bytes`. At least `heap_live`.
    pub heap_frame_peak: usize,
    /// Times the tag's holdings crossed its warn budget or its limit, ever (each crossing
    /// once, however long it stays over; the heap's part judged on the frame's peak).
    pub budget_crossings: u64,
    /// Heap allocation calls (`alloc`, `realloc`) under the tag since the last frame end
    /// ([`end_frame`](super::end_frame)).
    pub heap_allocs: u64,
    /// Heap free calls of allocations made under the tag since the last frame end.
    pub heap_frees: u64,
    /// Heap bytes allocated under the tag since the last frame end (a `realloc` counts its
    /// new size): with `heap_free_bytes`, what went through the heap this frame, including
    /// what was allocated and freed within it.
    pub heap_alloc_bytes: usize,
    /// Heap bytes of the tag's allocations freed since the last frame end (a `realloc`
    /// counts its old size).
    pub heap_free_bytes: usize,
    /// Growth windows in a row in which the lowest of the tag's own live heap (its
    /// children's apart) rose (see
    /// [`set_growth_window`](super::set_growth_window)): a leak, or a cache with no bound,
    /// once it reaches [`RISING_WINDOWS`](super::RISING_WINDOWS). 0 for a steady tag.
    pub heap_rising_windows: u32,
}

impl TagFigures {
    /// What a line's budgets judge: its arena bytes plus its heap's peak within the frame.
    /// The table's marks and the history's flags both read it.
    pub(crate) fn reached(&self) -> usize {
        self.held
            .saturating_add(self.heap_frame_peak.max(self.heap_live))
    }

    /// Over its warn budget at the snapshot.
    pub(crate) fn over_warn(&self) -> bool {
        self.warn_budget.is_some_and(|w| self.reached() > w)
    }

    /// Over its hard limit at the snapshot.
    pub(crate) fn over_limit(&self) -> bool {
        self.limit_budget.is_some_and(|l| self.reached() > l)
    }
}

/// One row of a snapshot.
#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) tag: &'static str,
    pub(super) depth: usize,
    pub(super) figures: TagFigures,
}

/// Every tag's figures at one moment ([`snapshot`](super::snapshot)), in tree order
/// (each tag followed by its children), and the untagged rest of the global pools.
///
/// Counters are read one by one while other threads may go on taking blocks, so figures
/// taken during heavy activity can disagree by a block or so.
///
/// ```
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
/// let config = ArenaConfig::default().tag("doc/tree/leaf");
/// let arena = MemoryArena::with_config(scratch_pool(), config);
/// arena.alloc_val(1u8);
/// let snap = nebula_memory::ledger::snapshot();
/// assert_eq!(snap.tag("doc/tree").unwrap().held, snap.tag("doc/tree/leaf").unwrap().held);
/// println!("{snap}"); // a tree table
/// ```
#[derive(Clone, Debug, Default)]
pub struct LedgerSnapshot {
    /// In tree order once filled (see [`tree_order`]).
    pub(super) rows: Vec<Row>,
    pub(super) untagged: usize,
    pub(super) untagged_heap: TagFigures,
    /// Working space kept to reuse its allocations (a snapshot refilled every frame
    /// allocates nothing once warm): each tag's own heap counters while the snapshot is
    /// taken, its subtree's sums (both by registry index), and the registry's indexes in
    /// tree order (recomputed only when tags were added).
    pub(super) own_heap: Vec<super::node::OwnHeap>,
    pub(super) sums: Vec<super::node::Subtree>,
    pub(super) order: Vec<usize>,
}

/// The tree order of tag paths: the order of the paths with '/' sorting before every other
/// character, which comparing by segments gives (a parent right before its children). Tags
/// are unique, so an unstable sort (which allocates nothing) by it is deterministic.
pub(super) fn tree_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

impl LedgerSnapshot {
    /// The figures of `tag` (a parent's include its children's), or `None` if no arena
    /// or budget has named it. O(tags).
    pub fn tag(&self, tag: &str) -> Option<TagFigures> {
        self.rows.iter().find(|r| r.tag == tag).map(|r| r.figures)
    }

    /// Every tag with its figures, in tree order. O(1).
    pub fn tags(&self) -> impl Iterator<Item = (&'static str, TagFigures)> + '_ {
        self.rows.iter().map(|r| (r.tag, r.figures))
    }

    /// Bytes of the global pools in use that no tag holds: blocks of untagged arenas and
    /// blocks taken with `MemoryPool::allocate_block` directly.
    pub fn untagged(&self) -> usize {
        self.untagged
    }

    /// The heap allocated outside every [`scope`](super::scope) (only the `heap_*` fields
    /// are set): with a [`TrackingAllocator`](crate::TrackingAllocator), the `(untagged
    /// heap)` line.
    pub fn untagged_heap(&self) -> TagFigures {
        self.untagged_heap
    }

    /// Heap bytes live under the top-level tags together, plus the untagged heap: every
    /// byte the [`TrackingAllocator`](crate::TrackingAllocator) has handed out and not
    /// got back.
    pub fn heap_total(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.depth == 0)
            .map(|r| r.figures.heap_live)
            .fold(self.untagged_heap.heap_live, usize::saturating_add)
    }

    /// Bytes held by the top-level tags together, plus [`untagged`](Self::untagged): the
    /// global pools' `in_use`, plus blocks tagged arenas took from pools of your own.
    pub fn total(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.depth == 0)
            .map(|r| r.figures.held)
            .fold(self.untagged, usize::saturating_add)
    }

    /// Writes the CSV header that [`write_csv_rows`](Self::write_csv_rows) follows. Units
    /// are bytes and counts; budgets are empty when unset. [`History::from_csv`](super::History::from_csv)
    /// reads such a file back.
    ///
    /// # Errors
    /// The writer's.
    ///
    /// ```
    /// let mut out = Vec::new();
    /// nebula_memory::ledger::LedgerSnapshot::write_csv_header(&mut out).unwrap();
    /// assert!(String::from_utf8(out).unwrap().starts_with("frame,tag,"));
    /// ```
    pub fn write_csv_header(w: &mut impl io::Write) -> io::Result<()> {
        writeln!(
            w,
            "frame,tag,depth,held_bytes,peak_held_bytes,used_bytes,heap_held_bytes,\
             blocks_taken,blocks_returned,heap_fallbacks,warn_budget_bytes,limit_budget_bytes,\
             heap_live_bytes,heap_peak_bytes,heap_allocs,heap_frees,heap_alloc_bytes,\
             heap_free_bytes,heap_rising_windows,heap_frame_peak_bytes,budget_crossings"
        )
    }

    /// Writes one row per tag, then one for the untagged rest of the pools (tag
    /// `(untagged)`) and one for the untagged heap (`(untagged heap)`), all with `frame` in
    /// the first column. A tag with a comma or a quote in it is quoted.
    ///
    /// # Errors
    /// The writer's.
    ///
    /// ```
    /// use nebula_memory::ledger::{self, LedgerSnapshot};
    /// let mut out = Vec::new();
    /// ledger::snapshot().write_csv_rows(&mut out, 7).unwrap();
    /// let text = String::from_utf8(out).unwrap();
    /// assert!(text.lines().any(|l| l.starts_with("7,(untagged),0,")));
    /// assert!(text.lines().last().unwrap().starts_with("7,(untagged heap),0,"));
    /// ```
    pub fn write_csv_rows(&self, w: &mut impl io::Write, frame: u64) -> io::Result<()> {
        for r in &self.rows {
            let f = &r.figures;
            writeln!(
                w,
                "{frame},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(r.tag),
                r.depth,
                f.held,
                f.peak_held,
                f.used,
                f.heap_held,
                f.blocks_taken,
                f.blocks_returned,
                f.heap_fallbacks,
                opt(f.warn_budget),
                opt(f.limit_budget),
                f.heap_live,
                f.heap_peak,
                f.heap_allocs,
                f.heap_frees,
                f.heap_alloc_bytes,
                f.heap_free_bytes,
                f.heap_rising_windows,
                f.heap_frame_peak,
                f.budget_crossings
            )?;
        }
        writeln!(w, "{frame},(untagged),0,{},,,,,,,,,,,,,,,,,", self.untagged)?;
        let h = &self.untagged_heap;
        writeln!(
            w,
            "{frame},(untagged heap),0,,,,,,,,,,{},{},{},{},{},{},,{},",
            h.heap_live,
            h.heap_peak,
            h.heap_allocs,
            h.heap_frees,
            h.heap_alloc_bytes,
            h.heap_free_bytes,
            h.heap_frame_peak
        )
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line break; written straight to
/// the output (a frame's rows allocate nothing).
pub(super) struct CsvField<'a>(&'a str);

impl fmt::Display for CsvField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.contains([',', '"', '\n']) {
            return f.write_str(self.0);
        }
        f.write_str("\"")?;
        for (i, part) in self.0.split('"').enumerate() {
            if i > 0 {
                f.write_str("\"\"")?;
            }
            f.write_str(part)?;
        }
        f.write_str("\"")
    }
}

pub(super) fn csv_field(s: &str) -> CsvField<'_> {
    CsvField(s)
}

/// An optional number as a CSV field: empty when unset.
fn opt(v: Option<usize>) -> OptionalField {
    OptionalField(v)
}

struct OptionalField(Option<usize>);

impl fmt::Display for OptionalField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => Ok(()),
        }
    }
}
