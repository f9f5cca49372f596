//! Each system's scratch line: the ledger tag a plain `Scratch` claim (and the batches of
//! its [`ScratchBatches`](super::ScratchBatches)) is charged to while the system runs.
//!
//! The name comes from the plugin's wrapping (`attribution`), which runs every system in
//! the heap scope of its line `systems/<name>` and registers here, by that scope's heap
//! id, the scratch line it derives from it: `scratch/systems/<name>`, a child of
//! `scratch/systems`, so the parent line is every system's total. A claim looks its
//! thread's current heap scope up: one atomic load once the line's tag exists (the first
//! claim of a line makes it, so a system that never uses `Scratch` costs no tag). A scope
//! no wrapper registered (no plugin, `attribute_systems` off, a one-shot run, an observer
//! or a user's own `ledger::scope` around the claim) falls back to `scratch/systems`.

use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr};

use crate::fork::{Level, Lock};
use crate::heap::counters::TAGS;
use crate::ledger::{self, HeapScope, TagNode};

/// By heap id: the scratch line's tag, once made (only `&'static TagNode`s are stored).
static NODES: [AtomicPtr<TagNode>; TAGS] = [const { AtomicPtr::new(ptr::null_mut()) }; TAGS];
/// By heap id: a wrapper registered a scratch line for the scope (its name is in `NAMES`).
static NAMED: [AtomicBool; TAGS] = [const { AtomicBool::new(false) }; TAGS];
/// The registered lines' names, by heap id, until each line's tag is made.
static NAMES: Lock<Vec<(u16, Box<str>)>> = Lock::new(Level::Attribution, Vec::new());
/// `scratch/systems`, once looked up.
static FALLBACK: AtomicPtr<TagNode> = AtomicPtr::new(ptr::null_mut());

/// Records that claims made in the heap scope `heap_id` (a wrapped system's line) are
/// charged to the tag `line`. The first registration of an id stays (the id names one
/// heap line, so one scratch line). The name is kept for the process: untagged (see
/// `heap::untagged`), whichever scope the wrapping runs in. O(lines).
pub(crate) fn register(heap_id: u16, line: &str) {
    if heap_id == 0 {
        return; // outside every scope, or past the counters' table: not one system's
    }
    let i = usize::from(heap_id) % TAGS;
    crate::heap::untagged(|| {
        let mut names = NAMES.lock();
        if !names.iter().any(|&(id, _)| id == heap_id) {
            names.push((heap_id, line.into()));
        }
    });
    NAMED[i].store(true, Release);
}

/// The scratch line of a claim made in the heap scope `scope`: the registered system's,
/// or `scratch/systems`. O(1) once the line's tag exists; its first claim makes it
/// (O(tags)).
pub(crate) fn line_of(scope: HeapScope) -> &'static TagNode {
    let id = scope.id();
    let i = usize::from(id) % TAGS;
    if id != 0 && NAMED[i].load(Acquire) {
        if let Some(node) = load(&NODES[i]) {
            return node;
        }
        // Copied out: the tag is made under the registry's lock, which comes before ours
        // in the lock order. Bookkeeping of the crate's, not the system's heap.
        let name = crate::heap::untagged(|| {
            NAMES
                .lock()
                .iter()
                .find(|&&(n, _)| n == id)
                .map(|(_, name)| name.to_string())
        });
        if let Some(name) = name {
            let node = ledger::node_named(&name);
            NODES[i].store(ptr::from_ref(node).cast_mut(), Release);
            return node;
        }
    }
    if let Some(node) = load(&FALLBACK) {
        return node;
    }
    let node = ledger::node(ledger::tags::SCRATCH_SYSTEMS);
    FALLBACK.store(ptr::from_ref(node).cast_mut(), Release);
    node
}

fn load(slot: &AtomicPtr<TagNode>) -> Option<&'static TagNode> {
    // SAFETY: only pointers made from `&'static TagNode` are stored (nodes are never
    // freed), and the `Acquire` load pairs with the `Release` store that published one.
    unsafe { slot.load(Acquire).as_ref() }
}
