//! The core without Bevy: a simulated game loop with a per-frame arena, nested scratch
//! space, a shared arena that worker threads fill at once, frame data kept for the next
//! frame behind a handle, a thread frame arena, and the statistics a budget is tuned with.
//!
//! Run with `cargo run --release --example basic`.

use nebula_memory::Arena;
use std::alloc::Layout;
use std::hint::black_box;

use nebula_memory::{
    DoubleBufferedArena, FrameHandle, MemoryArena, SharedArena, engine_pool, game_pool,
    scratch_pool, thread_arena_alloc, thread_arena_reset, with_scratch,
};

#[derive(Clone, Copy, Debug)]
struct Particle {
    pos: [f32; 3],
    vel: [f32; 3],
}

/// A tiny deterministic PRNG so every run does the same work.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn main() {
    const FRAMES: u32 = 600;
    let mut rng = SplitMix(42);
    let mut frame_arena = MemoryArena::new(scratch_pool());
    let mut workers = SharedArena::new(game_pool());
    let mut frames = DoubleBufferedArena::new(scratch_pool());
    let mut last_visible: Option<FrameHandle<usize>> = None;
    let mut checksum = 0.0f32;

    for frame in 0..FRAMES {
        // Simulation: particles live for this frame only.
        let count = 1000 + (rng.next() % 500) as usize;
        let particles = frame_arena.alloc_slice_fill_with(count, |i| Particle {
            pos: [i as f32, 0.0, 0.0],
            vel: [0.0, 1.0, 0.0],
        });
        for p in particles.iter_mut() {
            p.pos[1] += p.vel[1] / 60.0;
        }

        // Meshing: nested scratch space, reclaimed when each scope returns.
        let visible = with_scratch(|scratch| {
            let mut quads = allocator_api2::vec::Vec::new_in(scratch);
            for p in particles
                .iter()
                .filter(|p| (p.pos[0] as usize).is_multiple_of(3))
            {
                quads.push([p.pos[0], p.pos[1], 1.0, 1.0]);
            }
            with_scratch(|inner| {
                let sorted = inner.alloc_slice_copy(&quads);
                sorted.sort_by(|a, b| b[0].total_cmp(&a[0]));
                sorted.len()
            })
        });

        // Four workers fill one shared arena at once, each in blocks of its own.
        let totals: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|w| {
                    let workers = &workers;
                    s.spawn(move || {
                        let path = workers.alloc_slice_fill_with(256, |i| w * 256 + i as u64);
                        path.iter().sum::<u64>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        workers.reset(); // `&mut`: every worker's borrow has ended

        // Frame data read by the next frame, through a handle (no lifetime).
        if let Some(h) = last_visible {
            let previous = frames.get(h).copied().unwrap_or(0);
            checksum += (previous % 7) as f32;
        }
        last_visible = Some(frames.store(visible));

        // Debug text, formatted straight into the frame arena.
        let label = frame_arena.alloc_fmt(format_args!("frame {frame}: {visible} visible"));
        checksum += label.len() as f32 + particles[count - 1].pos[1] + (totals[3] % 5) as f32;

        // The per-thread frame arena.
        let p = thread_arena_alloc(Layout::new::<[u64; 64]>()).expect("thread arena has room");
        black_box(p);

        if frame % 200 == 199 {
            println!("{}", frame_arena.stats());
        }
        frame_arena.reset();
        frames.swap(); // this frame's data stays readable through the next one
        // SAFETY: nothing from the thread arena survives the frame.
        unsafe { thread_arena_reset() };
    }

    println!("checksum {checksum}");
    println!("workers' {workers}");
    for pool in [engine_pool(), game_pool(), scratch_pool()] {
        println!("pool {:<8} {}", pool.name(), pool.stats());
    }
}
