//! `with_scratch`: safe, nestable scratch space for the current thread.
//!
//! One thread-local arena with checkpoint/rewind is unsound when scopes nest: an inner
//! rewind would free what the outer scope allocated while the inner one ran. Instead each
//! thread keeps a stack of arenas, one per nesting depth (the RAD Debugger's answer to
//! scratch conflicts, made automatic). A call at depth `d` uses arena `d` alone and resets
//! it when it returns; every call at depth `d + 1` starts and finishes inside it. A thread's
//! calls are strictly nested even under work-stealing (a stolen task runs to completion
//! inside the frame that stole it), so an arena is never reset while a scope still uses it.
//!
//! The closure gets `&MemoryArena` for a lifetime it cannot return or store, and
//! `MemoryArena` is not `Sync`, so the reference cannot reach another thread either.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

use crate::arena::{ArenaConfig, MemoryArena};
use crate::global::scratch_pool;

struct ScratchStack {
    depth: Cell<usize>,
    /// Arena per depth. Raw pointers (from `Box::into_raw`), so that growing the `Vec`
    /// moves only pointers and never asserts uniqueness over an arena a scope is using.
    arenas: RefCell<Vec<NonNull<MemoryArena<'static>>>>,
}

impl Drop for ScratchStack {
    fn drop(&mut self) {
        for arena in self.arenas.get_mut().drain(..) {
            // SAFETY: made by `Box::into_raw` below; the thread is exiting, no scope is live.
            drop(unsafe { Box::from_raw(arena.as_ptr()) });
        }
    }
}

thread_local! {
    static STACK: ScratchStack = const {
        ScratchStack { depth: Cell::new(0), arenas: RefCell::new(Vec::new()) }
    };
}

/// Resets the depth's arena and pops the depth, also when the closure panics.
struct Exit {
    arena: NonNull<MemoryArena<'static>>,
}

impl Drop for Exit {
    fn drop(&mut self) {
        // SAFETY: the scope at this depth has ended, so no borrow of its arena is alive and
        // no other scope uses it (see the module docs); the arena lives until thread exit.
        unsafe { (*self.arena.as_ptr()).reset() };
        let _ = STACK.try_with(|s| s.depth.set(s.depth.get() - 1));
    }
}

/// Runs `f` with scratch space for the current thread; everything `f` allocates is
/// reclaimed when `f` returns (or panics). Nested calls, including calls from tasks that
/// work-stealing runs inside `f` on this thread, each get their own arena, so an inner
/// scope never frees memory an outer one still uses. O(1) plus the reset of one arena.
///
/// ```
/// use nebula_memory::Arena;
/// use nebula_memory::with_scratch;
///
/// let total = with_scratch(|outer| {
///     let xs = outer.alloc_slice_fill_with(100, |i| i as u32);
///     let inner_sum = with_scratch(|inner| {
///         let doubled = inner.alloc_slice_from_iter(xs.iter().map(|x| x * 2));
///         doubled.iter().sum::<u32>()
///     });
///     xs[99] + inner_sum // `xs` is intact after the inner scope
/// });
/// assert_eq!(total, 99 + 9900);
/// ```
pub fn with_scratch<R>(f: impl FnOnce(&MemoryArena<'static>) -> R) -> R {
    let entered = STACK.try_with(|s| {
        let depth = s.depth.get();
        let mut arenas = s.arenas.borrow_mut();
        if arenas.len() <= depth {
            let arena = Box::new(MemoryArena::with_config(
                scratch_pool(),
                ArenaConfig::default(),
            ));
            arenas.push(NonNull::from(Box::leak(arena)));
        }
        s.depth.set(depth + 1);
        arenas[depth]
    });
    match entered {
        Ok(arena) => {
            let _exit = Exit { arena };
            // SAFETY: the arena at this depth is used by this scope alone until `_exit`
            // resets it; it is freed only when the thread-local stack is destroyed, which
            // cannot happen while this thread is inside a scope.
            f(unsafe { arena.as_ref() })
        }
        // Thread-local storage is being torn down: a private arena serves this call.
        Err(_) => f(&MemoryArena::new(scratch_pool())),
    }
}
