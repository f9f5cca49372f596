use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::drop_check::refuse_drop;
use super::growing::{Growing, Ops, Writer};
use crate::error::{AllocError, alloc_failed, or_panic};

/// The allocation interface of every arena kind: one required method, and the typed
/// helpers as provided methods. Bring it into scope with `use nebula_memory::Arena;` (or
/// `use nebula_memory::prelude::*;`).
///
/// Memory handed out lives until the arena frees it all at once (its reset, a rewind, the
/// end of a scope); which operation that is, and what proves nobody still uses the
/// memory, is the arena kind's business, documented on it.
///
/// # Safety
///
/// The provided helpers write through what [`try_alloc`](Arena::try_alloc) returns and
/// hand it out as `&'a mut T` for the borrow `&'a self`, so an implementation promises,
/// for every `Ok(p)` of `try_alloc(layout)` (and of `alloc`, and of `realloc` for its new
/// layout):
/// - `p` is aligned to `layout.align()` and valid for reads and writes of
///   `layout.size()` bytes;
/// - those bytes are disjoint from every other allocation of the arena that is still
///   live, and nothing else reads or writes them until the arena frees them;
/// - they stay valid at least as long as the `&self` borrow the call was made through
///   (freeing earlier takes `&mut self`, or an `unsafe` method whose contract makes the
///   caller promise nothing freed is used);
/// - `pop` returns `true` only when it gave back exactly the allocation named (the newest),
///   and `realloc`'s result holds the first `min(old, new)` bytes of the old allocation.
///
/// Implementing the one required method is all it takes, which is why the trait is
/// `unsafe`: a safe `impl Arena` returning any pointer would let the helpers write there.
///
/// ```
/// use nebula_memory::{Arena, MemoryArena, SharedArena, with_scratch};
///
/// // Written once, for every arena kind.
/// fn squares<A: Arena + ?Sized>(arena: &A, n: usize) -> &[u64] {
///     arena.alloc_slice_fill_with(n, |i| (i * i) as u64)
/// }
///
/// let frame = MemoryArena::new(nebula_memory::scratch_pool());
/// let shared = SharedArena::new(nebula_memory::game_pool());
/// assert_eq!(squares(&frame, 4), &[0, 1, 4, 9]);
/// assert_eq!(squares(&shared, 3), &[0, 1, 4]);
/// assert_eq!(with_scratch(|s| squares(s, 5).iter().sum::<u64>()), 30);
/// ```
// Handing out `&mut` from `&self` is the point of an arena: each allocation is fresh
// memory no other reference can reach.
#[allow(clippy::mut_from_ref)]
pub unsafe trait Arena {
    /// Allocates memory for `layout`: uninitialised (0xCD in debug builds), aligned, valid
    /// until the arena frees it.
    ///
    /// # Errors
    /// The arena cannot supply the memory ([`AllocError::Pool`], [`AllocError::Full`]) or
    /// the request is impossible ([`AllocError::Layout`]).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let p = arena.try_alloc(Layout::from_size_align(256, 64).unwrap()).unwrap();
    /// assert_eq!(p.as_ptr() as usize % 64, 0);
    /// ```
    fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError>;

    /// [`try_alloc`](Arena::try_alloc), panicking with the error's message on failure.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::FrameArena::new(4096);
    /// let p = Arena::alloc(&arena, Layout::new::<[u64; 4]>());
    /// assert_eq!(p.as_ptr() as usize % 8, 0);
    /// ```
    #[inline]
    #[track_caller]
    fn alloc(&self, layout: Layout) -> NonNull<u8> {
        or_panic(self.try_alloc(layout))
    }

    /// Gives back the newest allocation (LIFO) if `ptr` is it, returning whether it was.
    /// Any other pointer is a no-op that returns `false`; so is every pointer for arena
    /// kinds that cannot pop (the default).
    ///
    /// # Safety
    /// If `ptr` is the newest allocation (made with `layout`'s size), it is not used
    /// afterwards.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let layout = Layout::new::<u64>();
    /// let p = Arena::alloc(&arena, layout);
    /// // SAFETY: `p` is not used again.
    /// assert!(unsafe { Arena::pop(&arena, p, layout) });
    /// ```
    unsafe fn pop(&self, ptr: NonNull<u8>, layout: Layout) -> bool {
        let _ = (ptr, layout);
        false
    }

    /// Resizes an allocation, keeping its first `min(old, new)` bytes and its alignment.
    /// The default allocates anew and copies (and shrinks in place); arenas that can grow
    /// their newest allocation in place do so.
    ///
    /// # Safety
    /// `ptr` was allocated by this arena with `old` and is live; after a successful call
    /// only the returned pointer is used.
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc); on error the old allocation is untouched.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::FrameArena::new(4096);
    /// let old = Layout::new::<[u8; 8]>();
    /// let p = Arena::alloc(&arena, old);
    /// // SAFETY: `p` is live with `old`; only the result is used afterwards.
    /// let q = unsafe { Arena::realloc(&arena, p, old, 64) }.unwrap();
    /// assert_eq!(q.as_ptr() as usize % 1, 0);
    /// ```
    unsafe fn realloc(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        if new_size <= old.size() {
            return Ok(ptr);
        }
        let new = Layout::from_size_align(new_size, old.align())
            .map_err(|_| AllocError::layout(self.pool_name()))?;
        let q = self.try_alloc(new)?;
        // SAFETY: `q` is fresh and disjoint from the live `ptr`, which has `old.size()`
        // bytes; the caller gives `ptr` up.
        unsafe {
            ptr::copy_nonoverlapping(ptr.as_ptr(), q.as_ptr(), old.size());
            self.pop(ptr, old);
        }
        Ok(q)
    }

    /// The name of the pool the arena draws from, for error messages.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::game_pool());
    /// assert_eq!(Arena::pool_name(&arena), "game");
    /// ```
    fn pool_name(&self) -> &'static str;

    // ------------------------------------------------------------------ values

    /// Moves `value` into the arena. O(1) amortised.
    ///
    /// `T` must not need dropping (a compile-time error otherwise: use
    /// [`alloc_boxed`](Arena::alloc_boxed)).
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let v = arena.try_alloc_val([0u8; 32]).unwrap();
    /// v[0] = 1;
    /// ```
    #[inline(always)]
    fn try_alloc_val<T>(&self, value: T) -> Result<&mut T, AllocError> {
        refuse_drop!(T);
        let p = self.try_alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: fresh, aligned memory for one T, borrowed from the arena.
        unsafe {
            p.write(value);
            Ok(&mut *p.as_ptr())
        }
    }

    /// [`try_alloc_val`](Arena::try_alloc_val), panicking with the error's message on
    /// failure. O(1) amortised.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let x = arena.alloc_val(41u32);
    /// *x += 1;
    /// assert_eq!(*x, 42);
    /// ```
    ///
    /// A type with a destructor is refused when the call is compiled (the arena would never
    /// run it; [`alloc_boxed`](Arena::alloc_boxed) returns an [`ArenaBox`] that does), as by
    /// every helper that returns `&mut T` or `&mut [T]`.
    ///
    /// ```compile_fail,E0080
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.alloc_val(String::from("leaked")); // this type has a destructor, ...
    /// s.push('!');
    /// ```
    #[inline(always)]
    #[track_caller]
    fn alloc_val<T>(&self, value: T) -> &mut T {
        refuse_drop!(T);
        let p = self.alloc(Layout::new::<T>()).cast::<T>();
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
    /// As [`try_alloc`](Arena::try_alloc); `f` is not called then.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let grid = arena.try_alloc_with(|| [[0u16; 64]; 64]).unwrap();
    /// assert_eq!(grid[63][63], 0);
    /// ```
    #[inline(always)]
    fn try_alloc_with<T>(&self, f: impl FnOnce() -> T) -> Result<&mut T, AllocError> {
        refuse_drop!(T);
        let p = self.try_alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: fresh, aligned memory for one T. If `f` panics the bytes stay allocated
        // and uninitialised, which is harmless: T has no destructor.
        unsafe {
            p.write(f());
            Ok(&mut *p.as_ptr())
        }
    }

    /// [`try_alloc_with`](Arena::try_alloc_with), panicking on failure. O(1) amortised.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let v = arena.alloc_with(|| (1u8, 2.0f32));
    /// assert_eq!(v.1, 2.0);
    /// ```
    #[inline(always)]
    #[track_caller]
    fn alloc_with<T>(&self, f: impl FnOnce() -> T) -> &mut T {
        or_panic(self.try_alloc_with(f))
    }

    /// Moves `value` into the arena behind an [`ArenaBox`], which drops it when the box
    /// goes out of scope. Any `T`, including types with destructors. O(1) amortised.
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc); the value is handed back with the error.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.try_alloc_boxed(String::from("hi")).unwrap();
    /// assert_eq!(&*b, "hi");
    /// ```
    fn try_alloc_boxed<T>(&self, value: T) -> Result<ArenaBox<'_, T, Self>, (T, AllocError)> {
        match self.try_alloc(Layout::new::<T>()) {
            Ok(p) => {
                let ptr = p.cast::<T>();
                // SAFETY: fresh memory of T's layout from this arena; the box owns it now.
                unsafe { ptr.write(value) };
                Ok(ArenaBox {
                    ptr,
                    arena: self,
                    _owns: PhantomData,
                })
            }
            Err(e) => Err((value, e)),
        }
    }

    /// [`try_alloc_boxed`](Arena::try_alloc_boxed), panicking on failure. O(1) amortised.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.alloc_boxed(vec![1, 2, 3]);
    /// assert_eq!(b.len(), 3);
    /// ```
    #[track_caller]
    fn alloc_boxed<T>(&self, value: T) -> ArenaBox<'_, T, Self> {
        match self.try_alloc_boxed(value) {
            Ok(b) => b,
            Err((_, e)) => alloc_failed(&e),
        }
    }

    // ------------------------------------------------------------------ slices

    /// A slice of `count` copies of `value`. O(count).
    ///
    /// # Errors
    /// [`AllocError::Layout`] if the size overflows, or as [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.try_alloc_slice(4, 7u16).unwrap(), &[7, 7, 7, 7]);
    /// assert!(arena.try_alloc_slice(usize::MAX, 0u64).is_err());
    /// ```
    fn try_alloc_slice<T: Copy>(&self, count: usize, value: T) -> Result<&mut [T], AllocError> {
        self.try_alloc_slice_fill_with(count, |_| value)
    }

    /// [`try_alloc_slice`](Arena::try_alloc_slice), panicking on failure. O(count).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice(3, 1u8), &[1, 1, 1]);
    /// ```
    #[track_caller]
    fn alloc_slice<T: Copy>(&self, count: usize, value: T) -> &mut [T] {
        or_panic(self.try_alloc_slice(count, value))
    }

    /// A copy of `src`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.try_alloc_slice_copy(&[1, 2, 3]).unwrap(), &[1, 2, 3]);
    /// ```
    #[inline]
    fn try_alloc_slice_copy<T: Copy>(&self, src: &[T]) -> Result<&mut [T], AllocError> {
        let p = self.try_alloc(Layout::for_value(src))?.cast::<T>();
        // SAFETY: fresh memory for `src.len()` Ts, disjoint from `src`.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len());
            Ok(std::slice::from_raw_parts_mut(p.as_ptr(), src.len()))
        }
    }

    /// [`try_alloc_slice_copy`](Arena::try_alloc_slice_copy), panicking on failure. O(len).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.alloc_slice_copy(b"bytes");
    /// s[0] = b'B';
    /// assert_eq!(s, b"Bytes");
    /// ```
    #[inline]
    #[track_caller]
    fn alloc_slice_copy<T: Copy>(&self, src: &[T]) -> &mut [T] {
        or_panic(self.try_alloc_slice_copy(src))
    }

    /// A clone of every element of `src`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.try_alloc_slice_clone(&["a", "b"]).unwrap(), &["a", "b"]);
    /// ```
    fn try_alloc_slice_clone<T: Clone>(&self, src: &[T]) -> Result<&mut [T], AllocError> {
        self.try_alloc_slice_fill_with(src.len(), |i| src[i].clone())
    }

    /// [`try_alloc_slice_clone`](Arena::try_alloc_slice_clone), panicking on failure.
    /// O(len).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice_clone(&[1.5f32, 2.5]), &[1.5, 2.5]);
    /// ```
    #[track_caller]
    fn alloc_slice_clone<T: Clone>(&self, src: &[T]) -> &mut [T] {
        or_panic(self.try_alloc_slice_clone(src))
    }

    /// A slice whose element `i` is `f(i)`. O(count).
    ///
    /// # Errors
    /// [`AllocError::Layout`] if the size overflows, or as [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let squares = arena.try_alloc_slice_fill_with(4, |i| i * i).unwrap();
    /// assert_eq!(squares, &[0, 1, 4, 9]);
    /// ```
    fn try_alloc_slice_fill_with<T>(
        &self,
        count: usize,
        mut f: impl FnMut(usize) -> T,
    ) -> Result<&mut [T], AllocError> {
        refuse_drop!(T);
        let layout = Layout::array::<T>(count).map_err(|_| AllocError::layout(self.pool_name()))?;
        let p = self.try_alloc(layout)?.cast::<T>().as_ptr();
        for i in 0..count {
            // SAFETY: `i < count`, inside the fresh allocation. A panic in `f` leaves the
            // rest uninitialised and unreachable, harmless as T has no destructor.
            unsafe { p.add(i).write(f(i)) };
        }
        // SAFETY: all `count` elements are initialised.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, count) })
    }

    /// [`try_alloc_slice_fill_with`](Arena::try_alloc_slice_fill_with), panicking on
    /// failure. O(count).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice_fill_with(3, |i| i as u8), &[0, 1, 2]);
    /// ```
    #[track_caller]
    fn alloc_slice_fill_with<T>(&self, count: usize, f: impl FnMut(usize) -> T) -> &mut [T] {
        or_panic(self.try_alloc_slice_fill_with(count, f))
    }

    /// Collects an iterator into a slice. The buffer grows at the top of the arena, in
    /// place while it can (see [`realloc`](Arena::realloc)), so an iterator of unknown
    /// length costs no copies in the common case. O(len) amortised.
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc); what was collected so far stays allocated
    /// until the arena frees it.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let evens = arena.try_alloc_slice_from_iter((0..10).filter(|n| n % 2 == 0)).unwrap();
    /// assert_eq!(evens, &[0, 2, 4, 6, 8]);
    /// ```
    fn try_alloc_slice_from_iter<T>(
        &self,
        iter: impl IntoIterator<Item = T>,
    ) -> Result<&mut [T], AllocError> {
        refuse_drop!(T);
        let iter = iter.into_iter();
        let mut buf = Growing::<T, Self>::new(self, ops::<Self>());
        buf.reserve(iter.size_hint().0)?;
        for item in iter {
            buf.reserve(1)?;
            buf.push(item);
        }
        Ok(buf.finish())
    }

    /// [`try_alloc_slice_from_iter`](Arena::try_alloc_slice_from_iter), panicking on
    /// failure. O(len) amortised.
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_slice_from_iter("abc".chars().rev()), &['c', 'b', 'a']);
    /// ```
    #[track_caller]
    fn alloc_slice_from_iter<T>(&self, iter: impl IntoIterator<Item = T>) -> &mut [T] {
        or_panic(self.try_alloc_slice_from_iter(iter))
    }

    // ------------------------------------------------------------------ text

    /// A copy of `s`. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.try_alloc_str("hello").unwrap();
    /// s.make_ascii_uppercase();
    /// assert_eq!(s, "HELLO");
    /// ```
    #[inline]
    fn try_alloc_str(&self, s: &str) -> Result<&mut str, AllocError> {
        let bytes = self.try_alloc_slice_copy(s.as_bytes())?;
        // SAFETY: a byte-for-byte copy of a `str` is valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked_mut(bytes) })
    }

    /// [`try_alloc_str`](Arena::try_alloc_str), panicking on failure. O(len).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_str("name"), "name");
    /// ```
    #[inline]
    #[track_caller]
    fn alloc_str(&self, s: &str) -> &mut str {
        or_panic(self.try_alloc_str(s))
    }

    /// Formats `args` straight into the arena (`format!` without the heap). The text grows
    /// at the top of the arena, in place while it can. O(len).
    ///
    /// # Errors
    /// As [`try_alloc`](Arena::try_alloc). A `Display` impl that itself fails yields
    /// [`AllocError::Layout`].
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s = arena.try_alloc_fmt(format_args!("{}-{:03}", "chunk", 7)).unwrap();
    /// assert_eq!(s, "chunk-007");
    /// ```
    fn try_alloc_fmt(&self, args: fmt::Arguments<'_>) -> Result<&mut str, AllocError> {
        if let Some(s) = args.as_str() {
            return self.try_alloc_str(s);
        }
        let mut w = Writer::new(self, ops::<Self>());
        if fmt::write(&mut w, args).is_err() {
            return Err(w
                .error
                .unwrap_or_else(|| AllocError::layout(self.pool_name())));
        }
        let bytes = w.buf.finish();
        // SAFETY: only whole `str`s were appended.
        Ok(unsafe { std::str::from_utf8_unchecked_mut(bytes) })
    }

    /// [`try_alloc_fmt`](Arena::try_alloc_fmt), panicking on failure. O(len).
    ///
    /// ```
    /// use nebula_memory::Arena;
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// assert_eq!(arena.alloc_fmt(format_args!("{}x{}", 16, 9)), "16x9");
    /// ```
    #[track_caller]
    fn alloc_fmt(&self, args: fmt::Arguments<'_>) -> &mut str {
        or_panic(self.try_alloc_fmt(args))
    }
}

/// An owning handle to a value in an arena, from [`Arena::alloc_boxed`]: dropping it runs
/// the value's destructor. The memory itself comes back when the arena frees it (or at
/// once, if it is still the newest allocation of an arena that can pop).
///
/// ```
/// use nebula_memory::Arena;
/// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
/// let mut names = arena.alloc_boxed(vec![String::from("a")]);
/// names.push("b".into());
/// assert_eq!(names.len(), 2);
/// drop(names); // the Vec and its Strings are freed here
/// ```
pub struct ArenaBox<'a, T: ?Sized, A: Arena + ?Sized> {
    pub(super) ptr: NonNull<T>,
    arena: &'a A,
    _owns: PhantomData<T>,
}

impl<T: ?Sized, A: Arena + ?Sized> Drop for ArenaBox<'_, T, A> {
    fn drop(&mut self) {
        // SAFETY: the box owns the initialised value; after dropping it the memory is dead,
        // so popping it (if it is the newest allocation) is allowed.
        unsafe {
            let layout = Layout::for_value(self.ptr.as_ref());
            ptr::drop_in_place(self.ptr.as_ptr());
            self.arena.pop(self.ptr.cast(), layout);
        }
    }
}

/// `A`'s operations, for a growing buffer (see [`Ops`]).
fn ops<A: Arena + ?Sized>() -> Ops<A> {
    Ops {
        alloc: A::try_alloc,
        realloc: A::realloc,
        pool_name: A::pool_name,
    }
}
