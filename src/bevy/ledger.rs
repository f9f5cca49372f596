//! The ledger in a Bevy app: the frame's snapshot as a resource, its history (the last
//! `MemoryPlugin::history_frames` frames, for the memory page and the remote methods), a
//! diagnostic per top-level tag, and the per-frame CSV.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Deref;
use std::path::{Path, PathBuf};

use crate::fork::{Level, Lock};
use bevy_diagnostic::{Diagnostic, DiagnosticPath, DiagnosticsStore};
use bevy_ecs::prelude::*;

use crate::ledger::page::Page;
use crate::ledger::{self, History, LedgerSnapshot};

/// The ledger's figures at the end of the last frame (see [`ledger`](crate::ledger)),
/// updated by `MemoryPlugin` after the frame-end reset; derefs to the
/// [`LedgerSnapshot`]. With `MemoryPlugin::ledger_csv` set, each frame's rows are also
/// written to that file.
///
/// ```standalone_crate
/// use bevy_app::App;
/// use nebula_memory::Arena;
/// use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, Scratch};
///
/// let mut app = App::new();
/// app.add_plugins(MemoryPlugin::default())
///     .add_systems(bevy_app::Update, |scratch: Scratch| {
///         scratch.alloc_slice(1000, 0u8);
///     });
/// app.update();
/// let ledger = app.world().resource::<MemoryLedger>();
/// assert_eq!(ledger.frame(), 1);
/// assert!(ledger.tag("scratch/systems").unwrap().held > 0);
/// println!("{}", **ledger); // the tree table
/// ```
///
/// **Reading it every frame.** The plugin updates it in `Last`, in
/// [`MemorySystems::Reset`](super::MemorySystems::Reset); a system that reads it there
/// sees the frame just ended (anywhere else, the one before):
///
/// ```standalone_crate
/// use bevy_app::{App, Last};
/// use bevy_ecs::prelude::*;
/// use nebula_memory::bevy::{MemoryLedger, MemoryPlugin, MemorySystems};
///
/// fn watch(ledger: Res<MemoryLedger>, mut seen: Local<u64>) {
///     *seen = ledger.frame(); // this frame's figures
/// }
/// let mut app = App::new();
/// app.add_plugins(MemoryPlugin::default())
///     .add_systems(Last, watch.after(MemorySystems::Reset));
/// app.update();
/// ```
///
/// A program that only calls `App::run` (which takes the app) gets the table, or the memory
/// page, when it exits with `MemoryPlugin::exit_report`.
///
/// **Its history.** The last `MemoryPlugin::history_frames` frames of every line
/// ([`History`]), recorded at each frame's end from the same snapshot:
/// [`write_page`](Self::write_page) writes them as the memory page.
#[derive(Resource, Default)]
pub struct MemoryLedger {
    snapshot: LedgerSnapshot,
    history: History,
    frame: u64,
    /// The top-level tags that have diagnostics, with their paths: bytes held (pool
    /// blocks) and heap bytes live.
    diagnostics: Vec<TagDiagnostics>,
    csv: Option<Csv>,
}

/// A top-level tag's diagnostic paths.
#[derive(Clone)]
struct TagDiagnostics {
    tag: &'static str,
    held: DiagnosticPath,
    heap: DiagnosticPath,
}

/// A top-level tag's diagnostic paths, borrowing strings that live for ever (each
/// measurement clones a path, which for an owned string would allocate every frame).
/// Leaked once per process and tag: every `MemoryLedger` (an app made again and again)
/// reuses them.
fn tag_diagnostics(tag: &'static str) -> TagDiagnostics {
    static MADE: Lock<Vec<TagDiagnostics>> = Lock::new(Level::Diagnostics, Vec::new());
    let mut made = MADE.lock();
    if let Some(d) = made.iter().find(|d| d.tag == tag) {
        return d.clone();
    }
    let leaked = |path: String| DiagnosticPath::const_new(Box::leak(path.into_boxed_str()));
    let d = TagDiagnostics {
        tag,
        held: leaked(format!("nebula_memory/tag/{tag}/held")),
        heap: leaked(format!("nebula_memory/tag/{tag}/heap")),
    };
    made.push(d.clone());
    d
}

/// The per-frame CSV file.
struct Csv {
    path: PathBuf,
    out: BufWriter<File>,
    /// The first write error, after which nothing more is written.
    failed: bool,
}

impl MemoryLedger {
    /// A ledger resource that also writes each frame's rows to `path` (created, or
    /// truncated, now; the header is written at once).
    ///
    /// # Errors
    /// Creating the file, or writing its header.
    pub fn with_csv(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut out = BufWriter::new(File::create(&path)?);
        LedgerSnapshot::write_csv_header(&mut out)?;
        out.flush()?;
        Ok(MemoryLedger {
            csv: Some(Csv {
                path,
                out,
                failed: false,
            }),
            ..MemoryLedger::default()
        })
    }

    /// Frames recorded so far (the snapshot is that frame's).
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// The last frames of every line (as many as `MemoryPlugin::history_frames`; none
    /// for a resource made by hand), their numbers those of [`frame`](Self::frame).
    ///
    /// ```standalone_crate
    /// use bevy_app::App;
    /// use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};
    ///
    /// let mut app = App::new();
    /// app.add_plugins(MemoryPlugin { history_frames: 2, ..Default::default() });
    /// for _ in 0..3 {
    ///     app.update();
    /// }
    /// let history = app.world().resource::<MemoryLedger>().history();
    /// assert_eq!(history.frames().collect::<Vec<_>>(), [2, 3]);
    /// ```
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Keeps the last `frames` frames from now on (what was kept is dropped). O(1).
    pub(crate) fn keep_history(&mut self, frames: usize) {
        self.history = History::new(frames);
    }

    /// Writes the memory page of the history to `path` (see
    /// [`ledger::page`](crate::ledger::page)), titled with the program's name.
    ///
    /// # Errors
    /// Creating or writing the file; the message names the path.
    ///
    /// ```standalone_crate
    /// use bevy_app::App;
    /// use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};
    ///
    /// let mut app = App::new();
    /// app.add_plugins(MemoryPlugin::default());
    /// app.update();
    /// let path = std::env::temp_dir().join(format!("doc-page-{}.html", std::process::id()));
    /// app.world().resource::<MemoryLedger>().write_page(&path).unwrap();
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("<canvas"));
    /// # std::fs::remove_file(&path).ok();
    /// ```
    pub fn write_page(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let name = program_name();
        Page::new(name.clone())
            .run(name, &self.history)
            .call_sites()
            .write_to(path)
    }

    /// The CSV file's path, if the ledger writes one.
    pub fn csv_path(&self) -> Option<&Path> {
        self.csv.as_ref().map(|c| c.path.as_path())
    }

    /// Records the frame's snapshot: writes its CSV rows (and flushes, so the file is
    /// whole after every frame) and returns the top-level tags that have no diagnostics
    /// yet.
    fn record(&mut self) -> Vec<TagDiagnostics> {
        self.frame += 1;
        self.history.record(&self.snapshot);
        let snapshot = &self.snapshot;
        if let Some(csv) = self.csv.as_mut().filter(|c| !c.failed) {
            let written = snapshot
                .write_csv_rows(&mut csv.out, self.frame)
                .and_then(|()| csv.out.flush());
            if let Err(e) = written {
                csv.failed = true;
                let path = csv.path.display();
                tracing::warn!("memory ledger: writing {path} failed ({e}); no more rows");
            }
        }
        let new: Vec<_> = snapshot
            .tags()
            .filter(|(t, _)| !t.contains('/'))
            .filter(|(t, _)| !self.diagnostics.iter().any(|d| d.tag == *t))
            .map(|(tag, _)| tag_diagnostics(tag))
            .collect();
        self.diagnostics.extend(new.iter().cloned());
        new
    }

    /// The top-level tags' diagnostic paths and their figures now: bytes held, heap bytes
    /// live.
    pub(crate) fn measurements(&self) -> impl Iterator<Item = (&DiagnosticPath, f64)> {
        self.diagnostics.iter().flat_map(|d| {
            let f = self.snapshot.tag(d.tag).unwrap_or_default();
            [(&d.held, f.held as f64), (&d.heap, f.heap_live as f64)]
        })
    }
}

/// The running program's file name, without its extension (a page's title).
pub(crate) fn program_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "app".to_owned())
}

/// The snapshot's tree table (see [`LedgerSnapshot`]'s `Display`), after the frame number.
impl std::fmt::Display for MemoryLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "memory ledger, frame {}:", self.frame)?;
        self.snapshot.fmt(f)
    }
}

impl Deref for MemoryLedger {
    type Target = LedgerSnapshot;
    fn deref(&self) -> &LedgerSnapshot {
        &self.snapshot
    }
}

/// The ledger's part of the frame end: takes the frame's snapshot
/// ([`ledger::end_frame`], which also feeds the profiler), stores it in [`MemoryLedger`],
/// writes the CSV rows and registers a diagnostic for each new top-level tag.
pub(crate) fn record_ledger_frame(world: &mut World) {
    let Some(mut ledger) = world.get_resource_mut::<MemoryLedger>() else {
        ledger::end_frame();
        return;
    };
    // Into the resource's own snapshot: once warm, a frame end allocates nothing.
    ledger::end_frame_into_quietly(&mut ledger.snapshot);
    let new = ledger.record();
    if let Some(mut store) = world.get_resource_mut::<DiagnosticsStore>() {
        for path in new.into_iter().flat_map(|d| [d.held, d.heap]) {
            if store.get(&path).is_none() {
                store.add(Diagnostic::new(path).with_suffix(" B"));
            }
        }
    }
    // Told once the snapshot, its CSV row and the diagnostics are recorded.
    crate::ledger::emit_pending_warnings();
}
