//! The work of a frame, written once: every function takes its temporaries as collections
//! over some allocator, so the three runs do exactly the same work and differ only in
//! where the temporaries live.
//!
//! A voxel game's frame: entities move; a spatial grid of them is built; each entity
//! gathers its neighbours into a list of its own (in `par_iter`, on the compute threads)
//! and steers away from the nearest; contact pairs are collected for the physics; the
//! frustum is culled and the visible entities sorted by LOD distance; a few voxel chunks
//! stream in and are meshed.
//!
//! Every [`SPIKE_EVERY`] frames comes a **spike frame**: an explosion (neighbour and
//! contact queries reach [`BLAST`] times further) and a region streaming in (its
//! [`REGION`] chunks decoded and held at once, one upload list for all their quads). The
//! two systems it hits need 50-100 times their usual temporaries then: physics about 55
//! times (its neighbour lists about 58, its contact pairs about 94 times; the grid does
//! not grow), streaming about 61 times (the demo prints these figures for every run).

use bevy_ecs::prelude::*;
use nebula_memory::allocator_api2::alloc::Allocator;
use nebula_memory::allocator_api2::vec::Vec as AVec;

pub const WORLD: f32 = 66.0;
pub const CELL: f32 = 6.0;
pub const CELLS: i32 = 11;
/// Neighbour radius of the steering query.
pub const FLOCK_RADIUS: f32 = 6.0;
/// Contact radius of the physics pairs.
pub const CONTACT_RADIUS: f32 = 3.0;
/// How much further queries reach in a spike frame: with the world's walls clipping the
/// larger spheres, about 58 times the neighbours and 94 times the contact pairs.
pub const BLAST: f32 = 4.4;
/// Nearest neighbours an entity steers by.
pub const NEAREST: usize = 8;
/// A spike frame every this many frames (the first halfway through).
pub const SPIKE_EVERY: u64 = 250;
/// Frames after a spike at which its memory is looked at again.
pub const AFTER: usize = 120;
pub const CHUNK: usize = 16;
/// Chunks streamed in a usual frame, one at a time.
pub const CHUNKS_PER_FRAME: usize = 16;
/// Chunks of the region that streams in at a spike, decoded and held at once.
pub const REGION: usize = 320;
/// Visible entities whose LOD order the checksum covers.
pub const LOD_KEPT: usize = 256;

/// Whether frame `tick` (counted from the app's first) is a spike frame.
pub fn is_spike(tick: u64) -> bool {
    tick % SPIKE_EVERY == SPIKE_EVERY / 2
}

#[derive(Component, Clone, Copy)]
pub struct Id(pub u32);

#[derive(Component, Clone, Copy)]
pub struct Pos(pub [f32; 3]);

#[derive(Component, Clone, Copy)]
pub struct Vel(pub [f32; 3]);

/// An entity's steering result, the checksum of its neighbour list and the list's length.
#[derive(Component, Clone, Copy, Default)]
pub struct Steer {
    pub v: [f32; 3],
    pub hash: u64,
    pub near: u32,
}

/// SplitMix64: a tiny fixed-seed generator.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(seed: u64) -> f32 {
    (mix(seed) >> 40) as f32 / (1u64 << 24) as f32
}

pub fn spawn(world: &mut World, entities: usize) {
    world.spawn_batch((0..entities as u64).map(|i| {
        let p = [0, 1, 2].map(|k| unit(i * 6 + k) * WORLD);
        let v = [3, 4, 5].map(|k| unit(i * 6 + k) * 2.0 - 1.0);
        (Id(i as u32), Pos(p), Vel(v), Steer::default())
    }));
}

/// Moves every entity by a fixed step (plus its steering), bouncing off the walls.
pub fn movement(mut query: Query<(&mut Pos, &mut Vel, &Steer)>) {
    query.par_iter_mut().for_each(|(mut p, mut v, s)| {
        for k in 0..3 {
            v.0[k] = (v.0[k] + s.v[k] * 0.01).clamp(-1.0, 1.0);
            p.0[k] += v.0[k] * 0.25;
            if !(0.0..WORLD).contains(&p.0[k]) {
                v.0[k] = -v.0[k];
                p.0[k] = p.0[k].clamp(0.0, WORLD - 0.001);
            }
        }
    });
}

fn cell_xyz(p: [f32; 3]) -> [i32; 3] {
    p.map(|x| ((x / CELL) as i32).clamp(0, CELLS - 1))
}

fn cell_index(c: [i32; 3]) -> usize {
    ((c[0] * CELLS + c[1]) * CELLS + c[2]) as usize
}

/// One grid entry: cell, entity id, position.
pub type Entry = (u32, u32, [f32; 3]);

/// Builds the grid: entries sorted by cell, and where each cell's entries start.
pub fn build_grid<A: Allocator, B: Allocator>(
    entries: &mut AVec<Entry, A>,
    starts: &mut AVec<u32, B>,
    items: impl Iterator<Item = (u32, [f32; 3])>,
) {
    entries.extend(items.map(|(id, p)| (cell_index(cell_xyz(p)) as u32, id, p)));
    entries.sort_unstable_by_key(|e| (e.0, e.1));
    let cells = (CELLS * CELLS * CELLS) as usize;
    starts.extend((0..=cells).map(|c| entries.partition_point(|e| (e.0 as usize) < c) as u32));
}

/// The grid, borrowed: plain slices, so `par_iter` closures on every thread can share it.
#[derive(Clone, Copy)]
pub struct Grid<'a> {
    pub entries: &'a [Entry],
    pub starts: &'a [u32],
}

impl Grid<'_> {
    /// Calls `f(id, position, squared distance)` for each entity within `radius` of `at`.
    fn near(&self, at: [f32; 3], radius: f32, mut f: impl FnMut(u32, [f32; 3], f32)) {
        let lo = cell_xyz(at.map(|x| x - radius));
        let hi = cell_xyz(at.map(|x| x + radius));
        for x in lo[0]..=hi[0] {
            for y in lo[1]..=hi[1] {
                let from = self.starts[cell_index([x, y, lo[2]])] as usize;
                let to = self.starts[cell_index([x, y, hi[2]]) + 1] as usize;
                for &(_, id, p) in &self.entries[from..to] {
                    let d2: f32 = (0..3).map(|k| (p[k] - at[k]).powi(2)).sum();
                    if d2 <= radius * radius {
                        f(id, p, d2);
                    }
                }
            }
        }
    }
}

/// A neighbour in an entity's list: squared distance (as bits, for a total order), id,
/// position.
pub type Near = (u32, u32, [f32; 3]);

/// One entity's steering: its neighbours within `radius` gathered in `list` (the per-entity
/// temporary); it steers away from the `NEAREST`. Returns the steering
/// and a checksum of the list.
pub fn steer_one<A: Allocator>(
    list: &mut AVec<Near, A>,
    grid: Grid<'_>,
    id: u32,
    at: [f32; 3],
    radius: f32,
) -> Steer {
    list.clear();
    grid.near(at, radius, |other, p, d2| {
        if other != id {
            list.push((d2.to_bits(), other, p));
        }
    });
    // The nearest first: a partial selection, then those few sorted.
    let key = |n: &Near| (n.0, n.1);
    let nearest = list.len().min(NEAREST);
    if list.len() > NEAREST {
        list.select_nth_unstable_by_key(NEAREST, key);
    }
    list[..nearest].sort_unstable_by_key(key);
    let mut v = [0.0f32; 3];
    let mut hash = list.len() as u64;
    for (rank, &(_, other, p)) in list.iter().take(NEAREST).enumerate() {
        for k in 0..3 {
            v[k] += (at[k] - p[k]) / (rank as f32 + 1.0);
        }
        hash = hash.wrapping_add(mix(u64::from(other) + rank as u64));
    }
    Steer {
        v,
        hash,
        near: list.len() as u32,
    }
}

/// Contact pairs `(a, b)`, `a < b`, closer than `radius`, sorted. Returns a checksum.
pub fn contacts<A: Allocator>(pairs: &mut AVec<(u32, u32), A>, grid: Grid<'_>, radius: f32) -> u64 {
    for &(_, a, p) in grid.entries {
        grid.near(p, radius, |b, _, _| {
            if a < b {
                pairs.push((a, b));
            }
        });
    }
    pairs.sort_unstable();
    pairs.iter().fold(pairs.len() as u64, |h, &(a, b)| {
        h.wrapping_mul(31)
            .wrapping_add(u64::from(a) << 32 | u64::from(b))
    })
}
