//! Shared-arena benchmarks: `SharedArena` against `MemoryArena`, blink-alloc's
//! `SyncBlinkAlloc` and a compare-and-swap bump (the other design for a thread-shared
//! arena), and `FrameHandle::get` against a plain reference.
//!
//! - **S1, W2 on one thread** (1,000 allocations of 32 B, align 16, one byte written each,
//!   then reset): `memory-arena`; `memory-arena-ref` (the same arena through a shared
//!   reference the optimiser cannot prove unique, as allocator handles are, so its cursor
//!   goes through memory on every allocation); `memory-arena-hot` (the arena's allocations
//!   made through a `HotCursor` taken once per frame); `shared` (`&SharedArena` through the
//!   `Arena` trait, so every call looks up the thread's part); `shared-local` (the per-thread
//!   handle `SharedArena::this_thread` taken once per frame); `sync-blink` (`SyncBlinkAlloc::allocate`, its thread-shared path, then
//!   `reset`); `cas` (one buffer bumped with a compare-and-swap loop); `limit` (the floor).
//!   Criterion medians, plus paired ratios (alternating batches, drift cancels).
//! - **S2, W6 with one arena for both threads**: each of 1 or 2 threads runs W2 frames on
//!   the same arena at once; a frame ends with that thread's own free-all: `shared`
//!   rewinds its part to a checkpoint (through `Deref`), `blink-local` resets a
//!   `LocalBlinkAlloc` of one `SyncBlinkAlloc` (blink's per-thread proxies). `cas` cannot
//!   free one thread's frame, so its frames pile up until the batch ends. Timed by hand:
//!   threads are spawned and warmed up before a barrier, a batch is 200 frames per thread,
//!   median of 21 batches; scaling = 2 × t(1 thread) / t(2 threads).
//! - **S3, `FrameHandle::get`**: summing 1,000 `u64` through handles against through plain
//!   references.
//!
//! Run: `cargo bench --bench shared` (one part: `cargo bench --bench shared -- S2`).

use nebula_memory::Arena;
use std::alloc::Layout;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use blink_alloc::SyncBlinkAlloc;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use nebula_memory::{DoubleBufferedArena, FrameHandle, MemoryArena, MemoryPool, SharedArena};

#[allow(dead_code)]
mod common;
use common::Limit;

const OBJECTS: usize = 1_000;
const PARTICLE: Layout = match Layout::from_size_align(32, 16) {
    Ok(l) => l,
    Err(_) => panic!("bad layout"),
};

/// Writes one byte so that the allocation is really touched.
#[inline(always)]
fn touch(p: NonNull<u8>, v: usize) {
    // SAFETY: every caller passes a fresh allocation of at least one byte.
    unsafe { p.as_ptr().write_volatile(v as u8) };
}

fn new_pool(name: &'static str) -> MemoryPool {
    match MemoryPool::new(name, 512 << 20) {
        Ok(p) => p,
        Err(e) => panic!("cannot create pool {name}: {e}"),
    }
}

/// The thread-shared bump the other design would use: one buffer, its offset advanced by
/// compare-and-swap (any alignment), by every thread.
struct CasBump {
    base: *mut u8,
    cap: usize,
    off: AtomicUsize,
    _buf: Limit,
}

// SAFETY: the buffer is owned; every byte range is handed to exactly one caller, because
// the offset only moves by successful compare-and-swap.
unsafe impl Sync for CasBump {}

impl CasBump {
    fn new(cap: usize) -> CasBump {
        let buf = Limit::new(cap);
        let base = buf.alloc(Layout::new::<u8>()).as_ptr();
        // Pre-fault the buffer so that page faults stay out of the timings.
        // SAFETY: `cap - 4096` bytes from `base` lie in the buffer.
        unsafe { base.write_bytes(0, cap - 4096) };
        CasBump {
            base,
            cap: cap - 4096,
            off: AtomicUsize::new(0),
            _buf: buf,
        }
    }

    #[inline(always)]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        let mut off = self.off.load(Ordering::Relaxed);
        loop {
            let addr = self.base as usize + off;
            let start = (addr + layout.align() - 1) & !(layout.align() - 1);
            let new = start - self.base as usize + layout.size();
            assert!(new <= self.cap, "cas bump exhausted");
            match self
                .off
                .compare_exchange_weak(off, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let p = self.base.wrapping_add(start - self.base as usize);
                    // SAFETY: `p` lies in the buffer, which is not null.
                    return unsafe { NonNull::new_unchecked(p) };
                }
                Err(now) => off = now,
            }
        }
    }

    fn reset(&mut self) {
        *self.off.get_mut() = 0;
    }
}

// ------------------------------------------------------------------------- S1

fn s1(c: &mut Criterion) {
    let pool = new_pool("s1");
    let mut g = c.benchmark_group("S1 W2 one thread");
    g.sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    let mut arena = MemoryArena::new(&pool);
    let mut arena2 = MemoryArena::new(&pool);
    let mut shared = SharedArena::new(&pool);
    let mut blink = SyncBlinkAlloc::new();
    let mut cas = CasBump::new(8 << 20);
    let mut limit = Limit::new(8 << 20);

    let memory_frame = |a: &mut MemoryArena<'_>| {
        for i in 0..OBJECTS {
            touch(a.alloc(PARTICLE), i);
        }
        a.reset();
    };
    // The same arena reached through a shared reference the optimiser cannot see is
    // unique, as every allocator handle (`&MemoryArena` in a `Vec`, a `Scratch` item) is:
    // the cursor is loaded and stored on every allocation instead of living in registers.
    let memory_ref_frame = |a: &mut MemoryArena<'_>| {
        let r: &MemoryArena<'_> = black_box(&*a);
        for i in 0..OBJECTS {
            touch(r.alloc(PARTICLE), i);
        }
        a.reset();
    };
    let hot_frame = |a: &mut MemoryArena<'_>| {
        let hot = a.hot_cursor();
        for i in 0..OBJECTS {
            touch(hot.alloc(PARTICLE), i);
        }
        drop(hot);
        a.reset();
    };
    let shared_frame = |a: &mut SharedArena<'_>| {
        for i in 0..OBJECTS {
            touch(a.alloc(PARTICLE), i);
        }
        a.reset();
    };
    let local_frame = |a: &mut SharedArena<'_>| {
        a.with_this_thread(|local| {
            for i in 0..OBJECTS {
                touch(local.alloc(PARTICLE), i);
            }
        });
        a.reset();
    };
    let blink_frame = |a: &mut SyncBlinkAlloc| {
        for i in 0..OBJECTS {
            match a.allocate(PARTICLE) {
                Ok(p) => touch(p.cast(), i),
                Err(_) => panic!("blink allocation failed"),
            }
        }
        a.reset();
    };
    let cas_frame = |a: &mut CasBump| {
        for i in 0..OBJECTS {
            touch(a.alloc(PARTICLE), i);
        }
        a.reset();
    };
    let limit_frame = |a: &mut Limit| {
        for i in 0..OBJECTS {
            touch(a.alloc(PARTICLE), i);
        }
        a.reset();
    };

    g.bench_function("memory-arena", |b| b.iter(|| memory_frame(&mut arena)));
    g.bench_function("memory-arena-ref", |b| {
        b.iter(|| memory_ref_frame(&mut arena))
    });
    g.bench_function("memory-arena-hot", |b| b.iter(|| hot_frame(&mut arena2)));
    g.bench_function("shared", |b| b.iter(|| shared_frame(&mut shared)));
    g.bench_function("shared-local", |b| b.iter(|| local_frame(&mut shared)));
    g.bench_function("sync-blink", |b| b.iter(|| blink_frame(&mut blink)));
    g.bench_function("cas", |b| b.iter(|| cas_frame(&mut cas)));
    g.bench_function("limit", |b| b.iter(|| limit_frame(&mut limit)));
    g.finish();

    if !selected("S1") {
        return;
    }
    const FRAMES: u32 = 2_000;
    let batch = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..FRAMES {
            f();
        }
        t.elapsed()
    };
    let (shared_vs_memory, _) = paired_median(
        &mut || batch(&mut || shared_frame(&mut shared)),
        &mut || batch(&mut || memory_frame(&mut arena)),
    );
    let (shared_vs_memory_ref, _) = paired_median(
        &mut || batch(&mut || shared_frame(&mut shared)),
        &mut || batch(&mut || memory_ref_frame(&mut arena)),
    );
    let (local_vs_memory, _) =
        paired_median(&mut || batch(&mut || local_frame(&mut shared)), &mut || {
            batch(&mut || memory_frame(&mut arena))
        });
    let (hot_vs_memory, _) =
        paired_median(&mut || batch(&mut || hot_frame(&mut arena2)), &mut || {
            batch(&mut || memory_frame(&mut arena))
        });
    let (shared_vs_blink, _) = paired_median(
        &mut || batch(&mut || shared_frame(&mut shared)),
        &mut || batch(&mut || blink_frame(&mut blink)),
    );
    let (cas_vs_memory, _) = paired_median(&mut || batch(&mut || cas_frame(&mut cas)), &mut || {
        batch(&mut || memory_frame(&mut arena))
    });
    println!("S1 paired ratios (median of 31 alternating batches of {FRAMES} frames):");
    println!("  shared       / memory-arena  {shared_vs_memory:.3}   (target <= 1.3)");
    println!("  shared       / memory-arena-ref  {shared_vs_memory_ref:.3}");
    println!("  shared-local / memory-arena  {local_vs_memory:.3}   (target <= 1.1)");
    println!("  memory-arena-hot / memory-arena  {hot_vs_memory:.3}");
    println!("  shared       / sync-blink    {shared_vs_blink:.3}   (target < 1)");
    println!("  cas          / memory-arena  {cas_vs_memory:.3}");
}

/// Median of the per-round ratios `a / b` over 31 rounds, alternating which goes first;
/// also returns the median of `a` alone.
fn paired_median(
    a: &mut dyn FnMut() -> Duration,
    b: &mut dyn FnMut() -> Duration,
) -> (f64, Duration) {
    a();
    b();
    let mut ratios = Vec::with_capacity(31);
    let mut times = Vec::with_capacity(31);
    for i in 0..31 {
        let (x, y) = if i % 2 == 0 {
            let x = a();
            (x, b())
        } else {
            let y = b();
            (a(), y)
        };
        ratios.push(x.as_secs_f64() / y.as_secs_f64());
        times.push(x);
    }
    ratios.sort_by(f64::total_cmp);
    times.sort();
    (ratios[15], times[15])
}

/// Whether the command line selects part `id` (criterion's filters are positional).
fn selected(id: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--test" || a == "--list") {
        return false;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.contains(id) || id.contains(f.as_str()))
}

// ------------------------------------------------------------------------- S2

const S2_FRAMES: usize = 200;
const S2_BATCHES: usize = 21;

/// Runs `thread` on each of `threads` threads at once, `S2_BATCHES` times, with `between`
/// (exclusive access) between batches. `thread` sets up its per-thread state, runs one
/// warm-up frame, waits at the barrier, then runs `S2_FRAMES` frames. Returns the median
/// wall time from the barrier to the last thread's end.
fn s2_run<A: Sync>(
    arena: &mut A,
    threads: usize,
    thread: &(dyn Fn(&A, &Barrier) + Sync),
    between: &dyn Fn(&mut A),
) -> Duration {
    let mut times = Vec::with_capacity(S2_BATCHES);
    for _ in 0..S2_BATCHES {
        between(arena);
        let arena = &*arena;
        let start = Barrier::new(threads + 1);
        let t = std::thread::scope(|s| {
            for _ in 0..threads {
                let start = &start;
                s.spawn(move || thread(arena, start));
            }
            start.wait();
            Instant::now()
        });
        times.push(t.elapsed());
    }
    times.sort();
    times[S2_BATCHES / 2]
}

fn s2(_c: &mut Criterion) {
    if !selected("S2") {
        return;
    }
    let pool = new_pool("s2");
    let mut results = Vec::new();

    let mut shared = SharedArena::new(&pool);
    let shared_thread = |a: &SharedArena<'_>, start: &Barrier| {
        // The empty position of this thread's part.
        let mine = a.with_this_thread(|part| part.checkpoint());
        let frame = || {
            for i in 0..OBJECTS {
                touch(a.alloc(PARTICLE), i);
            }
            // SAFETY: nothing allocated in this frame is used after it.
            a.with_this_thread(|part| unsafe { part.rewind(mine) });
        };
        frame();
        start.wait();
        (0..S2_FRAMES).for_each(|_| frame());
    };
    let reset = |a: &mut SharedArena<'_>| a.reset();
    let t1 = s2_run(&mut shared, 1, &shared_thread, &reset);
    let t2 = s2_run(&mut shared, 2, &shared_thread, &reset);
    results.push(("shared", t1, t2));

    let mut blink = SyncBlinkAlloc::new();
    let blink_thread = |a: &SyncBlinkAlloc, start: &Barrier| {
        // blink's per-thread proxy, reset at the end of every frame.
        let mut local = a.local();
        let mut frame = || {
            for i in 0..OBJECTS {
                match local.allocate(PARTICLE) {
                    Ok(p) => touch(p.cast(), i),
                    Err(_) => panic!("blink allocation failed"),
                }
            }
            local.reset();
        };
        frame();
        start.wait();
        (0..S2_FRAMES).for_each(|_| frame());
    };
    let blink_reset = |a: &mut SyncBlinkAlloc| a.reset();
    let t1 = s2_run(&mut blink, 1, &blink_thread, &blink_reset);
    let t2 = s2_run(&mut blink, 2, &blink_thread, &blink_reset);
    results.push(("blink-local", t1, t2));

    let mut cas = CasBump::new(2 * (S2_FRAMES + 1) * OBJECTS * 48 + (1 << 20));
    let cas_thread = |a: &CasBump, start: &Barrier| {
        // No per-thread free: the frames pile up until the batch ends.
        let frame = || {
            for i in 0..OBJECTS {
                touch(a.alloc(PARTICLE), i);
            }
        };
        frame();
        start.wait();
        (0..S2_FRAMES).for_each(|_| frame());
    };
    let cas_reset = |a: &mut CasBump| a.reset();
    let t1 = s2_run(&mut cas, 1, &cas_thread, &cas_reset);
    let t2 = s2_run(&mut cas, 2, &cas_thread, &cas_reset);
    results.push(("cas", t1, t2));

    println!(
        "S2 W6 with one arena for both threads ({S2_FRAMES} W2 frames per thread per batch, \
         median of {S2_BATCHES} batches):"
    );
    for (name, t1, t2) in results {
        let per_frame_1 = t1.as_secs_f64() * 1e6 / S2_FRAMES as f64;
        let per_frame_2 = t2.as_secs_f64() * 1e6 / S2_FRAMES as f64;
        println!(
            "  {name:<12} 1 thread {per_frame_1:>7.3} µs/frame   2 threads {per_frame_2:>7.3} µs/2 frames   \
             scaling {:.2}x",
            2.0 * t1.as_secs_f64() / t2.as_secs_f64()
        );
    }
}

// ------------------------------------------------------------------------- S3

fn s3(c: &mut Criterion) {
    let pool = new_pool("s3");
    let frames = DoubleBufferedArena::new(&pool);
    let values: Vec<u64> = (0..1_000).collect();
    let handles: Vec<FrameHandle<u64>> = values.iter().map(|&v| frames.store(v)).collect();
    let refs: Vec<&u64> = handles
        .iter()
        .map(|&h| frames.get(h).unwrap_or(&0))
        .collect();
    let mut g = c.benchmark_group("S3 FrameHandle::get");
    g.sample_size(50);
    g.bench_function("handle", |b| {
        b.iter(|| {
            black_box(&handles)
                .iter()
                .map(|&h| frames.get(h).copied().unwrap_or(0))
                .sum::<u64>()
        })
    });
    g.bench_function("reference", |b| {
        b.iter(|| black_box(&refs).iter().map(|&&v| v).sum::<u64>())
    });
    g.finish();
}

criterion_group!(benches, s1, s2, s3);
criterion_main!(benches);
