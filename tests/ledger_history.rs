//! The ledger's history: the last N frames of each line as the frames' snapshots had
//! them, in a ring of a stated size that stops growing once every line is seen; its marks
//! judged as the table judges them; the same history read back from the ledger's CSV and
//! from its own; a malformed CSV refused with the line and the fix named; the memory page
//! written, or refused with the path named.

use nebula_memory::ledger::{
    self, Budget, CROSSED, History, LedgerSnapshot, LineFrame, OVER_WARN, page::Page,
};
use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool};

/// `frames` frames of a tagged arena holding a different size each frame; each frame's
/// snapshot recorded into `history` and kept.
fn frames(
    pool: &MemoryPool,
    tag: &'static str,
    history: &mut History,
    frames: usize,
) -> Vec<LedgerSnapshot> {
    let mut arena = MemoryArena::with_config(pool, ArenaConfig::default().tag(tag));
    let mut snaps = Vec::new();
    for f in 0..frames {
        arena.reset_and_release();
        arena.alloc_slice((f % 7 + 1) * 10_000, 0u8);
        let snap = ledger::end_frame();
        history.record(&snap);
        snaps.push(snap);
    }
    snaps
}

fn figures(h: &History, tag: &str) -> Vec<(u64, LineFrame)> {
    h.figures(h.line(tag).unwrap()).collect()
}

#[test]
fn the_ring_keeps_the_last_frames_as_their_snapshots_had_them() {
    let pool = MemoryPool::new("lh-ring", 16 << 20).unwrap();
    let mut history = History::new(5);
    let snaps = frames(&pool, "lh/ring", &mut history, 12);
    assert_eq!(history.len(), 5);
    assert_eq!(history.frames().collect::<Vec<_>>(), [8, 9, 10, 11, 12]);
    let kept = figures(&history, "lh/ring");
    for ((frame, f), snap) in kept.iter().zip(&snaps[7..]) {
        let t = snap.tag("lh/ring").unwrap();
        assert_eq!(f.held, t.held as u64, "frame {frame}");
        assert_eq!(f.heap_live, t.heap_live as u64, "frame {frame}");
    }
    // The parent line is the children's sum, as in the snapshots.
    let parent = figures(&history, "lh");
    assert!(parent.iter().zip(&kept).all(|(p, c)| p.1.held >= c.1.held));
    // The untagged pool bytes are a line too.
    let untagged = figures(&history, ledger::UNTAGGED);
    assert_eq!(untagged.last().unwrap().1.held, snaps[11].untagged() as u64);
}

#[test]
fn its_memory_is_stated_and_stops_growing_once_every_line_is_seen() {
    let pool = MemoryPool::new("lh-memory", 16 << 20).unwrap();
    let mut history = History::new(64);
    frames(&pool, "lh/memory", &mut history, 3);
    let lines = history.lines().count();
    let bytes = history.memory_bytes();
    assert!(bytes >= 40 * 64 * lines, "{bytes} for {lines} lines");
    // Rings, names, budget changes and maps: within a kibibyte a line of the bound.
    assert!(bytes <= (40 * 64 + 1024) * lines + 8 * 64, "{bytes}");
    // 200 more frames, the ring wrapped three times: nothing more held, unless other
    // tests' tags became lines meanwhile.
    frames(&pool, "lh/memory", &mut history, 200);
    let more = history.lines().count() - lines;
    assert!(
        history.memory_bytes() <= bytes + more * (40 * 64 + 1024),
        "{} after, {bytes} before",
        history.memory_bytes()
    );
}

#[test]
fn marks_are_the_tables_and_crossings_the_ledgers() {
    let pool = MemoryPool::new("lh-marks", 16 << 20).unwrap();
    ledger::set_budget("lh/marks", Budget::Warn(200_000));
    let mut history = History::new(20);
    // Held grows frame by frame and stays: one crossing, then frames over the budget that
    // cross nothing; then all given back, and over again: a second crossing.
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().tag("lh/marks"));
    let mut snaps = Vec::new();
    for f in 0..14 {
        if f == 9 {
            arena.reset_and_release();
        }
        arena.alloc_slice(40_000, 0u8);
        let snap = ledger::end_frame();
        history.record(&snap);
        snaps.push(snap);
    }
    let kept = figures(&history, "lh/marks");
    let mut crossings_before = 0;
    for ((frame, f), snap) in kept.iter().zip(&snaps) {
        let t = snap.tag("lh/marks").unwrap();
        let table = snap.full_table().to_string();
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with("marks "))
            .unwrap();
        assert_eq!(
            f.flags & OVER_WARN != 0,
            row.contains("OVER WARN"),
            "frame {frame}: {row}"
        );
        assert_eq!(
            f.flags & CROSSED != 0,
            t.budget_crossings > crossings_before,
            "frame {frame}"
        );
        crossings_before = t.budget_crossings;
    }
    let crossed = kept.iter().filter(|(_, f)| f.flags & CROSSED != 0).count();
    let over = kept
        .iter()
        .filter(|(_, f)| f.flags & OVER_WARN != 0)
        .count();
    assert_eq!(crossed, 2, "{kept:?}");
    assert!(
        over > crossed + 2,
        "frames over that crossed nothing: {kept:?}"
    );
    let budgets = history.line("lh/marks").unwrap().budgets();
    assert_eq!((budgets[0].warn, budgets[0].limit), (Some(200_000), None));
}

fn same(a: &History, b: &History) {
    assert_eq!(
        a.frames().collect::<Vec<_>>(),
        b.frames().collect::<Vec<_>>()
    );
    assert_eq!(a.lines().count(), b.lines().count());
    for line in a.lines() {
        let other = b
            .line(line.tag())
            .unwrap_or_else(|| panic!("{}", line.tag()));
        assert_eq!(
            a.figures(line).collect::<Vec<_>>(),
            b.figures(other).collect::<Vec<_>>(),
            "{}",
            line.tag()
        );
        assert_eq!(line.budgets(), other.budgets(), "{}", line.tag());
    }
}

#[test]
fn the_same_history_comes_back_from_the_ledgers_csv_and_from_its_own() {
    let pool = MemoryPool::new("lh-csv", 16 << 20).unwrap();
    ledger::set_budget("lh/csv, \"quoted\"", Budget::Warn(25_000));
    ledger::set_budget("lh/csv, \"quoted\"", Budget::Limit(1 << 20));
    let mut live = History::new(30);
    let snaps = frames(&pool, "lh/csv, \"quoted\"", &mut live, 10);
    let mut csv = Vec::new();
    LedgerSnapshot::write_csv_header(&mut csv).unwrap();
    for (f, snap) in snaps.iter().enumerate() {
        snap.write_csv_rows(&mut csv, f as u64 + 1).unwrap();
    }
    same(&History::from_csv(&csv[..], 30).unwrap(), &live);
    // The last 4 only, when asked.
    let last = History::from_csv(&csv[..], 4).unwrap();
    assert_eq!(last.frames().collect::<Vec<_>>(), [7, 8, 9, 10]);

    let mut own = Vec::new();
    live.write_csv(&mut own).unwrap();
    same(&History::from_csv(&own[..], 30).unwrap(), &live);
}

#[test]
fn a_malformed_csv_is_refused_with_its_line_and_the_fix() {
    let mut good = Vec::new();
    LedgerSnapshot::write_csv_header(&mut good).unwrap();
    let header = String::from_utf8(good).unwrap();
    let row = |frame: u64, tag: &str, held: &str| {
        format!("{frame},{tag},0,{held},,,,,,,,,0,,0,,0,,0,0,0\n")
    };
    let cases: Vec<(String, usize, &str)> = vec![
        (String::new(), 0, "empty"),
        ("frame,tag\n1,x\n".into(), 1, "no column `held_bytes`"),
        (format!("{header}{}", row(1, "a", "12x")), 2, "`12x` is not"),
        (
            format!("{header}{}{}", row(2, "a", "1"), row(1, "a", "1")),
            3,
            "frame 1 after frame 2",
        ),
        (format!("{header}1,a,0\n"), 2, "cut short"),
        (format!("{header}{}", row(1, "a//b", "1")), 2, "not a tag"),
        (format!("{header}1,\"a,0,1\n"), 2, "never ends"),
    ];
    for (text, line, says) in cases {
        let err = History::from_csv(text.as_bytes(), 10).unwrap_err();
        assert_eq!(err.line(), line, "{err}");
        assert!(err.to_string().contains(says), "{err} (wanted: {says})");
    }
}

#[test]
fn the_page_is_written_or_refused_with_the_path_named() {
    let pool = MemoryPool::new("lh-page", 16 << 20).unwrap();
    let mut history = History::new(10);
    frames(&pool, "lh/page</script>", &mut history, 3);
    let mut html = Vec::new();
    Page::new("a <title>")
        .run("one", &history)
        .write(&mut html)
        .unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("<title>a &lt;title&gt; · memory</title>"));
    // A tag cannot end the data's script element.
    assert_eq!(
        html.matches("</script>").count(),
        4,
        "data, draw.js, data.js, app.js"
    );
    assert!(html.contains("lh/page\\u003c/script\\u003e"));
    // A directory that does not exist (relative: WASI has no temporary directory).
    let path = std::path::Path::new("lh-no-such-dir").join("page.html");
    let err = Page::new("t")
        .run("one", &history)
        .write_to(&path)
        .unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}
