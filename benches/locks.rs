//! What a pool's lock and a heap scope cost, each alone:
//!
//! - pool pair: `allocate_block(64 KiB)` then `free_block` on a private pool, steady (the
//!   same range each time: the lock, the TLSF search and the merge); ns per pair.
//! - heap scope: `HeapScope::enter` then the guard's drop (what runs around every Bevy
//!   system run); ns per pair.
//! - heap scopes out of order: two entered, the outer dropped first; ns per two.
//!
//! `cargo bench --bench locks`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nebula_memory::MemoryPool;
use nebula_memory::ledger;

fn all(c: &mut Criterion) {
    let pool = MemoryPool::new("bench-locks", 16 << 20).unwrap();
    c.bench_function("pool pair (allocate_block + free_block, 64 KiB)", |b| {
        b.iter(|| {
            let block = pool.allocate_block(black_box(64 << 10)).unwrap();
            // SAFETY: from this pool, not used afterwards.
            unsafe { pool.free_block(block) };
        })
    });
    let a = {
        let _s = ledger::scope("bench/locks/a");
        ledger::current_scope()
    };
    let b2 = {
        let _s = ledger::scope("bench/locks/b");
        ledger::current_scope()
    };
    c.bench_function("heap scope (enter + drop)", |b| {
        b.iter(|| drop(black_box(black_box(a).enter())))
    });
    c.bench_function("heap scopes out of order (two, outer dropped first)", |b| {
        b.iter(|| {
            let ga = black_box(a).enter();
            let gb = black_box(b2).enter();
            drop(ga);
            drop(gb);
        })
    });
}

criterion_group!(benches, all);
criterion_main!(benches);
