//! Heap scopes ended in any order: after any sequence of guard drops, a thread is in the
//! innermost scope still open (untagged when none is). Checked by what the ledger charges
//! a 1 MiB allocation to (a `TrackingAllocator` is this binary's global allocator), against
//! a model, for `ledger::scope`, `HeapScope::enter`, leaked guards, the depth limit and two
//! Bevy scratch batches on one worker. Guards once restored "the tag before me", which left
//! a thread charged to a scope that had ended.
//!
//! Each case runs on a thread of its own (its stack starts empty; a leaked guard stays).
//! Every tag is this binary's own; other tests' allocations are far below 1 MiB or in
//! their own scopes. Not under Miri (megabytes through the global allocator).
#![cfg(not(miri))]

use std::alloc::System;
use std::hint::black_box;

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger::{self, HeapScope, TagScope};
use proptest::prelude::*;

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const MIB: usize = 1 << 20;

/// Which of `tags` a fresh 1 MiB allocation of this thread is charged to (`None`: none of
/// them, the untagged line); panics if two took it. (The untagged line itself is not
/// compared: other tests' threads allocate and free there meanwhile.)
fn charged_to(tags: &[&'static str]) -> Option<&'static str> {
    let live = |snap: &ledger::LedgerSnapshot| -> Vec<usize> {
        tags.iter()
            .map(|t| snap.tag(t).map_or(0, |f| f.heap_live))
            .collect()
    };
    let before = live(&ledger::snapshot());
    let big = black_box(vec![1u8; MIB]);
    let after = live(&ledger::snapshot());
    drop(big);
    let lines: Vec<&'static str> = tags
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| **a >= b.saturating_add(MIB))
        .map(|(&t, _)| t)
        .collect();
    assert!(lines.len() <= 1, "1 MiB charged to {lines:?}");
    lines.first().copied()
}

/// Runs `f` on a thread of its own.
fn on_fresh_thread(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(f).join().unwrap();
    });
}

const TAGS: [&str; 4] = [
    "scopes/model/t0",
    "scopes/model/t1",
    "scopes/model/t2",
    "scopes/model/t3",
];

#[derive(Clone, Debug)]
enum Step {
    /// Enter a scope of `TAGS[i]`, with `ledger::scope` or (`handed`) a `HeapScope`.
    Enter { tag: usize, handed: bool },
    /// Drop the n-th live guard (modulo how many there are), oldest first.
    Drop(usize),
    /// Leak the n-th live guard: its scope stays open.
    Forget(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..TAGS.len(), any::<bool>()).prop_map(|(tag, handed)| Step::Enter { tag, handed }),
        3 => any::<usize>().prop_map(Step::Drop),
        1 => any::<usize>().prop_map(Step::Forget),
    ]
}

/// The model: the scopes open, oldest first; the thread is in the last one.
fn run(steps: &[Step]) {
    // Heap scopes of every tag, taken on this thread beforehand (`HeapScope::enter`).
    let handed: Vec<HeapScope> = TAGS
        .iter()
        .map(|t| {
            let _s = ledger::scope(t);
            ledger::current_scope()
        })
        .collect();
    let untagged = ledger::current_scope();
    let mut guards: Vec<(usize, TagScope)> = Vec::new();
    let mut open: Vec<(usize, Option<usize>)> = Vec::new(); // (tag, guard id if alive)
    let mut next_id = 0;
    let mut ids: Vec<usize> = Vec::new(); // parallel to `guards`
    for (i, s) in steps.iter().enumerate() {
        match *s {
            Step::Enter { tag, handed: h } => {
                let g = if h {
                    handed[tag].enter()
                } else {
                    ledger::scope(TAGS[tag])
                };
                guards.push((tag, g));
                ids.push(next_id);
                open.push((tag, Some(next_id)));
                next_id += 1;
            }
            Step::Drop(n) | Step::Forget(n) if !guards.is_empty() => {
                let k = n % guards.len();
                let (_, g) = guards.remove(k);
                let id = ids.remove(k);
                if matches!(s, Step::Drop(_)) {
                    drop(g);
                    open.retain(|&(_, o)| o != Some(id));
                } else {
                    std::mem::forget(g);
                    // Open for good: no guard can end it.
                    for o in &mut open {
                        if o.1 == Some(id) {
                            o.1 = None;
                        }
                    }
                }
            }
            Step::Drop(_) | Step::Forget(_) => {}
        }
        let expected = open.last().map(|&(t, _)| TAGS[t]);
        let expected_scope = open.last().map_or(untagged, |&(t, _)| handed[t]);
        assert_eq!(
            ledger::current_scope(),
            expected_scope,
            "after step {i} of {steps:?}"
        );
        assert_eq!(charged_to(&TAGS), expected, "after step {i} of {steps:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    #[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
    fn scopes_end_in_any_order(steps in proptest::collection::vec(step(), 1..24)) {
        on_fresh_thread(|| run(&steps));
    }
}

/// The review's case: `a`, then `b`, `a` dropped first: the thread is in `b`, then in
/// nothing (it once stayed charged to `a` for good).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn the_outer_guard_dropped_first() {
    on_fresh_thread(|| {
        const A: &str = "scopes/case/a";
        const B: &str = "scopes/case/b";
        let a = ledger::scope(A);
        let b = ledger::scope(B);
        drop(a);
        assert_eq!(charged_to(&[A, B]), Some(B));
        drop(b);
        assert_eq!(charged_to(&[A, B]), None);
    });
}

/// The same with `HeapScope::enter` guards, on a thread the scopes were handed to.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn handed_scopes_dropped_out_of_order() {
    const A: &str = "scopes/handed/a";
    const B: &str = "scopes/handed/b";
    let a = {
        let _s = ledger::scope(A);
        ledger::current_scope()
    };
    let b = {
        let _s = ledger::scope(B);
        ledger::current_scope()
    };
    on_fresh_thread(|| {
        let ga = a.enter();
        let gb = b.enter();
        drop(ga);
        assert_eq!(charged_to(&[A, B]), Some(B));
        drop(gb);
        assert_eq!(charged_to(&[A, B]), None);
        // And the other way round, twice in one thread.
        let gb = b.enter();
        let ga = a.enter();
        drop(gb);
        assert_eq!(charged_to(&[A, B]), Some(A));
        drop(ga);
        assert_eq!(charged_to(&[A, B]), None);
    });
}

/// Past 64 scopes on the stack, a scope changes nothing; the others still end right.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_scope_past_the_depth_changes_nothing() {
    on_fresh_thread(|| {
        const DEEP: &str = "scopes/depth/deep";
        const PAST: &str = "scopes/depth/past";
        let deep: Vec<TagScope> = (0..64).map(|_| ledger::scope(DEEP)).collect();
        let past = ledger::scope(PAST);
        assert_eq!(charged_to(&[DEEP, PAST]), Some(DEEP));
        drop(past);
        assert_eq!(charged_to(&[DEEP, PAST]), Some(DEEP));
        drop(deep); // oldest first: each but the last is ended under an open one
        assert_eq!(charged_to(&[DEEP, PAST]), None);
        let again = ledger::scope(PAST);
        assert_eq!(charged_to(&[DEEP, PAST]), Some(PAST));
        drop(again);
    });
}

/// Two batches of a Bevy system's `Scratch::batches()` on one worker, dropped in the order
/// they were made: the worker is back outside the system's scope (it once stayed charged
/// to the system, and so charged other systems' tasks to it).
#[cfg(feature = "bevy")]
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn two_scratch_batches_dropped_in_creation_order() {
    use bevy_ecs::prelude::*;
    use nebula_memory::bevy::{Scratch, ScratchArenas};

    const SYSTEM: &str = "scopes/batches/system";
    let mut world = World::new();
    world.insert_resource(ScratchArenas::default());
    world
        .run_system_cached(|scratch: Scratch| {
            let _system = ledger::scope(SYSTEM);
            let batches = scratch.batches();
            on_fresh_thread(|| {
                let b1 = batches.batch();
                let b2 = batches.batch();
                assert_eq!(charged_to(&[SYSTEM]), Some(SYSTEM));
                drop(b1);
                assert_eq!(charged_to(&[SYSTEM]), Some(SYSTEM));
                drop(b2);
                assert_eq!(charged_to(&[SYSTEM]), None, "the worker left the system");
            });
        })
        .unwrap();
}
