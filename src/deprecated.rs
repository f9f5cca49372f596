//! The old names of renamed public items, each a thin alias of its new name, kept so that
//! code written against them still compiles (with a deprecation warning that names the
//! new one). CHANGELOG.md lists the renames and why.

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::error::AllocError;
use crate::{MemoryArena, SharedArena};

impl MemoryArena<'_> {
    /// Renamed [`try_alloc_labelled`](MemoryArena::try_alloc_labelled).
    ///
    /// # Errors
    /// As `try_alloc_labelled`.
    #[deprecated(
        note = "renamed to `try_alloc_labelled`: a tag is a ledger path, a label \
                         names allocations inside one arena"
    )]
    pub fn try_alloc_tagged(
        &self,
        layout: Layout,
        tag: &'static str,
    ) -> Result<NonNull<u8>, AllocError> {
        self.try_alloc_labelled(layout, tag)
    }

    /// Renamed [`alloc_labelled`](MemoryArena::alloc_labelled).
    #[deprecated(
        note = "renamed to `alloc_labelled`: a tag is a ledger path, a label names \
                         allocations inside one arena"
    )]
    #[track_caller]
    pub fn alloc_tagged(&self, layout: Layout, tag: &'static str) -> NonNull<u8> {
        self.alloc_labelled(layout, tag)
    }

    /// Renamed [`label_bytes`](MemoryArena::label_bytes).
    #[deprecated(note = "renamed to `label_bytes`")]
    pub fn tag_bytes(&self, tag: &str) -> usize {
        self.label_bytes(tag)
    }
}

impl SharedArena<'_> {
    /// Renamed [`label_bytes`](SharedArena::label_bytes).
    #[deprecated(note = "renamed to `label_bytes`")]
    pub fn tag_bytes(&self, tag: &str) -> usize {
        self.label_bytes(tag)
    }
}

// The Bevy module's old names are aliases in `bevy` itself (`bevy/mod.rs`), which this
// core file cannot import without importing the layer above it.
