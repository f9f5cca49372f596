//! Helpers shared by the integration tests (`mod common;` in each test file that needs them).
// Each test binary uses only some of them.
#![allow(dead_code)]

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::rc::Rc;

use nebula_memory::{MemoryBlock, MemoryPool};

pub const KIB: usize = 1024;
pub const MIB: usize = 1 << 20;

/// The size of a pool block's header: a block's usable bytes start this far after it.
pub const HEADER: usize = 32;

/// A private 64 MiB pool, so its counters are not disturbed by tests running in parallel.
pub fn pool(name: &'static str) -> MemoryPool {
    pool_of(name, 64 * MIB)
}

/// A private pool of `capacity` bytes.
pub fn pool_of(name: &'static str, capacity: usize) -> MemoryPool {
    MemoryPool::new(name, capacity).unwrap()
}

/// Asserts that `pool` has nothing in use: no bytes and no blocks (none held back by the
/// quarantine either), and as many frees as allocations; and that its memory is whole
/// again: one free range spanning the whole region, or (a pool that grows by segments, as
/// on the web) every segment wholly free, so that a purge pass gives them all back.
#[track_caller]
pub fn assert_drained(pool: &MemoryPool) {
    let s = pool.stats();
    assert_eq!(
        (s.in_use, s.blocks_in_use, s.quarantined),
        (0, 0, 0),
        "in_use, blocks_in_use, quarantined: {s:?}"
    );
    assert_eq!(s.free, s.capacity, "{s:?}");
    assert_eq!(s.allocations, s.frees, "{s:?}");
    if pool.grows_by_segments() {
        pool.trim();
        let s = pool.stats();
        assert_eq!((s.reserved, s.free_ranges), (0, 0), "{s:?}");
    } else {
        assert_eq!(s.free_ranges, 1, "{s:?}");
        assert_eq!(s.largest_free, s.capacity - HEADER, "{s:?}");
    }
}

/// Word `i` of the stamp of a block with `seed` (never zero, so a zeroed page shows).
pub fn pattern(seed: u64, i: usize) -> u64 {
    (seed ^ (i as u64).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

/// Writes the stamp of `seed` over the whole capacity of `block`, a live block the caller
/// owns.
pub fn stamp(block: NonNull<MemoryBlock>, seed: u64) {
    // SAFETY: `block` is live and the caller's; its header is only read here.
    let words = unsafe { block.as_ref() }.capacity() / 8;
    let p = MemoryBlock::data_of(block).as_ptr().cast::<u64>();
    for i in 0..words {
        // SAFETY: `data` is 16-aligned with `capacity` writable bytes that only the caller
        // uses.
        unsafe { p.add(i).write(pattern(seed, i)) };
    }
}

/// Checks that `block` (live, the caller's) still holds the stamp of `seed` over its whole
/// capacity; `Err` names the first word overwritten.
pub fn verify(block: NonNull<MemoryBlock>, seed: u64) -> Result<(), String> {
    // SAFETY: `block` is live and the caller's.
    let words = unsafe { block.as_ref() }.capacity() / 8;
    let p = MemoryBlock::data_of(block).as_ptr().cast::<u64>();
    for i in 0..words {
        // SAFETY: as in `stamp`; only the caller uses these bytes.
        let w = unsafe { p.add(i).read() };
        let want = pattern(seed, i);
        if w != want {
            return Err(format!(
                "block {block:p} (seed {seed:#x}): word {i} overwritten: {w:#x}, expected {want:#x}"
            ));
        }
    }
    Ok(())
}

/// A value that counts its drops in a shared cell; the `u64` is a payload to check.
pub struct Counted(pub Rc<Cell<usize>>, pub u64);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Runs `f`, which must panic, and returns the panic message.
pub fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        panic!("panic payload is not a string")
    }
}

/// SplitMix64: a tiny, well-mixed, fixed-seed PRNG (no `rand` dependency).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Log-uniform in `[lo, hi]`.
    pub fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let (l, h) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
        ((l + (h - l) * self.next_f64()).exp() as usize).clamp(lo, hi)
    }
}

/// Whether this process runs under valgrind (`scripts/valgrind.sh` sets
/// `NEBULA_UNDER_VALGRIND=1`): tests that measure statistics over many runs run fewer
/// there, where each operation is tens of times slower and what is checked is memory
/// access, not the statistics.
pub fn under_valgrind() -> bool {
    std::env::var_os("NEBULA_UNDER_VALGRIND").is_some_and(|v| v == "1")
}

/// A proptest configuration of `cases` cases, or of `PROPTEST_CASES` if that is set and
/// fewer (valgrind's and the sanitizers' runs set it); under Miri `PROPTEST_CASES` cases
/// (default 4) and no failure-persistence file (Miri's isolation forbids the `getcwd` it
/// needs).
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let asked = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    if cfg!(miri) {
        proptest::test_runner::Config {
            failure_persistence: None,
            ..proptest::test_runner::Config::with_cases(asked.unwrap_or(4))
        }
    } else {
        proptest::test_runner::Config::with_cases(asked.map_or(cases, |asked| asked.min(cases)))
    }
}

/// A `std::sync::Barrier` whose `wait` panics after a minute instead of blocking for ever,
/// so that a failed assertion in one thread of a barrier protocol fails the test instead
/// of hanging it.
pub struct Barrier {
    n: usize,
    state: std::sync::Mutex<(usize, u64)>, // (arrived, generation)
    cv: std::sync::Condvar,
}

impl Barrier {
    pub fn new(n: usize) -> Barrier {
        Barrier {
            n,
            state: std::sync::Mutex::new((0, 0)),
            cv: std::sync::Condvar::new(),
        }
    }

    pub fn wait(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = st.1;
        st.0 += 1;
        if st.0 == self.n {
            *st = (0, generation + 1);
            self.cv.notify_all();
            return;
        }
        let (st, timeout) = self
            .cv
            .wait_timeout_while(st, std::time::Duration::from_secs(60), |s| {
                s.1 == generation
            })
            .unwrap_or_else(|e| e.into_inner());
        drop(st);
        assert!(
            !timeout.timed_out(),
            "barrier: a peer thread failed or hung"
        );
    }
}

/// A `tracing` subscriber that calls its function for every event and ignores spans: what
/// a test needs to see (or act on) the events the crate emits.
pub struct OnEvent<F>(pub F);

impl<F: Fn(&tracing::Event<'_>) + Send + Sync + 'static> tracing::Subscriber for OnEvent<F> {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        (self.0)(event)
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Leaks `value` for the rest of the process, reachable from a static so that Miri's leak
/// check does not report it (tests leak pools and arenas they hand out as `'static`).
pub fn leak<T>(value: T) -> &'static mut T {
    static LEAKED: std::sync::Mutex<Vec<std::sync::atomic::AtomicPtr<()>>> =
        std::sync::Mutex::new(Vec::new());
    let p = Box::into_raw(Box::new(value));
    LEAKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(std::sync::atomic::AtomicPtr::new(p.cast()));
    // SAFETY: from `Box::into_raw`, never freed; the static only keeps its address.
    unsafe { &mut *p }
}

/// Every WARN (and ERROR) event's fields as text, from every thread: a process-wide
/// subscriber installed at the first call. WARN and above only: formatting allocates, and
/// tests that count a frame's allocations must not count this recorder's (the plugin sends
/// a DEBUG event each frame).
#[allow(dead_code)] // not every test binary that has `mod common` records warnings
pub fn warnings() -> &'static std::sync::Mutex<Vec<String>> {
    static EVENTS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let sub = OnEvent(|e: &tracing::Event<'_>| {
            if *e.metadata().level() > tracing::Level::WARN {
                return;
            }
            struct Text(String);
            impl tracing::field::Visit for Text {
                fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    self.0.push_str(&format!("{v:?} "));
                }
            }
            let mut t = Text(String::new());
            e.record(&mut t);
            EVENTS.lock().unwrap_or_else(|e| e.into_inner()).push(t.0);
        });
        tracing::subscriber::set_global_default(sub).unwrap();
    });
    &EVENTS
}

/// Bevy's task pools with a compute pool of exactly `threads` threads (on these 2-core
/// machines Bevy's default gives it one; players' machines run 4 to 16).
#[cfg(feature = "bevy")]
pub fn compute_threads(threads: usize) -> bevy_app::TaskPoolOptions {
    bevy_app::TaskPoolOptions {
        compute: bevy_app::TaskPoolThreadAssignmentPolicy {
            min_threads: threads,
            max_threads: threads,
            percent: 1.0,
            on_thread_spawn: None,
            on_thread_destroy: None,
        },
        ..Default::default()
    }
}

/// Runs the test named `child` of this test binary in a new process, with the environment
/// variable `var` set to `mode` (that test does nothing without it), and fails with the
/// child's output if the child fails. For what is process-wide (Bevy's task pools, the
/// global allocator's figures): each case gets a process of its own.
pub fn in_child(var: &str, mode: &str) {
    in_child_with(var, mode, &[]);
}

/// [`in_child`], with more environment variables set for the child.
pub fn in_child_with(var: &str, mode: &str, more: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(var, mode)
        .envs(more.iter().copied())
        .output()
        .expect("the test binary runs");
    assert!(
        out.status.success(),
        "child {mode} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
