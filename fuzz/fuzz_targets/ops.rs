//! Fuzz target: random programs of pool and arena operations, checked against a model.
//!
//! Every live pool block and arena allocation is stamped with a pattern and checked when
//! it is released and after every reset, rewind, pop and realloc; alignment, bounds and
//! non-overlap are checked on every allocation. Run with
//! `cargo +nightly fuzz run ops -- -max_total_time=600` from the repository root.
#![no_main]

use std::alloc::Layout;
use std::ptr::NonNull;

use libfuzzer_sys::fuzz_target;
use nebula_memory::{ArenaConfig, Checkpoint, MemoryArena, MemoryBlock, MemoryPool, PoolError};

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
}

#[derive(Clone, Copy)]
struct Alloc {
    ptr: *mut u8,
    size: usize,
    stamp: u8,
    /// Allocation order: rewinding to a mark taken at sequence `k` kills every allocation
    /// with `seq >= k`.
    seq: usize,
}

fn fill(a: &Alloc) {
    // SAFETY: a live allocation of `size` bytes.
    unsafe { a.ptr.write_bytes(a.stamp, a.size) };
}

fn check(a: &Alloc) {
    // SAFETY: a live allocation of `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(a.ptr, a.size) };
    assert!(bytes.iter().all(|&b| b == a.stamp), "allocation contents changed");
}

fn no_overlap(live: &[Alloc], p: *mut u8, size: usize) {
    let (s, e) = (p as usize, p as usize + size);
    for a in live {
        let (as_, ae) = (a.ptr as usize, a.ptr as usize + a.size);
        assert!(size == 0 || a.size == 0 || e <= as_ || ae <= s, "overlap");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let Some(cap_sel) = input.u8() else { return };
    let pool = MemoryPool::new("fuzz", (64 << 10) << (cap_sel % 6)).unwrap();
    let first = 256usize << (input.u8().unwrap_or(0) % 8);
    let fallback = input.u8().unwrap_or(0) % 4 == 0;
    let mut arena = MemoryArena::with_config(
        &pool,
        ArenaConfig::default().first_block(first).heap_fallback(fallback).trim_after_resets(3),
    );
    let mut blocks: Vec<(NonNull<MemoryBlock>, usize, u8)> = Vec::new();
    let mut live: Vec<Alloc> = Vec::new();
    let mut marks: Vec<(Checkpoint, usize)> = Vec::new();
    let mut seq = 0usize;
    let mut stamp = 0u8;

    while let Some(op) = input.u8() {
        stamp = stamp.wrapping_add(1);
        match op % 9 {
            0 => {
                // Pool block.
                let size = input.u16().unwrap_or(0) as usize * 16;
                match pool.allocate_block(size) {
                    Ok(b) => {
                        // SAFETY: a live block.
                        let hdr = unsafe { b.as_ref() };
                        assert!(hdr.capacity() >= size);
                        let data = MemoryBlock::data_of(b).as_ptr();
                        assert_eq!(data as usize % 16, 0);
                        // SAFETY: the block's data is ours.
                        unsafe { data.write_bytes(stamp, size) };
                        blocks.push((b, size, stamp));
                    }
                    Err(PoolError::ZeroSize { .. }) => assert_eq!(size, 0),
                    Err(PoolError::Exhausted { largest_free, .. }) => assert!(largest_free < size),
                    Err(PoolError::TooLarge { .. }) => assert!(size > pool.stats().capacity - 32),
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            1 => {
                if blocks.is_empty() {
                    continue;
                }
                let i = input.u8().unwrap_or(0) as usize % blocks.len();
                let (b, size, st) = blocks.swap_remove(i);
                let data = MemoryBlock::data_of(b).as_ptr();
                // SAFETY: live block data.
                let bytes = unsafe { std::slice::from_raw_parts(data, size) };
                assert!(bytes.iter().all(|&x| x == st), "block contents changed");
                // SAFETY: from this pool, freed once.
                unsafe { pool.free_block(b) };
            }
            2 => {
                let size = input.u16().unwrap_or(0) as usize % (3 * first + 64);
                let align = 1usize << (input.u8().unwrap_or(0) % 13);
                let layout = Layout::from_size_align(size, align).unwrap();
                if let Ok(p) = arena.try_alloc(layout) {
                    let p = p.as_ptr();
                    assert_eq!(p as usize % align, 0);
                    no_overlap(&live, p, size);
                    let a = Alloc { ptr: p, size, stamp, seq };
                    fill(&a);
                    live.push(a);
                    seq += 1;
                }
            }
            3 => {
                // Pop: the top succeeds only if it is the newest; anything else is a no-op.
                if let Some(i) = input.u8().map(|b| b as usize).filter(|_| !live.is_empty()) {
                    let i = i % live.len();
                    let a = live[i];
                    let layout = Layout::from_size_align(a.size, 1).unwrap();
                    // SAFETY: if popped, the model forgets it.
                    let popped = unsafe { arena.pop(NonNull::new(a.ptr).unwrap(), layout) };
                    if popped {
                        // Marks taken after `a` are now ahead of the position; they stay, and
                        // rewinding to one must change nothing (nothing after it is alive).
                        live.remove(i);
                    }
                }
            }
            4 => {
                if live.is_empty() {
                    continue;
                }
                let i = input.u8().unwrap_or(0) as usize % live.len();
                let new_size = input.u16().unwrap_or(0) as usize % (2 * first + 64);
                let a = live[i];
                let old = Layout::from_size_align(a.size, 1).unwrap();
                // SAFETY: `a` is live with `old`; the model switches to the result.
                if let Ok(q) = unsafe { arena.realloc(NonNull::new(a.ptr).unwrap(), old, new_size) } {
                    let keep = a.size.min(new_size);
                    // SAFETY: the first `keep` bytes were preserved.
                    let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr(), keep) };
                    assert!(bytes.iter().all(|&x| x == a.stamp), "realloc lost bytes");
                    live.remove(i);
                    no_overlap(&live, q.as_ptr(), new_size);
                    // The result counts as new: a rewind to any mark taken after `a` kills it
                    // (the position may now be above or below such a mark; either is legal).
                    let b = Alloc { ptr: q.as_ptr(), size: new_size, stamp, seq };
                    seq += 1;
                    fill(&b);
                    live.push(b);
                }
            }
            5 => marks.push((arena.checkpoint(), seq)),
            6 => {
                if let Some((mark, at)) = marks.pop() {
                    // SAFETY: the model drops everything made after the mark.
                    unsafe { arena.rewind(mark) };
                    live.retain(|a| a.seq < at);
                    // Whatever was below the mark is intact (also when the mark was ahead).
                    for a in &live {
                        check(a);
                    }
                }
            }
            7 => {
                for a in &live {
                    check(a);
                }
                arena.reset();
                live.clear();
                marks.clear();
                assert_eq!(arena.bytes_used(), 0);
                assert!(arena.block_count() <= 1);
            }
            _ => {
                for a in &live {
                    check(a);
                }
            }
        }
        let s = pool.stats();
        assert_eq!(s.in_use + s.free, s.capacity);
    }
    for a in &live {
        check(a);
    }
    drop(arena);
    for (b, _, _) in blocks {
        // SAFETY: live blocks of this pool.
        unsafe { pool.free_block(b) };
    }
    let s = pool.stats();
    assert_eq!((s.in_use, s.blocks_in_use, s.free_ranges), (0, 0, 1));
});
