//! When a pool gives free pages back to the OS.
//!
//! Free ranges that may hold resident pages carry the `DIRTY` flag. The *release
//! pressure* is the bytes freed minus the bytes acquired since the last decommit pass. When
//! it has stayed above the retain limit for the purge delay, one pass decommits every dirty
//! free range. The delay is mimalloc's answer to free-then-reallocate churn (a level
//! unloaded, the next one loaded): decommitting on every release past the limit made W7
//! page-fault on 0.7 of its acquisitions.
//!
//! The delay ends after [`DEFAULT_PURGE_DELAY`] or after [`PURGE_PASSES`] calls of
//! `maintain` (once a frame), whichever comes first: a spike's memory goes back within
//! about 30 frames however fast the frames are. The retain limit is small (capacity / 64,
//! at most 4 MiB): what a console or a phone budgets is the resident memory, and a steady
//! frame needs no free page resident (its arenas keep their blocks).
//!
//! [`Purge`] is the policy alone: it counts and keeps time, and says when a pass is due.
//! The pass itself walks the pool's free lists (`MemoryPool::decommit_dirty`).

use std::time::{Duration, Instant};

/// Default retain limit: capacity / 64, at most this.
const DEFAULT_RETAIN_MAX: usize = 4 << 20;
/// Default purge delay.
pub(crate) const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);
/// Calls of `maintain` (frames) after which the pressure has lasted long enough, whatever
/// the time.
pub(crate) const PURGE_PASSES: u32 = 30;

/// Release pressure and the clock that decides when free pages go back to the OS.
pub(crate) struct Purge {
    /// Bytes freed minus bytes acquired since the last pass (saturating at 0).
    pressure: usize,
    pub(crate) retain_limit: usize,
    pub(crate) delay: Duration,
    /// When `pressure` last rose above `retain_limit` (None while it is below).
    since: Option<Instant>,
    /// `maintain` calls since then.
    passes: u32,
}

impl Purge {
    /// The default policy for a pool of `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Purge {
        Purge {
            pressure: 0,
            retain_limit: (capacity / 64).min(DEFAULT_RETAIN_MAX),
            delay: DEFAULT_PURGE_DELAY,
            since: None,
            passes: 0,
        }
    }

    /// A block of `size` bytes was handed out: it takes back that much pressure.
    pub(crate) fn acquired(&mut self, size: usize) {
        self.pressure = self.pressure.saturating_sub(size);
        if self.pressure <= self.retain_limit {
            self.since = None;
            self.passes = 0;
        }
    }

    /// A block of `size` bytes was freed.
    pub(crate) fn released(&mut self, size: usize) {
        self.pressure = self.pressure.saturating_add(size);
    }

    /// Whether a pass is due now (at a release, or with `maintained` at a `maintain`
    /// call, which counts a pass). Starts the clock when the pressure first crosses the
    /// limit, and stops it when the pressure is back below.
    pub(crate) fn due(&mut self, maintained: bool) -> bool {
        if self.pressure <= self.retain_limit {
            self.since = None;
            self.passes = 0;
            return false;
        }
        let now = Instant::now();
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

    /// A pass ran: every dirty range is clean, the pressure starts from zero.
    pub(crate) fn passed(&mut self) {
        self.pressure = 0;
        self.since = None;
        self.passes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_must_last_for_the_delay() {
        let mut p = Purge::new(6400);
        assert_eq!(p.retain_limit, 100);
        p.delay = Duration::from_millis(20);
        p.released(150);
        assert!(!p.due(false), "the clock starts at the first crossing");
        assert!(!p.due(false), "not yet");
        std::thread::sleep(Duration::from_millis(25));
        assert!(p.due(false));
        p.passed();
        assert!(!p.due(false));
    }

    #[test]
    fn acquiring_below_the_limit_stops_the_clock() {
        let mut p = Purge::new(6400);
        p.delay = Duration::from_millis(20);
        p.released(150);
        assert!(!p.due(false));
        p.acquired(100);
        std::thread::sleep(Duration::from_millis(25));
        p.released(60);
        assert!(
            !p.due(false),
            "the clock restarted when the pressure fell below the limit"
        );
    }

    #[test]
    fn zero_delay_is_due_at_once() {
        let mut p = Purge::new(6400);
        p.delay = Duration::ZERO;
        p.released(101);
        assert!(p.due(false));
        p.acquired(usize::MAX);
        assert!(!p.due(false), "pressure saturates at zero");
    }

    #[test]
    fn enough_maintenance_passes_end_the_delay_early() {
        let mut p = Purge::new(6400);
        p.delay = Duration::from_secs(3600);
        p.released(150);
        assert!(!p.due(true), "the clock starts at the first crossing");
        for _ in 1..PURGE_PASSES {
            assert!(!p.due(true));
        }
        assert!(!p.due(false), "a release is not a pass");
        assert!(p.due(true), "{PURGE_PASSES} passes are long enough");
    }
}
