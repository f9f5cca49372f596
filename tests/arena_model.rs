//! Model-based property test of `MemoryArena`: random programs of alloc / pop / realloc /
//! checkpoint / rewind / reset run against a reference model that knows every live
//! allocation, its address, size, alignment and the bytes stamped into it.
//!
//! The arena's configuration varies per case (`first_block` from 256 B to 64 KiB, a
//! `max_block` cap or not, `trim_after_resets` 0..=3) and requests go up to three times the
//! first block, so block growth, oversize requests, spare reuse after rewind and the reset
//! policy all run (bumpalo #330: tests that always size the capacity to the data never
//! exercise growth).
//!
//! The model tracks the arena's bump position exactly (`pos`), so it knows which live
//! allocation is the top and predicts every `pop` result and every in-place `realloc`.
//! A checkpoint stays in the model while it is provably at or before the current position:
//! popping or shrinking the top drops the checkpoints taken after the top was placed,
//! rewinding drops the checkpoints taken after the target, reset drops them all.
//!
//! Checked after every step:
//! - every live allocation is aligned, disjoint from every other live allocation, and its
//!   stamp is intact (a per-allocation pattern over all its bytes);
//! - `realloc` keeps the first `min(old, new)` bytes and the alignment; shrinking and
//!   growing the top are in place when they fit, a non-top grow always moves;
//! - `pop` of the top returns `true`; `pop` of any other live allocation, of the top with
//!   the wrong size or of a foreign pointer returns `false` and changes nothing;
//! - `bytes_used() >= ` the sum of the live sizes; `high_watermark() >= bytes_used()` and
//!   never falls; `block_count() >= 1` once a block was taken; pool `in_use ==
//!   bytes_held()` and pool `blocks_in_use == block_count()`;
//! - after `reset`: `bytes_used() == 0`, `block_count() == 1`;
//! - in debug builds, fresh bytes read 0xCD and popped bytes 0xDD.

use std::alloc::Layout;
use std::sync::LazyLock;

use nebula_memory::{ArenaConfig, Checkpoint, MemoryArena, MemoryPool};
use proptest::prelude::*;

mod common;
use common::assert_drained;

/// Largest first block; 16 KiB under Miri (fresh bytes are checked one by one).
const MAX_FIRST: usize = if cfg!(miri) { 16 * 1024 } else { 64 * 1024 };
/// Longest program; 100 steps under Miri.
const MAX_OPS: usize = if cfg!(miri) { 100 } else { 200 };
const MAX_SIZE: usize = 3 * MAX_FIRST;
/// Reserved address space only; committed as blocks are handed out.
const POOL_CAPACITY: usize = 512 << 20;
const MAX_CHECKPOINTS: usize = 32;

/// Stamp source: allocation `id` holds `PATTERN[offset(id)..offset(id) + size]`.
static PATTERN: LazyLock<Vec<u8>> = LazyLock::new(|| {
    (0..MAX_SIZE + 256)
        .map(|k| ((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
});

#[derive(Clone, Debug)]
struct SizeSpec {
    class: u8,
    raw: u32,
}

impl SizeSpec {
    fn resolve(&self, first_block: usize) -> usize {
        let raw = self.raw as usize;
        match self.class {
            0 => raw % 65,
            1 => raw % (first_block / 2 + 1),
            2 => raw % (first_block + 1),
            _ => raw % (3 * first_block + 1),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Size and log2 of the alignment (0..=12).
    Alloc(SizeSpec, u8),
    PopTop,
    /// Pops live allocation `n % candidates` among the non-top ones (or a foreign pointer).
    PopOther(usize),
    /// Resizes the top (if `top` and there is one) or live allocation `pick % live`.
    Realloc {
        top: bool,
        pick: usize,
        size: SizeSpec,
    },
    Checkpoint,
    /// Rewinds to saved checkpoint `n % saved`.
    Rewind(usize),
    Reset,
}

fn size_spec() -> impl Strategy<Value = SizeSpec> {
    let class = prop_oneof![3 => Just(0u8), 3 => Just(1u8), 2 => Just(2u8), 1 => Just(3u8)];
    (class, any::<u32>()).prop_map(|(class, raw)| SizeSpec { class, raw })
}

fn align_log2() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0u8..=4, 1 => 5u8..=12]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (size_spec(), align_log2()).prop_map(|(s, a)| Op::Alloc(s, a)),
        3 => Just(Op::PopTop),
        2 => any::<usize>().prop_map(Op::PopOther),
        4 => (any::<bool>(), any::<usize>(), size_spec())
            .prop_map(|(top, pick, size)| Op::Realloc { top, pick, size }),
        2 => Just(Op::Checkpoint),
        2 => any::<usize>().prop_map(Op::Rewind),
        1 => Just(Op::Reset),
    ]
}

fn config() -> impl Strategy<Value = ArenaConfig> {
    let first = prop_oneof![256usize..=4096, 4096usize..=MAX_FIRST];
    let max = prop_oneof![Just(0usize), 1usize..=8];
    (first, max, 0u32..=3).prop_map(|(first, max, trim)| {
        let mut c = ArenaConfig::default()
            .first_block(first)
            .trim_after_resets(trim);
        if max > 0 {
            c = c.max_block(first * max);
        }
        c
    })
}

struct Live {
    ptr: *mut u8,
    size: usize,
    align: usize,
    /// Offset of this allocation's stamp in `PATTERN`.
    off: usize,
    /// When the allocation got its current address (alloc, or a realloc that moved it).
    born: u64,
    /// When its current bytes were last handed out (alloc or any top realloc).
    time: u64,
}

impl Live {
    fn end(&self) -> usize {
        self.ptr as usize + self.size
    }

    fn expected(&self) -> &'static [u8] {
        &PATTERN[self.off..self.off + self.size]
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the allocation is live in the arena (the model says so) with `size`
        // bytes; zero-sized ones have an aligned non-null address.
        unsafe { std::slice::from_raw_parts(self.ptr, self.size) }
    }

    fn verify(&self, what: &str) {
        assert!(
            self.bytes() == self.expected(),
            "{what}: allocation at {:p} ({} B, align {}) was overwritten",
            self.ptr,
            self.size,
            self.align
        );
    }
}

struct Saved {
    cp: Checkpoint,
    time: u64,
    /// The model's bump position when it was taken (`None`: the arena had no block).
    pos: Option<usize>,
}

struct Model<'a, 'p> {
    arena: &'a mut MemoryArena<'p>,
    pool: &'p MemoryPool,
    first_block: usize,
    live: Vec<Live>,
    saved: Vec<Saved>,
    /// The arena's bump pointer, when the model knows it (after an allocation).
    pos: Option<usize>,
    clock: u64,
    next_id: usize,
    had_block: bool,
    last_high: usize,
}

fn is_poisoned(ptr: *const u8, len: usize, byte: u8) -> bool {
    // SAFETY: callers pass bytes inside a block the arena still holds (just handed out, or
    // just popped from the current block), so they are mapped; nobody else writes them.
    let s = unsafe { std::slice::from_raw_parts(ptr, len) };
    s.iter().all(|&b| b == byte)
}

impl Model<'_, '_> {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn top(&self) -> Option<usize> {
        let pos = self.pos?;
        // The newest one if several end at `pos` (zero-sized allocations can).
        (0..self.live.len())
            .filter(|&i| self.live[i].end() == pos)
            .max_by_key(|&i| self.live[i].time)
    }

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    fn alloc(&mut self, size: usize, align: usize) {
        let p = self
            .arena
            .try_alloc(Self::layout(size, align))
            .unwrap_or_else(|e| panic!("alloc({size}, {align}) failed: {e}"))
            .as_ptr();
        assert_eq!(
            p as usize % align,
            0,
            "alloc({size}, {align}) misaligned: {p:p}"
        );
        if cfg!(all(debug_assertions, not(nebula_asan))) {
            assert!(is_poisoned(p, size, 0xCD), "fresh bytes are not 0xCD");
        }
        if self.arena.block_count() > 0 {
            self.had_block = true;
        }
        // A zero-sized request that missed the current block is served from the address
        // `align` without moving the bump pointer; on a block-less arena there is no
        // position at all.
        let moved = size > 0 || (p as usize != align && self.arena.block_count() > 0);
        if moved {
            self.pos = Some(p as usize + size);
        }
        let id = self.next_id;
        self.next_id += 1;
        let off = id * 97 % 256;
        // SAFETY: `p` is a fresh allocation of `size` bytes; PATTERN has room from `off`.
        unsafe { std::ptr::copy_nonoverlapping(PATTERN.as_ptr().add(off), p, size) };
        let t = self.tick();
        self.live.push(Live {
            ptr: p,
            size,
            align,
            off,
            born: t,
            time: t,
        });
    }

    /// Drops the checkpoints taken after `t`.
    fn forget_after(&mut self, t: u64) {
        self.saved.retain(|s| s.time <= t);
    }

    fn pop_top(&mut self) {
        let Some(i) = self.top() else { return };
        let (ptr, size, align, born) = {
            let l = &self.live[i];
            (l.ptr, l.size, l.align, l.born)
        };
        self.live[i].verify("pop");
        let used = self.arena.bytes_used();
        // SAFETY: a wrong size is never the top, so this is a no-op by contract.
        let wrong = unsafe {
            self.arena.pop(
                std::ptr::NonNull::new(ptr).unwrap(),
                Self::layout(size + 1, align),
            )
        };
        assert!(!wrong, "pop with a wrong size succeeded");
        assert_eq!(self.arena.bytes_used(), used);
        // SAFETY: the model drops the allocation at once; it is not used again.
        let popped = unsafe {
            self.arena.pop(
                std::ptr::NonNull::new(ptr).unwrap(),
                Self::layout(size, align),
            )
        };
        assert!(popped, "pop of the top ({ptr:p}, {size} B) returned false");
        assert_eq!(
            self.arena.bytes_used(),
            used - size,
            "pop gave back the wrong amount"
        );
        if cfg!(all(debug_assertions, not(nebula_asan))) {
            assert!(is_poisoned(ptr, size, 0xDD), "popped bytes are not 0xDD");
        }
        self.live.swap_remove(i);
        self.pos = Some(ptr as usize);
        self.forget_after(born);
    }

    fn pop_other(&mut self, n: usize) {
        let candidates: Vec<usize> = (0..self.live.len())
            .filter(|&i| Some(self.live[i].end()) != self.pos)
            .collect();
        let used = self.arena.bytes_used();
        let blocks = self.arena.block_count();
        let high = self.arena.high_watermark();
        let popped = if candidates.is_empty() {
            let mut foreign = [0u64; 8];
            // SAFETY: a pointer the arena never handed out: a no-op by contract.
            let r = unsafe {
                self.arena.pop(
                    std::ptr::NonNull::from(&mut foreign).cast(),
                    Layout::new::<[u64; 8]>(),
                )
            };
            assert_eq!(foreign, [0; 8]);
            r
        } else {
            let l = &self.live[candidates[n % candidates.len()]];
            // SAFETY: not the top: a no-op by contract, the allocation stays live.
            unsafe {
                self.arena.pop(
                    std::ptr::NonNull::new(l.ptr).unwrap(),
                    Self::layout(l.size, l.align),
                )
            }
        };
        assert!(!popped, "pop of a non-top pointer returned true");
        assert_eq!(self.arena.bytes_used(), used);
        assert_eq!(self.arena.block_count(), blocks);
        assert_eq!(self.arena.high_watermark(), high);
    }

    fn realloc(&mut self, top: bool, pick: usize, new_size: usize) {
        if self.live.is_empty() {
            return;
        }
        let t = self.top();
        let i = match t {
            Some(t) if top => t,
            _ => pick % self.live.len(),
        };
        let is_top = Some(self.live[i].end()) == self.pos;
        let (p, old, align) = (self.live[i].ptr, self.live[i].size, self.live[i].align);
        self.live[i].verify("realloc (before)");
        // SAFETY: `p` is live with this layout; the model uses only the result afterwards.
        let q = unsafe {
            self.arena.realloc(
                std::ptr::NonNull::new(p).unwrap(),
                Self::layout(old, align),
                new_size,
            )
        }
        .unwrap_or_else(|e| panic!("realloc({old} -> {new_size}) failed: {e}"))
        .as_ptr();
        assert_eq!(q as usize % align, 0, "realloc lost the alignment {align}");
        let keep = old.min(new_size);
        let off = self.live[i].off;
        // SAFETY: `q` is live with `new_size >= keep` bytes.
        let kept = unsafe { std::slice::from_raw_parts(q, keep) };
        assert!(
            kept == &PATTERN[off..off + keep],
            "realloc {old} -> {new_size} did not keep the first {keep} bytes"
        );
        if new_size > old && cfg!(all(debug_assertions, not(nebula_asan))) {
            // SAFETY: the grown tail is part of the live result.
            let tail = unsafe { q.add(old) };
            assert!(
                is_poisoned(tail, new_size - old, 0xCD),
                "grown tail not 0xCD"
            );
        }
        if new_size <= old {
            assert_eq!(q, p, "a shrink ({old} -> {new_size}) moved");
        } else if !is_top {
            assert_ne!(q, p, "a non-top allocation grew in place");
        }
        let now = self.tick();
        let born = self.live[i].born;
        if q != p {
            if is_top {
                // The old top moved to another block and its bytes were given back: that
                // block's fill fell back to `p`, so checkpoints taken since are gone.
                self.forget_after(born);
            }
            self.pos = Some(q as usize + new_size);
            self.live[i].born = now;
            self.live[i].time = now;
        } else if is_top {
            self.pos = Some(p as usize + new_size);
            self.live[i].time = now;
            if new_size < old {
                // The position fell back inside this allocation.
                self.forget_after(born);
            }
        }
        let l = &mut self.live[i];
        l.ptr = q;
        l.size = new_size;
        // SAFETY: `q` holds `new_size` bytes that only the model uses.
        unsafe {
            std::ptr::copy_nonoverlapping(
                PATTERN.as_ptr().add(off + keep),
                q.add(keep),
                new_size - keep,
            )
        };
    }

    fn checkpoint(&mut self) {
        let cp = self.arena.checkpoint();
        let pos = if self.arena.block_count() > 0 {
            self.pos
        } else {
            None
        };
        let time = self.tick();
        if self.saved.len() == MAX_CHECKPOINTS {
            self.saved.remove(0);
        }
        self.saved.push(Saved { cp, time, pos });
    }

    fn rewind(&mut self, n: usize) {
        if self.saved.is_empty() {
            return;
        }
        let s = &self.saved[n % self.saved.len()];
        let (cp, time, pos) = (s.cp, s.time, s.pos);
        for l in self.live.iter().filter(|l| l.time > time) {
            l.verify("rewind");
        }
        let blocks = self.arena.block_count();
        // SAFETY: the model drops every allocation made (or grown) after the checkpoint.
        unsafe { self.arena.rewind(cp) };
        assert_eq!(
            self.arena.block_count(),
            blocks,
            "rewind must keep blocks cached"
        );
        self.live.retain(|l| l.time <= time);
        self.forget_after(time);
        self.pos = pos;
    }

    fn reset(&mut self) {
        for l in &self.live {
            l.verify("reset");
        }
        self.live.clear();
        self.saved.clear();
        let generation = self.arena.generation();
        self.arena.reset();
        self.pos = None;
        assert_eq!(self.arena.generation(), generation + 1);
        assert_eq!(self.arena.bytes_used(), 0, "bytes_used after reset");
        if self.had_block {
            assert_eq!(self.arena.block_count(), 1, "block_count after reset");
        } else {
            assert_eq!(self.arena.block_count(), 0);
        }
    }

    fn check(&mut self) {
        let mut spans = Vec::with_capacity(self.live.len());
        let mut sum = 0;
        for l in &self.live {
            assert_eq!(l.ptr as usize % l.align, 0);
            l.verify("check");
            sum += l.size;
            if l.size > 0 {
                spans.push((l.ptr as usize, l.end()));
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "live allocations overlap: {:#x}..{:#x} and {:#x}..{:#x}",
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            );
        }
        let used = self.arena.bytes_used();
        assert!(used >= sum, "bytes_used {used} < live bytes {sum}");
        let high = self.arena.high_watermark();
        assert!(high >= used, "high watermark {high} < bytes_used {used}");
        assert!(high >= self.last_high, "high watermark fell");
        self.last_high = high;
        if self.had_block {
            assert!(
                self.arena.block_count() >= 1,
                "the arena lost its last block"
            );
        }
        // Any non-empty request (an alloc or a realloc) takes a block.
        self.had_block |= self.arena.block_count() > 0;
        let stats = self.pool.stats();
        assert_eq!(
            stats.in_use,
            self.arena.bytes_held(),
            "pool in_use != bytes_held"
        );
        assert_eq!(stats.blocks_in_use, self.arena.block_count());
        let s = self.arena.stats();
        assert_eq!(
            (s.bytes_used, s.block_count),
            (used, self.arena.block_count())
        );
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Alloc(size, align) => {
                self.alloc(size.resolve(self.first_block), 1 << align);
            }
            Op::PopTop => self.pop_top(),
            Op::PopOther(n) => self.pop_other(*n),
            Op::Realloc { top, pick, size } => {
                let new = size.resolve(self.first_block);
                self.realloc(*top, *pick, new);
            }
            Op::Checkpoint => self.checkpoint(),
            Op::Rewind(n) => self.rewind(*n),
            Op::Reset => self.reset(),
        }
        self.check();
    }
}

fn run(config: ArenaConfig, ops: &[Op]) {
    let pool = MemoryPool::new("arena-model", POOL_CAPACITY).unwrap();
    {
        let mut arena = MemoryArena::with_config(&pool, config);
        let mut model = Model {
            arena: &mut arena,
            pool: &pool,
            first_block: config.first_block,
            live: Vec::new(),
            saved: Vec::new(),
            pos: None,
            clock: 0,
            next_id: 0,
            had_block: false,
            last_high: 0,
        };
        for op in ops {
            model.step(op);
        }
        // A final reset: everything still live must be intact, then one block is kept.
        model.reset();
        model.check();
    }
    // No blocks left in the pool after the arena was dropped.
    assert_drained(&pool);
}

/// 256 cases (about a second in a debug build); `PROPTEST_CASES=N` runs more.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(miri) { 4 } else { 256 })
}

/// `cases()` cases; under Miri no failure-persistence file.
fn proptest_config() -> ProptestConfig {
    common::proptest_config(cases())
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn arena_matches_model(config in config(), ops in prop::collection::vec(op(), 1..MAX_OPS)) {
        run(config, &ops);
    }
}

/// The model's own sanity: a fixed program that grows across blocks, rewinds into the
/// first block and reuses the spare, pops and reallocs at the top.
#[test]
fn fixed_program_crosses_blocks() {
    let s = |class, raw| SizeSpec { class, raw };
    let ops = vec![
        Op::Alloc(s(0, 40), 3),
        Op::Checkpoint,
        Op::Alloc(s(3, 700), 4),
        Op::Alloc(s(3, 900), 12),
        Op::Realloc {
            top: true,
            pick: 0,
            size: s(3, 1000),
        },
        Op::PopTop,
        Op::Rewind(0),
        Op::Alloc(s(3, 760), 0),
        Op::Realloc {
            top: false,
            pick: 0,
            size: s(2, 200),
        },
        Op::PopOther(0),
        Op::PopTop,
        Op::Reset,
        Op::Alloc(s(0, 0), 12),
        Op::Alloc(s(2, 256), 5),
    ];
    run(ArenaConfig::default().first_block(256), &ops);
}
