//! The reset policy: which block an arena keeps for the next frame.
//!
//! A pure function of the capacity the arena would keep, what the frame just ended needed
//! and how many frames in a row the kept block has been much too large. `reset` computes
//! the decision once and carries it out; this module never touches memory.
//!
//! - The kept block holds the frame's peak plus 1/8: keep it, so a steady workload does no
//!   pool operation at all.
//! - It does not: replace it by one block of that size, and at least 1.25 times the old
//!   one, so a frame size creeping upwards costs a few replacements, not one per record;
//!   but never larger than the blocks it replaces together (the frame's deepest point:
//!   an arena holds most just before its reset), so what stays after a reset fits in what
//!   the frame held. A single block is therefore never grown at a reset: it grows when a
//!   frame spills over it, and the spill pays for the headroom.
//! - It has been more than twice the need (and above `first_block`) for
//!   `trim_after_resets` resets in a row: replace it by one sized to the largest of those
//!   frames, so one spike does not pin its memory for ever.
//! - A block sized after a frame that spilled over several blocks is *provisional*: that
//!   frame's peak counts the copies that growing collections left behind in the earlier
//!   blocks (a `Vec` that outgrew its block moved on), up to twice what was alive. If the
//!   next [`PROVISIONAL_RESETS`] frames all need between 1/2 and 1/1.25 of it, it is
//!   replaced by one sized to them. A block grown by a quarter for a creeping need is
//!   within 1.25, so creeping does not churn; a frame needing less than half of it is a
//!   quiet frame of the rule above and ends the provisional time, so a spike's block
//!   still waits the whole streak.

use super::config::ArenaConfig;

/// Granularity of the block sizes an arena asks for.
pub(crate) const BLOCK_GRANULE: usize = 4096;

/// Rounds a block request up to the block granule (saturating near `usize::MAX`; the pool
/// refuses such sizes anyway).
pub(crate) fn round_block(n: usize) -> usize {
    n.checked_next_multiple_of(BLOCK_GRANULE).unwrap_or(n)
}

/// Consecutive resets in which the kept block was too large (more than twice, or, while
/// it is provisional, 1.25 times).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Quiet {
    /// How many in a row.
    pub(crate) resets: u32,
    /// The largest need among them.
    pub(crate) peak: usize,
    /// Whether the kept block was sized after a frame that spilled over several blocks and
    /// no frame has confirmed that size yet.
    pub(crate) provisional: bool,
}

impl Quiet {
    /// The state after a block was sized for a frame: provisional if that frame spilled.
    pub(crate) fn sized_after(spilled: bool) -> Quiet {
        Quiet {
            provisional: spilled,
            ..Quiet::default()
        }
    }
}

/// The resets in a row, each needing less than 1/1.25 of a provisional block, after which
/// it is replaced (at most `trim_after_resets`).
pub(crate) const PROVISIONAL_RESETS: u32 = 8;

/// What `reset` does with the arena's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Keep the largest block as it is.
    Keep,
    /// Replace every block by one with this many usable bytes.
    Replace(usize),
}

/// What a frame of peak `peak` needs the kept block to hold: the peak plus 1/8, rounded
/// to the block granule. Non-decreasing in `peak`.
pub(crate) fn need(peak: usize) -> usize {
    round_block(peak.saturating_add(peak / 8).max(1))
}

/// Rounds down to the block granule.
fn floor_block(n: usize) -> usize {
    n - n % BLOCK_GRANULE
}

/// Whether a block of `kept` bytes holds a frame of peak `peak` (true up to some peak,
/// false above it).
fn fits(kept: usize, peak: usize) -> bool {
    need(peak) <= kept
}

/// Whether a block of `kept` bytes is much too large for a frame of peak `peak`, a quiet
/// frame (true below some peak, false from it on): more than twice its need, or, for a
/// provisional block, more than 1.25 times.
fn oversized(kept: usize, peak: usize, config: &ArenaConfig, provisional: bool) -> bool {
    let floor = need(peak).max(round_block(config.first_block.max(1)));
    let limit = if provisional {
        floor.saturating_add(floor / 4)
    } else {
        floor.saturating_mul(2)
    };
    config.trim_after_resets > 0 && kept > limit
}

/// The decision for a reset: `kept` is the capacity of the block that would be kept (0 if
/// none), `peak` the largest `bytes_used` of the frame, `room` the most a replacement
/// block may hold (what the arena's blocks take of the pool together, less one block's
/// overhead). Returns the quiet-frame state to store if the decision is carried out
/// (after a successful replacement, start from [`Quiet::default`] instead).
pub(crate) fn decide(
    kept: usize,
    peak: usize,
    quiet: Quiet,
    config: &ArenaConfig,
    room: usize,
) -> (Decision, Quiet) {
    let grown = round_block(need(peak).max(kept.saturating_add(kept / 4))).min(floor_block(room));
    if !fits(kept, peak) && grown > kept {
        (Decision::Replace(grown), quiet)
    } else if oversized(kept, peak, config, quiet.provisional) {
        // A frame far below the block (more than twice) is a quiet frame of the ordinary
        // rule and ends the block's provisional time: a spike's block waits the whole
        // streak. Only frames between 1.25 and 2 times (the most moved copies inflate a
        // need by), one after the other from the sizing on, take the short streak.
        let short = !oversized(kept, peak, config, false);
        let quiet = Quiet {
            resets: quiet.resets.saturating_add(1),
            peak: quiet.peak.max(need(peak)),
            provisional: short,
        };
        let after = if short {
            PROVISIONAL_RESETS.min(config.trim_after_resets)
        } else {
            config.trim_after_resets
        };
        if quiet.resets >= after {
            let floor = round_block(config.first_block.max(1));
            (Decision::Replace(quiet.peak.max(floor)), quiet)
        } else {
            (Decision::Keep, quiet)
        }
    } else {
        (Decision::Keep, Quiet::default())
    }
}

/// The frame peaks for which [`decide`] keeps a block of `kept` bytes, the arena's only
/// one, as it is and ends any quiet streak (`(Keep, Quiet::default())`): an interval
/// `[lo, kept]`, or `None`. A single block is never grown at a reset (a replacement may
/// not be larger than the blocks it replaces), so every peak up to its capacity keeps it;
/// below `lo` it is too large (a quiet frame). A reset whose peak lies inside needs no
/// decision at all, which is what lets the steady state's reset skip everything but the
/// cursor. Found by bisection on [`oversized`] itself, so it cannot disagree with
/// `decide`. O(log kept).
pub(crate) fn keep_band(kept: usize, config: &ArenaConfig) -> Option<(usize, usize)> {
    let top = kept;
    // The smallest peak that is not a quiet frame, if it is at most `top`.
    if oversized(kept, top, config, false) {
        return None;
    }
    let (mut lo, mut hi) = (0usize, top);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if oversized(kept, mid, config, false) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Some((lo, top))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    fn config(trim: u32) -> ArenaConfig {
        ArenaConfig::default()
            .first_block(64 * KIB)
            .trim_after_resets(trim)
    }

    #[test]
    fn a_block_that_fits_the_frame_is_kept() {
        let (d, q) = decide(
            256 * KIB,
            200 * KIB,
            Quiet::default(),
            &config(3),
            usize::MAX,
        );
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn the_need_includes_an_eighth_of_headroom() {
        // 240 KiB + 30 KiB = 270 KiB does not fit 256 KiB.
        let (d, _) = decide(
            256 * KIB,
            240 * KIB,
            Quiet::default(),
            &config(3),
            usize::MAX,
        );
        assert_eq!(
            d,
            Decision::Replace(320 * KIB),
            "grown by at least a quarter"
        );
        let (d, _) = decide(
            256 * KIB,
            1024 * KIB,
            Quiet::default(),
            &config(3),
            usize::MAX,
        );
        assert_eq!(
            d,
            Decision::Replace(1152 * KIB),
            "the need itself when larger"
        );
    }

    #[test]
    fn no_block_and_an_empty_frame_asks_for_one_granule() {
        assert_eq!(
            decide(0, 0, Quiet::default(), &config(3), usize::MAX).0,
            Decision::Replace(BLOCK_GRANULE)
        );
    }

    #[test]
    fn a_block_too_large_for_enough_frames_in_a_row_is_trimmed() {
        let c = config(3);
        let mut q = Quiet::default();
        for (frame, peak) in [100 * KIB, 300 * KIB, 50 * KIB].into_iter().enumerate() {
            let (d, next) = decide(4096 * KIB, peak, q, &c, usize::MAX);
            q = next;
            if frame < 2 {
                assert_eq!(d, Decision::Keep);
            } else {
                // The largest need among the quiet frames: 300 KiB + 1/8, rounded.
                assert_eq!(d, Decision::Replace(round_block(300 * KIB + 300 * KIB / 8)));
            }
        }
        assert_eq!(q.resets, 3);
    }

    #[test]
    fn one_busy_frame_restarts_the_count() {
        let c = config(3);
        let (_, q) = decide(4096 * KIB, 10 * KIB, Quiet::default(), &c, usize::MAX);
        let (_, q) = decide(4096 * KIB, 10 * KIB, q, &c, usize::MAX);
        assert_eq!(q.resets, 2);
        let (d, q) = decide(4096 * KIB, 3000 * KIB, q, &c, usize::MAX);
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn trimming_never_goes_below_the_first_block_and_zero_disables_it() {
        let c = config(1);
        let (d, _) = decide(4096 * KIB, 0, Quiet::default(), &c, usize::MAX);
        assert_eq!(d, Decision::Replace(64 * KIB));
        let (d, q) = decide(4096 * KIB, 0, Quiet::default(), &config(0), usize::MAX);
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
        // Not more than twice the first block: never counted as quiet.
        let (d, q) = decide(128 * KIB, 0, Quiet::default(), &c, usize::MAX);
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn the_keep_band_is_exactly_where_decide_keeps_as_is() {
        let configs = [
            config(0),
            config(1),
            config(120),
            ArenaConfig::default().first_block(1),
        ];
        let peaks = |kept: usize| {
            let mut p: Vec<usize> = (0..64u64)
                .map(|i| (i * kept as u64 / 50) as usize)
                .collect();
            p.extend([0, 1, kept / 2, kept - kept / 9, kept, usize::MAX / 2]);
            p
        };
        for c in &configs {
            for kept in [
                0usize,
                4096,
                64 * KIB,
                68 * KIB,
                200 * KIB,
                4096 * KIB,
                (1u64 << 40).min(usize::MAX as u64 >> 2) as usize,
            ] {
                let band = keep_band(kept, c);
                let mut edges: Vec<usize> = peaks(kept);
                if let Some((lo, hi)) = band {
                    edges.extend([lo.saturating_sub(1), lo, hi, hi + 1]);
                }
                // The arena's only block: no peak above its capacity, and a replacement
                // no larger than it.
                for peak in edges.into_iter().filter(|&p| p <= kept) {
                    let kept_as_is = decide(kept, peak, Quiet::default(), c, kept)
                        == (Decision::Keep, Quiet::default());
                    let inside = band.is_some_and(|(lo, hi)| (lo..=hi).contains(&peak));
                    assert_eq!(inside, kept_as_is, "kept {kept}, peak {peak}, {c:?}");
                }
            }
        }
    }

    #[test]
    fn a_provisional_block_is_confirmed_or_trimmed_soon() {
        let c = config(120);
        let spilled = Quiet::sized_after(true);
        // 88 KiB sized after a spilled frame; the frames then need 60 KiB (53.5 KiB + 1/8):
        // more than 1.25 times too large, replaced after PROVISIONAL_RESETS frames.
        let mut q = spilled;
        for frame in 1..=PROVISIONAL_RESETS {
            let (d, next) = decide(88 * KIB, 53 * KIB + 512, q, &c, usize::MAX);
            q = next;
            let want = if frame < PROVISIONAL_RESETS {
                Decision::Keep
            } else {
                Decision::Replace(64 * KIB)
            };
            assert_eq!(d, want, "frame {frame}");
        }
        // Not provisional, the same block is kept for ever (within twice the need).
        let (d, q) = decide(88 * KIB, 53 * KIB + 512, Quiet::default(), &c, usize::MAX);
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
        // A frame within 1.25 times confirms it: from then on the ordinary rule.
        let (_, q) = decide(88 * KIB, 40 * KIB, spilled, &c, usize::MAX);
        assert!(q.provisional && q.resets == 1);
        let (d, q) = decide(88 * KIB, 70 * KIB, q, &c, usize::MAX);
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn a_spikes_provisional_block_waits_the_whole_streak() {
        // A spike spilled and sized the block; the frames after it need far less (more
        // than twice): the ordinary streak, not the provisional one.
        let c = config(120);
        let mut q = Quiet::sized_after(true);
        for frame in 1..120 {
            let (d, next) = decide(4096 * KIB, 100 * KIB, q, &c, usize::MAX);
            assert_eq!(d, Decision::Keep, "frame {frame}");
            q = next;
        }
        let (d, _) = decide(4096 * KIB, 100 * KIB, q, &c, usize::MAX);
        assert_eq!(d, Decision::Replace(round_block(100 * KIB + 100 * KIB / 8)));
    }

    #[test]
    fn a_creeping_need_does_not_churn_a_provisional_block() {
        // The need just outgrew 256 KiB: grown by a quarter, to 320 KiB, after spilling.
        let c = config(120);
        let (d, _) = decide(256 * KIB, 240 * KIB, Quiet::default(), &c, usize::MAX);
        assert_eq!(d, Decision::Replace(320 * KIB));
        // The next frames need about the same: not 1.25 times too large, confirmed.
        let (d, q) = decide(
            320 * KIB,
            240 * KIB,
            Quiet::sized_after(true),
            &c,
            usize::MAX,
        );
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn a_provisional_block_waits_no_longer_than_trim_after_resets_and_zero_keeps_it() {
        let (d, _) = decide(
            4096 * KIB,
            10 * KIB,
            Quiet::sized_after(true),
            &config(1),
            usize::MAX,
        );
        assert_eq!(d, Decision::Replace(64 * KIB));
        let (d, q) = decide(
            4096 * KIB,
            10 * KIB,
            Quiet::sized_after(true),
            &config(0),
            usize::MAX,
        );
        assert_eq!((d, q), (Decision::Keep, Quiet::default()));
    }

    #[test]
    fn huge_figures_saturate() {
        let (d, _) = decide(
            usize::MAX / 2,
            usize::MAX,
            Quiet::default(),
            &config(3),
            usize::MAX,
        );
        assert!(matches!(d, Decision::Replace(n) if n >= usize::MAX / 2));
    }
}
