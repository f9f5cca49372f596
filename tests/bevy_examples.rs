//! Bevy's own example programs, not written for this crate, run with the heap tracker and
//! `MemoryPlugin`, built in release: what a Bevy user who adds the two lines gets.
//!
//! The programs are examples from Bevy 0.20.1's repository (`examples/ecs/`), read from
//! the `bevy` package Cargo downloads (`cargo info bevy@0.20.1` fetches it into Cargo's
//! cache if it is not there yet); nothing of them is kept in this repository. The `bevy`
//! crate itself needs a newer rustc than this crate's, so they are compiled against a
//! small stand-in written here, a `bevy` whose prelude is the same Bevy crates' (bevy_app,
//! bevy_ecs, bevy_utils) at the versions this crate uses.
//!
//! Each program gets only what a user adds: `MemoryPlugin` on its `App`, and the tracker
//! as its global allocator. To read the ledger after the app has run, its `fn main` is
//! renamed and called from a `main` of ours, which then checks that every system of the
//! program has a line of its own and prints the ledger's table.
//!
//! Slow the first time (a release build of Bevy's ECS, about two minutes on two cores),
//! then cached under the test target's temporary directory. Not run under the sanitizers
//! or valgrind (they would rebuild it all instrumented, and the programs run natively
//! anyway).

#![cfg(all(feature = "bevy", not(target_family = "wasm"), not(miri)))]

use std::path::{Path, PathBuf};
use std::process::Command;

const BEVY: &str = "bevy-0.20.1";

/// A Bevy example: its path in the package, and its systems (the lines the ledger must
/// have).
struct Example {
    file: &'static str,
    systems: &'static [&'static str],
}

const EXAMPLES: [Example; 2] = [
    Example {
        file: "examples/ecs/custom_query_param.rs",
        systems: &[
            "spawn",
            "print_components_read_only",
            "print_components_iter_mut",
            "print_components_iter",
            "print_components_tuple",
            "print_components_contiguous_iter",
        ],
    },
    Example {
        file: "examples/ecs/system_param.rs",
        systems: &["spawn", "count_players"],
    },
];

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The `bevy` package's `.crate` archive in Cargo's cache, downloaded if need be.
fn bevy_archive() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let find = || {
        std::fs::read_dir(home.join("registry/cache"))
            .ok()?
            .flatten()
            .map(|index| index.path().join(format!("{BEVY}.crate")))
            .find(|p| p.exists())
    };
    if let Some(p) = find() {
        return p;
    }
    let status = cargo()
        .args(["info", "bevy@0.20.1"])
        .status()
        .expect("cargo info");
    assert!(status.success(), "cargo info bevy@0.20.1 failed");
    find().expect("the bevy package in Cargo's cache after cargo info")
}

/// The example's text, as the user would add the two lines: `MemoryPlugin` on the app and
/// the tracker as the global allocator; then a `main` of ours around theirs.
fn instrumented(source: &str, systems: &[&str]) -> String {
    assert_eq!(source.matches("fn main()").count(), 1, "one main");
    assert_eq!(source.matches("App::new()").count(), 1, "one app");
    let program = source
        .replace("fn main()", "fn bevy_example_main()")
        .replace(
            "App::new()",
            "App::new().add_plugins(nebula_memory::bevy::MemoryPlugin::default())",
        );
    let expected = systems
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{program}

// ---- added by nebula_memory's tests/bevy_examples.rs ----
#[global_allocator]
static NEBULA_HEAP: nebula_memory::TrackingAllocator =
    nebula_memory::TrackingAllocator::new(std::alloc::System);

fn main() {{
    bevy_example_main();
    let ledger = nebula_memory::ledger::snapshot();
    println!(\"---- the ledger after the app ran ----\\n{{ledger}}\");
    for system in [{expected}] {{
        let line = format!(\"systems/{{system}}\");
        assert!(ledger.tag(&line).is_some(), \"no line for {{line}}\");
    }}
    let heap: usize = ledger.heap_total();
    assert!(heap > 0, \"the tracker counted nothing\");
}}
"
    )
}

/// The stand-in `bevy` crate: the prelude and modules the examples use.
const SHIM_LIB: &str =
    "//! A stand-in for the `bevy` crate: its ECS and app parts, from the crates it re-exports.
pub use bevy_app as app;
pub use bevy_ecs as ecs;
pub mod prelude {
    pub use bevy_app::prelude::*;
    pub use bevy_ecs::prelude::*;
    pub use bevy_utils::prelude::*;
}
";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Unchanged files keep their times: cargo rebuilds nothing on a second run.
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// A package's manifest: its `[package]` table, then `[dependencies]` and `rest`.
fn manifest(name: &str, version: &str, rest: &str) -> String {
    format!(
        "[package]\nname = \"{name}\"\nversion = \"{version}\"\nedition = \"2024\"\n\
         publish = false\n\n[dependencies]\n{rest}"
    )
}

/// The package of the programs, written under the test target's temporary directory.
fn package(dir: &Path) {
    let root = env!("CARGO_MANIFEST_DIR");
    let archive = bevy_archive();
    let sources = dir.join("sources");
    std::fs::create_dir_all(&sources).unwrap();
    let mut tar = Command::new("tar");
    tar.arg("-xzf").arg(&archive).arg("-C").arg(&sources);
    for e in &EXAMPLES {
        tar.arg(format!("{BEVY}/{}", e.file));
    }
    assert!(tar.status().expect("tar").success(), "tar -xzf {archive:?}");

    let mut bins = String::new();
    for e in &EXAMPLES {
        let name = Path::new(e.file).file_stem().unwrap().to_str().unwrap();
        let source = std::fs::read_to_string(sources.join(BEVY).join(e.file)).unwrap();
        write(
            &dir.join(format!("src/bin/{name}.rs")),
            &instrumented(&source, e.systems),
        );
        bins.push_str(&format!(
            "[[bin]]\nname = \"{name}\"\npath = \"src/bin/{name}.rs\"\n\n"
        ));
    }
    let deps = "bevy_app = { version = \"0.20.1\", default-features = false, features = [\"std\"] }
bevy_ecs = { version = \"0.20.1\", default-features = false, features = [\"std\", \"multi_threaded\"] }
bevy_utils = { version = \"0.20.1\", default-features = false }
";
    let root_deps = format!(
        "nebula_memory = {{ path = {root:?} }}\nbevy = {{ path = \"shim\" }}\n\n{bins}\
         [workspace]\nmembers = [\"shim\"]\n"
    );
    write(
        &dir.join("Cargo.toml"),
        &manifest("bevy_examples", "0.0.0", &root_deps),
    );
    write(
        &dir.join("shim/Cargo.toml"),
        &manifest("bevy", "0.20.1", deps),
    );
    write(&dir.join("shim/src/lib.rs"), SHIM_LIB);
    // This crate's lock file: the same Bevy, found offline.
    let lock = std::fs::read_to_string(Path::new(root).join("Cargo.lock")).unwrap();
    if !dir.join("Cargo.lock").exists() {
        write(&dir.join("Cargo.lock"), &lock);
    }
}

#[test]
#[cfg_attr(nebula_asan, ignore = "would rebuild Bevy instrumented; runs natively")]
fn bevys_own_examples_run_with_the_tracker_and_the_plugin_and_each_system_has_its_line() {
    if std::env::var_os("NEBULA_UNDER_VALGRIND").is_some() {
        return; // the programs are separate processes, which valgrind does not follow
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bevy_examples");
    package(&dir);
    for e in &EXAMPLES {
        let name = Path::new(e.file).file_stem().unwrap().to_str().unwrap();
        let out = cargo()
            .args(["run", "--release", "--quiet", "--bin", name])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("RUSTFLAGS")
            .output()
            .expect("cargo run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("==== {} ====\n{stdout}", e.file);
        assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("---- the ledger after the app ran ----"));
    }
}
