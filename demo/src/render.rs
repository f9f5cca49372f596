//! The render side of the frame's work, written once for every run: frustum culling, LOD
//! sorting and the meshing of the voxel chunks that stream in.

use nebula_memory::allocator_api2::alloc::Allocator;
use nebula_memory::allocator_api2::vec::Vec as AVec;

use crate::workload::{CHUNK, LOD_KEPT, WORLD, mix};

/// The camera at the world's centre, looking along +x with a 90-degree cone.
fn visible(p: [f32; 3]) -> bool {
    let d = p.map(|x| x - WORLD / 2.0);
    let len2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    d[0] > 0.0 && d[0] * d[0] >= 0.5 * len2
}

/// Frustum culling: the ids of the visible entities. Returns a checksum.
pub fn cull<A: Allocator>(
    out: &mut AVec<u32, A>,
    items: impl Iterator<Item = (u32, [f32; 3])>,
) -> u64 {
    out.extend(items.filter(|(_, p)| visible(*p)).map(|(id, _)| id));
    out.iter().map(|&i| u64::from(i)).sum::<u64>() ^ (out.len() as u64) << 32
}

/// LOD priority: the visible entities by distance to the camera, nearest first; the
/// checksum covers the order of the first `LOD_KEPT`. `pos` is indexed by id.
pub fn lod_sort<A: Allocator>(
    keys: &mut AVec<(u32, u32), A>,
    visible: &[u32],
    pos: &[[f32; 3]],
) -> u64 {
    keys.extend(visible.iter().map(|&i| {
        let p = pos[i as usize];
        let d: f32 = p.iter().map(|x| (x - WORLD / 2.0).powi(2)).sum();
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

const VOXELS: usize = CHUNK * CHUNK * CHUNK;

/// Streams `count` chunks in, starting with chunk `first`, decoding `batch` chunks at once
/// into `voxels` (1 in a usual frame; a whole region at a spike) and meshing each into
/// quads, which all go into one upload list, `quads`. Returns a checksum.
pub fn stream_chunks<A: Allocator>(
    voxels: &mut AVec<u8, A>,
    mask: &mut AVec<u8, A>,
    quads: &mut AVec<[u8; 6], A>,
    first: u64,
    count: usize,
    batch: usize,
) -> u64 {
    let mut sum = 0u64;
    let mut chunk = first;
    while chunk < first + count as u64 {
        let n = batch.min((first + count as u64 - chunk) as usize);
        voxels.clear();
        for c in chunk..chunk + n as u64 {
            decode(voxels, c);
        }
        for (k, chunk_voxels) in voxels.chunks(VOXELS).enumerate() {
            let before = quads.len();
            greedy_mesh(chunk_voxels, mask, quads);
            let area: u64 = quads[before..]
                .iter()
                .map(|q| u64::from(q[3]) * u64::from(q[5]))
                .sum();
            let id = chunk + k as u64;
            sum = sum.wrapping_add((area << 20 | (quads.len() - before) as u64) ^ mix(id));
        }
        chunk += n as u64;
    }
    sum
}

/// A chunk's voxels: terrain from a hash of position and chunk, with scattered holes.
fn decode<A: Allocator>(voxels: &mut AVec<u8, A>, chunk: u64) {
    voxels.extend((0..VOXELS).map(|i| {
        let (x, y, z) = (i % CHUNK, (i / CHUNK) % CHUNK, i / (CHUNK * CHUNK));
        let height = 4 + (mix(chunk * 977 + (x * CHUNK + z) as u64) % 9) as usize;
        u8::from(y < height || mix(chunk ^ i as u64).is_multiple_of(23))
    }));
}

/// Greedy meshing of the faces pointing up (+y): for each layer, a mask of exposed faces,
/// merged greedily into quads pushed on `quads`.
fn greedy_mesh<A: Allocator>(voxels: &[u8], mask: &mut AVec<u8, A>, quads: &mut AVec<[u8; 6], A>) {
    let at = |x: usize, y: usize, z: usize| voxels[x + CHUNK * (y + CHUNK * z)];
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
}
