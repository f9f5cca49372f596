//! Physical memory: creating a pool costs almost no RSS, and memory freed after a peak goes
//! back to the OS (down to the retain limit on its own once the peak's recall has passed,
//! all of it after `trim()`), while a peak that recurs keeps its pages.
//!
//! RSS is process-wide and the tests of one binary run on parallel threads, so every
//! measurement lives in the single `#[test]` below. Linux only (`/proc/self/statm`).
//!
//! `cargo test --release --test pool_rss -- --nocapture` prints the figures.
// Under AddressSanitizer RSS also counts shadow memory, so the figures mean nothing there;
// Miri has no /proc (isolation) and no OS pages to measure (its regions are `std::alloc`).
#![cfg(all(target_os = "linux", not(nebula_asan), not(miri)))]

use std::ptr::NonNull;
use std::time::Duration;

use nebula_memory::{MemoryArena, MemoryBlock, MemoryPool};

mod common;
use common::assert_drained;

const MIB: usize = 1 << 20;
/// Allowance for unrelated RSS movement (the test harness, the allocator, page tables of
/// the statm read) and for the partial pages at the edges of free ranges.
const SLACK: usize = 4 * MIB;
/// Bytes handed out at the peak.
const PEAK: usize = 200 * MIB;
/// The pool the peak is allocated from.
const CAPACITY: usize = 256 * MIB;
/// The documented default retain limit (`MemoryPool::set_retain_limit`): capacity / 64, at
/// most 4 MiB.
const DEFAULT_RETAIN: usize = if CAPACITY / 64 < 4 * MIB {
    CAPACITY / 64
} else {
    4 * MIB
};
/// The documented default purge delay (`MemoryPool::set_purge_delay`).
const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);

/// Under valgrind (`scripts/valgrind.sh` sets `NEBULA_UNDER_VALGRIND=1`) `/proc/self/statm`
/// counts valgrind's own memory (shadow memory, its replacement heap and the freed-block
/// queue of that heap), so RSS figures say nothing about the pool there.
fn under_valgrind() -> bool {
    std::env::var_os("NEBULA_UNDER_VALGRIND").is_some_and(|v| v == "1")
}

/// An assertion about RSS: skipped under valgrind (see [`under_valgrind`]), where the rest
/// of the test (the pool's own bookkeeping, `maintain` and `trim` results) is still checked.
macro_rules! assert_rss {
    ($($arg:tt)*) => {
        if !under_valgrind() {
            assert!($($arg)*);
        }
    };
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

fn mib(bytes: isize) -> String {
    format!("{:+.1} MiB", bytes as f64 / MIB as f64)
}

/// RSS relative to `baseline`, in bytes (negative when below).
fn above(baseline: usize) -> isize {
    rss() as isize - baseline as isize
}

/// Hands out `PEAK` bytes in blocks of 64 KiB..=2 MiB and touches every page of them.
fn allocate_peak(pool: &MemoryPool) -> Vec<NonNull<MemoryBlock>> {
    let mut blocks = Vec::new();
    let mut total = 0;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    while total < PEAK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = ((64 << 10) << (x % 6)).min(PEAK - total).max(4096);
        let block = pool.allocate_block(n).unwrap();
        // SAFETY: a live block of `pool`.
        let cap = unsafe { block.as_ref() }.capacity();
        let data = MemoryBlock::data_of(block).as_ptr();
        for off in (0..cap).step_by(4096).chain([cap - 1]) {
            // SAFETY: inside the block's usable bytes, which we own.
            unsafe { data.add(off).write_volatile(0xA5) };
        }
        total += cap + 32;
        blocks.push(block);
    }
    blocks
}

/// Frees `blocks` in a scrambled order (free ranges merge in no particular order).
fn free_all(pool: &MemoryPool, mut blocks: Vec<NonNull<MemoryBlock>>) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while !blocks.is_empty() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = blocks.swap_remove((x % blocks.len() as u64) as usize);
        // SAFETY: a live block of `pool`, freed once, not used afterwards.
        unsafe { pool.free_block(b) };
    }
    assert_drained(pool);
}

#[test]
fn rss_follows_use() {
    // (a) Creating the three default-sized pools reserves address space only.
    let before = rss();
    let engine = MemoryPool::new("engine-like", 256 * MIB).unwrap();
    let game = MemoryPool::new("game-like", 512 * MIB).unwrap();
    let scratch = MemoryPool::new("scratch-like", 64 * MIB).unwrap();
    let created = above(before);
    println!("creating pools of 256 + 512 + 64 MiB: RSS {}", mib(created));
    assert_rss!(
        created < SLACK as isize,
        "creating pools cost {}",
        mib(created)
    );
    drop((game, scratch));

    // (b) A 200 MiB peak, freed with the default retain limit, no purge delay and no recall:
    // releases give pages back once the pressure passes the limit, so at most about the
    // limit stays.
    let pool = MemoryPool::new("rss", CAPACITY).unwrap();
    pool.set_purge_delay(Duration::ZERO);
    pool.set_recall_window(Duration::ZERO);
    let baseline = rss();
    let blocks = allocate_peak(&pool);
    let peak = above(baseline);
    println!(
        "peak of {} MiB handed out and touched: RSS {}",
        PEAK / MIB,
        mib(peak)
    );
    assert_rss!(
        peak >= (PEAK - SLACK) as isize,
        "touching {PEAK} B raised RSS by only {}",
        mib(peak)
    );
    free_all(&pool, blocks);
    let freed = above(baseline);
    println!(
        "all freed (retain limit {} MiB, no purge delay): RSS {}",
        DEFAULT_RETAIN / MIB,
        mib(freed)
    );
    assert_rss!(
        freed <= (DEFAULT_RETAIN + SLACK) as isize,
        "after freeing: {}",
        mib(freed)
    );
    pool.trim();
    let trimmed = above(baseline);
    println!("after trim(): RSS {}", mib(trimmed));
    assert_rss!(trimmed <= SLACK as isize, "after trim: {}", mib(trimmed));

    // (c) The same with the defaults, a first peak (an arena that touched 200 MiB, reset
    // and dropped): nothing tells it will come back, so its pages go back after the purge
    // delay, at the first `maintain()` (the per-frame call) past it.
    let pool = engine;
    let baseline = rss();
    {
        let mut arena = MemoryArena::new(&pool);
        let layout = std::alloc::Layout::from_size_align(PEAK, 16).unwrap();
        let bytes = arena.try_alloc(layout).unwrap().as_ptr();
        for i in (0..layout.size()).step_by(4096) {
            // SAFETY: inside the allocation, which we hold until the reset.
            unsafe { bytes.add(i).write_volatile(0x5A) };
        }
        assert_rss!(above(baseline) >= (PEAK - SLACK) as isize);
        arena.reset();
    }
    std::thread::sleep(DEFAULT_PURGE_DELAY + Duration::from_millis(100));
    pool.maintain();
    let first = above(baseline);
    println!(
        "a first 200 MiB peak (an arena reset and dropped), default purge delay, one \
         maintain() after it: RSS {}",
        mib(first)
    );
    assert_rss!(
        first <= (DEFAULT_RETAIN + SLACK) as isize,
        "a one-off peak stayed resident past the purge delay: {}",
        mib(first)
    );

    // (c') A peak that recurs every 400 frames (the first of them is (c)'s return) keeps
    // its pages resident between its returns, and faults nothing in again: from the
    // second return on, the RSS after it is what it was after the first.
    let baseline = rss();
    let mut after_first = 0;
    for round in 0..3 {
        let blocks = allocate_peak(&pool);
        let at_peak = above(baseline);
        free_all(&pool, blocks);
        for _ in 0..400 {
            pool.maintain();
        }
        let between = above(baseline);
        println!(
            "recurring peak, return {round}: RSS {} at it, {} 400 frames after",
            mib(at_peak),
            mib(between)
        );
        assert_rss!(
            between >= (PEAK - SLACK) as isize,
            "a recurring peak's pages went back between its returns: {}",
            mib(between)
        );
        if round == 0 {
            after_first = between;
        } else {
            assert_rss!(
                (between - after_first).abs() <= SLACK as isize,
                "return {round} took more pages: {} after it, {} after the first",
                mib(between),
                mib(after_first)
            );
        }
    }
    // With no further return they go back after the learned window (twice the period:
    // 800 frames), in halves per purge delay (30 frames).
    let mut frames = 0;
    while above(baseline) > (DEFAULT_RETAIN + SLACK) as isize {
        pool.maintain();
        frames += 1;
        assert!(
            frames < 3000,
            "a recurring peak is still resident {frames} frames after its last return"
        );
    }
    println!(
        "the recurring peak given back {frames} frames after its last return: RSS {}",
        mib(above(baseline))
    );
    assert_rss!(
        frames > 400,
        "given back within the learned window, {frames} frames after"
    );
    pool.trim();

    // (d) Retain limit "never": freed memory stays resident until `trim()`.
    pool.set_retain_limit(usize::MAX);
    pool.set_purge_delay(Duration::ZERO);
    let baseline = rss();
    let blocks = allocate_peak(&pool);
    free_all(&pool, blocks);
    let kept = above(baseline);
    println!("all freed, retain limit usize::MAX: RSS {}", mib(kept));
    assert_rss!(
        kept >= (PEAK - SLACK) as isize,
        "pages were given back: {}",
        mib(kept)
    );
    assert_eq!(pool.maintain(), 0);
    assert_eq!(pool.trim(), 1, "one dirty free range");
    let trimmed = above(baseline);
    println!("after trim(): RSS {}", mib(trimmed));
    assert_rss!(trimmed <= SLACK as isize, "after trim: {}", mib(trimmed));
}
