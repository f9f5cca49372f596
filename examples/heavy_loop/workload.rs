//! The allocation-heavy frame loop that `heavy_loop_tracked` and `heavy_loop_plain` both
//! run, to measure what `TrackingAllocator` + `MemoryPlugin` cost per heap allocation on a
//! Bevy loop rather than on a malloc+free pair.
//!
//! A headless app on Bevy's default task pools, about 20,000 heap allocations a frame, each
//! freed within the frame but for the kept bytes:
//!
//! - **churn**: every frame the [`CHURN`] entities spawned the frame before are despawned
//!   and as many spawned, each with a component that owns a `Vec`;
//! - **two `par_iter` systems** over [`ENTITIES`] entities, each collecting a small `Vec`
//!   per entity (one allocation each);
//! - **a keeper** that keeps 1,000 bytes a frame (a boxed slice pushed into a resource).
//!
//! Each binary is a global allocator and a plugin away from the other, and a global
//! allocator is fixed when the program is compiled: so two example binaries that share
//! this file (`#[path]`), rather than one binary with a cargo feature. A feature would
//! make `cargo build --examples` build one variant only, so the script would rebuild
//! between runs and `clippy --all-features` would never see the plain one; and a feature
//! that takes the tracker out is not additive. The plain binary counts nothing: a counter
//! in its allocator would be part of the cost it is the baseline for. The tracked one
//! counts allocations from the ledger's per-frame figures, read after each frame outside
//! its timing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bevy_app::{App, Last, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;

/// Entities the two `par_iter` systems visit, one `Vec` each per system.
pub const ENTITIES: usize = 8_000;
/// Entities despawned and spawned every frame, each owning a `Vec`.
pub const CHURN: usize = 4_000;
/// Bytes kept every frame.
pub const KEEP: usize = 1_000;
/// Frames run before timing.
pub const WARM_UP: usize = 30;
/// Frames timed, unless `--frames N` says otherwise.
pub const FRAMES: usize = 1_000;

#[derive(Component)]
struct Body {
    id: u32,
    pos: [f32; 3],
}

#[derive(Component, Default)]
struct Score(u64);

/// A churned entity's payload: one heap allocation at its spawn, freed at its despawn.
#[derive(Component)]
struct Payload(Vec<u32>);

#[derive(Resource, Default)]
struct Kept(Vec<Box<[u8]>>);

/// The frame's number and a checksum of the work, the same in both binaries.
#[derive(Resource, Default)]
pub struct Work {
    frame: u64,
    pub checksum: u64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn churn(mut commands: Commands, old: Query<Entity, With<Payload>>, work: Res<Work>) {
    for e in &old {
        commands.entity(e).despawn();
    }
    let frame = work.frame;
    commands.spawn_batch((0..CHURN as u64).map(move |i| {
        let n = 4 + (mix(frame ^ i) % 12) as usize;
        Payload((0..n as u32).collect())
    }));
}

/// Each entity's neighbours by id: a `Vec` of 4 to 11 ids.
fn neighbours(mut bodies: Query<(&Body, &mut Score)>) {
    bodies.par_iter_mut().for_each(|(body, mut score)| {
        let n = 4 + body.id as usize % 8;
        let near: Vec<u32> = (0..n as u32).map(|k| body.id.wrapping_add(k * 7)).collect();
        score.0 = black_box(&near).iter().map(|&x| u64::from(x)).sum();
    });
}

/// Each entity's distances to a few fixed points: a `Vec` of 6 floats.
fn distances(mut bodies: Query<(&Body, &mut Score)>) {
    bodies.par_iter_mut().for_each(|(body, mut score)| {
        let d: Vec<f32> = (0..6)
            .map(|k| (body.pos[0] - k as f32).abs() + body.pos[1] + body.pos[2])
            .collect();
        let nearest = black_box(&d).iter().copied().fold(f32::MAX, f32::min);
        score.0 = score.0.wrapping_add(u64::from(nearest.to_bits()));
    });
}

fn keep(mut kept: ResMut<Kept>) {
    kept.0.push(vec![0u8; KEEP].into_boxed_slice());
}

fn tally(scores: Query<&Score>, payloads: Query<&Payload>, mut work: ResMut<Work>) {
    let scores = scores.iter().fold(0u64, |h, s| h.wrapping_add(s.0));
    let payloads = payloads.iter().map(|p| p.0.len() as u64).sum::<u64>();
    work.checksum = work.checksum.wrapping_add(scores ^ payloads);
    work.frame += 1;
}

/// The app, with `plugins` added first (the tracked binary's `MemoryPlugin`).
pub fn app(plugins: impl FnOnce(&mut App)) -> App {
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin::default());
    plugins(&mut app);
    app.init_resource::<Kept>()
        .init_resource::<Work>()
        .add_systems(
            Update,
            (churn, neighbours, distances.after(neighbours), keep),
        )
        .add_systems(Last, tally);
    app.world_mut().spawn_batch((0..ENTITIES as u32).map(|id| {
        let p = mix(u64::from(id));
        let pos = [
            (p & 0xff) as f32,
            (p >> 8 & 0xff) as f32,
            (p >> 16 & 0xff) as f32,
        ];
        (Body { id, pos }, Score::default())
    }));
    app.finish();
    app.cleanup();
    app
}

/// Runs `app`: [`WARM_UP`] frames, then the timed ones (`--frames N`, default [`FRAMES`]),
/// calling `after_frame` after each timed frame outside the timing; prints the figures,
/// one `key=value` a line after a title (what `scripts/heavy_loop_cost.sh` reads).
/// `allocations` is what `after_frame` returned in all, if it counts.
pub fn run(name: &str, app: &mut App, mut after_frame: impl FnMut(&App) -> Option<u64>) {
    let args: Vec<String> = std::env::args().collect();
    let frames = args
        .iter()
        .position(|a| a == "--frames")
        .and_then(|i| args.get(i + 1))
        .map_or(FRAMES, |n| n.parse().expect("--frames takes a number"));
    for _ in 0..WARM_UP {
        app.update();
    }
    let cpu_start = cpu_time();
    let mut wall = Duration::ZERO;
    let mut allocations: Option<u64> = None;
    for _ in 0..frames {
        let start = Instant::now();
        app.update();
        wall += start.elapsed();
        if let Some(n) = after_frame(app) {
            *allocations.get_or_insert(0) += n;
        }
    }
    let cpu = cpu_time().zip(cpu_start).map(|(end, start)| end - start);
    println!(
        "heavy_loop {name}: {frames} frames after {WARM_UP} of warm-up; {ENTITIES} entities, \
         {CHURN} churned a frame"
    );
    println!("frames={frames}");
    println!("wall_s={:.6}", wall.as_secs_f64());
    // Every thread's, the ledger reads between frames included (a few tags' figures).
    match cpu {
        Some(cpu) => println!("cpu_s={:.6}", cpu.as_secs_f64()),
        None => println!("cpu_s=unknown"),
    }
    match allocations {
        Some(n) => println!("allocations={n}"),
        None => println!("allocations=uncounted"),
    }
    println!("checksum={:x}", app.world().resource::<Work>().checksum);
}

/// The process's CPU time (user and system, every thread), where it can be read.
#[cfg(unix)]
fn cpu_time() -> Option<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `getrusage` writes a `rusage` to the pointer, which is valid for one.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialised by the successful call above.
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Some(time(usage.ru_utime) + time(usage.ru_stime))
}

#[cfg(not(unix))]
fn cpu_time() -> Option<Duration> {
    None
}
