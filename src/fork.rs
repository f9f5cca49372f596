//! The crate's process-wide locks, and `fork()`: every one of them is taken before a fork
//! and released after it, in the parent and in the child, so that a child of a
//! multi-threaded process finds none held by a thread it does not have.
//!
//! After `fork()` the child has one thread, the one that forked. A lock some other thread
//! held at that moment stays held in the child for ever, and whatever that thread was
//! doing under it stays half done. So, as glibc does for `malloc`, the crate registers
//! `pthread_atfork` handlers: *prepare* takes every lock below in [`Level`] order (waiting
//! for each operation under way to finish), and *parent* and *child* release them all. The
//! state they guard is then whole in both processes. Forcing open a lock another thread
//! held mid-operation would not be sound: its state may be half changed.
//!
//! **The locks are `std::sync::Mutex`es, not `parking_lot`'s.** A parking_lot mutex keeps
//! its waiters in a process-wide table of its own; threads that waited while *prepare*
//! held a lock are still queued there in the child, which has no such threads: the child's
//! unlock would look them up (under a bucket lock that a dead thread may hold), and a fair
//! unlock hands the lock to the first of them, dead, for ever. A `std` mutex's waiters are
//! the kernel's (a futex on Linux; a pthread mutex elsewhere, which POSIX lets the forking
//! thread unlock in the child), so the child's unlock finds nobody waiting.
//!
//! **Which locks.** A [`Lock`] lives in a `static` or in a leaked node and registers itself
//! with its level at its first `lock` (one load when it has); a [`BoxedLock`] (a pool's
//! state, a scratch stack, a scratch owner's list) registers when it is made and leaves
//! when it is dropped. A process-wide value made on first use is a [`Global`], whose
//! making runs under a lock of its own ([`Level::Init`]): a `OnceLock` being made by
//! another thread at the fork would stay "being made" in the child.
//!
//! **The order** (each level's locks are taken after every lock of the levels before it;
//! no code takes a lock while holding one of a later level, which is what lets *prepare*
//! take them all without deadlock): see [`Level`]. An arena's own locks (its chain of
//! blocks, a `SharedArena`'s late parts, the game arena's read-write lock) are not among
//! them: like a mutex of the program's, they are held by the thread using that arena, and
//! an arena another thread was using at the fork cannot be used in the child (a thread's
//! scratch arenas and thread arena are its own; the forking thread's are usable). Nor are
//! locks inside other crates (`tracing`'s dispatchers, `thread_local`'s thread ids, Tracy's
//! client, whose threads the child does not have).
//!
//! *Prepare* relies on rule 1 of ARCHITECTURE.md: no user code (and so no `fork()`) runs
//! while the crate holds one of its locks on the calling thread. The handlers are
//! installed at the first registration; a fork racing that very first one may miss them.
//! Unix only: Windows and the web have no `fork`. Under Miri, locks register but no
//! handler is installed (Miri has no `fork`). The lists of locks live for the process, so
//! their growth is charged to no heap scope (`heap::untagged`), nor is a `Global`'s value.
//! The heap sampler's spin lock (taken inside `alloc`, so never registered) is taken last
//! by name: the module's other import from the crate.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The levels of the crate's process-wide locks, in the one order they are taken: a lock
/// is only ever taken while the thread holds locks of earlier levels alone. The nestings
/// that fix it (`→`: taken while holding):
///
/// - `Init` → anything: making a [`Global`] (the `with_scratch` owner, the engine and
///   game arenas) registers an owner's list, takes `Config`, `Tags`, ...; never made
///   while another lock of the crate is held.
/// - `Stacks` → `Stack` (the idle trim walks the stacks); `Stack` → `Owners` (a new
///   scratch arena is noted with its owner), `Config` (its pool, made on first use),
///   `Tags`, `TagArenas` (its tag), and through an arena's chain lock `Pools` and the
///   event receivers (the trim resets arenas).
/// - `ThreadArenas` → an arena's chain → `Pools` (figures of every thread arena).
/// - `Owners` → `Config`, `Tags`, `TagArenas` (a new arena), a chain, `Pools` (a frame
///   end trims or takes back arenas).
/// - `Config` → `Pools` (a global pool is made under it, and registers).
/// - `Tags` → `TagArenas` (a snapshot reads each tag's arenas; a new tag registers).
/// - an arena's chain lock → `Pools`, `Tracy`, `TracyNames`, `Recorded` (events are sent
///   under it); `Tracy` → `TracyNames` (an event), `Switches` (turning Tracy on or off).
/// - `Pools`, `TracyNames`, `Switches`, `Recorded`, `Diagnostics`, `Attribution` take
///   nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
#[cfg_attr(not(all(feature = "tracy", feature = "bevy")), allow(dead_code))]
pub(crate) enum Level {
    /// The making of each [`Global`].
    Init,
    /// The list of every thread's scratch stack (`per_thread::scratch`).
    Stacks,
    /// Each thread's scratch stack.
    Stack,
    /// The list of every thread arena (`per_thread::thread_arena`).
    ThreadArenas,
    /// Each scratch owner's list of arenas (`with_scratch`'s, each Bevy resource's).
    Owners,
    /// The global pools' sizes; the global pools are made under it (`global`).
    Config,
    /// The ledger's registry of tags (`ledger::node`).
    Tags,
    /// Each tag's list of arenas (`ledger::node`).
    TagArenas,
    /// Each pool's state (`pool`).
    Pools,
    /// The Tracy receiver's switch (`ledger::tracy`).
    Tracy,
    /// The Tracy names of the tags (`ledger::tracy`).
    TracyNames,
    /// The ledger's receiver switches (`ledger::event`).
    Switches,
    /// The ledger's recorded events (`ledger::sink`).
    Recorded,
    /// The Bevy diagnostics' paths (`bevy::ledger`).
    Diagnostics,
    /// The names of observers' systems (`bevy::trace_layer`) and of systems' scratch lines
    /// (`bevy::scratch::lines`).
    Attribution,
}

const LEVELS: usize = Level::Attribution as usize + 1;

/// A registered lock: what *prepare* takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    Mutex(*const Mutex<()>),
    RwLock(*const RwLock<()>),
}

// SAFETY: a gate is the address of a lock that stays alive while it is registered (see
// `register`); the handlers lock it from whichever thread forks, as any thread may.
unsafe impl Send for Gate {}

/// Each level's registered locks. A lock joins or leaves under its level's list lock, which
/// *prepare* holds while it holds the level's locks: none is dropped under it.
static MEMBERS: [Mutex<Vec<Gate>>; LEVELS] = [const { Mutex::new(Vec::new()) }; LEVELS];

/// Takes a std mutex; a panic under it does not matter to the crate (its state's
/// consistency is the crate's own concern, as with parking_lot, which has no poisoning).
fn acquire<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds `gate` to `level`'s list (and installs the handlers, the first time).
fn register(level: Level, gate: Gate) {
    if cfg!(unix) {
        install(); // before the list: `pthread_atfork` waits for a fork under way
        // The lists live for the process: charged to no heap scope (`heap::untagged`).
        crate::heap::untagged(|| acquire(&MEMBERS[level as usize]).push(gate));
    }
}

/// Removes `gate` from `level`'s list: after this, no handler touches it.
fn unregister(level: Level, gate: Gate) {
    if cfg!(unix) {
        let mut list = acquire(&MEMBERS[level as usize]);
        if let Some(i) = list.iter().rposition(|g| *g == gate) {
            list.swap_remove(i);
        }
    }
}

/// A mutex of process-wide state that lives for ever (a `static`, a leaked node): taken
/// around `fork` with its [`Level`]'s. It registers at its first `lock` (`&'static`:
/// it never moves nor goes).
pub(crate) struct Lock<T> {
    level: Level,
    registered: AtomicBool,
    gate: Mutex<()>,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is reached only through a guard, which holds `gate`: one thread at a
// time, as with `Mutex<T>`, which is `Sync` for `T: Send`.
unsafe impl<T: Send> Sync for Lock<T> {}

impl<T> Lock<T> {
    /// A lock of `level` holding `value`.
    pub(crate) const fn new(level: Level, value: T) -> Lock<T> {
        Lock {
            level,
            registered: AtomicBool::new(false),
            gate: Mutex::new(()),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock (registering it first, the first time). Blocks while another thread
    /// holds it, or while a fork is under way.
    pub(crate) fn lock(&'static self) -> LockGuard<'static, T> {
        if !self.registered.load(Acquire) {
            self.register();
        }
        self.guard()
    }

    #[cold]
    fn register(&'static self) {
        // Installed before the list is taken: `pthread_atfork` waits for a fork under way.
        install();
        // The level's list serializes racing first takers: only the first registers.
        let mut list = acquire(&MEMBERS[self.level as usize]);
        if !self.registered.load(Acquire) {
            if cfg!(unix) {
                crate::heap::untagged(|| list.push(Gate::Mutex(&self.gate)));
            }
            self.registered.store(true, Release);
        }
    }

    fn guard(&self) -> LockGuard<'_, T> {
        LockGuard {
            _gate: acquire(&self.gate),
            value: &self.value,
        }
    }
}

/// The lock's value, while the lock is held.
pub(crate) struct LockGuard<'a, T> {
    _gate: MutexGuard<'a, ()>,
    value: &'a UnsafeCell<T>,
}

impl<T> Deref for LockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the gate, so no other reference to the value exists.
        unsafe { &*self.value.get() }
    }
}

impl<T> DerefMut for LockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and the guard is borrowed mutably.
        unsafe { &mut *self.value.get() }
    }
}

/// A [`Lock`] of state that is made and dropped (a pool's state, a scratch stack, a
/// scratch owner's list): in a box of its own, so that its address stays put while it is
/// registered, from its making to its drop.
pub(crate) struct BoxedLock<T>(Box<Lock<T>>);

impl<T> BoxedLock<T> {
    /// A lock of `level` holding `value`, registered.
    pub(crate) fn new(level: Level, value: T) -> BoxedLock<T> {
        let lock = Box::new(Lock::new(level, value));
        register(level, Gate::Mutex(&lock.gate));
        BoxedLock(lock)
    }

    /// Takes the lock. Blocks while another thread holds it, or while a fork is under way.
    #[inline]
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        self.0.guard()
    }

    /// The value, through `&mut` (no lock taken).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.value.get_mut()
    }
}

impl<T> Drop for BoxedLock<T> {
    fn drop(&mut self) {
        unregister(self.0.level, Gate::Mutex(&self.0.gate));
    }
}

/// A read-write lock of process-wide state that lives for ever (Tracy's switch): *prepare*
/// takes it for writing.
#[cfg_attr(not(feature = "tracy"), allow(dead_code))]
pub(crate) struct RwLockStatic<T> {
    level: Level,
    registered: AtomicBool,
    gate: RwLock<()>,
    value: UnsafeCell<T>,
}

// SAFETY: as `std::sync::RwLock<T>`: readers share `&T` (so `T: Sync`), a writer has it
// alone (so `T: Send`); both only under the gate.
unsafe impl<T: Send + Sync> Sync for RwLockStatic<T> {}

#[cfg_attr(not(feature = "tracy"), allow(dead_code))]
impl<T> RwLockStatic<T> {
    /// A read-write lock of `level` holding `value`.
    pub(crate) const fn new(level: Level, value: T) -> RwLockStatic<T> {
        RwLockStatic {
            level,
            registered: AtomicBool::new(false),
            gate: RwLock::new(()),
            value: UnsafeCell::new(value),
        }
    }

    fn ensure_registered(&'static self) {
        if !self.registered.load(Acquire) {
            install(); // as in `Lock::register`
            let mut list = acquire(&MEMBERS[self.level as usize]);
            if !self.registered.load(Acquire) {
                if cfg!(unix) {
                    crate::heap::untagged(|| list.push(Gate::RwLock(&self.gate)));
                }
                self.registered.store(true, Release);
            }
        }
    }

    /// Shared access.
    pub(crate) fn read(&'static self) -> ReadGuard<'static, T> {
        self.ensure_registered();
        ReadGuard {
            _gate: self.gate.read().unwrap_or_else(PoisonError::into_inner),
            value: &self.value,
        }
    }

    /// Shared access if it is free now and the lock is registered already (this neither
    /// registers, which allocates, nor waits): for the heap sampler, inside `alloc`.
    #[cfg(feature = "tracy")]
    pub(crate) fn try_read(&'static self) -> Option<ReadGuard<'static, T>> {
        if !self.registered.load(Acquire) {
            return None;
        }
        let gate = match self.gate.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(ReadGuard {
            _gate: gate,
            value: &self.value,
        })
    }

    /// Exclusive access.
    pub(crate) fn write(&'static self) -> WriteGuard<'static, T> {
        self.ensure_registered();
        WriteGuard {
            _gate: self.gate.write().unwrap_or_else(PoisonError::into_inner),
            value: &self.value,
        }
    }
}

/// Shared access to a [`RwLockStatic`]'s value.
pub(crate) struct ReadGuard<'a, T> {
    _gate: RwLockReadGuard<'a, ()>,
    value: &'a UnsafeCell<T>,
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the gate for reading: no writer has the value.
        unsafe { &*self.value.get() }
    }
}

/// Exclusive access to a [`RwLockStatic`]'s value.
pub(crate) struct WriteGuard<'a, T> {
    _gate: RwLockWriteGuard<'a, ()>,
    value: &'a UnsafeCell<T>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the gate for writing: nobody else has the value.
        unsafe { &*self.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and the guard is borrowed mutably.
        unsafe { &mut *self.value.get() }
    }
}

/// A process-wide value made on first use, like a `OnceLock` in a `static`, but made
/// under a [`Lock`] of level [`Level::Init`], so that a fork waits for a making under way
/// (a `OnceLock` made by another thread at the fork would stay "being made" in the child,
/// and its first use there would wait for ever). The value is leaked: it lives as long as
/// the process. Getting it once made is one `Acquire` load.
pub(crate) struct Global<T> {
    value: AtomicPtr<T>,
    making: Lock<()>,
}

impl<T: Send + Sync> Global<T> {
    /// An empty cell.
    pub(crate) const fn new() -> Global<T> {
        Global {
            value: AtomicPtr::new(ptr::null_mut()),
            making: Lock::new(Level::Init, ()),
        }
    }

    /// The value, made by `make` if it is not yet (`make` runs once, under the cell's
    /// lock; if it panics, the next call makes it again).
    #[inline]
    pub(crate) fn get_or_init(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let p = self.value.load(Acquire);
        if p.is_null() {
            return self.make(make);
        }
        // SAFETY: a non-null pointer is a leaked box published with `Release` below, never
        // freed nor written again.
        unsafe { &*p }
    }

    #[cold]
    fn make(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let _making = self.making.lock();
        let p = self.value.load(Acquire);
        if !p.is_null() {
            // SAFETY: as in `get_or_init`.
            return unsafe { &*p };
        }
        // Kept for the process: charged to no heap scope (`heap::untagged`).
        let value: &'static T = crate::heap::untagged(|| Box::leak(Box::new(make())));
        self.value.store(ptr::from_ref(value).cast_mut(), Release);
        value
    }
}

#[cfg(all(unix, not(miri)))]
/// The locks *prepare* took, for *parent* and *child* to release: touched only by the
/// thread that holds `FORKING` (the forking thread, between its handlers).
struct Held {
    forking: Option<MutexGuard<'static, ()>>,
    lists: Vec<MutexGuard<'static, Vec<Gate>>>,
    locks: Vec<Holding>,
}

#[cfg(all(unix, not(miri)))]
/// One lock taken by *prepare*.
enum Holding {
    // The guards are held for their drop (the unlock), never read.
    Mutex(#[allow(dead_code)] MutexGuard<'static, ()>),
    RwLock(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

#[cfg(all(unix, not(miri)))]
struct HeldCell(UnsafeCell<Held>);

// SAFETY: `Held` is touched only by the thread holding `FORKING`, between its *prepare* and
// its *parent* or *child* handler (two threads forking at once take turns on `FORKING`);
// its guards are dropped on the thread that took them (in the child, that thread's copy).
#[cfg(all(unix, not(miri)))]
unsafe impl Sync for HeldCell {}

/// Forks take turns: one fork's locks are all taken and released before another's.
#[cfg(all(unix, not(miri)))]
static FORKING: Mutex<()> = Mutex::new(());
#[cfg(all(unix, not(miri)))]
static HELD: HeldCell = HeldCell(UnsafeCell::new(Held {
    forking: None,
    lists: Vec::new(),
    locks: Vec::new(),
}));

/// Installs the handlers, once per process: cheap after the first call (one load). The
/// sampler's tables call it when they are made.
pub(crate) fn install() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    #[cfg(all(unix, not(miri)))]
    if !INSTALLED.load(Acquire) && !INSTALLED.swap(true, Acquire) {
        // SAFETY: three `extern "C"` functions with no argument, as `pthread_atfork` wants;
        // they stay valid for the life of the process. It fails only without memory, and
        // then forks go unguarded (the state before this module).
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    }
    #[cfg(not(all(unix, not(miri))))]
    INSTALLED.store(true, Release);
}

/// *Prepare*: takes every registered lock, level by level, each level's list first.
#[cfg(all(unix, not(miri)))]
extern "C" fn prepare() {
    let forking = acquire(&FORKING);
    // SAFETY: we hold `FORKING` (see `HeldCell`).
    let held = unsafe { &mut *HELD.0.get() };
    held.forking = Some(forking);
    for list in &MEMBERS {
        let list = acquire(list);
        // A registered lock is alive until it leaves its list, which waits for the list's
        // lock: we hold that until *parent* or *child* has released the lock, so no
        // `'static` guard below outlives the lock it holds.
        for gate in list.iter() {
            held.locks.push(match *gate {
                Gate::Mutex(m) => {
                    // SAFETY: registered, so alive while we hold the list (above).
                    let m = unsafe { &*m };
                    Holding::Mutex(acquire(m))
                }
                Gate::RwLock(l) => {
                    // SAFETY: as above.
                    let l = unsafe { &*l };
                    Holding::RwLock(l.write().unwrap_or_else(PoisonError::into_inner))
                }
            });
        }
        held.lists.push(list);
    }
    // The sampler's table lock, last: a thread holding any lock above may allocate.
    crate::heap::sample::fork_prepare();
}

/// *Parent* and *child*: releases what *prepare* took, the last taken first. In the child
/// the forking thread is the only one, and no thread waits (a std lock's waiters are the
/// kernel's, which the child has none of).
#[cfg(all(unix, not(miri)))]
extern "C" fn release() {
    // SAFETY: *prepare* ran on this thread and holds `FORKING` (see `HeldCell`).
    let held = unsafe { &mut *HELD.0.get() };
    crate::heap::sample::fork_release();
    while let Some(lock) = held.locks.pop() {
        drop(lock);
    }
    while let Some(list) = held.lists.pop() {
        drop(list);
    }
    drop(held.forking.take());
}
