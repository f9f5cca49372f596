//! The ledger in a Bevy app: budgets from the plugin's config, the frame's snapshot as a
//! resource, a diagnostic per top-level tag, and the per-frame CSV.
#![cfg(feature = "bevy")]

use bevy_app::{App, Update};
use bevy_diagnostic::{DiagnosticPath, DiagnosticsStore};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, Scratch};
use nebula_memory::ledger::Budget;
use nebula_memory::{AllocError, Arena, ArenaConfig, SharedArena, game_pool};

/// A system's own tagged arenas: a runaway one under a hard budget and its sibling.
#[derive(Resource)]
struct Arenas {
    runaway: SharedArena<'static>,
    sibling: SharedArena<'static>,
    refused: Option<AllocError>,
}

#[test]
fn the_plugin_keeps_the_ledger_and_writes_its_csv() {
    const LIMIT: usize = 1 << 20;
    let csv = std::env::temp_dir().join(format!("nebula_ledger_{}.csv", std::process::id()));
    let mut app = App::new();
    app.add_plugins(MemoryPlugin {
        tag_budgets: vec![("bl/runaway", Budget::Limit(LIMIT))],
        ledger_csv: Some(csv.clone()),
        ..Default::default()
    })
    .insert_resource(Arenas {
        runaway: SharedArena::with_config(game_pool(), ArenaConfig::default().tag("bl/runaway")),
        sibling: SharedArena::with_config(game_pool(), ArenaConfig::default().tag("bl/sibling")),
        refused: None,
    })
    .add_systems(Update, |scratch: Scratch, mut arenas: ResMut<Arenas>| {
        scratch.alloc_slice(10_000, 1u8);
        let arenas = &mut *arenas;
        if arenas.refused.is_none()
            && let Err(e) = arenas.runaway.try_alloc_slice_copy(&[0u8; 100 << 10])
        {
            arenas.refused = Some(e);
        }
        arenas.sibling.alloc_slice(100 << 10, 0u8);
    });
    for _ in 0..20 {
        app.update();
    }
    let world = app.world();
    let arenas = world.resource::<Arenas>();
    assert!(
        matches!(
            arenas.refused,
            Some(AllocError::OverBudget {
                tag: "bl/runaway",
                budget: LIMIT,
                ..
            })
        ),
        "{:?}",
        arenas.refused
    );
    let ledger = world.resource::<MemoryLedger>();
    assert_eq!(ledger.frame(), 20);
    let bl = ledger.tag("bl").unwrap();
    assert_eq!(
        bl.held,
        arenas.runaway.bytes_held() + arenas.sibling.bytes_held()
    );
    assert!(ledger.tag("bl/runaway").unwrap().held <= LIMIT);
    assert!(ledger.tag("bl/sibling").unwrap().held > LIMIT);
    assert!(
        ledger.tag("scratch/systems").unwrap().held > 0,
        "{}",
        **ledger
    );

    // A diagnostic per top-level tag, holding its held bytes.
    let store = world.resource::<DiagnosticsStore>();
    let diag = store
        .get(&DiagnosticPath::new("nebula_memory/tag/bl/held"))
        .expect("no diagnostic for the top-level tag");
    assert_eq!(diag.value(), Some(bl.held as f64));
    assert!(
        store
            .get(&DiagnosticPath::new("nebula_memory/tag/scratch/held"))
            .is_some()
    );

    // The CSV: a header, then each frame's rows, the last one being the snapshot's.
    assert_eq!(ledger.csv_path(), Some(csv.as_path()));
    let text = std::fs::read_to_string(&csv).unwrap();
    std::fs::remove_file(&csv).ok();
    assert!(text.starts_with("frame,tag,"), "{text}");
    let frames: std::collections::BTreeSet<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(frames.len(), 20, "one group of rows per frame");
    let last_bl = text
        .lines()
        .find(|l| l.starts_with("20,bl,"))
        .expect("frame 20 has a row for the tag");
    assert_eq!(
        last_bl.split(',').nth(3),
        Some(bl.held.to_string().as_str())
    );
}
