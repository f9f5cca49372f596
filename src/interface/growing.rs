//! A buffer growing at the top of an arena: the engine of `alloc_slice_from_iter` and
//! `alloc_fmt`.

use std::alloc::Layout;
use std::fmt;
use std::ptr::{self, NonNull};

use super::Arena;
use crate::error::AllocError;

/// Elements are never dropped: callers only use it for types without drop glue.
pub(super) struct Growing<'a, T, A: Arena + ?Sized> {
    arena: &'a A,
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

impl<'a, T, A: Arena + ?Sized> Growing<'a, T, A> {
    pub(super) fn new(arena: &'a A) -> Self {
        let cap = if size_of::<T>() == 0 { usize::MAX } else { 0 };
        Growing {
            arena,
            ptr: NonNull::dangling(),
            len: 0,
            cap,
        }
    }

    fn layout_error(&self) -> AllocError {
        AllocError::layout(self.arena.pool_name())
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
            self.arena.try_alloc(new)?.cast()
        } else {
            let old = Layout::array::<T>(self.cap).map_err(|_| self.layout_error())?;
            // SAFETY: the buffer is live with layout `old`; we use only the result after.
            unsafe { self.arena.realloc(self.ptr.cast(), old, new.size())?.cast() }
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
            let shrunk = unsafe { self.arena.realloc(self.ptr.cast(), old, new.size()) };
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

impl<T: Copy, A: Arena + ?Sized> Growing<'_, T, A> {
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
pub(super) struct Writer<'a, A: Arena + ?Sized> {
    pub(super) buf: Growing<'a, u8, A>,
    pub(super) error: Option<AllocError>,
}

impl<'a, A: Arena + ?Sized> Writer<'a, A> {
    pub(super) fn new(arena: &'a A) -> Self {
        Writer {
            buf: Growing::new(arena),
            error: None,
        }
    }
}

impl<A: Arena + ?Sized> fmt::Write for Writer<'_, A> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Err(e) = self.buf.reserve(s.len()) {
            self.error = Some(e);
            return Err(fmt::Error);
        }
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }
}
