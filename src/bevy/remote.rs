//! The ledger over Bevy's remote protocol (feature `remote`): the memory page
//! (`ledger::page`), given a game's address, follows its ledger while it runs.
//!
//! Two methods, in the protocol's JSON-RPC 2.0 over HTTP (what `bevy_remote`'s HTTP
//! transport speaks: a `POST` of `{"jsonrpc": "2.0", "id", "method", "params"}`, an answer
//! of `{"jsonrpc": "2.0", "id", "result"}` or `"error": {"code", "message"}` with its
//! codes):
//!
//! - [`FRAMES_METHOD`], params `{"since": frame}` (optional): the history's frames after
//!   `since` (all it holds without it), every line, in the page's format
//!   (`ledger::page`'s data: `format`, `name`, `last`, `frames`, `lines`);
//! - [`LINES_METHOD`]: the tree of lines, `{"lines": [{"tag", "depth", "parent"}]}`.
//!
//! **Served by** [`LedgerRemotePlugin`]: a listener on a thread of its own (127.0.0.1:15702
//! by default, `bevy_remote`'s port), which hands each request to the app; a system after
//! the frame end ([`MemorySystems::Reset`](super::MemorySystems)) answers from
//! `MemoryLedger` and its history, so a request waits at most a frame. Its responses carry
//! headers (`Access-Control-Allow-Origin: *` and the rest of [`CORS_HEADERS`]) that let a
//! page opened from disk call it, and it answers the browser's preflight `OPTIONS`.
//!
//! **Not through `bevy_remote` itself:** `bevy_remote` 0.20.1 depends on
//! `bevy_dev_tools`, whose dependencies bring Bevy's renderer, UI, text and audio (about
//! 290 crates, an ALSA library to link, Rust 1.97.1), against this crate's 1.95 and
//! Bevy sub-crates. An app that runs `bevy_remote` anyway can serve the same methods
//! through it, on its one port, with [`frames`] and [`lines`] as handlers:
//!
//! ```text
//! RemotePlugin::default()
//!     .with_method_main(remote::FRAMES_METHOD, |In(p): In<Option<Value>>, l: Res<MemoryLedger>| {
//!         remote::frames(&l, p.as_ref()).map_err(|e| BrpError { code: e.code, message: e.message, data: None })
//!     })
//! ```
//!
//! Nothing of this is built without the feature, and nothing runs without the plugin.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bevy_app::{App, Last, Plugin};
use bevy_ecs::prelude::*;
use serde_json::Value;

use super::ledger::{MemoryLedger, program_name};
use super::plugin::MemorySystems;
use crate::ledger::page::{write_lines, write_run};

/// The method that returns the history's frames since a given frame.
///
/// ```
/// assert_eq!(nebula_memory::bevy::remote::FRAMES_METHOD, "nebula_memory.ledger.frames");
/// ```
pub const FRAMES_METHOD: &str = "nebula_memory.ledger.frames";
/// The method that returns the tree of lines.
///
/// ```
/// assert_eq!(nebula_memory::bevy::remote::LINES_METHOD, "nebula_memory.ledger.lines");
/// ```
pub const LINES_METHOD: &str = "nebula_memory.ledger.lines";
/// `bevy_remote`'s port, the plugin's default (and the page's).
///
/// ```
/// assert_eq!(nebula_memory::bevy::remote::DEFAULT_PORT, 15702);
/// ```
pub const DEFAULT_PORT: u16 = 15702;
/// The headers of every response: a page opened from disk (origin `null`) may call the
/// methods, with a JSON body, across Chromium's private-network check.
///
/// ```
/// use nebula_memory::bevy::remote::CORS_HEADERS;
/// assert!(CORS_HEADERS.contains(&("Access-Control-Allow-Origin", "*")));
/// ```
pub const CORS_HEADERS: [(&str, &str); 4] = [
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Methods", "POST, OPTIONS"),
    ("Access-Control-Allow-Headers", "Content-Type"),
    ("Access-Control-Allow-Private-Network", "true"),
];

/// JSON-RPC's error codes, as `bevy_remote` uses them.
const PARSE_ERROR: i16 = -32700;
const INVALID_REQUEST: i16 = -32600;
const METHOD_NOT_FOUND: i16 = -32601;
const INVALID_PARAMS: i16 = -32602;
const INTERNAL_ERROR: i16 = -32603;

/// The largest request read (a request is a line of JSON).
const MAX_REQUEST: usize = 64 << 10;
/// How long a request waits for the app's next frame end.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A method's error: a JSON-RPC code and what to fix.
///
/// ```
/// use nebula_memory::bevy::{MemoryLedger, remote};
/// let params = serde_json::json!({"since": "yesterday"});
/// let err = remote::frames(&MemoryLedger::default(), Some(&params)).unwrap_err();
/// assert_eq!(err.code, -32602);
/// assert!(err.message.contains("since"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteError {
    /// The JSON-RPC error code.
    pub code: i16,
    /// What went wrong, and what to send instead.
    pub message: String,
}

impl RemoteError {
    fn new(code: i16, message: impl Into<String>) -> RemoteError {
        RemoteError {
            code,
            message: message.into(),
        }
    }
}

/// The frames after `params.since` (every frame held without it), as the page reads them.
///
/// # Errors
/// `params` that are not `{"since": <frame number>}`, `null` or `{}`.
///
/// ```
/// use nebula_memory::bevy::{MemoryLedger, remote};
/// let reply = remote::frames(&MemoryLedger::default(), None).unwrap();
/// assert_eq!(reply["last"], serde_json::Value::Null); // no frame yet
/// ```
pub fn frames(ledger: &MemoryLedger, params: Option<&Value>) -> Result<Value, RemoteError> {
    let text = answer(FRAMES_METHOD, params, ledger)?;
    serde_json::from_str(&text).map_err(|e| RemoteError::new(INTERNAL_ERROR, e.to_string()))
}

/// The tree of lines: `{"format", "lines": [{"tag", "depth", "parent"}]}`.
///
/// # Errors
/// None so far: the params are not read.
///
/// ```
/// use nebula_memory::bevy::{MemoryLedger, remote};
/// let reply = remote::lines(&MemoryLedger::default(), None).unwrap();
/// assert!(reply["lines"].as_array().unwrap().is_empty());
/// ```
pub fn lines(ledger: &MemoryLedger, params: Option<&Value>) -> Result<Value, RemoteError> {
    let text = answer(LINES_METHOD, params, ledger)?;
    serde_json::from_str(&text).map_err(|e| RemoteError::new(INTERNAL_ERROR, e.to_string()))
}

/// A method's result as JSON text.
fn answer(
    method: &str,
    params: Option<&Value>,
    ledger: &MemoryLedger,
) -> Result<String, RemoteError> {
    let mut out = Vec::new();
    let written = match method {
        FRAMES_METHOD => {
            let since = match params {
                None | Some(Value::Null) => None,
                Some(Value::Object(map)) => match map.get("since") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_u64().ok_or_else(|| {
                        RemoteError::new(
                            INVALID_PARAMS,
                            format!("`since` is a frame number (a whole number, or null), not {v}"),
                        )
                    })?),
                },
                Some(other) => {
                    return Err(RemoteError::new(
                        INVALID_PARAMS,
                        format!("the params are {{\"since\": <frame>}}, not {other}"),
                    ));
                }
            };
            write_run(
                &mut out,
                &program_name(),
                ledger.history(),
                since,
                true,
                &Default::default(),
            )
        }
        LINES_METHOD => write_lines(&mut out, ledger.history()),
        other => {
            return Err(RemoteError::new(
                METHOD_NOT_FOUND,
                format!("no method `{other}` here: {FRAMES_METHOD} and {LINES_METHOD} are"),
            ));
        }
    };
    written.map_err(|e| RemoteError::new(INTERNAL_ERROR, e.to_string()))?;
    String::from_utf8(out).map_err(|e| RemoteError::new(INTERNAL_ERROR, e.to_string()))
}

/// Serves the ledger's methods over HTTP (see the module's docs). Needs `MemoryPlugin`.
/// If the address cannot be bound, a WARN (and standard error) says why and the app runs
/// on, unserved; [`RemoteAddress`] has the address bound (port 0 picks a free one).
///
/// ```standalone_crate
/// use bevy_app::App;
/// use nebula_memory::bevy::MemoryPlugin;
/// use nebula_memory::bevy::remote::{LedgerRemotePlugin, RemoteAddress};
///
/// let mut app = App::new();
/// app.add_plugins((MemoryPlugin::default(), LedgerRemotePlugin { port: 0, ..Default::default() }));
/// let bound = app.world().resource::<RemoteAddress>().0.expect("a free port");
/// assert!(bound.ip().is_loopback());
/// app.update();
/// ```
#[derive(Clone, Debug)]
pub struct LedgerRemotePlugin {
    /// Where to listen (default 127.0.0.1: this machine only).
    pub address: IpAddr,
    /// The port (default [`DEFAULT_PORT`]; 0: any free one).
    pub port: u16,
}

impl Default for LedgerRemotePlugin {
    fn default() -> Self {
        LedgerRemotePlugin {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
        }
    }
}

/// The address [`LedgerRemotePlugin`] listens on, `None` if it could not bind it.
///
/// ```standalone_crate
/// use bevy_app::App;
/// use nebula_memory::bevy::MemoryPlugin;
/// use nebula_memory::bevy::remote::{LedgerRemotePlugin, RemoteAddress};
/// let mut app = App::new();
/// app.add_plugins((MemoryPlugin::default(), LedgerRemotePlugin { port: 0, ..Default::default() }));
/// println!("follow the ledger at {:?}", app.world().resource::<RemoteAddress>().0);
/// ```
#[derive(Resource, Clone, Copy, Debug)]
pub struct RemoteAddress(pub Option<SocketAddr>);

/// A request handed to the app, and where its answer goes.
struct Request {
    method: String,
    params: Option<Value>,
    reply: Sender<Result<String, RemoteError>>,
}

/// The app's end of the listener: its requests, and the flag that stops it.
#[derive(Resource)]
struct Requests {
    queue: Mutex<Receiver<Request>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Plugin for LedgerRemotePlugin {
    fn build(&self, app: &mut App) {
        let bound = TcpListener::bind((self.address, self.port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l));
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                let message = format!(
                    "LedgerRemotePlugin: cannot listen on {}:{}: {e} (another app on that \
                     port? set `port`, 0 for any free one); the ledger is not served",
                    self.address, self.port
                );
                tracing::warn!("{message}");
                let _ = writeln!(io::stderr(), "nebula_memory: {message}");
                app.insert_resource(RemoteAddress(None));
                return;
            }
        };
        let address = listener.local_addr().ok();
        let (send, queue) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let listening = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("nebula_memory remote".into())
            .spawn(move || listen(&listener, &send, &listening));
        if let Err(e) = spawned {
            tracing::warn!("LedgerRemotePlugin: cannot start its thread: {e}");
            app.insert_resource(RemoteAddress(None));
            return;
        }
        app.insert_resource(RemoteAddress(address))
            .insert_resource(Requests {
                queue: Mutex::new(queue),
                stop,
            })
            .add_systems(Last, answer_requests.after(MemorySystems::Reset));
    }
}

/// Answers the requests waiting, from the frame just recorded.
fn answer_requests(requests: Res<Requests>, ledger: Option<Res<MemoryLedger>>) {
    let Ok(queue) = requests.queue.lock() else {
        return;
    };
    while let Ok(r) = queue.try_recv() {
        let result = match &ledger {
            Some(l) => answer(&r.method, r.params.as_ref(), l),
            None => Err(RemoteError::new(
                INTERNAL_ERROR,
                "no MemoryLedger in this app: add MemoryPlugin",
            )),
        };
        let _ = r.reply.send(result);
    }
}

/// The listener's loop: a connection at a time, until the app's end drops its `Requests`.
fn listen(listener: &TcpListener, send: &Sender<Request>, stop: &AtomicBool) {
    while !stop.load(Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = serve(stream, send);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One HTTP/1.1 exchange: a preflight, or a JSON-RPC request; then the connection closes.
fn serve(stream: TcpStream, send: &Sender<Request>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let method = line.split_whitespace().next().unwrap_or("").to_owned();
    let mut length = 0usize;
    let mut header_bytes = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        header_bytes = header_bytes.saturating_add(h.len());
        if header_bytes > MAX_REQUEST {
            return respond(&stream, "431 Request Header Fields Too Large", "");
        }
        if let Some((name, value)) = h.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(usize::MAX);
        }
    }
    match method.as_str() {
        "OPTIONS" => respond(&stream, "204 No Content", ""),
        "POST" if length > MAX_REQUEST => respond(&stream, "413 Content Too Large", ""),
        "POST" => {
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            let reply = rpc(&body, send);
            respond(&stream, "200 OK", &reply)
        }
        _ => respond(
            &stream,
            "405 Method Not Allowed",
            "{\"error\":\"POST a JSON-RPC 2.0 request: nebula_memory.ledger.frames or .lines\"}",
        ),
    }
}

/// The answer to a JSON-RPC request's body.
fn rpc(body: &[u8], send: &Sender<Request>) -> String {
    let error = |id: &Value, e: RemoteError| {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": e.code, "message": e.message },
        })
        .to_string()
    };
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return error(&Value::Null, RemoteError::new(PARSE_ERROR, e.to_string())),
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return error(
            &id,
            RemoteError::new(INVALID_REQUEST, "a request names its `method`"),
        );
    };
    let (reply, answered) = mpsc::channel();
    let sent = send.send(Request {
        method: method.to_owned(),
        params: request.get("params").cloned(),
        reply,
    });
    let result = match sent {
        Ok(()) => answered.recv_timeout(ANSWER_WITHIN).unwrap_or_else(|_| {
            Err(RemoteError::new(
                INTERNAL_ERROR,
                "the app ended no frame within 5 s (paused, or exiting)",
            ))
        }),
        Err(_) => Err(RemoteError::new(INTERNAL_ERROR, "the app has ended")),
    };
    match result {
        Ok(text) => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{text}}}"),
        Err(e) => error(&id, e),
    }
}

fn respond(mut stream: &TcpStream, status: &str, body: &str) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    for (name, value) in CORS_HEADERS {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}
