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
        tag_budgets: vec![("blcsv/runaway", Budget::Limit(LIMIT))],
        ledger_csv: Some(csv.clone()),
        ..Default::default()
    })
    .insert_resource(Arenas {
        runaway: SharedArena::with_config(game_pool(), ArenaConfig::default().tag("blcsv/runaway")),
        sibling: SharedArena::with_config(game_pool(), ArenaConfig::default().tag("blcsv/sibling")),
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
                tag: "blcsv/runaway",
                budget: LIMIT,
                ..
            })
        ),
        "{:?}",
        arenas.refused
    );
    let ledger = world.resource::<MemoryLedger>();
    assert_eq!(ledger.frame(), 20);
    // A top-level tag of this test's own: other tests' lines may change while it runs.
    let bl = ledger.tag("blcsv").unwrap();
    assert_eq!(
        bl.held,
        arenas.runaway.bytes_held() + arenas.sibling.bytes_held()
    );
    assert!(ledger.tag("blcsv/runaway").unwrap().held <= LIMIT);
    assert!(ledger.tag("blcsv/sibling").unwrap().held > LIMIT);
    assert!(
        ledger.tag("scratch/systems").unwrap().held > 0,
        "{}",
        **ledger
    );

    // A diagnostic per top-level tag, holding its held bytes.
    let store = world.resource::<DiagnosticsStore>();
    let diag = store
        .get(&DiagnosticPath::new("nebula_memory/tag/blcsv/held"))
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
        .find(|l| l.starts_with("20,blcsv,"))
        .expect("frame 20 has a row for the tag");
    assert_eq!(
        last_bl.split(',').nth(3),
        Some(bl.held.to_string().as_str())
    );
}

struct Meshing;
impl nebula_memory::bevy::ScratchTag for Meshing {
    const TAG: &'static str = "bl2/render/meshing";
}
struct Culling;
impl nebula_memory::bevy::ScratchTag for Culling {
    const TAG: &'static str = "bl2/render/culling";
}

/// `TaggedScratch<T>` charges its own tag: each system's scratch use is a line of the
/// ledger, the plain `Scratch` stays under `scratch/systems`, and a forgotten item's arena
/// is reclaimed after the frame end as for `Scratch`.
#[test]
fn tagged_scratch_charges_its_own_tag() {
    use nebula_memory::bevy::TaggedScratch;
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::default()).add_systems(
        Update,
        (
            |s: TaggedScratch<Meshing>| {
                let quads = s.alloc_slice(200_000, 1u8);
                assert!(quads.iter().all(|&b| b == 1));
                // Every frame: the arena stays busy, and is reclaimed by its thread's next
                // claim after the frame end.
                std::mem::forget(s);
            },
            |s: TaggedScratch<Culling>| {
                s.alloc_slice(3_000, 2u32);
            },
            |a: TaggedScratch<Meshing>, b: TaggedScratch<Meshing>| {
                // Two items of one tag: two arenas, both charged to it.
                let x = a.alloc_val(1u64);
                let y = b.alloc_val(2u64);
                assert_ne!(x as *mut u64, y as *mut u64);
            },
        ),
    );
    const FRAMES: u64 = 40;
    for _ in 0..FRAMES {
        app.update();
    }
    let ledger = app.world().resource::<MemoryLedger>();
    let mesh = ledger.tag("bl2/render/meshing").unwrap();
    let cull = ledger.tag("bl2/render/culling").unwrap();
    assert!(mesh.held >= 200_000, "{}", **ledger);
    assert!(cull.held >= 12_000, "{}", **ledger);
    assert_eq!(
        ledger.tag("bl2/render").unwrap().held,
        mesh.held + cull.held
    );
    // Forgotten arenas were reclaimed: without that, each frame would leave an arena busy
    // for good, holding the frame's 200,000 bytes, and the tag would hold 40 of them.
    // (Blocks are taken and returned meanwhile as idle trimming works, so the held bytes,
    // not the blocks taken, are the measure.)
    assert!(mesh.held < FRAMES as usize * 200_000 / 4, "{mesh:?}");
}

struct Contacts;
impl nebula_memory::bevy::ScratchTag for Contacts {
    const TAG: &'static str = "bl/contacts";
}

#[derive(Component)]
struct Body(u32);

/// Per-entity temporaries in a `par_iter`, each batch claimed through the system's
/// `TaggedScratch`: the blocks are the tag's (its line is the whole truth), and the
/// `with_scratch` arenas take none.
fn contacts(scratch: nebula_memory::bevy::TaggedScratch<Contacts>, bodies: Query<&Body>) {
    let batches = scratch.batches();
    bodies.par_iter().for_each_init(
        || batches.batch(),
        |batch, body| {
            let n = batch.scope(|s| {
                let list = s.alloc_slice_fill_with(64, |i| body.0 + i as u32);
                // Opaque to the optimiser, which could otherwise count without the list
                // and leave the allocation out (the test runs in release too).
                std::hint::black_box(&mut *list)
                    .iter()
                    .filter(|&&x| x % 2 == 0)
                    .count()
            });
            assert_eq!(n, 32);
        },
    );
}

#[test]
fn tagged_batches_in_par_iter_charge_the_systems_tag() {
    let with_scratch = |snap: &nebula_memory::ledger::LedgerSnapshot| {
        snap.tag("scratch/with_scratch")
            .map_or(0, |f| f.blocks_taken)
    };
    let before = with_scratch(&nebula_memory::ledger::snapshot());
    let mut app = App::new();
    app.add_plugins(MemoryPlugin::default())
        .add_systems(Update, contacts);
    app.world_mut()
        .spawn_batch((0..10_000).map(|i| Body(i as u32)));
    for _ in 0..5 {
        app.update();
    }
    let ledger = app.world().resource::<MemoryLedger>();
    let tag = ledger
        .tag("bl/contacts")
        .expect("the system's tag has a line");
    // The batches' blocks are the tag's. (How many arenas took one depends on how the
    // batches spread over the threads: in release one thread may run them all, one after
    // another, in one arena.)
    assert!(tag.blocks_taken >= 1 && tag.held > 0, "{tag:?}");
    // `with_scratch`'s arenas are global: another test may take blocks meanwhile, but
    // this one's 10,000 lists of 256 bytes would need many.
    let after = with_scratch(&nebula_memory::ledger::snapshot());
    assert!(
        after - before < 4,
        "with_scratch took {} blocks",
        after - before
    );
}

/// `App::run` takes the app: with `exit_report` set, the frame that sends `AppExit` ends
/// by writing the ledger's table, so a program that only calls `run` still gets it.
#[test]
fn the_ledger_is_reported_when_a_running_app_exits() {
    use bevy_app::{AppExit, ScheduleRunnerPlugin};
    use nebula_memory::bevy::{ExitReport, ScratchTag, TaggedScratch};
    struct Exiting;
    impl ScratchTag for Exiting {
        const TAG: &'static str = "bl_exit/work";
    }
    fn work(
        scratch: TaggedScratch<Exiting>,
        mut frame: Local<u32>,
        mut exit: MessageWriter<AppExit>,
    ) {
        scratch.alloc_slice(3000, 1u8);
        *frame += 1;
        if *frame == 5 {
            exit.write(AppExit::Success);
        }
    }
    let path = std::env::temp_dir().join(format!("bl_exit_{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut app = App::new();
    app.add_plugins((
        ScheduleRunnerPlugin::run_loop(std::time::Duration::ZERO),
        MemoryPlugin {
            exit_report: ExitReport::File(path.clone()),
            ..Default::default()
        },
    ))
    .add_systems(Update, work);
    assert_eq!(app.run(), AppExit::Success);
    let report = std::fs::read_to_string(&path).expect("the exit report was written");
    let _ = std::fs::remove_file(&path);
    assert!(
        report.starts_with("nebula_memory ledger at exit (frame 5)"),
        "{report}"
    );
    assert!(report.contains("bl_exit"), "{report}");
}
