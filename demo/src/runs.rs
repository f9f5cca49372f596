//! The runs: each in a process of its own (so that its live heap bytes and its RSS are its
//! own, and so that one can allocate with mimalloc), taking turns of [`TURN`] frames under
//! the parent's direction, so the machine's drift falls on every run alike.
//!
//! The parent starts the children (this same program with `--child RUN`) and talks to
//! them over their standard input and output, one line per command or frame:
//! `warm` (play the warm-up frames), `play N` (play N frames, one line of figures each),
//! `stats` (the run's closing figures), `ledger` (the arena run's tag table, see `tags`),
//! `systems` (each Bevy system's heap allocations, see `tags::SystemsHeap`), `history` (its
//! ledger's history of every frame, as the ledger's CSV: the memory page's, see `page`);
//! each answer ends with `ok`.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use bevy_app::App;
use nebula_memory::bevy::{MemoryLedger, MemoryStats, REPORT_VAR};
use nebula_memory::ledger::tags::{FRAME_MEMORY, WITH_SCRATCH};

use crate::alloc::{ALLOCATOR_VAR, Backend, counters, rss_bytes};
use crate::state::{Checksum, LocalHeld, Mode, NEEDS, Needs, Tick};
use crate::systems::app;
use crate::tags::{SystemsHeap, Watch};
use crate::workload::is_spike;

/// Frames each run plays before the next run's turn.
pub const TURN: usize = 50;
/// Frames each run plays before it is measured.
pub const WARM_UP: usize = 60;

/// A run: where its temporaries live, and its global allocator.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub name: &'static str,
    pub mode: Mode,
    pub alloc: Backend,
}

/// The three ways, with heap tracking (so each system's heap use is known); the heap run
/// with mimalloc; and the heap run without the tracking allocator, for its cost.
pub const RUNS: [Run; 5] = [
    Run {
        name: "arena",
        mode: Mode::Arena,
        alloc: Backend::Tracked,
    },
    Run {
        name: "heap",
        mode: Mode::Heap,
        alloc: Backend::Tracked,
    },
    Run {
        name: "local-vec",
        mode: Mode::LocalVec,
        alloc: Backend::Tracked,
    },
    Run {
        name: "heap+mimalloc",
        mode: Mode::Heap,
        alloc: Backend::Mimalloc,
    },
    Run {
        name: "heap untracked",
        mode: Mode::Heap,
        alloc: Backend::System,
    },
];

/// One frame's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameRecord {
    pub spike: bool,
    pub micros: f64,
    /// Heap allocations of the demo's own code, and of everything else (Bevy).
    pub own_allocs: u64,
    pub bevy_allocs: u64,
    /// Bytes the run's way of allocating holds after the frame (see the report).
    pub held: i64,
    /// Live heap bytes of the process, and its RSS.
    pub live_heap: i64,
    pub rss: u64,
    pub checksum: u64,
    /// Arena run, from its ledger: bytes held by the systems' `TaggedScratch` arenas (tag
    /// `demo`), by the `with_scratch` arenas behind `scratch_batch`, and by `FrameMemory`.
    pub systems_held: u64,
    pub with_scratch_held: u64,
    pub frame_memory_held: u64,
    /// What each part of the work needed for its temporaries (see `state::NEEDS`).
    pub needs: [u64; NEEDS.len()],
}

impl FrameRecord {
    fn to_line(self) -> String {
        let needs: Vec<String> = self.needs.iter().map(u64::to_string).collect();
        format!(
            "{} {:.2} {} {} {} {} {} {} {} {} {} {}",
            u8::from(self.spike),
            self.micros,
            self.own_allocs,
            self.bevy_allocs,
            self.held,
            self.live_heap,
            self.rss,
            self.checksum,
            self.systems_held,
            self.with_scratch_held,
            self.frame_memory_held,
            needs.join(" ")
        )
    }

    fn from_line(line: &str) -> Option<FrameRecord> {
        let f: Vec<&str> = line.split_whitespace().collect();
        Some(FrameRecord {
            spike: f.first()? == &"1",
            micros: f.get(1)?.parse().ok()?,
            own_allocs: f.get(2)?.parse().ok()?,
            bevy_allocs: f.get(3)?.parse().ok()?,
            held: f.get(4)?.parse().ok()?,
            live_heap: f.get(5)?.parse().ok()?,
            rss: f.get(6)?.parse().ok()?,
            checksum: f.get(7)?.parse().ok()?,
            systems_held: f.get(8)?.parse().ok()?,
            with_scratch_held: f.get(9)?.parse().ok()?,
            frame_memory_held: f.get(10)?.parse().ok()?,
            needs: std::array::from_fn(|i| f.get(11 + i).and_then(|n| n.parse().ok()).unwrap_or(0)),
        })
    }
}

/// Closing figures of a run (the arena run's pools; zeros elsewhere).
#[derive(Clone, Copy, Debug, Default)]
pub struct Closing {
    pub pool_high_watermark: usize,
    pub exhaustions: u64,
    pub heap_fallbacks: u64,
}

/// A run's frames and closing figures.
pub struct RunRecord {
    pub run: Run,
    pub frames: Vec<FrameRecord>,
    pub closing: Closing,
    /// The arena run's tag table (see `tags`); empty for the others.
    pub ledger: Vec<String>,
    /// The tracked runs' heap use per system (see `tags::SystemsHeap::lines`).
    pub systems: Vec<String>,
    /// The tracked runs' ledger history, every frame, as the ledger's CSV (see `page`).
    pub history: String,
}

/// Plays one frame of `app`; `live_base` is the live heap bytes the heap run's held figure
/// counts from.
fn frame(app: &mut App, mode: Mode, live_base: i64) -> FrameRecord {
    let spike = is_spike(app.world().resource::<Tick>().0);
    let before = counters();
    let start = Instant::now();
    app.update();
    let micros = start.elapsed().as_secs_f64() * 1e6;
    let after = counters();
    let world = app.world();
    let checksum = world.resource::<Checksum>().0.swap(0, Relaxed);
    let stats = world.resource::<MemoryStats>();
    let ledger = world.resource::<MemoryLedger>();
    let tag_held = |tag: &str| {
        if mode == Mode::Arena {
            ledger.tag(tag).map_or(0, |f| f.held as u64)
        } else {
            0
        }
    };
    let held = match mode {
        // Every block this process's arenas hold comes from the scratch pool.
        Mode::Arena => stats.pools[2].in_use as i64,
        Mode::Heap => after.live_bytes - live_base,
        Mode::LocalVec => {
            let locals = world.resource::<LocalHeld>();
            locals.0.iter().map(|h| h.load(Relaxed) as i64).sum()
        }
    };
    FrameRecord {
        spike,
        micros,
        own_allocs: after.own - before.own,
        bevy_allocs: after.other - before.other,
        held,
        live_heap: after.live_bytes,
        rss: rss_bytes(),
        checksum,
        systems_held: tag_held("demo"),
        with_scratch_held: tag_held(WITH_SCRATCH),
        frame_memory_held: tag_held(FRAME_MEMORY),
        needs: std::array::from_fn(|i| world.resource::<Needs>().0[i].load(Relaxed) as u64),
    }
}

/// The child's side: plays the frames it is told to and reports them; its ledger keeps
/// `history` frames.
pub fn child(run: Run, entities: usize, history: usize) {
    let mut app = app(run.mode, entities, history);
    let mut live_base = counters().live_bytes;
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut lines: Vec<String> = Vec::with_capacity(TURN);
    let (mut watch, mut measured) = (Watch::default(), 0);
    let mut systems = SystemsHeap::default();
    for command in stdin.lock().lines() {
        let command = command.expect("reading a command from the parent");
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["warm"] => {
                for _ in 0..WARM_UP {
                    frame(&mut app, run.mode, live_base);
                }
                live_base = counters().live_bytes;
            }
            ["play", n] => {
                let n: usize = n.parse().expect("play N");
                lines.clear();
                for _ in 0..n {
                    let f = frame(&mut app, run.mode, live_base);
                    lines.push(f.to_line());
                    if run.alloc == Backend::Tracked {
                        systems.frame(f.spike, app.world().resource::<MemoryLedger>());
                    }
                    if run.mode == Mode::Arena {
                        let world = app.world();
                        let next_spike = is_spike(world.resource::<Tick>().0);
                        let ledger = world.resource::<MemoryLedger>();
                        watch.frame(measured, f.spike, next_spike, ledger);
                    }
                    measured += 1;
                }
                for line in &lines {
                    writeln!(out, "{line}").unwrap();
                }
            }
            ["stats"] => {
                let s = app.world().resource::<MemoryStats>();
                let pool = s.pools[2];
                writeln!(
                    out,
                    "{} {} {}",
                    pool.high_watermark, s.exhaustions_total, s.heap_fallbacks_total
                )
                .unwrap();
            }
            ["ledger"] => {
                for line in watch.table(app.world().resource::<MemoryLedger>()) {
                    writeln!(out, "{line}").unwrap();
                }
            }
            ["systems"] => {
                for line in systems.lines() {
                    writeln!(out, "{line}").unwrap();
                }
            }
            ["history"] => {
                let ledger = app.world().resource::<MemoryLedger>();
                ledger.history().write_csv(&mut out).unwrap();
            }
            _ => panic!("unknown command from the parent: {command}"),
        }
        writeln!(out, "ok").unwrap();
        out.flush().unwrap();
    }
}

struct Handle {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Handle {
    /// Sends `command`, returns the answer's lines (before `ok`).
    fn ask(&mut self, command: &str) -> Vec<String> {
        writeln!(self.input, "{command}")
            .and_then(|()| self.input.flush())
            .expect("writing to a run");
        let mut answer = Vec::new();
        loop {
            let mut line = String::new();
            let read = self
                .output
                .read_line(&mut line)
                .expect("reading from a run");
            assert!(read > 0, "a run ended early (see its message above)");
            if line.trim_end() == "ok" {
                return answer;
            }
            answer.push(line.trim_end().to_owned());
        }
    }
}

/// Starts the runs, plays `frames` frames of each in turns of `TURN`, and returns them.
pub fn run_all(runs: &[Run], frames: usize, entities: usize) -> Vec<RunRecord> {
    let exe = std::env::current_exe().expect("the path of this program");
    let mut handles: Vec<Handle> = runs
        .iter()
        .map(|run| {
            let history = (WARM_UP + frames).to_string();
            let mut child = Command::new(&exe)
                .args(["--child", run.name, "--entities", &entities.to_string()])
                .args(["--history", &history])
                .env(ALLOCATOR_VAR, run.alloc.var())
                // The parent writes the page of every run (see `page`).
                .env_remove(REPORT_VAR)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("starting a run");
            let input = child.stdin.take().unwrap();
            let output = BufReader::new(child.stdout.take().unwrap());
            Handle {
                child,
                input,
                output,
            }
        })
        .collect();
    for h in &mut handles {
        h.ask("warm");
    }
    let mut records: Vec<RunRecord> = runs
        .iter()
        .map(|&run| RunRecord {
            run,
            frames: Vec::with_capacity(frames),
            closing: Closing::default(),
            ledger: Vec::new(),
            systems: Vec::new(),
            history: String::new(),
        })
        .collect();
    while records[0].frames.len() < frames {
        let n = TURN.min(frames - records[0].frames.len());
        for (h, r) in handles.iter_mut().zip(&mut records) {
            let lines = h.ask(&format!("play {n}"));
            r.frames.extend(
                lines
                    .iter()
                    .map(|l| FrameRecord::from_line(l).expect("a frame's figures")),
            );
        }
    }
    for (mut h, r) in handles.into_iter().zip(&mut records) {
        let answer = h.ask("stats");
        let f: Vec<u64> = answer[0]
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        r.closing = Closing {
            pool_high_watermark: f[0] as usize,
            exhaustions: f[1],
            heap_fallbacks: f[2],
        };
        if r.run.mode == Mode::Arena {
            r.ledger = h.ask("ledger");
        }
        if r.run.alloc == Backend::Tracked {
            r.systems = h.ask("systems");
            r.history = h.ask("history").join("\n");
        }
        drop(h.input);
        h.child.wait().expect("a run's exit");
    }
    records
}
