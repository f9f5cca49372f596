//! The demo: a headless Bevy frame loop doing what a voxel engine does every frame, run
//! three times on the same work so the arenas can be compared at a glance.
//!
//! Each frame: a few thousand entities move; a spatial hash answers neighbour queries into
//! result lists; frustum culling collects the visible entities; greedy meshing turns some
//! voxel chunks into quads; the visible entities are sorted by LOD priority. Culling,
//! queries and meshing run in parallel on 4 compute threads.
//!
//! The three runs differ only in where the temporaries live:
//! - **arena**: `Scratch` (per-system arenas, reset at the frame's end) and `FrameMemory`
//!   (the visible list, handed from culling to LOD sorting as a `FrameHandle`);
//! - **heap**: a fresh `Vec` per use on the global allocator;
//! - **local-vec**: `Local<Vec>` buffers cleared and reused across frames (the usual Bevy
//!   idiom).
//!
//! It prints frame time statistics and heap allocations per frame (a counting global
//! allocator), checks that the three runs computed the same checksums every frame, and
//! writes the per-frame figures as CSV and an SVG plot under `target/frame_loop/`.
//!
//! Run with `cargo run --release --example frame_loop` (`-- --frames N --entities N`).

use nebula_memory::Arena;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::vec::Vec as AVec;
use bevy_app::TaskPoolThreadAssignmentPolicy;
use bevy_app::{App, Last, PostUpdate, TaskPoolOptions, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::FrameHandle;
use nebula_memory::bevy::{FrameMemory, FrameMemoryStats, MemoryPlugin, MemorySystems, Scratch};

// ------------------------------------------------------------------- counting allocator

/// Heap allocations (`alloc`, `alloc_zeroed`, `realloc`) since the process started.
static HEAP_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting allocations.
struct Counting;

// SAFETY: every call is forwarded to `System` unchanged; the counter has no effect on
// the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        HEAP_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HEAP_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ------------------------------------------------------------------- the world

/// Where the temporaries of a run live.
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Arena,
    Heap,
    LocalVec,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Arena => "arena",
            Mode::Heap => "heap",
            Mode::LocalVec => "local-vec",
        }
    }
}

const WORLD: f32 = 128.0;
const CELL: f32 = 4.0;
const CELLS: u32 = (WORLD / CELL) as u32;
const QUERIES: usize = 256;
const RADIUS: f32 = 6.0;
const CHUNK: usize = 16;
const CHUNKS_PER_FRAME: usize = 16;
const LOD_KEPT: usize = 256;

#[derive(Component, Clone, Copy)]
struct Pos([f32; 3]);

#[derive(Component, Clone, Copy)]
struct Vel([f32; 3]);

/// The frame's checksum: every system adds its own (wrapping), so the order in which the
/// parallel systems finish does not matter.
#[derive(Resource, Default)]
struct Checksum(AtomicU64);

impl Checksum {
    fn add(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
}

/// The frame number (drives the chunks meshed this frame).
#[derive(Resource, Default)]
struct Tick(u64);

/// The visible list, from culling to LOD sorting: a frame handle in the arena run, a
/// vector on the heap otherwise.
#[derive(Resource, Default)]
struct Visible {
    handle: Option<FrameHandle<[u32]>>,
    list: AVec<u32, Global>,
}

/// SplitMix64: a tiny fixed-seed generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(seed: u64) -> f32 {
    (mix(seed) >> 40) as f32 / (1u64 << 24) as f32
}

fn spawn(world: &mut World, entities: usize) {
    world.spawn_batch((0..entities as u64).map(|i| {
        let p = [
            unit(i * 6) * WORLD,
            unit(i * 6 + 1) * WORLD,
            unit(i * 6 + 2) * WORLD,
        ];
        let v = [
            unit(i * 6 + 3) * 2.0 - 1.0,
            unit(i * 6 + 4) * 2.0 - 1.0,
            unit(i * 6 + 5) * 2.0 - 1.0,
        ];
        (Pos(p), Vel(v))
    }));
}

// ------------------------------------------------------------------- the work, once

/// Moves every entity by a fixed step, bouncing off the world's walls.
fn movement(mut query: Query<(&mut Pos, &mut Vel)>) {
    query.par_iter_mut().for_each(|(mut p, mut v)| {
        for k in 0..3 {
            p.0[k] += v.0[k] * 0.25;
            if !(0.0..WORLD).contains(&p.0[k]) {
                v.0[k] = -v.0[k];
                p.0[k] = p.0[k].clamp(0.0, WORLD - 0.001);
            }
        }
    });
}

fn cell_of(p: [f32; 3]) -> u32 {
    let c = |x: f32| ((x / CELL) as u32).min(CELLS - 1);
    (c(p[0]) * CELLS + c(p[1])) * CELLS + c(p[2])
}

/// Spatial hash: entities sorted by cell; for each query point, the entities within
/// `RADIUS` gathered into a result list.
fn spatial_queries<A: Allocator + Copy>(
    alloc: A,
    entries: &mut AVec<(u32, u32, [f32; 3]), A>,
    lists: &mut AVec<AVec<u32, A>, A>,
    positions: impl Iterator<Item = [f32; 3]>,
    frame: u64,
) -> u64 {
    entries.extend(
        positions
            .enumerate()
            .map(|(i, p)| (cell_of(p), i as u32, p)),
    );
    entries.sort_unstable_by_key(|e| (e.0, e.1));
    let mut sum = 0u64;
    for q in 0..QUERIES {
        let seed = frame * QUERIES as u64 + q as u64;
        let at = [
            unit(seed * 3) * WORLD,
            unit(seed * 3 + 1) * WORLD,
            unit(seed * 3 + 2) * WORLD,
        ];
        if lists.len() <= q {
            lists.push(AVec::new_in(alloc));
        }
        let list = &mut lists[q];
        list.clear();
        let span = (RADIUS / CELL).ceil() as i32;
        let c = |x: f32| (x / CELL) as i32;
        for dx in -span..=span {
            for dy in -span..=span {
                for dz in -span..=span {
                    let (x, y, z) = (c(at[0]) + dx, c(at[1]) + dy, c(at[2]) + dz);
                    let inside = |v: i32| (0..CELLS as i32).contains(&v);
                    if !(inside(x) && inside(y) && inside(z)) {
                        continue;
                    }
                    let cell = ((x as u32 * CELLS) + y as u32) * CELLS + z as u32;
                    let from = entries.partition_point(|e| e.0 < cell);
                    for e in entries[from..].iter().take_while(|e| e.0 == cell) {
                        let d: f32 = (0..3).map(|k| (e.2[k] - at[k]).powi(2)).sum();
                        if d <= RADIUS * RADIUS {
                            list.push(e.1);
                        }
                    }
                }
            }
        }
        list.sort_unstable();
        sum = sum.wrapping_add(list.iter().map(|&i| u64::from(i)).sum::<u64>() ^ list.len() as u64);
    }
    sum
}

/// The camera at the world's centre, looking along +x with a 90-degree cone.
fn visible(p: [f32; 3]) -> bool {
    let d = [p[0] - WORLD / 2.0, p[1] - WORLD / 2.0, p[2] - WORLD / 2.0];
    let len2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    d[0] > 0.0 && d[0] * d[0] >= 0.5 * len2 && len2 < 60.0 * 60.0
}

/// Frustum culling: the indices of the visible entities.
fn cull<A: Allocator>(out: &mut AVec<u32, A>, positions: impl Iterator<Item = [f32; 3]>) -> u64 {
    out.extend(
        positions
            .enumerate()
            .filter(|(_, p)| visible(*p))
            .map(|(i, _)| i as u32),
    );
    out.iter().map(|&i| u64::from(i)).sum::<u64>() ^ (out.len() as u64) << 32
}

/// Greedy meshing of `CHUNKS_PER_FRAME` 16³ chunks: solid voxels from a hash of position
/// and frame, merged face by face into quads. Returns (quads, total area).
fn greedy_mesh<A: Allocator>(
    voxels: &mut AVec<u8, A>,
    mask: &mut AVec<u8, A>,
    quads: &mut AVec<[u8; 6], A>,
    frame: u64,
) -> u64 {
    let mut sum = 0u64;
    for k in 0..CHUNKS_PER_FRAME as u64 {
        let chunk = frame * CHUNKS_PER_FRAME as u64 + k;
        voxels.clear();
        voxels.extend((0..CHUNK * CHUNK * CHUNK).map(|i| {
            let (x, y, z) = (i % CHUNK, (i / CHUNK) % CHUNK, i / (CHUNK * CHUNK));
            let height = 4 + (mix(chunk * 977 + (x * CHUNK + z) as u64) % 9) as usize;
            u8::from(y < height || mix(chunk ^ i as u64).is_multiple_of(23))
        }));
        quads.clear();
        let at = |x: usize, y: usize, z: usize| voxels[x + CHUNK * (y + CHUNK * z)];
        // Faces pointing up (+y): for each layer, a mask of exposed faces, merged greedily.
        for y in 0..CHUNK {
            mask.clear();
            mask.extend((0..CHUNK * CHUNK).map(|i| {
                let (x, z) = (i % CHUNK, i / CHUNK);
                u8::from(at(x, y, z) == 1 && (y + 1 == CHUNK || at(x, y + 1, z) == 0))
            }));
            for z in 0..CHUNK {
                let mut x = 0;
                while x < CHUNK {
                    if mask[x + CHUNK * z] == 0 {
                        x += 1;
                        continue;
                    }
                    let mut w = 1;
                    while x + w < CHUNK && mask[x + w + CHUNK * z] == 1 {
                        w += 1;
                    }
                    let mut h = 1;
                    'grow: while z + h < CHUNK {
                        for i in 0..w {
                            if mask[x + i + CHUNK * (z + h)] == 0 {
                                break 'grow;
                            }
                        }
                        h += 1;
                    }
                    for dz in 0..h {
                        for i in 0..w {
                            mask[x + i + CHUNK * (z + dz)] = 0;
                        }
                    }
                    quads.push([x as u8, y as u8, z as u8, w as u8, 1, h as u8]);
                    x += w;
                }
            }
        }
        let area: u64 = quads
            .iter()
            .map(|q| u64::from(q[3]) * u64::from(q[5]))
            .sum();
        sum = sum.wrapping_add(area << 20 | quads.len() as u64);
    }
    sum
}

/// LOD priority: the visible entities by distance to the camera, nearest first; the
/// checksum covers the order of the first `LOD_KEPT`.
fn lod_sort<A: Allocator>(
    keys: &mut AVec<(u32, u32), A>,
    visible: &[u32],
    pos: &[[f32; 3]],
) -> u64 {
    keys.extend(visible.iter().map(|&i| {
        let p = pos[i as usize];
        let d: f32 = (0..3).map(|k| (p[k] - WORLD / 2.0).powi(2)).sum();
        (d.to_bits(), i)
    }));
    keys.sort_unstable();
    keys.iter()
        .take(LOD_KEPT)
        .enumerate()
        .fold(0u64, |h, (rank, &(_, i))| {
            h.wrapping_add(u64::from(i) * (rank as u64 + 1))
        })
}

// ------------------------------------------------------------------- the systems

/// Buffers of the local-vec run, reused across frames.
#[derive(Default)]
struct QueryBuffers {
    entries: AVec<(u32, u32, [f32; 3]), Global>,
    lists: AVec<AVec<u32, Global>, Global>,
}

fn spatial_system(
    mode: Res<Mode>,
    scratch: Scratch,
    mut local: Local<QueryBuffers>,
    query: Query<&Pos>,
    tick: Res<Tick>,
    checksum: Res<Checksum>,
) {
    let positions = query.iter().map(|p| p.0);
    let sum = match *mode {
        Mode::Arena => {
            let a = &*scratch;
            spatial_queries(
                a,
                &mut AVec::new_in(a),
                &mut AVec::new_in(a),
                positions,
                tick.0,
            )
        }
        Mode::Heap => spatial_queries(
            Global,
            &mut AVec::new(),
            &mut AVec::new(),
            positions,
            tick.0,
        ),
        Mode::LocalVec => {
            let QueryBuffers { entries, lists } = &mut *local;
            entries.clear();
            spatial_queries(Global, entries, lists, positions, tick.0)
        }
    };
    checksum.add(sum);
}

fn cull_system(
    mode: Res<Mode>,
    scratch: Scratch,
    frames: Res<FrameMemory>,
    mut visible: ResMut<Visible>,
    query: Query<&Pos>,
    checksum: Res<Checksum>,
) {
    let positions = query.iter().map(|p| p.0);
    let sum = match *mode {
        Mode::Arena => {
            let mut out = AVec::new_in(&*scratch);
            let sum = cull(&mut out, positions);
            visible.handle = Some(frames.store_slice(&out));
            sum
        }
        Mode::Heap => {
            let mut out = AVec::new();
            let sum = cull(&mut out, positions);
            visible.list = out; // a fresh vector every frame
            sum
        }
        Mode::LocalVec => {
            visible.list.clear(); // the same vector, reused
            cull(&mut visible.list, positions)
        }
    };
    checksum.add(sum);
}

/// Buffers of the local-vec run's mesher.
#[derive(Default)]
struct MeshBuffers {
    voxels: AVec<u8, Global>,
    mask: AVec<u8, Global>,
    quads: AVec<[u8; 6], Global>,
}

fn mesh_system(
    mode: Res<Mode>,
    scratch: Scratch,
    mut local: Local<MeshBuffers>,
    tick: Res<Tick>,
    checksum: Res<Checksum>,
) {
    let sum = match *mode {
        Mode::Arena => {
            let a = &*scratch;
            greedy_mesh(
                &mut AVec::new_in(a),
                &mut AVec::new_in(a),
                &mut AVec::new_in(a),
                tick.0,
            )
        }
        Mode::Heap => greedy_mesh(&mut AVec::new(), &mut AVec::new(), &mut AVec::new(), tick.0),
        Mode::LocalVec => {
            let MeshBuffers {
                voxels,
                mask,
                quads,
            } = &mut *local;
            greedy_mesh(voxels, mask, quads, tick.0)
        }
    };
    checksum.add(sum);
}

/// Buffers of the local-vec run's LOD sort.
#[derive(Default)]
struct LodBuffers {
    keys: AVec<(u32, u32), Global>,
    pos: AVec<[f32; 3], Global>,
}

fn lod_system(
    mode: Res<Mode>,
    scratch: Scratch,
    frames: Res<FrameMemory>,
    visible: Res<Visible>,
    mut local: Local<LodBuffers>,
    query: Query<&Pos>,
    checksum: Res<Checksum>,
) {
    let sum = match *mode {
        Mode::Arena => {
            let list = visible.handle.and_then(|h| frames.get(h)).unwrap_or(&[]);
            let pos = scratch.alloc_slice_from_iter(query.iter().map(|p| p.0));
            lod_sort(&mut AVec::new_in(&*scratch), list, pos)
        }
        Mode::Heap => {
            let pos: Vec<[f32; 3]> = query.iter().map(|p| p.0).collect();
            lod_sort(&mut AVec::new(), &visible.list, &pos)
        }
        Mode::LocalVec => {
            let LodBuffers { keys, pos } = &mut *local;
            keys.clear();
            pos.clear();
            pos.extend(query.iter().map(|p| p.0));
            lod_sort(keys, &visible.list, pos)
        }
    };
    checksum.add(sum);
}

// ------------------------------------------------------------------- the runs

/// One frame's figures.
struct FrameRecord {
    micros: f64,
    heap_allocations: u64,
    scratch_bytes: usize,
    frame_bytes: usize,
    checksum: u64,
}

/// A run's frames and its final memory figures.
struct RunRecord {
    mode: Mode,
    frames: Vec<FrameRecord>,
    stats: FrameMemoryStats,
}

const WARM_UP: usize = 60;

fn app(mode: Mode, entities: usize) -> App {
    let compute = TaskPoolThreadAssignmentPolicy {
        min_threads: 4,
        max_threads: 4,
        percent: 1.0,
        on_thread_spawn: None,
        on_thread_destroy: None,
    };
    let mut app = App::new();
    app.add_plugins(TaskPoolPlugin {
        task_pool_options: TaskPoolOptions {
            compute,
            ..Default::default()
        },
    })
    .add_plugins(MemoryPlugin::default())
    .insert_resource(mode)
    .init_resource::<Checksum>()
    .init_resource::<Tick>()
    .init_resource::<Visible>()
    .add_systems(Update, movement)
    // Culling, queries and meshing run in parallel; LOD sorting needs the visible list.
    .add_systems(
        PostUpdate,
        (
            spatial_system,
            mesh_system,
            cull_system,
            lod_system.after(cull_system),
        ),
    )
    .add_systems(
        Last,
        (|mut tick: ResMut<Tick>| tick.0 += 1).after(MemorySystems::Reset),
    );
    spawn(app.world_mut(), entities);
    app.finish();
    app.cleanup();
    app
}

/// Frames each run plays before the next run's turn: the three runs take turns, so that
/// the machine's drift (other processes, clock changes) falls on all three alike.
const TURN: usize = 50;

/// Plays one frame of `app`; returns its figures.
fn frame(app: &mut App) -> FrameRecord {
    let heap_before = HEAP_ALLOCATIONS.load(Ordering::Relaxed);
    let start = Instant::now();
    app.update();
    let micros = start.elapsed().as_secs_f64() * 1e6;
    let heap_allocations = HEAP_ALLOCATIONS.load(Ordering::Relaxed) - heap_before;
    let checksum = app
        .world()
        .resource::<Checksum>()
        .0
        .swap(0, Ordering::Relaxed);
    let stats = *app.world().resource::<FrameMemoryStats>();
    FrameRecord {
        micros,
        heap_allocations,
        scratch_bytes: stats.scratch_bytes,
        frame_bytes: stats.frame_bytes,
        checksum,
    }
}

/// The three runs, taking turns of `TURN` frames after their warm-up.
fn run_all(frames: usize, entities: usize) -> Vec<RunRecord> {
    let mut apps: Vec<(Mode, App, Vec<FrameRecord>)> = [Mode::Arena, Mode::Heap, Mode::LocalVec]
        .into_iter()
        .map(|mode| {
            let mut app = app(mode, entities);
            for _ in 0..WARM_UP {
                frame(&mut app);
            }
            (mode, app, Vec::with_capacity(frames))
        })
        .collect();
    while apps[0].2.len() < frames {
        for (_, app, records) in &mut apps {
            for _ in 0..TURN.min(frames - records.len()) {
                records.push(frame(app));
            }
        }
    }
    apps.into_iter()
        .map(|(mode, app, frames)| RunRecord {
            mode,
            frames,
            stats: *app.world().resource::<FrameMemoryStats>(),
        })
        .collect()
}

// ------------------------------------------------------------------- the report

struct Summary {
    mean: f64,
    p50: f64,
    p99: f64,
    max: f64,
    stddev: f64,
    heap_per_frame: f64,
}

fn summary(run: &RunRecord) -> Summary {
    let mut t: Vec<f64> = run.frames.iter().map(|f| f.micros).collect();
    t.sort_by(f64::total_cmp);
    let n = t.len() as f64;
    let mean = t.iter().sum::<f64>() / n;
    let at = |q: f64| t[((q * (n - 1.0)).round() as usize).min(t.len() - 1)];
    let var = t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    Summary {
        mean,
        p50: at(0.5),
        p99: at(0.99),
        max: t[t.len() - 1],
        stddev: var.sqrt(),
        heap_per_frame: run
            .frames
            .iter()
            .map(|f| f.heap_allocations as f64)
            .sum::<f64>()
            / n,
    }
}

fn kib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

fn write_csv(path: &std::path::Path, runs: &[RunRecord]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "frame,run,frame_time_us,heap_allocations,scratch_bytes,frame_bytes,checksum"
    )?;
    for run in runs {
        for (i, f) in run.frames.iter().enumerate() {
            writeln!(
                out,
                "{i},{},{:.1},{},{},{},{}",
                run.mode.name(),
                f.micros,
                f.heap_allocations,
                f.scratch_bytes,
                f.frame_bytes,
                f.checksum
            )?;
        }
    }
    out.flush()
}

/// The median of each window of `w` values ending at each index (shorter at the start).
fn rolling_median(values: &[f64], w: usize) -> Vec<f64> {
    (0..values.len())
        .map(|i| {
            let mut window = values[i.saturating_sub(w - 1)..=i].to_vec();
            window.sort_by(f64::total_cmp);
            window[window.len() / 2]
        })
        .collect()
}

fn plot(path: &std::path::Path, runs: &[RunRecord]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(420);
    let frames = runs.iter().map(|r| r.frames.len()).max().unwrap_or(1);
    let medians: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| {
            let ms: Vec<f64> = r.frames.iter().map(|f| f.micros / 1e3).collect();
            rolling_median(&ms, 25)
        })
        .collect();
    let top_ms = medians.iter().flatten().fold(0.0f64, |a, &b| a.max(b)) * 1.2;
    let colours = [BLUE, RED, GREEN];
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "frame time (rolling median of 25 frames)",
            ("sans-serif", 22),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0..frames, 0.0..top_ms)?;
    chart.configure_mesh().x_desc("frame").y_desc("ms").draw()?;
    for ((run, median), colour) in runs.iter().zip(&medians).zip(colours) {
        chart
            .draw_series(LineSeries::new(
                median.iter().enumerate().map(|(i, &ms)| (i, ms)),
                colour,
            ))?
            .label(run.mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    let arena = &runs[0];
    let top_kib = arena
        .frames
        .iter()
        .map(|f| (f.scratch_bytes + f.frame_bytes) as f64 / 1024.0)
        .fold(0.0f64, f64::max)
        * 1.1
        + 1.0;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("arena run: bytes per frame", ("sans-serif", 22))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0..frames, 0.0..top_kib)?;
    chart
        .configure_mesh()
        .x_desc("frame")
        .y_desc("KiB")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            arena
                .frames
                .iter()
                .enumerate()
                .map(|(i, f)| (i, f.scratch_bytes as f64 / 1024.0)),
            BLUE,
        ))?
        .label("Scratch (sum of arena peaks)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(
            arena
                .frames
                .iter()
                .enumerate()
                .map(|(i, f)| (i, f.frame_bytes as f64 / 1024.0)),
            MAGENTA,
        ))?
        .label("FrameMemory (stored for the next frame)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

fn flag(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got {v}"))
        })
}

fn main() {
    let frames = flag("--frames", 1_500).max(1);
    let entities = flag("--entities", 5_000).max(1);
    println!(
        "frame_loop: {frames} frames (after {WARM_UP} of warm-up), {entities} entities, 4 \
         compute threads; the same work three times, the runs taking turns of {TURN} frames"
    );
    let started = Instant::now();
    let runs = run_all(frames, entities);

    println!();
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>16}",
        "run", "mean", "p50", "p99", "max", "stddev", "heap allocs/frame"
    );
    let summaries: Vec<Summary> = runs.iter().map(summary).collect();
    for (run, s) in runs.iter().zip(&summaries) {
        let ms = |us: f64| format!("{:.3}ms", us / 1e3);
        println!(
            "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>16.1}",
            run.mode.name(),
            ms(s.mean),
            ms(s.p50),
            ms(s.p99),
            ms(s.max),
            ms(s.stddev),
            s.heap_per_frame
        );
    }
    let arena = &runs[0];
    let st = arena.stats;
    println!();
    println!(
        "arena run: Scratch {} per frame at the end (high watermark {}, {} arenas), \
         FrameMemory {} per frame (high watermark {})",
        kib(st.scratch_bytes),
        kib(st.scratch_high_watermark),
        st.scratch_arenas,
        kib(st.frame_bytes),
        kib(st.frame_high_watermark)
    );
    for p in st.pools.iter().filter(|p| !p.name.is_empty()) {
        println!(
            "           pool {:<8} {} in use of {} (high watermark {})",
            p.name,
            kib(p.in_use),
            kib(p.capacity),
            kib(p.high_watermark)
        );
    }
    println!(
        "           {} pool exhaustions, {} heap fallbacks",
        st.exhaustions_total, st.heap_fallbacks_total
    );

    let mismatch = runs[1..].iter().find_map(|other| {
        arena
            .frames
            .iter()
            .zip(&other.frames)
            .position(|(a, b)| a.checksum != b.checksum)
            .map(|f| (other.mode, f))
    });
    if let Some((mode, f)) = mismatch {
        eprintln!(
            "checksums differ: arena and {} runs disagree at frame {f}",
            mode.name()
        );
        std::process::exit(1);
    }
    println!("checksums: identical in the three runs, every frame");

    let (a, h, l) = (&summaries[0], &summaries[1], &summaries[2]);
    println!(
        "verdict: the arena run made {:.1} heap allocations per frame against {:.1} (heap) and \
         {:.1} (local-vec); its mean frame took {:.0}% of the heap run's and {:.0}% of the \
         local-vec run's, its p99 {:.0}% and {:.0}%",
        a.heap_per_frame,
        h.heap_per_frame,
        l.heap_per_frame,
        100.0 * a.mean / h.mean,
        100.0 * a.mean / l.mean,
        100.0 * a.p99 / h.p99,
        100.0 * a.p99 / l.p99
    );

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/frame_loop");
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| write_csv(&dir.join("frames.csv"), &runs))
        .map_err(|e| e.to_string())
        .and_then(|()| plot(&dir.join("frames.svg"), &runs).map_err(|e| e.to_string()));
    match written {
        Ok(()) => println!(
            "wrote {} and {} ({:.1} s in all)",
            dir.join("frames.csv").display(),
            dir.join("frames.svg").display(),
            started.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("could not write the CSV or the plot: {e}"),
    }
}
