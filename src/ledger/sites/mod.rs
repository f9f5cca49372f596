//! Where in the code a line's heap comes from: its call sites, from the tracker's sampled
//! call stacks (the sampler itself: `heap::sample`).
//!
//! With sampling on ([`set_sampling`], or `NEBULA_MEMORY_SAMPLE=<mean bytes>` in the
//! environment) and a [`TrackingAllocator`](crate::TrackingAllocator) installed, each line
//! of the ledger (a tag, a Bevy system) can say which functions hold its live heap and
//! which churn it: [`call_sites`]. Each site is the first frame of its stack that is not
//! the allocator's or std's (`Vec::push`'s growth is charged to the function that pushed),
//! with its estimated bytes and share of the line's; figures are estimates (unbiased: see
//! the sampler), exact for allocations of a MiB or more. [`mark_frame`] and
//! [`grown_since`] answer "what did each line allocate since that frame, and still hold,
//! and where" (the leak hunter's A/B question).
//!
//! Symbols are looked up when a report is made, not when the sample is taken. File and
//! line need line tables in the build: add `debug = "line-tables-only"` to the profile
//! (`[profile.release]` of the game's `Cargo.toml`); without them sites are named by
//! function.

mod query;
mod rank;
mod report;
mod symbols;
mod types;

pub use crate::heap::sample::DEFAULT_MEAN as DEFAULT_SAMPLE_MEAN;
pub(crate) use query::call_sites_of;
pub use query::{
    FrameMark, call_sites, grown_since, mark_frame, sampling, set_sampling, set_sampling_seed,
};
pub use types::{CallSite, CallSites};
