//! From a sampled stack to a call site: the return addresses symbolised (function,
//! file:line, inlined frames each a frame of their own), the allocator's and std's frames
//! trimmed from the top, the first frame left is the site.
//!
//! Symbolisation is the `backtrace` crate's `resolve` (gimli over the binary's DWARF; it
//! caches what it parsed), called only here, at report time. File and line need line
//! tables in the build (`debug = "line-tables-only"` or more in the profile): a default
//! release profile has none, and the site is then named by its function alone.

use std::collections::HashMap;

/// One logical frame: a function, where in it, and whether it was inlined into the next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    pub(crate) function: String,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    pub(crate) inlined: bool,
    /// The allocator's, std's or the unwinder's (see [`trimmed`]).
    pub(crate) trim: bool,
}

/// Symbolises addresses, remembering each address's frames for the report's duration.
#[derive(Default)]
pub(crate) struct Symbols {
    seen: HashMap<usize, Vec<Frame>>,
}

/// Functions whose frames are the allocator's, std's or this crate's heap code: trimmed
/// from the top of a stack (matched on the name without its leading `<`).
#[cfg_attr(any(miri, target_family = "wasm"), allow(dead_code))] // used by `resolve`
const TRIMMED: &[&str] = &[
    "nebula_memory::heap::",
    "backtrace::",
    "__rustc::",
    "__rust_",
    "__rdl_",
    "__rg_",
    "alloc::",
    "core::",
    "std::",
    "hashbrown::",
    "_Unwind_",
    "malloc",
];

impl Symbols {
    /// The frames of a stack (innermost first), the allocator's and std's trimmed from the
    /// top; empty if nothing is left.
    pub(crate) fn frames(&mut self, ips: &[usize]) -> Vec<Frame> {
        let mut out = Vec::new();
        for &ip in ips {
            out.extend(self.at(ip).iter().cloned());
        }
        // Everything up to the allocator shim is the allocator (a wrapper of the game's
        // own included); then std's frames (`Vec::push`'s growth) up to the caller.
        let shim = out
            .iter()
            .rposition(|f| is_shim(&f.function))
            .map_or(0, |i| i + 1);
        let keep = out[shim..]
            .iter()
            .position(|f| !f.trim)
            .map_or(out.len(), |i| shim + i);
        out.drain(..keep);
        out
    }

    fn at(&mut self, ip: usize) -> &[Frame] {
        self.seen.entry(ip).or_insert_with(|| resolve(ip))
    }
}

/// Whether a frame of `function` in `file` (its full path) is the allocator's, std's, the
/// unwinder's or this crate's heap code. Inlined frames are named without their module
/// path, so the file decides for them: std's sources (`/rustc/<hash>/library/`), the
/// `backtrace` crate's, and this crate's `src/heap/`.
/// Whether `function` is the global allocator's entry (the shim rustc makes: what
/// `alloc::alloc::alloc` calls, and what calls the `#[global_allocator]`).
fn is_shim(function: &str) -> bool {
    let name = function.trim_start_matches("__rustc::");
    [
        "__rust_alloc",
        "__rust_realloc",
        "__rust_alloc_zeroed",
        "__rg_",
    ]
    .iter()
    .any(|s| name.starts_with(s))
}

#[cfg_attr(any(miri, target_family = "wasm"), allow(dead_code))] // used by `resolve`
fn trimmed(function: &str, file: Option<&str>) -> bool {
    let name = function.trim_start_matches('<');
    // `<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem`: std's impl of std's
    // trait for a primitive (a type path without `::`).
    let std_impl_for_primitive = function.starts_with('<')
        && name.split_once(" as ").is_some_and(|(ty, tr)| {
            !ty.contains("::") && TRIMMED.iter().any(|t| tr.starts_with(t))
        });
    // A `GlobalAlloc` method: a wrapper of the game's own around the tracker (inlined, it
    // is named by its method alone).
    let allocator_method = function.contains(" as core::alloc::global::GlobalAlloc>::")
        || matches!(function, "alloc" | "alloc_zeroed" | "realloc");
    std_impl_for_primitive
        || allocator_method
        || TRIMMED.iter().any(|t| name.starts_with(t))
        || file.is_some_and(|file| {
            file.contains("/rustc/")
                || file.contains("/library/std/")
                || file.contains("/backtrace-0.")
                || file.starts_with(concat!(env!("CARGO_MANIFEST_DIR"), "/src/heap/"))
        })
}

/// The frames at one return address, innermost (inlined) first.
fn resolve(ip: usize) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    #[cfg(not(any(miri, target_family = "wasm")))]
    backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
        let function = sym
            .name()
            .map_or_else(|| format!("{ip:#x}"), |n| format!("{n:#}"));
        let file = sym.filename().map(|p| p.to_string_lossy().into_owned());
        frames.push(Frame {
            trim: trimmed(&function, file.as_deref()),
            function,
            file: file.map(|f| short_path(&f)),
            line: sym.lineno(),
            inlined: true,
        });
    });
    if let Some(last) = frames.last_mut() {
        last.inlined = false; // the outermost is the real frame
    } else {
        frames.push(Frame {
            function: format!("{ip:#x}"),
            file: None,
            line: None,
            inlined: false,
            trim: false,
        });
    }
    frames
}

/// A file's path as a reader wants it: relative to the working directory when under it,
/// a crate's source under Cargo's registry from the crate's folder on.
#[cfg_attr(any(miri, target_family = "wasm"), allow(dead_code))] // used by `resolve`
fn short_path(path: &str) -> String {
    if let Ok(cwd) = std::env::current_dir()
        && let Some(rest) = path.strip_prefix(&*cwd.to_string_lossy())
    {
        return rest.trim_start_matches('/').to_string();
    }
    if let Some(i) = path.find("/registry/src/")
        && let Some(j) = path[i + 14..].find('/')
    {
        return path[i + 14 + j + 1..].to_string();
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trims(function: &str, file: Option<&str>) -> bool {
        trimmed(function, file)
    }

    #[test]
    fn the_allocators_and_stds_frames_are_trimmed_and_the_games_kept() {
        let ours = concat!(env!("CARGO_MANIFEST_DIR"), "/src/heap/record.rs");
        for (function, file) in [
            (
                "<nebula_memory::heap::TrackingAllocator as core::alloc::global::GlobalAlloc>::alloc",
                None,
            ),
            ("__rustc::__rust_alloc", None),
            ("alloc::raw_vec::RawVecInner<A>::finish_grow", None),
            ("<alloc::vec::Vec<T> as core::clone::Clone>::clone", None),
            ("hashbrown::raw::RawTable<T>::reserve_rehash", None),
            ("some_fn", Some("/rustc/abc/library/alloc/src/vec/mod.rs")),
            (
                "trace_unsynchronized<F>",
                Some("/r/registry/src/x/backtrace-0.3.77/src/backtrace/mod.rs"),
            ),
            ("write<F>", Some(ours)),
            (
                "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                None,
            ),
            ("<[T] as alloc::slice::hack::ConvertVec>::to_vec", None),
            (
                "<game::Counting as core::alloc::global::GlobalAlloc>::alloc",
                None,
            ),
        ] {
            assert!(trims(function, file), "{function} {file:?}");
        }
        for (function, file) in [
            (
                "game::chat::keep_history",
                Some("/home/me/game/src/chat.rs"),
            ),
            (
                "<game::Inventory as core::clone::Clone>::clone",
                Some("src/inv.rs"),
            ),
            ("bevy_ecs::system::function_system::run", None),
            ("keep_history", Some("/home/me/game/src/heap/chat.rs")),
        ] {
            assert!(!trims(function, file), "{function} {file:?}");
        }
    }

    #[test]
    fn a_wrapper_of_the_games_own_above_the_shim_is_the_allocators() {
        let f = |function: &str| Frame {
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
            trim: trims(function, None),
        };
        let mut symbols = Symbols::default();
        for (ip, name) in [
            (
                1,
                "<game::Counting as core::alloc::global::GlobalAlloc>::alloc",
            ),
            (2, "__rustc::__rust_alloc"),
            (3, "alloc::raw_vec::finish_grow"),
            (4, "game::keep"),
            (5, "game::main"),
        ] {
            symbols.seen.insert(ip, vec![f(name)]);
        }
        let frames = symbols.frames(&[1, 2, 3, 4, 5]);
        assert_eq!(frames[0].function, "game::keep");
        assert_eq!(frames.len(), 2);
    }

    #[test]
    #[cfg_attr(target_family = "wasm", ignore = "WASI has no working directory here")]
    fn paths_are_shortened_for_reading() {
        let cwd = std::env::current_dir().unwrap();
        let inside = format!("{}/src/chat.rs", cwd.display());
        assert_eq!(short_path(&inside), "src/chat.rs");
        assert_eq!(
            short_path("/home/u/.cargo/registry/src/index.crates.io-1/bevy_ecs-0.20.1/src/a.rs"),
            "bevy_ecs-0.20.1/src/a.rs"
        );
        assert_eq!(short_path("/elsewhere/x.rs"), "/elsewhere/x.rs");
    }
}
