//! When a pool gives free pages back to the OS.
//!
//! Free ranges that may hold resident pages carry the `DIRTY` flag. The *release
//! pressure* is the bytes freed minus the bytes acquired since the last decommit pass. When
//! it has stayed above the retain limit for the purge delay, one pass decommits every dirty
//! free range. The delay is mimalloc's answer to free-then-reallocate churn (a level
//! unloaded, the next one loaded): decommitting on every release past the limit made W7
//! page-fault on 0.7 of its acquisitions.
//!
//! [`Purge`] is the policy alone: it counts and keeps time, and says when a pass is due.
//! The pass itself walks the pool's free lists (`MemoryPool::decommit_dirty`).

use std::time::{Duration, Instant};

/// Default retain limit: capacity / 4, at most this.
const DEFAULT_RETAIN_MAX: usize = 64 << 20;
/// Default purge delay.
const DEFAULT_PURGE_DELAY: Duration = Duration::from_millis(500);

/// Release pressure and the clock that decides when free pages go back to the OS.
pub(crate) struct Purge {
    /// Bytes freed minus bytes acquired since the last pass (saturating at 0).
    pressure: usize,
    pub(crate) retain_limit: usize,
    pub(crate) delay: Duration,
    /// When `pressure` last rose above `retain_limit` (None while it is below).
    since: Option<Instant>,
}

impl Purge {
    /// The default policy for a pool of `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Purge {
        Purge {
            pressure: 0,
            retain_limit: (capacity / 4).min(DEFAULT_RETAIN_MAX),
            delay: DEFAULT_PURGE_DELAY,
            since: None,
        }
    }

    /// A block of `size` bytes was handed out: it takes back that much pressure.
    pub(crate) fn acquired(&mut self, size: usize) {
        self.pressure = self.pressure.saturating_sub(size);
        if self.pressure <= self.retain_limit {
            self.since = None;
        }
    }

    /// A block of `size` bytes was freed.
    pub(crate) fn released(&mut self, size: usize) {
        self.pressure = self.pressure.saturating_add(size);
    }

    /// Whether a pass is due now. Starts the clock when the pressure first crosses the
    /// limit, and stops it when the pressure is back below.
    pub(crate) fn due(&mut self) -> bool {
        if self.pressure <= self.retain_limit {
            self.since = None;
            return false;
        }
        let now = Instant::now();
        match self.since {
            Some(since) => now.duration_since(since) >= self.delay,
            None if self.delay.is_zero() => true,
            None => {
                self.since = Some(now);
                false
            }
        }
    }

    /// A pass ran: every dirty range is clean, the pressure starts from zero.
    pub(crate) fn passed(&mut self) {
        self.pressure = 0;
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_must_last_for_the_delay() {
        let mut p = Purge::new(400);
        assert_eq!(p.retain_limit, 100);
        p.delay = Duration::from_millis(20);
        p.released(150);
        assert!(!p.due(), "the clock starts at the first crossing");
        assert!(!p.due(), "not yet");
        std::thread::sleep(Duration::from_millis(25));
        assert!(p.due());
        p.passed();
        assert!(!p.due());
    }

    #[test]
    fn acquiring_below_the_limit_stops_the_clock() {
        let mut p = Purge::new(400);
        p.delay = Duration::from_millis(20);
        p.released(150);
        assert!(!p.due());
        p.acquired(100);
        std::thread::sleep(Duration::from_millis(25));
        p.released(60);
        assert!(
            !p.due(),
            "the clock restarted when the pressure fell below the limit"
        );
    }

    #[test]
    fn zero_delay_is_due_at_once() {
        let mut p = Purge::new(400);
        p.delay = Duration::ZERO;
        p.released(101);
        assert!(p.due());
        p.acquired(usize::MAX);
        assert!(!p.due(), "pressure saturates at zero");
    }
}
