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
//! The delay ends after [`DEFAULT_PURGE_DELAY`] or after as many calls of `maintain`
//! (once a frame) as that is frames at 60 a second (30), whichever comes first.
//!
//! **The recall: a spike that recurs keeps its pages.** The allowance is the retain limit
//! (small: capacity / 64, at most 4 MiB), or, once a peak has *recurred*, what that peak
//! needs beyond today's use: `mark - in_use`. The *mark* is the most the pool's use
//! reached lately. A peak that returns (to within an eighth of the mark) after use had
//! fallen below half of it is a recurrence: from then on the mark's pages stay resident
//! for the recall window after use last came near it, a window that becomes twice the
//! time (and passes) between the two returns, at least the set window and at most
//! [`RECALL_STRETCH`] times it. Past the window the mark halves once per purge delay. A
//! first, one-off peak keeps nothing: its pages go back after the purge delay, as with no
//! recall at all, but its mark is remembered for the window so that its return is seen.
//! A period longer than the longest window could not be served: such a return counts as a
//! first peak again. jemalloc's `dirty_decay_ms` (10 s by default) is the model for the
//! default window; learning the period is ours: a game's spikes (an explosion, a streaming
//! burst, an autosave) tend to come back at their own rhythm, and one page fault costs
//! about a microsecond, so a 40 MiB spike faulted back in costs milliseconds of the frame
//! it lands in. The price of waiting for a recurrence: a spike's second occurrence still
//! faults its pages in; the third finds them.
//!
//! **Two clocks, and "forever".** Every duration here has a frame count beside it (calls
//! of `maintain`, once a frame): the duration at 60 frames a second, so that a delay or
//! window ends after its time or its frames, whichever come first, and a frame-driven
//! program (a test, a paused clock) behaves the same as a timed one. Deadlines are
//! computed with checked arithmetic: a duration too long to add to the clock
//! (`Duration::MAX`) is a deadline that never comes, and its frame count saturates the
//! same way. No method here can panic: they run inside the pool's locked sections, after
//! a block has been carved or merged.
//!
//! [`Purge`] is the policy alone: it counts and keeps time, and says when a pass is due
//! and how much it may leave dirty. The pass itself walks the pool's free lists
//! (`MemoryPool::decommit_dirty`).

use std::time::{Duration, Instant};

/// Default retain limit: capacity / 64, at most this.
const DEFAULT_RETAIN_MAX: usize = 4 << 20;
/// Default purge delay.
pub(crate) const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);
/// Default recall window: how long a recurring peak's free pages stay resident after it.
pub(crate) const DEFAULT_RECALL: Duration = Duration::from_secs(10);
/// A learned recall window is at most this many times the set one.
pub(crate) const RECALL_STRETCH: u32 = 4;
/// The frame rate at which a duration's frame count equals it.
const FRAMES_PER_SECOND: u64 = 60;

/// Calls of `maintain` (frames) that stand for `d`: `d` at 60 frames a second, rounded
/// up, saturating (`Duration::MAX` is `u64::MAX` frames: never).
pub(crate) fn frames_of(d: Duration) -> u64 {
    let frames = d.as_nanos().saturating_mul(u128::from(FRAMES_PER_SECOND));
    u64::try_from(frames.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

/// The instant `d` after `now`, or `None` (never) if the clock cannot represent it.
fn after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

/// Whether `deadline` (`None`: never) has come at `now`.
fn reached(now: Instant, deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| now >= d)
}

/// Release pressure, the recall mark and the clocks that decide when free pages go back
/// to the OS.
pub(crate) struct Purge {
    /// Bytes freed minus bytes acquired since the last pass (saturating at 0), plus what
    /// the last pass left dirty.
    pressure: usize,
    pub(crate) retain_limit: usize,
    /// The purge delay, and the same in frames.
    delay: Duration,
    delay_passes: u64,
    /// When `pressure` last rose above the allowance (None while it is below).
    since: Option<Instant>,
    /// `maintain` calls since then.
    passes: u64,
    /// `maintain` calls ever: the frame clock of the recall.
    maintained: u64,
    /// The recall window as set (`Duration::ZERO`: no recall), and the same in frames.
    recall: Duration,
    recall_passes: u64,
    /// The most the pool's use reached lately (0: none remembered).
    mark: usize,
    /// The mark's peak has recurred: its pages may stay (the allowance counts it).
    recurring: bool,
    /// When the mark halves next, by time (`None`: never) and by `maintained`.
    expires: Option<Instant>,
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
        let mut purge = Purge {
            pressure: 0,
            retain_limit: (capacity / 64).min(DEFAULT_RETAIN_MAX),
            delay: Duration::ZERO,
            delay_passes: 0,
            since: None,
            passes: 0,
            maintained: 0,
            recall: Duration::ZERO,
            recall_passes: 0,
            mark: 0,
            recurring: false,
            expires: Some(now),
            expires_pass: 0,
            near: now,
            near_pass: 0,
            ended: false,
            window: Duration::ZERO,
            window_passes: 0,
        };
        purge.set_delay(DEFAULT_PURGE_DELAY);
        purge.set_recall(DEFAULT_RECALL);
        purge
    }

    /// Sets the purge delay (`Duration::MAX`: pressure never lasts long enough).
    pub(crate) fn set_delay(&mut self, delay: Duration) {
        self.delay = delay;
        self.delay_passes = frames_of(delay);
    }

    /// Sets the recall window (`Duration::ZERO` turns the recall off and forgets the mark;
    /// `Duration::MAX` keeps a recurring peak's pages for good).
    pub(crate) fn set_recall(&mut self, window: Duration) {
        self.recall = window;
        self.recall_passes = frames_of(window);
        self.window = window;
        self.window_passes = self.recall_passes;
        if window.is_zero() {
            self.mark = 0;
            self.recurring = false;
        }
    }

    /// A block of `size` bytes was handed out; the pool's use is now `in_use`.
    pub(crate) fn acquired(&mut self, size: usize, in_use: usize) {
        self.pressure = self.pressure.saturating_sub(size);
        if !self.recall.is_zero() && in_use >= self.mark - self.mark / 8 {
            let now = Instant::now();
            if self.ended {
                // The peak came back: remember its period, twice over. A period longer
                // than the longest window could not be served: a first peak again.
                let time = now.saturating_duration_since(self.near);
                let passes = self.maintained.saturating_sub(self.near_pass);
                let most = self.recall.saturating_mul(RECALL_STRETCH);
                let most_passes = self.recall_passes.saturating_mul(u64::from(RECALL_STRETCH));
                if time > most || passes > most_passes {
                    (self.window, self.window_passes) = (self.recall, self.recall_passes);
                    self.recurring = false;
                } else {
                    self.window = time.saturating_mul(2).clamp(self.recall, most);
                    self.window_passes = passes
                        .saturating_mul(2)
                        .clamp(self.recall_passes, most_passes);
                    self.recurring = true;
                }
                self.ended = false;
            }
            self.mark = self.mark.max(in_use);
            self.near = now;
            self.near_pass = self.maintained;
            self.expires = after(now, self.window);
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
    /// what a recurring peak needs beyond the use, whichever is more.
    pub(crate) fn allowance(&self, in_use: usize) -> usize {
        let recalled = if self.recurring { self.mark } else { 0 };
        self.retain_limit.max(recalled.saturating_sub(in_use))
    }

    /// Whether a pass is due now (at a release, or with `maintained` at a `maintain`
    /// call, which counts a pass), with the pool's use at `in_use`. Halves the mark when
    /// its window has passed. Starts the clock when the pressure first crosses the
    /// allowance, and stops it when the pressure is back below.
    pub(crate) fn due(&mut self, maintained: bool, in_use: usize) -> bool {
        if maintained {
            self.maintained = self.maintained.saturating_add(1);
        }
        // The clock is read only where a decision needs it (this runs at every release).
        let mut clock = None;
        let mut now = || *clock.get_or_insert_with(Instant::now);
        if self.mark > 0 && (self.maintained >= self.expires_pass || reached(now(), self.expires)) {
            // No return within the window: half of it is forgotten per purge delay.
            self.mark /= 2;
            if self.mark == 0 {
                self.recurring = false;
            }
            self.expires = after(now(), self.delay);
            self.expires_pass = self.maintained.saturating_add(self.delay_passes);
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
                now.saturating_duration_since(since) >= self.delay
                    || self.passes >= self.delay_passes
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

    /// The default window and delay in frames.
    const RECALL_PASSES: u64 = 600;
    const PURGE_PASSES: u64 = 30;

    /// A policy with no recall: the retain limit alone.
    fn no_recall(capacity: usize) -> Purge {
        let mut p = Purge::new(capacity);
        p.set_recall(Duration::ZERO);
        p
    }

    /// A policy whose clocks are frames only: the default frame counts, times that never
    /// come.
    fn by_frames(capacity: usize) -> Purge {
        let mut p = Purge::new(capacity);
        p.set_delay(Duration::MAX);
        p.delay_passes = PURGE_PASSES;
        p.set_recall(Duration::MAX);
        (p.recall_passes, p.window_passes) = (RECALL_PASSES, RECALL_PASSES);
        p
    }

    #[test]
    fn frames_stand_for_a_duration_at_60_a_second() {
        assert_eq!(frames_of(DEFAULT_RECALL), RECALL_PASSES);
        assert_eq!(frames_of(DEFAULT_PURGE_DELAY), PURGE_PASSES);
        assert_eq!(frames_of(Duration::ZERO), 0);
        assert_eq!(frames_of(Duration::from_nanos(1)), 1, "rounded up");
        assert_eq!(frames_of(Duration::MAX), u64::MAX);
    }

    #[test]
    fn pressure_must_last_for_the_delay() {
        let mut p = no_recall(6400);
        assert_eq!(p.retain_limit, 100);
        p.set_delay(Duration::from_millis(20));
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
        p.set_delay(Duration::from_millis(20));
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
        p.set_delay(Duration::ZERO);
        p.released(101, 0);
        assert!(p.due(false, 0));
        p.acquired(usize::MAX, usize::MAX);
        assert!(!p.due(false, usize::MAX), "pressure saturates at zero");
    }

    #[test]
    fn enough_maintenance_passes_end_the_delay_early() {
        let mut p = no_recall(6400);
        p.set_delay(Duration::from_secs(3600));
        p.delay_passes = PURGE_PASSES;
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
    fn a_first_peak_keeps_nothing_its_return_keeps_its_pages() {
        let mut p = by_frames(6400);
        assert_eq!(
            spike(&mut p, 0, 10_000),
            p.retain_limit,
            "a one-off peak's pages go back after the purge delay"
        );
        for _ in 0..100 {
            p.due(true, 0);
        }
        assert_eq!(spike(&mut p, 0, 10_000), 10_000, "it came back: they stay");
    }

    #[test]
    fn a_recurring_peak_is_recalled_for_its_window_then_halves_per_delay() {
        let mut p = by_frames(6400);
        spike(&mut p, 0, 10_000);
        spike(&mut p, 0, 10_000);
        assert_eq!(p.window_passes, RECALL_PASSES, "at least the set window");
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
        assert_eq!(p.allowance(0), p.retain_limit, "forgotten");
        assert!(!p.recurring);
    }

    #[test]
    fn a_recurring_peak_stretches_the_window_to_twice_its_period() {
        let mut p = by_frames(6400);
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
        let mut q = by_frames(6400);
        q.acquired(10_000, 10_000);
        q.released(2_000, 8_000);
        for _ in 0..period {
            q.due(true, 8_000);
        }
        q.acquired(2_000, 10_000);
        assert_eq!(q.window_passes, RECALL_PASSES);
        assert!(!q.recurring);
    }

    #[test]
    fn a_learned_window_is_bounded() {
        let mut p = by_frames(6400);
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
        assert_eq!(
            spike(&mut p, 0, 10_000),
            p.retain_limit,
            "too long a period: a first peak again"
        );
        assert_eq!(p.window_passes, RECALL_PASSES, "with the default window");
    }

    #[test]
    fn the_recall_off_forgets_the_mark() {
        let mut p = by_frames(6400);
        spike(&mut p, 0, 10_000);
        assert_eq!(spike(&mut p, 0, 10_000), 10_000);
        p.set_recall(Duration::ZERO);
        assert_eq!(p.allowance(0), p.retain_limit);
        spike(&mut p, 0, 10_000);
        assert_eq!(spike(&mut p, 0, 10_000), p.retain_limit);
    }

    /// "Forever" and the clock's end: no method panics, and a recurring peak's pages stay
    /// for good. (Before: `Instant + Duration::MAX` panicked inside the pool's lock.)
    #[test]
    fn durations_too_long_for_the_clock_mean_never() {
        let mut p = Purge::new(6400);
        p.set_recall(Duration::MAX);
        p.set_delay(Duration::MAX);
        spike(&mut p, 0, 10_000);
        assert_eq!(spike(&mut p, 0, 10_000), 10_000);
        for _ in 0..10_000 {
            assert!(!p.due(true, 0));
        }
        assert_eq!(p.allowance(0), 10_000, "kept for good");
        p.released(1_000_000, 0);
        for _ in 0..10_000 {
            assert!(!p.due(true, 0), "a delay of Duration::MAX never ends");
        }
        // A finite window and delay again: the policy works as before.
        p.set_recall(Duration::from_secs(1));
        p.set_delay(Duration::ZERO);
        p.passed(0);
        p.maintained = u64::MAX - 1;
        spike(&mut p, 0, 10_000);
        p.due(true, 0);
        p.due(true, 0); // the frame clock saturates
        assert_eq!(p.maintained, u64::MAX);
    }
}
