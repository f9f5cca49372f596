//! Capturing a call stack inside `alloc`: return addresses only, into a fixed array.
//!
//! **The unwinder** is the `backtrace` crate's (rust-lang's own, what std's backtraces
//! came from): `trace_unsynchronized` walks the stack with the platform's unwinder
//! (`_Unwind_Backtrace` over the binary's unwind tables on Linux and macOS,
//! `RtlVirtualUnwind` on 64-bit Windows). It needs no frame pointers (a default release
//! build has none) and neither allocates nor locks on those paths, so it may run inside
//! the allocator; the synchronised `trace` takes a lock and is not used. The frames are
//! symbolised later, outside any allocation, by the same crate's `resolve` (gimli's DWARF
//! reader, which folds inlined frames). Hand-written frame-pointer walking would be
//! faster but wrong in every build without frame pointers; `framehop` needs its own
//! module registry kept in step with `dlopen`.
//!
//! **Where no stacks are taken**: under Miri (it cannot run the platform's unwinder), on
//! the web (wasm32 has no stack walking), and on 32-bit Windows (its unwinder is
//! `dbghelp`, which needs the synchronised path). There a capture is empty: the figures
//! stay, and reports say "no call stacks on this target".

/// Frames kept of each stack: deep enough to reach a game's code from the allocator
/// through std's collections and Bevy's system runner.
pub(crate) const DEPTH: usize = 20;

/// Whether stacks can be taken in this build.
pub(crate) const AVAILABLE: bool = cfg!(not(any(
    miri,
    target_family = "wasm",
    all(windows, target_arch = "x86")
)));

/// A captured stack: return addresses, innermost first.
#[derive(Clone, Copy)]
pub(crate) struct Stack {
    pub(crate) ips: [usize; DEPTH],
    pub(crate) len: usize,
}

impl Stack {
    /// The addresses captured.
    pub(crate) fn frames(&self) -> &[usize] {
        &self.ips[..self.len]
    }
}

/// The calling thread's stack, up to [`DEPTH`] frames (empty where not [`AVAILABLE`]).
/// Neither allocates nor locks.
#[inline(never)]
pub(crate) fn capture() -> Stack {
    #[cfg_attr(
        any(miri, target_family = "wasm", all(windows, target_arch = "x86")),
        allow(unused_mut)
    )]
    let mut s = Stack {
        ips: [0; DEPTH],
        len: 0,
    };
    #[cfg(not(any(miri, target_family = "wasm", all(windows, target_arch = "x86"))))]
    {
        let mut push = |frame: &backtrace::Frame| {
            s.ips[s.len] = frame.ip() as usize;
            s.len += 1;
            s.len < DEPTH
        };
        // SAFETY: `trace_unsynchronized` asks that it not run concurrently with itself
        // where the platform's unwinder is not thread-safe: on the targets compiled here
        // it is `_Unwind_Backtrace` or `RtlVirtualUnwind`, both thread-safe (32-bit
        // Windows, where it is `dbghelp`, is excluded above). The callback only stores
        // addresses into `s`.
        unsafe { backtrace::trace_unsynchronized(&mut push) };
    }
    s
}
