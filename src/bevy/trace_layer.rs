//! [`AttributionLayer`]: a `tracing` layer that charges the work of Bevy's spans to the
//! system that started it, on whichever thread it runs (needs `bevy_ecs`'s `trace`).
//!
//! **Why spans.** `bevy_tasks` has no hook around a task's poll: a thread that waits in one
//! system's `par_iter` (`TaskPool::scope` ticks the shared executor) runs other systems'
//! batches, in the waiting system's heap scope, and an idle worker runs them outside every
//! system. With `trace`, Bevy enters two spans the layer can use:
//! - `par_for_each`, around every `par_iter` batch. It is made with its `QueryState`, when
//!   the owning system is initialized (the plugin's wrapper initializes it in its line's
//!   scope) or during a run (a transmuted or joined query): the layer remembers the heap
//!   scope current when the span was made, and enters it around each batch, on the
//!   batch's thread. So a batch is its query's maker's, whoever runs it.
//! - `system`, around every `FunctionSystem` run. A run the plugin wrapped is already in
//!   its line's scope (the wrapper marks the thread: a `system` span entered just inside
//!   a wrapper is the wrapped system's own). Any other run (an observer, a one-shot
//!   system, a run condition, a system run from inside another system's run) enters a line
//!   of its own: `observers/<name>` for an observer (the plugin records observers' names
//!   when they are added), `runs/<name>` otherwise.
//! - `multithreaded executor`, around each tick of Bevy's executor, which may run on a
//!   thread waiting in a system's `par_iter`: `bevy/executor`.
//!
//! Spans are entered and exited on one thread, so the scopes the layer enters are kept on
//! a per-thread stack and dropped at the span's exit (heap scopes end in any order).
//! A span is enabled only if a subscriber was set when it was made, so the layer must be
//! in the subscriber before the app's systems are made.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};

use bevy_ecs::utils::prelude::DebugName;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::fork::{Level, Lock};
use crate::ledger::{self, HeapScope, TagScope, node_heap_id};

/// The parent tag of the crate's own systems' heap lines (its frame end, the wrapping).
///
/// ```
/// assert_eq!(nebula_memory::bevy::CRATE_SYSTEMS_TAG, "nebula_memory");
/// ```
pub const CRATE_SYSTEMS_TAG: &str = "nebula_memory";

/// The parent tag of the lines of observers' runs (with [`AttributionLayer`]).
///
/// ```
/// assert_eq!(nebula_memory::bevy::OBSERVERS_TAG, "observers");
/// ```
pub const OBSERVERS_TAG: &str = "observers";
/// The parent tag of the lines of other system runs outside the schedules' systems: one-shot
/// systems, run conditions, systems run from inside another system's run (with
/// [`AttributionLayer`]).
///
/// ```
/// assert_eq!(nebula_memory::bevy::RUNS_TAG, "runs");
/// ```
pub const RUNS_TAG: &str = "runs";
/// The line of Bevy's multi-threaded executor's ticks (with [`AttributionLayer`]).
///
/// ```
/// assert_eq!(nebula_memory::bevy::EXECUTOR_TAG, "bevy/executor");
/// ```
pub const EXECUTOR_TAG: &str = "bevy/executor";

/// A `tracing_subscriber` layer that makes heap attribution exact on a compute pool of any
/// size: each `par_iter` batch is charged to the system whose query it iterates, on
/// whichever thread runs it, and observers, one-shot systems and run conditions get lines
/// of their own (`observers/<name>`, `runs/<name>`; observers by their system's name).
/// It needs Bevy's `trace` feature (`bevy_ecs/trace`), bevy_ecs's INFO spans enabled, and
/// the layer in the subscriber before the app's systems are made: with Bevy's `LogPlugin`
/// through its `custom_layer`, in a headless app as the global default. Without it, on a
/// compute pool of more than one thread, `MemoryPlugin` warns once.
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt;
/// use nebula_memory::bevy::AttributionLayer;
///
/// let subscriber = tracing_subscriber::Registry::default().with(AttributionLayer::new());
/// // In a program: tracing::subscriber::set_global_default(subscriber), then build the app.
/// # drop(subscriber);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct AttributionLayer {
    _private: (),
}

impl AttributionLayer {
    /// The layer. O(1).
    ///
    /// ```
    /// let _layer = nebula_memory::bevy::AttributionLayer::new();
    /// ```
    pub fn new() -> AttributionLayer {
        AttributionLayer { _private: () }
    }
}

/// Whether some subscriber has taken an `AttributionLayer`.
static LAYER_MADE: AtomicBool = AtomicBool::new(false);
/// Whether an `AttributionLayer` has seen one of Bevy's spans made: `trace` is on and the
/// layer is in the subscriber that made it. Until then nothing marks threads.
static SEEN: AtomicBool = AtomicBool::new(false);

/// Whether an `AttributionLayer` was put in a subscriber, and whether it has seen Bevy's
/// spans.
pub(crate) fn layer_state() -> (bool, bool) {
    (LAYER_MADE.load(Relaxed), SEEN.load(Relaxed))
}

/// The full names of observers' systems (recorded by the plugin as observers are added).
static OBSERVERS: Lock<Option<HashSet<String>>> = Lock::new(Level::Attribution, None);

/// Records that systems named `name` are observers. O(1).
pub(crate) fn record_observer(name: String) {
    OBSERVERS
        .lock()
        .get_or_insert_with(HashSet::new)
        .insert(name);
}

/// What the layer keeps in one of Bevy's spans.
enum Kind {
    /// `par_for_each`: the scope its query state was made in.
    Batch(HeapScope),
    /// `system`: the system's full name, and the heap id + 1 of its line as a run outside
    /// the wrapped systems (0: not named yet).
    System { name: String, line: AtomicU32 },
    /// `multithreaded executor`.
    Executor,
}

/// One entry of a thread's stack.
enum Entry {
    /// A wrapped system's run (`own`: its `system` spans are its own) or its commands.
    Wrapper { own: bool },
    /// A span entered, and the scope it entered, if any.
    Span { id: u64, _scope: Option<TagScope> },
}

/// Entries a thread's stack holds; one past that is dropped at once (its span's work is
/// charged to the scope beneath).
const DEPTH: usize = 64;

/// A thread's entries, `entries[..len]`, oldest first: a fixed array, so that the layer
/// never allocates in the scope of the system it marks.
struct Stack {
    len: usize,
    entries: [Option<Entry>; DEPTH],
}

impl Stack {
    fn last(&self) -> Option<&Entry> {
        self.entries[..self.len].last()?.as_ref()
    }
    /// Removes the newest entry that `matches`, and returns it.
    fn remove(&mut self, matches: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let live = &mut self.entries[..self.len];
        let i = live
            .iter()
            .rposition(|e| e.as_ref().is_some_and(&matches))?;
        let entry = live[i].take();
        live[i..].rotate_left(1);
        self.len -= 1;
        entry
    }
}

thread_local! {
    static ENTERED: RefCell<Stack> = const {
        RefCell::new(Stack { len: 0, entries: [const { None }; DEPTH] })
    };
}

fn push(entry: Entry) {
    // After the thread-local's destruction (late in the thread's exit) nothing is marked.
    let _ = ENTERED.try_with(|s| {
        let mut s = s.borrow_mut();
        let len = s.len;
        if let Some(slot) = s.entries.get_mut(len) {
            *slot = Some(entry);
            s.len = len + 1;
        }
    });
}

/// The mark a wrapped system's run (or commands) leaves on its thread while it lasts:
/// tells the layer that a `system` span entered just inside it is the system's own.
pub(crate) struct Mark(bool);

impl Mark {
    /// Marks the thread if an `AttributionLayer` is at work. O(1).
    pub(crate) fn enter(own: bool) -> Mark {
        if !SEEN.load(Relaxed) {
            return Mark(false);
        }
        push(Entry::Wrapper { own });
        Mark(true)
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        if self.0 {
            let _ = ENTERED.try_with(|s| {
                s.borrow_mut()
                    .remove(|e| matches!(e, Entry::Wrapper { .. }))
            });
        }
    }
}

/// Whether the thread is just inside a wrapped system's run.
fn just_inside_a_wrapper() -> bool {
    ENTERED
        .try_with(|s| matches!(s.borrow().last(), Some(Entry::Wrapper { own: true })))
        .unwrap_or(false)
}

/// Whether `meta` is one of the spans the layer uses.
fn ours(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with("bevy_ecs")
        && matches!(
            meta.name(),
            "par_for_each" | "system" | "multithreaded executor"
        )
}

/// The heap id of the line of a run of `name` outside the wrapped systems.
fn run_line(name: &str) -> u16 {
    let short = DebugName::owned(name.to_owned())
        .shortname()
        .to_string()
        .replace('/', ":");
    let observer = OBSERVERS.lock().as_ref().is_some_and(|o| o.contains(name));
    let parent = if name.starts_with("nebula_memory::") {
        CRATE_SYSTEMS_TAG
    } else if observer {
        OBSERVERS_TAG
    } else {
        RUNS_TAG
    };
    node_heap_id(&format!("{parent}/{short}"))
}

/// Reads a `system` span's `name` field.
struct NameField(String);

impl Visit for NameField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "name" {
            value.clone_into(&mut self.0);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "name" && self.0.is_empty() {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S> Layer<S> for AttributionLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_layer(&mut self, _subscriber: &mut S) {
        LAYER_MADE.store(true, Relaxed);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if !ours(meta) {
            return;
        }
        let kind = match meta.name() {
            "par_for_each" => Kind::Batch(ledger::current_scope()),
            "system" => {
                let mut name = NameField(String::new());
                attrs.record(&mut name);
                Kind::System {
                    name: name.0,
                    line: AtomicU32::new(0),
                }
            }
            _ => Kind::Executor,
        };
        SEEN.store(true, Relaxed);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(kind);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if !ours(span.metadata()) {
            return;
        }
        let scope = {
            let ext = span.extensions();
            match ext.get::<Kind>() {
                None => return,
                Some(Kind::Batch(scope)) => Some(scope.enter()),
                Some(Kind::System { .. }) if just_inside_a_wrapper() => None,
                Some(Kind::System { name, line }) => {
                    let id = match line.load(Relaxed) {
                        0 => {
                            let id = run_line(name);
                            line.store(u32::from(id) + 1, Relaxed);
                            id
                        }
                        n => (n - 1) as u16,
                    };
                    Some(TagScope::enter_id(id))
                }
                Some(Kind::Executor) => Some(TagScope::enter_id(executor_line())),
            }
        };
        push(Entry::Span {
            id: id.into_u64(),
            _scope: scope,
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let id = id.into_u64();
        let entry = ENTERED.try_with(|s| {
            s.borrow_mut()
                .remove(|e| matches!(e, Entry::Span { id: e, .. } if *e == id))
        });
        // The scope ends here, outside the borrow.
        drop(entry);
    }
}

/// The heap id of [`EXECUTOR_TAG`], looked up once.
fn executor_line() -> u16 {
    static ID: AtomicU32 = AtomicU32::new(0);
    match ID.load(Relaxed) {
        0 => {
            let id = node_heap_id(EXECUTOR_TAG);
            ID.store(u32::from(id) + 1, Relaxed);
            id
        }
        n => (n - 1) as u16,
    }
}
