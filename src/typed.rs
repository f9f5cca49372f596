//! Typed allocation on top of the raw bump path: values, slices, strings, formatted text,
//! and the [`ArenaBox`] owning handle.
//!
//! Drop policy: an arena frees memory without running destructors, so every helper here
//! that returns a plain `&mut` refuses, **at compile time**, a type with drop glue (the
//! build fails with a message pointing to [`MemoryArena::alloc_boxed`]). `alloc_boxed`
//! accepts any type and returns an [`ArenaBox`], which runs the destructor when dropped.
//! Nothing leaks silently.

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use crate::arena::MemoryArena;
use crate::error::{AllocError, PoolError, alloc_failed};

/// Fails the build when `$t` has drop glue: its destructor would never run.
macro_rules! refuse_drop {
    ($t:ty) => {
        const {
            assert!(
                !std::mem::needs_drop::<$t>(),
                "this type has a destructor, which a MemoryArena never runs: use alloc_boxed \
                 (an ArenaBox drops its value)"
            )
        }
    };
}

/// An owning handle to a value in an arena: dropping it runs the value's destructor. The
/// memory itself comes back with the arena's next reset (or at once, if it is still the
/// top allocation).
///
/// ```
/// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
/// let mut names = arena.alloc_boxed(vec![String::from("a")]);
/// names.push("b".into());
/// assert_eq!(names.len(), 2);
/// drop(names); // the Vec and its Strings are freed here
/// ```
pub struct ArenaBox<'a, T: ?Sized> {
    pub(crate) ptr: NonNull<T>,
    pub(crate) arena: &'a MemoryArena<'a>,
    pub(crate) _owns: PhantomData<T>,
}

impl<'a, T> ArenaBox<'a, T> {
    /// Moves the value out; the arena memory stays allocated until reset. O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.alloc_boxed(String::from("x"));
    /// assert_eq!(nebula_memory::ArenaBox::into_inner(b), "x");
    /// ```
    pub fn into_inner(this: Self) -> T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the value is initialised and owned by the box, which is forgotten, so it
        // is read exactly once.
        unsafe { this.ptr.read() }
    }

    /// Turns the box into a plain reference for the arena's lifetime; the destructor will
    /// then never run (like `Box::leak`). O(1).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s: &mut String = nebula_memory::ArenaBox::leak(arena.alloc_boxed(String::from("x")));
    /// s.push('y');
    /// ```
    pub fn leak(this: Self) -> &'a mut T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the value is initialised and lives in arena memory borrowed for 'a; the
        // box is forgotten, so this is the only reference.
        unsafe { &mut *this.ptr.as_ptr() }
    }
}

impl<T: ?Sized> Deref for ArenaBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box owns an initialised value for as long as it lives.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for ArenaBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ?Sized> Drop for ArenaBox<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the box owns the initialised value; after dropping it the memory is dead,
        // so popping it (if it is the top) is allowed.
        unsafe {
            let layout = Layout::for_value(self.ptr.as_ref());
            ptr::drop_in_place(self.ptr.as_ptr());
            self.arena.pop(self.ptr.cast(), layout);
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ArenaBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<'pool> MemoryArena<'pool> {
    /// Moves `value` into the arena behind an [`ArenaBox`], which drops it when the box
    /// goes out of scope. Any `T`, including types with destructors. O(1) amortised.
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc); the value is handed back with the error.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.try_alloc_boxed(String::from("hi")).unwrap();
    /// assert_eq!(&*b, "hi");
    /// ```
    pub fn try_alloc_boxed<'a, T>(&'a self, value: T) -> Result<ArenaBox<'a, T>, (T, AllocError)>
    where
        'pool: 'a,
    {
        match self.try_alloc(Layout::new::<T>()) {
            Ok(p) => {
                let p = p.cast::<T>();
                // SAFETY: fresh memory of T's layout.
                unsafe { p.write(value) };
                Ok(ArenaBox {
                    ptr: p,
                    arena: self.shorten(),
                    _owns: PhantomData,
                })
            }
            Err(e) => Err((value, e)),
        }
    }

    /// [`try_alloc_boxed`](MemoryArena::try_alloc_boxed), panicking on failure. O(1) amortised.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.alloc_boxed(vec![1, 2, 3]);
    /// assert_eq!(b.len(), 3);
    /// ```
    #[track_caller]
    pub fn alloc_boxed<'a, T>(&'a self, value: T) -> ArenaBox<'a, T>
    where
        'pool: 'a,
    {
        match self.try_alloc_boxed(value) {
            Ok(b) => b,
            Err((_, e)) => alloc_failed(self.pool().name(), Layout::new::<T>(), &e),
        }
    }

    /// `&'a MemoryArena<'pool>` as `&'a MemoryArena<'a>` (the arena is covariant in 'pool).
    fn shorten<'a>(&'a self) -> &'a MemoryArena<'a>
    where
        'pool: 'a,
    {
        self
    }
}

// Handing out `&mut` from `&self` is the point of an arena: each allocation is fresh
// memory no other reference can reach.
#[allow(clippy::mut_from_ref)]
impl<'pool> MemoryArena<'pool> {
    /// Moves `value` into the arena. O(1) amortised.
    ///
    /// `T` must not need dropping (a compile-time error otherwise: use
    /// [`alloc_boxed`](MemoryArena::alloc_boxed)).
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let v = arena.try_alloc_val([0u8; 32]).unwrap();
    /// v[0] = 1;
    /// ```
    #[inline(always)]
    pub fn try_alloc_val<T>(&self, value: T) -> Result<&mut T, AllocError> {
        refuse_drop!(T);
        let p = self.try_alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: fresh, aligned memory for one T, borrowed from the arena for `'_`.
        unsafe {
            p.write(value);
            Ok(&mut *p.as_ptr())
        }
    }

    /// [`try_alloc_val`](MemoryArena::try_alloc_val), panicking (naming the pool and size)
    /// on failure. O(1) amortised.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let x = arena.alloc_val(41u32);
    /// *x += 1;
    /// assert_eq!(*x, 42);
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn alloc_val<T>(&self, value: T) -> &mut T {
        refuse_drop!(T);
        let layout = Layout::new::<T>();
        let p = self.alloc(layout).cast::<T>();
        // SAFETY: fresh, aligned memory for one T.
        unsafe {
            p.write(value);
            &mut *p.as_ptr()
        }
    }

    /// Allocates, then builds the value in place with `f` (large values need not pass
    /// through the stack). O(1) amortised.
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc); `f` is not called then.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let grid = arena.try_alloc_with(|| [[0u16; 64]; 64]).unwrap();
    /// assert_eq!(grid[63][63], 0);
    /// ```
    #[inline(always)]
    pub fn try_alloc_with<T>(&self, f: impl FnOnce() -> T) -> Result<&mut T, AllocError> {
        refuse_drop!(T);
        let p = self.try_alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: fresh, aligned memory for one T. If `f` panics the bytes stay allocated
        // and uninitialised, which is harmless: T has no destructor.
        unsafe {
            p.write(f());
            Ok(&mut *p.as_ptr())
        }
    }

    /// [`try_alloc_with`](MemoryArena::try_alloc_with), panicking on failure. O(1) amortised.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let v = arena.alloc_with(|| (1u8, 2.0f32));
    /// assert_eq!(v.1, 2.0);
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn alloc_with<T>(&self, f: impl FnOnce() -> T) -> &mut T {
        match self.try_alloc_with(f) {
            Ok(v) => v,
            Err(e) => alloc_failed(self.pool().name(), Layout::new::<T>(), &e),
        }
    }

    /// A slice of `count` copies of `value` (FrameArena's `alloc_slice`). O(count).
    ///
    /// # Errors
    /// [`AllocError::Layout`] if the size overflows, or as
    /// [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.try_alloc_slice(4, 7u16).unwrap();
    /// assert_eq!(s, &[7, 7, 7, 7]);
    /// assert!(arena.try_alloc_slice(usize::MAX, 0u64).is_err());
    /// ```
    pub fn try_alloc_slice<T: Copy>(&self, count: usize, value: T) -> Result<&mut [T], AllocError> {
        self.try_alloc_slice_fill_with(count, |_| value)
    }

    /// [`try_alloc_slice`](MemoryArena::try_alloc_slice), panicking on failure. O(count).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice(3, 1u8), &[1, 1, 1]);
    /// ```
    #[track_caller]
    pub fn alloc_slice<T: Copy>(&self, count: usize, value: T) -> &mut [T] {
        match self.try_alloc_slice(count, value) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<T>(count, &e),
        }
    }

    /// A copy of `src`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.try_alloc_slice_copy(&[1, 2, 3]).unwrap(), &[1, 2, 3]);
    /// ```
    #[inline]
    pub fn try_alloc_slice_copy<T: Copy>(&self, src: &[T]) -> Result<&mut [T], AllocError> {
        let layout = Layout::for_value(src);
        let p = self.try_alloc(layout)?.cast::<T>();
        // SAFETY: fresh memory for `src.len()` Ts, disjoint from `src`.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len());
            Ok(std::slice::from_raw_parts_mut(p.as_ptr(), src.len()))
        }
    }

    /// [`try_alloc_slice_copy`](MemoryArena::try_alloc_slice_copy), panicking on failure. O(len).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.alloc_slice_copy(b"bytes");
    /// s[0] = b'B';
    /// assert_eq!(s, b"Bytes");
    /// ```
    #[inline]
    #[track_caller]
    pub fn alloc_slice_copy<T: Copy>(&self, src: &[T]) -> &mut [T] {
        match self.try_alloc_slice_copy(src) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<T>(src.len(), &e),
        }
    }

    /// A clone of every element of `src`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let words = ["a", "b"];
    /// assert_eq!(arena.try_alloc_slice_clone(&words).unwrap(), &["a", "b"]);
    /// ```
    pub fn try_alloc_slice_clone<T: Clone>(&self, src: &[T]) -> Result<&mut [T], AllocError> {
        self.try_alloc_slice_fill_with(src.len(), |i| src[i].clone())
    }

    /// [`try_alloc_slice_clone`](MemoryArena::try_alloc_slice_clone), panicking on failure. O(len).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice_clone(&[1.5f32, 2.5]), &[1.5, 2.5]);
    /// ```
    #[track_caller]
    pub fn alloc_slice_clone<T: Clone>(&self, src: &[T]) -> &mut [T] {
        match self.try_alloc_slice_clone(src) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<T>(src.len(), &e),
        }
    }

    /// A slice whose element `i` is `f(i)`. O(count).
    ///
    /// # Errors
    /// [`AllocError::Layout`] if the size overflows, or as
    /// [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let squares = arena.try_alloc_slice_fill_with(4, |i| i * i).unwrap();
    /// assert_eq!(squares, &[0, 1, 4, 9]);
    /// ```
    pub fn try_alloc_slice_fill_with<T>(
        &self,
        count: usize,
        mut f: impl FnMut(usize) -> T,
    ) -> Result<&mut [T], AllocError> {
        refuse_drop!(T);
        let layout =
            Layout::array::<T>(count).map_err(|_| AllocError::layout(self.pool().name()))?;
        let p = self.try_alloc(layout)?.cast::<T>().as_ptr();
        for i in 0..count {
            // SAFETY: `i < count`, inside the fresh allocation. A panic in `f` leaves the
            // rest uninitialised and unreachable, harmless as T has no destructor.
            unsafe { p.add(i).write(f(i)) };
        }
        // SAFETY: all `count` elements are initialised.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, count) })
    }

    /// [`try_alloc_slice_fill_with`](MemoryArena::try_alloc_slice_fill_with), panicking on
    /// failure. O(count).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice_fill_with(3, |i| i as u8), &[0, 1, 2]);
    /// ```
    #[track_caller]
    pub fn alloc_slice_fill_with<T>(&self, count: usize, f: impl FnMut(usize) -> T) -> &mut [T] {
        match self.try_alloc_slice_fill_with(count, f) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<T>(count, &e),
        }
    }

    /// Collects an iterator into a slice. The buffer grows at the top of the arena, in
    /// place while the block has room, so an iterator of unknown length costs no copies
    /// in the common case. O(len) amortised.
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc); what was collected so far stays allocated
    /// until reset.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let evens = arena.try_alloc_slice_from_iter((0..10).filter(|n| n % 2 == 0)).unwrap();
    /// assert_eq!(evens, &[0, 2, 4, 6, 8]);
    /// ```
    pub fn try_alloc_slice_from_iter<T>(
        &self,
        iter: impl IntoIterator<Item = T>,
    ) -> Result<&mut [T], AllocError> {
        refuse_drop!(T);
        let iter = iter.into_iter();
        let mut buf = Growing::<T>::new(self);
        buf.reserve(iter.size_hint().0)?;
        for item in iter {
            buf.reserve(1)?;
            buf.push(item);
        }
        Ok(buf.finish())
    }

    /// [`try_alloc_slice_from_iter`](MemoryArena::try_alloc_slice_from_iter), panicking on
    /// failure. O(len) amortised.
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.alloc_slice_from_iter("abc".chars().rev());
    /// assert_eq!(s, &['c', 'b', 'a']);
    /// ```
    #[track_caller]
    pub fn alloc_slice_from_iter<T>(&self, iter: impl IntoIterator<Item = T>) -> &mut [T] {
        match self.try_alloc_slice_from_iter(iter) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<T>(0, &e),
        }
    }

    /// A copy of `s`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.try_alloc_str("hello").unwrap();
    /// s.make_ascii_uppercase();
    /// assert_eq!(s, "HELLO");
    /// ```
    #[inline]
    pub fn try_alloc_str(&self, s: &str) -> Result<&mut str, AllocError> {
        let bytes = self.try_alloc_slice_copy(s.as_bytes())?;
        // SAFETY: a byte-for-byte copy of a `str` is valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked_mut(bytes) })
    }

    /// [`try_alloc_str`](MemoryArena::try_alloc_str), panicking on failure. O(len).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_str("name"), "name");
    /// ```
    #[inline]
    #[track_caller]
    pub fn alloc_str(&self, s: &str) -> &mut str {
        match self.try_alloc_str(s) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<u8>(s.len(), &e),
        }
    }

    /// Formats `args` straight into the arena (`format!` without the heap). The text grows
    /// at the top of the arena, in place while its block has room. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](MemoryArena::try_alloc). A `Display` impl that itself fails
    /// yields [`AllocError::Layout`].
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.try_alloc_fmt(format_args!("{}-{:03}", "chunk", 7)).unwrap();
    /// assert_eq!(s, "chunk-007");
    /// ```
    pub fn try_alloc_fmt(&self, args: fmt::Arguments<'_>) -> Result<&mut str, AllocError> {
        if let Some(s) = args.as_str() {
            return self.try_alloc_str(s);
        }
        struct Writer<'a, 'p> {
            buf: Growing<'a, 'p, u8>,
            error: Option<AllocError>,
        }
        impl fmt::Write for Writer<'_, '_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                if let Err(e) = self.buf.reserve(s.len()) {
                    self.error = Some(e);
                    return Err(fmt::Error);
                }
                self.buf.extend_from_slice(s.as_bytes());
                Ok(())
            }
        }
        let mut w = Writer {
            buf: Growing::new(self),
            error: None,
        };
        if fmt::write(&mut w, args).is_err() {
            return Err(w
                .error
                .unwrap_or_else(|| AllocError::layout(self.pool().name())));
        }
        let bytes = w.buf.finish();
        // SAFETY: only whole `str`s were appended.
        Ok(unsafe { std::str::from_utf8_unchecked_mut(bytes) })
    }

    /// [`try_alloc_fmt`](MemoryArena::try_alloc_fmt), panicking on failure. O(len).
    ///
    /// ```
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_fmt(format_args!("{}x{}", 16, 9)), "16x9");
    /// ```
    #[track_caller]
    pub fn alloc_fmt(&self, args: fmt::Arguments<'_>) -> &mut str {
        match self.try_alloc_fmt(args) {
            Ok(v) => v,
            Err(e) => self.slice_failed::<u8>(0, &e),
        }
    }

    #[cold]
    #[track_caller]
    fn slice_failed<T>(&self, count: usize, e: &AllocError) -> ! {
        // Growing helpers do not know the final count: report what the pool was asked for.
        let bytes = match e {
            AllocError::Pool(PoolError::Exhausted { requested, .. })
            | AllocError::Pool(PoolError::TooLarge { requested, .. })
                if count == 0 =>
            {
                *requested
            }
            _ => count.saturating_mul(size_of::<T>()),
        };
        let layout = Layout::from_size_align(bytes.min(isize::MAX as usize / 2), align_of::<T>())
            .unwrap_or(Layout::new::<T>());
        alloc_failed(self.pool().name(), layout, e)
    }
}

/// A buffer growing at the top of an arena (the engine of `alloc_slice_from_iter` and
/// `alloc_fmt`). Elements are never dropped: callers only use it for types without drop
/// glue.
struct Growing<'a, 'p, T> {
    arena: &'a MemoryArena<'p>,
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

impl<'a, 'p, T> Growing<'a, 'p, T> {
    fn new(arena: &'a MemoryArena<'p>) -> Self {
        let cap = if size_of::<T>() == 0 { usize::MAX } else { 0 };
        Growing {
            arena,
            ptr: NonNull::dangling(),
            len: 0,
            cap,
        }
    }

    /// Makes room for `extra` more elements, in place when the buffer is the top.
    fn reserve(&mut self, extra: usize) -> Result<(), AllocError> {
        let pool = self.arena.pool().name();
        let needed = self
            .len
            .checked_add(extra)
            .ok_or(AllocError::Layout { pool })?;
        if needed <= self.cap {
            return Ok(());
        }
        let new_cap = needed.max(self.cap.saturating_mul(2)).max(8);
        let new = Layout::array::<T>(new_cap).map_err(|_| AllocError::Layout { pool })?;
        self.ptr = if self.cap == 0 {
            self.arena.try_alloc(new)?.cast()
        } else {
            let old = Layout::array::<T>(self.cap).map_err(|_| AllocError::Layout { pool })?;
            // SAFETY: the buffer is live with layout `old`; we use only the result after.
            unsafe { self.arena.realloc(self.ptr.cast(), old, new.size())?.cast() }
        };
        self.cap = new_cap;
        Ok(())
    }

    /// # Panics (debug) if there is no room; callers reserve first.
    fn push(&mut self, item: T) {
        debug_assert!(self.len < self.cap);
        // SAFETY: `len < cap`, inside the buffer.
        unsafe { self.ptr.as_ptr().add(self.len).write(item) };
        self.len += 1;
    }

    /// Shrinks the buffer to its length (giving the tail back if it is the top) and hands
    /// the elements over for the arena's lifetime.
    fn finish(self) -> &'a mut [T] {
        if self.cap != usize::MAX && self.cap > self.len {
            let pool = self.arena.pool().name();
            if let (Ok(old), Ok(new)) = (Layout::array::<T>(self.cap), Layout::array::<T>(self.len))
            {
                // SAFETY: shrinking never moves (it is in place or a no-op).
                let shrunk = unsafe { self.arena.realloc(self.ptr.cast(), old, new.size()) };
                debug_assert!(shrunk.is_ok(), "shrink in '{pool}' cannot fail");
            }
        }
        // SAFETY: `len` elements are initialised and live in arena memory borrowed for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Growing<'_, '_, T> {
    fn extend_from_slice(&mut self, src: &[T]) {
        debug_assert!(self.len + src.len() <= self.cap);
        // SAFETY: room was reserved; `src` is not inside our fresh tail.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(self.len), src.len())
        };
        self.len += src.len();
    }
}
