//! Helpers shared by the integration tests (`mod common;` in each test file that needs them).
// Each test binary uses only some of them.
#![allow(dead_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use nebula_memory::MemoryPool;

pub const KIB: usize = 1024;
pub const MIB: usize = 1 << 20;

/// The size of a pool block's header: a block's usable bytes start this far after it.
pub const HEADER: usize = 32;

/// A private 64 MiB pool, so its counters are not disturbed by tests running in parallel.
pub fn pool(name: &'static str) -> MemoryPool {
    pool_of(name, 64 * MIB)
}

/// A private pool of `capacity` bytes.
pub fn pool_of(name: &'static str, capacity: usize) -> MemoryPool {
    MemoryPool::new(name, capacity).unwrap()
}

/// Runs `f`, which must panic, and returns the panic message.
pub fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        panic!("panic payload is not a string")
    }
}

/// SplitMix64: a tiny, well-mixed, fixed-seed PRNG (no `rand` dependency).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Log-uniform in `[lo, hi]`.
    pub fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let (l, h) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
        ((l + (h - l) * self.next_f64()).exp() as usize).clamp(lo, hi)
    }
}
