//! The Tracy receiver (feature `tracy`): each tag is a named memory pool in Tracy's memory
//! view, each block taken or given back one allocation or free event in it, and each
//! frame two plots per tag (`<tag> held`, `<tag> used`, in bytes).
//!
//! `tracy-client` has no safe wrapper for named memory pools, so the C calls live
//! here and nowhere else (with the client's shutdown). A frame in which no block moves
//! sends no memory event, only the plots.
//!
//! **Sampled heap allocations** (with sampling on, `ledger::set_sampling`) go to a pool of
//! their own per tag, `<tag> heap (sampled)`, each with a call stack Tracy takes itself:
//! Tracy's memory view then shows where the sampled heap comes from, at the cost of a
//! stack per sample, not per allocation (Bevy's `trace_tracy_memory` takes one on every
//! allocation). They are told from inside the allocator, so only when the receiver's lock
//! is free at once (`try_read`: never waiting there), and only once the tag's pool name
//! exists (made at a frame end, outside any allocation); a free is told only for a sample
//! whose allocation was. Each shows its own size (Tracy cannot weight it).
//!
//! The switch that keeps the client's lifetime safe ([`TracyGuard`], and why it works this
//! way) is described in the [`ledger`](super) module's docs, section "Tracy". In short:
//! every event is handed to Tracy under the read lock of [`STATE`]; turning the receiver
//! off takes the write lock, so it waits for the events in flight and no event starts
//! after it; Tracy's shutdown runs only after the receiver is `Stopped`.

use std::collections::HashMap;
use std::ffi::c_char;
use std::ffi::{CString, c_void};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use tracy_client::{Client, PlotConfiguration, PlotFormat, PlotName};

use super::event::{LedgerEvent, set_frame_marks, set_tracy};
use crate::fork::{Level, Lock, RwLockStatic};

/// Where the receiver is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receiver {
    /// No guard alive: nothing goes to Tracy.
    Off,
    /// `guards` guards alive: events go to the client.
    On { guards: usize },
    /// A guard's `shutdown` stopped the client: nothing goes to Tracy again.
    Stopped,
}

struct State {
    receiver: Receiver,
    /// The thread on which `enable_tracy` started the client, if the crate started it.
    started_on: Option<ThreadId>,
}

/// The receiver's switch. Events are handed to Tracy under the read lock; every change of
/// `receiver` takes the write lock, so it waits for events in flight and none starts after.
static STATE: RwLockStatic<State> = RwLockStatic::new(
    Level::Tracy,
    State {
        receiver: Receiver::Off,
        started_on: None,
    },
);
/// Events handed to the Tracy client so far.
static SENT: AtomicU64 = AtomicU64::new(0);

/// Per tag: the pool name (a C string that lives for ever, as Tracy keeps the pointer) and
/// the two plot names.
struct Names {
    pool: &'static CString,
    held: PlotName,
    used: PlotName,
    /// Made at the tag's first heap plot point: a configured plot shows in Tracy even with
    /// no point, and programs without heap tracking send none.
    heap: Option<PlotName>,
}

static NAMES: Lock<Option<HashMap<&'static str, Names>>> = Lock::new(Level::TracyNames, None);

/// One of `guards` guards is gone: the receiver stays on for the rest, or turns off.
fn count_off(state: &mut State, guards: usize) {
    let rest = guards.saturating_sub(1);
    let receiver = if rest == 0 {
        Receiver::Off
    } else {
        Receiver::On { guards: rest }
    };
    set_receiver(state, receiver);
}

/// Sets `receiver` (under the write lock) and everything derived from it.
fn set_receiver(state: &mut State, receiver: Receiver) {
    state.receiver = receiver;
    let on = matches!(receiver, Receiver::On { .. });
    if !on {
        set_frame_marks(false);
    }
    // The relaxed copy the ledger's sink reads for its one check on the block path.
    set_tracy(on);
}

/// Starts the Tracy client (if no one has) and sends the ledger's events to it while the
/// returned guard (or another one) is alive; with `frame_marks`,
/// [`end_frame`](super::end_frame) also marks a frame, for apps that have no other frame
/// marker (headless ones). Without a profiler connected the client keeps the events
/// queued until one connects. O(1).
///
/// The client listens on [`TracyGuard::port`]. Keep the guard for as long as the ledger
/// should report; see the [guard](TracyGuard) for how a program hands everything over
/// before it exits.
///
/// # Panics
/// After [`TracyGuard::shutdown`] stopped the client: tracy-client cannot start it again.
///
/// ```no_run
/// let tracy = nebula_memory::ledger::enable_tracy(true);
/// // ... the game's frames, each ending with `ledger::end_frame()` ...
/// drop(tracy); // the ledger's events stop; the client keeps running
/// ```
#[track_caller]
pub fn enable_tracy(frame_marks: bool) -> TracyGuard {
    let mut state = STATE.write();
    let guards = match state.receiver {
        Receiver::Stopped => panic!(
            "ledger::enable_tracy after TracyGuard::shutdown: tracy-client cannot start a \
             stopped Tracy client again"
        ),
        Receiver::Off => 1,
        Receiver::On { guards } => guards.saturating_add(1),
    };
    if !Client::is_running() {
        state.started_on = Some(std::thread::current().id());
    }
    let _client = Client::start();
    set_receiver(&mut state, Receiver::On { guards });
    crate::heap::sample::observe(tell_sample);
    set_frame_marks(frame_marks);
    TracyGuard {
        _not_send: PhantomData,
    }
}

/// How many events the ledger has handed to the Tracy client in this process (blocks
/// taken and given back, plot points, frame marks). It stops moving when the last
/// [`TracyGuard`] is gone: what a test or a tool checks to know that nothing went to
/// Tracy after that. O(1).
///
/// ```
/// use nebula_memory::ledger;
/// let before = ledger::tracy_events_sent();
/// ledger::end_frame(); // no guard alive in this program: Tracy is sent nothing
/// assert_eq!(ledger::tracy_events_sent(), before);
/// ```
pub fn tracy_events_sent() -> u64 {
    SENT.load(Relaxed)
}

/// Keeps the ledger's events going to Tracy: returned by [`enable_tracy`].
///
/// - **Dropped**, it turns the ledger's events off once no other guard is alive: when the
///   drop returns, no thread is sending one and none will (events of arenas that outlive
///   it, such as the global ones, are counted by the ledger and not sent). The Tracy
///   client keeps running, as other code in the process may use it (the [`ledger`](super)
///   module's docs, section "Tracy", say why tracy-client cannot be stopped under them).
/// - **[`shutdown`](Self::shutdown)** (`unsafe`) also hands everything the client has to a
///   connected profiler and stops the client: what a program that is Tracy's only user
///   calls last, so that a profiler gets the whole run.
/// - **[`wait_for_profiler`](Self::wait_for_profiler)** waits, up to a time limit, for a
///   profiler to connect on [`port`](Self::port).
///
/// The guard is neither `Send` nor `Sync`: Tracy's manual lifetime ends the client on the
/// thread that started it, so the guard stays on the thread that called `enable_tracy`.
///
/// ```no_run
/// use std::time::Duration;
/// use nebula_memory::ledger::{self, TracyEnd};
///
/// let tracy = ledger::enable_tracy(true);
/// println!("Tracy on, waiting up to 10 s for a profiler on port {}", tracy.port());
/// tracy.wait_for_profiler(Duration::from_secs(10));
/// for _frame in 0..300 {
///     // ... the frame's work ...
///     ledger::end_frame();
/// }
/// // SAFETY: nothing else in this program uses Tracy, now or later.
/// match unsafe { tracy.shutdown() } {
///     TracyEnd::HandedOver => println!("the profiler has the whole run"),
///     end => println!("Tracy: {end:?}"),
/// }
/// ```
#[must_use = "dropping the guard turns the ledger's Tracy events off at once"]
#[derive(Debug)]
pub struct TracyGuard {
    /// Tracy's manual lifetime ends on the thread that started it.
    _not_send: PhantomData<*const ()>,
}

/// How [`TracyGuard::shutdown`] ended.
///
/// ```no_run
/// use nebula_memory::ledger::{self, TracyEnd};
/// let tracy = ledger::enable_tracy(false);
/// // SAFETY: nothing else in this program uses Tracy, now or later.
/// if unsafe { tracy.shutdown() } == TracyEnd::NoProfiler {
///     eprintln!("no profiler was connected: the run is in no trace");
/// }
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TracyEnd {
    /// A profiler was connected when the shutdown began: the client sent it everything it
    /// had, then stopped.
    HandedOver,
    /// No profiler was connected: the client stopped, and what it had queued is lost.
    NoProfiler,
    /// The client was left running, and only the ledger's events stopped: the crate did
    /// not start it (other code did, before [`enable_tracy`]), or started it on another
    /// thread than this guard's.
    LeftRunning,
    /// Another guard's `shutdown` had stopped the client already.
    AlreadyStopped,
}

impl TracyGuard {
    /// The port the client listens on for a profiler: `TRACY_PORT` when it names one, else
    /// Tracy's default 8086. With no `TRACY_PORT`, Tracy takes the next free port up to
    /// 8105 when 8086 is taken ([`port_is_fixed`](Self::port_is_fixed) says which). O(1).
    ///
    /// ```no_run
    /// let tracy = nebula_memory::ledger::enable_tracy(false);
    /// println!("connect the profiler to port {}", tracy.port());
    /// ```
    pub fn port(&self) -> u16 {
        fixed_port().unwrap_or(8086)
    }

    /// Whether [`port`](Self::port) is the one the client listens on for sure (`TRACY_PORT`
    /// set), rather than where Tracy starts looking for a free one. O(1).
    ///
    /// ```no_run
    /// let tracy = nebula_memory::ledger::enable_tracy(false);
    /// if !tracy.port_is_fixed() {
    ///     println!("port {} (or the next free one up to 8105)", tracy.port());
    /// }
    /// ```
    pub fn port_is_fixed(&self) -> bool {
        fixed_port().is_some()
    }

    /// Waits until a profiler is connected, at most `limit` (checking every 10 ms), and
    /// says whether one is. `Duration::ZERO` only checks. After a shutdown, `false` at
    /// once (the client is not asked). O(limit).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let tracy = nebula_memory::ledger::enable_tracy(true);
    /// if !tracy.wait_for_profiler(Duration::from_secs(10)) {
    ///     println!("no profiler yet: the client keeps the events for one that connects later");
    /// }
    /// ```
    pub fn wait_for_profiler(&self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if connected() {
                return true;
            }
            let waited = start.elapsed();
            if waited >= limit {
                return false;
            }
            std::thread::sleep((limit - waited).min(Duration::from_millis(10)));
        }
    }

    /// Turns the ledger's events off for good (every guard's), then stops the Tracy client
    /// with Tracy's own shutdown: with a profiler connected, the client sends it everything
    /// it has queued and returns when the profiler has taken it ([`TracyEnd::HandedOver`]);
    /// with none, it stops at once and the queued events are lost. Call
    /// [`wait_for_profiler`](Self::wait_for_profiler) first to give a profiler time to
    /// connect. The client is stopped only if [`enable_tracy`] started it on this thread;
    /// otherwise it is left running for its owner ([`TracyEnd::LeftRunning`]).
    ///
    /// The wait for the profiler has no time limit of the crate's: it lasts as long as the
    /// transfer of what the client holds, and ends when the profiler closes the connection
    /// (Tracy's profiler and `tracy-capture` do so once they have the client's termination
    /// notice). With `TRACY_NO_EXIT=1` in the environment and no profiler connected, Tracy
    /// waits for one without limit.
    ///
    /// Afterwards the ledger still counts every block (a snapshot, the recorder), Tracy is
    /// sent nothing, and [`enable_tracy`] panics.
    ///
    /// # Safety
    /// Nothing else in the process uses Tracy from this call on, on any thread: no
    /// tracy-client handle, span, plot, frame mark or message, no `tracing-tracy` layer
    /// (Bevy's `trace_tracy`), no direct `tracy-client-sys` call. tracy-client cannot be
    /// told that the client stopped (`Client::running()` still says it runs), and Tracy's
    /// shutdown requires that nothing calls it during or after it; a call would use the
    /// destroyed profiler. The ledger's own events are turned off before the client stops
    /// and never reach it afterwards.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use nebula_memory::ledger::{self, TracyEnd};
    /// let tracy = ledger::enable_tracy(true);
    /// tracy.wait_for_profiler(Duration::from_secs(10));
    /// ledger::end_frame();
    /// // SAFETY: nothing else in this program uses Tracy, now or later.
    /// let end = unsafe { tracy.shutdown() };
    /// assert!(matches!(end, TracyEnd::HandedOver | TracyEnd::NoProfiler));
    /// ```
    pub unsafe fn shutdown(self) -> TracyEnd {
        // The guard is consumed here; its drop must not count it off a second time.
        let _this = ManuallyDrop::new(self);
        let connected;
        {
            let mut state = STATE.write();
            match state.receiver {
                Receiver::Stopped => return TracyEnd::AlreadyStopped,
                Receiver::On { guards } => {
                    if state.started_on != Some(std::thread::current().id()) {
                        count_off(&mut state, guards);
                        return TracyEnd::LeftRunning;
                    }
                }
                // A guard's existence keeps the receiver on; kept for completeness.
                Receiver::Off => return TracyEnd::LeftRunning,
            }
            // Asked while the client runs (the receiver is not `Stopped` yet).
            connected = connected_in(&state);
            // From here no event reaches the client: the write lock waited for those in
            // flight, and every later one finds `Stopped` under the read lock.
            set_receiver(&mut state, Receiver::Stopped);
        }
        // SAFETY: the client is running: the crate started it (on this thread, as Tracy's
        // manual lifetime requires) and nobody stopped it (the receiver was not `Stopped`, and
        // stopping it is what sets `Stopped`). The ledger sends nothing from now on (its
        // receiver is `Stopped`, set under the write lock after the last event in flight), and
        // the caller promises that nothing else in the process calls Tracy from now on.
        unsafe { tracy_client::sys::___tracy_shutdown_profiler() };
        if connected {
            TracyEnd::HandedOver
        } else {
            TracyEnd::NoProfiler
        }
    }
}

impl Drop for TracyGuard {
    /// Counts this guard off; the last one turns the ledger's events off (waiting for any
    /// being sent). The client keeps running.
    fn drop(&mut self) {
        let mut state = STATE.write();
        if let Receiver::On { guards } = state.receiver {
            count_off(&mut state, guards);
        }
    }
}

/// `TRACY_PORT`, when it names a port (Tracy reads it with `atoi`; 0 means its default).
fn fixed_port() -> Option<u16> {
    std::env::var("TRACY_PORT")
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|&p| p != 0)
}

/// Whether a profiler is connected; `false`, without asking, once the client stopped.
fn connected() -> bool {
    connected_in(&STATE.read())
}

/// [`connected`] with the state's lock held by the caller.
fn connected_in(state: &State) -> bool {
    match state.receiver {
        // tracy-client asks the C client only when it runs.
        Receiver::Off | Receiver::On { .. } => Client::is_connected(),
        // The client is destroyed, though tracy-client believes it runs: never ask.
        Receiver::Stopped => false,
    }
}

/// Runs `f` with the names of `tag`, made on first use.
fn with_names<R>(client: &Client, tag: &'static str, f: impl FnOnce(&mut Names) -> R) -> R {
    let mut guard = NAMES.lock();
    let map = guard.get_or_insert_with(HashMap::new);
    let names = map.entry(tag).or_insert_with(|| {
        // A tag is a path of non-empty segments without NUL (checked when it was set), so
        // this cannot fail; fall back to a placeholder rather than panic on the block path.
        let pool = CString::new(tag).unwrap_or_else(|_| c"nebula_memory tag".to_owned());
        let held = PlotName::new_leak(format!("{tag} held"));
        let used = PlotName::new_leak(format!("{tag} used"));
        let memory = PlotConfiguration::default().format(PlotFormat::Memory);
        client.plot_config(held, memory.clone());
        client.plot_config(used, memory);
        Names {
            pool: Box::leak(Box::new(pool)),
            held,
            used,
            heap: None,
        }
    });
    f(names)
}

/// Hands one event to Tracy, if the receiver is on: under the read lock, so that turning
/// it off waits for this call.
pub(crate) fn receive(event: &LedgerEvent) {
    let state = STATE.read();
    if !matches!(state.receiver, Receiver::On { .. }) {
        return;
    }
    // `On` means the client runs: `enable_tracy` started it, and only a shutdown (which
    // sets `Stopped` first) stops it.
    let Some(client) = Client::running() else {
        return;
    };
    match *event {
        LedgerEvent::BlockTaken {
            tag, addr, bytes, ..
        } => with_names(&client, tag, |n| {
            // SAFETY: the client runs and is not being stopped (the receiver is `On`, read
            // under the lock a shutdown must take first). `n.pool` is a NUL-terminated
            // string that is never freed (Tracy keeps the pointer as the pool's name); the
            // address is only recorded, never read.
            unsafe {
                tracy_client::sys::___tracy_emit_memory_alloc_named(
                    addr as *const c_void,
                    bytes,
                    n.pool.as_ptr(),
                );
            }
        }),
        LedgerEvent::BlockReturned { tag, addr, .. } => with_names(&client, tag, |n| {
            // SAFETY: as above; the address matches the allocation event of the same block.
            unsafe {
                tracy_client::sys::___tracy_emit_memory_free_named(
                    addr as *const c_void,
                    n.pool.as_ptr(),
                );
            }
        }),
        LedgerEvent::Plot { tag, held, used } => with_names(&client, tag, |n| {
            client.plot(n.held, held as f64);
            client.plot(n.used, used as f64);
        }),
        LedgerEvent::HeapPlot { tag, live } => with_names(&client, tag, |n| {
            let heap = *n.heap.get_or_insert_with(|| {
                let name = PlotName::new_leak(format!("{tag} heap"));
                let memory = PlotConfiguration::default().format(PlotFormat::Memory);
                client.plot_config(name, memory);
                name
            });
            client.plot(heap, live as f64);
        }),
        LedgerEvent::FrameMark => client.frame_mark(),
    }
    SENT.fetch_add(1, Relaxed);
}

/// Frames of a sampled allocation's call stack that Tracy takes.
const SAMPLE_DEPTH: i32 = 24;

/// Per heap id, the name of its sampled heap's pool in Tracy (a C string never freed), or
/// null until a frame end made it.
static SAMPLE_POOLS: [AtomicPtr<c_char>; crate::heap::counters::TAGS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; crate::heap::counters::TAGS];

/// Makes the sampled-heap pool names of tags that have none yet, while the receiver is on
/// and sampling too: at a frame end, outside any allocation. O(tags).
pub(crate) fn name_sample_pools() {
    if crate::heap::sample::current_mean().is_none()
        || !matches!(STATE.read().receiver, Receiver::On { .. })
    {
        return;
    }
    let name = |id: u16, tag: &str| {
        let slot = &SAMPLE_POOLS[usize::from(id) % SAMPLE_POOLS.len()];
        if slot.load(Relaxed).is_null() {
            let c = CString::new(format!("{tag} heap (sampled)"))
                .unwrap_or_else(|_| c"heap (sampled)".to_owned());
            // Kept for ever: Tracy keeps the pointer as the pool's name.
            slot.store(c.into_raw(), Release);
        }
    };
    name(crate::heap::counters::UNTAGGED, "untagged");
    super::node::with_nodes(|nodes| {
        for n in nodes {
            if n.heap_id != crate::heap::counters::UNTAGGED {
                name(n.heap_id, n.path);
            }
        }
    });
}

/// The sampler's observer: tells Tracy of a sampled allocation (`taken`) or of its free.
/// Runs inside the allocator: never waits for the receiver's lock, never allocates
/// through the tracker's sampling (the thread is busy). Returns whether it told Tracy.
fn tell_sample(addr: usize, size: usize, id: u16, taken: bool) -> bool {
    let Some(state) = STATE.try_read() else {
        return false;
    };
    if !matches!(state.receiver, Receiver::On { .. }) {
        return false;
    }
    let name = SAMPLE_POOLS[usize::from(id) % SAMPLE_POOLS.len()].load(Acquire);
    if name.is_null() {
        return false;
    }
    // SAFETY: the receiver is `On` under the read lock, so the client runs and no shutdown
    // is under way; `name` is a NUL-terminated string never freed; the address is only
    // recorded. A free is told only for an allocation that was (the sampler keeps which).
    unsafe {
        if taken {
            tracy_client::sys::___tracy_emit_memory_alloc_callstack_named(
                addr as *const c_void,
                size,
                SAMPLE_DEPTH,
                name,
            );
        } else {
            tracy_client::sys::___tracy_emit_memory_free_named(addr as *const c_void, name);
        }
    }
    SENT.fetch_add(1, Relaxed);
    true
}
