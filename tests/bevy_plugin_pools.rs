//! `MemoryPlugin { pools: Some(..) }` whose sizes cannot apply (a global pool exists
//! already with another size) panics when the app is built, naming the pool, the size in
//! force and the fix, instead of running with pools of another size after a WARN that a
//! headless app never shows. A process of its own: it creates the global pools.
#![cfg(feature = "bevy")]

use bevy_app::App;
use nebula_memory::bevy::MemoryPlugin;
use nebula_memory::{GlobalPoolConfig, scratch_pool};

fn build(plugin: MemoryPlugin) -> Result<(), String> {
    std::panic::catch_unwind(|| {
        App::new().add_plugins(plugin);
    })
    .map_err(|p| *p.downcast::<String>().unwrap())
}

#[test]
fn pool_sizes_that_cannot_apply_are_refused_at_build() {
    let in_force = scratch_pool().stats().capacity; // the pools exist from here on
    let asked = GlobalPoolConfig {
        scratch: 2 * in_force,
        ..GlobalPoolConfig::default()
    };
    let msg = build(MemoryPlugin {
        pools: Some(asked),
        ..MemoryPlugin::default()
    })
    .unwrap_err();
    assert!(msg.contains("scratch pool"), "{msg}");
    assert!(msg.contains(&in_force.to_string()), "{msg}");
    assert!(msg.contains(&(2 * in_force).to_string()), "{msg}");
    assert!(
        msg.contains("before anything touches a global pool"),
        "{msg}"
    );

    // The default never panics, nor do sizes equal to those in force.
    build(MemoryPlugin::default()).unwrap();
    build(MemoryPlugin {
        pools: Some(nebula_memory::global_pool_config()),
        ..MemoryPlugin::default()
    })
    .unwrap();
}
