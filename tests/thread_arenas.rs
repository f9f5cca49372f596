//! Every thread's frame arena, reached from one thread: `end_thread_arena_frame` and
//! `all_thread_arenas_stats`. (A test binary of its own: it counts thread arenas of the
//! whole process, and ends their frames.)

use std::alloc::Layout;

use nebula_memory::{
    all_thread_arenas_stats, end_thread_arena_frame, thread_arena_alloc, thread_arena_frame,
    thread_arena_stats,
};

mod common;
use common::Barrier;

/// The tests of this binary end frames for every thread of the process: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Four threads allocate from their own frame arenas; the main thread ends the frame for
/// all of them at once while they wait, and each sees its arena empty afterwards, its
/// first address reused in the next frame. (Checks are recorded while the barriers are in use and asserted
/// after them, so that a failure cannot leave a thread waiting for ever.)
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn one_thread_resets_every_threads_arena() {
    const THREADS: usize = 4;
    const FRAMES: usize = 3;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = all_thread_arenas_stats().threads;
    let sync = Barrier::new(THREADS + 1);
    let mut main_checks = Vec::new();
    let thread_checks: Vec<Vec<(bool, String)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let sync = &sync;
                s.spawn(move || {
                    let mut checks = Vec::new();
                    let layout = Layout::from_size_align(100 + t, 8).unwrap();
                    let mut origin = None;
                    for frame in 0..FRAMES as u8 {
                        let first = thread_arena_alloc(layout).unwrap();
                        let origin = *origin.get_or_insert(first);
                        checks.push((first == origin, format!("frame {frame} starts over")));
                        // SAFETY: 100 + t fresh bytes.
                        unsafe { first.as_ptr().write_bytes(frame, 100 + t) };
                        for _ in 0..10 {
                            thread_arena_alloc(Layout::new::<[u64; 8]>()).unwrap();
                        }
                        let used = thread_arena_stats().unwrap().bytes_used;
                        checks.push((used >= 100 + t + 640, format!("{used} bytes used")));
                        sync.wait(); // frame done
                        sync.wait(); // frame ended
                        let used = thread_arena_stats().unwrap().bytes_used;
                        checks.push((used == 0, format!("{used} bytes after the reset")));
                    }
                    checks
                })
            })
            .collect();
        for _ in 0..FRAMES {
            sync.wait();
            let all = all_thread_arenas_stats();
            main_checks.push((all.threads == before + THREADS, format!("{all:?}")));
            main_checks.push((all.bytes_used >= THREADS * (100 + 640), format!("{all:?}")));
            end_thread_arena_frame();
            let after = all_thread_arenas_stats();
            main_checks.push((after.bytes_used == 0, format!("after the frame: {after:?}")));
            sync.wait();
        }
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (ok, what) in main_checks.iter().chain(thread_checks.iter().flatten()) {
        assert!(ok, "{what}");
    }
    // The threads have exited: their arenas left the registry (their blocks went back).
    let mut threads = all_thread_arenas_stats().threads;
    for _ in 0..100 {
        if threads == before {
            break;
        }
        // Thread-local destructors may still be running after `scope` returns.
        std::thread::sleep(std::time::Duration::from_millis(10));
        threads = all_thread_arenas_stats().threads;
    }
    assert_eq!(threads, before);
}

/// Another thread's frame end never writes this thread's memory: a value allocated in a
/// frame keeps its contents after the frame ends (the frame end once reset every thread's
/// arena from the calling thread, filling given-back bytes with 0xDD in debug builds and
/// racing with a thread allocating meanwhile). The thread's own next allocation starts its
/// arena over, as `thread_arena_alloc` documents.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_frame_end_on_another_thread_leaves_this_threads_memory_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sync = Barrier::new(2);
    let checks = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let p = thread_arena_alloc(Layout::new::<u64>())
                .unwrap()
                .cast::<u64>();
            // SAFETY: 8 fresh bytes, ours until this thread allocates in a later frame.
            unsafe { p.as_ptr().write(1) };
            let frame = thread_arena_frame();
            sync.wait(); // allocated
            sync.wait(); // another thread ended the frame
            // SAFETY: this thread has not allocated since: `p` is still valid.
            let kept = unsafe { p.as_ptr().read() };
            let ended = thread_arena_frame() > frame;
            let again = thread_arena_alloc(Layout::new::<u64>())
                .unwrap()
                .cast::<u64>();
            (kept, ended, again == p)
        });
        sync.wait();
        end_thread_arena_frame();
        sync.wait();
        worker.join().unwrap()
    });
    assert_eq!(
        checks,
        (1, true, true),
        "(kept value, frame ended, started over)"
    );
}

/// Per-thread frame arenas take memory as they use it: 64 threads that each allocate
/// 1 KiB a frame for a few frames all get memory on the default scratch pool, and hold
/// at most 64 KiB of it each (a cap of 4 MiB each would not fit 64 of them in 64 MiB).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn sixty_four_threads_fit_in_the_default_scratch_pool() {
    // Under Miri, fewer threads (each is slow to start) with the same per-thread bound.
    const THREADS: usize = if cfg!(miri) { 8 } else { 64 };
    const FRAMES: usize = 3;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sync = Barrier::new(THREADS + 1);
    // Per thread: how many allocations failed, and the bytes its arena held at the end.
    let results: Vec<(usize, usize)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let sync = &sync;
                s.spawn(move || {
                    let mut failed = 0;
                    for _ in 0..FRAMES {
                        match thread_arena_alloc(Layout::from_size_align(1024, 8).unwrap()) {
                            // SAFETY: 1 KiB fresh bytes, ours for this frame.
                            Some(p) => unsafe { p.as_ptr().write_bytes(0xAB, 1024) },
                            None => failed += 1,
                        }
                        sync.wait(); // allocated
                        sync.wait(); // frame ended
                    }
                    (failed, thread_arena_stats().map_or(0, |s| s.bytes_held))
                })
            })
            .collect();
        for _ in 0..FRAMES {
            sync.wait();
            end_thread_arena_frame();
            sync.wait();
        }
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let failed: usize = results.iter().map(|r| r.0).sum();
    let held: usize = results.iter().map(|r| r.1).sum();
    assert_eq!(
        failed,
        0,
        "{failed} of {} allocations failed",
        THREADS * FRAMES
    );
    assert!(
        held <= THREADS * 64 * 1024,
        "{THREADS} threads hold {held} bytes of the scratch pool"
    );
    assert!(held > 0, "the arenas report holding nothing");
}
