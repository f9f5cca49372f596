//! One generic function, written once against the `Arena` trait, run with every arena
//! kind of the crate (and, inside a Bevy system, with what `Scratch` derefs to and with
//! `FrameMemory`'s current buffer).

use std::alloc::Layout;
use std::fmt::Write as _;

use nebula_memory::{
    AllocError, Arena, DoubleBufferedArena, FrameArena, MemoryArena, MemoryPool, SharedArena,
    game_arena, with_scratch,
};

/// A pool that lives for the process (a `FrameArena` takes `&'static`), one per name,
/// kept reachable in a static so leak checkers do not count it.
fn static_pool(name: &'static str) -> &'static MemoryPool {
    static POOLS: std::sync::Mutex<Vec<&'static MemoryPool>> = std::sync::Mutex::new(Vec::new());
    let pool: &'static MemoryPool = Box::leak(Box::new(MemoryPool::new(name, 4 << 20).unwrap()));
    POOLS.lock().unwrap().push(pool);
    pool
}

/// Uses every typed helper once and checks what comes back; returns a checksum.
fn fill<A: Arena + ?Sized>(a: &A) -> u64 {
    let v = a.alloc_val(7u64);
    *v += 1;
    let w = a.try_alloc_val([1u16; 3]).unwrap();
    let with = a.alloc_with(|| (2u8, 3u32));
    let s = a.alloc_slice(4, 9u8);
    let copy = a.alloc_slice_copy(&[1u32, 2, 3]);
    let clone = a.alloc_slice_clone(&["x", "y"]);
    let filled = a.alloc_slice_fill_with(5, |i| i as u64 * 2);
    let collected = a.alloc_slice_from_iter((0..100u32).filter(|n| n % 7 == 0));
    let text = a.alloc_str("arena");
    let mut line = String::new();
    write!(line, "{}-{}", text, collected.len()).unwrap();
    let formatted = a.alloc_fmt(format_args!("{}:{:03}", text, 42));
    let boxed = a.alloc_boxed(vec![String::from("dropped")]);
    assert_eq!(*v, 8);
    assert_eq!(w, &[1, 1, 1]);
    assert_eq!(*with, (2, 3));
    assert_eq!(s, &[9; 4]);
    assert_eq!(copy, &[1, 2, 3]);
    assert_eq!(clone, &["x", "y"]);
    assert_eq!(filled, &[0, 2, 4, 6, 8]);
    assert_eq!(collected.len(), 15);
    assert_eq!(formatted, "arena:042");
    assert_eq!(line, "arena-15");
    assert_eq!(boxed.len(), 1);
    *v + w.iter().map(|&x| x as u64).sum::<u64>()
        + copy.iter().map(|&x| x as u64).sum::<u64>()
        + filled.iter().sum::<u64>()
        + collected.iter().map(|&x| x as u64).sum::<u64>()
}

/// What `fill` returns for any arena: 8 + 3 + 6 + 20, and the multiples of 7 below 100
/// (7 * (0 + 1 + … + 14) = 735).
const SUM: u64 = 8 + 3 + 6 + 20 + 735;

/// Errors follow one rule: `try_` forms return the `AllocError`, panicking forms panic with
/// its message.
fn overflow<A: Arena + ?Sized>(a: &A) -> (AllocError, String) {
    let e = a.try_alloc_slice(usize::MAX, 0u64).unwrap_err();
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.alloc_slice(usize::MAX, 0u64);
    }))
    .map(|_| String::new())
    .unwrap_or_else(|p| *p.downcast::<String>().unwrap());
    (e, msg)
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn every_arena_kind_runs_the_same_generic_code() {
    let pool = MemoryPool::new("trait", 16 << 20).unwrap();
    let static_pool = static_pool("trait_static");

    let arena = MemoryArena::new(&pool);
    assert_eq!(fill(&arena), SUM);

    let shared = SharedArena::new(&pool);
    assert_eq!(fill(&shared), SUM);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(fill(&shared), SUM));
    });
    assert_eq!(shared.with_this_thread(fill), SUM);

    let frame = FrameArena::try_new_in(static_pool, 64 * 1024).unwrap();
    assert_eq!(fill(&frame), SUM);

    assert_eq!(with_scratch(fill), SUM);

    let guard = game_arena().read();
    assert_eq!(fill(&*guard), SUM);
    drop(guard);

    let frames = DoubleBufferedArena::new(&pool);
    assert_eq!(fill(frames.current()), SUM);

    let mut arena = arena;
    assert_eq!(arena.scope(fill), SUM);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn one_error_rule_for_every_kind() {
    let pool = MemoryPool::new("trait_errors", 1 << 20).unwrap();
    let arena = MemoryArena::new(&pool);
    let shared = SharedArena::new(&pool);
    let static_pool = static_pool("trait_errors_static");
    let frame = FrameArena::try_new_in(static_pool, 1024).unwrap();
    for (e, msg) in [overflow(&arena), overflow(&shared), overflow(&frame)] {
        assert!(matches!(e, AllocError::Layout { .. }), "{e:?}");
        assert!(msg.contains(&e.to_string()), "{msg:?} does not carry {e}");
    }
    // A full fixed-capacity arena is an error through the trait, `None` inherently.
    let e = Arena::try_alloc(&frame, Layout::new::<[u8; 2048]>()).unwrap_err();
    assert!(
        matches!(
            e,
            AllocError::Full {
                requested: 2048,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(frame.alloc(Layout::new::<[u8; 2048]>()).is_none());
}

#[cfg(feature = "bevy")]
#[test]
fn scratch_and_frame_memory_run_it_inside_a_system() {
    use bevy_ecs::prelude::*;
    use nebula_memory::bevy::{FrameMemory, Scratch, ScratchArenas};

    let mut world = World::new();
    world.insert_resource(ScratchArenas::default());
    world.insert_resource(FrameMemory::default());
    let sums = world
        .run_system_cached(|scratch: Scratch, frames: Res<FrameMemory>| {
            (fill(&*scratch), fill(frames.current()))
        })
        .unwrap();
    assert_eq!(sums, (SUM, SUM));
}
