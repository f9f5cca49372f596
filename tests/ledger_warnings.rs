//! Budget warnings that a panicking subscriber left untold. A binary of its own: the
//! pending warnings are process-wide, and any thread that takes a snapshot tells them (to
//! its own subscriber), so another test beside this one could take the one it waits for.

use std::sync::{Arc, Mutex};

use nebula_memory::ledger::{self, Budget};
use nebula_memory::{Arena, ArenaConfig, MemoryArena};

mod common;
use common::{KIB, panic_message};

/// A subscriber that panics at the first of two warnings told together leaves the second
/// pending, and the next call that tells warnings tells it (it was lost for good before).
#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn warnings_left_untold_by_a_panicking_subscriber_are_told_next_time() {
    let pool = common::pool("ledger-warn-panic");
    ledger::set_budget("t11", Budget::Warn(KIB));
    ledger::set_budget("t11/child", Budget::Warn(KIB));
    let told = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&told);
    let subscriber = common::OnEvent(move |e: &tracing::Event<'_>| {
        let mut text = String::new();
        e.record(&mut |f: &tracing::field::Field, v: &dyn std::fmt::Debug| {
            use std::fmt::Write;
            let _ = write!(text, "{}={v:?} ", f.name());
        });
        if text.contains("tag=\"t11") {
            let first = {
                let mut told = seen.lock().unwrap();
                told.push(text);
                told.len() == 1
            };
            assert!(!first, "the subscriber panics at the first warning");
        }
    });
    tracing::subscriber::with_default(subscriber, || {
        let arena = MemoryArena::with_config(
            &pool,
            ArenaConfig::default().tag("t11/child").first_block(4 * KIB),
        );
        // One block crosses both budgets: two warnings, told after the allocation.
        let message = panic_message(|| {
            arena.alloc_val(1u64);
        });
        assert!(message.contains("first warning"), "{message}");
        assert_eq!(told.lock().unwrap().len(), 1);
        // The arena is whole, and the next telling tells the other tag.
        assert_eq!(*arena.alloc_val(7u64), 7);
        let _ = ledger::snapshot();
        let told = told.lock().unwrap();
        assert_eq!(told.len(), 2, "{told:?}");
        assert_ne!(told[0], told[1], "one warning per tag");
    });
}
