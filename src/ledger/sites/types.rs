//! A line's call sites as values: what [`call_sites`](super::call_sites)(super::call_sites) and
//! [`grown_since`](super::grown_since)(super::grown_since) return.

/// One call site of a line: where an allocation was made (the first frame of its stack
/// that is not the allocator's or std's), and the line's bytes from there.
///
/// ```
/// let sites = nebula_memory::ledger::call_sites("doc/site");
/// for site in &sites.held {
///     println!("{} at {:?}:{:?}: ~{} bytes ({:.0}%)",
///         site.function, site.file, site.line, site.bytes, site.share * 100.0);
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallSite {
    /// The function, demangled, without its hash (`game::chat::keep_history`), or the
    /// address when the binary has no symbol for it.
    pub function: String,
    /// Its source file (relative to the working directory when under it); `None` without
    /// line tables in the build.
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
    /// The callers above it, nearest first (a few, for context), as `function (file:line)`;
    /// a frame inlined into its caller is marked `[inlined]`.
    pub callers: Vec<String>,
    /// Estimated bytes: live now (in [`CallSites::held`], [`grown_since`](super::grown_since)) or allocated
    /// per frame (in [`CallSites::churn`]).
    pub bytes: u64,
    /// `bytes` as a share of the line's sampled total of the same kind, 0 to 1.
    pub share: f64,
    /// Samples behind the estimate (more is surer: about `1/√n` relative error).
    pub samples: u64,
}

/// A line's call sites ([`call_sites`](super::call_sites), [`grown_since`](super::grown_since)), each list largest first.
///
/// ```
/// let sites = nebula_memory::ledger::call_sites("doc/sites");
/// println!("{sites}"); // the top sites of each kind, or why there are none
/// assert_eq!(sites.tag, "doc/sites");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct CallSites {
    /// The line (a tag; its children's sites are included).
    pub tag: String,
    /// Where its live heap was allocated, by estimated live bytes.
    pub held: Vec<CallSite>,
    /// Where it allocates, by estimated bytes allocated per frame (over the frames since
    /// sampling was turned on). Empty in [`grown_since`](super::grown_since)'s answer.
    pub churn: Vec<CallSite>,
    /// Frames the churn is averaged over.
    pub frames: u64,
    /// The sampling mean in effect (`None`: sampling is off).
    pub mean: Option<usize>,
    /// Whether this build takes call stacks (not under Miri, not on wasm32): without them
    /// the figures are kept and every site is "unknown".
    pub stacks: bool,
    /// Samples the tables could not keep (they were full), process-wide, ever.
    pub dropped: u64,
    /// For [`grown_since`](super::grown_since)'s answer, the marked frame: `held` is then what was allocated
    /// since and is still live.
    pub since: Option<u64>,
}
