//! What an [`ArenaBox`] offers its holder: the value behind it (`Deref`, `DerefMut`,
//! `Debug`), moved out ([`ArenaBox::into_inner`]) or leaked as a plain reference
//! ([`ArenaBox::leak`]). The type itself, and its drop (the value's destructor, then the
//! memory popped if it is still the arena's newest), stand beside the trait whose
//! `alloc_boxed` makes it, in `arena`.

use std::fmt;
use std::ops::{Deref, DerefMut};

use super::arena::{Arena, ArenaBox};

impl<'a, T, A: Arena + ?Sized> ArenaBox<'a, T, A> {
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

impl<T: ?Sized + fmt::Debug, A: Arena + ?Sized> fmt::Debug for ArenaBox<'_, T, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
