//! The ledger when the app exits: `App::run` takes the app, so a program that only calls
//! `run` cannot read [`MemoryLedger`] afterwards. With `MemoryPlugin::exit_report` set,
//! the frame in which an [`AppExit`] is sent ends by writing the ledger's table (the same
//! as `println!("{}", **ledger)`) where the app asked, then its warnings (lines rising,
//! over a budget, or that crossed one: `LedgerSnapshot::warnings`), which a headless app
//! with no `tracing` subscriber sees nowhere else, and the plugin's note if the systems'
//! lines may be inexact (see `exactness`).

use std::io::Write;
use std::path::PathBuf;

use bevy_app::AppExit;
use bevy_ecs::message::Messages;
use bevy_ecs::prelude::*;

use super::exactness::Exactness;
use super::ledger::MemoryLedger;

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
    /// The table in this file (created or truncated); if it cannot be written, a WARN
    /// says why.
    File(PathBuf),
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
        }
    } else {
        let _ = std::io::stderr().lock().write_all(table.as_bytes());
    }
}
