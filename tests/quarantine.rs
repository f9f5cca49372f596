//! The use-after-reset trap: with `MemoryPool::set_quarantine(n)`, blocks given back stay
//! inaccessible for `n` calls to `maintain`, so a stale pointer faults at once.
#![cfg(all(unix, not(miri)))]

use nebula_memory::Arena;
use std::hint::black_box;
use std::process::Command;

use nebula_memory::{ArenaConfig, MemoryArena, MemoryPool};

mod common;
use common::assert_drained;

const CASE_VAR: &str = "NEBULA_QUARANTINE_CASE";

/// Child process body: read through a pointer into a block an arena gave back.
#[test]
fn child_entry() {
    if std::env::var(CASE_VAR).is_err() {
        return;
    }
    let pool = MemoryPool::new("purgatory", 16 << 20).unwrap();
    pool.set_quarantine(4);
    let mut arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * 1024));
    arena.alloc_slice(1000, 1u8);
    // A second, separate block: reset gives one of the two back.
    let stale = arena.alloc_slice(200_000, 2u8).as_mut_ptr();
    let stale = stale.wrapping_add(100_000); // well inside the block, away from its edges
    arena.reset();
    eprintln!("reset done, reading the stale pointer");
    // SAFETY: deliberately not: the read must fault.
    let v = unsafe { black_box(stale).read_volatile() };
    eprintln!("read {v}: the trap did not fire");
    std::process::exit(0);
}

#[test]
fn stale_read_after_reset_faults() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CASE_VAR, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reset done"),
        "child failed early:\n{stderr}"
    );
    assert!(
        !stderr.contains("the trap did not fire"),
        "stale read succeeded:\n{stderr}"
    );
    use std::os::unix::process::ExitStatusExt;
    // A plain build dies of SIGSEGV; under AddressSanitizer, ASan reports the read first
    // (the bytes are poisoned as well as protected).
    assert!(
        out.status.signal() == Some(libc_sigsegv())
            || stderr.contains("SEGV")
            || stderr.contains("ERROR: AddressSanitizer"),
        "expected a segmentation fault, got {:?}:\n{stderr}",
        out.status
    );
}

fn libc_sigsegv() -> i32 {
    11
}

#[test]
fn quarantined_blocks_come_back_after_n_maintain_calls() {
    let pool = MemoryPool::new("purgatory", 16 << 20).unwrap();
    pool.set_quarantine(3);
    let block = pool.allocate_block(256 * 1024).unwrap();
    let total = 256 * 1024 + 32;
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(block) };
    let s = pool.stats();
    assert_eq!(
        (s.quarantined, s.in_use, s.blocks_in_use),
        (total, total, 1)
    );
    pool.maintain();
    pool.maintain();
    assert_eq!(pool.stats().quarantined, total, "released too early");
    pool.maintain();
    assert_drained(&pool);
    // The memory is usable again.
    let again = pool.allocate_block(256 * 1024).unwrap();
    let data = nebula_memory::MemoryBlock::data_of(again).as_ptr();
    // SAFETY: a live block of 256 KiB.
    unsafe { data.write_bytes(0xAB, 256 * 1024) };
    // SAFETY: from this pool.
    unsafe { pool.free_block(again) };
}

#[test]
fn double_free_of_a_quarantined_block_panics() {
    let pool = MemoryPool::new("purgatory", 1 << 20).unwrap();
    pool.set_quarantine(2);
    let block = pool.allocate_block(8192).unwrap();
    // SAFETY: from this pool.
    unsafe { pool.free_block(block) };
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: deliberately broken contract: the block was already freed.
        unsafe { pool.free_block(block) }
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("purgatory") && msg.contains("double free"),
        "{msg}"
    );
    pool.set_quarantine(0);
    pool.maintain();
    assert_drained(&pool);
}
