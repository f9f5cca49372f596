//! The ledger over Bevy's remote protocol (feature `remote`), on 127.0.0.1:
//!
//! - the protocol itself, spoken by hand over a socket: the browser's preflight answered
//!   with the headers a page from disk needs, `nebula_memory.ledger.frames` since a frame
//!   giving exactly the frames after it with the history's figures, the tree of lines,
//!   and errors that name the fix; on compute pools of 1, 4 and 8 threads (a child process
//!   each: the pools are process-wide);
//! - the memory page, opened from disk in headless Chromium with the app's address,
//!   following the running app: it holds every frame from the first to the last it got,
//!   and its figure of a growing system there is the app's own. Bounded in time: the app
//!   plays frames while the browser driver runs (at most two minutes), and stops with it.
//!   Skipped (with a message) outside CI when Chromium or Node is missing.
#![cfg(all(feature = "remote", not(miri)))]

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::alloc::System;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use bevy_app::{App, TaskPoolPlugin, Update};
use bevy_ecs::prelude::*;
use nebula_memory::TrackingAllocator;
use nebula_memory::bevy::remote::{LedgerRemotePlugin, RemoteAddress};
use nebula_memory::bevy::{MemoryLedger, MemoryPlugin};
use nebula_memory::ledger::page::Page;
use serde_json::{Value, json};

#[global_allocator]
static HEAP: TrackingAllocator = TrackingAllocator::new(System);

const CHILD: &str = "NEBULA_PAGE_LIVE";

#[derive(Resource, Default)]
struct Kept(Vec<Vec<u8>>);

/// Keeps 1,000 bytes more every frame.
fn grow(mut kept: ResMut<Kept>) {
    kept.0.push(vec![3u8; 1000]);
}

fn app(threads: Option<usize>) -> (App, SocketAddr) {
    let mut app = App::new();
    if let Some(threads) = threads {
        app.add_plugins(TaskPoolPlugin {
            task_pool_options: common::compute_threads(threads),
        });
    }
    app.add_plugins((
        MemoryPlugin {
            history_frames: 5_000,
            ..MemoryPlugin::isolated()
        },
        LedgerRemotePlugin {
            port: 0,
            ..Default::default()
        },
    ))
    .init_resource::<Kept>()
    .add_systems(Update, grow);
    let addr = app.world().resource::<RemoteAddress>().0.expect("bound");
    (app, addr)
}

/// Sends `request` (HTTP) and returns the response's head and body, while the app plays
/// frames (the answer comes at a frame's end).
fn exchange(app: &mut App, addr: SocketAddr, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut out = Vec::new();
    let started = std::time::Instant::now();
    loop {
        let mut buf = [0u8; 65536];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(started.elapsed().as_secs() < 20, "no answer in 20 s");
                app.update();
            }
            Err(e) => panic!("{e}"),
        }
    }
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

fn call(app: &mut App, addr: SocketAddr, body: &str) -> (String, Value) {
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (head, body) = exchange(app, addr, &request);
    (head, serde_json::from_str(&body).unwrap())
}

/// What the run-length coded series `v` holds (as the page decodes it).
fn decode(v: &Value) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for n in v.as_array().unwrap() {
        let n = n.as_i64().unwrap();
        if n < 0 {
            let last = *out.last().unwrap();
            out.extend(std::iter::repeat_n(last, n.unsigned_abs() as usize));
        } else {
            out.push(n as u64);
        }
    }
    out
}

fn protocol(threads: Option<usize>) {
    let (mut app, addr) = app(threads);
    for _ in 0..10 {
        app.update();
    }
    // The preflight of a page opened from disk.
    let (head, _) = exchange(
        &mut app,
        addr,
        "OPTIONS / HTTP/1.1\r\nOrigin: null\r\nAccess-Control-Request-Method: POST\r\n\
         Access-Control-Request-Headers: content-type\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    for needed in [
        "Access-Control-Allow-Origin: *",
        "Access-Control-Allow-Headers: Content-Type",
        "Access-Control-Allow-Private-Network: true",
    ] {
        assert!(head.contains(needed), "{needed} missing:\n{head}");
    }
    // The frames after frame 4: exactly those, each figure the history's.
    let (head, reply) = call(
        &mut app,
        addr,
        r#"{"jsonrpc":"2.0","id":7,"method":"nebula_memory.ledger.frames","params":{"since":4}}"#,
    );
    assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");
    assert_eq!(reply["id"], 7);
    let result = &reply["result"];
    let ledger = app.world().resource::<MemoryLedger>();
    let history = ledger.history();
    let last = result["last"].as_u64().unwrap();
    let steps = decode(&result["frames"]);
    let frames: Vec<u64> = steps
        .iter()
        .scan(0, |f, s| {
            *f += s;
            Some(*f)
        })
        .collect();
    assert_eq!(frames, (5..=last).collect::<Vec<_>>());
    let grow_line = history
        .lines()
        .find(|l| l.tag().ends_with("/systems/grow"))
        .unwrap();
    let grow_tag = grow_line.tag().to_owned();
    let sent = result["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["tag"] == grow_line.tag())
        .unwrap();
    let want: Vec<u64> = history
        .figures(grow_line)
        .filter(|(f, _)| (5..=last).contains(f))
        .map(|(_, x)| x.heap_live)
        .collect();
    assert_eq!(decode(&sent["live"]), want);
    // It grows (frame by frame when it has the compute pool to itself; another test's app
    // on the same pool can move a frame's charge to a neighbour).
    assert!(
        want.windows(2).all(|w| w[1] >= w[0]) && want.last() > want.first(),
        "it grows: {want:?}"
    );
    // Every line it had then (other tests' apps may have added lines since).
    assert!(result["lines"].as_array().unwrap().len() <= history.lines().count());
    // The tree of lines.
    let (_, reply) = call(
        &mut app,
        addr,
        r#"{"jsonrpc":"2.0","id":"t","method":"nebula_memory.ledger.lines"}"#,
    );
    let tree = reply["result"]["lines"].as_array().unwrap();
    let grow = tree.iter().find(|l| l["tag"] == grow_tag.as_str()).unwrap();
    let parent = grow_tag.rsplit_once('/').unwrap().0;
    assert_eq!(grow["parent"], parent);
    // Errors that say what to send.
    let (_, reply) = call(
        &mut app,
        addr,
        r#"{"jsonrpc":"2.0","id":1,"method":"nebula_memory.ledger.frames","params":{"since":"x"}}"#,
    );
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let (_, reply) = call(
        &mut app,
        addr,
        r#"{"jsonrpc":"2.0","id":2,"method":"world.query"}"#,
    );
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nebula_memory.ledger.frames")
    );
    let (_, reply) = call(&mut app, addr, "{not json");
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
}

#[test]
fn the_protocol_on_the_default_compute_pool() {
    protocol(None);
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn the_protocol_on_four_compute_threads() {
    common::in_child(CHILD, "4");
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "spawns processes and threads")]
fn the_protocol_on_eight_compute_threads() {
    common::in_child(CHILD, "8");
}

#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return; // run by the tests above only
    };
    protocol(Some(mode.parse().expect("a thread count")));
}

#[test]
fn the_page_follows_a_running_app() {
    let Some(tools) = browser::tools() else {
        return;
    };
    let dir = browser::out_dir("page_live");
    // A page with no run of its own: it shows what it follows.
    let page = dir.join("follow.html");
    Page::new("live").write_to(&page).unwrap();
    let (mut app, addr) = app(None);
    app.update();
    let grow_tag = app
        .world()
        .resource::<MemoryLedger>()
        .history()
        .lines()
        .find(|l| l.tag().ends_with("/systems/grow"))
        .unwrap()
        .tag()
        .to_owned();
    let report = tools.run(
        &dir,
        json!([{ "kind": "live", "page": page, "addr": addr.to_string(), "min_frames": 40,
                 "tag": grow_tag, "screenshot": dir.join("follow.png") }]),
        || app.update(),
    );
    let r = &report["results"][0];
    println!("{}", serde_json::to_string_pretty(r).unwrap());
    assert_eq!(r["errors"], json!([]), "the console logged errors");
    let history = app.world().resource::<MemoryLedger>().history();
    let last = r["last_frame"].as_u64().unwrap();
    assert!(last >= 40, "{r}");
    assert!(
        history.last_frame().unwrap() > last,
        "the app played on while the page followed"
    );
    // Every frame from the first to the last it got, none twice.
    assert_eq!(r["frames"], json!(last));
    let line = history.line(&grow_tag).unwrap();
    let (_, at_last) = history.figures(line).find(|(f, _)| *f == last).unwrap();
    assert_eq!(r["value"]["bytes"], json!(at_last.held + at_last.heap_live));
    assert!(r["run"].as_str().unwrap().contains(&addr.to_string()));
    assert!(r["screenshot"]["drawn_fraction"].as_f64().unwrap() > 0.02);
}
