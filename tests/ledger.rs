//! The tag ledger: each block charged once to its arena's tag, parents rolling up their
//! children, hard and warn budgets, and the exact events a profiler is sent.
//!
//! Every test uses tags of its own (the ledger is process-wide) and pools of its own.

use std::sync::{Arc, Mutex};

use nebula_memory::ledger::{self, Budget, LedgerEvent, LedgerSnapshot};
use nebula_memory::{AllocError, Arena, ArenaConfig, MemoryArena, MemoryPool, SharedArena};
use proptest::prelude::*;

mod common;
use common::{KIB, MIB, panic_message};

fn tagged<'p>(pool: &'p MemoryPool, tag: &'static str) -> MemoryArena<'p> {
    MemoryArena::with_config(pool, ArenaConfig::default().tag(tag))
}

/// Tests that read the recorder (which one `take_recorded_events` drains for every test) or
/// hold a Tracy guard (the receiver is on while any guard is alive) run one at a time.
static EVENTS: Mutex<()> = Mutex::new(());

fn serial_events() -> std::sync::MutexGuard<'static, ()> {
    EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

fn held(tag: &str) -> usize {
    ledger::snapshot().tag(tag).map_or(0, |f| f.held)
}

/// A tagged arena's blocks are charged to its tag and to every parent, exactly what the
/// arena holds, and uncharged when they go back; an untagged arena is not in the ledger.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
fn blocks_are_charged_to_the_tag_and_its_parents() {
    let pool = common::pool("ledger-charge");
    let mut mesh = tagged(&pool, "t1/render/meshing");
    let cull = tagged(&pool, "t1/render/culling");
    let untagged = MemoryArena::new(&pool);
    mesh.alloc_slice(200 * KIB, 1u8); // grows over several blocks
    cull.alloc_val(1u64);
    untagged.alloc_slice(100 * KIB, 1u8);

    let snap = ledger::snapshot();
    let f = |t| snap.tag(t).unwrap();
    assert_eq!(f("t1/render/meshing").held, mesh.bytes_held());
    assert_eq!(f("t1/render/culling").held, cull.bytes_held());
    assert_eq!(f("t1/render").held, mesh.bytes_held() + cull.bytes_held());
    assert_eq!(f("t1").held, f("t1/render").held);
    assert_eq!(
        f("t1/render/meshing").blocks_taken,
        mesh.stats().blocks_taken
    );
    assert_eq!(pool.stats().in_use, f("t1").held + untagged.bytes_held());

    // A reset gives all blocks but one back: the ledger follows, and `used` is the frame's
    // peak, published by the reset.
    let before = mesh.bytes_held();
    mesh.reset();
    let snap = ledger::snapshot();
    let m = snap.tag("t1/render/meshing").unwrap();
    assert_eq!(m.held, mesh.bytes_held());
    assert!(
        m.peak_held >= before.max(m.held),
        "peak_held keeps the most ever held"
    );
    assert_eq!(m.used, 200 * KIB);
    assert_eq!(m.blocks_returned, mesh.stats().blocks_returned);

    drop(mesh);
    drop(cull);
    assert_eq!(held("t1"), 0);
    assert_eq!(held("t1/render/meshing"), 0);
}

/// A runaway system is stopped by its hard budget while a sibling tag keeps allocating,
/// and the parent's figures stay right. Try forms return `OverBudget` naming the tag, the
/// budget and the request; panicking forms panic with that message; the arena keeps
/// working afterwards.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn a_hard_budget_stops_a_runaway_tag_and_spares_its_sibling() {
    const LIMIT: usize = 512 * KIB;
    let pool = common::pool("ledger-limit");
    ledger::set_budget("t2/ai", Budget::Limit(LIMIT));
    let ai = tagged(&pool, "t2/ai");
    let physics = tagged(&pool, "t2/physics");

    let mut refused = None;
    for i in 0..100 {
        match ai.try_alloc_slice_copy(&[7u8; 16 * KIB]) {
            Ok(_) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
        physics.alloc_slice(16 * KIB, 1u8);
    }
    let (i, err) = refused.expect("the runaway was never stopped");
    assert!(i > 10, "refused too early, after {i} allocations");
    match &err {
        AllocError::OverBudget {
            tag,
            budget,
            requested,
            held,
        } => {
            assert_eq!((*tag, *budget), ("t2/ai", LIMIT));
            assert!(held + requested > LIMIT, "{err}");
            assert_eq!(*held, ai.bytes_held());
        }
        other => panic!("expected OverBudget, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("t2/ai") && text.contains(&LIMIT.to_string()),
        "{text}"
    );

    // The sibling goes on past the runaway's budget.
    for _ in 0..64 {
        physics.alloc_slice(16 * KIB, 1u8);
    }
    let snap = ledger::snapshot();
    let (a, p, parent) = (
        snap.tag("t2/ai").unwrap(),
        snap.tag("t2/physics").unwrap(),
        snap.tag("t2").unwrap(),
    );
    assert!(a.held <= LIMIT, "{a:?}");
    assert!(p.held > LIMIT, "{p:?}");
    assert_eq!(parent.held, a.held + p.held);
    assert_eq!((a.held, p.held), (ai.bytes_held(), physics.bytes_held()));

    // Small requests still fit in the block the runaway holds; the panicking form names
    // the budget.
    ai.alloc_val(1u8);
    let msg = panic_message(|| {
        ai.alloc_slice(LIMIT, 0u8);
    });
    assert!(
        msg.contains("over its budget") && msg.contains("t2/ai"),
        "{msg}"
    );
    ledger::clear_budgets("t2/ai");
    ai.alloc_slice(LIMIT, 0u8);
}

/// A parent's hard budget covers its children together.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
fn a_parents_budget_covers_its_children() {
    let pool = common::pool("ledger-parent");
    ledger::set_budget("t3", Budget::Limit(300 * KIB));
    let a = tagged(&pool, "t3/a");
    let b = tagged(&pool, "t3/b");
    a.alloc_slice(200 * KIB, 0u8);
    let err = b.try_alloc_slice_copy(&[0u8; 200 * KIB]).unwrap_err();
    assert!(
        matches!(err, AllocError::OverBudget { tag: "t3", .. }),
        "{err:?}"
    );
    assert_eq!(held("t3"), a.bytes_held() + b.bytes_held());
}

/// The heap fallback does not get around a hard budget.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
fn the_heap_fallback_does_not_bypass_a_budget() {
    let pool = common::pool_of("ledger-heap", 256 * KIB);
    ledger::set_budget("t4/heap", Budget::Limit(MIB));
    let config = ArenaConfig::default().tag("t4/heap").heap_fallback(true);
    let arena = MemoryArena::with_config(&pool, config);
    let mut over = None;
    for _ in 0..64 {
        if let Err(e) = arena.try_alloc_slice_copy(&[1u8; 64 * KIB]) {
            over = Some(e);
            break;
        }
    }
    let f = ledger::snapshot().tag("t4/heap").unwrap();
    assert!(f.heap_fallbacks > 0, "the heap fallback never ran: {f:?}");
    assert!(
        matches!(over, Some(AllocError::OverBudget { tag: "t4/heap", .. })),
        "{over:?} with {f:?}"
    );
    assert!(f.held + f.heap_held <= MIB + 64, "{f:?}");
    assert_eq!(
        f.held,
        pool.stats().in_use,
        "only pool blocks count in held"
    );
}

/// A warn budget sends one WARN when the tag's holdings cross it, and another only after
/// they fell back below.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
fn a_warn_budget_warns_once_per_crossing() {
    let pool = common::pool("ledger-warn");
    ledger::set_budget("t5/warned", Budget::Warn(100 * KIB));
    let warnings = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&warnings);
    let subscriber = common::OnEvent(move |e: &tracing::Event<'_>| {
        let mut text = String::new();
        e.record(&mut |f: &tracing::field::Field, v: &dyn std::fmt::Debug| {
            use std::fmt::Write;
            let _ = write!(text, "{}={v:?} ", f.name());
        });
        if *e.metadata().level() == tracing::Level::WARN && text.contains("t5/warned") {
            *seen.lock().unwrap() += 1;
        }
    });
    tracing::subscriber::with_default(subscriber, || {
        let mut arena = MemoryArena::with_config(
            &pool,
            ArenaConfig::default()
                .tag("t5/warned")
                .first_block(16 * KIB)
                .trim_after_resets(1),
        );
        for _ in 0..20 {
            arena.alloc_slice(16 * KIB, 0u8); // well past 100 KiB
        }
        assert_eq!(*warnings.lock().unwrap(), 1, "one WARN per crossing");
        // Back below: a reset keeps one block, then quiet frames trim it.
        for _ in 0..4 {
            arena.reset();
            arena.alloc_val(1u8);
        }
        assert!(held("t5/warned") <= 100 * KIB, "{}", held("t5/warned"));
        for _ in 0..20 {
            arena.alloc_slice(16 * KIB, 0u8);
        }
        assert_eq!(
            *warnings.lock().unwrap(),
            2,
            "a second crossing warns again"
        );
    });
}

/// The events a profiler is sent for a scripted scenario, exactly: each block taken and
/// given back once, in order, with its address and size; a steady frame sends none.
#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of KiB poisoned byte by byte; the tagged block path runs under Miri in a_shared_arenas_threads_charge_one_tag"
)]
fn the_event_sequence_of_take_grow_reset_and_trim() {
    const TAG: &str = "t6/events";
    let _serial = serial_events();
    let pool = common::pool("ledger-events");
    ledger::record_events(true);
    let mine = || -> Vec<LedgerEvent> {
        ledger::take_recorded_events()
            .into_iter()
            .filter(|e| {
                matches!(
                    e,
                    LedgerEvent::BlockTaken { tag: TAG, .. }
                        | LedgerEvent::BlockReturned { tag: TAG, .. }
                )
            })
            .collect()
    };
    let _ = mine();
    let mut arena = MemoryArena::with_config(
        &pool,
        ArenaConfig::default()
            .tag(TAG)
            .first_block(16 * KIB)
            .trim_after_resets(2),
    );
    // Take: the first block.
    arena.alloc_slice(1000, 0u8);
    let first = mine();
    assert!(
        matches!(first[..], [LedgerEvent::BlockTaken { heap: false, .. }]),
        "{first:?}"
    );
    // Grow: a second block.
    arena.alloc_slice(100 * KIB, 0u8);
    let grown = mine();
    assert!(
        matches!(grown[..], [LedgerEvent::BlockTaken { heap: false, .. }]),
        "{grown:?}"
    );
    // Reset: the frame did not fit in one block, so both go back and one block sized for
    // the frame replaces them.
    arena.reset();
    let reset = mine();
    let taken_addrs = |evs: &[LedgerEvent]| -> Vec<usize> {
        evs.iter()
            .filter_map(|e| match e {
                LedgerEvent::BlockTaken { addr, .. } => Some(*addr),
                _ => None,
            })
            .collect()
    };
    let returned = |evs: &[LedgerEvent]| -> Vec<usize> {
        evs.iter()
            .filter_map(|e| match e {
                LedgerEvent::BlockReturned { addr, .. } => Some(*addr),
                _ => None,
            })
            .collect()
    };
    let mut before: Vec<usize> = taken_addrs(&first);
    before.extend(taken_addrs(&grown));
    let mut back = returned(&reset);
    back.sort_unstable();
    before.sort_unstable();
    assert_eq!(
        back, before,
        "the reset gives back exactly the two blocks: {reset:?}"
    );
    assert_eq!(taken_addrs(&reset).len(), 1, "{reset:?}");
    // A steady frame: no event at all.
    arena.alloc_slice(100 * KIB, 0u8);
    arena.reset();
    assert_eq!(mine(), vec![], "a steady frame sends no memory event");
    // Trim: two quiet frames, then the oversized block is swapped for a small one.
    let kept = taken_addrs(&reset)[0];
    for _ in 0..2 {
        arena.alloc_val(1u8);
        arena.reset();
    }
    let trim = mine();
    assert_eq!(returned(&trim), vec![kept], "{trim:?}");
    assert_eq!(taken_addrs(&trim).len(), 1, "{trim:?}");
    // Sizes add up: everything taken minus everything returned is what the arena holds.
    let fresh = taken_addrs(&trim)[0];
    drop(arena);
    assert_eq!(returned(&mine()), vec![fresh]);
    assert_eq!(held(TAG), 0);
}

/// A shared arena's parts all charge its tag, from every thread.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_shared_arenas_threads_charge_one_tag() {
    let pool = common::pool("ledger-shared");
    let shared = SharedArena::with_config(&pool, ArenaConfig::default().tag("t7/shared"));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                // Under Miri, enough to take a second block per thread.
                for _ in 0..if cfg!(miri) { 20 } else { 50 } {
                    shared.alloc_slice(4 * KIB, 1u8);
                }
            });
        }
    });
    assert_eq!(held("t7/shared"), shared.bytes_held());
    assert_eq!(held("t7/shared"), pool.stats().in_use);
}

/// The snapshot prints a tree table with every tag indented under its parent, and writes
/// a CSV header and one row per tag (plus the untagged rest) with the frame number.
#[test]
fn snapshots_print_a_tree_and_write_csv() {
    let pool = common::pool("ledger-print");
    let a = tagged(&pool, "t8/t8sim/t8leaf");
    a.alloc_val(1u32);
    let snap = ledger::snapshot();
    let table = snap.to_string();
    let lines: Vec<&str> = table.lines().collect();
    let pos = |name: &str| lines.iter().position(|l| l.trim_start().starts_with(name));
    let (t8, sim, leaf) = (
        pos("t8 ").unwrap(),
        pos("t8sim ").unwrap(),
        pos("t8leaf ").unwrap(),
    );
    assert!(t8 < sim && sim < leaf, "{table}");
    assert!(lines[leaf].starts_with("    t8leaf"), "{table}");
    assert!(table.contains("total"), "{table}");
    let full = format!("{snap:#}");
    assert!(
        full.contains("(untagged)") && full.contains("t8leaf"),
        "{full}"
    );

    let mut csv = Vec::new();
    LedgerSnapshot::write_csv_header(&mut csv).unwrap();
    snap.write_csv_rows(&mut csv, 42).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row = csv
        .lines()
        .find(|l| l.starts_with("42,t8/t8sim/t8leaf,"))
        .expect(&csv);
    let fields: Vec<&str> = row.split(',').collect();
    assert_eq!(fields.len(), header.len());
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    assert_eq!(fields[col("depth")], "2");
    assert_eq!(fields[col("held_bytes")], a.bytes_held().to_string());
}

/// A snapshot refilled after tags were added lists them too, in tree order, and a parent's
/// figures take in its new child.
#[test]
fn a_refilled_snapshot_takes_in_new_tags() {
    let pool = common::pool("ledger-refill");
    let mut snap = LedgerSnapshot::default();
    let mut first = tagged(&pool, "t10/b");
    first.alloc_slice(100, 0u8);
    first.reset(); // publishes its `used`
    ledger::end_frame_into(&mut snap);
    assert!(snap.tag("t10/a/deep").is_none());
    let mut second = tagged(&pool, "t10/a/deep");
    second.alloc_slice(300, 0u8);
    second.reset();
    ledger::end_frame_into(&mut snap);
    let tags: Vec<&str> = snap
        .tags()
        .map(|(tag, _)| tag)
        .filter(|t| t.starts_with("t10"))
        .collect();
    assert_eq!(tags, ["t10", "t10/a", "t10/a/deep", "t10/b"]);
    let f = |t: &str| snap.tag(t).unwrap();
    assert_eq!(f("t10").held, first.bytes_held() + second.bytes_held());
    assert_eq!((f("t10/b").used, f("t10/a/deep").used), (100, 300));
    assert_eq!(f("t10").used, 400);
}

/// A tag that is not a path of non-empty segments is refused where it is set.
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn malformed_tags_are_refused_naming_the_field() {
    for bad in ["", "a//b", "/a", "a/"] {
        let msg = panic_message(|| {
            let _ = ArenaConfig::default().tag(bad);
        });
        assert!(msg.contains("ArenaConfig::tag"), "{bad:?}: {msg}");
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { arena: usize, bytes: usize },
    Reset { arena: usize },
    Drop { arena: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, 1..MAX_ALLOC).prop_map(|(arena, bytes)| Op::Alloc { arena, bytes }),
        1 => (0..4usize).prop_map(|arena| Op::Reset { arena }),
        1 => (0..4usize).prop_map(|arena| Op::Drop { arena }),
    ]
}

/// The largest allocation of the model: past a 64 KiB block natively; smaller under Miri,
/// which checks every byte the debug build poisons.
const MAX_ALLOC: usize = if cfg!(miri) { 20_000 } else { 300_000 };

/// The four tags of the model, two siblings under each of two parents.
const MODEL_TAGS: [&str; 4] = ["t9/x/a", "t9/x/b", "t9/y/a", "t9/y/b"];

proptest! {
    #![proptest_config(common::proptest_config(32))]
    /// Model: after any sequence of allocations, resets and drops over four tagged arenas,
    /// each tag holds exactly what its arena holds, each parent the sum of its children,
    /// and the pool's `in_use` is the top-level tag's `held`.
    #[test]
    #[cfg_attr(miri, ignore = "hundreds of KiB poisoned byte by byte")]
    fn the_ledger_matches_the_arenas(ops in proptest::collection::vec(op(), 1..40)) {
        // One case at a time: the tags are shared by the cases.
        static SERIAL: Mutex<()> = Mutex::new(());
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pool = common::pool("ledger-model");
        let mut arenas: Vec<Option<MemoryArena<'_>>> =
            MODEL_TAGS.iter().map(|t| Some(tagged(&pool, t))).collect();
        for op in ops {
            match op {
                Op::Alloc { arena, bytes } => {
                    let a = arenas[arena].get_or_insert_with(|| tagged(&pool, MODEL_TAGS[arena]));
                    a.alloc_slice(bytes, 0u8);
                }
                Op::Reset { arena } => {
                    if let Some(a) = arenas[arena].as_mut() {
                        a.reset();
                    }
                }
                Op::Drop { arena } => arenas[arena] = None,
            }
            let snap = ledger::snapshot();
            let of = |i: usize| arenas[i].as_ref().map_or(0, |a| a.bytes_held());
            for (i, t) in MODEL_TAGS.iter().enumerate() {
                prop_assert_eq!(snap.tag(t).unwrap().held, of(i), "tag {}", t);
            }
            prop_assert_eq!(snap.tag("t9/x").unwrap().held, of(0) + of(1));
            prop_assert_eq!(snap.tag("t9/y").unwrap().held, of(2) + of(3));
            prop_assert_eq!(snap.tag("t9").unwrap().held, pool.stats().in_use);
            let used = |t: &str| snap.tag(t).unwrap().used;
            prop_assert_eq!(used("t9/x"), used("t9/x/a") + used("t9/x/b"));
            prop_assert_eq!(used("t9/y"), used("t9/y/a") + used("t9/y/b"));
            prop_assert_eq!(used("t9"), used("t9/x") + used("t9/y"));
        }
    }
}

/// With the `tracy` feature, the real client takes the events (no server is needed: it
/// queues them) while the recorder still sees the same sequence.
#[cfg(feature = "tracy")]
#[test]
fn the_tracy_client_takes_the_events() {
    const TAG: &str = "t10/tracy";
    let _serial = serial_events();
    let tracy = ledger::enable_tracy(false);
    ledger::record_events(true);
    let pool = common::pool("ledger-tracy");
    let mut arena = tagged(&pool, TAG);
    let sent = ledger::tracy_events_sent();
    arena.alloc_slice(200 * KIB, 1u8);
    arena.reset();
    let snap = ledger::end_frame();
    drop(arena);
    // Blocks taken (at least two: the growth), a plot, the blocks given back: all sent.
    assert!(ledger::tracy_events_sent() >= sent + 4);
    drop(tracy);
    let events: Vec<LedgerEvent> = ledger::take_recorded_events()
        .into_iter()
        .filter(|e| match e {
            LedgerEvent::BlockTaken { tag, .. }
            | LedgerEvent::BlockReturned { tag, .. }
            | LedgerEvent::Plot { tag, .. } => *tag == TAG,
            _ => false,
        })
        .collect();
    let taken = events
        .iter()
        .filter(|e| matches!(e, LedgerEvent::BlockTaken { .. }))
        .count();
    let returned = events
        .iter()
        .filter(|e| matches!(e, LedgerEvent::BlockReturned { .. }))
        .count();
    assert_eq!(taken, returned, "{events:?}");
    assert!(events.contains(&LedgerEvent::Plot {
        tag: TAG,
        held: snap.tag(TAG).unwrap().held,
        used: 200 * KIB,
    }));
}

/// The receiver stays on while any guard is alive; once the last is dropped nothing more
/// goes to Tracy: not the blocks of arenas that outlived the guard, of new arenas or of the
/// global scratch arenas, not a frame's plots. The ledger and the recorder still see them.
#[cfg(feature = "tracy")]
#[test]
fn nothing_goes_to_tracy_after_the_last_guard() {
    const TAG: &str = "t11/tracy_off";
    let _serial = serial_events();
    let pool = common::pool("ledger-tracy-off");
    let outlives = tagged(&pool, TAG);
    let first = ledger::enable_tracy(false);
    let second = ledger::enable_tracy(false);
    assert!(!first.wait_for_profiler(std::time::Duration::ZERO)); // no profiler in tests
    let sent = ledger::tracy_events_sent();
    outlives.alloc_slice(100 * KIB, 1u8);
    assert!(ledger::tracy_events_sent() > sent);

    drop(first); // one guard left: still on
    let sent = ledger::tracy_events_sent();
    let other = tagged(&pool, TAG);
    other.alloc_slice(100 * KIB, 1u8);
    assert!(ledger::tracy_events_sent() > sent);

    drop(second);
    let at_drop = ledger::tracy_events_sent();
    let at_drop_figures = ledger::snapshot().tag(TAG).unwrap();
    ledger::record_events(true);
    drop(other);
    drop(outlives);
    let late = tagged(&pool, TAG);
    late.alloc_slice(300 * KIB, 1u8);
    drop(late);
    nebula_memory::with_scratch(|s| {
        s.alloc_slice(512 * KIB, 0u8);
    });
    ledger::end_frame();
    assert_eq!(
        ledger::tracy_events_sent(),
        at_drop,
        "sent to Tracy after the guards"
    );
    let f = ledger::snapshot().tag(TAG).unwrap();
    assert!(f.blocks_taken > at_drop_figures.blocks_taken);
    assert_eq!((f.blocks_returned, f.held), (f.blocks_taken, 0));
    let returned = ledger::take_recorded_events()
        .into_iter()
        .filter(|e| matches!(e, LedgerEvent::BlockReturned { tag: TAG, .. }))
        .count() as u64;
    assert_eq!(
        returned,
        f.blocks_returned - at_drop_figures.blocks_returned,
        "the recorder still sees every block"
    );
}

/// Dropping the last guard waits for events being sent on other threads: when the drop
/// returns, the count of events sent to Tracy no longer moves, however busy they are.
/// Two threads take and give back blocks without pause while the guard comes and goes
/// 200 times.
#[cfg(feature = "tracy")]
#[test]
fn dropping_the_guard_waits_for_events_in_flight() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const TAG: &str = "t12/tracy_busy";
    let _serial = serial_events();
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let pool = common::pool("ledger-tracy-busy");
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let arena = tagged(&pool, TAG);
                    arena.alloc_slice(64 * KIB, 1u8); // a block taken...
                    drop(arena); // ...and given back
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let mut late = 0;
    for _ in 0..200 {
        let tracy = ledger::enable_tracy(false);
        let sent = ledger::tracy_events_sent();
        while ledger::tracy_events_sent() < sent + 4 {
            std::thread::yield_now();
        }
        drop(tracy);
        let at_drop = ledger::tracy_events_sent();
        std::thread::sleep(std::time::Duration::from_micros(200));
        if ledger::tracy_events_sent() != at_drop {
            late += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds: u64 = busy.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        late, 0,
        "rounds in which events reached Tracy after the drop returned"
    );
    assert!(rounds > 100);
}
