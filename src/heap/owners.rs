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
//! **Shape.** A radix tree over the address, like jemalloc's `rtree`: a static top table
//! of mid tables, each of 4,096 leaves, each leaf 2-byte entries for the 16-byte granules
//! of 4 MiB of address space. An entry is `0` (no tracked allocation starts in the
//! granule) or the tag's heap id + 1. Every allocation the tracker makes is at least
//! 16 bytes, so two live allocations never start in one granule and an entry belongs to
//! one allocation at a time. Mid tables and leaves are mapped on first use (fresh pages,
//! zero, from [`vm`](crate::vm)) and never given back; a leaf's pages become resident as
//! the granules they cover are used: at most 2 bytes per 16 bytes of heap address space
//! in use (1/8), much less where allocations are large.
//!
//! **Who writes an entry.** The thread that owns the allocation starting in its granule:
//! the allocating thread writes it before the pointer is handed out, the freeing thread
//! clears it before the memory goes back to the inner allocator. Whatever orders the
//! allocation's own hand-over between threads (the program's synchronisation, the inner
//! allocator's for a reused address) orders the entry's writes too, so `Relaxed` is
//! enough. Tables are published with a `Release` compare-and-swap and read with
//! `Acquire`.
//!
//! Nothing here allocates through the global allocator, takes a lock or runs user code:
//! it is called from inside `alloc`.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicPtr, AtomicU16};

use crate::vm::Region;

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
/// Addresses the map covers: 48 bits on 64-bit targets (what x86-64 and AArch64 give user
/// space; an allocation above is not tracked), all of them on 32-bit ones.
#[cfg(all(target_pointer_width = "64", not(miri)))]
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

/// The top table: 128 KiB of zeroed static data on 64-bit targets (resident as used), one
/// entry on 32-bit ones.
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

/// The entry of the granule `addr` starts in, if its leaf exists. O(1): three loads. Each
/// step borrows one entry of a table, never the table whole (Miri would check a borrow of
/// a whole 512 KiB leaf at every lookup).
#[inline(always)]
pub(crate) fn find(addr: usize) -> Option<&'static AtomicU16> {
    let a = key(addr)?;
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
    // SAFETY: as for the mid table: a published leaf lives for the rest of the process.
    Some(unsafe { &(*leaf)[leaf_index(a)] })
}

/// The entry of the granule `addr` starts in, its tables mapped if need be. `None` if
/// `addr` lies outside the map or the OS refuses the memory: the allocation is then not
/// tracked. O(1); the first use of a 4 MiB span maps its leaf.
#[inline(always)]
pub(crate) fn entry(addr: usize) -> Option<&'static AtomicU16> {
    match find(addr) {
        Some(e) => Some(e),
        None => entry_slow(addr),
    }
}

#[cold]
#[inline(never)]
fn entry_slow(addr: usize) -> Option<&'static AtomicU16> {
    let a = key(addr)?;
    let mid = published(&TOP[top_index(a)])?;
    // SAFETY: `published` returns a mapped table that is never freed.
    let leaf = published(unsafe { &(*mid)[mid_index(a)] })?;
    // SAFETY: as above.
    Some(unsafe { &(*leaf)[leaf_index(a)] })
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

/// Bytes of address space mapped for the map's tables (the static top table aside): an
/// upper bound of the memory heap tracking itself takes, of which only the pages that
/// cover heap in use become resident.
pub(crate) fn mapped_bytes() -> usize {
    MAPPED.load(Relaxed)
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
        let e0 = entry(base).unwrap() as *const AtomicU16;
        let e1 = entry(base + GRANULE).unwrap() as *const AtomicU16;
        let e0b = entry(base + GRANULE - 1).unwrap() as *const AtomicU16;
        assert_eq!(e0, e0b, "one granule, one entry");
        assert_ne!(e0, e1);
        assert_eq!(find(base).map(|e| e as *const _), Some(e0));
        // A span nothing has touched has no leaf: a lookup maps nothing.
        assert!(find(base + (1 << LEAF_SHIFT) * 3).is_none());
        #[cfg(target_pointer_width = "64")]
        assert!(entry(1 << 50).is_none(), "above the map: not tracked");
        assert!(mapped_bytes() >= size_of::<Leaf>());
    }
}
