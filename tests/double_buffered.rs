//! `DoubleBufferedArena` and `FrameHandle`: frame N's data is readable through frame N+1,
//! then refused; handles of another arena are refused; stores from many threads at once.

use nebula_memory::Arena;
use nebula_memory::{DoubleBufferedArena, FrameHandle};
use proptest::prelude::*;

mod common;
use common::pool;

#[derive(Clone, Debug)]
enum Op {
    Store(u64),
    StoreSlice(Vec<u16>),
    Swap,
    /// Read back the handle at this index (modulo the handles made so far).
    Get(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::Store),
        2 => prop::collection::vec(any::<u16>(), 0..40).prop_map(Op::StoreSlice),
        2 => Just(Op::Swap),
        4 => any::<usize>().prop_map(Op::Get),
    ]
}

enum Stored {
    One(FrameHandle<u64>, u64),
    Many(FrameHandle<[u16]>, Vec<u16>),
}

proptest! {
    #![proptest_config(common::proptest_config(256))]

    /// A model of random stores, swaps and reads: a handle reads back its value exactly
    /// while the frame it was stored in is the current or the previous one, and `None`
    /// after that; every handle is also refused by another arena.
    #[test]
    fn handles_read_back_exactly_while_their_frame_is_current_or_previous(
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let pool = pool("double-model");
        let mut frames = DoubleBufferedArena::new(&pool);
        let other = DoubleBufferedArena::new(&pool);
        let mut stored: Vec<(Stored, u64)> = Vec::new(); // (what, frame stored in)
        for op in ops {
            match op {
                Op::Store(v) => stored.push((Stored::One(frames.store(v), v), frames.frame())),
                Op::StoreSlice(v) => {
                    stored.push((Stored::Many(frames.store_slice(&v), v), frames.frame()))
                }
                Op::Swap => frames.swap(),
                Op::Get(i) if !stored.is_empty() => {
                    let (what, at) = &stored[i % stored.len()];
                    let alive = frames.frame() - at <= 1;
                    match what {
                        Stored::One(h, v) => {
                            prop_assert_eq!(frames.get(*h), alive.then_some(v));
                            prop_assert_eq!(other.get(*h), None);
                        }
                        Stored::Many(h, v) => {
                            prop_assert_eq!(frames.get(*h), alive.then_some(&v[..]));
                            prop_assert_eq!(other.get(*h), None);
                        }
                    }
                }
                Op::Get(_) => {}
            }
        }
    }
}

/// Four threads store at once; the handles cross back to the main thread, which reads
/// them this frame and the next, and finds them refused the frame after.
#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn parallel_stores_from_four_threads() {
    let per_thread: u64 = if cfg!(miri) { 50 } else { 10_000 };
    let pool = pool("double-parallel");
    let mut frames = DoubleBufferedArena::new(&pool);
    type Pair = (FrameHandle<(u64, u64)>, FrameHandle<[u64]>);
    let handles: Vec<Pair> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let frames = &frames;
                s.spawn(move || {
                    (0..per_thread)
                        .map(|i| (frames.store((t, i)), frames.store_slice(&[t, i, t ^ i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let check = |frames: &DoubleBufferedArena<'_>| {
        for (n, &(one, many)) in handles.iter().enumerate() {
            let (t, i) = (n as u64 / per_thread, n as u64 % per_thread);
            assert_eq!(frames.get(one), Some(&(t, i)));
            assert_eq!(frames.get(many), Some(&[t, i, t ^ i][..]));
        }
    };
    check(&frames);
    frames.swap();
    check(&frames); // still there in the next frame
    frames.swap();
    assert!(
        handles
            .iter()
            .all(|&(one, many)| frames.get(one).is_none() && frames.get(many).is_none())
    );
}

/// A stale handle is refused even when a new value sits at the very same address.
#[test]
fn stale_handles_are_refused_even_at_a_reused_address() {
    let pool = pool("double-stale");
    let mut frames = DoubleBufferedArena::new(&pool);
    let old = frames.store(1u64);
    let old_at: *const u64 = frames.get(old).unwrap();
    frames.swap();
    frames.swap(); // `old`'s buffer was reset and is current again
    let new = frames.store(2u64);
    assert_eq!(frames.get(new), Some(&2));
    assert_eq!(
        frames.get(new).unwrap() as *const u64,
        old_at,
        "same address"
    );
    assert_eq!(frames.get(old), None);
    assert_ne!(old, new);
}

/// Handles of another arena are refused, whichever buffer and frame they name.
#[test]
fn foreign_handles_are_refused() {
    let pool = pool("double-foreign");
    let mut a = DoubleBufferedArena::new(&pool);
    let mut b = DoubleBufferedArena::new(&pool);
    for _ in 0..10 {
        let ha = a.store(7u32);
        let hb = b.store(8u32);
        assert_eq!((a.get(ha), b.get(hb)), (Some(&7), Some(&8)));
        assert_eq!((a.get(hb), b.get(ha)), (None, None));
        a.swap();
        b.swap();
    }
}

/// Plain references come from the current buffer and are reset with it two swaps later;
/// memory use stays flat over many frames.
#[test]
fn many_frames_keep_pool_usage_flat() {
    let frames_n = if cfg!(miri) { 8 } else { 2_000 };
    let pool = pool("double-flat");
    let mut frames = DoubleBufferedArena::new(&pool);
    let mut in_use = Vec::new();
    for f in 0..frames_n {
        let visible = frames
            .current()
            .alloc_slice_fill_with(1000, |i| (f + i) as u32);
        assert_eq!(visible[999], (f + 999) as u32);
        let h = frames.store_slice(&visible[..10]);
        assert_eq!(frames.get(h).unwrap()[0], f as u32);
        frames.swap();
        in_use.push(pool.stats().in_use);
    }
    let warm = &in_use[frames_n / 4..];
    assert!(warm.iter().all(|&x| x == warm[0]), "{:?}", &warm[..8]);
    assert_eq!(frames.frame(), frames_n as u64);
}
