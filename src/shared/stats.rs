//! What a `SharedArena` holds and has handed out: every thread's part summed.

use super::SharedArena;
use crate::arena::{ArenaStats, MemoryArena};

impl<'pool> SharedArena<'pool> {
    /// Folds `f` over every thread's part (late parts included), for statistics.
    fn fold_parts<T>(&self, init: T, mut f: impl FnMut(T, &MemoryArena<'pool>) -> T) -> T {
        let acc = self.slots.iter().fold(init, |acc, slot| f(acc, &slot.0));
        self.late.lock().iter().fold(acc, |acc, part| {
            // SAFETY: a live late part (the list owns it); read for statistics only.
            f(acc, unsafe { &part.0.as_ref().part.0 })
        })
    }

    /// The sum of `f` over every thread's part.
    fn sum_parts(&self, f: impl Fn(&MemoryArena<'pool>) -> usize) -> usize {
        self.fold_parts(0, |n, part| n + f(part))
    }

    /// Bytes handed out since the last reset by all threads together, padding included.
    /// Exact when no thread is allocating; while threads allocate, a snapshot that may
    /// lag. O(threads).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_val(1u64);
    /// assert_eq!(arena.bytes_used(), 8);
    /// ```
    pub fn bytes_used(&self) -> usize {
        self.sum_parts(MemoryArena::bytes_used)
    }

    /// The sum of every thread's high watermark (each the largest `bytes_used` of that
    /// thread's part, across resets): an upper bound of the arena's peak. O(threads).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_slice(1000, 0u8);
    /// arena.reset();
    /// assert_eq!(arena.high_watermark(), 1000);
    /// ```
    pub fn high_watermark(&self) -> usize {
        self.sum_parts(MemoryArena::high_watermark)
    }

    /// Blocks held by all threads' parts, spares included. O(threads).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_val(1u8);
    /// assert_eq!(arena.block_count(), 1);
    /// ```
    pub fn block_count(&self) -> usize {
        self.sum_parts(MemoryArena::block_count)
    }

    /// Bytes of pool memory held by all threads' parts (whole blocks). O(threads).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_val(1u8);
    /// assert!(arena.bytes_held() >= 64 * 1024);
    /// ```
    pub fn bytes_held(&self) -> usize {
        self.sum_parts(MemoryArena::bytes_held)
    }

    /// How many threads have a part of this arena (threads that allocated at least once;
    /// the part of a thread that exited is taken over by the next new thread). O(threads).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// assert_eq!(arena.threads(), 0);
    /// arena.alloc_val(1u8);
    /// assert_eq!(arena.threads(), 1);
    /// ```
    pub fn threads(&self) -> usize {
        self.sum_parts(|_| 1)
    }

    /// Resets so far. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// assert_eq!(arena.generation(), 0);
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Bytes requested with `label` since the last reset, by all threads (see
    /// [`MemoryArena::alloc_labelled`](crate::MemoryArena::alloc_labelled)).
    /// O(threads × labels).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.with_this_thread(|mine| mine.alloc_labelled(Layout::new::<[u8; 24]>(), "physics"));
    /// assert_eq!(arena.label_bytes("physics"), 24);
    /// ```
    pub fn label_bytes(&self, label: &str) -> usize {
        self.sum_parts(|a| a.label_bytes(label))
    }

    /// A snapshot of every counter, all threads added up (labels merged in first-use order
    /// of the parts), printable with `{}`. O(threads × labels).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::SharedArena::new(nebula_memory::game_pool());
    /// arena.alloc_val(1u64);
    /// let stats = arena.stats();
    /// assert_eq!((stats.bytes_used, stats.block_count), (8, 1));
    /// println!("{stats}");
    /// ```
    #[allow(deprecated)] // fills `tags`, the old name of `labels`
    pub fn stats(&self) -> ArenaStats {
        let mut total = ArenaStats {
            pool: self.pool.name(),
            bytes_used: 0,
            high_watermark: 0,
            block_count: 0,
            bytes_held: 0,
            generation: self.generation,
            blocks_taken: 0,
            blocks_returned: 0,
            heap_blocks_taken: 0,
            labels: Vec::new(),
            tags: Vec::new(),
        };
        self.fold_parts(&mut total, |total, part| {
            let s = part.stats();
            total.bytes_used += s.bytes_used;
            total.high_watermark += s.high_watermark;
            total.block_count += s.block_count;
            total.bytes_held += s.bytes_held;
            total.blocks_taken += s.blocks_taken;
            total.blocks_returned += s.blocks_returned;
            total.heap_blocks_taken += s.heap_blocks_taken;
            for (label, n) in s.labels {
                match total.labels.iter_mut().find(|(l, _)| *l == label) {
                    Some((_, m)) => *m += n,
                    None => total.labels.push((label, n)),
                }
            }
            total
        });
        total.tags = total.labels.clone();
        total
    }
}
