//! Allocation assertions for tests: run an app for some frames, then fail when a system
//! allocates more often or more bytes a frame than it may, allocates at all where it must
//! not, or keeps growing, with a message that names the system, the figure and the frame;
//! and compare every system's figures with a baseline file (dhat's testing mode is the
//! precedent; this is per system and per frame).
//!
//! The figures are the ledger's system lines ([`MemoryLedger`]), read after each frame: a
//! [`TrackingAllocator`](crate::TrackingAllocator) must be the test binary's global
//! allocator. An app made with [`MemoryPlugin::isolated`](super::MemoryPlugin::isolated)
//! has lines of its own, so tests running in parallel threads of one process, with
//! systems of the same names, do not see each other's allocations.

use std::fmt::Write as _;
use std::path::Path;

use bevy_app::App;

use super::attribution::{AttributionConfig, SYSTEMS_TAG};
use super::ledger::MemoryLedger;

/// The environment variable that makes [`AllocationRecord::check_baseline`] write the
/// baseline instead of checking it: `NEBULA_MEMORY_BLESS=1 cargo test`.
pub const BLESS_VAR: &str = "NEBULA_MEMORY_BLESS";

/// How many frames to run, and how many to run first unrecorded (the app's first frames
/// set up, fill caches and grow buffers).
///
/// ```standalone_crate
/// use nebula_memory::TrackingAllocator;
/// use nebula_memory::bevy::{AllocationCheck, MemoryPlugin};
///
/// #[global_allocator]
/// static HEAP: TrackingAllocator = TrackingAllocator::new(std::alloc::System);
///
/// fn physics(mut contacts: bevy_ecs::prelude::Local<Vec<u32>>) {
///     contacts.clear();
///     contacts.extend(0..100); // the Local keeps its capacity: no allocation after warm-up
/// }
///
/// let mut app = bevy_app::App::new();
/// app.add_plugins(MemoryPlugin::isolated())
///     .add_systems(bevy_app::Update, physics);
/// let record = AllocationCheck::frames(30).run(&mut app);
/// record.assert_no_allocations("physics");
/// record.assert_not_growing("physics");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct AllocationCheck {
    warmup: u32,
    frames: u32,
}

impl AllocationCheck {
    /// Records `frames` frames after 3 frames of warm-up. O(1).
    ///
    /// ```
    /// let check = nebula_memory::bevy::AllocationCheck::frames(100).warmup(10);
    /// # let _ = check;
    /// ```
    pub fn frames(frames: u32) -> Self {
        AllocationCheck { warmup: 3, frames }
    }

    /// Sets the frames run before recording. O(1).
    ///
    /// ```
    /// let check = nebula_memory::bevy::AllocationCheck::frames(100).warmup(0);
    /// # let _ = check;
    /// ```
    pub fn warmup(mut self, frames: u32) -> Self {
        self.warmup = frames;
        self
    }

    /// Runs `app` (`app.update()` once a frame) and records each of its system lines'
    /// figures every recorded frame. O(frames × lines).
    ///
    /// # Panics
    /// If the app has no `MemoryPlugin` (no [`MemoryLedger`]), or nothing is counted (no
    /// [`TrackingAllocator`](crate::TrackingAllocator) as the global allocator).
    pub fn run(&self, app: &mut App) -> AllocationRecord {
        for _ in 0..self.warmup {
            app.update();
        }
        let under = app
            .world()
            .get_resource::<AttributionConfig>()
            .map(|c| c.under)
            .unwrap_or_else(|| {
                panic!(
                    "AllocationCheck: the app has no MemoryPlugin (add MemoryPlugin::isolated())"
                )
            });
        let prefix = match under {
            Some(under) => format!("{under}/{SYSTEMS_TAG}/"),
            None => format!("{SYSTEMS_TAG}/"),
        };
        // Differences of the lines' running totals, not the ledger's per-frame counts:
        // another app in the process (a test on another thread) ends the ledger's frames
        // too.
        let mut lines: Vec<Line> = Vec::new();
        let app_lines = |app: &App| -> Vec<String> {
            let ledger = app.world().resource::<MemoryLedger>();
            ledger
                .tags()
                .filter_map(|(tag, _)| tag.strip_prefix(prefix.as_str()))
                .filter(|system| !system.contains('/'))
                .map(str::to_owned)
                .collect()
        };
        let totals = |system: &str| {
            crate::ledger::heap_totals(&format!("{prefix}{system}")).unwrap_or((0, 0, 0))
        };
        for system in app_lines(app) {
            let before = totals(&system);
            lines.push(Line {
                system,
                before,
                frames: Vec::new(),
            });
        }
        for frame in 0..self.frames {
            app.update();
            assert!(
                crate::heap::counters::in_use(),
                "AllocationCheck: no heap allocation was counted: install \
                 nebula_memory::TrackingAllocator as the test binary's #[global_allocator]"
            );
            for system in app_lines(app) {
                if !lines.iter().any(|l| l.system == system) {
                    lines.push(Line {
                        system,
                        before: (0, 0, 0),
                        frames: Vec::new(),
                    });
                }
            }
            for line in &mut lines {
                let now = totals(&line.system);
                line.frames.push(FrameFigures {
                    frame: u64::from(frame) + u64::from(self.warmup) + 1,
                    allocs: now.0.wrapping_sub(line.before.0),
                    bytes: usize::try_from(now.1.wrapping_sub(line.before.1)).unwrap_or(usize::MAX),
                    live: now.2,
                });
                line.before = now;
            }
        }
        AllocationRecord { lines }
    }
}

/// One system line's figures in one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameFigures {
    /// The app's frame number (1 is the first `update`).
    pub frame: u64,
    /// Heap allocation calls (`alloc` and `realloc`) this frame.
    pub allocs: u64,
    /// Heap bytes allocated this frame.
    pub bytes: usize,
    /// Heap bytes the system holds at the frame's end.
    pub live: usize,
}

struct Line {
    system: String,
    /// The line's running totals (allocation calls, bytes allocated, bytes live) at the
    /// last reading.
    before: (u64, u64, usize),
    frames: Vec<FrameFigures>,
}

/// What [`AllocationCheck::run`] recorded: every system line of the app, frame by frame.
/// The assertions panic with a message naming the system, the figure and the frame.
pub struct AllocationRecord {
    lines: Vec<Line>,
}

impl AllocationRecord {
    /// The systems recorded, by line name (`<short name>`, `<short name> #2`, ...).
    ///
    /// ```
    /// # fn record() -> nebula_memory::bevy::AllocationRecord { unimplemented!() }
    /// # fn _f() { let record = record();
    /// for system in record.systems() {
    ///     println!("{system}");
    /// }
    /// # }
    /// ```
    pub fn systems(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(|l| l.system.as_str())
    }

    /// The frames recorded of `system`'s line.
    ///
    /// # Panics
    /// If the app has no system of that name (the message lists those it has).
    pub fn frames_of(&self, system: &str) -> &[FrameFigures] {
        match self.lines.iter().find(|l| l.system == system) {
            Some(l) => &l.frames,
            None => panic!(
                "AllocationCheck: no system line '{system}' in this app (its lines: {})",
                self.systems().collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Fails if `system` made more than `allocs` heap allocations in any recorded frame.
    ///
    /// # Panics
    /// Naming the system, the count and the frame.
    #[track_caller]
    pub fn assert_allocs_at_most(&self, system: &str, allocs: u64) {
        if let Some(f) = self.frames_of(system).iter().find(|f| f.allocs > allocs) {
            panic!(
                "system '{system}' made {} heap allocations in frame {} (at most {allocs} \
                 allowed)",
                f.allocs, f.frame
            );
        }
    }

    /// Fails if `system` allocated more than `bytes` heap bytes in any recorded frame.
    ///
    /// # Panics
    /// Naming the system, the bytes and the frame.
    #[track_caller]
    pub fn assert_bytes_at_most(&self, system: &str, bytes: usize) {
        if let Some(f) = self.frames_of(system).iter().find(|f| f.bytes > bytes) {
            panic!(
                "system '{system}' allocated {} heap bytes in frame {} (at most {bytes} \
                 allowed)",
                f.bytes, f.frame
            );
        }
    }

    /// Fails if `system` made any heap allocation in a recorded frame (its steady state).
    ///
    /// # Panics
    /// Naming the system, the count and the first frame it allocated in.
    #[track_caller]
    pub fn assert_no_allocations(&self, system: &str) {
        if let Some(f) = self.frames_of(system).iter().find(|f| f.allocs > 0) {
            panic!(
                "system '{system}' made {} heap allocations ({} bytes) in frame {}, in its \
                 steady state (none allowed)",
                f.allocs, f.bytes, f.frame
            );
        }
    }

    /// Fails if `system`'s live heap keeps growing: higher at the end than at the start of
    /// the recording, and never back down to where it was halfway through (a buffer that
    /// grew once and then held still passes; a leak does not).
    ///
    /// # Panics
    /// Naming the system, its live bytes at the first and last recorded frames.
    #[track_caller]
    pub fn assert_not_growing(&self, system: &str) {
        let frames = self.frames_of(system);
        let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
            return;
        };
        let half = &frames[frames.len() / 2..];
        let lowest_later = half.iter().map(|f| f.live).min().unwrap_or(0);
        let mid = frames[frames.len() / 2].live;
        if last.live > first.live && lowest_later >= mid && last.live > mid {
            panic!(
                "system '{system}' keeps growing: {} heap bytes live at frame {}, {} at frame \
                 {}, never back down",
                first.live, first.frame, last.live, last.frame
            );
        }
    }

    /// Each system's mean allocations and bytes a frame, as baseline rows.
    fn means(&self) -> Vec<(String, f64, f64)> {
        self.lines
            .iter()
            .filter(|l| !l.frames.is_empty())
            .map(|l| {
                let n = l.frames.len() as f64;
                let allocs = l.frames.iter().map(|f| f.allocs as f64).sum::<f64>() / n;
                let bytes = l.frames.iter().map(|f| f.bytes as f64).sum::<f64>() / n;
                (l.system.clone(), allocs, bytes)
            })
            .collect()
    }

    /// Compares each system's mean heap allocations and bytes a frame with the baseline in
    /// `path` (a CSV this method wrote: `system,allocs_per_frame,bytes_per_frame`): fails
    /// if one rose by more than `tolerance` (0.10: 10%, and at least one allocation or 64
    /// bytes), listing every line that did. A missing file, or `NEBULA_MEMORY_BLESS=1` in
    /// the environment, writes the baseline instead (the one command to update it:
    /// `NEBULA_MEMORY_BLESS=1 cargo test`). Systems not in the baseline are listed, not
    /// failed.
    ///
    /// # Panics
    /// Naming each system, the figure, the baseline's and the tolerance; or if the file
    /// cannot be read or written.
    #[track_caller]
    pub fn check_baseline(&self, path: impl AsRef<Path>, tolerance: f64) {
        let path = path.as_ref();
        let bless = std::env::var_os(BLESS_VAR).is_some_and(|v| v == "1");
        let now = self.means();
        if bless || !path.exists() {
            let mut text = String::from("system,allocs_per_frame,bytes_per_frame\n");
            for (system, allocs, bytes) in &now {
                let _ = writeln!(text, "{},{allocs:.2},{bytes:.1}", system.replace(',', ";"));
            }
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(path, text).unwrap_or_else(|e| {
                panic!(
                    "AllocationCheck: cannot write the baseline {}: {e}",
                    path.display()
                )
            });
            return;
        }
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!(
                "AllocationCheck: cannot read the baseline {}: {e}",
                path.display()
            )
        });
        let mut risen = Vec::new();
        let mut new = Vec::new();
        for (system, allocs, bytes) in &now {
            let key = system.replace(',', ";");
            let Some(row) = text.lines().skip(1).find_map(|l| {
                let mut parts = l.split(',');
                (parts.next() == Some(key.as_str())).then(|| {
                    let a: f64 = parts.next()?.parse().ok()?;
                    let b: f64 = parts.next()?.parse().ok()?;
                    Some((a, b))
                })?
            }) else {
                new.push(system.as_str());
                continue;
            };
            let (was_allocs, was_bytes) = row;
            if *allocs > (was_allocs * (1.0 + tolerance)).max(was_allocs + 1.0) {
                risen.push(format!(
                    "system '{system}': {allocs:.2} heap allocations a frame, baseline \
                     {was_allocs:.2}"
                ));
            }
            if *bytes > (was_bytes * (1.0 + tolerance)).max(was_bytes + 64.0) {
                risen.push(format!(
                    "system '{system}': {bytes:.1} heap bytes a frame, baseline {was_bytes:.1}"
                ));
            }
        }
        if !risen.is_empty() {
            panic!(
                "allocations rose beyond the baseline {} (tolerance {:.0}%):\n  {}\n{}(to \
                 accept the new figures: {BLESS_VAR}=1 cargo test)",
                path.display(),
                tolerance * 100.0,
                risen.join("\n  "),
                if new.is_empty() {
                    String::new()
                } else {
                    format!("systems not in the baseline: {}\n", new.join(", "))
                }
            );
        }
    }
}
