//! What the demo's systems share besides the work: the run's mode, the frame's tick, and
//! where each system reports (its checksum, the capacity the local-vec run keeps, what the
//! work needed), gathered in the [`Frame`] system parameter.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use nebula_memory::allocator_api2::alloc::Allocator;
use nebula_memory::allocator_api2::vec::Vec as AVec;

use crate::workload::is_spike;

/// Where the temporaries of a run live.
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Arena,
    Heap,
    LocalVec,
}

/// The frame's checksum: every system adds its own (wrapping), so the order in which the
/// parallel systems finish does not matter.
#[derive(Resource, Default)]
pub struct Checksum(pub AtomicU64);

impl Checksum {
    pub fn add(&self, value: u64) {
        self.0.fetch_add(value, Relaxed);
    }
}

/// Frames played so far (drives the spikes and the chunks streamed).
#[derive(Resource, Default)]
pub struct Tick(pub u64);

/// Bytes of capacity the local-vec run's buffers keep, one figure per system.
#[derive(Resource, Default)]
pub struct LocalHeld(pub [AtomicUsize; 4]);

/// What each part of the frame's work needed for its temporaries this frame, in bytes of
/// the data they held (lengths, not capacities, so the figures are the same in every run):
/// see [`NEEDS`]. The neighbour lists count every entity's list once.
#[derive(Resource, Default)]
pub struct Needs(pub [AtomicUsize; NEEDS.len()]);

/// The parts of [`Needs`].
pub const NEEDS: [&str; 6] = [
    "physics: grid",
    "physics: contact pairs",
    "physics: neighbour lists",
    "culling: visible list",
    "LOD sorting",
    "streaming",
];

impl Needs {
    pub fn set(&self, part: usize, bytes: usize) {
        self.0[part].store(bytes, Relaxed);
    }
}

/// The bytes of data `v` holds.
pub fn len_bytes<T, A: Allocator>(v: &AVec<T, A>) -> usize {
    v.len() * size_of::<T>()
}

/// The bytes of capacity `v` keeps.
pub fn bytes<T, A: Allocator>(v: &AVec<T, A>) -> usize {
    v.capacity() * size_of::<T>()
}

/// What every system reads besides its own work: the run's mode, the frame's tick, and
/// where it reports its checksum, the capacity the local-vec run keeps and what the work
/// needed.
#[derive(SystemParam)]
pub struct Frame<'w> {
    pub mode: Res<'w, Mode>,
    pub tick: Res<'w, Tick>,
    pub checksum: Res<'w, Checksum>,
    pub held: Res<'w, LocalHeld>,
    pub needs: Res<'w, Needs>,
}

impl Frame<'_> {
    pub fn spike(&self) -> bool {
        is_spike(self.tick.0)
    }

    /// The local-vec run's capacity kept by `system`.
    pub fn keep(&self, system: usize, bytes: usize) {
        self.held.0[system].store(bytes, Relaxed);
    }
}
