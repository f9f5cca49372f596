//! `ArenaStats`: a printable snapshot of an arena's counters.

use std::fmt;

/// A snapshot of an arena's counters, from [`MemoryArena::stats`](crate::MemoryArena::stats).
///
/// ```
/// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
/// let s = arena.stats();
/// assert_eq!((s.pool, s.block_count), ("scratch", 0));
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Name of the pool the arena draws from.
    pub pool: &'static str,
    /// Bytes handed out since the last reset, padding included.
    pub bytes_used: usize,
    /// Largest `bytes_used` ever.
    pub high_watermark: usize,
    /// Blocks held, cached spares included.
    pub block_count: usize,
    /// Bytes of pool memory held (whole blocks).
    pub bytes_held: usize,
    /// Resets so far.
    pub generation: u64,
    /// Bytes requested per tag since the last reset, in first-use order.
    pub tags: Vec<(&'static str, usize)>,
}

impl fmt::Display for ArenaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arena on '{}': {} used (peak {}), {} held in {} block{}, frame {}",
            self.pool,
            Bytes(self.bytes_used),
            Bytes(self.high_watermark),
            Bytes(self.bytes_held),
            self.block_count,
            if self.block_count == 1 { "" } else { "s" },
            self.generation
        )?;
        for (tag, n) in &self.tags {
            write!(f, "\n  {tag:<16} {}", Bytes(*n))?;
        }
        Ok(())
    }
}

/// Byte counts for people: `512 B`, `12.0 KiB`, `3.5 MiB`.
pub(crate) struct Bytes(pub(crate) usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        if self.0 < 1024 {
            write!(f, "{} B", self.0)
        } else if self.0 < 1 << 20 {
            write!(f, "{:.1} KiB", n / 1024.0)
        } else {
            write!(f, "{:.1} MiB", n / (1024.0 * 1024.0))
        }
    }
}
