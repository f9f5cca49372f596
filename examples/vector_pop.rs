//! Vectors resized at the top of an arena: the LIFO pop that makes arena vectors cheap.
//!
//! An immediate-mode UI rebuilds its draw lists every frame, growing vectors whose final
//! size nobody knows in advance. In a bump arena, growing a buffer by allocating a bigger
//! one and copying would leave every old buffer behind until the reset: a vector that ends
//! at N elements would cost about 2N of arena memory. `MemoryArena` instead grows and
//! shrinks the *top* allocation in place, and a buffer given back while it is the top is
//! popped (its bytes reused at once). This example shows the three cases.
//!
//! Run with `cargo run --release --example vector_pop`.

use std::alloc::Layout;

use allocator_api2::vec::Vec as AVec;
use nebula_memory::{MemoryArena, MemoryPool};

#[derive(Clone, Copy)]
#[allow(dead_code)] // the fields are the point of the layout, not read back
struct Vertex {
    pos: [f32; 2],
    uv: [f32; 2],
    color: u32,
}

fn main() {
    let pool = match MemoryPool::new("ui", 64 << 20) {
        Ok(p) => p,
        Err(e) => panic!("cannot create the pool: {e}"),
    };
    let mut arena = MemoryArena::new(&pool);
    let vertex = size_of::<Vertex>();

    // 1. One draw list grown at the top: a grow happens in place while the list's block has
    //    room; only when the block is full does the list move, once, into a larger block.
    let mut verts = AVec::new_in(&arena);
    let (mut grows, mut moves) = (0, 0);
    let mut at = verts.as_ptr();
    let mut capacity = verts.capacity();
    for i in 0..100_000u32 {
        verts.push(Vertex {
            pos: [i as f32, 0.0],
            uv: [0.0, 1.0],
            color: i,
        });
        if verts.capacity() != capacity {
            grows += 1;
            capacity = verts.capacity();
        }
        if verts.as_ptr() != at {
            moves += 1;
            at = verts.as_ptr();
        }
    }
    println!(
        "top vector: {} vertices, {} bytes of capacity, arena holds {} bytes used; \
         grew {grows} times, {} of them in place (it moved {moves} times, into larger blocks)",
        verts.len(),
        verts.capacity() * vertex,
        arena.bytes_used(),
        grows - moves
    );
    drop(verts); // given back while it is the top: popped
    println!("after dropping it: {} bytes used", arena.bytes_used());

    // 2. Two lists grown in turn: neither stays the top, so each grow copies and leaves the
    //    old buffer until the reset.
    let (mut a, mut b) = (AVec::new_in(&arena), AVec::new_in(&arena));
    for i in 0..20_000u32 {
        a.push(i);
        b.push(i);
    }
    println!(
        "two vectors grown in turn: {} bytes of capacity, arena holds {} bytes used",
        (a.capacity() + b.capacity()) * 4,
        arena.bytes_used()
    );
    drop((a, b));
    arena.reset();

    // 3. Explicit push and pop of a temporary buffer (`MemoryArena::pop`): its bytes are
    //    reused by the next allocation.
    let layout = Layout::array::<Vertex>(1024).unwrap_or(Layout::new::<Vertex>());
    let scratch = arena.alloc(layout);
    // SAFETY: the buffer is not used after the pop.
    let popped = unsafe { arena.pop(scratch, layout) };
    let next = arena.alloc(layout);
    println!(
        "pop of the top: {popped}, the next buffer reuses its address: {}",
        next == scratch
    );
    println!("{}", arena.stats());
}
