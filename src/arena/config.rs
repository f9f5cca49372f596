//! How an arena sizes its blocks and when it gives memory back.

/// How an arena sizes its blocks and when it gives memory back.
///
/// ```
/// use nebula_memory::{Arena, ArenaConfig, MemoryArena, MemoryPool};
///
/// let pool = MemoryPool::new("doc", 8 << 20).unwrap();
/// let config = ArenaConfig::default().first_block(16 * 1024);
/// let arena = MemoryArena::with_config(&pool, config);
/// arena.alloc_val(1u32);
/// assert!(arena.bytes_held() >= 16 * 1024);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Usable bytes of the first block (default 64 KiB), rounded up to 4 KiB. `0` means the
    /// smallest block (4 KiB). Set with [`ArenaConfig::first_block`], a size larger than the
    /// pool's largest possible block is refused when an arena is created on that pool (a
    /// panic naming the field and both sizes). The default is clamped instead: on a pool
    /// too small for it, the arena asks for it, then settles for a block sized to the
    /// request (that refusal is not counted as an exhaustion).
    pub first_block: usize,
    /// Largest block that normal growth asks for (default 16 MiB). Each new block is at
    /// least the sum of the blocks held so far, up to this cap; a single request larger
    /// than the cap gets a block of its own sized to fit. A cap below `first_block` (`0`
    /// included) means `first_block`, never more; `usize::MAX` means no cap.
    pub max_block: usize,
    /// After this many consecutive resets in which the kept block was more than twice as
    /// large as needed, `reset` replaces it with one sized to those frames (default 120,
    /// about two seconds at 60 fps). `0` never shrinks.
    pub trim_after_resets: u32,
    /// When the pool is exhausted, take the block from the system heap instead of failing
    /// (a WARN event reports it; the block is freed by the next reset). Default `false`.
    pub heap_fallback: bool,
    /// The ledger tag every block the arena takes is charged to (see
    /// [`ledger`](crate::ledger)), set with [`ArenaConfig::tag`]. Default `None`: the
    /// arena's blocks count as the untagged rest, and the ledger never hears of it.
    pub tag: Option<&'static str>,
    /// `first_block` was set with the builder (so a size the pool cannot serve is a mistake
    /// to refuse, not a default to clamp).
    first_block_set: bool,
    /// Most bytes of blocks the arena may hold (the crate's thread arenas cap
    /// themselves at their capacity with it); a request past it is refused with
    /// `AllocError::Full`. `usize::MAX`: no cap.
    pub(crate) held_limit: usize,
}

impl ArenaConfig {
    /// Sets [`first_block`](ArenaConfig#structfield.first_block). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().first_block(4096).first_block, 4096);
    /// ```
    pub fn first_block(mut self, bytes: usize) -> Self {
        self.first_block = bytes;
        self.first_block_set = true;
        self
    }

    /// Sets `first_block` as a default, not a demand: the crate's own configurations (the
    /// thread arenas, `with_scratch`, the Bevy plugin's defaults), so that on a pool too
    /// small for it the arena settles for smaller blocks instead of refusing a size the
    /// user never set.
    pub(crate) fn first_block_default(mut self, bytes: usize) -> Self {
        self.first_block = bytes;
        self.first_block_set = false;
        self
    }

    /// Refuses, with a panic naming the field and both sizes, a `first_block` set with the
    /// builder that `pool` can never serve (see
    /// [`first_block`](ArenaConfig#structfield.first_block)).
    #[track_caller]
    pub(crate) fn check_against(&self, pool: &crate::MemoryPool) {
        let most = pool.max_usable();
        if self.first_block_set && self.first_block > most {
            panic!(
                "ArenaConfig::first_block is {} bytes, but pool '{}' can never hand out a block \
                 of more than {most} usable bytes: ask for at most that, or use a larger pool",
                self.first_block,
                pool.name()
            );
        }
    }

    /// Sets [`max_block`](ArenaConfig#structfield.max_block). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().max_block(1 << 20).max_block, 1 << 20);
    /// ```
    pub fn max_block(mut self, bytes: usize) -> Self {
        self.max_block = bytes;
        self
    }

    /// Sets [`trim_after_resets`](ArenaConfig#structfield.trim_after_resets). O(1).
    ///
    /// ```
    /// assert_eq!(nebula_memory::ArenaConfig::default().trim_after_resets(0).trim_after_resets, 0);
    /// ```
    pub fn trim_after_resets(mut self, resets: u32) -> Self {
        self.trim_after_resets = resets;
        self
    }

    /// Sets [`heap_fallback`](ArenaConfig#structfield.heap_fallback). O(1).
    ///
    /// ```
    /// assert!(nebula_memory::ArenaConfig::default().heap_fallback(true).heap_fallback);
    /// ```
    pub fn heap_fallback(mut self, on: bool) -> Self {
        self.heap_fallback = on;
        self
    }
}

impl ArenaConfig {
    /// Sets the ledger [`tag`](ArenaConfig#structfield.tag): a `/`-separated path such as
    /// `"render/meshing"`; every block the arena takes is charged to it (and to its
    /// parents), and its budgets apply ([`ledger::set_budget`](crate::ledger::set_budget)).
    /// O(1).
    ///
    /// # Panics
    /// If `tag` is empty or has an empty segment (`"a//b"`, `"/a"`), naming the field.
    ///
    /// ```
    /// use nebula_memory::{Arena, ArenaConfig, MemoryArena, scratch_pool};
    /// let arena = MemoryArena::with_config(scratch_pool(), ArenaConfig::default().tag("doc/tag"));
    /// arena.alloc_val(1u32);
    /// let held = nebula_memory::ledger::snapshot().tag("doc/tag").unwrap().held;
    /// assert_eq!(held, arena.bytes_held());
    /// ```
    #[track_caller]
    pub fn tag(mut self, tag: &'static str) -> Self {
        crate::ledger::check_tag("ArenaConfig::tag", tag);
        self.tag = Some(tag);
        self
    }

    /// Caps the bytes of blocks the arena may hold (see `held_limit`).
    pub(crate) fn held_limit(mut self, bytes: usize) -> Self {
        self.held_limit = bytes;
        self
    }
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            first_block: 64 * 1024,
            max_block: 16 << 20,
            trim_after_resets: 120,
            heap_fallback: false,
            tag: None,
            first_block_set: false,
            held_limit: usize::MAX,
        }
    }
}
