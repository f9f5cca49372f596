//! `NEBULA_MEMORY_REPORT=<path>` turns the exit report on in an app whose code does not ask
//! for one: a path ending in `.html` gets the memory page of the whole run, another the
//! table; a path that cannot be written is said on standard error, and the app exits as
//! it would have. The variable is process-wide, so each case runs this binary's `child`
//! test in a process of its own, with the variable set.
#![cfg(feature = "bevy")]

use std::process::Command;

use bevy_app::{App, AppExit, ScheduleRunnerPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::bevy::{MemoryPlugin, REPORT_VAR};

const FRAMES: u32 = 7;

/// Runs the `child` test with the variable set to `path`; returns its output.
fn child_with(path: &std::path::Path) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(REPORT_VAR, path)
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn temp(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nebula-exit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes")]
fn an_html_path_gets_the_page_of_the_whole_run() {
    let path = temp("page.html");
    let (ok, out) = child_with(&path);
    assert!(ok, "{out}");
    let page = std::fs::read_to_string(&path).expect("the page was written");
    let _ = std::fs::remove_file(&path);
    assert!(page.contains("<canvas") && page.contains("nebula_memory.ledger/1"));
    // Every frame of the run: steps of one from frame 1, FRAMES of them.
    assert!(
        page.contains(&format!("\"frames\":[1,-{}]", FRAMES - 1)),
        "{}",
        &page[page.find("\"frames\"").unwrap()..][..40]
    );
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes")]
fn another_path_gets_the_table() {
    let path = temp("report.txt");
    let (ok, out) = child_with(&path);
    assert!(ok, "{out}");
    let table = std::fs::read_to_string(&path).expect("the table was written");
    let _ = std::fs::remove_file(&path);
    assert!(
        table.starts_with(&format!("nebula_memory ledger at exit (frame {FRAMES})")),
        "{table}"
    );
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes")]
fn a_path_that_cannot_be_written_is_said_and_the_app_exits_as_usual() {
    let path = temp("no-such-dir").join("page.html");
    let (ok, out) = child_with(&path);
    assert!(ok, "the app did not exit as usual: {out}");
    assert!(
        out.contains(&format!(
            "cannot write the memory page to {}",
            path.display()
        )),
        "{out}"
    );
}

/// An app that asks for no report: the variable alone turns it on.
#[test]
fn child() {
    if std::env::var_os(REPORT_VAR).is_none() {
        return; // run by the tests above only
    }
    fn exit_after(mut frame: Local<u32>, mut exit: MessageWriter<AppExit>) {
        *frame += 1;
        if *frame == FRAMES {
            exit.write(AppExit::Success);
        }
    }
    let mut app = App::new();
    app.add_plugins((
        ScheduleRunnerPlugin::run_loop(std::time::Duration::ZERO),
        MemoryPlugin::default(),
    ))
    .add_systems(Update, exit_after);
    assert_eq!(app.run(), AppExit::Success);
}
