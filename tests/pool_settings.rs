//! Settings at their extremes and the errors that name their fix: "forever"
//! (`Duration::MAX`) as a recall window or purge delay, a segment of zero bytes, and an
//! address space too small for a pool (as under `ulimit -v`). A pool operation completes
//! or changes nothing, and every refusal says which setting fixes it.

use std::time::Duration;

use nebula_memory::{Arena, MemoryArena, MemoryPool, PoolError};

mod common;
use common::assert_drained;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// `Duration::MAX` as the recall window and the purge delay: every pool operation that
/// consults the policy (allocate, grow a block in place, free, maintain) completes, the
/// figures stay exact, and a finite setting afterwards works as before. (Before: the
/// deadlines overflowed `Instant` inside the pool's lock, after the block was carved and
/// counted, and every later call panicked too.)
#[test]
fn forever_is_a_setting_not_a_panic() {
    let pool = MemoryPool::new("forever", 16 * MIB).unwrap();
    pool.set_recall_window(Duration::MAX);
    pool.set_purge_delay(Duration::MAX);
    pool.set_retain_limit(0);
    for round in 0..3 {
        let block = pool.allocate_block(64 * KIB).unwrap();
        // SAFETY: from this pool, not used afterwards.
        unsafe { pool.free_block(block) };
        // An arena whose top outgrows its block grows the block in place into the free
        // range after it (the pool's `extend`).
        let arena = MemoryArena::new(&pool);
        let mut v = allocator_api2::vec::Vec::<u8, _>::new_in(&arena);
        v.resize(3 * MIB, round as u8);
        assert_eq!(v.len(), 3 * MIB);
        drop(v);
        drop(arena);
        assert_eq!(pool.maintain(), 0, "a delay of forever never decommits");
        assert_eq!(pool.stats().blocks_in_use, 0, "round {round}");
    }
    assert_drained(&pool);

    // Finite settings again: the pool purges as it should.
    pool.set_recall_window(Duration::ZERO);
    pool.set_purge_delay(Duration::ZERO);
    pool.maintain();
    assert_eq!(pool.trim(), 0, "maintain gave every dirty range back");
    let arena = MemoryArena::new(&pool);
    arena.alloc_slice_copy(&[1u8; 1000]);
    drop(arena);
    assert_drained(&pool);
}

/// A recurring peak under a recall window of `Duration::MAX` keeps its pages for good
/// (what "forever" asks for), frame after frame.
#[test]
fn a_recall_of_forever_keeps_a_recurring_peak() {
    let pool = MemoryPool::new("kept", 16 * MIB).unwrap();
    pool.set_recall_window(Duration::MAX);
    pool.set_purge_delay(Duration::ZERO);
    pool.set_retain_limit(0);
    let peak = |pool: &MemoryPool| {
        let block = pool.allocate_block(4 * MIB).unwrap();
        // SAFETY: from this pool, not used afterwards.
        unsafe { pool.free_block(block) };
    };
    peak(&pool);
    peak(&pool); // it recurred
    for _ in 0..10_000 {
        assert_eq!(pool.maintain(), 0);
    }
    pool.set_recall_window(Duration::ZERO);
    assert_eq!(pool.maintain(), 1, "kept until the recall was turned off");
}

/// A zero segment is the segment's fault, not the capacity's.
#[test]
fn a_zero_segment_names_the_segment() {
    let err = MemoryPool::segmented("seg", MIB, 0).unwrap_err();
    assert_eq!(
        err,
        PoolError::InvalidSegment {
            pool: "seg",
            segment: 0
        }
    );
    assert!(err.to_string().contains("segment"), "{err}");
    let err = MemoryPool::segmented("seg", 0, MIB).unwrap_err();
    assert!(matches!(
        err,
        PoolError::InvalidCapacity { capacity: 0, .. }
    ));
    assert!(
        MemoryPool::segmented("seg", MIB, 1).is_ok(),
        "1 byte: a page"
    );
}

/// A refused reservation says what limits it and which setting fixes it.
#[test]
fn a_refused_reservation_names_the_fix() {
    let msg = PoolError::ReserveFailed {
        pool: "game",
        capacity: 512 * MIB,
        os_code: Some(12),
    }
    .to_string();
    for needed in [
        "'game'",
        "ulimit -v",
        "configure_global_pools",
        "MemoryPlugin::pools",
    ] {
        assert!(msg.contains(needed), "{needed:?} missing from: {msg}");
    }
}

/// Under a real address-space limit (`setrlimit(RLIMIT_AS)`, what `ulimit -v` sets), in a
/// child process of this test binary: a pool larger than the limit is refused with the
/// message above, a smaller one works, and the global pools' first use panics with a
/// message naming `configure_global_pools`.
#[cfg(all(target_os = "linux", not(miri), not(nebula_asan)))]
#[test]
fn under_an_address_space_limit() {
    const CHILD: &str = "NEBULA_ADDRESS_SPACE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let limit = 1 << 30; // 1 GiB: the test binary itself fits
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: a valid rlimit for this process (a child of its own).
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let err = MemoryPool::new("big", 4 << 30).unwrap_err();
        assert!(matches!(err, PoolError::ReserveFailed { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("configure_global_pools"), "{msg}");
        let small = MemoryPool::new("small", 16 * MIB).unwrap();
        let arena = MemoryArena::new(&small);
        assert!(arena.try_alloc(std::alloc::Layout::new::<u64>()).is_ok());
        drop(arena);
        // The global pools at their defaults (832 MiB together) pass the limit.
        nebula_memory::configure_global_pools(nebula_memory::GlobalPoolConfig {
            engine: 256 * MIB,
            game: 2048 * MIB,
            scratch: 64 * MIB,
        })
        .unwrap();
        let panic = std::panic::catch_unwind(|| nebula_memory::game_pool().name());
        let payload = panic.expect_err("a 2 GiB game pool under a 1 GiB limit");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            msg.contains("configure_global_pools") && msg.contains("'game'"),
            "{msg}"
        );
        println!("CHILD OK");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "under_an_address_space_limit", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CHILD OK"),
        "child failed:\n{stdout}\n{stderr}"
    );
}
