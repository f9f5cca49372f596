//! The owner map: which tag each live heap allocation was charged to, looked up by the
//! allocation's address.
//!
//! **Why a side table.** A free must credit the tag its allocation was charged to, so the
//! tag has to be found from the pointer alone. Keeping it next to the caller's bytes (a
//! header before them or a trailer after them) means reading memory through the caller's
//! pointer outside the object the caller was given, and rustc tells LLVM that a global
//! allocation is exactly the size asked for (`allocsize`): once the free is inlined into
//! the caller, such a read is out of bounds, which the optimiser may (and did) treat as
//! unreachable. Here the caller's pointer is only ever read as a number: the map is the
//! allocator's own memory, indexed by the address.
//!
//! **Shape.** Where reserved memory is usable as it is (64-bit unix), one flat table: an
//! entry of 2 bytes for each 16-byte granule of the address space, at
//! `base + address / 16 * 2`, so a lookup is one load of the base and the entry itself.
//! It reserves an eighth of the address space the map covers (16 TiB on x86-64, like a
//! sanitizer's shadow memory); pages become resident as the granules they cover are used,
//! 4 KiB of table for 32 KiB of heap address space. Elsewhere (Windows, which must commit
//! before use; 32-bit targets; Miri), or if the OS refuses the reservation, a radix tree
//! over the address, like jemalloc's `rtree`: a static top table of mid tables, each of
//! 4,096 leaves, each leaf the entries of 4 MiB of address space, mapped on first use.
//! Which one is decided once, before the first entry is written, and never changes. An
//! entry is `0` (no tracked allocation starts in the granule) or part of an allocation's
//! record (`heap::record`: the tag and the size charged). Every allocation the tracker
//! makes is aligned to at least 16 bytes, so it starts at a granule's start, two live
//! allocations never start in one granule, and an entry belongs to one allocation at a
//! time. Tables are never given back: at most 2 bytes per 16 bytes of heap address space
//! in use (1/8) are resident, much less where allocations are large.
//!
//! **Who writes an entry.** The thread that owns the allocation starting in its granule
//! (or covering it, for an entry that holds part of that allocation's size):
//! the allocating thread writes it before the pointer is handed out, the freeing thread
//! clears it before the memory goes back to the inner allocator. Whatever orders the
//! allocation's own hand-over between threads (the program's synchronisation, the inner
//! allocator's for a reused address) orders the entry's writes too, so `Relaxed` is
//! enough. Tables are published with a `Release` compare-and-swap and read with
//! `Acquire`.
//!
//! Nothing here allocates through the global allocator, takes a lock or runs user code:
//! it is called from inside `alloc`.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU16, AtomicUsize};

use crate::vm::{self, Region};

/// The tracker's smallest allocation, and the map's granule: two live allocations of at
/// least this size start in different granules.
pub(crate) const GRANULE: usize = 1 << GRANULE_SHIFT;
const GRANULE_SHIFT: u32 = 4;
/// A leaf covers 4 MiB of address space.
#[cfg(not(miri))]
const LEAF_SHIFT: u32 = 22;
/// A mid table covers 16 GiB.
#[cfg(not(miri))]
const MID_SHIFT: u32 = 34;
/// Addresses the map covers: on 64-bit targets what user space gets (47 bits on x86-64,
/// 48 on AArch64 and others; an allocation above is not tracked), all of them on 32-bit
/// ones.
#[cfg(all(target_arch = "x86_64", not(miri)))]
const ADDR_BITS: u32 = 47;
#[cfg(all(target_pointer_width = "64", not(target_arch = "x86_64"), not(miri)))]
const ADDR_BITS: u32 = 48;
#[cfg(all(not(target_pointer_width = "64"), not(miri)))]
const ADDR_BITS: u32 = usize::BITS;

// Under Miri, small tables: it gives out low, dense addresses, and each byte of a fresh
// table costs it time (a 512 KiB leaf took seconds). The same code, other sizes.
#[cfg(miri)]
const LEAF_SHIFT: u32 = 16;
#[cfg(miri)]
const MID_SHIFT: u32 = 28;
#[cfg(miri)]
const ADDR_BITS: u32 = 40;

const LEAF_LEN: usize = 1 << (LEAF_SHIFT - GRANULE_SHIFT);
const MID_LEN: usize = 1 << (MID_SHIFT - LEAF_SHIFT);
const TOP_LEN: usize = 1 << ADDR_BITS.saturating_sub(MID_SHIFT);

type Leaf = [AtomicU16; LEAF_LEN];
type Mid = [AtomicPtr<Leaf>; MID_LEN];

/// Whether the flat table can be had here (see the module docs).
const FLAT_POSSIBLE: bool = vm::TOUCH_BACKS && usize::BITS == 64;

/// Entries of the flat table: one per granule of the covered address space.
const FLAT_ENTRIES: usize = 1usize << ADDR_BITS.saturating_sub(GRANULE_SHIFT);

/// Bytes of the flat table: 2 per entry.
const FLAT_BYTES: usize = FLAT_ENTRIES * 2;

/// The flat table, once it is the map's shape; null otherwise.
static FLAT: AtomicPtr<AtomicU16> = AtomicPtr::new(std::ptr::null_mut());

/// Which shape the map has: not decided yet, being decided, flat, tree.
static SHAPE: AtomicU8 = AtomicU8::new(UNDECIDED);
const UNDECIDED: u8 = 0;
const DECIDING: u8 = 1;
const IS_FLAT: u8 = 2;
const IS_TREE: u8 = 3;

/// The top table of the tree: 64-128 KiB of zeroed static data on 64-bit targets
/// (resident as used), one entry on 32-bit ones.
static TOP: [AtomicPtr<Mid>; TOP_LEN] = [const { AtomicPtr::new(std::ptr::null_mut()) }; TOP_LEN];

/// Bytes of address space the map has mapped for its tables (see [`mapped_bytes`]).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The address the map files `addr` under, or `None` if it lies outside the map.
#[inline(always)]
fn key(addr: usize) -> Option<u64> {
    let a = addr as u64;
    // AArch64 ignores a pointer's top byte (Android's allocator tags pointers there).
    #[cfg(target_arch = "aarch64")]
    let a = a & ((1 << 56) - 1);
    if ADDR_BITS < 64 && a >> ADDR_BITS != 0 {
        return None;
    }
    Some(a)
}

#[inline(always)]
fn top_index(a: u64) -> usize {
    (a >> MID_SHIFT) as usize & (TOP_LEN - 1)
}

#[inline(always)]
fn mid_index(a: u64) -> usize {
    (a >> LEAF_SHIFT) as usize & (MID_LEN - 1)
}

#[inline(always)]
fn leaf_index(a: u64) -> usize {
    (a >> GRANULE_SHIFT) as usize & (LEAF_LEN - 1)
}

/// Entries of the map: the one of a granule and those after it in the same table, which
/// a pointer with the table's provenance reaches (a leaf of the tree ends the run; the
/// flat table does not).
#[derive(Clone, Copy)]
pub(crate) struct Entries {
    first: NonNull<AtomicU16>,
    /// Entries from `first` to the end of its table: at least 1.
    len: usize,
}

impl Entries {
    /// The entry `j` granules after the first, if it sits in the same table.
    #[inline(always)]
    pub(crate) fn get(self, j: usize) -> Option<&'static AtomicU16> {
        // SAFETY: `first` and the `len - 1` entries after it lie in one table of the
        // map (see `find`), which lives for the rest of the process; `first` carries
        // the whole table's provenance.
        (j < self.len).then(|| unsafe { &*self.first.as_ptr().add(j) })
    }

    /// The first entry.
    #[inline(always)]
    pub(crate) fn first(self) -> &'static AtomicU16 {
        // SAFETY: as in `get`, with `len >= 1`.
        unsafe { &*self.first.as_ptr() }
    }
}

/// The entry of the granule `addr` starts in (and those after it in its table), if the
/// map has one for it. O(1): the flat table's base and the entry, or three loads down the
/// tree.
#[inline(always)]
pub(crate) fn find(addr: usize) -> Option<Entries> {
    let a = key(addr)?;
    if FLAT_POSSIBLE {
        let flat = FLAT.load(Acquire);
        if let Some(flat) = NonNull::new(flat) {
            let g = (a >> GRANULE_SHIFT) as usize;
            // SAFETY: a non-null `FLAT` is a table of an entry per granule below
            // 2^ADDR_BITS, reserved (and usable as reserved) before its `Release`
            // publication, never freed; `key` keeps `a` below 2^ADDR_BITS, so `g` is
            // one of its entries. `add` keeps the table's provenance.
            let first = unsafe { flat.add(g) };
            return Some(Entries {
                first,
                len: FLAT_ENTRIES - g,
            });
        }
    }
    tree_find(a)
}

/// The entries of the leaf from `a`'s on. A pointer to the entry, with the leaf's
/// provenance, is derived without borrowing the leaf whole (Miri would check a borrow of
/// a whole 512 KiB leaf at every lookup).
#[inline(always)]
fn leaf_entries(leaf: *mut Leaf, a: u64) -> Entries {
    let i = leaf_index(a);
    // SAFETY: `leaf` is a published leaf (mapped, never freed); `i < LEAF_LEN`. The
    // place is indexed in place: no reference to the leaf is made.
    let first = unsafe { NonNull::new_unchecked(&raw mut (*leaf)[i]) };
    Entries {
        first,
        len: LEAF_LEN - i,
    }
}

/// The tree's entries for `a`, if its leaf exists. Each step borrows one entry of a
/// table, never the table whole.
#[inline(always)]
fn tree_find(a: u64) -> Option<Entries> {
    let mid = TOP[top_index(a)].load(Acquire);
    if mid.is_null() {
        return None;
    }
    // SAFETY: a non-null entry of `TOP` points to a mid table that is never freed, whose
    // zeroed pages were mapped before its `Release` publication (acquired above).
    let leaf = unsafe { &(*mid)[mid_index(a)] }.load(Acquire);
    if leaf.is_null() {
        return None;
    }
    Some(leaf_entries(leaf, a))
}

/// The entry of the granule `addr` starts in, its tables mapped if need be. `None` if
/// `addr` lies outside the map or the OS refuses the memory: the allocation is then not
/// tracked. O(1); the first call decides the map's shape, and in the tree the first use
/// of a 4 MiB span maps its leaf.
#[inline(always)]
pub(crate) fn entry(addr: usize) -> Option<Entries> {
    match find(addr) {
        Some(e) => Some(e),
        None => entry_slow(addr),
    }
}

#[cold]
#[inline(never)]
fn entry_slow(addr: usize) -> Option<Entries> {
    let a = key(addr)?;
    if shape() == IS_FLAT {
        return find(addr);
    }
    tree_entry(a)
}

/// The tree's entry for `a`, its mid table and leaf mapped if need be.
fn tree_entry(a: u64) -> Option<Entries> {
    let mid = published(&TOP[top_index(a)])?;
    // SAFETY: `published` returns a mapped table that is never freed.
    let leaf = published(unsafe { &(*mid)[mid_index(a)] })?;
    Some(leaf_entries(leaf, a))
}

/// The map's shape, decided by the first caller: flat if the flat table can be had, the
/// tree otherwise. Racing callers wait for the first (a reservation: no allocation, no
/// lock, nothing that could wait on them).
fn shape() -> u8 {
    match SHAPE.compare_exchange(UNDECIDED, DECIDING, Acquire, Acquire) {
        Ok(_) => {
            let flat = if FLAT_POSSIBLE {
                Region::reserve(FLAT_BYTES).and_then(Result::ok)
            } else {
                None
            };
            let decided = match flat {
                Some(region) => {
                    region.exclude_from_core_dumps();
                    MAPPED.fetch_add(region.len(), Relaxed);
                    FLAT.store(region.base().as_ptr().cast(), Release);
                    // The table lives for the rest of the process.
                    std::mem::forget(region);
                    IS_FLAT
                }
                None => IS_TREE,
            };
            SHAPE.store(decided, Release);
            decided
        }
        Err(_) => loop {
            let s = SHAPE.load(Acquire);
            if s != DECIDING {
                return s;
            }
            std::hint::spin_loop();
        },
    }
}

/// The table `slot` points to, mapping and publishing a zeroed one if it is empty (the
/// first of racing threads wins; the others unmap theirs).
fn published<T>(slot: &AtomicPtr<T>) -> Option<*mut T> {
    let current = slot.load(Acquire);
    if !current.is_null() {
        return Some(current);
    }
    // Fresh pages read as zero: a null table pointer, an empty entry. `Region::reserve`
    // neither allocates nor locks (an OS mapping, or `System` where there is none).
    let region = Region::reserve(size_of::<T>())?.ok()?;
    // SAFETY: the whole region, just reserved.
    if !unsafe { region.commit(region.base().as_ptr(), region.len()) } {
        return None;
    }
    let fresh = region.base().as_ptr().cast::<T>();
    match slot.compare_exchange(std::ptr::null_mut(), fresh, AcqRel, Acquire) {
        Ok(_) => {
            MAPPED.fetch_add(region.len(), Relaxed);
            // Published: it lives for the rest of the process.
            std::mem::forget(region);
            Some(fresh)
        }
        // Another thread published one first; `region` is unmapped as it drops.
        Err(theirs) => Some(theirs),
    }
}

/// Bytes of address space mapped for the map's tables (the static top table aside), of
/// which only the pages that cover heap in use become resident.
pub(crate) fn mapped_bytes() -> usize {
    MAPPED.load(Relaxed)
}

/// Bytes of the map's tables resident now where the OS says (Linux, flat table);
/// otherwise the bytes mapped, an upper bound.
pub(crate) fn overhead() -> usize {
    let flat = FLAT.load(Acquire);
    if !flat.is_null()
        && let Some(resident) = vm::resident_bytes(flat.addr(), FLAT_BYTES)
    {
        return resident;
    }
    mapped_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_address_bits() {
        #[cfg(not(miri))]
        assert_eq!(size_of::<Leaf>(), 512 * 1024);
        // The tables cover every address of the map's range (32-bit targets: more).
        let covered = (TOP_LEN * MID_LEN * LEAF_LEN) as u64 * GRANULE as u64;
        assert!(covered >= 1u64 << ADDR_BITS);
    }

    #[test]
    fn neighbouring_granules_have_their_own_entries_and_far_addresses_none() {
        // Far from any heap this test binary uses (it does not track its allocations).
        #[cfg(target_pointer_width = "64")]
        let base = (1usize << 39) + 0x3456_0000;
        #[cfg(not(target_pointer_width = "64"))]
        let base = 0xE000_0000usize;
        let e0 = entry(base).unwrap().first() as *const AtomicU16;
        let e1 = entry(base + GRANULE).unwrap().first() as *const AtomicU16;
        let e0b = entry(base + GRANULE - 1).unwrap().first() as *const AtomicU16;
        assert_eq!(e0, e0b, "one granule, one entry");
        assert_ne!(e0, e1);
        assert_eq!(find(base).map(|e| e.first() as *const _), Some(e0));
        let far = base + (1 << LEAF_SHIFT) * 3;
        match shape() {
            // The flat table has every entry, empty until written.
            IS_FLAT => assert_eq!(find(far).map(|e| e.first().load(Relaxed)), Some(0)),
            // A span nothing has touched has no leaf: a lookup maps nothing.
            _ => assert!(find(far).is_none()),
        }
        #[cfg(target_pointer_width = "64")]
        assert!(entry(1 << 50).is_none(), "above the map: not tracked");
        assert!(mapped_bytes() >= size_of::<Leaf>());
    }

    /// The tree, whichever shape this process's map took (the flat table where it can be
    /// had): Windows and 32-bit targets use it.
    #[test]
    fn the_tree_maps_a_leaf_on_first_use_and_finds_its_entries_after() {
        #[cfg(target_pointer_width = "64")]
        let a = (1u64 << 38) + 0x5678_0000;
        #[cfg(not(target_pointer_width = "64"))]
        let a = 0xD000_0000u64;
        let far = a + (1 << LEAF_SHIFT) * 5;
        assert!(tree_find(far).is_none(), "nothing mapped there yet");
        let e = tree_entry(a).unwrap().first() as *const AtomicU16;
        assert_eq!(tree_find(a).map(|e| e.first() as *const _), Some(e));
        let next = tree_entry(a + GRANULE as u64).unwrap().first() as *const AtomicU16;
        assert_eq!(
            next,
            e.wrapping_add(1),
            "neighbouring granules, neighbouring entries"
        );
        assert!(tree_find(far).is_none(), "only the leaf used is mapped");
        // The run of entries reachable from one ends with its leaf.
        let leaf_end = (a | ((1 << LEAF_SHIFT) - 1)) + 1;
        let last = tree_entry(leaf_end - GRANULE as u64).unwrap();
        assert!(last.get(0).is_some() && last.get(1).is_none());
        let e = tree_find(a).unwrap();
        assert_eq!(e.get(1).map(|e| e as *const _), Some(next));
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn on_linux_the_flat_table_is_had_and_only_what_is_touched_is_resident() {
        // Far from any heap this test binary uses; writing the empty entry touches its page.
        entry(0x7000_1234_0000).unwrap().first().store(0, Relaxed);
        if std::env::var_os("NEBULA_UNDER_VALGRIND").is_some() {
            // Valgrind refuses a reservation this large: the map is the tree there (which
            // is what the refusal must give).
            assert_eq!(shape(), IS_TREE);
            return;
        }
        assert_eq!(shape(), IS_FLAT);
        assert!(mapped_bytes() >= FLAT_BYTES);
        let resident = overhead();
        assert!(resident >= 4096, "the page just written: {resident}");
        assert!(resident < 1 << 30, "{resident}");
    }
}
