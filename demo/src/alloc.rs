//! The global allocator of the demo: the system allocator behind the crate's
//! `TrackingAllocator` (which charges every heap byte to a ledger tag, and each Bevy
//! system's to `systems/<name>`), or, for the runs that measure without it, the system
//! allocator or mimalloc alone; counting allocations and live bytes in every case.
//!
//! Allocations are counted apart by who asked: the demo's own code marks its work with
//! [`own`], everything else (Bevy's executor, the ECS, the crate's pools) counts as Bevy's.

use std::alloc::{GlobalAlloc, Layout, System};

use nebula_memory::TrackingAllocator;
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64};

/// The environment variable that chooses a child process's allocator (see [`Backend`]).
pub const ALLOCATOR_VAR: &str = "FRAME_LOOP_ALLOCATOR";

/// Where a process's allocations go, chosen once, before its first allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The system allocator behind `TrackingAllocator` (the default).
    Tracked,
    /// The system allocator alone: what the tracking costs.
    System,
    /// mimalloc alone.
    Mimalloc,
}

impl Backend {
    /// The value of [`ALLOCATOR_VAR`] that chooses it.
    pub fn var(self) -> &'static str {
        match self {
            Backend::Tracked => "tracked",
            Backend::System => "system",
            Backend::Mimalloc => "mimalloc",
        }
    }
}

/// The tracking allocator over the system allocator, for [`Backend::Tracked`].
static TRACKED: TrackingAllocator<System> = TrackingAllocator::new(System);

/// Allocations (`alloc`, `alloc_zeroed`, `realloc`) made by the demo's own code.
static OWN_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Allocations made by everything else.
static OTHER_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not freed yet.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

/// 0: not decided yet; then 1 + the index of the [`Backend`] in `BACKENDS`.
static BACKEND: AtomicU8 = AtomicU8::new(0);
const BACKENDS: [Backend; 3] = [Backend::Tracked, Backend::System, Backend::Mimalloc];

thread_local! {
    /// How deep this thread is in the demo's own code.
    static OWN: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` as the demo's own code: what it allocates counts as the demo's.
#[inline]
pub fn own<R>(f: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            OWN.with(|d| d.set(d.get() - 1));
        }
    }
    OWN.with(|d| d.set(d.get() + 1));
    let _leave = Leave;
    f()
}

/// The allocation counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub own: u64,
    pub other: u64,
    pub live_bytes: i64,
}

pub fn counters() -> Counters {
    Counters {
        own: OWN_ALLOCATIONS.load(Relaxed),
        other: OTHER_ALLOCATIONS.load(Relaxed),
        live_bytes: LIVE_BYTES.load(Relaxed),
    }
}

/// This process's allocator.
pub fn backend() -> Backend {
    BACKENDS[usize::from(chosen() - 1)]
}

/// Decided once, at the process's first allocation, from the environment (read without
/// allocating), so every block is freed by the allocator that made it.
#[inline]
fn chosen() -> u8 {
    match BACKEND.load(Relaxed) {
        0 => {
            let asked = asked_for();
            let i = BACKENDS.iter().position(|b| b.var() == asked).unwrap_or(0);
            let chosen = i as u8 + 1;
            BACKEND.store(chosen, Relaxed);
            chosen
        }
        b => b,
    }
}

/// The value of [`ALLOCATOR_VAR`] ("" if unset), read without allocating.
#[cfg(unix)]
fn asked_for() -> &'static str {
    // SAFETY: `getenv` with a NUL-terminated name; nothing in this process sets variables.
    let value = unsafe { libc::getenv(c"FRAME_LOOP_ALLOCATOR".as_ptr()) };
    if value.is_null() {
        return "";
    }
    // SAFETY: a non-null result is a NUL-terminated string owned by the environment, which
    // nothing in this process changes.
    let value = unsafe { std::ffi::CStr::from_ptr(value) };
    value.to_str().unwrap_or("")
}

#[cfg(not(unix))]
fn asked_for() -> &'static str {
    ""
}

#[inline]
fn count(bytes: i64) {
    let counter = if OWN.with(Cell::get) > 0 {
        &OWN_ALLOCATIONS
    } else {
        &OTHER_ALLOCATIONS
    };
    counter.fetch_add(1, Relaxed);
    LIVE_BYTES.fetch_add(bytes, Relaxed);
}

/// The counting allocator.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to one allocator, the same for the whole
// process (chosen before the first block is handed out); counting has no effect on the
// memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: forwarded from the caller.
        unsafe {
            match chosen() {
                2 => System.alloc(layout),
                3 => mimalloc::MiMalloc.alloc(layout),
                _ => TRACKED.alloc(layout),
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: forwarded from the caller.
        unsafe {
            match chosen() {
                2 => System.alloc_zeroed(layout),
                3 => mimalloc::MiMalloc.alloc_zeroed(layout),
                _ => TRACKED.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Relaxed);
        // SAFETY: forwarded from the caller; the block came from the same allocator.
        unsafe {
            match chosen() {
                2 => System.dealloc(ptr, layout),
                3 => mimalloc::MiMalloc.dealloc(ptr, layout),
                _ => TRACKED.dealloc(ptr, layout),
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        // SAFETY: forwarded from the caller; the block came from the same allocator.
        unsafe {
            match chosen() {
                2 => System.realloc(ptr, layout, new_size),
                3 => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                _ => TRACKED.realloc(ptr, layout, new_size),
            }
        }
    }
}

/// The process's resident set size in bytes (0 where it cannot be read). Reads
/// `/proc/self/statm` into a buffer on the stack: measuring allocates nothing, so the
/// allocation counts are the frame's alone.
pub fn rss_bytes() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut buf = [0u8; 128];
        // SAFETY: a NUL-terminated path; `buf` is writable for its length; the descriptor
        // is closed before returning.
        let read = unsafe {
            let fd = libc::open(
                c"/proc/self/statm".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return 0;
            }
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            n
        };
        let Ok(n) = usize::try_from(read) else {
            return 0;
        };
        let pages: u64 = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|t| t.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
        pages * page
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}
