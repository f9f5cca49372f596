//! The Tracy receiver (feature `tracy`): each tag is a named memory pool in Tracy's memory
//! view, each block taken or given back one allocation or free event in it, and each
//! frame two plots per tag (`<tag> held`, `<tag> used`, in bytes).
//!
//! `tracy-client` has no safe wrapper for named memory pools, so the two C calls live
//! here and nowhere else. A frame in which no block moves sends no memory event, only the
//! plots.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;
use tracy_client::{Client, PlotConfiguration, PlotFormat, PlotName};

use super::events::LedgerEvent;

static ON: AtomicBool = AtomicBool::new(false);

/// Per tag: the pool name (a C string that lives for ever, as Tracy keeps the pointer) and
/// the two plot names.
struct Names {
    pool: &'static CString,
    held: PlotName,
    used: PlotName,
    heap: PlotName,
}

static NAMES: Mutex<Option<HashMap<&'static str, Names>>> = Mutex::new(None);

/// Whether the receiver is on.
pub(crate) fn is_on() -> bool {
    ON.load(Relaxed)
}

/// Starts the Tracy client (if no one has) and sends the ledger's events to it from now
/// on; with `frame_marks`, [`end_frame`](super::end_frame) also marks a frame, for apps
/// that have no other frame marker (headless ones). Without a Tracy server connected the
/// client keeps the events queued until one connects. O(1).
///
/// ```no_run
/// nebula_memory::ledger::enable_tracy(true);
/// ```
pub fn enable_tracy(frame_marks: bool) {
    let _client = Client::start();
    super::events::set_frame_marks(frame_marks);
    ON.store(true, Relaxed);
    super::events::receiver_changed();
}

/// Runs `f` with the names of `tag`, made on first use.
fn with_names<R>(tag: &'static str, f: impl FnOnce(&Names) -> R) -> R {
    let mut guard = NAMES.lock();
    let map = guard.get_or_insert_with(HashMap::new);
    let names = map.entry(tag).or_insert_with(|| {
        // A tag is a path of non-empty segments without NUL (checked when it was set), so
        // this cannot fail; fall back to a placeholder rather than panic on the block path.
        let pool = CString::new(tag).unwrap_or_else(|_| c"nebula_memory tag".to_owned());
        let held = PlotName::new_leak(format!("{tag} held"));
        let used = PlotName::new_leak(format!("{tag} used"));
        let heap = PlotName::new_leak(format!("{tag} heap"));
        if let Some(client) = Client::running() {
            let memory = PlotConfiguration::default().format(PlotFormat::Memory);
            client.plot_config(held, memory.clone());
            client.plot_config(used, memory.clone());
            client.plot_config(heap, memory);
        }
        Names {
            pool: Box::leak(Box::new(pool)),
            held,
            used,
            heap,
        }
    });
    f(names)
}

/// Hands one event to Tracy.
pub(crate) fn receive(event: &LedgerEvent) {
    if !is_on() {
        return;
    }
    let Some(client) = Client::running() else {
        return;
    };
    match *event {
        LedgerEvent::BlockTaken {
            tag, addr, bytes, ..
        } => with_names(tag, |n| {
            // SAFETY: `n.pool` is a NUL-terminated string that is never freed (Tracy keeps
            // the pointer as the pool's name); the address is only recorded, never read.
            unsafe {
                tracy_client::sys::___tracy_emit_memory_alloc_named(
                    addr as *const c_void,
                    bytes,
                    n.pool.as_ptr(),
                );
            }
        }),
        LedgerEvent::BlockReturned { tag, addr, .. } => with_names(tag, |n| {
            // SAFETY: as above; the address matches the allocation event of the same block.
            unsafe {
                tracy_client::sys::___tracy_emit_memory_free_named(
                    addr as *const c_void,
                    n.pool.as_ptr(),
                );
            }
        }),
        LedgerEvent::Plot { tag, held, used } => with_names(tag, |n| {
            client.plot(n.held, held as f64);
            client.plot(n.used, used as f64);
        }),
        LedgerEvent::HeapPlot { tag, live } => with_names(tag, |n| {
            client.plot(n.heap, live as f64);
        }),
        LedgerEvent::FrameMark => client.frame_mark(),
    }
}
