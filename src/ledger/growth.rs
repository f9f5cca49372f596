//! Leaks and growth: a tag whose live heap keeps rising, window after window of frames,
//! without ever coming back.
//!
//! At each frame end ([`end_frame`](super::end_frame), once a frame with the Bevy plugin)
//! the ledger sees each tag's own live heap (not its children's: a parent does not rise for
//! its child, whose line is the one to read) and keeps the lowest of the current *window* of
//! frames ([`set_growth_window`], default [`DEFAULT_GROWTH_WINDOW`]). When a window ends
//! with its lowest above the lowest of the window before, the tag *rose* in it. After
//! [`RISING_WINDOWS`] rises in a row the tag is reported, once (a WARN), and its
//! `heap_rising_windows` figure says for how many windows it has been rising. The lowest
//! is what a frame comes back to: a system that keeps 1 KiB a frame rises in every window;
//! one that allocates and frees every frame, or whose use goes up at a spike and down
//! after, does not; one that grows once and then stays rises in one window only.
//!
//! Nothing here allocates or runs user code: it is called at the frame end, under the
//! ledger's registry lock; the WARN waits for the next telling of budget crossings.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

/// Frames in a growth window by default: two seconds at 60 frames a second.
pub const DEFAULT_GROWTH_WINDOW: u32 = 120;
/// Windows in a row a tag's lowest live heap must rise in to be reported.
pub const RISING_WINDOWS: u32 = 3;

static WINDOW: AtomicU32 = AtomicU32::new(DEFAULT_GROWTH_WINDOW);

/// Sets the frames in a growth window (default [`DEFAULT_GROWTH_WINDOW`]); `0` turns the
/// growth watch off. Takes effect at each tag's next window. O(1).
///
/// ```
/// use nebula_memory::ledger;
/// ledger::set_growth_window(600); // ten seconds at 60 frames a second
/// assert_eq!(ledger::growth_window(), 600);
/// ledger::set_growth_window(ledger::DEFAULT_GROWTH_WINDOW);
/// ```
pub fn set_growth_window(frames: u32) {
    WINDOW.store(frames, Relaxed);
}

/// The frames in a growth window (see [`set_growth_window`]). O(1).
///
/// ```
/// assert!(nebula_memory::ledger::growth_window() > 0);
/// ```
pub fn growth_window() -> u32 {
    WINDOW.load(Relaxed)
}

/// No lowest yet.
const NONE: usize = usize::MAX;

/// One tag's growth watch. Written at frame ends only (one thread at a time, under the
/// registry's lock); atomics so that snapshots may read it.
pub(crate) struct Growth {
    /// Frames of the current window so far, and its lowest live heap.
    frames: AtomicU32,
    low: AtomicUsize,
    /// The lowest of the window before (`NONE` before the first ended).
    last_low: AtomicUsize,
    /// The lowest when the tag started rising (for the report).
    rise_from: AtomicUsize,
    /// Windows in a row whose lowest rose.
    rising: AtomicU32,
    /// Reported already (once per tag); a report waits to be told.
    told: AtomicBool,
    pending: AtomicBool,
}

impl Growth {
    pub(crate) const fn new() -> Growth {
        Growth {
            frames: AtomicU32::new(0),
            low: AtomicUsize::new(NONE),
            last_low: AtomicUsize::new(NONE),
            rise_from: AtomicUsize::new(0),
            rising: AtomicU32::new(0),
            told: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }

    /// A frame ends with `live` heap bytes under the tag. Returns whether a report is now
    /// pending (the tag rose in [`RISING_WINDOWS`] windows in a row, for the first time).
    pub(crate) fn frame_end(&self, live: usize) -> bool {
        let window = WINDOW.load(Relaxed);
        if window == 0 {
            self.rising.store(0, Relaxed);
            return false;
        }
        let low = self.low.load(Relaxed).min(live);
        let frames = self.frames.load(Relaxed) + 1;
        if frames < window {
            self.frames.store(frames, Relaxed);
            self.low.store(low, Relaxed);
            return false;
        }
        self.frames.store(0, Relaxed);
        self.low.store(NONE, Relaxed);
        let last = self.last_low.swap(low, Relaxed);
        let rising = if last != NONE && low > last {
            if self.rising.load(Relaxed) == 0 {
                self.rise_from.store(last, Relaxed);
            }
            self.rising.load(Relaxed) + 1
        } else {
            0
        };
        self.rising.store(rising, Relaxed);
        if rising >= RISING_WINDOWS && !self.told.swap(true, Relaxed) {
            self.pending.store(true, Relaxed);
            return true;
        }
        false
    }

    /// Windows in a row the tag's lowest live heap rose in.
    pub(crate) fn rising(&self) -> u32 {
        self.rising.load(Relaxed)
    }

    /// A report waiting to be told, taken: the windows, their frames, the lowest live heap
    /// before the rise and the last window's.
    pub(crate) fn take_pending(&self) -> Option<(u32, u32, usize, usize)> {
        self.pending.swap(false, Relaxed).then(|| {
            (
                self.rising.load(Relaxed),
                WINDOW.load(Relaxed),
                self.rise_from.load(Relaxed),
                self.last_low.load(Relaxed),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `frames` frame ends (windows of the default size: other tests run beside this
    /// one, so the process-wide setting is left alone) with `live(frame)`; returns the
    /// rising count after each window and how many reports came.
    fn run(frames: u32, live: impl Fn(u32) -> usize) -> (Vec<u32>, u32) {
        let g = Growth::new();
        let (mut after, mut reports) = (Vec::new(), 0);
        for f in 0..frames {
            if g.frame_end(live(f)) {
                reports += 1;
            }
            if (f + 1) % DEFAULT_GROWTH_WINDOW == 0 {
                after.push(g.rising());
            }
        }
        (after, reports)
    }

    #[test]
    fn a_tag_that_keeps_a_kibibyte_a_frame_is_reported_once() {
        let (after, reports) = run(8 * DEFAULT_GROWTH_WINDOW, |f| 1024 * f as usize);
        assert_eq!(after, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(reports, 1, "reported once, not every window");
    }

    #[test]
    fn steady_spiky_and_once_grown_tags_are_not_reported() {
        let w = DEFAULT_GROWTH_WINDOW;
        // Allocates and frees each frame: the same live heap at every frame end.
        let (_, steady) = run(8 * w, |_| 4096);
        // A spike every 50 frames that goes away again.
        let (_, spiky) = run(8 * w, |f| if f % 50 == 0 { 1 << 20 } else { 4096 });
        // Loads once (grows over a window and a half), then stays.
        let (after, once) = run(8 * w, |f| 1024 * (f.min(w + w / 2)) as usize);
        assert_eq!((steady, spiky, once), (0, 0, 0));
        assert_eq!(*after.last().unwrap(), 0);
    }
}
