//! Virtual memory: reserve address space, commit it as blocks are used, give it back.
//!
//! A pool reserves its whole region once and never moves it, so pointers into it stay
//! valid for the pool's lifetime. Physical memory is a separate matter: it is committed
//! only as blocks are handed out and given back to the OS ([`Region::decommit`]) when the
//! pool decides free memory has piled up.
//!
//! Three back ends, chosen at compile time:
//! - **unix** (not Miri): `mmap(PROT_READ | PROT_WRITE, MAP_NORESERVE)`. Pages become resident
//!   when first touched, so [`Region::commit`] is free. Linux: `MAP_NORESERVE` keeps a large
//!   reservation out of the overcommit accounting; `madvise(MADV_DONTNEED)` decommits, at
//!   once, and the pages read as zero. macOS ignores `MAP_NORESERVE` (it never charges
//!   untouched pages) and takes `MADV_DONTNEED` as a hint (pages may stay resident), so
//!   there and on the BSDs a fresh `mmap(MAP_FIXED)` over the range decommits instead.
//!   (`MADV_FREE` would leave the pages counted until memory runs short.)
//! - **windows**: `VirtualAlloc(MEM_RESERVE)` (the base is aligned to the 64 KiB allocation
//!   granularity, the length to 4 KiB pages), then `MEM_COMMIT` per range before use and
//!   `VirtualFree(MEM_DECOMMIT)`, which gives back the pages and their commit charge
//!   (`MEM_RESET` would keep the charge); a decommitted page faults until committed again,
//!   so the pool commits every block it hands out and never decommits a header's page.
//! - **anything else (the web), and Miri**: one `std::alloc` allocation, zeroed; commit
//!   and decommit do nothing. Reserving is allocating there ([`RESERVES`] is false), so
//!   pools grow by segments.
//!
//! Only this module talks to the OS.

use std::ptr::NonNull;

/// Whether reserving address space costs nothing but address space here: true where there
/// is virtual memory (unix, Windows; Miri runs the unix and Windows targets), false on
/// the web, where a reservation is an allocation of linear memory for good. Pools reserve
/// their capacity where it is true and grow by segments where it is not.
pub(crate) const RESERVES: bool = cfg!(any(unix, windows));

/// Whether reserved memory is usable as it is, each page backed when first touched and
/// read as zero until written (unix): a reservation far larger than will ever be used
/// (the heap tracker's flat owner table) then costs only the pages touched. Windows
/// needs a commit first; the web and Miri allocate what they reserve.
pub(crate) const TOUCH_BACKS: bool = cfg!(all(unix, not(miri)));

/// Bytes of `[base, base + len)` resident now, where the OS says cheaply (Linux: the
/// process's memory map); `None` elsewhere. Reads a file and allocates: not for hot paths.
pub(crate) fn resident_bytes(base: usize, len: usize) -> Option<usize> {
    if !cfg!(any(target_os = "linux", target_os = "android")) || cfg!(miri) {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let end = base.checked_add(len)?;
    let (mut inside, mut total) = (false, 0usize);
    for line in maps.lines() {
        // A mapping's first line: `start-end perms offset dev inode [path]`.
        let range = line.split(' ').next().and_then(|r| r.split_once('-'));
        if let Some((s, e)) = range
            && let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16))
        {
            inside = s >= base && e <= end;
        } else if inside && let Some(kb) = line.strip_prefix("Rss:") {
            let kb = kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .ok()?;
            total = total.saturating_add(kb.saturating_mul(1024));
        }
    }
    Some(total)
}

/// A reserved, page-aligned span of address space, released on drop.
#[derive(Debug)]
pub(crate) struct Region {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Region` is an owned span of address space with no thread affinity; the OS
// calls made on it are thread-safe.
unsafe impl Send for Region {}
// SAFETY: `&Region` only exposes the base address, the length and commit/decommit, which
// are thread-safe OS calls; the pool synchronises what is written into the span.
unsafe impl Sync for Region {}

/// The granularity of commit and decommit, a power of two.
/// Racing first callers each ask the OS (the same answer); not a `OnceLock`, whose making
/// by another thread at a `fork` would stay under way in the child for ever.
pub(crate) fn page_size() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Relaxed) {
        0 => {
            let page = os::page_size();
            PAGE.store(page, Relaxed);
            page
        }
        page => page,
    }
}

impl Region {
    /// Reserves at least `len` bytes (rounded up to whole pages) of address space.
    ///
    /// Returns the OS error when the reservation is refused, and `None` when `len` rounded up
    /// to a page overflows or exceeds `isize::MAX`.
    pub(crate) fn reserve(len: usize) -> Option<Result<Region, std::io::Error>> {
        let page = page_size();
        let len = len.checked_add(page - 1)? & !(page - 1);
        if len == 0 || len > isize::MAX as usize {
            return None;
        }
        Some(os::reserve(len).map(|base| Region { base, len }))
    }

    /// First byte of the region; page-aligned.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length of the region in bytes; a whole number of pages.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes `[ptr, ptr + len)` readable and writable, whole pages around it included.
    ///
    /// Returns false when the OS refuses (out of commit charge).
    ///
    /// # Safety
    /// The range lies inside this region.
    #[inline]
    pub(crate) unsafe fn commit(&self, ptr: *mut u8, len: usize) -> bool {
        debug_assert!(self.contains_range(ptr, len));
        // SAFETY: the caller keeps the range inside the region.
        unsafe { os::commit(ptr, len) }
    }

    /// Gives the physical memory of the whole pages inside `[ptr, ptr + len)` back to the OS.
    /// Their contents are lost: they read as zero (unix) or must be committed again before
    /// use (windows). Partial pages at either end are left alone.
    ///
    /// # Safety
    /// The range lies inside this region and nobody uses its contents any more.
    pub(crate) unsafe fn decommit(&self, ptr: *mut u8, len: usize) {
        debug_assert!(self.contains_range(ptr, len));
        let page = page_size();
        let start = (ptr as usize).next_multiple_of(page);
        let end = (ptr as usize + len) & !(page - 1);
        if end > start {
            // SAFETY: `start..end` is a whole-page sub-range of the caller's range, measured
            // from `ptr` so the pointer keeps the region's provenance.
            unsafe { os::decommit(ptr.add(start - ptr as usize), end - start) }
        }
    }

    /// Makes the whole pages inside `[ptr, ptr + len)` inaccessible (`accessible == false`)
    /// or readable and writable again. Returns false where the platform cannot (then
    /// nothing changed).
    ///
    /// # Safety
    /// The range lies inside this region; while inaccessible, nobody may touch it.
    pub(crate) unsafe fn protect(&self, ptr: *mut u8, len: usize, accessible: bool) -> bool {
        debug_assert!(self.contains_range(ptr, len));
        let page = page_size();
        let start = (ptr as usize).next_multiple_of(page);
        let end = (ptr as usize + len) & !(page - 1);
        if end <= start {
            return true;
        }
        // SAFETY: a whole-page sub-range of the caller's range.
        unsafe { os::protect(ptr.add(start - ptr as usize), end - start, accessible) }
    }

    /// Leaves the region out of core dumps where the OS can (Linux): for a reservation far
    /// larger than what is used, which a dump would otherwise write out whole (as zeros).
    pub(crate) fn exclude_from_core_dumps(&self) {
        #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
        // SAFETY: advice on our own mapping, whole pages; MADV_DONTDUMP changes no contents.
        unsafe {
            libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_DONTDUMP);
        }
    }

    fn contains_range(&self, ptr: *mut u8, len: usize) -> bool {
        let base = self.base.as_ptr() as usize;
        let p = ptr as usize;
        p >= base && p.checked_add(len).is_some_and(|e| e <= base + self.len)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what `os::reserve` returned; the region's owner
        // (a pool) is being dropped, so nothing points into it any more.
        unsafe { os::release(self.base, self.len) }
    }
}

#[cfg(all(unix, not(miri)))]
mod os {
    use std::ptr::NonNull;

    pub(super) fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    }

    pub(super) fn reserve(len: usize) -> Result<NonNull<u8>, std::io::Error> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory. MAP_NORESERVE: pages are charged only when touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // Not `io::Error::other`: that allocates, and the heap tracker's owner map reserves
        // its tables from inside an allocation.
        NonNull::new(p.cast()).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))
    }

    #[inline(always)]
    pub(super) unsafe fn commit(_ptr: *mut u8, _len: usize) -> bool {
        // The mapping is already readable and writable; the kernel backs a page when it is
        // first touched.
        true
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) unsafe fn decommit(ptr: *mut u8, len: usize) {
        // SAFETY: the caller passes whole pages of our own mapping whose contents are dead;
        // on Linux, MADV_DONTNEED on a private anonymous mapping drops them at once and
        // they read as zero later.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_DONTNEED) };
    }

    /// Elsewhere (macOS, the BSDs) MADV_DONTNEED is only a hint: the pages may stay
    /// resident, with their contents. A fresh mapping over the range (MAP_FIXED) drops them
    /// at once, whatever the kernel, and they read as zero as on Linux.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) unsafe fn decommit(ptr: *mut u8, len: usize) {
        // SAFETY: whole pages of our own mapping whose contents are dead; the new mapping
        // replaces exactly them with the same protection and flags.
        unsafe {
            libc::mmap(
                ptr.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
    }

    pub(super) unsafe fn protect(ptr: *mut u8, len: usize, accessible: bool) -> bool {
        let prot = if accessible {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        // SAFETY: whole pages of our own mapping, as the caller guarantees.
        unsafe { libc::mprotect(ptr.cast(), len, prot) == 0 }
    }

    pub(super) unsafe fn release(base: NonNull<u8>, len: usize) {
        // SAFETY: `base`/`len` describe exactly one mapping created by `reserve`.
        unsafe { libc::munmap(base.as_ptr().cast(), len) };
    }
}

#[cfg(all(windows, not(miri)))]
mod os {
    use std::ptr::NonNull;
    use windows_sys::Win32::System::Memory::{
        MEM_COMMIT, MEM_DECOMMIT, MEM_RELEASE, MEM_RESERVE, PAGE_NOACCESS, PAGE_READWRITE,
        VirtualAlloc, VirtualFree,
    };
    use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};

    pub(super) fn page_size() -> usize {
        // SAFETY: GetSystemInfo fills the struct it is given and has no other effect.
        let info = unsafe {
            let mut info: SYSTEM_INFO = std::mem::zeroed();
            GetSystemInfo(&mut info);
            info
        };
        (info.dwPageSize as usize).max(4096)
    }

    pub(super) fn reserve(len: usize) -> Result<NonNull<u8>, std::io::Error> {
        // SAFETY: reserving fresh address space at a system-chosen address.
        let p = unsafe { VirtualAlloc(std::ptr::null(), len, MEM_RESERVE, PAGE_NOACCESS) };
        NonNull::new(p.cast()).ok_or_else(std::io::Error::last_os_error)
    }

    pub(super) unsafe fn commit(ptr: *mut u8, len: usize) -> bool {
        // SAFETY: the range lies in our reservation; committing committed pages is a no-op.
        let p = unsafe { VirtualAlloc(ptr.cast(), len, MEM_COMMIT, PAGE_READWRITE) };
        !p.is_null()
    }

    pub(super) unsafe fn decommit(ptr: *mut u8, len: usize) {
        // SAFETY: whole pages of our reservation whose contents are dead.
        unsafe { VirtualFree(ptr.cast(), len, MEM_DECOMMIT) };
    }

    pub(super) unsafe fn protect(ptr: *mut u8, len: usize, accessible: bool) -> bool {
        use windows_sys::Win32::System::Memory::VirtualProtect;
        let prot = if accessible {
            PAGE_READWRITE
        } else {
            PAGE_NOACCESS
        };
        let mut old = 0;
        // SAFETY: whole committed pages of our reservation.
        unsafe { VirtualProtect(ptr.cast(), len, prot, &mut old) != 0 }
    }

    pub(super) unsafe fn release(base: NonNull<u8>, _len: usize) {
        // SAFETY: `base` is the address `VirtualAlloc(MEM_RESERVE)` returned.
        unsafe { VirtualFree(base.as_ptr().cast(), 0, MEM_RELEASE) };
    }
}

#[cfg(any(miri, not(any(unix, windows))))]
mod os {
    // The system allocator itself, not the global one: a region is pool memory, never
    // heap the ledger's heap tracking should count.
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::ptr::NonNull;

    const ALIGN: usize = 4096;

    pub(super) fn page_size() -> usize {
        ALIGN
    }

    pub(super) fn reserve(len: usize) -> Result<NonNull<u8>, std::io::Error> {
        // A kind, not `io::Error::other`, which allocates (see the unix back end).
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // Zeroed, like the fresh pages an OS hands out, so the two back ends agree.
        // SAFETY: `len` is non-zero (checked by `Region::reserve`).
        let p = unsafe { System.alloc_zeroed(layout) };
        NonNull::new(p).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))
    }

    pub(super) unsafe fn commit(_ptr: *mut u8, _len: usize) -> bool {
        true
    }

    pub(super) unsafe fn decommit(_ptr: *mut u8, _len: usize) {}

    pub(super) unsafe fn protect(_ptr: *mut u8, _len: usize, _accessible: bool) -> bool {
        false
    }

    pub(super) unsafe fn release(base: NonNull<u8>, len: usize) {
        // SAFETY: allocated by `reserve` with this exact layout.
        unsafe { System.dealloc(base.as_ptr(), Layout::from_size_align_unchecked(len, ALIGN)) }
    }
}
