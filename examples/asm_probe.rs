//! Code-generation probe for the arena's bump fast path.
//!
//! Each `probe_*` function is `#[inline(never)]` and allocates one `u64` (a small constant
//! layout), so its disassembly is the fast path plus a call to the slow path:
//!
//! ```text
//! cargo build --release --example asm_probe
//! objdump -d --no-show-raw-insn -C target/release/examples/asm_probe | grep -A40 '<asm_probe::probe_'
//! ```
//!
//! `w3_*` are W3's body (a `Vec<u32>` pushed through the allocator-api2 impls): the push
//! loop is 7 instructions for `&MemoryArena`, `&SharedArena` and the floor alike.
//! `asm_probe w3` times the three in alternating rounds; `asm_probe w3place` runs two
//! arenas of two pools and two floors (what memory placement does).
//!
//! `frame_*` run one W2 frame (1,000 allocations of 32 B, align 16, one byte written each,
//! then reset) for nebula and the peers; run under callgrind to count instructions per
//! allocation without timing noise:
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/examples/asm_probe
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep frame_
//! ```
//!
//! Timed experiments (each prints medians of alternating rounds, so machine drift cancels):
//! - `asm_probe w2`: W2 frames on nebula, on [`Proto`] (the fast path suggested for
//!   `MemoryArena::bump`, in its align-up and 16-byte-minimum-alignment forms), on bumpalo,
//!   as ratios to `limit`.
//! - `asm_probe w4`: W4 with std's `Vec` against allocator-api2's `Vec` on the same global
//!   allocator (the `Vec` implementation is not what makes glibc win W4).
//! - `asm_probe skew`: W4 on `limit` with 0/1/64/192 bytes skipped before every allocation:
//!   equal power-of-two buffers laid end to end alias in the L1/L2 sets.
//! - `asm_probe w5`: W5 frames on nebula, printing the pool operations the resets cause.
//! - `asm_probe w1reset`: `reset` after 1M allocations, with the block header cold (as in
//!   W1) and touched just before.
//! - `asm_probe w4nebula`: W4 on nebula, plain and with 64 bytes skipped before every moving
//!   grow of 2 KiB or more ([`Coloured`]), against std's `Vec` on glibc.

// Only `Limit` is used here.
#[allow(dead_code)]
#[path = "../benches/common/mod.rs"]
mod common;

use nebula_memory::Arena;
use std::alloc::Layout;
use std::hint::black_box;
use std::ptr::NonNull;

use bump_scope::traits::BumpAllocatorTyped;
use nebula_memory::{AllocError, MemoryArena, MemoryPool};

use common::Limit;

/// `MemoryArena::alloc` (panics on failure) for a `u64`.
#[inline(never)]
pub fn probe_nebula_alloc(arena: &MemoryArena<'_>) -> NonNull<u8> {
    arena.alloc(Layout::new::<u64>())
}

/// `MemoryArena::try_alloc` for a `u64`.
#[inline(never)]
pub fn probe_nebula_try_alloc(arena: &MemoryArena<'_>) -> Result<NonNull<u8>, AllocError> {
    arena.try_alloc(Layout::new::<u64>())
}

/// `MemoryArena::alloc` for a 32-byte, 16-aligned particle (W2's layout).
#[inline(never)]
pub fn probe_nebula_particle(arena: &MemoryArena<'_>) -> NonNull<u8> {
    arena.alloc(Layout::from_size_align(32, 16).unwrap_or(Layout::new::<[u128; 2]>()))
}

/// `MemoryArena::alloc` for a layout known only at run time (W5 draws the alignment per
/// allocation): one formula, no branch on the alignment.
#[inline(never)]
pub fn probe_nebula_dynamic(arena: &MemoryArena<'_>, layout: Layout) -> NonNull<u8> {
    arena.alloc(layout)
}

/// `SharedArena::alloc` (through `Deref`: the slot lookup, then the bump) for a `u64`.
#[inline(never)]
pub fn probe_shared_alloc(arena: &nebula_memory::SharedArena<'_>) -> NonNull<u8> {
    arena.alloc(Layout::new::<u64>())
}

/// bumpalo's `alloc_layout` for a `u64`.
#[inline(never)]
pub fn probe_bumpalo_alloc(bump: &bumpalo::Bump) -> NonNull<u8> {
    bump.alloc_layout(Layout::new::<u64>())
}

/// bump-scope's `allocate_layout` for a `u64`.
#[inline(never)]
pub fn probe_bump_scope_alloc(bump: &bump_scope::Bump) -> NonNull<u8> {
    bump.allocate_layout(Layout::new::<u64>())
}

/// The floor, for a `u64`.
#[inline(never)]
pub fn probe_limit_alloc(limit: &Limit) -> NonNull<u8> {
    limit.alloc(Layout::new::<u64>())
}

const PARTICLE: Layout = match Layout::from_size_align(32, 16) {
    Ok(l) => l,
    Err(_) => panic!("bad particle layout"),
};

/// One W2 frame on nebula.
#[inline(never)]
pub fn frame_nebula(arena: &mut MemoryArena<'_>) {
    for i in 0..1000 {
        let p = arena.alloc(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { p.as_ptr().write_volatile(i as u8) };
    }
    arena.reset();
}

/// One W2 frame on nebula through a `HotCursor`: the bump position stays in registers.
#[inline(never)]
pub fn frame_nebula_hot(arena: &mut MemoryArena<'_>) {
    let hot = arena.hot_cursor();
    for i in 0..1000 {
        let p = hot.alloc(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { p.as_ptr().write_volatile(i as u8) };
    }
    drop(hot);
    arena.reset();
}

/// One W2 frame on the floor.
#[inline(never)]
pub fn frame_limit(limit: &mut Limit) {
    for i in 0..1000 {
        let p = limit.alloc(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { p.as_ptr().write_volatile(i as u8) };
    }
    limit.reset();
}

/// One W2 frame on bumpalo.
#[inline(never)]
pub fn frame_bumpalo(bump: &mut bumpalo::Bump) {
    for i in 0..1000 {
        let p = bump.alloc_layout(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { p.as_ptr().write_volatile(i as u8) };
    }
    bump.reset();
}

/// One W2 frame on bump-scope.
#[inline(never)]
pub fn frame_bump_scope(bump: &mut bump_scope::Bump) {
    for i in 0..1000 {
        let p = bump.allocate_layout(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { p.as_ptr().write_volatile(i as u8) };
    }
    bump.reset();
}

/// Just `MemoryArena::reset` after one allocation (its fixed per-frame cost).
#[inline(never)]
pub fn reset_nebula(arena: &mut MemoryArena<'_>) {
    arena.alloc(PARTICLE);
    arena.reset();
}

fn main() {
    let pool = match MemoryPool::new("asm-probe", 16 << 20) {
        Ok(p) => p,
        Err(e) => panic!("cannot create the pool: {e}"),
    };
    let mut arena = MemoryArena::new(&pool);
    let mut limit = Limit::new(1 << 20);
    let mut bump = bumpalo::Bump::new();
    let mut scope = bump_scope::Bump::new();

    black_box(probe_nebula_alloc(black_box(&arena)));
    black_box(probe_nebula_try_alloc(black_box(&arena)).ok());
    black_box(probe_nebula_particle(black_box(&arena)));
    black_box(probe_nebula_dynamic(
        black_box(&arena),
        black_box(Layout::new::<u128>()),
    ));
    black_box(probe_bumpalo_alloc(black_box(&bump)));
    black_box(probe_bump_scope_alloc(black_box(&scope)));
    black_box(probe_limit_alloc(black_box(&limit)));
    let shared = nebula_memory::SharedArena::new(&pool);
    black_box(probe_shared_alloc(black_box(&shared)));
    black_box(w3_nebula(black_box(&arena), black_box(1000)));
    black_box(w3_shared(black_box(&shared), black_box(1000)));
    black_box(w3_limit(black_box(&limit), black_box(1000)));

    if let Some(which) = std::env::args()
        .nth(1)
        .and_then(|a| a.strip_prefix("w3:").map(String::from))
    {
        w3_one(&which);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w3place") {
        w3_placement();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w3") {
        w3_compare();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w1reset") {
        w1_reset();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w5") {
        w5_diag();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w2") {
        w2_compare();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w4nebula") {
        w4_nebula();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("skew") {
        w4_skew();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("w4") {
        w4_compare();
        return;
    }
    let frames = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100u32);
    let mut buf_a = vec![0u8; 1 << 20];
    let mut buf_b = vec![0u8; 1 << 20];
    let mut pa = Proto::<false>::new(&mut buf_a);
    let mut pb = Proto::<true>::new(&mut buf_b);
    for _ in 0..frames {
        frame_nebula(black_box(&mut arena));
        frame_nebula_hot(black_box(&mut arena));
        frame_limit(black_box(&mut limit));
        frame_bumpalo(black_box(&mut bump));
        frame_bump_scope(black_box(&mut scope));
        frame_proto(black_box(&mut pa));
        frame_proto(black_box(&mut pb));
        reset_nebula(black_box(&mut arena));
    }
    println!("{}", arena.stats());
}

/// W4 body with std's `Vec` (global allocator: glibc).
#[inline(never)]
pub fn w4_std() -> u64 {
    let mut vecs: [Vec<u64>; 64] = std::array::from_fn(|_| Vec::new());
    for j in 0..1000 {
        for v in &mut vecs {
            v.push(j as u64);
        }
    }
    black_box(&vecs);
    vecs.iter().map(|v| v[999]).sum()
}

/// W4 body with allocator-api2's `Vec` over the same global allocator.
#[inline(never)]
pub fn w4_a2() -> u64 {
    let mut vecs: [allocator_api2::vec::Vec<u64>; 64] =
        std::array::from_fn(|_| allocator_api2::vec::Vec::new());
    for j in 0..1000 {
        for v in &mut vecs {
            v.push(j as u64);
        }
    }
    black_box(&vecs);
    vecs.iter().map(|v| v[999]).sum()
}

/// `asm_probe w4`.
pub fn w4_compare() {
    for _ in 0..3 {
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_std());
        }
        let a = t.elapsed() / 100;
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_a2());
        }
        let b = t.elapsed() / 100;
        println!("W4 std Vec {a:?}, allocator_api2 Vec (Global) {b:?}");
    }
}

/// `Limit` whose moving grows skip `skew` bytes first (breaks power-of-two strides).
#[derive(Clone, Copy)]
pub struct Skewed<'a>(&'a Limit, usize);

// SAFETY: forwards to `Limit`; the skew only leaves unused bytes between allocations.
unsafe impl allocator_api2::alloc::Allocator for Skewed<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        self.0
            .alloc(Layout::from_size_align(self.1, 1).unwrap_or(layout));
        Ok(NonNull::slice_from_raw_parts(
            self.0.alloc(layout),
            layout.size(),
        ))
    }
    unsafe fn deallocate(&self, _ptr: NonNull<u8>, _layout: Layout) {}
}

/// W4 body on any allocator-api2 allocator.
#[inline(never)]
pub fn w4_in<A: allocator_api2::alloc::Allocator + Copy>(a: A) -> u64 {
    let mut vecs: [allocator_api2::vec::Vec<u64, A>; 64] =
        std::array::from_fn(|_| allocator_api2::vec::Vec::new_in(a));
    for j in 0..1000 {
        for v in &mut vecs {
            v.push(j as u64);
        }
    }
    black_box(&vecs);
    vecs.iter().map(|v| v[999]).sum()
}

/// `asm_probe skew`.
pub fn w4_skew() {
    let mut limit = Limit::new(64 << 20);
    for skew in [0usize, 1, 64, 192] {
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_in(Skewed(&limit, skew)));
            limit.reset();
        }
        println!("W4 limit, skew {skew:>3}: {:?}", t.elapsed() / 100);
    }
    let t = std::time::Instant::now();
    for _ in 0..100 {
        black_box(w4_std());
    }
    println!("W4 std Vec (glibc): {:?}", t.elapsed() / 100);
}

/// `&MemoryArena` whose moving grows of 2 KiB or more first skip one cache line.
#[derive(Clone, Copy)]
pub struct Coloured<'a, 'p>(&'a MemoryArena<'p>);

// SAFETY: fresh arena memory for every allocation; grows copy into fresh memory.
unsafe impl allocator_api2::alloc::Allocator for Coloured<'_, '_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        allocator_api2::alloc::Allocator::allocate(&self.0, layout)
    }
    unsafe fn deallocate(&self, _ptr: NonNull<u8>, _layout: Layout) {}
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        if new.size() >= 2048 {
            self.0.alloc(Layout::new::<[u8; 64]>());
        }
        let q = self.0.alloc(new);
        // SAFETY: fresh, disjoint.
        unsafe {
            q.as_ptr()
                .copy_from_nonoverlapping(ptr.as_ptr(), old.size())
        };
        Ok(NonNull::slice_from_raw_parts(q, new.size()))
    }
}

/// `asm_probe w4nebula`.
pub fn w4_nebula() {
    let pool = MemoryPool::new("w4", 64 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    for round in 0..2 {
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_in(&arena));
            arena.reset();
        }
        let a = t.elapsed() / 100;
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_in(Coloured(&arena)));
            arena.reset();
        }
        let b = t.elapsed() / 100;
        let t = std::time::Instant::now();
        for _ in 0..100 {
            black_box(w4_std());
        }
        let c = t.elapsed() / 100;
        println!(
            "round {round}: W4 nebula {a:?}, nebula + 64 B colouring on moving grows {b:?}, std Vec (glibc) {c:?}"
        );
    }
}

/// A stand-in for `MemoryArena` with the suggested fast path: `ptr`/`end` in `Cell`s as
/// in the arena, a slow path that returns (not `!`), and for `align <= 16` (block ends are
/// 16-aligned, so aligning up never passes `end`) align up, subtract, compare, add.
/// With `MIN16`, `ptr` is kept 16-aligned by rounding sizes up (bump-scope's `MIN_ALIGN`).
pub struct Proto<const MIN16: bool> {
    ptr: std::cell::Cell<*mut u8>,
    end: std::cell::Cell<*mut u8>,
    base: *mut u8,
}

impl<const MIN16: bool> Proto<MIN16> {
    fn new(buf: &mut [u8]) -> Self {
        let base = buf.as_mut_ptr();
        let off = base.align_offset(16);
        let len = (buf.len() - off) & !15;
        // SAFETY: inside `buf`.
        let (b, e) = unsafe { (base.add(off), base.add(off + len)) };
        Proto {
            ptr: std::cell::Cell::new(b),
            end: std::cell::Cell::new(e),
            base: b,
        }
    }

    /// The suggested fast path.
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> NonNull<u8> {
        let ptr = self.ptr.get();
        let end = self.end.get().addr();
        if MIN16 && layout.align() <= 16 {
            let size = (layout.size() + 15) & !15;
            if size <= end - ptr.addr() {
                self.ptr.set(ptr.wrapping_add(size));
                // SAFETY: inside the buffer, non-null.
                return unsafe { NonNull::new_unchecked(ptr) };
            }
        } else if layout.align() <= 16 {
            let start = (ptr.addr() + (layout.align() - 1)) & !(layout.align() - 1);
            if layout.size() <= end - start {
                self.ptr.set(ptr.with_addr(start + layout.size()));
                // SAFETY: inside the buffer, non-null.
                return unsafe { NonNull::new_unchecked(ptr.with_addr(start)) };
            }
        }
        self.slow(layout)
    }

    #[cold]
    #[inline(never)]
    fn slow(&self, layout: Layout) -> NonNull<u8> {
        // Stands for "take a new block": start over (never reached in the probe).
        self.ptr.set(self.base);
        let p = self.ptr.get();
        self.ptr.set(p.wrapping_add(layout.size()));
        NonNull::new(p).unwrap_or(NonNull::dangling())
    }

    /// Everything is free again.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.ptr.set(self.base);
    }
}

/// Fast path of the suggested `bump` (align-up form), for a `u64`.
#[inline(never)]
pub fn probe_proto_alloc(p: &Proto<false>) -> NonNull<u8> {
    p.alloc(Layout::new::<u64>())
}

/// Fast path of the suggested `bump` (16-byte minimum alignment form), for a `u64`.
#[inline(never)]
pub fn probe_proto16_alloc(p: &Proto<true>) -> NonNull<u8> {
    p.alloc(Layout::new::<u64>())
}

/// One W2 frame on the prototype.
#[inline(never)]
pub fn frame_proto<const MIN16: bool>(p: &mut Proto<MIN16>) {
    for i in 0..1000 {
        let q = p.alloc(PARTICLE);
        // SAFETY: a fresh 32-byte allocation.
        unsafe { q.as_ptr().write_volatile(i as u8) };
    }
    p.reset();
}

fn time_frames<S>(s: &mut S, f: fn(&mut S)) -> std::time::Duration {
    let t = std::time::Instant::now();
    for _ in 0..2000 {
        f(black_box(&mut *s));
    }
    t.elapsed()
}

/// `asm_probe w2`.
pub fn w2_compare() {
    let pool = MemoryPool::new("w2", 16 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let mut limit = Limit::new(1 << 20);
    let mut bump = bumpalo::Bump::new();
    let mut buf_a = vec![0u8; 1 << 20];
    let mut buf_b = vec![0u8; 1 << 20];
    let mut pa = Proto::<false>::new(&mut buf_a);
    let mut pb = Proto::<true>::new(&mut buf_b);
    let mut r: [Vec<f64>; 5] = Default::default();
    for _ in 0..31 {
        let l = time_frames(&mut limit, frame_limit).as_secs_f64();
        r[0].push(time_frames(&mut arena, frame_nebula).as_secs_f64() / l);
        r[1].push(time_frames(&mut pa, frame_proto).as_secs_f64() / l);
        black_box(probe_proto_alloc(black_box(&pa)));
        black_box(probe_proto16_alloc(black_box(&pb)));
        pa.reset();
        pb.reset();
        r[2].push(time_frames(&mut pb, frame_proto).as_secs_f64() / l);
        r[3].push(time_frames(&mut bump, frame_bumpalo).as_secs_f64() / l);
        r[4].push(l / 2000.0 * 1e6);
    }
    for v in &mut r {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "W2 frame, median ratio to limit over 31 rounds: nebula {:.3}, proto align-up {:.3}, \
         proto min-align-16 {:.3}, bumpalo {:.3}; limit {:.3} µs/frame",
        r[0][15], r[1][15], r[2][15], r[3][15], r[4][15]
    );
}

/// `asm_probe w5`: W5-like frames (200 allocations of 16..=4096 B, align 8..=64, and 10
/// strings) on nebula; reports the pool operations and block count the resets cause.
pub fn w5_diag() {
    let pool = MemoryPool::new("w5", 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let mut rng = common::SplitMix64(0x5EED_0000_0000_0001 ^ 5);
    let frames: Vec<Vec<(Layout, bool)>> = (0..32)
        .map(|_| {
            let mut ops = Vec::new();
            for i in 0..200 {
                let size = rng.range(16, 4096);
                let align = 8 << rng.range(0, 3);
                ops.push((
                    Layout::from_size_align(size, align).unwrap_or(PARTICLE),
                    false,
                ));
                if i % 20 == 19 {
                    ops.push((
                        Layout::from_size_align(rng.range(20, 200), 1).unwrap_or(PARTICLE),
                        true,
                    ));
                }
            }
            ops
        })
        .collect();
    let text = "x".repeat(200);
    let mut last = pool.stats();
    for batch in 0..20 {
        let t = std::time::Instant::now();
        for f in 0..128 {
            for &(l, is_str) in &frames[f % 32] {
                if is_str {
                    black_box(arena.alloc_str(&text[..l.size()]));
                } else {
                    let p = arena.alloc(l);
                    // SAFETY: fresh allocation of >= 16 bytes.
                    unsafe { p.as_ptr().write_volatile(1) };
                }
            }
            arena.reset();
        }
        let el = t.elapsed() / 128;
        let s = pool.stats();
        println!(
            "batch {batch:>2}: {el:?}/frame, pool allocations +{}, frees +{}, blocks held {}, bytes held {}",
            s.allocations - last.allocations,
            s.frees - last.frees,
            arena.block_count(),
            arena.bytes_held()
        );
        last = s;
    }
}

/// `asm_probe w1reset`: time of `reset` after 1M small allocations, with and without the
/// current block's header touched (through `trim_spares`) just before.
pub fn w1_reset() {
    let pool = MemoryPool::new("w1", 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let mut rng = common::SplitMix64(1);
    let sizes: Vec<usize> = (0..1_000_000).map(|_| rng.range(8, 128)).collect();
    let fill = |arena: &MemoryArena<'_>| {
        for (i, &s) in sizes.iter().enumerate() {
            let p = arena.alloc(Layout::from_size_align(s, 8).unwrap_or(PARTICLE));
            // SAFETY: fresh allocation.
            unsafe { p.as_ptr().write_volatile(i as u8) };
        }
    };
    for _ in 0..3 {
        fill(&arena);
        arena.reset();
    }
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        fill(&arena);
        let t = std::time::Instant::now();
        arena.reset();
        cold.push(t.elapsed());
        fill(&arena);
        arena.trim_spares();
        let t = std::time::Instant::now();
        arena.reset();
        warm.push(t.elapsed());
    }
    cold.sort();
    warm.sort();
    println!(
        "W1 reset after 1M allocations: {:?} (median), {:?} with the block header touched first; {} block(s)",
        cold[7],
        warm[7],
        arena.block_count()
    );
}

/// W3's body (a `Vec<u32>` pushed to `n` through the allocator-api2 impl) on `&MemoryArena`.
#[inline(never)]
pub fn w3_nebula(arena: &MemoryArena<'_>, n: usize) -> u32 {
    let mut v = allocator_api2::vec::Vec::new_in(arena);
    for i in 0..n {
        v.push(i as u32);
    }
    black_box(v.as_ptr());
    v[n / 2]
}

/// W3's body on `&SharedArena`.
#[inline(never)]
pub fn w3_shared(arena: &nebula_memory::SharedArena<'_>, n: usize) -> u32 {
    let mut v = allocator_api2::vec::Vec::new_in(arena);
    for i in 0..n {
        v.push(i as u32);
    }
    black_box(v.as_ptr());
    v[n / 2]
}

/// W3's body on the floor.
#[inline(never)]
pub fn w3_limit(limit: &Limit, n: usize) -> u32 {
    let mut v = allocator_api2::vec::Vec::new_in(limit);
    for i in 0..n {
        v.push(i as u32);
    }
    black_box(v.as_ptr());
    v[n / 2]
}

/// Minor page faults of this process so far (0 where the OS does not count them).
fn minflt() -> i64 {
    #[cfg(unix)]
    // SAFETY: `getrusage` fills the zeroed struct we pass.
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut r);
        r.ru_minflt
    }
    #[cfg(not(unix))]
    0
}

/// W3 on `&MemoryArena`, on `&SharedArena` and on the floor, in alternating rounds: median
/// ns per push of each and the page faults per run.
pub fn w3_compare() {
    const N: usize = 1_000_000;
    const RUNS: u32 = 4;
    let pool = MemoryPool::new("w3", 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    let pool2 = MemoryPool::new("w3s", 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let mut shared = nebula_memory::SharedArena::new(&pool2);
    let mut limit = Limit::new(256 << 20);
    let mut t = [Vec::new(), Vec::new(), Vec::new()];
    let mut faults = [0i64; 3];
    for round in 0..41 {
        for k in 0..3 {
            let which = (k + round) % 3;
            let f0 = minflt();
            let t0 = std::time::Instant::now();
            for _ in 0..RUNS {
                match which {
                    0 => {
                        black_box(w3_nebula(black_box(&arena), N));
                        arena.reset();
                    }
                    1 => {
                        black_box(w3_shared(black_box(&shared), N));
                        shared.reset();
                    }
                    _ => {
                        black_box(w3_limit(black_box(&limit), N));
                        limit.reset();
                    }
                }
            }
            let d = t0.elapsed().as_secs_f64() * 1e9 / (RUNS as f64 * N as f64);
            if round > 0 {
                t[which].push(d);
                faults[which] += minflt() - f0;
            }
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, s, l) = (med(&mut t[0]), med(&mut t[1]), med(&mut t[2]));
    let runs = 40.0 * RUNS as f64;
    println!(
        "W3 ns/push: nebula {a:.3} ({:.2}x, {:.0} faults/run)  shared {s:.3} ({:.2}x, {:.0} faults/run)  limit {l:.3} ({:.0} faults/run)",
        a / l,
        faults[0] as f64 / runs,
        s / l,
        faults[1] as f64 / runs,
        faults[2] as f64 / runs
    );
    println!("{}", arena.stats());
    println!("{}", shared.stats());
}

/// 400 W3 runs on one contender (`w3:nebula`, `w3:shared`, `w3:limit`), for `perf stat`.
pub fn w3_one(which: &str) {
    const N: usize = 1_000_000;
    let pool = MemoryPool::new("w3", 256 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut arena = MemoryArena::new(&pool);
    let mut shared = nebula_memory::SharedArena::new(&pool);
    let mut limit = Limit::new(256 << 20);
    let f0 = minflt();
    let t0 = std::time::Instant::now();
    let mut lap = std::time::Instant::now();
    let mut laps = Vec::new();
    for _ in 0..400 {
        laps.push(lap.elapsed().as_secs_f64() * 1e9 / N as f64);
        lap = std::time::Instant::now();
        match which {
            "nebula" => {
                black_box(w3_nebula(black_box(&arena), N));
                arena.reset();
            }
            "shared" => {
                black_box(w3_shared(black_box(&shared), N));
                shared.reset();
            }
            _ => {
                black_box(w3_limit(black_box(&limit), N));
                limit.reset();
            }
        }
    }
    println!(
        "{which}: {:.3} ns/push, {} faults; laps {:.3?}",
        t0.elapsed().as_secs_f64() * 1e9 / (400.0 * N as f64),
        minflt() - f0,
        &laps[1..12]
    );
}

/// W3 on two arenas of two pools and two floors, alternating: does the memory decide?
pub fn w3_placement() {
    const N: usize = 1_000_000;
    let pools: Vec<MemoryPool> = (0..2)
        .map(|_| MemoryPool::new("w3p", 256 << 20).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let mut arenas: Vec<MemoryArena<'_>> = pools.iter().map(MemoryArena::new).collect();
    let mut limits: Vec<Limit> = (0..2).map(|_| Limit::new(256 << 20)).collect();
    let mut t = vec![Vec::new(); 4];
    for round in 0..31 {
        for k in 0..4 {
            let which = (k + round) % 4;
            let t0 = std::time::Instant::now();
            for _ in 0..4 {
                if which < 2 {
                    black_box(w3_nebula(black_box(&arenas[which]), N));
                    arenas[which].reset();
                } else {
                    black_box(w3_limit(black_box(&limits[which - 2]), N));
                    limits[which - 2].reset();
                }
            }
            t[which].push(t0.elapsed().as_secs_f64() * 1e9 / (4.0 * N as f64));
        }
    }
    let meds: Vec<f64> = t
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    println!(
        "W3 ns/push: nebula A {:.3} B {:.3}  limit A {:.3} B {:.3}",
        meds[0], meds[1], meds[2], meds[3]
    );
}
