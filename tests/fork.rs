//! `fork()` in a busy process: three threads churn the heap (under a tracker), scratch,
//! thread arenas, tagged arenas, pool blocks and ledger snapshots while the test thread
//! forks children that open a heap scope, allocate, use a pool and take a snapshot. Every
//! child must exit: a lock some other thread held at the fork would park it for ever (it
//! did, in `ledger::node`, before the crate took its locks around `fork`: see `src/fork.rs`).
//!
//! The parent waits for each child with a bound (polling `waitpid`), kills what is left and
//! fails. Unix only; not under Miri (no `fork`).
#![cfg(all(unix, not(miri)))]

use std::alloc::{Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nebula_memory::ledger;
use nebula_memory::{
    Arena, ArenaConfig, MemoryArena, MemoryPool, TrackingAllocator, end_thread_arena_frame,
    scratch_batch, scratch_pool, thread_arena_alloc, with_scratch,
};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const CHILDREN: usize = 20;
/// How long all children together may take before the test calls them hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// Tags made while the threads run, so that the registry is written, not only read.
fn churn_tag(thread: usize, round: usize) -> &'static str {
    let name = format!("fork/churn/t{thread}/n{}", round % 32);
    Box::leak(name.into_boxed_str())
}

/// One round of everything the busy threads do.
fn churn(thread: usize, round: usize, pool: &MemoryPool) {
    let tag = churn_tag(thread, round);
    let _scope = ledger::scope(tag);
    let v: Vec<u64> = (0..(round % 512) as u64).collect();
    std::hint::black_box(&v);
    with_scratch(|s| {
        s.alloc_slice_fill_with(round % 2000 + 1, |i| i as u32);
    });
    let mut batch = scratch_batch();
    batch.scope(|s| s.alloc_slice_copy(&[1u8; 300]).len());
    drop(batch);
    thread_arena_alloc(Layout::from_size_align(64, 8).unwrap());
    if round.is_multiple_of(64) {
        end_thread_arena_frame();
    }
    let arena = MemoryArena::with_config(pool, ArenaConfig::default().tag("fork/churn/arena"));
    arena.alloc_slice_fill_with(round % 20_000 + 1, |i| i as u8);
    drop(arena);
    if let Ok(b) = pool.allocate_block(4096 + round % 8192) {
        // SAFETY: from this pool, not used afterwards.
        unsafe { pool.free_block(b) };
    }
    if let Ok(b) = scratch_pool().allocate_block(1024) {
        // SAFETY: from this pool, not used afterwards.
        unsafe { scratch_pool().free_block(b) };
    }
    if round.is_multiple_of(4) {
        std::hint::black_box(ledger::snapshot());
    }
}

/// What a child does; its exit status says what went wrong (0: nothing).
fn child() -> i32 {
    let _scope = ledger::scope("fork/child");
    let v = std::hint::black_box(vec![1u8; 1 << 20]);
    let Ok(pool) = MemoryPool::new("fork-child", 4 << 20) else {
        return 2;
    };
    let Ok(block) = pool.allocate_block(64 << 10) else {
        return 3;
    };
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(block) };
    let Ok(block) = scratch_pool().allocate_block(64 << 10) else {
        return 4;
    };
    // SAFETY: from this pool, not used afterwards.
    unsafe { scratch_pool().free_block(block) };
    let sum = with_scratch(|s| {
        s.alloc_slice_fill_with(1000, |i| i as u64)
            .iter()
            .sum::<u64>()
    });
    if sum != 999 * 1000 / 2 {
        return 5;
    }
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().tag("fork/child/arena"));
    arena.alloc_slice_copy(&[7u8; 100_000]);
    let snap = ledger::snapshot();
    let live = snap.tag("fork/child").map_or(0, |f| f.heap_live);
    if live < v.len() {
        return 6;
    }
    if snap.tag("fork/child/arena").map_or(0, |f| f.held) == 0 {
        return 7;
    }
    drop(arena);
    0
}

#[test]
fn children_forked_from_a_busy_process_use_the_ledger_pools_and_tracker() {
    forks_among_busy_threads(false);
}

/// The same with the heap sampler on at a mean of 64 bytes: nearly every allocation takes
/// the sampler's table lock, so forks land while other threads hold it; each child also
/// asks for its line's call sites.
#[test]
fn with_sampling_on_children_forked_from_a_busy_process_sample_too() {
    ledger::set_sampling(Some(64));
    forks_among_busy_threads(true);
    ledger::set_sampling(None);
}

fn forks_among_busy_threads(sampling: bool) {
    let stop = Arc::new(AtomicBool::new(false));
    let pool = Arc::new(MemoryPool::new("fork-parent", 64 << 20).unwrap());
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let (stop, pool) = (Arc::clone(&stop), Arc::clone(&pool));
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    churn(t, round, &pool);
                    round += 1;
                }
            })
        })
        .collect();
    // Let the threads get going (every lock in use), then fork among them.
    std::thread::sleep(Duration::from_millis(50));
    let mut pids = Vec::new();
    for _ in 0..CHILDREN {
        // SAFETY: the child runs only `child` (the crate and the allocator) and `_exit`s,
        // never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut status = child();
            // Symbolising reads the binary's debug information: two children are enough.
            let report = sampling && pids.len() < 2;
            if status == 0 && report && ledger::call_sites("fork/child").churn.is_empty() {
                status = 8;
            }
            // SAFETY: ends the child at once, running no destructor or exit handler.
            unsafe { libc::_exit(status) };
        }
        pids.push(pid);
        std::thread::sleep(Duration::from_millis(3));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }

    let start = Instant::now();
    let mut statuses = vec![None; pids.len()];
    while statuses.iter().any(Option::is_none) && start.elapsed() < DEADLINE {
        for (pid, status) in pids.iter().zip(&mut statuses) {
            if status.is_none() {
                let mut raw = 0;
                // SAFETY: our own child; `raw` is a valid out-pointer.
                let r = unsafe { libc::waitpid(*pid, &mut raw, libc::WNOHANG) };
                if r == *pid {
                    *status = Some(raw);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let hung: Vec<_> = pids
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| s.is_none())
        .map(|(&p, _)| p)
        .collect();
    for &pid in &hung {
        // SAFETY: our own child, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    assert!(
        hung.is_empty(),
        "{} of {CHILDREN} children did not exit within {DEADLINE:?}",
        hung.len()
    );
    for (i, raw) in statuses.into_iter().flatten().enumerate() {
        assert!(
            libc::WIFEXITED(raw) && libc::WEXITSTATUS(raw) == 0,
            "child {i}: exit status {raw:#x}"
        );
    }
}
