//! A `SharedArena` used from a TLS destructor while the thread exits, as a thread started
//! meanwhile takes over the exiting thread's id (and so its slot in every `ThreadLocal`).
//! The arena's one-entry cache of "this thread's part" once outlived the id, so the late
//! destructor and the new thread bumped one part's cursor together. The late destructor
//! now gets a part of its own. A process of its own: it relies on which thread ids are
//! free, so no other test may run threads beside it.

use nebula_memory::Arena;
use std::cell::RefCell;
use std::sync::OnceLock;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use nebula_memory::{MemoryPool, SharedArena};

fn arena() -> &'static SharedArena<'static> {
    static ARENA: OnceLock<SharedArena<'static>> = OnceLock::new();
    ARENA.get_or_init(|| {
        let pool = Box::leak(Box::new(MemoryPool::new("exit", 4 << 20).unwrap()));
        SharedArena::new(pool)
    })
}

/// Steps of the choreography: 1 = the late destructor runs (the exiting thread's id is
/// free), 2 = the new thread has allocated, 3 = the late destructor has allocated.
static STEP: AtomicUsize = AtomicUsize::new(0);
static EXITING_PART: AtomicUsize = AtomicUsize::new(0);
static NEW_PART: AtomicUsize = AtomicUsize::new(0);
static LATE_PART: AtomicUsize = AtomicUsize::new(0);
static LATE_VALUE: AtomicUsize = AtomicUsize::new(0);

fn wait_for(step: usize) {
    while STEP.load(SeqCst) < step {
        std::thread::yield_now();
    }
}

fn part_of_this_thread() -> usize {
    std::ptr::from_ref(arena().this_thread()).addr()
}

/// Allocates from the arena in its destructor: a TLS value with a destructor, registered
/// before the thread first allocated, so it is destroyed after the thread id is released.
struct LateUser;

impl Drop for LateUser {
    fn drop(&mut self) {
        STEP.store(1, SeqCst);
        wait_for(2);
        LATE_PART.store(part_of_this_thread(), SeqCst);
        let v = arena().alloc_val(0xA11CE_usize);
        LATE_VALUE.store(std::ptr::from_mut(v).addr(), SeqCst);
        STEP.store(3, SeqCst);
    }
}

thread_local! {
    static LATE_USER: RefCell<Option<LateUser>> = const { RefCell::new(None) };
}

#[test]
fn a_late_destructor_never_shares_the_part_of_a_new_thread() {
    let exiting = std::thread::spawn(|| {
        LATE_USER.with(|u| *u.borrow_mut() = Some(LateUser));
        arena().alloc_val(1u64);
        EXITING_PART.store(part_of_this_thread(), SeqCst);
    });
    wait_for(1);
    let new = std::thread::spawn(|| {
        let v = arena().alloc_val(0xB0B_usize);
        NEW_PART.store(part_of_this_thread(), SeqCst);
        STEP.store(2, SeqCst);
        wait_for(3); // keep the id (and the part) while the late destructor allocates
        assert_eq!(*v, 0xB0B, "the new thread's value was overwritten");
        std::ptr::from_mut(v).addr()
    });
    let new_value = new.join().unwrap();
    exiting.join().unwrap();

    assert_eq!(
        NEW_PART.load(SeqCst),
        EXITING_PART.load(SeqCst),
        "set-up: the new thread was meant to take over the exiting thread's id and part"
    );
    assert_ne!(
        LATE_PART.load(SeqCst),
        NEW_PART.load(SeqCst),
        "the late destructor used the part of a live thread"
    );
    assert_ne!(LATE_VALUE.load(SeqCst), new_value);
    // The late part counts in the arena's figures.
    assert_eq!(arena().bytes_used(), 8 + 2 * size_of::<usize>());
}
