//! The sampler: call stacks of a sample of the heap's allocations, so the ledger can say
//! where in the code a line's memory comes from.
//!
//! **Which allocations.** Sampling is by bytes, as tcmalloc's and jemalloc's heap
//! profilers do it: each counter of the tracker (a tag in a thread's shard) draws the
//! distance to its next sample from an exponential distribution of the chosen mean, and
//! the allocation whose bytes take the counter's running total past it is sampled. So
//! every byte is equally likely to be the one sampled, and an allocation of `s` bytes is
//! taken with probability `1 - exp(-s / mean)`; a sample stands for `s / (1 - exp(-s /
//! mean))` bytes (its *weight*), and a sum of weights estimates bytes without bias, per
//! call site, per line, per frame. Allocations of [`ALWAYS`] bytes or more are always
//! taken, with their own size as weight. A `realloc` is sampled as a fresh allocation of
//! its new size (a vector's growth is where it allocates). The check on the allocation
//! path is one comparison with a threshold that sits in the counter's own cache line
//! (`counters::sampled`); off, the threshold is a poll every [`POLL`] bytes, so turning
//! sampling on reaches every counter within that many of its bytes.
//!
//! **The mean.** [`DEFAULT_MEAN`], 512 KiB, tcmalloc's and jemalloc's: a game churning
//! 10 MB a frame takes about 20 samples a frame, a few microseconds of captures, and
//! a line that keeps 4 KiB a frame is found within about 128 frames (two seconds at 60
//! fps). A smaller mean finds small leaks sooner for proportionally more captures.
//!
//! **What a sample keeps** ([`table`]): its address, size, weight, frame and call site
//! (the tag and the call stack, [`stack`]) while the allocation lives, and per call site
//! the bytes allocated (estimated) ever and live now. Symbols are looked up only when a
//! report asks (`ledger::call_sites`), never on the allocation path.
//!
//! **On the allocation path.** A sample is taken inside `alloc`: the capture neither
//! allocates nor takes a lock (the unwinder walks the stack's unwind tables in place), and
//! the tables are a fixed-size block taken from `System` at the first sample, under a spin
//! lock held for a few loads and stores, never while allocating or capturing. A thread
//! inside the sampler (or reading its tables for a report, or forking) is *busy*: its
//! allocations are counted as usual and never sampled, so the sampler never re-enters
//! itself. A full table drops the sample (counted, [`dropped`]); the allocation is
//! tracked as if unsampled.
//!
//! **Off by default.** On with `ledger::set_sampling`, or with the environment variable
//! `NEBULA_MEMORY_SAMPLE` (the mean in bytes, `K`/`M` suffixes allowed; `0` is off). On
//! Unix the variable is read at the first sampling decision of the process (with
//! `getenv`, which neither allocates nor locks), so start-up allocations are sampled;
//! elsewhere at the ledger's first frame end or snapshot.

pub(crate) mod stack;
pub(crate) mod table;

use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

/// Allocations of this many bytes or more are always sampled (1 MiB, re_memory's choice
/// too: rare, and each a sizeable part of any line it lands on).
pub(crate) const ALWAYS: usize = 1 << 20;

/// The sampling threshold's step while sampling is off: each counter asks again after this
/// many bytes (one cold call per MiB a counter allocates).
pub(crate) const POLL: u64 = 1 << 20;

/// The mean distance between samples, in bytes, when sampling is turned on without one.
pub const DEFAULT_MEAN: usize = 512 << 10;

/// The mean in bytes; 0 is off; `UNREAD` until the environment was consulted.
static MEAN: AtomicU64 = AtomicU64::new(UNREAD);
const UNREAD: u64 = u64::MAX;

/// Frames ended since the process began (the ledger's `end_frame` counts them): the frame
/// a sample was taken in.
static FRAME: AtomicU64 = AtomicU64::new(0);
/// The frame at which sampling was last turned on: churn per frame is over the frames
/// since.
static ON_SINCE: AtomicU64 = AtomicU64::new(0);
/// The seed of each thread's random stream (mixed with the thread's own address).
static SEED: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
/// Random streams begun so far: each thread's is the seed and its number (so a seeded run
/// draws the same streams, whichever thread takes which).
static STREAMS: AtomicU64 = AtomicU64::new(0);
/// Samples not kept because a table was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// `const` and without a destructor, as the tracker's own thread-local: read inside
    /// `alloc`, until the thread's very end.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// The mean in bytes (0: off), reading the environment first if nobody has.
#[inline]
pub(crate) fn mean() -> u64 {
    let m = MEAN.load(Relaxed);
    if m != UNREAD { m } else { read_env_once() }
}

#[cold]
fn read_env_once() -> u64 {
    let m = env_mean().unwrap_or(0);
    // A `set_sampling` that came first wins.
    match MEAN.compare_exchange(UNREAD, m, Relaxed, Relaxed) {
        Ok(_) => m,
        Err(now) => now,
    }
}

/// `NEBULA_MEMORY_SAMPLE`, read without allocating where the platform allows.
#[cfg(unix)]
fn env_mean() -> Option<u64> {
    // SAFETY: the name is a NUL-terminated C string; `getenv` returns null or a pointer
    // to a NUL-terminated value in the environment, read at once (before any `setenv`
    // this thread could make).
    unsafe {
        let v = libc::getenv(c"NEBULA_MEMORY_SAMPLE".as_ptr());
        if v.is_null() {
            return None;
        }
        parse_mean(std::ffi::CStr::from_ptr(v).to_bytes())
    }
}

/// Elsewhere reading the environment allocates: `read_env` (outside `alloc`) does it.
#[cfg(not(unix))]
fn env_mean() -> Option<u64> {
    None
}

/// Reads `NEBULA_MEMORY_SAMPLE` now where the allocation path cannot (not Unix), if
/// neither the environment nor `set_sampling` has set the mean yet. Called by the
/// ledger's frame end and snapshot. Allocates.
pub(crate) fn read_env() {
    if MEAN.load(Relaxed) != UNREAD {
        return;
    }
    let m = std::env::var("NEBULA_MEMORY_SAMPLE")
        .ok()
        .and_then(|v| parse_mean(v.as_bytes()))
        .unwrap_or(0);
    if MEAN.compare_exchange(UNREAD, m, Relaxed, Relaxed).is_ok() && m != 0 {
        ON_SINCE.store(FRAME.load(Relaxed), Relaxed);
    }
}

/// `"524288"`, `"512K"`, `"2M"` (binary units, either case); `None` for anything else.
pub(crate) fn parse_mean(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    let (digits, unit) = match v.last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        _ => (v, 1),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n = 0u64;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    n.checked_mul(unit)
}

/// Sets the mean (`None`: off). Counters see it within [`POLL`] bytes of allocation (or at
/// their next sample).
pub(crate) fn set_mean(mean: Option<usize>) {
    let m = mean.map_or(0, |m| (m as u64).max(1));
    let was = MEAN.swap(m, Relaxed);
    if m != 0 && (was == 0 || was == UNREAD) {
        ON_SINCE.store(FRAME.load(Relaxed), Relaxed);
    }
}

/// The mean in effect, `None` if off.
pub(crate) fn current_mean() -> Option<usize> {
    match mean() {
        0 => None,
        m => Some(usize::try_from(m).unwrap_or(usize::MAX)),
    }
}

/// Seeds each thread's random stream from now on (threads that drew already keep
/// theirs). For tests that want one run's samples again.
pub(crate) fn set_seed(seed: u64) {
    SEED.store(seed, Relaxed);
    STREAMS.store(0, Relaxed);
    RNG.with(|r| r.set(0));
}

/// The distance in bytes to the next sample: exponential with mean `mean`, at least 1.
pub(crate) fn draw(mean: u64) -> u64 {
    let x = RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            // A fresh stream: the seed and the stream's number, mixed.
            let n = STREAMS.fetch_add(1, Relaxed);
            x = table::mix(SEED.load(Relaxed) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
        }
        // xorshift64*: cheap, and plenty for choosing which byte to sample.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    });
    // A uniform in (0, 1]: 53 random bits, never 0.
    let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let gap = -u.ln() * mean as f64;
    // `as` saturates: a huge draw is a far threshold, never a wrap.
    (gap as u64).max(1)
}

/// The bytes a sample of `size` stands for under `mean` (see the module docs).
pub(crate) fn weight(size: usize, mean: u64) -> u64 {
    if size >= ALWAYS || mean == 0 {
        return size as u64;
    }
    let x = size.max(1) as f64 / mean as f64;
    // 1 - exp(-x), exactly for small x.
    let p = -(-x).exp_m1();
    (size.max(1) as f64 / p).round() as u64
}

/// Runs `f` with the calling thread busy (its allocations never sampled), unless it is
/// already: then `None`.
pub(crate) fn busy<R>(f: impl FnOnce() -> R) -> Option<R> {
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(false));
        }
    }
    if BUSY.with(|b| b.replace(true)) {
        return None;
    }
    let _done = Done;
    Some(f())
}

/// Runs `f` with the calling thread busy (its allocations not sampled), whether it was
/// already or not; as it was after. For reports, which allocate while reading the tables
/// and symbolising (their own memory is not what they report on).
pub(crate) fn quiet<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BUSY.with(|b| b.replace(true)));
    f()
}

/// What is told of each sample taken and freed (the Tracy receiver): `(addr, size, id,
/// taken)`, returning whether it showed a taken sample (only those are told when freed).
/// It runs inside `alloc` and `dealloc`, after the sampler's tables are whole, on a busy
/// thread: it must not allocate through the tracker's sampling or block.
pub(crate) type Observer = fn(usize, usize, u16, bool) -> bool;

/// The observer, as a pointer (null: none).
static OBSERVER: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Sets the observer (for the life of the process).
#[cfg_attr(not(feature = "tracy"), allow(dead_code))]
pub(crate) fn observe(f: Observer) {
    OBSERVER.store(f as *mut (), Release);
}

fn observer() -> Option<Observer> {
    let p = OBSERVER.load(Acquire);
    // SAFETY: a non-null value was stored by `observe` from an `Observer`.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut (), Observer>(p) })
}

/// [`table::read`] on a busy thread (see there).
pub(crate) fn read_tables(sites: &mut Vec<(u32, table::Site)>, live: &mut Vec<table::Live>) {
    quiet(|| table::read(sites, live));
}

/// Takes a sample of the allocation of `size` bytes at `addr`, charged to tag `id`: its
/// stack captured, its record put in the table. `false` if it was not kept (the thread is
/// busy, or a table is full). Called from inside `alloc`: see the module docs.
pub(crate) fn take(addr: usize, size: usize, id: u16) -> bool {
    busy(|| {
        let stack = stack::capture();
        let weight = weight(size, mean());
        let frame = FRAME.load(Relaxed);
        let kept = table::insert(addr, size, weight, id, &stack, frame);
        if !kept {
            DROPPED.fetch_add(1, Relaxed);
        } else if let Some(tell) = observer()
            && tell(addr, size, id, true)
        {
            table::mark_shown(addr);
        }
        kept
    })
    .unwrap_or(false)
}

/// The size of the sampled allocation at `addr` (charged to `id`), which is freed (or
/// moved): its record leaves the table. Called from inside `dealloc` and `realloc`.
pub(crate) fn release(addr: usize, id: u16) -> usize {
    let (size, shown) = table::remove(addr);
    if shown && let Some(tell) = observer() {
        quiet(|| tell(addr, size, id, false));
    }
    size
}

/// *Prepare* for `fork` (the last of the crate's handlers): the table's lock taken, and
/// the forking thread busy, so an allocation a later handler makes is not sampled (which
/// would wait for that lock for ever).
#[cfg(all(unix, not(miri)))]
pub(crate) fn fork_prepare() {
    BUSY.with(|b| b.set(true));
    table::fork_prepare();
}

/// *Parent* and *child* after `fork`: what [`fork_prepare`] did, undone.
#[cfg(all(unix, not(miri)))]
pub(crate) fn fork_release() {
    table::fork_release();
    BUSY.with(|b| b.set(false));
}

/// A frame ended (the ledger's `end_frame`).
pub(crate) fn frame_end() {
    FRAME.fetch_add(1, Relaxed);
}

/// Frames ended since the process began.
pub(crate) fn frame() -> u64 {
    FRAME.load(Relaxed)
}

/// Frames ended since sampling was last turned on (at least 1).
pub(crate) fn frames_on() -> u64 {
    FRAME
        .load(Relaxed)
        .saturating_sub(ON_SINCE.load(Relaxed))
        .max(1)
}

/// Samples not kept because a table was full.
pub(crate) fn dropped() -> u64 {
    DROPPED.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_parses_with_binary_units_and_refuses_the_rest() {
        assert_eq!(parse_mean(b"524288"), Some(524_288));
        assert_eq!(parse_mean(b" 512K "), Some(512 << 10));
        assert_eq!(parse_mean(b"2m"), Some(2 << 20));
        assert_eq!(parse_mean(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"K",
            b"12x",
            b"-1",
            b"99999999999999999999",
            b"1.5M",
        ] {
            assert_eq!(parse_mean(bad), None, "{bad:?}");
        }
        assert_eq!(parse_mean(b"18446744073709551615M"), None, "overflow");
    }

    #[test]
    fn draws_average_the_mean() {
        let n = if cfg!(miri) { 2_000 } else { 200_000 };
        let sum: f64 = (0..n).map(|_| draw(4096) as f64).sum();
        let avg = sum / n as f64;
        let tolerance = if cfg!(miri) { 0.08 } else { 0.01 };
        assert!((avg / 4096.0 - 1.0).abs() < tolerance, "average {avg}");
    }

    #[test]
    fn weights_undo_the_chance_of_being_taken() {
        // A size far below the mean is taken with chance about size/mean.
        let w = weight(16, 1 << 19) as f64;
        assert!((w / f64::from(1u32 << 19) - 1.0).abs() < 0.001, "{w}");
        // Far above it, nearly always: the weight is about the size.
        assert_eq!(weight(ALWAYS, 4096), ALWAYS as u64);
        let w = weight(64 << 10, 4096) as f64;
        assert!((w / f64::from(64u32 << 10) - 1.0).abs() < 1e-6);
    }
}
