//! Bevy's own example programs, not written for this crate, built against the real `bevy`
//! crate in release with the heap tracker and `MemoryPlugin`: what a Bevy user who adds
//! the two lines gets, checked with the allocation assertions (`AllocationCheck`).
//!
//! The programs are examples from Bevy 0.20.1's repository (`examples/ecs/`), read from
//! the `bevy` package Cargo downloads (`cargo info bevy@0.20.1` fetches it into Cargo's
//! cache if it is not there yet); nothing of them is kept in this repository. They are
//! built in a package of their own, written under the test target's temporary directory,
//! that depends on `bevy` 0.20.1 (default features off; `std` and `multi_threaded`, all
//! the two programs need) and on this crate by path. That `bevy` declares `rust-version`
//! 1.97.1, newer than this crate's 1.95, so the package is built with the toolchain in
//! `NEBULA_BEVY_TOOLCHAIN` (default `1.97.1`, through rustup:
//! `rustup toolchain install 1.97.1 --profile minimal`).
//!
//! Each program's text is kept but for what a user adds, `MemoryPlugin` on its `App` and
//! the tracker as its global allocator, and one plugin of the test's (`ExampleCheck`,
//! added where the program makes its `App`, before `MemoryPlugin`): it gives the app a
//! compute pool of 8 threads (`TaskPoolPlugin`), and a runner, so that the program's own
//! `App::run()` runs the app frame by frame under `AllocationCheck` (3 frames of warm-up,
//! then 10 recorded) instead of Bevy's default single frame. The runner then prints the
//! ledger's table and asserts, for every system of the program, that it has a line, that
//! its live heap does not keep growing and that it makes no more heap allocations a frame
//! than listed in `EXAMPLES` (none, or one where it prints an `Entity`: Bevy formats it
//! into a `String`). The program's `fn main` is renamed and called from a `main` of ours,
//! which checks that the checks ran.
//!
//! Ignored in an ordinary `cargo test`: the release build of the real `bevy` (two to three
//! minutes cold on two cores) is `.ci/run`'s step of its own,
//! `cargo test --release --test bevy_examples -- --ignored`, which installs the toolchain.
//! The build's target directory is under the test target's temporary directory: the
//! second run builds nothing. Not run under the sanitizers or valgrind (they would rebuild
//! it all instrumented, and the programs run natively anyway).

#![cfg(all(feature = "bevy", not(target_family = "wasm"), not(miri)))]

use std::path::{Path, PathBuf};
use std::process::Command;

const BEVY: &str = "bevy-0.20.1";

/// A Bevy example: its path in the package, and its systems (the lines the ledger must
/// have), each with the heap allocations it may make a frame after the warm-up.
struct Example {
    file: &'static str,
    systems: &'static [(&'static str, u64)],
}

/// Bevy's `Display` for `Entity` formats into a `String` first (`bevy_ecs::entity`,
/// `f.pad(&format!(..))`): each printing system prints one entity a frame, so one heap
/// allocation of a few bytes a frame; the checks found it.
const EXAMPLES: [Example; 2] = [
    Example {
        file: "examples/ecs/custom_query_param.rs",
        systems: &[
            ("spawn", 0),
            ("print_components_read_only", 1),
            ("print_components_iter_mut", 1),
            ("print_components_iter", 1),
            ("print_components_tuple", 1),
            ("print_components_contiguous_iter", 1),
        ],
    },
    Example {
        file: "examples/ecs/system_param.rs",
        systems: &[("spawn", 0), ("count_players", 0)],
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

/// The example's text with what a user adds, `MemoryPlugin` on the app and the tracker as
/// the global allocator, and the test's `ExampleCheck` plugin (8 compute threads; a runner
/// that runs the app frame by frame under `AllocationCheck` and asserts on every system's
/// line); then a `main` of ours around theirs.
fn instrumented(source: &str, systems: &[(&str, u64)]) -> String {
    assert_eq!(source.matches("fn main()").count(), 1, "one main");
    assert_eq!(source.matches("App::new()").count(), 1, "one app");
    let program = source
        .replace("fn main()", "fn bevy_example_main()")
        .replace(
            "App::new()",
            "App::new()\n        .add_plugins(nebula_check::ExampleCheck)\n        \
             .add_plugins(nebula_memory::bevy::MemoryPlugin::default())",
        );
    let expected = systems
        .iter()
        .map(|(s, allocs)| format!("({s:?}, {allocs})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{program}

// ---- added by nebula_memory's tests/bevy_examples.rs ----
#[global_allocator]
static NEBULA_HEAP: nebula_memory::TrackingAllocator =
    nebula_memory::TrackingAllocator::new(std::alloc::System);

mod nebula_check {{
    use std::sync::atomic::{{AtomicBool, Ordering}};

    use bevy::app::{{
        App, AppExit, Plugin, PluginsState, TaskPoolOptions, TaskPoolPlugin,
        TaskPoolThreadAssignmentPolicy,
    }};
    use nebula_memory::bevy::{{AllocationCheck, tag_task_pool_threads}};

    const THREADS: usize = {THREADS};
    /// Each system, and the heap allocations it may make a frame.
    const SYSTEMS: [(&str, u64); {count}] = [{expected}];
    pub static CHECKED: AtomicBool = AtomicBool::new(false);

    /// A compute pool of {THREADS} threads, and a runner that runs the app under the checks.
    pub struct ExampleCheck;

    impl Plugin for ExampleCheck {{
        fn build(&self, app: &mut App) {{
            let compute = TaskPoolThreadAssignmentPolicy {{
                min_threads: THREADS,
                max_threads: THREADS,
                percent: 1.0,
                on_thread_spawn: None,
                on_thread_destroy: None,
            }};
            app.add_plugins(TaskPoolPlugin {{
                task_pool_options: tag_task_pool_threads(TaskPoolOptions {{
                    compute,
                    ..Default::default()
                }}),
            }});
            app.set_runner(runner);
        }}
    }}

    /// Bevy's `run_once`, but {FRAMES} recorded frames after the warm-up, then the checks.
    fn runner(mut app: App) -> AppExit {{
        while app.plugins_state() == PluginsState::Adding {{
            bevy::tasks::tick_global_task_pools_on_main_thread();
        }}
        app.finish();
        app.cleanup();
        let threads = bevy::tasks::ComputeTaskPool::get().thread_num();
        assert_eq!(threads, THREADS, \"the compute pool's threads\");
        let record = AllocationCheck::frames({FRAMES}).run(&mut app);
        let ledger = app.world().resource::<nebula_memory::bevy::MemoryLedger>();
        println!(\"---- the ledger's last checked frame ----\\n{{ledger}}\");
        for (system, allocs) in SYSTEMS {{
            // Each panics if the system has no line (the message lists the lines).
            record.assert_not_growing(system);
            if allocs == 0 {{
                record.assert_no_allocations(system);
            }} else {{
                record.assert_allocs_at_most(system, allocs);
                record.assert_bytes_at_most(system, 64 * allocs as usize);
            }}
        }}
        CHECKED.store(true, Ordering::SeqCst);
        app.should_exit().unwrap_or(AppExit::Success)
    }}
}}

fn main() {{
    bevy_example_main();
    assert!(
        nebula_check::CHECKED.load(std::sync::atomic::Ordering::SeqCst),
        \"the example's App::run() did not reach the checks\"
    );
    println!(\"---- checked: {count} systems on {THREADS} compute threads ----\");
}}
",
        count = systems.len(),
    )
}

/// The compute pool's threads, and the frames recorded after `AllocationCheck`'s warm-up.
const THREADS: usize = 8;
const FRAMES: u32 = 10;

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

/// The package of the programs, written under the test target's temporary directory: the
/// real `bevy` 0.20.1 with the features the two programs need, and this crate.
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
    // Default features off, as a headless game or test has them: `std`, and
    // `multi_threaded` for the compute pool. The examples use nothing else of Bevy.
    let deps = format!(
        "bevy = {{ version = \"=0.20.1\", default-features = false, \
         features = [\"std\", \"multi_threaded\"] }}\n\
         nebula_memory = {{ path = {root:?} }}\n\n{bins}[workspace]\n"
    );
    write(
        &dir.join("Cargo.toml"),
        &manifest("bevy_examples", "0.0.0", &deps),
    );
    // This crate's lock file to start from: the same Bevy crates; Cargo adds the rest.
    if !dir.join("Cargo.lock").exists() {
        let lock = std::fs::read_to_string(Path::new(root).join("Cargo.lock")).unwrap();
        write(&dir.join("Cargo.lock"), &lock);
    }
}

/// The toolchain the real `bevy` needs (its `rust-version`), through rustup.
fn toolchain() -> String {
    std::env::var("NEBULA_BEVY_TOOLCHAIN").unwrap_or_else(|_| "1.97.1".to_owned())
}

/// `rustup run <toolchain> cargo`, in the package, with its own target directory and none
/// of the outer build's settings.
fn cargo_for_bevy(dir: &Path) -> Command {
    let toolchain = toolchain();
    let mut cargo = Command::new("rustup");
    cargo
        .args(["run", &toolchain, "cargo"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTDOC",
        "CARGO",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
    ] {
        cargo.env_remove(var);
    }
    cargo
}

#[test]
#[ignore = "builds the real `bevy` crate with rustc 1.97.1 (minutes): .ci/run's own step, \
            `cargo test --release --test bevy_examples -- --ignored`"]
fn bevys_own_examples_pass_the_allocation_checks_on_8_threads_with_the_real_bevy() {
    if std::env::var_os("NEBULA_UNDER_VALGRIND").is_some() {
        return; // the programs are separate processes, which valgrind does not follow
    }
    let toolchain = toolchain();
    let version = Command::new("rustup")
        .args(["run", &toolchain, "rustc", "--version"])
        .output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "no Rust {toolchain} through rustup (the real `bevy` 0.20.1 needs it): \
         `rustup toolchain install {toolchain} --profile minimal`"
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bevy_examples");
    package(&dir);
    let build = cargo_for_bevy(&dir)
        .args(["build", "--release", "--bins"])
        .status()
        .expect("rustup run cargo build");
    assert!(
        build.success(),
        "the examples' package did not build (above)"
    );
    for e in &EXAMPLES {
        let name = Path::new(e.file).file_stem().unwrap().to_str().unwrap();
        let out = Command::new(dir.join("target/release").join(name))
            .output()
            .expect("the example's program");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("==== {} ====\n{stdout}", e.file);
        assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains(&format!(
            "---- checked: {} systems on {THREADS} compute threads ----",
            e.systems.len()
        )));
    }
}
