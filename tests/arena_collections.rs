//! `&MemoryArena` as an `allocator_api2` allocator: `allocator_api2::vec::Vec`,
//! `allocator_api2::boxed::Box` and `hashbrown::HashMap` on arena memory, a growing
//! vector at the top staying in place while its block has room, vectors growing in turn
//! (non-top growth, which must copy), and the `Allocator` methods called directly
//! (`grow_zeroed`, alignment changes, `shrink`, `deallocate` of the top and below it).

use nebula_memory::Arena;
use std::alloc::Layout;

use allocator_api2::alloc::Allocator;
use allocator_api2::boxed::Box as ABox;
use allocator_api2::vec::Vec as AVec;
use nebula_memory::{ArenaConfig, MemoryArena};

mod common;
use common::{KIB, MIB, pool_of};

#[test]
fn vec_of_a_million_u32() {
    // Under Miri, 20 000 (still several blocks past the 64 KiB first block).
    let n: u32 = if cfg!(miri) { 20_000 } else { 1_000_000 };
    let pool = pool_of("vec-1m", 256 * MIB);
    let arena = MemoryArena::new(&pool);
    let mut v = AVec::new_in(&arena);
    for i in 0..n {
        v.push(i.wrapping_mul(2_654_435_761));
    }
    assert_eq!(v.len(), n as usize);
    assert!(
        v.iter()
            .enumerate()
            .all(|(i, &x)| x == (i as u32).wrapping_mul(2_654_435_761))
    );
    assert!(arena.bytes_used() >= 4 * n as usize);
    assert_eq!(pool.stats().in_use, arena.bytes_held());
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v.capacity(), 10);
    assert_eq!(v[9], 9u32.wrapping_mul(2_654_435_761));
}

#[test]
fn top_vector_grows_in_place_while_its_block_has_room() {
    // Under Miri everything is scaled down 16 times (first block 64 KiB, 6 250 then
    // 125 000 elements, 625 one-by-one grows).
    let (first_block, in_first, total, one_by_one) = if cfg!(miri) {
        (64 * KIB, 6_250u32, 125_000u32, 625u64)
    } else {
        (MIB, 100_000, 2_000_000, 10_000)
    };
    let pool = pool_of("vec-top", 256 * MIB);
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(first_block));
    let mut v: AVec<u32, _> = AVec::with_capacity_in(16, &arena);
    let start = v.as_ptr();
    let mut moves = 0;
    let mut last = v.as_ptr();
    for i in 0..in_first {
        v.push(i);
        if v.as_ptr() != last {
            moves += 1;
            last = v.as_ptr();
        }
    }
    // 100k u32 (at most 512 KiB of capacity) fit in the first 1 MiB block: no move at all.
    assert_eq!(moves, 0, "the top vector moved inside its block");
    assert_eq!(v.as_ptr(), start);
    assert_eq!(arena.block_count(), 1);
    // Growing on to 2M elements outgrows the block: the block grows in place into the
    // pool's free range after it, so the vector still never moves. (In a pool that grows
    // by segments, the web's, a segment's end may follow the block: there it moves.)
    for i in in_first..total {
        v.push(i);
        if v.as_ptr() != last {
            moves += 1;
            last = v.as_ptr();
        }
    }
    if !pool.grows_by_segments() {
        assert_eq!(
            moves, 0,
            "the top vector moved though the range after its block was free"
        );
        assert_eq!(arena.block_count(), 1);
        assert_eq!(pool.stats().in_use, arena.bytes_held());
        assert!(
            arena.bytes_held() < 2 * total as usize * 4,
            "no copies left behind"
        );
    }
    let moved_before = moves;
    // With the range after the block taken, growth moves the vector to a new block.
    let neighbour = pool.allocate_block(4096).unwrap();
    for i in total..2 * total {
        v.push(i);
        if v.as_ptr() != last {
            moves += 1;
            last = v.as_ptr();
        }
    }
    assert!(moves > moved_before);
    assert!(
        moves < arena.block_count(),
        "{moves} moves for {} blocks",
        arena.block_count()
    );
    // SAFETY: from this pool, not used afterwards.
    unsafe { pool.free_block(neighbour) };
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));

    // `reserve_exact(1)` + push: every grow is by one element, always in place at the top.
    let mut w: AVec<u64, _> = AVec::new_in(&arena);
    w.reserve_exact(1);
    let p = w.as_ptr();
    for i in 0..one_by_one {
        w.reserve_exact(1);
        w.push(i);
    }
    assert_eq!(w.as_ptr(), p, "reserve_exact(1) growth at the top moved");
    assert!(w.iter().enumerate().all(|(i, &x)| x == i as u64));

    // Shrinking the top gives the bytes back; dropping the top pops it.
    let used = arena.bytes_used();
    w.truncate(100);
    w.shrink_to_fit();
    assert_eq!(w.as_ptr(), p);
    assert_eq!(arena.bytes_used(), used - (one_by_one as usize - 100) * 8);
    drop(w);
    assert_eq!(arena.bytes_used(), used - one_by_one as usize * 8);
}

#[test]
fn hashmap_on_the_arena() {
    // Under Miri, 3 000 entries and 300 strings.
    let (n, keys) = if cfg!(miri) {
        (3_000u64, 300)
    } else {
        (100_000u64, 10_000)
    };
    let pool = pool_of("hashmap", 256 * MIB);
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(64 * KIB));
    let mut map = hashbrown::HashMap::new_in(&arena);
    for i in 0..n {
        assert!(map.insert(i, i * 3).is_none());
    }
    assert_eq!(map.len(), n as usize);
    for i in 0..n {
        assert_eq!(map.get(&i), Some(&(i * 3)), "lookup {i}");
    }
    assert_eq!(map.get(&n), None);
    for i in (0..n).filter(|i| i % 3 == 0) {
        assert_eq!(map.remove(&i), Some(i * 3));
    }
    assert_eq!(map.len(), (n - n.div_ceil(3)) as usize);
    for i in 0..n {
        assert_eq!(map.get(&i).copied(), (i % 3 != 0).then_some(i * 3));
    }
    // Re-insert and overwrite.
    for i in 0..n / 2 {
        map.insert(i, i + 1);
    }
    for i in 0..n {
        let want = if i < n / 2 {
            Some(i + 1)
        } else {
            (i % 3 != 0).then_some(i * 3)
        };
        assert_eq!(map.get(&i).copied(), want);
    }
    // A set of arena strings, with keys borrowed from the arena too.
    let mut set = hashbrown::HashSet::new_in(&arena);
    for i in 0..keys {
        set.insert(&*arena.alloc_fmt(format_args!("key-{i}")));
    }
    assert!(set.contains(format!("key-{}", keys - 1).as_str()));
    assert!(!set.contains(format!("key-{keys}").as_str()));
    assert_eq!(pool.stats().in_use, arena.bytes_held());
}

#[test]
fn vectors_growing_in_turn_stay_correct() {
    // Under Miri, 2 000 rounds and 100 inner vectors.
    let (rounds, inner_vecs) = if cfg!(miri) {
        (2_000u32, 100u16)
    } else {
        (20_000, 500)
    };
    let pool = pool_of("interleaved", 256 * MIB);
    let arena = MemoryArena::with_config(&pool, ArenaConfig::default().first_block(16 * KIB));
    let mut vecs: Vec<AVec<u32, &MemoryArena>> = (0..8).map(|_| AVec::new_in(&arena)).collect();
    let mut bytes: AVec<u8, _> = AVec::new_in(&arena);
    for round in 0..rounds {
        for (k, v) in vecs.iter_mut().enumerate() {
            if (round as usize + k).is_multiple_of(k + 1) {
                v.push(round ^ (k as u32) << 24);
            }
        }
        bytes.push(round as u8);
        if round % 997 == 0 {
            // A short-lived vector on top, dropped at once.
            let tmp: AVec<u64, _> = (0..round as u64).collect_in(&arena);
            assert_eq!(tmp.len(), round as usize);
        }
    }
    for (k, v) in vecs.iter().enumerate() {
        let want: Vec<u32> = (0..rounds)
            .filter(|&r| (r as usize + k).is_multiple_of(k + 1))
            .map(|r| r ^ (k as u32) << 24)
            .collect();
        assert_eq!(v.as_slice(), want.as_slice(), "vector {k}");
    }
    assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
    assert!(arena.block_count() > 1);

    // Vectors of vectors, both on the arena.
    let mut outer: AVec<AVec<u16, &MemoryArena>, &MemoryArena> = AVec::new_in(&arena);
    for i in 0..inner_vecs {
        let mut inner = AVec::with_capacity_in(1, &arena);
        inner.extend((0..i).map(|x| x.wrapping_mul(i)));
        outer.push(inner);
        if i > 0 {
            outer[(i as usize * 7) % i as usize].push(i);
        }
    }
    for (i, inner) in outer.iter().enumerate() {
        assert!(inner.len() >= i);
        for (x, &val) in inner.iter().take(i).enumerate() {
            assert_eq!(val, (x as u16).wrapping_mul(i as u16));
        }
    }
}

trait CollectIn<T> {
    fn collect_in<'a>(self, arena: &'a MemoryArena<'_>) -> AVec<T, &'a MemoryArena<'a>>;
}

impl<T, I: Iterator<Item = T>> CollectIn<T> for I {
    fn collect_in<'a>(self, arena: &'a MemoryArena<'_>) -> AVec<T, &'a MemoryArena<'a>> {
        let mut v = AVec::new_in(arena);
        v.extend(self);
        v
    }
}

#[test]
fn boxes_on_the_arena() {
    let pool = pool_of("boxes", 256 * MIB);
    let arena = MemoryArena::new(&pool);
    let used = arena.bytes_used();
    let b = ABox::new_in([7u64; 32], &arena);
    assert_eq!(b[31], 7);
    drop(b);
    assert_eq!(arena.bytes_used(), used, "a dropped top box is popped");
    let s = ABox::new_in(String::from("owned"), &arena);
    assert_eq!(*s, "owned");
}

#[test]
fn allocator_methods_directly() {
    let pool = pool_of("alloc-api", 256 * MIB);
    let arena = MemoryArena::new(&pool);
    let a = &arena;
    let l64 = Layout::from_size_align(64, 8).unwrap();
    let p = a.allocate(l64).unwrap();
    assert_eq!(p.len(), 64);
    let p = p.cast::<u8>();
    // SAFETY: 64 fresh bytes. (Below, each pointer passed to a resize is live with the
    // layout given, and only the returned pointer is used afterwards.)
    unsafe { p.as_ptr().write_bytes(0x11, 64) };

    // grow_zeroed at the top: in place, the new tail zeroed, the old bytes kept.
    let l256 = Layout::from_size_align(256, 8).unwrap();
    // SAFETY: as above.
    let g = unsafe { a.grow_zeroed(p, l64, l256) }.unwrap().cast::<u8>();
    assert_eq!(g, p);
    // SAFETY: 256 live bytes.
    let bytes = unsafe { std::slice::from_raw_parts(g.as_ptr(), 256) };
    assert!(bytes[..64].iter().all(|&b| b == 0x11));
    assert!(bytes[64..].iter().all(|&b| b == 0));

    // Shrink at the top: in place.
    let l32 = Layout::from_size_align(32, 8).unwrap();
    let used = arena.bytes_used();
    // SAFETY: as above.
    let s = unsafe { a.shrink(g, l256, l32) }.unwrap().cast::<u8>();
    assert_eq!(s, p);
    assert_eq!(arena.bytes_used(), used - 224);

    // A grow that needs a larger alignment than the pointer has: a fresh, aligned copy.
    let misaligned = a.allocate(Layout::from_size_align(8, 8).unwrap()).unwrap();
    let m = misaligned.cast::<u8>();
    let m = if (m.as_ptr() as usize).is_multiple_of(4096) {
        // Make sure the next one is not 4096-aligned by chance.
        a.allocate(Layout::from_size_align(8, 8).unwrap())
            .unwrap()
            .cast::<u8>()
    } else {
        m
    };
    // SAFETY: 8 live bytes.
    unsafe { m.as_ptr().write_bytes(0x22, 8) };
    let l8 = Layout::from_size_align(8, 8).unwrap();
    let big_align = Layout::from_size_align(100, 4096).unwrap();
    // SAFETY: as above.
    let r = unsafe { a.grow(m, l8, big_align) }.unwrap().cast::<u8>();
    assert_ne!(r, m);
    assert_eq!(r.as_ptr() as usize % 4096, 0);
    // SAFETY: 100 live bytes; the first 8 were copied from `m`.
    let head = unsafe { std::slice::from_raw_parts(r.as_ptr(), 8) };
    assert!(head.iter().all(|&b| b == 0x22));

    // A grow to a larger alignment the pointer already has: in place at the top.
    // SAFETY: as above.
    let r2 = unsafe { a.grow(r, big_align, Layout::from_size_align(200, 2048).unwrap()) }
        .unwrap()
        .cast::<u8>();
    assert_eq!(r2, r);

    // Deallocate below the top: nothing happens; of the top: bytes come back.
    let used = arena.bytes_used();
    // SAFETY: `s` is given up; it is not the top, so the call is a no-op.
    unsafe { a.deallocate(s, l32) };
    assert_eq!(arena.bytes_used(), used);
    let z = a
        .allocate_zeroed(Layout::from_size_align(4000, 8).unwrap())
        .unwrap();
    // SAFETY: 4000 live bytes.
    assert!(unsafe { z.as_ref() }.iter().all(|&b| b == 0));
    // SAFETY: `z` is the top and not used again.
    unsafe { a.deallocate(z.cast(), Layout::from_size_align(4000, 8).unwrap()) };
    assert_eq!(arena.bytes_used(), used);

    // Copies of the `&MemoryArena` allocator are the same allocator.
    let v: AVec<u8, _> = AVec::with_capacity_in(10, a);
    let w = v.clone();
    assert!(std::ptr::eq(*v.allocator(), *w.allocator()));
}
