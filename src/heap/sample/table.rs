//! The sampler's tables: the call sites (a tag and a stack, with the bytes sampled there)
//! and the live samples (an allocation the sampler took, by address, until it is freed).
//!
//! Both are open-addressed hash tables of fixed size in one block taken from `System` at
//! the first sample (never through the tracker: this runs inside `alloc`), zeroed, so
//! their pages become resident as they fill. A site is never removed (its id is its slot);
//! a live sample leaves when its allocation is freed (linear probing with backward-shift
//! deletion: no tombstones to pile up). [`SITES`] and [`LIVE`] bound them: at the default
//! mean a process would need about 16 GiB of sampled heap live to fill the live table.
//!
//! **The lock** is a spin lock: held for a probe and a few stores, never while allocating,
//! capturing or reporting back to the caller, so a waiter spins briefly (yielding after a
//! while). It is not one of `fork`'s registered locks (registering allocates, and this is
//! taken inside `alloc`): the fork handlers take and release it by name
//! ([`fork_prepare`], [`fork_release`]), last of all the crate's locks, since any of them
//! may be held by a thread that allocates. (The handlers are installed by the crate's
//! first lock, and by `ledger::set_sampling`, `ledger::sampling` and the ledger's frame
//! end with sampling on.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr};

use super::stack::{DEPTH, Stack};

/// Call sites the table can hold (a tag and a stack each).
pub(crate) const SITES: usize = if cfg!(miri) { 256 } else { 1 << 13 };
/// Live samples the table can hold.
pub(crate) const LIVE: usize = if cfg!(miri) { 512 } else { 1 << 15 };

/// One call site: a tag and a stack, and what was sampled there.
#[derive(Clone, Copy)]
pub(crate) struct Site {
    /// 0 for an empty slot.
    pub(crate) hash: u64,
    pub(crate) tag: u16,
    pub(crate) stack: Stack,
    /// Estimated bytes allocated here since the process began (the samples' weights).
    pub(crate) allocated: u64,
    /// Samples taken here.
    pub(crate) samples: u64,
    /// Estimated bytes live now (the live samples' weights).
    pub(crate) live: u64,
}

/// One live sample.
#[derive(Clone, Copy)]
pub(crate) struct Live {
    /// 0 for an empty slot.
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) weight: u64,
    pub(crate) site: u32,
    pub(crate) frame: u64,
    /// The observer showed it (Tracy): it is told of the free too.
    pub(crate) shown: bool,
}

struct Tables {
    sites: [Site; SITES],
    live: [Live; LIVE],
    live_count: usize,
}

/// The tables, once made (never freed: they live for the process).
static TABLES: AtomicPtr<Tables> = AtomicPtr::new(std::ptr::null_mut());
static LOCKED: AtomicBool = AtomicBool::new(false);

/// Runs `f` on the tables (made on first use; `None` if `System` could not give the
/// block) under the lock.
fn locked<R>(f: impl FnOnce(&mut Tables) -> R) -> Option<R> {
    let t = tables()?;
    lock();
    // SAFETY: `t` points to the tables, made once and never freed; the lock gives this
    // thread the only access until `unlock`.
    let r = f(unsafe { &mut *t.as_ptr() });
    unlock();
    Some(r)
}

fn tables() -> Option<NonNull<Tables>> {
    if let Some(t) = NonNull::new(TABLES.load(Acquire)) {
        return Some(t);
    }
    make_tables()
}

#[cold]
fn make_tables() -> Option<NonNull<Tables>> {
    let layout = Layout::new::<Tables>();
    // SAFETY: a non-zero size. All zero is a valid `Tables`: empty slots, no count.
    let fresh = NonNull::new(unsafe { System.alloc_zeroed(layout) }.cast::<Tables>())?;
    match TABLES.compare_exchange(std::ptr::null_mut(), fresh.as_ptr(), Release, Acquire) {
        Ok(_) => Some(fresh),
        Err(won) => {
            // SAFETY: `fresh` came from `System` with `layout` just now and nobody saw it.
            unsafe { System.dealloc(fresh.as_ptr().cast(), layout) };
            NonNull::new(won)
        }
    }
}

fn lock() {
    let mut spins = 0u32;
    while LOCKED
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // Neither allocates nor locks: the holder is mid-probe on another thread.
            std::thread::yield_now();
        }
    }
}

fn unlock() {
    LOCKED.store(false, Release);
}

/// *Prepare* for `fork`: takes the lock (the caller marks the thread busy).
#[cfg(all(unix, not(miri)))]
pub(crate) fn fork_prepare() {
    lock();
}

/// *Parent* and *child* after `fork`: releases what [`fork_prepare`] took.
#[cfg(all(unix, not(miri)))]
pub(crate) fn fork_release() {
    unlock();
}

/// A 64-bit mix of `x` (the finaliser of SplitMix64).
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn site_hash(tag: u16, stack: &Stack) -> u64 {
    let h = stack
        .frames()
        .iter()
        .fold(mix(u64::from(tag) + 1), |h, &ip| mix(h ^ ip as u64));
    h.max(1)
}

/// Records a sample: its site found or made, the site's figures raised, the sample kept
/// under its address. `false` if a table is full or could not be made.
pub(crate) fn insert(
    addr: usize,
    size: usize,
    weight: u64,
    tag: u16,
    stack: &Stack,
    frame: u64,
) -> bool {
    let hash = site_hash(tag, stack);
    locked(|t| {
        if t.live_count >= LIVE - LIVE / 8 {
            return false; // kept below 7/8 full: probes stay short
        }
        let Some(site) = find_site(t, hash, tag, stack) else {
            return false;
        };
        let s = &mut t.sites[site];
        s.allocated = s.allocated.saturating_add(weight);
        s.samples += 1;
        s.live = s.live.saturating_add(weight);
        let mut i = slot(addr as u64, LIVE);
        while t.live[i].addr != 0 {
            i = (i + 1) % LIVE;
        }
        t.live[i] = Live {
            addr,
            size,
            weight,
            site: site as u32,
            frame,
            shown: false,
        };
        t.live_count += 1;
        true
    })
    .unwrap_or(false)
}

fn slot(key: u64, len: usize) -> usize {
    (mix(key) % len as u64) as usize
}

/// The slot of the site (`hash`, `tag`, `stack`), made if new; `None` if the table is too
/// full to take it.
fn find_site(t: &mut Tables, hash: u64, tag: u16, stack: &Stack) -> Option<usize> {
    let mut i = slot(hash, SITES);
    for _ in 0..SITES / 8 {
        let s = &mut t.sites[i];
        if s.hash == 0 {
            *s = Site {
                hash,
                tag,
                stack: *stack,
                allocated: 0,
                samples: 0,
                live: 0,
            };
            return Some(i);
        }
        if s.hash == hash && s.tag == tag && s.stack.frames() == stack.frames() {
            return Some(i);
        }
        i = (i + 1) % SITES;
    }
    None
}

/// The slot of the live sample at `addr`, if any.
fn find_live(t: &Tables, addr: usize) -> Option<usize> {
    let mut i = slot(addr as u64, LIVE);
    while t.live[i].addr != addr {
        if t.live[i].addr == 0 {
            return None;
        }
        i = (i + 1) % LIVE;
    }
    Some(i)
}

/// Marks the live sample at `addr` as shown by the observer.
pub(crate) fn mark_shown(addr: usize) {
    locked(|t| {
        if let Some(i) = find_live(t, addr) {
            t.live[i].shown = true;
        }
    });
}

/// Takes the live sample at `addr` out of the table: its size and whether it was shown
/// (0 and no if there is none, which a record marked sampled never lacks).
pub(crate) fn remove(addr: usize) -> (usize, bool) {
    locked(|t| {
        let Some(i) = find_live(t, addr) else {
            debug_assert!(false, "a sampled record has its sample");
            return (0, false);
        };
        let gone = t.live[i];
        let s = &mut t.sites[gone.site as usize];
        s.live = s.live.saturating_sub(gone.weight);
        // Backward-shift deletion: later entries of the probe run move up into the hole.
        let mut hole = i;
        let mut j = (i + 1) % LIVE;
        while t.live[j].addr != 0 {
            let home = slot(t.live[j].addr as u64, LIVE);
            // `j` may move to `hole` if its home is not in the cyclic range (hole, j].
            let in_range = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !in_range {
                t.live[hole] = t.live[j];
                hole = j;
            }
            j = (j + 1) % LIVE;
        }
        t.live[hole].addr = 0;
        t.live_count -= 1;
        (gone.size, gone.shown)
    })
    .unwrap_or((0, false))
}

/// A copy of the tables for a report: the sites in use and the live samples, read under
/// the lock into `sites` and `live` (cleared first). Called on a busy thread
/// ([`read_tables`](super::read_tables)), so that an allocation of the copy's is not
/// sampled (which would wait for the lock it holds).
pub(crate) fn read(sites: &mut Vec<(u32, Site)>, live: &mut Vec<Live>) {
    sites.clear();
    live.clear();
    if TABLES.load(Acquire).is_null() {
        return;
    }
    // Room first, outside the lock: then the copy under it allocates nothing.
    sites.reserve(SITES);
    live.reserve(LIVE);
    locked(|t| {
        sites.extend(
            t.sites
                .iter()
                .enumerate()
                .filter(|(_, s)| s.hash != 0)
                .map(|(i, s)| (i as u32, *s)),
        );
        live.extend(t.live.iter().filter(|l| l.addr != 0).copied());
    });
}

const _: () = assert!(DEPTH <= u8::MAX as usize && SITES <= u32::MAX as usize);
