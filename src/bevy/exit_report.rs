//! The ledger when the app exits: `App::run` takes the app, so a program that only calls
//! `run` cannot read [`MemoryLedger`] afterwards. With `MemoryPlugin::exit_report` set,
//! the frame in which an [`AppExit`] is sent ends by writing the ledger's table (the same
//! as `println!("{}", **ledger)`) where the app asked, then its warnings (lines rising,
//! over a budget, or that crossed one: `LedgerSnapshot::warnings`), which a headless app
//! with no `tracing` subscriber sees nowhere else, and the plugin's note if the systems'
//! lines may be inexact (see `exactness`). To a path ending in `.html`, it writes the
//! memory page of the ledger's history instead (`ledger::page`). [`REPORT_VAR`] names a
//! destination from the environment, for a program whose code does not ask for one.

use std::io::Write;
use std::path::PathBuf;

use bevy_app::AppExit;
use bevy_ecs::message::Messages;
use bevy_ecs::prelude::*;

use super::exactness::Exactness;
use super::ledger::MemoryLedger;

/// The environment variable that turns the exit report on without a change of code:
/// `NEBULA_MEMORY_REPORT=frames.html cargo run` writes the memory page when the app exits
/// (any other path: the table; `-`: standard error). Read when `MemoryPlugin` is built;
/// it overrides `MemoryPlugin::exit_report`.
///
/// ```
/// assert_eq!(nebula_memory::bevy::REPORT_VAR, "NEBULA_MEMORY_REPORT");
/// ```
pub const REPORT_VAR: &str = "NEBULA_MEMORY_REPORT";

/// Where [`MemoryPlugin`](super::MemoryPlugin) writes the ledger's table when the app
/// exits.
///
/// ```
/// use nebula_memory::bevy::{ExitReport, MemoryPlugin};
/// let plugin = MemoryPlugin {
///     exit_report: ExitReport::Stderr,
///     ..Default::default()
/// };
/// # let _ = plugin;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Resource)]
pub enum ExitReport {
    /// No report (the default).
    #[default]
    Off,
    /// The table on standard error.
    Stderr,
    /// The table in this file (created or truncated), or the memory page if its name ends
    /// in `.html` or `.htm`; if it cannot be written, a WARN says why, and standard error
    /// too.
    File(PathBuf),
}

impl ExitReport {
    /// The destination [`REPORT_VAR`] names, if it is set and not empty.
    pub(crate) fn from_env() -> Option<ExitReport> {
        let v = std::env::var_os(REPORT_VAR).filter(|v| !v.is_empty())?;
        Some(if v == "-" {
            ExitReport::Stderr
        } else {
            ExitReport::File(PathBuf::from(v))
        })
    }

    /// Whether this destination gets the memory page (a path ending in `.html` or `.htm`).
    ///
    /// ```
    /// use nebula_memory::bevy::ExitReport;
    /// assert!(ExitReport::File("frames.html".into()).is_page());
    /// assert!(!ExitReport::File("frames.txt".into()).is_page());
    /// ```
    pub fn is_page(&self) -> bool {
        matches!(self, ExitReport::File(p) if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm")))
    }
}

/// After the ledger's frame end: if a report was asked for and an `AppExit` was sent
/// this frame, writes the table.
pub(crate) fn report_on_exit(world: &mut World) {
    let report = match world.get_resource::<ExitReport>() {
        None | Some(ExitReport::Off) => return,
        Some(report) => report,
    };
    let exiting = world
        .get_resource::<Messages<AppExit>>()
        .is_some_and(|m| m.iter_current_update_messages().next().is_some());
    let Some(ledger) = world.get_resource::<MemoryLedger>() else {
        return;
    };
    if !exiting {
        return;
    }
    if let ExitReport::File(path) = report
        && report.is_page()
    {
        if let Err(e) = ledger.write_page(path) {
            tracing::warn!("MemoryPlugin: {e}");
            let _ = writeln!(std::io::stderr(), "nebula_memory: {e}");
        }
        return;
    }
    let mut table = format!(
        "nebula_memory ledger at exit (frame {}):\n{}\n",
        ledger.frame(),
        **ledger
    );
    let warnings = ledger.warnings();
    if !warnings.is_empty() {
        table.push_str(&format!("\nwarnings:\n{warnings}"));
    }
    // Sampling on: where in the code the flagged and the busiest lines' heap comes from.
    if crate::ledger::sampling().is_some() {
        table.push('\n');
        table.push_str(&ledger.call_site_report());
    }
    if let Some(note) = world
        .get_resource::<Exactness>()
        .and_then(|e| e.note.as_ref())
    {
        table = format!("{table}\nNote: {note}\n");
    }
    if let ExitReport::File(path) = report {
        if let Err(e) = std::fs::write(path, table) {
            tracing::warn!(
                path = %path.display(),
                "MemoryPlugin: cannot write the exit report: {e}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "nebula_memory: cannot write the exit report to {}: {e}",
                path.display()
            );
        }
    } else {
        let _ = std::io::stderr().lock().write_all(table.as_bytes());
    }
}
