//! Panics about a caller's mistake report the caller's line, not the crate's
//! (`#[track_caller]` all the way down). A process of its own: it installs a panic hook.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

use nebula_memory::{Arena, FrameArena, MemoryArena, MemoryPool};

static LOCATION: Mutex<Option<String>> = Mutex::new(None);

/// Runs `f`, which must panic, and returns the file the panic was reported at.
fn panic_file(f: impl FnOnce()) -> String {
    *LOCATION.lock().unwrap() = None;
    assert!(
        panic::catch_unwind(AssertUnwindSafe(f)).is_err(),
        "no panic"
    );
    LOCATION.lock().unwrap().take().unwrap()
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn mistakes_are_reported_at_the_callers_line() {
    panic::set_hook(Box::new(|info| {
        *LOCATION.lock().unwrap() = info.location().map(|l| l.file().to_owned());
    }));
    let here = file!();
    let pool = MemoryPool::new("locations", 1 << 20).unwrap();
    let a = MemoryArena::new(&pool);
    let b = MemoryArena::new(&pool);
    let foreign = b.checkpoint();
    // SAFETY: refused before anything is freed.
    assert_eq!(panic_file(|| unsafe { a.rewind(foreign) }), here);
    let mut stale_arena = MemoryArena::new(&pool);
    let stale = stale_arena.checkpoint();
    stale_arena.reset();
    // SAFETY: as above.
    assert_eq!(panic_file(|| unsafe { stale_arena.rewind(stale) }), here);
    assert_eq!(
        panic_file(|| {
            FrameArena::new(usize::MAX / 2);
        }),
        here
    );
    assert_eq!(
        panic_file(|| {
            a.alloc_slice(usize::MAX, 0u64);
        }),
        here
    );
    let small = MemoryPool::new("locations_small", 64 * 1024).unwrap();
    let c = MemoryArena::new(&small);
    assert_eq!(
        panic_file(|| {
            c.alloc_val([0u8; 100_000]);
        }),
        here
    );
    let _ = panic::take_hook();
}
