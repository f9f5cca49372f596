//! An arena's figures (bytes used, watermarks, blocks held, per-allocation labels) and
//! `ArenaStats`, a printable snapshot of them.

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

use super::MemoryArena;
use crate::error::{AllocError, or_panic};

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
    /// Blocks taken from the pool, ever (each one `allocate_block`).
    pub blocks_taken: u64,
    /// Blocks given back to the pool, ever (each one `free_block`).
    pub blocks_returned: u64,
    /// Blocks taken from the system heap because the pool was exhausted (`heap_fallback`),
    /// ever.
    pub heap_blocks_taken: u64,
    /// Bytes requested per label since the last reset, in first-use order
    /// ([`MemoryArena::alloc_labelled`](crate::MemoryArena::alloc_labelled)).
    pub labels: Vec<(&'static str, usize)>,
    /// The same list under its old name.
    #[deprecated(note = "renamed to `labels`: a tag is a ledger path (`ArenaConfig::tag`)")]
    pub tags: Vec<(&'static str, usize)>,
}

impl fmt::Display for ArenaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arena on '{}': {} used (peak {}), {} held in {} block{}, generation {}",
            self.pool,
            Bytes(self.bytes_used),
            Bytes(self.high_watermark),
            Bytes(self.bytes_held),
            self.block_count,
            if self.block_count == 1 { "" } else { "s" },
            self.generation
        )?;
        for (label, n) in &self.labels {
            write!(f, "\n  {label:<16} {}", Bytes(*n))?;
        }
        Ok(())
    }
}

impl<'pool> MemoryArena<'pool> {
    /// Brings the watermarks up to date before `bytes_used` falls.
    #[inline]
    pub(super) fn note_peak(&self) {
        let used = self.bytes_used();
        if used > self.peak_since_reset.load(Relaxed) {
            self.peak_since_reset.store(used, Relaxed);
            if used > self.high_watermark.load(Relaxed) {
                self.high_watermark.store(used, Relaxed);
            }
        }
    }

    /// Bytes handed out since the last reset, alignment padding included (the unused tail
    /// of a block the arena moved on from is not counted). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(0u8);
    /// arena.alloc_val(0u32); // 3 bytes of padding first
    /// assert_eq!(arena.bytes_used(), 8);
    /// ```
    #[inline]
    pub fn bytes_used(&self) -> usize {
        self.cursor.position()
    }

    /// The largest `bytes_used` ever, across resets. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_slice(1000, 0u8);
    /// arena.reset();
    /// assert_eq!(arena.high_watermark(), 1000);
    /// ```
    #[inline]
    pub fn high_watermark(&self) -> usize {
        self.high_watermark.load(Relaxed).max(self.bytes_used())
    }

    /// The largest `bytes_used` since the last reset: what this frame needed at its peak,
    /// also if pops or rewinds have given memory back since. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let layout = std::alloc::Layout::new::<[u8; 500]>();
    /// let p = arena.alloc(layout);
    /// // SAFETY: `p` is not used again.
    /// unsafe { arena.pop(p, layout) };
    /// assert_eq!((arena.bytes_used(), arena.peak_since_reset()), (0, 500));
    /// ```
    #[inline]
    pub fn peak_since_reset(&self) -> usize {
        self.peak_since_reset.load(Relaxed).max(self.bytes_used())
    }

    /// Blocks the arena holds, cached spares included. O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.block_count(), 0);
    /// arena.alloc_val(1u8);
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn block_count(&self) -> usize {
        self.chain.lock().block_count()
    }

    /// Bytes of pool memory the arena holds (whole blocks, headers included). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u8);
    /// assert!(arena.bytes_held() >= 64 * 1024);
    /// ```
    pub fn bytes_held(&self) -> usize {
        self.chain.lock().bytes_held()
    }

    /// The arena's generation: how many times it has been reset. O(1).
    ///
    /// ```
    /// let mut arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.reset();
    /// assert_eq!(arena.generation(), 1);
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Bytes requested with `label` since the last reset (see
    /// [`alloc_labelled`](MemoryArena::alloc_labelled)). O(labels).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_labelled(Layout::new::<[u8; 48]>(), "mesh");
    /// assert_eq!(arena.label_bytes("mesh"), 48);
    /// ```
    pub fn label_bytes(&self, label: &str) -> usize {
        self.labels
            .lock()
            .iter()
            .find(|(l, _)| *l == label)
            .map_or(0, |&(_, n)| n)
    }

    /// A snapshot of every counter, printable with `{}`. O(labels).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_val(1u64);
    /// let stats = arena.stats();
    /// assert_eq!(stats.bytes_used, 8);
    /// println!("{stats}");
    /// ```
    #[allow(deprecated)] // fills `tags`, the old name of `labels`
    pub fn stats(&self) -> ArenaStats {
        let labels = self.labels.lock().clone();
        let (block_count, bytes_held, ops) = {
            let chain = self.chain.lock();
            (chain.block_count(), chain.bytes_held(), chain.figures())
        };
        ArenaStats {
            pool: self.pool.name(),
            bytes_used: self.bytes_used(),
            high_watermark: self.high_watermark(),
            block_count,
            bytes_held,
            generation: self.generation,
            blocks_taken: ops.blocks_taken,
            blocks_returned: ops.blocks_returned,
            heap_blocks_taken: ops.heap_blocks_taken,
            labels: labels.clone(),
            tags: labels,
        }
    }

    /// Allocates like [`try_alloc`](MemoryArena::try_alloc) and counts the bytes under
    /// `label` in this arena's figures until its next reset (`ArenaPush(arena, size,
    /// align, "Tag")` in C++ engines). A label is not a ledger tag: it names allocations
    /// inside one arena, while a tag ([`ArenaConfig::tag`](crate::ArenaConfig::tag)) is
    /// charged with the arena's blocks in the process-wide ledger. Labelling costs a lock
    /// and a lookup in a short list; other allocations pay nothing for it. O(labels).
    ///
    /// # Errors
    /// As `try_alloc`.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.try_alloc_labelled(Layout::new::<u64>(), "ai").unwrap();
    /// assert_eq!(arena.label_bytes("ai"), 8);
    /// ```
    pub fn try_alloc_labelled(
        &self,
        layout: Layout,
        label: &'static str,
    ) -> Result<NonNull<u8>, AllocError> {
        let p = self.try_alloc(layout)?;
        self.leave_steady_state();
        let mut labels = self.labels.lock();
        match labels.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += layout.size(),
            None => labels.push((label, layout.size())),
        }
        Ok(p)
    }

    /// [`try_alloc_labelled`](MemoryArena::try_alloc_labelled), panicking on failure.
    /// O(labels).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// arena.alloc_labelled(Layout::new::<u64>(), "ui");
    /// assert_eq!(arena.stats().labels, vec![("ui", 8)]);
    /// ```
    #[track_caller]
    pub fn alloc_labelled(&self, layout: Layout, label: &'static str) -> NonNull<u8> {
        or_panic(self.try_alloc_labelled(layout, label))
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
