//! AddressSanitizer catches reads of memory the crate took back.
//!
//! Only built with `--cfg nebula_asan` (see README: "Sanitizers"). Each case re-runs this
//! test binary as a child process that reads memory after giving it back; the parent
//! asserts that the child died with an AddressSanitizer report. Without the poisoning the
//! reads would succeed silently (the memory is still mapped), so these tests fail if it
//! is missing.
#![cfg(nebula_asan)]

use std::alloc::Layout;
use std::hint::black_box;
use std::process::Command;

use nebula_memory::Arena;
use nebula_memory::{FrameArena, MemoryArena, MemoryPool, with_scratch};

const CASE_VAR: &str = "NEBULA_ASAN_CASE";

/// Reads one byte through a raw pointer the optimiser cannot see through.
fn read(p: *const u8) -> u8 {
    // SAFETY: deliberately not: the point is that ASan reports this read.
    unsafe { black_box(p).read_volatile() }
}

/// The child's body: run the case named in the environment (a no-op in the parent).
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    let pool = MemoryPool::new("asan", 8 << 20).unwrap();
    let stale: *const u8 = match case.as_str() {
        "reset" => {
            let mut arena = MemoryArena::new(&pool);
            let p = arena.alloc_slice(64, 7u8).as_ptr();
            arena.reset();
            let _ = read(p);
            return;
        }
        "rewind" => {
            let arena = MemoryArena::new(&pool);
            arena.alloc_val(1u64);
            let mark = arena.checkpoint();
            let p = arena.alloc_slice(64, 7u8).as_ptr();
            // SAFETY: the slice is dead by contract; the read below breaks it on purpose.
            unsafe { arena.rewind(mark) };
            p
        }
        "pop" => {
            let arena = MemoryArena::new(&pool);
            let layout = Layout::new::<[u8; 64]>();
            let p = arena.alloc(layout);
            // SAFETY: `p` is the top and is given up (then read on purpose).
            unsafe { assert!(arena.pop(p, layout)) };
            p.as_ptr()
        }
        "free_block" => {
            let block = pool.allocate_block(4096).unwrap();
            let data = nebula_memory::MemoryBlock::data_of(block).as_ptr();
            // SAFETY: from this pool; the read below is the bug under test.
            unsafe { pool.free_block(block) };
            data
        }
        "frame_reset" => {
            let arena = FrameArena::new(4096);
            let p = arena.alloc_slice(16, 1u32).unwrap().as_ptr().cast::<u8>();
            // SAFETY: the slice is dead by contract.
            unsafe { arena.reset() };
            p
        }
        "scratch" => with_scratch(|s| s.alloc_slice(64, 3u8).as_ptr()),
        "unused_tail" => {
            let arena = MemoryArena::new(&pool);
            let p = arena.alloc_slice(8, 0u8).as_ptr();
            // One past the allocation: inside the block, never handed out.
            p.wrapping_add(8)
        }
        other => panic!("unknown case {other}"),
    };
    let _ = read(stale);
}

fn expect_report(case: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CASE_VAR, case)
        .output()
        .expect("re-run the test binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "case {case}: the stale read went unnoticed"
    );
    assert!(
        stderr.contains("ERROR: AddressSanitizer: use-after-poison"),
        "case {case}: no AddressSanitizer report:\n{stderr}"
    );
}

#[test]
fn read_after_arena_reset_is_reported() {
    expect_report("reset");
}

#[test]
fn read_after_rewind_is_reported() {
    expect_report("rewind");
}

#[test]
fn read_after_pop_is_reported() {
    expect_report("pop");
}

#[test]
fn read_after_free_block_is_reported() {
    expect_report("free_block");
}

#[test]
fn read_after_frame_arena_reset_is_reported() {
    expect_report("frame_reset");
}

#[test]
fn read_after_with_scratch_is_reported() {
    expect_report("scratch");
}

#[test]
fn read_of_a_block_tail_never_handed_out_is_reported() {
    expect_report("unused_tail");
}
