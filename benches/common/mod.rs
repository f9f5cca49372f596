//! Shared by the workload benches (and the `asm_probe` example): a fixed-seed PRNG and
//! `limit`, the floor allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

/// splitmix64: tiny, fast, good enough for picking sizes.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the modulo bias is irrelevant at these ranges).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

/// `limit`: the floor. One buffer taken up front, a bump pointer moving upwards through it:
/// align up, bounds check, add. No blocks, no statistics, no growth.
///
/// As an `allocator_api2` allocator (through `&Limit`) it grows the newest allocation in
/// place, copies otherwise, and never frees anything before `reset`.
pub struct Limit {
    ptr: Cell<*mut u8>,
    base: *mut u8,
    end: *mut u8,
    cap: usize,
}

// SAFETY: `Limit` exclusively owns its buffer; moving it to another thread moves that
// ownership (it is not `Sync`, thanks to the `Cell`).
unsafe impl Send for Limit {}

const LIMIT_ALIGN: usize = 4096;

impl Limit {
    /// A floor allocator over a fresh buffer of `cap` bytes (from the system heap).
    pub fn new(cap: usize) -> Limit {
        let layout = match Layout::from_size_align(cap, LIMIT_ALIGN) {
            Ok(l) => l,
            Err(e) => panic!("limit: bad capacity {cap}: {e}"),
        };
        // SAFETY: `cap` is non-zero for every caller (checked below through null).
        let base = unsafe { System.alloc(layout) };
        assert!(!base.is_null(), "limit: cannot take {cap} bytes");
        Limit {
            ptr: Cell::new(base),
            base,
            end: base.wrapping_add(cap),
            cap,
        }
    }

    /// Align up, bounds check, add.
    #[inline(always)]
    pub fn alloc(&self, layout: Layout) -> NonNull<u8> {
        let p = self.ptr.get();
        let start = (p.addr() + (layout.align() - 1)) & !(layout.align() - 1);
        let new = start + layout.size();
        if new > self.end.addr() {
            exhausted(layout);
        }
        self.ptr.set(p.with_addr(new));
        // SAFETY: `start` lies inside the buffer (at most `end`), which is not null.
        unsafe { NonNull::new_unchecked(p.with_addr(start)) }
    }

    /// Everything is free again.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.ptr.set(self.base);
    }
}

#[cold]
#[inline(never)]
fn exhausted(layout: Layout) -> ! {
    panic!("limit: buffer exhausted by {layout:?}")
}

impl Drop for Limit {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe {
            System.dealloc(
                self.base,
                Layout::from_size_align_unchecked(self.cap, LIMIT_ALIGN),
            )
        }
    }
}

// SAFETY: memory handed out stays valid until `reset(&mut self)` or drop, which a
// collection borrowing `&Limit` keeps away. `grow` extends in place only the newest
// allocation (the one ending at the bump pointer); everything else is copied.
unsafe impl Allocator for Limit {
    #[inline(always)]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        Ok(NonNull::slice_from_raw_parts(
            self.alloc(layout),
            layout.size(),
        ))
    }

    #[inline(always)]
    unsafe fn deallocate(&self, _ptr: NonNull<u8>, _layout: Layout) {}

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let top = self.ptr.get();
        let at = ptr.as_ptr().addr();
        if at + old.size() == top.addr()
            && at & (new.align() - 1) == 0
            && at + new.size() <= self.end.addr()
        {
            self.ptr.set(top.with_addr(at + new.size()));
            return Ok(NonNull::slice_from_raw_parts(ptr, new.size()));
        }
        let q = self.alloc(new);
        // SAFETY: `q` is fresh and disjoint from the live `ptr` of `old.size()` bytes.
        unsafe {
            q.as_ptr()
                .copy_from_nonoverlapping(ptr.as_ptr(), old.size())
        };
        Ok(NonNull::slice_from_raw_parts(q, new.size()))
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if ptr.as_ptr().addr() & (new.align() - 1) == 0 {
            return Ok(NonNull::slice_from_raw_parts(ptr, new.size()));
        }
        let q = self.alloc(new);
        // SAFETY: `q` is fresh and disjoint from `ptr`; `new.size() <= old.size()`.
        unsafe {
            q.as_ptr()
                .copy_from_nonoverlapping(ptr.as_ptr(), new.size())
        };
        let _ = old;
        Ok(NonNull::slice_from_raw_parts(q, new.size()))
    }
}
