//! Sampled call stacks (`ledger::call_sites`): the tracker is this binary's global
//! allocator, wrapped in a counter of allocations made *inside* an allocation (the only
//! ones are the sampler's own, which must make none). Each test runs alone (the sampling
//! mean is process-wide) and uses tags of its own.
//!
//! Known call sites: `keep_4k` keeps 4 KiB a frame, `churn_100k` allocates and frees
//! 100 KiB a frame in 1 KiB pieces. The estimates of both (live and per frame) must be
//! within 10% of the exact figures and name those functions first (their file and line
//! where the build has line tables), in debug and in release, with or without frame
//! pointers. Not under Miri (no unwinder there; the tracker's bookkeeping with sampling on
//! is Miri-checked by `tests/heap_model.rs`).
#![cfg(not(miri))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use nebula_memory::TrackingAllocator;
use nebula_memory::ledger;

/// The tracker, counting allocations that begin while another is under way on the same
/// thread: the sampler's own, if it made any.
struct NestCounter(TrackingAllocator);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}
static NESTED: AtomicU64 = AtomicU64::new(0);

impl NestCounter {
    fn enter(&self) {
        DEPTH.with(|d| {
            if d.get() > 0 {
                NESTED.fetch_add(1, Relaxed);
            }
            d.set(d.get() + 1);
        });
    }
    fn leave(&self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

// SAFETY: every call is passed to the tracker unchanged; the wrapper only counts.
unsafe impl GlobalAlloc for NestCounter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.enter();
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { self.0.alloc(layout) };
        self.leave();
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { self.0.dealloc(p, layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.enter();
        // SAFETY: as above.
        let q = unsafe { self.0.realloc(p, layout, new_size) };
        self.leave();
        q
    }
}

#[global_allocator]
static HEAP: NestCounter = NestCounter(TrackingAllocator::new(System));

static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

#[inline(never)]
fn keep_4k(kept: &mut Vec<Box<[u8]>>) {
    kept.push(black_box(vec![1u8; 4096].into_boxed_slice()));
}

#[inline(never)]
fn churn_100k() {
    for _ in 0..100 {
        black_box(vec![2u8; 1024]);
    }
}

fn within(estimate: u64, exact: u64, tolerance: f64) -> bool {
    (estimate as f64 / exact as f64 - 1.0).abs() <= tolerance
}

#[test]
fn known_call_sites_are_named_and_their_bytes_estimated_within_10_percent() {
    let _alone = alone();
    ledger::set_sampling_seed(7);
    // A mean under the sizes: nearly every 4 KiB kept is sampled, so the estimate is within
    // about 1% (its spread shrinks with the chance of a sample and their number).
    ledger::set_sampling(Some(1 << 10));
    let frames = 400u64;
    let mut kept = Vec::with_capacity(frames as usize);
    let mark = {
        let _s = ledger::scope("hs/system");
        // Counters take a new mean up within a MiB: let them.
        black_box(vec![0u8; 2 << 20]);
        ledger::mark_frame()
    };
    for _ in 0..frames {
        {
            let _s = ledger::scope("hs/system");
            keep_4k(&mut kept);
            churn_100k();
        }
        ledger::end_frame();
    }
    let sites = ledger::call_sites("hs/system");
    println!("{sites}");
    let kept_bytes = 4096 * frames;
    assert_eq!(
        sites.stacks,
        !cfg!(target_family = "wasm"),
        "stacks but on the web"
    );
    if !sites.stacks {
        // The web: no stacks, the figures stay (every sample on one unknown site).
        assert!(sites.to_string().contains("no call stacks on this target"));
        assert!(within(sites.held[0].bytes, kept_bytes, 0.10), "{sites:#?}");
        ledger::set_sampling(None);
        return;
    }
    let top = &sites.held[0];
    assert!(top.function.ends_with("keep_4k"), "{sites:#?}");
    assert!(
        within(top.bytes, kept_bytes, 0.10),
        "held {} vs {kept_bytes}",
        top.bytes
    );
    let churn = sites
        .churn
        .iter()
        .find(|s| s.function.ends_with("churn_100k"))
        .unwrap_or_else(|| panic!("{sites:#?}"));
    assert!(
        within(churn.bytes, 100 * 1024, 0.10),
        "churn {} vs {}",
        churn.bytes,
        100 * 1024
    );
    assert!(sites.churn[0].function.ends_with("churn_100k"));
    if let Some(file) = &top.file {
        assert!(file.ends_with("tests/heap_sampling.rs"), "{file}");
        assert!(top.line.is_some());
    }
    // Since the mark: the kept memory, none of the churn (freed).
    let grown = ledger::grown_since(mark, "hs/system");
    assert!(
        grown
            .held
            .iter()
            .all(|s| !s.function.ends_with("churn_100k"))
    );
    assert!(within(grown.held[0].bytes, kept_bytes, 0.10), "{grown:#?}");
    ledger::set_sampling(None);
    drop(kept);
    assert_eq!(NESTED.load(Relaxed), 0, "no allocation inside a capture");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns threads: wasm has none here")]
fn sampling_every_allocation_makes_no_allocation_inside_one() {
    let _alone = alone();
    ledger::set_sampling(Some(1));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let _s = ledger::scope("hs/every");
                let mut v = Vec::new();
                for i in 0..5_000 {
                    v.push(black_box(vec![t as u8; 1 + i % 300]));
                    if i % 3 == 0 {
                        v.swap_remove(i % v.len());
                    }
                }
                v.len()
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap() > 0);
    }
    ledger::set_sampling(None);
    let sites = ledger::call_sites("hs/every");
    assert!(!sites.churn.is_empty(), "sampled: {sites:#?}");
    assert_eq!(NESTED.load(Relaxed), 0, "no allocation inside a capture");
    // Everything was freed: nothing held by the tag's sites.
    assert!(sites.held.is_empty(), "{:#?}", sites.held);
}

#[test]
fn with_sampling_off_nothing_is_sampled_and_the_report_says_so() {
    let _alone = alone();
    ledger::set_sampling(None);
    let kept = {
        let _s = ledger::scope("hs/off");
        black_box(vec![0u8; 4 << 20])
    };
    let sites = ledger::call_sites("hs/off");
    assert!(sites.held.is_empty() && sites.churn.is_empty());
    assert!(sites.to_string().contains("sampling is off"), "{sites}");
    drop(kept);
}
