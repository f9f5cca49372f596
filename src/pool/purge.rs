//! When a pool gives free pages back to the OS.
//!
//! Free ranges that may hold resident pages carry the `DIRTY` flag. The *release
//! pressure* is the bytes freed minus the bytes acquired since the last decommit pass (an
//! estimate of the dirty bytes). When it has stayed above the *allowance* for the purge
//! delay, one pass decommits dirty free ranges until what stays is within the allowance.
//! The delay is mimalloc's answer to free-then-reallocate churn (a level unloaded, the
//! next one loaded): decommitting on every release past the limit made W7 page-fault on
//! 0.7 of its acquisitions.
//!
//! The delay ends after [`DEFAULT_PURGE_DELAY`] or after [`PURGE_PASSES`] calls of
//! `maintain` (once a frame), whichever comes first.
//!
//! **The recall: a spike that recurs keeps its pages.** The allowance is the retain limit
//! (small: capacity / 64, at most 4 MiB), or, if more, what the pool's recent peak of use
//! needs beyond today's use: `mark - in_use`. The *mark* is the most the pool's use
//! reached lately. It holds for the recall window after use last came within an eighth of
//! it (default [`DEFAULT_RECALL`], or [`RECALL_PASSES`] calls of `maintain`, whichever
//! comes first), then halves once per purge delay: a one-off spike's pages go back a few
//! seconds after it, in halves. A peak that returns after use had fallen below half of
//! it is a *recurrence*: the window becomes twice the time (and passes) between the two,
//! at least the default and at most [`RECALL_STRETCH`] times it (a longer period sets the
//! default again), so a spike every 250 frames, or every 15 seconds, finds its pages
//! still resident. jemalloc's
//! `dirty_decay_ms` (10 s by default) is the model for the default window; learning the
//! period is ours: a game's spikes (an explosion, a streaming burst, an autosave) tend to
//! come back at their own rhythm, and one page fault costs about a microsecond, so a
//! 40 MiB spike faulted back in costs milliseconds of the frame it lands in.
//!
//! [`Purge`] is the policy alone: it counts and keeps time, and says when a pass is due
//! and how much it may leave dirty. The pass itself walks the pool's free lists
//! (`MemoryPool::decommit_dirty`).

use std::time::{Duration, Instant};

/// Default retain limit: capacity / 64, at most this.
const DEFAULT_RETAIN_MAX: usize = 4 << 20;
/// Default purge delay.
pub(crate) const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);
/// Calls of `maintain` (frames) after which the pressure has lasted long enough, whatever
/// the time.
pub(crate) const PURGE_PASSES: u32 = 30;
/// Default recall window: how long a peak's free pages stay resident after it.
pub(crate) const DEFAULT_RECALL: Duration = Duration::from_secs(10);
/// Calls of `maintain` after which the recall window has passed, whatever the time (10 s
/// at 60 frames a second).
pub(crate) const RECALL_PASSES: u64 = 600;
/// A learned recall window is at most this many times the set one.
pub(crate) const RECALL_STRETCH: u32 = 4;

/// Release pressure, the recall mark and the clocks that decide when free pages go back
/// to the OS.
pub(crate) struct Purge {
    /// Bytes freed minus bytes acquired since the last pass (saturating at 0), plus what
    /// the last pass left dirty.
    pressure: usize,
    pub(crate) retain_limit: usize,
    pub(crate) delay: Duration,
    /// When `pressure` last rose above the allowance (None while it is below).
    since: Option<Instant>,
    /// `maintain` calls since then.
    passes: u32,
    /// `maintain` calls ever: the frame clock of the recall.
    maintained: u64,
    /// The recall window as set (`Duration::ZERO`: no recall).
    pub(crate) recall: Duration,
    /// The most the pool's use reached lately (0: none remembered).
    mark: usize,
    /// When the mark halves next, by time and by `maintained`.
    expires: Instant,
    expires_pass: u64,
    /// When use last came near the mark, by time and by `maintained`.
    near: Instant,
    near_pass: u64,
    /// Use fell below half the mark since then: its return is a recurrence.
    ended: bool,
    /// The current window (the set one, or learned from a recurrence).
    window: Duration,
    window_passes: u64,
}

impl Purge {
    /// The default policy for a pool of `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Purge {
        let now = Instant::now();
        Purge {
            pressure: 0,
            retain_limit: (capacity / 64).min(DEFAULT_RETAIN_MAX),
            delay: DEFAULT_PURGE_DELAY,
            since: None,
            passes: 0,
            maintained: 0,
            recall: DEFAULT_RECALL,
            mark: 0,
            expires: now,
            expires_pass: 0,
            near: now,
            near_pass: 0,
            ended: false,
            window: DEFAULT_RECALL,
            window_passes: RECALL_PASSES,
        }
    }

    /// Sets the recall window (`Duration::ZERO` turns the recall off and forgets the mark).
    pub(crate) fn set_recall(&mut self, window: Duration) {
        self.recall = window;
        self.window = window;
        self.window_passes = if window.is_zero() { 0 } else { RECALL_PASSES };
        if window.is_zero() {
            self.mark = 0;
        }
    }

    /// A block of `size` bytes was handed out; the pool's use is now `in_use`.
    pub(crate) fn acquired(&mut self, size: usize, in_use: usize) {
        self.pressure = self.pressure.saturating_sub(size);
        if !self.recall.is_zero() && in_use >= self.mark - self.mark / 8 {
            let now = Instant::now();
            if self.ended {
                // The peak came back: remember its period, twice over. A period longer
                // than the longest window could not be served: back to the default.
                let (time, passes) = (
                    now.duration_since(self.near),
                    self.maintained - self.near_pass,
                );
                let most = self.recall.saturating_mul(RECALL_STRETCH);
                let most_passes = RECALL_PASSES * u64::from(RECALL_STRETCH);
                if time > most || passes > most_passes {
                    (self.window, self.window_passes) = (self.recall, RECALL_PASSES);
                } else {
                    self.window = time.saturating_mul(2).clamp(self.recall, most);
                    self.window_passes = passes.saturating_mul(2).clamp(RECALL_PASSES, most_passes);
                }
                self.ended = false;
            }
            self.mark = self.mark.max(in_use);
            self.near = now;
            self.near_pass = self.maintained;
            self.expires = now + self.window;
            self.expires_pass = self.maintained.saturating_add(self.window_passes);
        }
        if self.pressure <= self.allowance(in_use) {
            self.since = None;
            self.passes = 0;
        }
    }

    /// A block of `size` bytes was freed; the pool's use is now `in_use`.
    pub(crate) fn released(&mut self, size: usize, in_use: usize) {
        self.pressure = self.pressure.saturating_add(size);
        if in_use < self.mark / 2 {
            self.ended = true;
        }
    }

    /// Dirty bytes a pass may leave with the pool's use at `in_use`: the retain limit, or
    /// what the recall mark needs beyond the use, whichever is more.
    pub(crate) fn allowance(&self, in_use: usize) -> usize {
        self.retain_limit.max(self.mark.saturating_sub(in_use))
    }

    /// Whether a pass is due now (at a release, or with `maintained` at a `maintain`
    /// call, which counts a pass), with the pool's use at `in_use`. Halves the mark when
    /// its window has passed. Starts the clock when the pressure first crosses the
    /// allowance, and stops it when the pressure is back below.
    pub(crate) fn due(&mut self, maintained: bool, in_use: usize) -> bool {
        if maintained {
            self.maintained += 1;
        }
        // The clock is read only where a decision needs it (this runs at every release).
        let mut clock = None;
        let mut now = || *clock.get_or_insert_with(Instant::now);
        if self.mark > 0 && (self.maintained >= self.expires_pass || now() >= self.expires) {
            // No return within the window: half of it is forgotten per purge delay.
            self.mark /= 2;
            self.expires = now() + self.delay;
            self.expires_pass = self.maintained + u64::from(PURGE_PASSES);
        }
        if self.pressure <= self.allowance(in_use) {
            self.since = None;
            self.passes = 0;
            return false;
        }
        let now = now();
        match self.since {
            Some(since) => {
                if maintained {
                    self.passes = self.passes.saturating_add(1);
                }
                now.duration_since(since) >= self.delay || self.passes >= PURGE_PASSES
            }
            None if self.delay.is_zero() => true,
            None => {
                self.since = Some(now);
                self.passes = 0;
                false
            }
        }
    }

    /// A pass ran and left `kept` bytes dirty: the pressure starts from there.
    pub(crate) fn passed(&mut self, kept: usize) {
        self.pressure = kept;
        self.since = None;
        self.passes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy with no recall: the retain limit alone.
    fn no_recall(capacity: usize) -> Purge {
        let mut p = Purge::new(capacity);
        p.set_recall(Duration::ZERO);
        p
    }

    #[test]
    fn pressure_must_last_for_the_delay() {
        let mut p = no_recall(6400);
        assert_eq!(p.retain_limit, 100);
        p.delay = Duration::from_millis(20);
        p.released(150, 0);
        assert!(!p.due(false, 0), "the clock starts at the first crossing");
        assert!(!p.due(false, 0), "not yet");
        std::thread::sleep(Duration::from_millis(25));
        assert!(p.due(false, 0));
        p.passed(0);
        assert!(!p.due(false, 0));
    }

    #[test]
    fn acquiring_below_the_limit_stops_the_clock() {
        let mut p = no_recall(6400);
        p.delay = Duration::from_millis(20);
        p.released(150, 0);
        assert!(!p.due(false, 0));
        p.acquired(100, 100);
        std::thread::sleep(Duration::from_millis(25));
        p.released(60, 40);
        assert!(
            !p.due(false, 40),
            "the clock restarted when the pressure fell below the limit"
        );
    }

    #[test]
    fn zero_delay_is_due_at_once() {
        let mut p = no_recall(6400);
        p.delay = Duration::ZERO;
        p.released(101, 0);
        assert!(p.due(false, 0));
        p.acquired(usize::MAX, usize::MAX);
        assert!(!p.due(false, usize::MAX), "pressure saturates at zero");
    }

    #[test]
    fn enough_maintenance_passes_end_the_delay_early() {
        let mut p = no_recall(6400);
        p.delay = Duration::from_secs(3600);
        p.released(150, 0);
        assert!(!p.due(true, 0), "the clock starts at the first crossing");
        for _ in 1..PURGE_PASSES {
            assert!(!p.due(true, 0));
        }
        assert!(!p.due(false, 0), "a release is not a pass");
        assert!(p.due(true, 0), "{PURGE_PASSES} passes are long enough");
    }

    /// A peak of `peak` bytes taken and freed; returns the pressure's allowance after.
    fn spike(p: &mut Purge, base: usize, peak: usize) -> usize {
        p.acquired(peak, base + peak);
        p.released(peak, base);
        p.allowance(base)
    }

    #[test]
    fn a_peak_is_recalled_for_its_window_then_halves_per_delay() {
        let mut p = Purge::new(6400);
        p.delay = Duration::from_secs(3600);
        p.set_recall(Duration::from_secs(3600)); // passes decide here, not time
        assert_eq!(
            spike(&mut p, 0, 10_000),
            10_000,
            "the peak's pages may stay"
        );
        for _ in 0..RECALL_PASSES - 1 {
            assert!(!p.due(true, 0), "within the recall window");
        }
        assert_eq!(p.allowance(0), 10_000);
        p.due(true, 0);
        assert_eq!(
            p.allowance(0),
            5_000,
            "the window passed: half is forgotten"
        );
        for _ in 0..PURGE_PASSES {
            p.due(true, 0);
        }
        assert_eq!(p.allowance(0), 2_500, "and half again a purge delay later");
        for _ in 0..20 * PURGE_PASSES {
            p.due(true, 0);
        }
        assert_eq!(
            p.allowance(0),
            p.retain_limit,
            "a one-off peak is forgotten"
        );
    }

    #[test]
    fn a_recurring_peak_stretches_the_window_to_twice_its_period() {
        let mut p = Purge::new(6400);
        p.delay = Duration::from_secs(3600);
        p.set_recall(Duration::from_secs(3600));
        let period = RECALL_PASSES - 100; // recurs just inside the default window
        spike(&mut p, 0, 10_000);
        for _ in 0..period {
            p.due(true, 0);
        }
        spike(&mut p, 0, 10_000);
        assert_eq!(p.window_passes, 2 * period, "learned: twice the period");
        // Now a gap longer than the default window still finds the peak remembered.
        for _ in 0..RECALL_PASSES + 100 {
            p.due(true, 0);
        }
        assert_eq!(p.allowance(0), 10_000);
        // A peak that never fell below half of the mark is no recurrence.
        let mut q = Purge::new(6400);
        q.set_recall(Duration::from_secs(3600));
        q.acquired(10_000, 10_000);
        q.released(2_000, 8_000);
        for _ in 0..period {
            q.due(true, 8_000);
        }
        q.acquired(2_000, 10_000);
        assert_eq!(q.window_passes, RECALL_PASSES);
    }

    #[test]
    fn a_learned_window_is_bounded() {
        let mut p = Purge::new(6400);
        p.set_recall(Duration::from_secs(3600));
        let most = RECALL_PASSES * u64::from(RECALL_STRETCH);
        spike(&mut p, 0, 10_000);
        for _ in 0..most - 10 {
            p.due(true, 0);
        }
        spike(&mut p, 0, 10_000);
        assert_eq!(
            p.window_passes, most,
            "at most {RECALL_STRETCH} times the default"
        );
        for _ in 0..most + 10 {
            p.due(true, 0);
        }
        spike(&mut p, 0, 10_000);
        assert_eq!(
            p.window_passes, RECALL_PASSES,
            "too long a period: the default"
        );
    }

    #[test]
    fn the_recall_off_forgets_the_mark() {
        let mut p = Purge::new(6400);
        assert_eq!(spike(&mut p, 0, 10_000), 10_000);
        p.set_recall(Duration::ZERO);
        assert_eq!(p.allowance(0), p.retain_limit);
        assert_eq!(spike(&mut p, 0, 10_000), p.retain_limit);
    }
}
