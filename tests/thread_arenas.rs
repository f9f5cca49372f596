//! Every thread's frame arena, reached from one thread: `thread_arena_reset_all` and
//! `thread_arenas_stats`. (A test binary of its own: it counts thread arenas of the whole
//! process.)

use std::alloc::Layout;

use nebula_memory::{
    thread_arena_alloc, thread_arena_reset_all, thread_arena_stats, thread_arenas_stats,
};

mod common;
use common::Barrier;

/// Four threads allocate from their own frame arenas; the main thread resets all of them
/// at once while they wait (a frame end), and each sees its arena empty afterwards, its
/// first address reused. (Checks are recorded while the barriers are in use and asserted
/// after them, so that a failure cannot leave a thread waiting for ever.)
#[test]
fn one_thread_resets_every_threads_arena() {
    const THREADS: usize = 4;
    const FRAMES: usize = 3;
    let before = thread_arenas_stats().threads;
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
                        sync.wait(); // reset done
                        let used = thread_arena_stats().unwrap().bytes_used;
                        checks.push((used == 0, format!("{used} bytes after the reset")));
                    }
                    checks
                })
            })
            .collect();
        for _ in 0..FRAMES {
            sync.wait();
            let all = thread_arenas_stats();
            main_checks.push((all.threads == before + THREADS, format!("{all:?}")));
            main_checks.push((all.bytes_used >= THREADS * (100 + 640), format!("{all:?}")));
            // SAFETY: every thread waits at the barrier (none allocates), and none uses an
            // allocation from before the reset afterwards.
            unsafe { thread_arena_reset_all() };
            let after = thread_arenas_stats();
            main_checks.push((after.bytes_used == 0, format!("after reset: {after:?}")));
            sync.wait();
        }
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (ok, what) in main_checks.iter().chain(thread_checks.iter().flatten()) {
        assert!(ok, "{what}");
    }
    // The threads have exited: their arenas left the registry (their blocks went back).
    let mut threads = thread_arenas_stats().threads;
    for _ in 0..100 {
        if threads == before {
            break;
        }
        // Thread-local destructors may still be running after `scope` returns.
        std::thread::sleep(std::time::Duration::from_millis(10));
        threads = thread_arenas_stats().threads;
    }
    assert_eq!(threads, before);
}
