//! Double-buffered frame memory: what a frame stores stays valid through the next frame.
//!
//! Two [`SharedArena`]s take turns. During frame N, allocations go to the current buffer;
//! [`swap`](DoubleBufferedArena::swap) (frame end, `&mut self`) resets only the *older*
//! buffer, the one that held frame N-1, and makes it current. So frame N's data lives
//! through frame N+1: enough for a system to hand results to next frame's systems, or for
//! rendering to read what simulation wrote.
//!
//! Plain references borrow `&self`, so they cannot live across `swap`. For data that must
//! be *stored* (in a component, a resource, a message) there is [`FrameHandle`]: a small
//! `Copy` handle with no lifetime. [`get`](DoubleBufferedArena::get) checks it with one
//! comparison: each buffer carries a *stamp* that names its current incarnation, unique in
//! the process (a global counter; the low bit is the buffer's index). A handle records the
//! stamp of the buffer it was stored in; once that buffer is reset its stamp changes, and
//! a handle of another `DoubleBufferedArena` never matches either. So `get` returns the
//! value exactly while its frame is the current or the previous one, and `None` after,
//! never stale memory.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use super::SharedArena;
use crate::arena::ArenaConfig;
use crate::arena_trait::Arena;
use crate::error::AllocError;
use crate::pool::MemoryPool;

/// Source of buffer stamps: every buffer incarnation in the process gets a new one.
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

/// A new stamp for buffer `index` (0 or 1).
fn new_stamp(index: usize) -> u64 {
    (NEXT_STAMP.fetch_add(1, Relaxed) << 1) | index as u64
}

/// Two shared arenas taking turns, so that data of frame N stays valid through frame N+1.
/// `Send + Sync`: any number of threads store into the current frame at once.
///
/// ```
/// use nebula_memory::{DoubleBufferedArena, MemoryPool};
///
/// let pool = MemoryPool::new("frames", 16 << 20).unwrap();
/// let mut frames = DoubleBufferedArena::new(&pool);
/// let target = frames.store([1.0f32, 2.0, 3.0]); // frame 0
/// frames.swap(); // frame 1: frame 0's data is still there
/// assert_eq!(frames.get(target), Some(&[1.0, 2.0, 3.0]));
/// frames.swap(); // frame 2: frame 0's buffer was reset
/// assert_eq!(frames.get(target), None);
/// ```
pub struct DoubleBufferedArena<'pool> {
    buffers: [SharedArena<'pool>; 2],
    /// Stamp of each buffer's current incarnation.
    stamps: [u64; 2],
    /// Index of the buffer the current frame allocates from.
    current: usize,
    /// Frames ended so far.
    frame: u64,
}

impl<'pool> DoubleBufferedArena<'pool> {
    /// Two empty buffers over `pool`. O(1).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(frames.frame(), 0);
    /// ```
    pub fn new(pool: &'pool MemoryPool) -> Self {
        Self::with_config(pool, ArenaConfig::default())
    }

    /// Two empty buffers whose per-thread parts follow `config`. O(1).
    ///
    /// ```
    /// use nebula_memory::{ArenaConfig, DoubleBufferedArena};
    /// let config = ArenaConfig::default().first_block(16 * 1024);
    /// let frames = DoubleBufferedArena::with_config(nebula_memory::scratch_pool(), config);
    /// assert_eq!(frames.current().config().first_block, 16 * 1024);
    /// ```
    #[track_caller]
    pub fn with_config(pool: &'pool MemoryPool, config: ArenaConfig) -> Self {
        DoubleBufferedArena {
            buffers: [
                SharedArena::with_config(pool, config),
                SharedArena::with_config(pool, config),
            ],
            stamps: [new_stamp(0), new_stamp(1)],
            current: 0,
            frame: 0,
        }
    }

    /// The buffer of the current frame, for allocations used by reference. Everything it
    /// hands out borrows `&self`, so it cannot outlive [`swap`](Self::swap). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let visible = frames.current().alloc_slice_fill_with(8, |i| i as u32);
    /// assert_eq!(visible[7], 7);
    /// ```
    pub fn current(&self) -> &SharedArena<'pool> {
        &self.buffers[self.current]
    }

    /// The buffer of the previous frame (read-only use is the point, but it may still be
    /// allocated from: that memory is reset at the next swap). O(1).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let mut frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// frames.current().alloc_val(1u64);
    /// frames.swap();
    /// assert_eq!(frames.previous().bytes_used(), 8);
    /// ```
    pub fn previous(&self) -> &SharedArena<'pool> {
        &self.buffers[1 - self.current]
    }

    /// Frames ended so far (calls to [`swap`](Self::swap)). O(1).
    ///
    /// ```
    /// let mut frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// frames.swap();
    /// assert_eq!(frames.frame(), 1);
    /// ```
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// Stores `value` in the current frame and returns a handle that reads it back
    /// through this frame and the next. O(1) amortised.
    ///
    /// # Panics
    /// If the pool cannot supply a block (naming the pool and the size); see
    /// [`try_store`](Self::try_store).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = frames.store(42u32);
    /// assert_eq!(frames.get(h), Some(&42));
    /// ```
    #[track_caller]
    pub fn store<T: Copy + Send + Sync>(&self, value: T) -> FrameHandle<T> {
        let value = self.current().alloc_val(value);
        self.handle(NonNull::from(value))
    }

    /// [`store`](Self::store), returning the error instead of panicking. O(1) amortised.
    ///
    /// # Errors
    /// As [`MemoryArena::try_alloc`](crate::MemoryArena::try_alloc).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = frames.try_store((1u8, 2u16)).unwrap();
    /// assert_eq!(frames.get(h), Some(&(1, 2)));
    /// ```
    pub fn try_store<T: Copy + Send + Sync>(&self, value: T) -> Result<FrameHandle<T>, AllocError> {
        let value = self.current().try_alloc_val(value)?;
        Ok(self.handle(NonNull::from(value)))
    }

    /// Stores a copy of `values` in the current frame. O(len).
    ///
    /// # Panics
    /// If the pool cannot supply a block; see [`try_store_slice`](Self::try_store_slice).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let visible = frames.store_slice(&[3u32, 1, 4]);
    /// assert_eq!(frames.get(visible), Some(&[3, 1, 4][..]));
    /// ```
    #[track_caller]
    pub fn store_slice<T: Copy + Send + Sync>(&self, values: &[T]) -> FrameHandle<[T]> {
        let values = self.current().alloc_slice_copy(values);
        self.handle(NonNull::from(values))
    }

    /// [`store_slice`](Self::store_slice), returning the error instead of panicking.
    /// O(len).
    ///
    /// # Errors
    /// As [`MemoryArena::try_alloc`](crate::MemoryArena::try_alloc).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = frames.try_store_slice(b"abc").unwrap();
    /// assert_eq!(frames.get(h).unwrap(), b"abc");
    /// ```
    pub fn try_store_slice<T: Copy + Send + Sync>(
        &self,
        values: &[T],
    ) -> Result<FrameHandle<[T]>, AllocError> {
        let values = self.current().try_alloc_slice_copy(values)?;
        Ok(self.handle(NonNull::from(values)))
    }

    fn handle<T: ?Sized>(&self, ptr: NonNull<T>) -> FrameHandle<T> {
        FrameHandle {
            ptr,
            stamp: self.stamps[self.current],
            _owns: PhantomData,
        }
    }

    /// The value behind `handle`, while the frame it was stored in is the current or the
    /// previous one; `None` once that frame's buffer has been reset, and for a handle of
    /// another `DoubleBufferedArena`. O(1): one load and one comparison.
    ///
    /// ```
    /// use nebula_memory::DoubleBufferedArena;
    /// let mut a = DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let b = DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = a.store(5u8);
    /// assert_eq!(b.get(h), None, "another arena's handle");
    /// a.swap();
    /// a.swap();
    /// assert_eq!(a.get(h), None, "its frame was reset");
    /// ```
    #[inline]
    pub fn get<T: ?Sized>(&self, handle: FrameHandle<T>) -> Option<&T> {
        if self.stamps[(handle.stamp & 1) as usize] == handle.stamp {
            // SAFETY: the stamp matches, so the buffer the value was stored in has not been
            // reset since (a reset gives it a new stamp, unique in the process) and this
            // is the arena that stored it. The value was initialised by `store`, is never
            // written again (`store` hands out no `&mut`), and stays until the buffer's
            // next reset, which needs `&mut self` and so waits for this borrow to end.
            // `T: Sync` was required to make the handle (`store`'s bounds).
            Some(unsafe { handle.ptr.as_ref() })
        } else {
            None
        }
    }

    /// Ends the frame: resets the older buffer (the one that held the previous frame) and
    /// makes it current. Handles stored in the frame that just ended stay valid for one
    /// more frame; those stored before it are refused from now on. O(threads + blocks) of
    /// the buffer reset.
    ///
    /// ```
    /// let mut frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = frames.store(1u16);
    /// frames.swap();
    /// assert!(frames.get(h).is_some());
    /// frames.swap();
    /// assert!(frames.get(h).is_none());
    /// ```
    ///
    /// A plain reference from [`get`](DoubleBufferedArena::get) borrows the arena, so it
    /// cannot live across `swap` (a [`FrameHandle`] is what crosses frames):
    ///
    /// ```compile_fail,E0502
    /// let mut frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// let h = frames.store(1u32);
    /// let value: &u32 = frames.get(h).unwrap();
    /// frames.swap(); // cannot borrow `frames` as mutable: `value` borrows it
    /// assert_eq!(*value, 1);
    /// ```
    pub fn swap(&mut self) {
        self.swap_quietly();
        // Budget crossings of the reset, told once the swap is complete.
        crate::ledger::emit_pending_warnings();
    }

    /// [`swap`](Self::swap) without telling budget warnings: for a caller that has more to
    /// do before user code may run, and tells them itself when it is done.
    pub(crate) fn swap_quietly(&mut self) {
        let older = 1 - self.current;
        // The stamp first: from here on no handle of the older frame passes `get`, even
        // if what follows panics.
        self.stamps[older] = new_stamp(older);
        self.buffers[older].reset_quietly();
        self.current = older;
        self.frame += 1;
    }
}

impl fmt::Debug for DoubleBufferedArena<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DoubleBufferedArena")
            .field("frame", &self.frame)
            .field("current", &self.current().stats())
            .field("previous", &self.previous().stats())
            .finish()
    }
}

/// A handle to a value (or slice) stored in a [`DoubleBufferedArena`]: `Copy`, two words
/// (three for a slice), no lifetime, so it can be kept in a component, a resource or a
/// message to the next frame. Read it with [`DoubleBufferedArena::get`], which returns
/// `None` once the value's frame is gone.
///
/// ```
/// use nebula_memory::{DoubleBufferedArena, FrameHandle};
///
/// struct Culled {
///     visible: FrameHandle<[u32]>, // stored by one system, read by another
/// }
/// let frames = DoubleBufferedArena::new(nebula_memory::scratch_pool());
/// let c = Culled { visible: frames.store_slice(&[1, 5, 9]) };
/// assert_eq!(frames.get(c.visible).map(<[u32]>::len), Some(3));
/// assert_eq!(size_of::<FrameHandle<u64>>(), 16);
/// ```
pub struct FrameHandle<T: ?Sized> {
    ptr: NonNull<T>,
    /// Stamp of the buffer incarnation the value was stored in (low bit: the buffer).
    stamp: u64,
    _owns: PhantomData<T>,
}

impl<T: ?Sized> FrameHandle<T> {
    /// The frame-buffer stamp this handle was stored under: equal for every handle stored
    /// into the same buffer in the same frame. O(1).
    ///
    /// ```
    /// let frames = nebula_memory::DoubleBufferedArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(frames.store(1u8).stamp(), frames.store(2u8).stamp());
    /// ```
    pub fn stamp(self) -> u64 {
        self.stamp
    }
}

impl<T: ?Sized> Clone for FrameHandle<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for FrameHandle<T> {}

// SAFETY: a handle is a pointer and a stamp; the only access it gives is `&T` through
// `DoubleBufferedArena::get`, and handles are only made for `T: Send + Sync`
// (`store`'s bounds), so sharing or sending them is sharing `&T`, which `T: Sync` allows.
unsafe impl<T: ?Sized + Send + Sync> Send for FrameHandle<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for FrameHandle<T> {}

impl<T: ?Sized> PartialEq for FrameHandle<T> {
    fn eq(&self, other: &Self) -> bool {
        self.stamp == other.stamp && std::ptr::addr_eq(self.ptr.as_ptr(), other.ptr.as_ptr())
    }
}

impl<T: ?Sized> Eq for FrameHandle<T> {}

impl<T: ?Sized> Hash for FrameHandle<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.stamp.hash(state);
        self.ptr.as_ptr().cast::<u8>().hash(state);
    }
}

impl<T: ?Sized> fmt::Debug for FrameHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameHandle")
            .field("at", &self.ptr.as_ptr().cast::<u8>())
            .field("stamp", &self.stamp)
            .finish()
    }
}
