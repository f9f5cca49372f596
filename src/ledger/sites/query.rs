//! Turning sampling on and asking for a line's call sites.

use std::collections::HashMap;

use super::rank::rank;
use super::symbols::Symbols;
use super::types::CallSites;
use crate::heap::sample::{self, stack, table};

/// Turns sampling of heap call stacks on, with a mean of `mean_bytes` between samples
/// ([`DEFAULT_SAMPLE_MEAN`](crate::ledger::DEFAULT_SAMPLE_MEAN) is tcmalloc's and jemalloc's 512 KiB), or off with `None`.
/// Overrides `NEBULA_MEMORY_SAMPLE`. Each thread's counters take it up within a MiB of
/// their allocations. O(1).
///
/// ```
/// use nebula_memory::ledger;
/// ledger::set_sampling(Some(ledger::DEFAULT_SAMPLE_MEAN));
/// assert_eq!(ledger::sampling(), Some(512 << 10));
/// ledger::set_sampling(None);
/// assert_eq!(ledger::sampling(), None);
/// ```
pub fn set_sampling(mean_bytes: Option<usize>) {
    // The sampler's lock is taken around `fork` by the crate's handlers.
    crate::fork::install();
    sample::set_mean(mean_bytes);
}

/// The mean bytes between samples, `None` when sampling is off (the default, unless
/// `NEBULA_MEMORY_SAMPLE` names a mean). O(1).
///
/// ```
/// // Off unless the environment or the program turned it on.
/// let _mean: Option<usize> = nebula_memory::ledger::sampling();
/// ```
pub fn sampling() -> Option<usize> {
    crate::fork::install();
    sample::read_env();
    sample::current_mean()
}

/// Seeds the sampler's random draws on the calling thread and on threads that draw for the
/// first time from now on: with one thread allocating, the same program takes the same
/// samples. For tests. O(1).
///
/// ```
/// nebula_memory::ledger::set_sampling_seed(42);
/// ```
pub fn set_sampling_seed(seed: u64) {
    sample::set_seed(seed);
}

/// A frame to compare later frames with: [`grown_since`].
///
/// ```
/// let mark = nebula_memory::ledger::mark_frame();
/// assert_eq!(mark.frame(), nebula_memory::ledger::mark_frame().frame());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FrameMark(u64);

impl FrameMark {
    /// Frames ended (`ledger::end_frame`) before the mark was made.
    ///
    /// ```
    /// let before = nebula_memory::ledger::mark_frame();
    /// nebula_memory::ledger::end_frame();
    /// assert!(nebula_memory::ledger::mark_frame().frame() > before.frame());
    /// ```
    pub fn frame(self) -> u64 {
        self.0
    }
}

/// Marks the current frame: what is allocated from now on (in this frame and later ones)
/// and still live is what [`grown_since`] shows. O(1).
///
/// ```
/// let mark = nebula_memory::ledger::mark_frame();
/// let grown = nebula_memory::ledger::grown_since(mark, "doc/mark");
/// assert!(grown.held.is_empty()); // nothing sampled under this tag
/// ```
pub fn mark_frame() -> FrameMark {
    FrameMark(sample::frame())
}

/// `tag`'s call sites now: by live bytes and by bytes allocated per frame, from the
/// samples taken under it and its children. Symbolises the stacks (the first report
/// reads the binary's debug information: tens of milliseconds or more). O(samples).
///
/// ```
/// use nebula_memory::ledger;
/// ledger::set_sampling(Some(64 << 10));
/// let kept: Vec<Vec<u8>> = {
///     let _s = ledger::scope("doc/call_sites");
///     (0..64).map(|_| vec![1u8; 4096]).collect()
/// };
/// let sites = ledger::call_sites("doc/call_sites");
/// // With a `TrackingAllocator` installed, the 256 KiB kept are found, at this function.
/// println!("{sites}");
/// # drop(kept);
/// ledger::set_sampling(None);
/// ```
pub fn call_sites(tag: &str) -> CallSites {
    collect(tag, None)
}

/// What `tag` (and its children) allocated since `mark` and still holds, by call site:
/// in [`CallSites::held`]; `churn` is empty. O(samples).
///
/// ```
/// use nebula_memory::ledger;
/// let mark = ledger::mark_frame();
/// ledger::end_frame();
/// let grown = ledger::grown_since(mark, "doc/grown");
/// assert!(grown.churn.is_empty());
/// ```
pub fn grown_since(mark: FrameMark, tag: &str) -> CallSites {
    collect(tag, Some(mark.0))
}

/// A mark `frames` frames before the current one (the first frame if fewer have ended).
pub(crate) fn frames_ago(frames: u64) -> FrameMark {
    FrameMark(sample::frame().saturating_sub(frames))
}

/// The sites of `tag`'s subtree: all of them, or (with `since`) only what is live of what
/// was allocated in frame `since` or later.
fn collect(tag: &str, since: Option<u64>) -> CallSites {
    sample::read_env();
    // The report's own memory (the copy, the symbols) is neither charged to the scope the
    // caller is in nor sampled.
    crate::heap::untagged(|| {
        sample::quiet(|| collect_from(&Tables::read(), &mut Symbols::default(), tag, since))
    })
}

/// The call sites of each of `tags` ([`call_sites`]), from one reading of the tables and
/// one symbolisation: for a page or a report of many lines. Empty while sampling is off.
pub(crate) fn call_sites_of(tags: &[&str]) -> Vec<CallSites> {
    sample::read_env();
    if sample::current_mean().is_none() {
        return Vec::new();
    }
    crate::heap::untagged(|| {
        sample::quiet(|| {
            let (tables, mut symbols) = (Tables::read(), Symbols::default());
            tags.iter()
                .map(|tag| collect_from(&tables, &mut symbols, tag, None))
                .collect()
        })
    })
}

/// A copy of the sampler's tables, with each site's live samples counted.
struct Tables {
    sites: Vec<(u32, table::Site)>,
    live: Vec<table::Live>,
    live_samples: HashMap<u32, u64>,
}

impl Tables {
    fn read() -> Tables {
        let (mut sites, mut live) = (Vec::new(), Vec::new());
        sample::read_tables(&mut sites, &mut live);
        let mut live_samples: HashMap<u32, u64> = HashMap::new();
        for l in &live {
            *live_samples.entry(l.site).or_default() += 1;
        }
        Tables {
            sites,
            live,
            live_samples,
        }
    }
}

fn collect_from(t: &Tables, symbols: &mut Symbols, tag: &str, since: Option<u64>) -> CallSites {
    let mut out = CallSites {
        tag: tag.to_string(),
        frames: sample::frames_on(),
        mean: sample::current_mean(),
        stacks: stack::AVAILABLE,
        dropped: sample::dropped(),
        since,
        ..CallSites::default()
    };
    let ids = heap_ids_under(tag);
    if ids.is_empty() {
        return out;
    }
    let by_slot: HashMap<u32, &table::Site> = t
        .sites
        .iter()
        .filter(|(_, s)| ids.contains(&s.tag))
        .map(|(i, s)| (*i, s))
        .collect();
    // Live bytes (and samples) per site slot.
    let mut held: HashMap<u32, (u64, u64)> = HashMap::new();
    match since {
        None => {
            for (&i, s) in &by_slot {
                if s.live > 0 {
                    let n = t.live_samples.get(&i).copied().unwrap_or(0);
                    held.insert(i, (s.live, n));
                }
            }
        }
        Some(frame) => {
            for l in t.live.iter().filter(|l| l.frame >= frame) {
                if by_slot.contains_key(&l.site) {
                    let e = held.entry(l.site).or_default();
                    e.0 = e.0.saturating_add(l.weight);
                    e.1 += 1;
                }
            }
        }
    }
    out.held = rank(symbols, &by_slot, &held, 1);
    if since.is_none() {
        let churn: HashMap<u32, (u64, u64)> = by_slot
            .iter()
            .map(|(&i, s)| (i, (s.allocated, s.samples)))
            .collect();
        out.churn = rank(symbols, &by_slot, &churn, out.frames);
    }
    out
}

/// The heap ids of `tag` and of every tag under it.
fn heap_ids_under(tag: &str) -> Vec<u16> {
    crate::ledger::node::with_nodes(|nodes| {
        nodes
            .iter()
            .filter(|n| n.heap_id != 0)
            .filter(|n| {
                n.path == tag
                    || n.path
                        .strip_prefix(tag)
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .map(|n| n.heap_id)
            .collect()
    })
}
