//! M1 memory figures that need no arena yet: the process's resident set size (RSS) at each
//! step of a pool's life.
//!
//! 1. at start;
//! 2. after creating the three default global pools (`engine_pool`, `game_pool`,
//!    `scratch_pool`): they only reserve address space, so RSS should barely move;
//! 3. after taking 200 MiB of blocks from `game_pool` and touching every page;
//! 4. after freeing them (the pool decommits once more than its retain limit is free);
//! 5. after `game_pool().trim()` (every free range decommitted).
//!
//! RSS is read from `/proc/self/statm` (Linux); elsewhere it prints "n/a".
//!
//! Run: `cargo run --release --example memory_report`.

use nebula_memory::Arena;
use std::ptr::NonNull;
use std::time::Instant;

use nebula_memory::{
    MemoryArena, MemoryBlock, engine_pool, game_pool, maintain_global_pools, scratch_pool,
};

const MIB: usize = 1 << 20;
/// Total usable bytes taken from the game pool in step 3.
const TOTAL: usize = 200 * MIB;
/// Usable bytes per block.
const BLOCK: usize = MIB;

/// Resident set size in bytes, from `/proc/self/statm` (second field, in pages).
#[cfg(target_os = "linux")]
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * if page > 0 { page as usize } else { 4096 })
}

#[cfg(not(target_os = "linux"))]
fn rss() -> Option<usize> {
    None
}

fn mib(bytes: Option<usize>) -> String {
    bytes.map_or_else(
        || "n/a".to_owned(),
        |b| format!("{:.1}", b as f64 / MIB as f64),
    )
}

fn signed_mib(now: Option<usize>, then: Option<usize>) -> String {
    match (now, then) {
        (Some(a), Some(b)) => format!("{:+.1}", (a as f64 - b as f64) / MIB as f64),
        _ => "n/a".to_owned(),
    }
}

struct Row {
    step: &'static str,
    rss: Option<usize>,
    game_in_use: usize,
}

fn main() {
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut record = |step: &'static str, game_in_use: usize| {
        rows.push(Row {
            step,
            rss: rss(),
            game_in_use,
        });
    };

    record("start", 0);

    let pools = [engine_pool(), game_pool(), scratch_pool()];
    let game = pools[1];
    record("3 default pools created", game.stats().in_use);

    let mut blocks: Vec<NonNull<MemoryBlock>> = Vec::with_capacity(TOTAL / BLOCK);
    for _ in 0..TOTAL / BLOCK {
        let block = game
            .allocate_block(BLOCK)
            .unwrap_or_else(|e| panic!("memory_report: game pool refused a block: {e}"));
        let data = MemoryBlock::data_of(block).as_ptr();
        // SAFETY: the block's usable area holds at least BLOCK bytes and is ours.
        unsafe { data.write_bytes(0xAB, BLOCK) };
        blocks.push(block);
    }
    record("200 MiB of blocks touched", game.stats().in_use);

    for block in blocks.drain(..) {
        // SAFETY: each block came from the game pool above and is not used afterwards.
        unsafe { game.free_block(block) };
    }
    record("blocks freed", game.stats().in_use);

    // The pool keeps freed pages for its purge delay (500 ms), so a free-then-reallocate
    // burst does not fault them in again; the per-frame `maintain` call then gives them
    // back down to the retain limit.
    std::thread::sleep(std::time::Duration::from_millis(600));
    maintain_global_pools();
    record("after 600 ms + maintain()", game.stats().in_use);

    let trimmed = game.trim();
    record("game_pool().trim()", game.stats().in_use);

    // M1's arena case: a 200 MiB arena, touched, reset and dropped.
    {
        let mut arena = MemoryArena::new(game);
        for _ in 0..200 {
            arena.alloc_slice(MIB, 0xABu8);
        }
        record("200 MiB arena touched", game.stats().in_use);
        arena.reset();
        record("arena reset (keeps 1 block)", game.stats().in_use);
    }
    record("arena dropped", game.stats().in_use);
    std::thread::sleep(std::time::Duration::from_millis(600));
    maintain_global_pools();
    record("after 600 ms + maintain()", game.stats().in_use);

    println!("M1 memory report (RSS from /proc/self/statm, MiB)");
    println!(
        "{:<28} {:>9} {:>12} {:>13}",
        "step", "RSS MiB", "vs start", "game in_use"
    );
    let start = rows[0].rss;
    for r in &rows {
        println!(
            "{:<28} {:>9} {:>12} {:>13}",
            r.step,
            mib(r.rss),
            signed_mib(r.rss, start),
            mib(Some(r.game_in_use))
        );
    }
    for pool in pools {
        println!("{:<8} {}", pool.name(), pool.stats());
    }
    println!(
        "trim() decommitted {trimmed} free range(s); elapsed {:.0?}",
        t0.elapsed()
    );
}
