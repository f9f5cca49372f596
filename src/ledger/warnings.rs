//! Telling budget crossings and rising tags: the `tracing` WARNs the ledger holds back
//! until no operation of the crate is half done (rule 1 of ARCHITECTURE.md). A tag's
//! crossing is judged on its arena bytes plus its heap's peak within the frame (see
//! `TagNode::see_heap`), so a spike that comes and goes inside one frame is told too.

use std::sync::atomic::Ordering::Relaxed;

use super::node::{ANY_WARN_PENDING, all_nodes};

/// Whether a crossing of some warn budget waits to be reported. O(1).
#[inline]
pub(crate) fn warnings_pending() -> bool {
    ANY_WARN_PENDING.load(Relaxed)
}

/// Emits one `tracing` WARN for each tag whose warn budget was crossed since the last call.
/// Runs user code (subscribers): call it only where no operation of the crate is half
/// done, with no lock of the crate held. O(1) when nothing is
/// pending, O(tags) otherwise.
pub(crate) fn emit_pending_warnings() {
    if !ANY_WARN_PENDING.swap(false, Relaxed) {
        return;
    }
    // A subscriber that panics leaves the tags after its own untold: raise the flag again
    // on the way out, so the next call tells them.
    struct ToldAll(bool);
    impl Drop for ToldAll {
        fn drop(&mut self) {
            if !self.0 {
                ANY_WARN_PENDING.store(true, Relaxed);
            }
        }
    }
    let mut told = ToldAll(false);
    for n in all_nodes() {
        let heap = n.heap_seen.load(Relaxed);
        let heap_peak = n.heap_frame_seen.load(Relaxed);
        let reached = n.total.load(Relaxed).saturating_add(heap_peak);
        let tag = n.path;
        if n.warn_pending.swap(false, Relaxed) {
            let budget = n.warn.load(Relaxed);
            tracing::warn!(
                tag,
                reached,
                heap_peak,
                heap,
                budget,
                "memory tag '{tag}' reached {reached} bytes this frame ({heap_peak} of them \
                 heap at the frame's peak, {heap} heap live now), over its warn budget of \
                 {budget} bytes"
            );
        }
        if let Some((windows, frames, from, to)) = n.growth.take_pending() {
            tracing::warn!(
                tag,
                heap,
                windows,
                frames,
                "memory tag '{tag}': its live heap rose in each of the last {windows} windows \
                 of {frames} frames without coming back (lowest {from} bytes, then {to}): a \
                 leak, or a cache with no bound?"
            );
        }
        if n.limit_pending.swap(false, Relaxed) {
            let budget = n.limit.load(Relaxed);
            tracing::warn!(
                tag,
                reached,
                heap_peak,
                heap,
                budget,
                "memory tag '{tag}' reached {reached} bytes this frame ({heap_peak} of them \
                 heap at the frame's peak, {heap} heap live now), over its hard limit of \
                 {budget} bytes: heap allocations are never refused (a global \
                 allocator that refuses aborts the program); its arenas' blocks are, until \
                 it is back under the limit"
            );
        }
    }
    told.0 = true;
}
