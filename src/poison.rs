//! Debug poisoning and AddressSanitizer annotations, in one place.
//!
//! Two independent aids, both compiled out of a normal release build:
//! - `debug_assertions`: bytes handed out are filled with [`HANDED_OUT`] (0xCD) and bytes
//!   given back with [`GIVEN_BACK`] (0xDD), after MSVC's CRT, so uninitialised reads and
//!   stale reads show up as recognisable patterns.
//! - `--cfg nebula_asan` (with `-Zsanitizer=address`): bytes no caller holds are poisoned in
//!   ASan's shadow memory, so touching them is reported at once.
//!
//! Inside the crate, every layer calls `hand_out` for bytes it gives to its caller and
//! `give_back` for bytes it takes back; `expose` and `hide` annotate metadata (free-block
//! headers and footers) without filling it.

/// Fill byte for memory handed out (debug builds).
pub const HANDED_OUT: u8 = 0xCD;
/// Fill byte for memory given back (debug builds).
pub const GIVEN_BACK: u8 = 0xDD;

#[cfg(nebula_asan)]
unsafe extern "C" {
    fn __asan_poison_memory_region(addr: *const u8, size: usize);
    fn __asan_unpoison_memory_region(addr: *const u8, size: usize);
    fn __asan_region_is_poisoned(addr: *const u8, size: usize) -> *const u8;
}

/// Whether any byte of `[ptr, ptr + len)` is poisoned (always `false` without ASan). Lets
/// the pool reject a stale or foreign pointer before reading a header that is not one.
#[inline(always)]
pub(crate) fn is_hidden(ptr: *const u8, len: usize) -> bool {
    #[cfg(nebula_asan)]
    // SAFETY: a shadow-memory query; it reads no application memory.
    unsafe {
        return !__asan_region_is_poisoned(ptr, len).is_null();
    }
    #[cfg(not(nebula_asan))]
    {
        let _ = (ptr, len);
        false
    }
}

/// `[ptr, ptr + len)` now belongs to a caller: unpoison it and, in debug builds, fill it
/// with 0xCD.
///
/// # Safety
/// The range is valid for writes and nobody else uses it.
#[inline(always)]
pub(crate) unsafe fn hand_out(ptr: *mut u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { expose(ptr, len) };
    #[cfg(debug_assertions)]
    // SAFETY: the caller guarantees the range is writable and unused.
    unsafe {
        ptr.write_bytes(HANDED_OUT, len)
    };
    let _ = (ptr, len);
}

/// `[ptr, ptr + len)` was given back: in debug builds fill it with 0xDD, then poison it.
///
/// # Safety
/// The range is valid for writes and nobody uses it any more.
#[inline(always)]
pub(crate) unsafe fn give_back(ptr: *mut u8, len: usize) {
    #[cfg(debug_assertions)]
    // SAFETY: the caller guarantees the range is writable and dead. Part of it may already
    // be poisoned (an arena's unused tail), so unpoison before filling.
    unsafe {
        expose(ptr, len);
        ptr.write_bytes(GIVEN_BACK, len)
    };
    // SAFETY: forwarded from the caller.
    unsafe { hide(ptr, len) };
}

/// Unpoisons `[ptr, ptr + len)` for ASan without touching it.
///
/// # Safety
/// The range lies inside memory this crate manages.
#[inline(always)]
pub(crate) unsafe fn expose(ptr: *const u8, len: usize) {
    #[cfg(nebula_asan)]
    // SAFETY: shadow-memory update for a range the caller vouches for.
    unsafe {
        __asan_unpoison_memory_region(ptr, len)
    };
    let _ = (ptr, len);
}

/// Poisons `[ptr, ptr + len)` for ASan without touching it.
///
/// # Safety
/// The range lies inside memory this crate manages and nobody may use it until exposed.
#[inline(always)]
pub(crate) unsafe fn hide(ptr: *const u8, len: usize) {
    #[cfg(nebula_asan)]
    // SAFETY: shadow-memory update for a range the caller vouches for.
    unsafe {
        __asan_poison_memory_region(ptr, len)
    };
    let _ = (ptr, len);
}
