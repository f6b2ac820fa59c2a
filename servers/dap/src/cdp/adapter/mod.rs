//! A DAP adapter of kitbag's own in front of a runtime's inspector: DAP requests come in over
//! an in-process stream, each becomes CDP commands; CDP events become DAP events. The rest of
//! kitbag-dap drives it exactly as it drives debugpy or lldb-dap.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::cdp::Inspector;
use crate::dap::{encode, read_message};

mod breakpoints;
mod events;
mod inspect;

use super::failure::{AdapterFailure, AdapterResult};
use super::process;
use super::sourcemap::SourceMap;
use super::values::HitCondition;
use super::ws::{Cdp, Event};

/// DAP messages to the client, from the adapter loop and the output readers alike.
pub struct Out {
    w: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    seq: std::sync::atomic::AtomicI64,
}

impl Out {
    async fn send(&self, mut msg: Value) {
        msg["seq"] = json!(self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
        let mut w = self.w.lock().await;
        let _ = w.write_all(&encode(&msg)).await;
        let _ = w.flush().await;
    }

    async fn event(&self, event: &str, body: Value) {
        self.send(json!({"type": "event", "event": event, "body": body}))
            .await;
    }

    async fn output(&self, category: &str, text: String) {
        self.event("output", json!({"category": category, "output": text}))
            .await;
    }
}

/// A script the runtime loaded.
struct Script {
    url: String,
    path: Option<PathBuf>,
    map: Option<Arc<SourceMap>>,
}

/// One DAP source breakpoint as the inspector holds it.
struct Bp {
    id: i64,
    line: i64,
    hit: Option<HitCondition>,
    hits: u64,
    cdp_ids: Vec<String>,
    verified: bool,
    actual_line: Option<i64>,
    condition: Option<String>,
}

/// What the program is stopped on.
struct Paused {
    frames: Vec<Value>,
    exception: Option<Value>,
}

/// What a variablesReference lists.
enum Handle {
    /// An object's (or a scope object's) properties.
    Object(String),
    /// A module's top-level bindings, read one by one on its frame: JavaScriptCore shows a
    /// module's scope as empty.
    Module {
        call_frame: Value,
        names: Vec<String>,
    },
}

/// Why the next pause happens, when kitbag asked for it.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Nothing,
    Step,
    Pause,
    /// The stop on entry, in the program's own script (not in a module it imports).
    Entry,
}

/// The inspector protocol's flavour: V8's (Node.js) or WebKit's (Bun, on JavaScriptCore).
#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    V8,
    WebKit,
}

struct Adapter {
    runtime: Inspector,
    dialect: Dialect,
    out: Arc<Out>,
    owned: Arc<Mutex<Vec<u32>>>,
    cdp: Option<Arc<Cdp>>,
    events: Option<mpsc::UnboundedReceiver<Event>>,
    child: Option<Child>,
    launched: bool,
    stop_on_entry: bool,
    /// The launched script (canonical), where the entry stop belongs.
    program: Option<PathBuf>,
    /// V8: the temporary breakpoint standing for the entry stop, until the next pause.
    entry_bp: Option<String>,
    configured: bool,
    scripts: HashMap<String, Script>,
    bps: HashMap<PathBuf, Vec<Bp>>,
    next_bp: i64,
    paused: Option<Paused>,
    expect: Expect,
    /// variablesReference → what it lists, for this stop.
    handles: Vec<Handle>,
    main_context: Option<i64>,
    exited: bool,
    /// The tasks forwarding the program's stdout and stderr.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// Run the adapter over `io` until the client hangs up or disconnects.
pub async fn run<S: AsyncRead + AsyncWrite + Send + 'static>(
    runtime: Inspector,
    io: S,
    owned: Arc<Mutex<Vec<u32>>>,
) {
    let (r, w) = tokio::io::split(io);
    let out = Arc::new(Out {
        w: tokio::sync::Mutex::new(Box::new(w)),
        seq: Default::default(),
    });
    let dialect = if runtime == Inspector::Bun {
        Dialect::WebKit
    } else {
        Dialect::V8
    };
    let mut a = Adapter {
        runtime,
        dialect,
        out,
        owned,
        cdp: None,
        events: None,
        child: None,
        launched: false,
        stop_on_entry: false,
        program: None,
        entry_bp: None,
        configured: false,
        scripts: HashMap::new(),
        bps: HashMap::new(),
        next_bp: 0,
        paused: None,
        expect: Expect::Nothing,
        handles: Vec::new(),
        main_context: None,
        exited: false,
        readers: Vec::new(),
    };
    let mut reader = BufReader::new(r);
    loop {
        tokio::select! {
            msg = read_message(&mut reader) => {
                let Ok(Some(msg)) = msg else { break };
                if !a.request(msg).await {
                    break;
                }
            }
            ev = next_event(&mut a.events) => match ev {
                Some(e) => a.event(&e.method, e.params).await,
                None => {
                    a.events = None;
                    a.cdp = None;
                    if a.child.is_none() {
                        a.finish(None).await;
                    }
                }
            },
            status = wait_child(&mut a.child) => {
                a.child = None;
                // What the program printed last is told before its exit (bounded: a
                // grandchild may hold the pipes open).
                for reader in a.readers.drain(..) {
                    let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                }
                a.finish(status).await;
            }
        }
    }
    a.kill();
}

async fn next_event(events: &mut Option<mpsc::UnboundedReceiver<Event>>) -> Option<Event> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn wait_child(child: &mut Option<Child>) -> Option<i64> {
    match child {
        Some(c) => c.wait().await.ok().and_then(|s| s.code()).map(i64::from),
        None => std::future::pending().await,
    }
}

/// A file URL's path, or None for `node:internal/…` and other non-file scripts.
fn url_path(url: &str) -> Option<PathBuf> {
    if url.starts_with("file://") {
        url::Url::parse(url).ok()?.to_file_path().ok()
    } else if url.starts_with('/') {
        Some(PathBuf::from(url))
    } else {
        None
    }
}

impl Adapter {
    fn cdp(&self) -> AdapterResult<Arc<Cdp>> {
        self.cdp.clone().ok_or(AdapterFailure::NotRunning)
    }

    fn kill(&mut self) {
        if let Some(c) = &self.child
            && let Some(pid) = c.id()
        {
            kitbag_shared::process::kill_tree(pid);
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
    }

    async fn finish(&mut self, code: Option<i64>) {
        if self.exited {
            return;
        }
        self.exited = true;
        self.paused = None;
        if let Some(code) = code {
            self.out.event("exited", json!({"exitCode": code})).await;
        }
        self.out.event("terminated", json!({})).await;
    }

    async fn respond(&self, req: &Value, result: AdapterResult<Value>) {
        let mut msg = json!({"type": "response", "request_seq": req["seq"],
            "command": req["command"]});
        match result {
            Ok(body) => {
                msg["success"] = json!(true);
                msg["body"] = body;
            }
            Err(failure) => {
                msg["success"] = json!(false);
                msg["message"] = json!(failure.to_string());
            }
        }
        self.out.send(msg).await;
    }

    /// Handle one DAP request; false once the session is over.
    async fn request(&mut self, req: Value) -> bool {
        let command = req["command"].as_str().unwrap_or("").to_string();
        let args = req["arguments"].clone();
        let result = match command.as_str() {
            "initialize" => Ok(capabilities()),
            "launch" => self.launch(&args).await,
            "attach" => self.attach(&args).await,
            "setBreakpoints" => self.set_breakpoints(&args).await,
            "setExceptionBreakpoints" => self.set_exceptions(&args).await,
            "configurationDone" => self.configuration_done().await,
            "threads" => Ok(json!({"threads": [{"id": 1, "name": "main"}]})),
            "stackTrace" => self.stack_trace(&args),
            "scopes" => self.scopes(&args).await,
            "variables" => self.variables(&args).await,
            "evaluate" => self.evaluate(&args).await,
            "continue" => self.resume("Debugger.resume", Expect::Nothing).await,
            "next" => self.resume("Debugger.stepOver", Expect::Step).await,
            "stepIn" => self.resume("Debugger.stepInto", Expect::Step).await,
            "stepOut" => self.resume("Debugger.stepOut", Expect::Step).await,
            "pause" => self.pause().await,
            "exceptionInfo" => self.exception_info(),
            "loadedSources" => Ok(self.loaded_sources()),
            "disconnect" | "terminate" => {
                let terminate = args["terminateDebuggee"].as_bool().unwrap_or(self.launched);
                self.disconnect(terminate).await;
                self.respond(&req, Ok(json!({}))).await;
                return command != "disconnect";
            }
            other => Err(AdapterFailure::Unsupported(other.to_string())),
        };
        self.respond(&req, result).await;
        true
    }

    async fn launch(&mut self, args: &Value) -> AdapterResult<Value> {
        let program = PathBuf::from(args["program"].as_str().unwrap_or(""));
        let cwd = PathBuf::from(args["cwd"].as_str().unwrap_or("."));
        let argv: Vec<String> = args["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let env: std::collections::BTreeMap<String, String> = args["env"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.stop_on_entry = args["stopOnEntry"].as_bool().unwrap_or(true);
        self.launched = true;
        self.program = Some(
            tokio::fs::canonicalize(&program)
                .await
                .unwrap_or_else(|_| program.clone()),
        );
        let started = process::start(self.runtime, &program, &argv, &cwd, &env).await?;
        let mut child = started.child;
        if let (Some(pid), Ok(mut owned)) = (child.id(), self.owned.lock()) {
            owned.push(pid);
        }
        if let Some(stdout) = child.stdout.take() {
            self.readers
                .push(forward(self.out.clone(), "stdout", BufReader::new(stdout)));
        }
        self.readers
            .push(forward(self.out.clone(), "stderr", started.stderr));
        self.child = Some(child);
        match self.connect(&started.ws_url, true).await {
            Err(AdapterFailure::Closed | AdapterFailure::NoFirstPause) => {
                Err(self.ended_at_start().await)
            }
            other => other.map(|()| json!({})),
        }
    }

    /// The inspector went away before the first pause: when the program has ended, its exit
    /// code — its output (what it printed while loading) is told first, so the failure that
    /// follows can quote it.
    async fn ended_at_start(&mut self) -> AdapterFailure {
        let Some(child) = self.child.as_mut() else {
            return AdapterFailure::Closed;
        };
        let code = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(status)) => status.code().map(i64::from),
            _ => return AdapterFailure::Closed,
        };
        self.child = None;
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        AdapterFailure::ExitedAtStart(code)
    }

    async fn attach(&mut self, args: &Value) -> AdapterResult<Value> {
        let ws = match args["connect"]["url"].as_str() {
            Some(url) => url.to_string(),
            None => {
                let host = args["connect"]["host"].as_str().unwrap_or("127.0.0.1");
                let port = args["connect"]["port"].as_u64().unwrap_or(9229) as u16;
                process::discover(host, port).await?
            }
        };
        self.connect(&ws, false).await?;
        Ok(json!({}))
    }

    /// Connect, enable the domains, let a waiting runtime run to its first-line pause, then
    /// tell the client it may configure.
    async fn connect(&mut self, ws_url: &str, launched: bool) -> AdapterResult<()> {
        let (cdp, events) = Cdp::connect(ws_url, self.dialect == Dialect::WebKit).await?;
        self.cdp = Some(cdp.clone());
        self.events = Some(events);
        let mut enables = vec![
            cdp.send("Runtime.enable", json!({})),
            cdp.send("Debugger.enable", json!({})),
        ];
        if self.dialect == Dialect::WebKit {
            enables.insert(0, cdp.send("Inspector.enable", json!({})));
            enables.push(cdp.send("Debugger.setBreakpointsActive", json!({"active": true})));
        }
        for rx in enables {
            rx.await.map_err(|_| AdapterFailure::Closed)??;
        }
        match self.dialect {
            Dialect::V8 => {
                // Both in flight at once: stepping skips Node's internals and dependencies.
                let blackbox = cdp.send(
                    "Debugger.setBlackboxPatterns",
                    json!({"patterns": ["^node:", "/node_modules/"]}),
                );
                let run = cdp.send("Runtime.runIfWaitingForDebugger", json!({}));
                let _ = blackbox.await;
                let _ = run.await;
            }
            // Bun waits for `Inspector.initialized` before it runs the program; asked to
            // pause first, it stops on the program's first statement.
            Dialect::WebKit => {
                if launched {
                    let _ = cdp.call("Debugger.pause", json!({})).await;
                }
                let _ = cdp.call("Inspector.initialized", json!({})).await;
            }
        }
        if launched {
            // --inspect-brk pauses before the first line: wait for it (loading scripts
            // meanwhile), so breakpoints are in place before anything runs.
            self.wait_for(|a| a.paused.is_some(), Duration::from_secs(15))
                .await?;
        }
        self.out.event("initialized", json!({})).await;
        Ok(())
    }

    /// Handle events until `done` holds or the time is up.
    async fn wait_for(
        &mut self,
        done: impl Fn(&Adapter) -> bool,
        within: Duration,
    ) -> AdapterResult<()> {
        let deadline = Instant::now() + within;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = tokio::time::timeout(left, next_event(&mut self.events))
                .await
                .map_err(|_| AdapterFailure::NoFirstPause)?;
            match ev {
                Some(e) => self.event_quiet(&e.method, e.params).await,
                None => return Err(AdapterFailure::Closed),
            }
        }
        Ok(())
    }

    async fn configuration_done(&mut self) -> AdapterResult<Value> {
        self.configured = true;
        if self.launched && self.paused.is_some() {
            if self.stop_on_entry && self.paused_in_program() {
                self.stopped("entry", &[], None).await;
            } else if self.stop_on_entry {
                // Paused in a module the script imports (ES modules run their imports
                // first): run on to the script's own first line.
                self.run_to_entry().await?;
            } else {
                let cdp = self.cdp()?;
                self.paused = None;
                self.handles.clear();
                cdp.call("Debugger.resume", json!({})).await?;
            }
        }
        Ok(json!({}))
    }

    async fn stopped(&self, reason: &str, hit: &[i64], text: Option<String>) {
        let mut body = json!({"reason": reason, "threadId": 1, "allThreadsStopped": true});
        if !hit.is_empty() {
            body["hitBreakpointIds"] = json!(hit);
        }
        if let Some(t) = text {
            body["text"] = json!(t);
        }
        self.out.event("stopped", body).await;
    }

    async fn disconnect(&mut self, terminate: bool) {
        if let Some(cdp) = self.cdp.take() {
            if !terminate {
                // Leave the program running as it was before the debugger came.
                let _ = cdp
                    .call("Debugger.setPauseOnExceptions", json!({"state": "none"}))
                    .await;
                for list in self.bps.values() {
                    for id in list.iter().flat_map(|b| &b.cdp_ids) {
                        let _ = cdp
                            .call("Debugger.removeBreakpoint", json!({"breakpointId": id}))
                            .await;
                    }
                }
                let _ = cdp.call("Debugger.resume", json!({})).await;
            } else if !self.launched {
                // The exit is scheduled, not run: an exiting Node holds on ("Waiting for the
                // debugger to disconnect...") until this session closes, and a close that
                // overtook the evaluate would cancel it. So the evaluate answers at once, and
                // the exit comes once the session below is closed (a paused program resumes).
                let _ = cdp
                    .call(
                        "Runtime.evaluate",
                        json!({"expression": "setTimeout(() => process.exit(), 0), undefined"}),
                    )
                    .await;
            }
            cdp.close();
        }
        if terminate {
            self.kill();
        }
    }
}

/// Forward what the program prints, a line at a time, leaving out the inspector's banner.
fn forward<R: AsyncRead + Send + Unpin + 'static>(
    out: Arc<Out>,
    category: &'static str,
    mut reader: BufReader<R>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if category == "stderr" && process::inspector_chatter(&line) {
                continue;
            }
            out.output(category, line.clone()).await;
        }
    })
}

fn capabilities() -> Value {
    json!({
        "supportsConfigurationDoneRequest": true,
        "supportsConditionalBreakpoints": true,
        "supportsHitConditionalBreakpoints": true,
        "supportsLogPoints": true,
        "supportsExceptionInfoRequest": true,
        "supportsLoadedSourcesRequest": true,
        "supportsTerminateRequest": true,
        "supportTerminateDebuggee": true,
        "exceptionBreakpointFilters": [
            {"filter": "all", "label": "All exceptions"},
            {"filter": "uncaught", "label": "Uncaught exceptions", "default": true}
        ]
    })
}
