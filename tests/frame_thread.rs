//! `FrameArena` (the fixed-capacity frame arena API, on a scratch-pool block) and the
//! per-thread frame arena (`thread_arena_alloc` / `thread_arena_reset` /
//! `thread_arena_stats`).
//!
//! Every test here counts blocks of the global scratch pool, so they are serialised by one
//! lock, and none of them gives the test-harness thread itself a thread arena (its block
//! would come back only when the harness thread exits, after the lock is released): thread
//! arenas are made on spawned threads that are joined while the lock is held.

use std::alloc::Layout;
use std::sync::{Mutex, MutexGuard};

use nebula_memory::{
    FrameArena, MemoryPool, PoolError, scratch_pool, set_thread_arena_capacity, thread_arena_alloc,
    thread_arena_reset, thread_arena_stats,
};

mod common;
use common::{Barrier, assert_drained, panic_message};

static SCRATCH: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner())
}

const THREAD_CAPACITY: usize = 64 * 1024;

fn blocks_in_use() -> usize {
    scratch_pool().stats().blocks_in_use
}

/// A tiny deterministic generator for the alignment program.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

#[test]
fn capacity_is_exactly_usable() {
    let _serial = serial();
    let before = blocks_in_use();
    for capacity in [1, 15, 16, 17, 100, 1000, 4095, 4096, 65_537] {
        let arena = FrameArena::new(capacity);
        assert_eq!(arena.capacity(), capacity);
        assert_eq!(arena.bytes_remaining(), capacity);
        assert_eq!(blocks_in_use(), before + 1);
        let p = arena
            .alloc(Layout::from_size_align(capacity, 1).unwrap())
            .expect("the whole capacity is usable");
        // SAFETY: `capacity` fresh bytes.
        unsafe { p.as_ptr().write_bytes(0x5A, capacity) };
        assert_eq!((arena.bytes_used(), arena.bytes_remaining()), (capacity, 0));
        assert!(
            arena
                .alloc(Layout::from_size_align(1, 1).unwrap())
                .is_none()
        );
        assert!(
            arena
                .alloc(Layout::from_size_align(0, 1).unwrap())
                .is_some()
        );
        // SAFETY: nothing allocated is used again.
        unsafe { arena.reset() };
        assert_eq!(arena.bytes_remaining(), capacity);
        // Capacity + 1 never fits.
        assert!(
            arena
                .alloc(Layout::from_size_align(capacity + 1, 1).unwrap())
                .is_none()
        );
        assert_eq!(arena.bytes_used(), 0);
    }
    assert_eq!(
        blocks_in_use(),
        before,
        "FrameArena::drop gives its block back"
    );
}

#[test]
fn alignments_are_honoured_by_address() {
    let _serial = serial();
    for align in (5..=12).map(|s| 1usize << s) {
        let arena = FrameArena::new(3 * 4096);
        arena.alloc(Layout::from_size_align(1, 1).unwrap()).unwrap();
        let p = arena
            .alloc(Layout::from_size_align(8, align).unwrap())
            .unwrap();
        assert_eq!(p.as_ptr() as usize % align, 0, "align {align}");
        let v = arena.alloc_val(Page([3; 16])).unwrap();
        assert_eq!(v as *mut Page as usize % 4096, 0);
        assert_eq!(v.0[15], 3);
    }

    // A random program against a model of the address arithmetic: an allocation fits
    // exactly when its padding (from the address, not the offset) plus its size does.
    let mut rng = Lcg(7);
    for capacity in [64usize, 1000, 5000, 9000, 20_000] {
        let arena = FrameArena::new(capacity);
        let base = arena
            .alloc(Layout::from_size_align(0, 1).unwrap())
            .unwrap()
            .as_ptr() as usize;
        let mut offset = 0usize;
        for _ in 0..300 {
            let align = 1usize << (rng.next() % 13);
            let size = (rng.next() % 700) as usize;
            let addr = base + offset;
            let pad = addr.wrapping_neg() & (align - 1);
            let fits = pad + size <= capacity - offset;
            let got = arena.alloc(Layout::from_size_align(size, align).unwrap());
            assert_eq!(
                got.is_some(),
                fits,
                "cap {capacity} off {offset} {size}/{align}"
            );
            if let Some(p) = got {
                assert_eq!(p.as_ptr() as usize, addr + pad);
                offset += pad + size;
            }
            assert_eq!(arena.bytes_used(), offset);
            assert_eq!(arena.bytes_remaining(), capacity - offset);
            if rng.next().is_multiple_of(50) {
                // SAFETY: nothing allocated is used again.
                unsafe { arena.reset() };
                offset = 0;
            }
        }
    }
}

#[repr(C, align(4096))]
struct Page([u8; 16]);

#[test]
fn typed_helpers_return_none_on_overflow() {
    let _serial = serial();
    let arena = FrameArena::new(64);
    let a = arena.alloc_val(1u64).unwrap();
    let s = arena.alloc_slice(10, 0xBEEFu16).unwrap();
    assert_eq!(s, &[0xBEEF; 10]);
    let used = arena.bytes_used();
    assert_eq!(used, 28);
    assert!(arena.alloc_val([0u8; 64]).is_none());
    assert!(arena.alloc_slice(100, 0u8).is_none());
    assert!(
        arena.alloc_slice(usize::MAX, 0u32).is_none(),
        "size overflow"
    );
    assert!(
        arena.alloc_slice(usize::MAX / 2, 0u16).is_none(),
        "size overflow"
    );
    assert_eq!(arena.bytes_used(), used, "failed requests take nothing");
    let rest = arena.alloc_slice(36, 9u8).unwrap();
    assert_eq!(rest.len(), 36);
    assert!(arena.alloc_val(0u8).is_none());
    assert_eq!(arena.alloc_slice(0, 0u64).map(|s| s.len()), Some(0));
    assert_eq!(*a, 1);
    assert_eq!(s, &[0xBEEF; 10]);
    *a = 2;
    assert_eq!(*a, 2);
}

#[test]
fn high_watermark_survives_reset() {
    let _serial = serial();
    let arena = FrameArena::new(4096);
    arena.alloc_slice(1000, 0u8).unwrap();
    arena.alloc_slice(500, 0u8).unwrap();
    assert_eq!(arena.high_watermark(), 1500);
    // SAFETY: nothing allocated is used again.
    unsafe { arena.reset() };
    assert_eq!(arena.high_watermark(), 1500);
    arena.alloc_slice(200, 0u8).unwrap();
    // SAFETY: as above.
    unsafe { arena.reset() };
    assert_eq!(arena.high_watermark(), 1500);
    arena.alloc_slice(3000, 0u8).unwrap();
    assert_eq!(arena.high_watermark(), 3000, "counted before the reset too");
    // SAFETY: as above.
    unsafe { arena.reset() };
    assert_eq!(arena.high_watermark(), 3000);
    // After reset the first allocation reuses the first address.
    let a = arena.alloc(Layout::new::<u64>()).unwrap();
    // SAFETY: as above.
    unsafe { arena.reset() };
    assert_eq!(arena.alloc(Layout::new::<u64>()).unwrap(), a);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn frame_arena_is_send() {
    let _serial = serial();
    fn assert_send<T: Send>() {}
    assert_send::<FrameArena>();
    let before = blocks_in_use();
    let arena = FrameArena::new(1 << 16);
    let x = arena.alloc_val(5u32).unwrap() as *mut u32 as usize;
    let arena = std::thread::spawn(move || {
        let s = arena.alloc_slice(1000, 7u16).unwrap();
        assert!(s.iter().all(|&v| v == 7));
        arena
    })
    .join()
    .unwrap();
    // SAFETY: allocated above, the arena was not reset since.
    assert_eq!(unsafe { *(x as *const u32) }, 5);
    assert_eq!(arena.bytes_used(), 4 + 2000);
    // Dropped on another thread: the block still goes back.
    std::thread::spawn(move || drop(arena)).join().unwrap();
    assert_eq!(blocks_in_use(), before);
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "catches a panic: panics abort on wasm"
)]
fn frame_arenas_on_private_pools() {
    let _serial = serial();
    // A `'static` pool of our own, given back at the end so that leak checkers (Miri,
    // valgrind) stay quiet.
    let raw = Box::into_raw(Box::new(MemoryPool::new("frames", 1 << 20).unwrap()));
    // SAFETY: `raw` stays live until the `Box::from_raw` below, after the last use of `pool`.
    let pool: &'static MemoryPool = unsafe { &*raw };
    let arena = FrameArena::try_new_in(pool, 1000).unwrap();
    assert_eq!(pool.stats().blocks_in_use, 1);
    assert_eq!(arena.capacity(), 1000);
    assert!(matches!(
        FrameArena::try_new_in(pool, 0),
        Err(PoolError::ZeroSize { pool: "frames" })
    ));
    let big = FrameArena::try_new_in(pool, 900 * 1024).unwrap();
    assert!(matches!(
        FrameArena::try_new_in(pool, 200 * 1024),
        Err(PoolError::Exhausted { pool: "frames", .. })
    ));
    drop(big);
    drop(arena);
    assert_drained(pool);
    // SAFETY: from `Box::into_raw` above; the arenas on `pool` are gone and it is not used
    // again.
    drop(unsafe { Box::from_raw(raw) });
    let msg = panic_message(|| drop(FrameArena::new(0)));
    assert!(msg.contains("> 0"), "{msg}");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn thread_arena_is_made_on_first_use_and_reset() {
    let _serial = serial();
    set_thread_arena_capacity(THREAD_CAPACITY);
    let before = blocks_in_use();
    std::thread::spawn(move || {
        assert_eq!(
            thread_arena_stats(),
            None,
            "no arena before the first allocation"
        );
        // SAFETY: nothing was allocated; resetting a missing arena is a no-op.
        unsafe { thread_arena_reset() };
        assert_eq!(thread_arena_stats(), None);
        let p = thread_arena_alloc(Layout::new::<[u64; 4]>()).unwrap();
        assert_eq!(p.as_ptr() as usize % 8, 0);
        assert_eq!(blocks_in_use(), before + 1);
        let s = thread_arena_stats().unwrap();
        assert_eq!(
            (s.bytes_used, s.high_watermark, s.capacity),
            (32, 32, THREAD_CAPACITY)
        );
        let q = thread_arena_alloc(Layout::from_size_align(64, 64).unwrap()).unwrap();
        assert_eq!(q.as_ptr() as usize % 64, 0);
        // SAFETY: 64 fresh bytes.
        unsafe { q.as_ptr().write_bytes(1, 64) };
        // The whole capacity, then nothing more.
        // SAFETY: nothing allocated is used again.
        unsafe { thread_arena_reset() };
        assert_eq!(thread_arena_stats().unwrap().bytes_used, 0);
        let again = thread_arena_alloc(Layout::new::<[u64; 4]>()).unwrap();
        assert_eq!(again, p, "after reset the first address is reused");
        // SAFETY: as above.
        unsafe { thread_arena_reset() };
        assert!(thread_arena_alloc(Layout::from_size_align(THREAD_CAPACITY, 1).unwrap()).is_some());
        assert!(thread_arena_alloc(Layout::from_size_align(1, 1).unwrap()).is_none());
        // The arena takes memory as it uses it: its first block, and one more that holds
        // the whole capacity.
        assert_eq!(blocks_in_use(), before + 2, "two blocks");
        let s = thread_arena_stats().unwrap();
        assert_eq!(
            (s.bytes_used, s.high_watermark),
            (THREAD_CAPACITY, THREAD_CAPACITY)
        );
    })
    .join()
    .unwrap();
    assert_eq!(
        blocks_in_use(),
        before,
        "the thread's blocks came back at exit"
    );
}

/// One short-lived worker: allocates from its thread arena, checks the bytes, exits.
fn worker(seed: u8) {
    let mut ptrs = Vec::new();
    // Every byte is checked one by one: 30 allocations under Miri.
    for i in 0..if cfg!(miri) { 30 } else { 100usize } {
        let size = 16 + i * 5;
        let p = thread_arena_alloc(Layout::from_size_align(size, 16).unwrap()).unwrap();
        // SAFETY: `size` fresh bytes.
        unsafe { p.as_ptr().write_bytes(seed ^ i as u8, size) };
        ptrs.push((p, size));
    }
    for (i, &(p, size)) in ptrs.iter().enumerate() {
        // SAFETY: live allocations of `size` bytes.
        let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
        assert!(s.iter().all(|&b| b == seed ^ i as u8));
    }
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn thread_arenas_come_back_when_threads_exit() {
    let _serial = serial();
    set_thread_arena_capacity(THREAD_CAPACITY);
    let before = blocks_in_use();
    let in_use_before = scratch_pool().stats().in_use;

    // 32 threads one after the other (4 under Miri).
    for t in 0..if cfg!(miri) { 4 } else { 32u8 } {
        std::thread::spawn(move || worker(t)).join().unwrap();
        assert_eq!(blocks_in_use(), before, "thread {t} kept its block");
    }

    // Batches of 8 threads alive at once, each holding its arena while the others do (one
    // batch under Miri).
    for batch in 0..if cfg!(miri) { 1 } else { 4u8 } {
        let ready = Barrier::new(9);
        let done = Barrier::new(9);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u8)
                .map(|k| {
                    let (ready, done) = (&ready, &done);
                    s.spawn(move || {
                        worker(batch * 8 + k);
                        ready.wait();
                        done.wait();
                    })
                })
                .collect();
            ready.wait();
            assert_eq!(blocks_in_use(), before + 8, "one arena per live thread");
            done.wait();
            for h in handles {
                h.join().unwrap();
            }
        });
        assert_eq!(blocks_in_use(), before, "batch {batch} kept blocks");
    }
    assert_eq!(scratch_pool().stats().in_use, in_use_before);

    // A thread that only resets, and one that panics after allocating.
    std::thread::spawn(|| {
        // SAFETY: nothing was allocated.
        unsafe { thread_arena_reset() }
    })
    .join()
    .unwrap();
    let r = std::thread::spawn(|| {
        worker(99);
        panic!("worker panics with its arena live");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(blocks_in_use(), before, "a panicking thread kept its block");
}

/// The capacity caps the bytes in use, padding included: a request that would fit only
/// without its alignment padding is refused and leaves nothing behind, even where the
/// arena's block has room for it.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn a_thread_arena_refuses_what_fits_only_without_its_padding() {
    let _serial = serial();
    set_thread_arena_capacity(THREAD_CAPACITY);
    std::thread::spawn(move || {
        let byte = Layout::from_size_align(1, 1).unwrap();
        // Fill to one byte short of the capacity, over two blocks (the second is larger
        // than what is left of the capacity: the growth rule takes at least what is held).
        thread_arena_alloc(Layout::from_size_align(40_000, 1).unwrap()).unwrap();
        thread_arena_alloc(Layout::from_size_align(THREAD_CAPACITY - 40_001, 1).unwrap()).unwrap();
        let used = thread_arena_stats().unwrap().bytes_used;
        assert_eq!(used, THREAD_CAPACITY - 1);
        // One byte at 64-byte alignment needs padding first: past the capacity.
        assert!(thread_arena_alloc(Layout::from_size_align(1, 64).unwrap()).is_none());
        assert_eq!(
            thread_arena_stats().unwrap().bytes_used,
            used,
            "nothing left behind"
        );
        assert!(
            thread_arena_alloc(byte).is_some(),
            "the last byte still fits"
        );
        assert!(thread_arena_alloc(byte).is_none());
    })
    .join()
    .unwrap();
}
