//! `PoolStats`: a pool's counters, as `MemoryPool::stats` reads them.

use super::MemoryPool;

/// A snapshot of a pool's counters, from [`MemoryPool::stats`].
///
/// `in_use + free == capacity` always holds.
///
/// ```
/// use nebula_memory::MemoryPool;
///
/// let pool = MemoryPool::new("stats", 1 << 20).unwrap();
/// let block = pool.allocate_block(4096).unwrap();
/// let s = pool.stats();
/// assert_eq!(s.in_use + s.free, s.capacity);
/// assert_eq!(s.blocks_in_use, 1);
/// // SAFETY: the block came from this pool and is not used afterwards.
/// unsafe { pool.free_block(block) };
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes the pool may span: its region, or the most its segments may span together.
    pub capacity: usize,
    /// Bytes the pool holds from the system now: its whole capacity where it reserves its
    /// region (address space: pages become resident as blocks use them), the segments it
    /// spans where it grows by segments ([`MemoryPool::segmented`], the web).
    pub reserved: usize,
    /// Bytes of blocks handed out, headers included.
    pub in_use: usize,
    /// `capacity - in_use`.
    pub free: usize,
    /// The largest `min_usable` that `allocate_block` would grant now.
    pub largest_free: usize,
    /// Blocks handed out and not yet freed.
    pub blocks_in_use: usize,
    /// The largest `in_use` ever seen.
    pub high_watermark: usize,
    /// `allocate_block` calls refused with [`PoolError::Exhausted`](crate::PoolError::Exhausted).
    pub exhaustions: u64,
    /// Number of separate free ranges (1 when nothing is in use: fragmentation at a glance).
    pub free_ranges: usize,
    /// Bytes of freed blocks held back by the quarantine (counted in `in_use` until
    /// released; see [`MemoryPool::set_quarantine`]).
    pub quarantined: usize,
    /// Successful `allocate_block` calls ever (with `frees`, counts pool operations).
    pub allocations: u64,
    /// `free_block` calls ever.
    pub frees: u64,
}

impl std::fmt::Display for PoolStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        write!(
            f,
            "{:.1}/{:.1} MiB in use in {} blocks (peak {:.1} MiB), largest free {:.1} MiB \
             in {} free ranges, {} exhaustions",
            self.in_use as f64 / MIB,
            self.capacity as f64 / MIB,
            self.blocks_in_use,
            self.high_watermark as f64 / MIB,
            self.largest_free as f64 / MIB,
            self.free_ranges,
            self.exhaustions
        )
    }
}

impl MemoryPool {
    /// A snapshot of the pool's counters. O(1) (the largest free block is found as
    /// `allocate_block` would find it).
    ///
    /// ```
    /// use nebula_memory::MemoryPool;
    ///
    /// let pool = MemoryPool::new("doc", 1 << 20).unwrap();
    /// let s = pool.stats();
    /// assert_eq!((s.in_use, s.free, s.blocks_in_use), (0, 1 << 20, 0));
    /// assert_eq!(s.largest_free, (1 << 20) - 32);
    /// ```
    pub fn stats(&self) -> PoolStats {
        let st = self.state.lock();
        let capacity = self.space.capacity();
        let c = &st.counters;
        PoolStats {
            capacity,
            reserved: self.spanned(&st),
            in_use: c.in_use,
            free: capacity - c.in_use,
            largest_free: self.largest_free(&st),
            blocks_in_use: c.blocks_in_use,
            high_watermark: c.high_watermark,
            exhaustions: c.exhaustions,
            free_ranges: st.index.free_ranges,
            quarantined: st.quarantine.bytes,
            allocations: c.allocations,
            frees: c.frees,
        }
    }
}
