//! `ArenaBox`: an owning handle to a value in an arena, for values with destructors.

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use super::Arena;

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
    ptr: NonNull<T>,
    arena: &'a A,
    _owns: PhantomData<T>,
}

impl<'a, T, A: Arena + ?Sized> ArenaBox<'a, T, A> {
    /// Writes `value` to `ptr` and owns it.
    ///
    /// # Safety
    /// `ptr` is fresh memory of `T`'s layout from `arena`.
    pub(super) unsafe fn new_in(ptr: NonNull<T>, value: T, arena: &'a A) -> Self {
        // SAFETY: per the contract.
        unsafe { ptr.write(value) };
        ArenaBox {
            ptr,
            arena,
            _owns: PhantomData,
        }
    }

    /// Moves the value out; the arena memory stays allocated until the arena frees it.
    /// O(1).
    ///
    /// ```
    /// use nebula_memory::{Arena, ArenaBox};
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let b = arena.alloc_boxed(String::from("x"));
    /// assert_eq!(ArenaBox::into_inner(b), "x");
    /// ```
    pub fn into_inner(this: Self) -> T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the value is initialised and owned by the box, which is forgotten, so it
        // is read exactly once.
        unsafe { this.ptr.read() }
    }

    /// Turns the box into a plain reference for the arena borrow's lifetime; the
    /// destructor will then never run (like `Box::leak`). O(1).
    ///
    /// ```
    /// use nebula_memory::{Arena, ArenaBox};
    /// let arena = nebula_memory::MemoryArena::new(nebula_memory::scratch_pool());
    /// let s: &mut String = ArenaBox::leak(arena.alloc_boxed(String::from("x")));
    /// s.push('y');
    /// ```
    pub fn leak(this: Self) -> &'a mut T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the value is initialised and lives in arena memory borrowed for 'a; the
        // box is forgotten, so this is the only reference.
        unsafe { &mut *this.ptr.as_ptr() }
    }
}

impl<T: ?Sized, A: Arena + ?Sized> Deref for ArenaBox<'_, T, A> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box owns an initialised value for as long as it lives.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized, A: Arena + ?Sized> DerefMut for ArenaBox<'_, T, A> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { self.ptr.as_mut() }
    }
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

impl<T: ?Sized + fmt::Debug, A: Arena + ?Sized> fmt::Debug for ArenaBox<'_, T, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
