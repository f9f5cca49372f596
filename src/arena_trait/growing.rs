//! A buffer growing at the top of an arena: the engine of `alloc_slice_from_iter` and
//! `alloc_fmt`. It grows by doubling, in place while its arena can (the buffer is the
//! arena's newest allocation), so an iterator of unknown length costs no copies in the
//! common case; `finish` gives the unused tail back.
//!
//! The arena's operations come in as function pointers ([`Ops`]), filled in by the trait's
//! helpers: this module serves the `Arena` trait, so it does not name it.

use std::alloc::Layout;
use std::fmt;
use std::ptr::{self, NonNull};

use crate::error::AllocError;

/// Memory from the arena, or its refusal.
type Grown = Result<NonNull<u8>, AllocError>;

/// What a growing buffer asks of its arena: `Arena::try_alloc`, `Arena::realloc` and
/// `Arena::pool_name`. Called once per growth, never per element.
pub(super) struct Ops<A: ?Sized> {
    pub(super) alloc: fn(&A, Layout) -> Grown,
    /// # Safety
    /// As `Arena::realloc`: the pointer was allocated by the arena with the layout and is
    /// live; after a successful call only the result is used.
    pub(super) realloc: unsafe fn(&A, NonNull<u8>, Layout, usize) -> Grown,
    pub(super) pool_name: fn(&A) -> &'static str,
}

/// Elements are never dropped: callers only use it for types without drop glue.
pub(super) struct Growing<'a, T, A: ?Sized> {
    arena: &'a A,
    ops: Ops<A>,
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

impl<'a, T, A: ?Sized> Growing<'a, T, A> {
    pub(super) fn new(arena: &'a A, ops: Ops<A>) -> Self {
        let cap = if size_of::<T>() == 0 { usize::MAX } else { 0 };
        Growing {
            arena,
            ops,
            ptr: NonNull::dangling(),
            len: 0,
            cap,
        }
    }

    fn layout_error(&self) -> AllocError {
        AllocError::layout((self.ops.pool_name)(self.arena))
    }

    /// Makes room for `extra` more elements, in place when the arena can.
    pub(super) fn reserve(&mut self, extra: usize) -> Result<(), AllocError> {
        let needed = self
            .len
            .checked_add(extra)
            .ok_or_else(|| self.layout_error())?;
        if needed <= self.cap {
            return Ok(());
        }
        let new_cap = needed.max(self.cap.saturating_mul(2)).max(8);
        let new = Layout::array::<T>(new_cap).map_err(|_| self.layout_error())?;
        self.ptr = if self.cap == 0 {
            (self.ops.alloc)(self.arena, new)?.cast()
        } else {
            let old = Layout::array::<T>(self.cap).map_err(|_| self.layout_error())?;
            // SAFETY: the buffer is live with layout `old`; we use only the result after.
            unsafe { (self.ops.realloc)(self.arena, self.ptr.cast(), old, new.size())?.cast() }
        };
        self.cap = new_cap;
        Ok(())
    }

    /// # Panics (debug) if there is no room; callers reserve first.
    pub(super) fn push(&mut self, item: T) {
        debug_assert!(self.len < self.cap);
        // SAFETY: `len < cap`, inside the buffer.
        unsafe { self.ptr.as_ptr().add(self.len).write(item) };
        self.len += 1;
    }

    /// Shrinks the buffer to its length (giving the tail back if the arena can) and hands
    /// the elements over for the arena borrow's lifetime.
    pub(super) fn finish(self) -> &'a mut [T] {
        if self.cap != usize::MAX
            && self.cap > self.len
            && let (Ok(old), Ok(new)) = (Layout::array::<T>(self.cap), Layout::array::<T>(self.len))
        {
            // SAFETY: the buffer is live with `old`; shrinking keeps its start (in place,
            // or a no-op), and only the result is used afterwards.
            let shrunk =
                unsafe { (self.ops.realloc)(self.arena, self.ptr.cast(), old, new.size()) };
            debug_assert_eq!(
                shrunk.ok(),
                Some(self.ptr.cast()),
                "a shrink stays in place"
            );
        }
        // SAFETY: `len` elements are initialised and live in arena memory borrowed for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy, A: ?Sized> Growing<'_, T, A> {
    fn extend_from_slice(&mut self, src: &[T]) {
        debug_assert!(self.len + src.len() <= self.cap);
        // SAFETY: room was reserved; `src` is not inside our fresh tail.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(self.len), src.len())
        };
        self.len += src.len();
    }
}

/// `fmt::Write` into a growing byte buffer, remembering the arena's error.
pub(super) struct Writer<'a, A: ?Sized> {
    pub(super) buf: Growing<'a, u8, A>,
    pub(super) error: Option<AllocError>,
}

impl<'a, A: ?Sized> Writer<'a, A> {
    pub(super) fn new(arena: &'a A, ops: Ops<A>) -> Self {
        Writer {
            buf: Growing::new(arena, ops),
            error: None,
        }
    }
}

impl<A: ?Sized> fmt::Write for Writer<'_, A> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Err(e) = self.buf.reserve(s.len()) {
            self.error = Some(e);
            return Err(fmt::Error);
        }
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }
}
