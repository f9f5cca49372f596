//! The old names of renamed public items still compile and mean what their new names do
//! (CHANGELOG, "Names"). The only place in the repository that uses them.
#![allow(deprecated)]

use std::alloc::Layout;

use nebula_memory::{MemoryArena, MemoryPool, SharedArena};

#[test]
fn arena_labels_under_their_old_names() {
    let pool = MemoryPool::new("deprecated-names", 4 << 20).unwrap();
    let arena = MemoryArena::new(&pool);
    arena.alloc_tagged(Layout::new::<[u8; 24]>(), "mesh");
    arena
        .try_alloc_tagged(Layout::new::<u64>(), "mesh")
        .unwrap();
    assert_eq!(arena.tag_bytes("mesh"), 32);
    assert_eq!(arena.tag_bytes("mesh"), arena.label_bytes("mesh"));
    let stats = arena.stats();
    assert_eq!(stats.tags, stats.labels);
    assert_eq!(stats.labels, vec![("mesh", 32)]);

    let shared = SharedArena::new(&pool);
    shared.with_this_thread(|mine| mine.alloc_tagged(Layout::new::<u32>(), "ai"));
    assert_eq!(shared.tag_bytes("ai"), 4);
    assert_eq!(shared.stats().tags, vec![("ai", 4)]);
}

#[cfg(feature = "bevy")]
#[test]
fn bevy_names_under_their_old_names() {
    use bevy_app::App;
    use nebula_memory::Arena;
    use nebula_memory::bevy::{
        FrameMemory, FrameMemoryStats, MemoryBudgets, MemoryPlugin, MemoryStats, ScratchArenas,
        ScratchFrame, ScratchFrameStats, paths,
    };

    // The same types, so either name works in a system's parameters or a resource lookup.
    let _: fn(FrameMemoryStats) -> MemoryStats = |s| s;
    let _: fn(ScratchFrame) -> ScratchFrameStats = |s| s;
    assert_eq!(paths::FRAME_BYTES, paths::FRAME_MEMORY_BYTES);
    let old = MemoryBudgets {
        frame: 1 << 20,
        ..Default::default()
    };
    assert_eq!(old.frame_memory, 0); // read in its place while `frame_memory` is unset

    let mut app = App::new();
    app.add_plugins(MemoryPlugin::default());
    app.update();
    app.world()
        .resource::<FrameMemory>()
        .current()
        .alloc_slice(1000, 1u8);
    app.update();
    let stats = *app.world().resource::<FrameMemoryStats>();
    assert!(stats.frame_memory_bytes >= 1000);
    assert_eq!(stats.frame_bytes, stats.frame_memory_bytes);
    assert_eq!(
        stats.frame_high_watermark,
        stats.frame_memory_high_watermark
    );
    let ended: ScratchFrame = app.world_mut().resource_mut::<ScratchArenas>().end_frame();
    let _: ScratchFrameStats = ended;
}
