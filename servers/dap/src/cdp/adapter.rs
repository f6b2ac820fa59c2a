//! A DAP adapter of kitbag's own in front of a runtime's inspector: DAP requests come in over
//! an in-process stream, each becomes CDP commands; CDP events become DAP events. The rest of
//! kitbag-dap drives it exactly as it drives debugpy or lldb-dap.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::dap::{encode, read_message};
use crate::debug::runtime::Runtime;

use super::process;
use super::sourcemap::{self, SourceMap};
use super::values::{HitCondition, logpoint_condition, top_level_names, type_text, value_text};
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
}

/// The inspector protocol's flavour: V8's (Node.js) or WebKit's (Bun, on JavaScriptCore).
#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    V8,
    WebKit,
}

struct Adapter {
    runtime: Runtime,
    dialect: Dialect,
    out: Arc<Out>,
    owned: Arc<Mutex<Vec<u32>>>,
    cdp: Option<Arc<Cdp>>,
    events: Option<mpsc::UnboundedReceiver<Event>>,
    child: Option<Child>,
    launched: bool,
    stop_on_entry: bool,
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
}

/// Run the adapter over `io` until the client hangs up or disconnects.
pub async fn run<S: AsyncRead + AsyncWrite + Send + 'static>(
    runtime: Runtime,
    io: S,
    owned: Arc<Mutex<Vec<u32>>>,
) {
    let (r, w) = tokio::io::split(io);
    let out = Arc::new(Out {
        w: tokio::sync::Mutex::new(Box::new(w)),
        seq: Default::default(),
    });
    let dialect = if runtime == Runtime::Bun {
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
        configured: false,
        scripts: HashMap::new(),
        bps: HashMap::new(),
        next_bp: 0,
        paused: None,
        expect: Expect::Nothing,
        handles: Vec::new(),
        main_context: None,
        exited: false,
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
                Some((method, params)) => a.event(&method, params).await,
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

/// The URLs a runtime may give a file's script: its `file://` URL, or the bare path (Node's
/// type-stripped TypeScript carries a `sourceURL` of the path).
fn url_pattern(path: &Path) -> String {
    let raw = path.to_string_lossy();
    let url = url::Url::from_file_path(path)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| format!("file://{raw}"));
    format!("^(?:{}|{})$", regex_escape(&url), regex_escape(&raw))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Adapter {
    fn cdp(&self) -> Result<Arc<Cdp>, String> {
        self.cdp
            .clone()
            .ok_or_else(|| "the program is not running under the inspector".to_string())
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

    async fn respond(&self, req: &Value, result: Result<Value, String>) {
        let mut msg = json!({"type": "response", "request_seq": req["seq"],
            "command": req["command"]});
        match result {
            Ok(body) => {
                msg["success"] = json!(true);
                msg["body"] = body;
            }
            Err(message) => {
                msg["success"] = json!(false);
                msg["message"] = json!(message);
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
            other => Err(format!(
                "{other} is not supported by kitbag's inspector bridge"
            )),
        };
        self.respond(&req, result).await;
        true
    }

    async fn launch(&mut self, args: &Value) -> Result<Value, String> {
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
        let started = process::start(&self.runtime, &program, &argv, &cwd, &env).await?;
        let mut child = started.child;
        if let (Some(pid), Ok(mut owned)) = (child.id(), self.owned.lock()) {
            owned.push(pid);
        }
        if let Some(stdout) = child.stdout.take() {
            forward(self.out.clone(), "stdout", BufReader::new(stdout));
        }
        forward(self.out.clone(), "stderr", started.stderr);
        self.child = Some(child);
        self.connect(&started.ws_url, true).await?;
        Ok(json!({}))
    }

    async fn attach(&mut self, args: &Value) -> Result<Value, String> {
        let host = args["connect"]["host"].as_str().unwrap_or("127.0.0.1");
        let port = args["connect"]["port"].as_u64().unwrap_or(9229) as u16;
        let ws = process::discover(host, port).await?;
        self.connect(&ws, false).await?;
        Ok(json!({}))
    }

    /// Connect, enable the domains, let a waiting runtime run to its first-line pause, then
    /// tell the client it may configure.
    async fn connect(&mut self, ws_url: &str, launched: bool) -> Result<(), String> {
        let (cdp, events) = Cdp::connect(ws_url).await?;
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
            rx.await
                .map_err(|_| "the inspector connection closed".to_string())??;
        }
        match self.dialect {
            Dialect::V8 => {
                let _ = cdp
                    .call(
                        "Debugger.setBlackboxPatterns",
                        json!({"patterns": ["^node:", "/node_modules/"]}),
                    )
                    .await;
                let _ = cdp.call("Runtime.runIfWaitingForDebugger", json!({})).await;
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
    ) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = tokio::time::timeout(left, next_event(&mut self.events))
                .await
                .map_err(|_| "the runtime did not pause at its first line".to_string())?;
            match ev {
                Some((m, p)) => self.event_quiet(&m, p).await,
                None => return Err("the inspector connection closed".into()),
            }
        }
        Ok(())
    }

    async fn configuration_done(&mut self) -> Result<Value, String> {
        self.configured = true;
        if self.launched && self.paused.is_some() {
            if self.stop_on_entry {
                self.stopped("entry", &[], None).await;
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

    /// An event while the session runs: recorded, and told to the client.
    async fn event(&mut self, method: &str, params: Value) {
        match method {
            "Debugger.paused" => self.on_paused(params).await,
            "Debugger.resumed" => {
                if self.paused.take().is_some() {
                    self.handles.clear();
                    self.out
                        .event(
                            "continued",
                            json!({"threadId": 1, "allThreadsContinued": true}),
                        )
                        .await;
                }
            }
            "Debugger.breakpointResolved" => self.on_resolved(&params).await,
            _ => self.event_quiet(method, params).await,
        }
    }

    /// Events that only update what the adapter knows (and the start-up pause).
    async fn event_quiet(&mut self, method: &str, params: Value) {
        match method {
            "Debugger.scriptParsed" => self.on_script(params).await,
            "Debugger.paused" if !self.configured => {
                self.paused = Some(Paused {
                    frames: params["callFrames"].as_array().cloned().unwrap_or_default(),
                    exception: None,
                });
            }
            "Debugger.paused" => self.on_paused(params).await,
            "Debugger.breakpointResolved" => self.on_resolved(&params).await,
            "Runtime.executionContextCreated" => {
                let ctx = &params["context"];
                if self.main_context.is_none() && ctx["auxData"]["isDefault"] != json!(false) {
                    self.main_context = ctx["id"].as_i64();
                }
            }
            "Runtime.executionContextDestroyed" => {
                // The program is done; Node waits for the debugger to detach before it exits.
                if self.launched
                    && params["executionContextId"].as_i64() == self.main_context
                    && let Some(cdp) = self.cdp.take()
                {
                    cdp.close();
                }
            }
            _ => {}
        }
    }

    async fn on_script(&mut self, p: Value) {
        let id = p["scriptId"].as_str().unwrap_or("").to_string();
        let url = p["url"].as_str().unwrap_or("").to_string();
        let path = url_path(&url);
        let map = match (p["sourceMapURL"].as_str(), &path) {
            (Some(m), Some(script)) if !m.is_empty() => sourcemap::load(m, script).map(Arc::new),
            _ => None,
        };
        let mapped = map.clone();
        self.scripts.insert(id.clone(), Script { url, path, map });
        // Breakpoints in sources this script maps: bind them now that it is here.
        if let Some(map) = mapped {
            let wanted: Vec<PathBuf> = self.bps.keys().filter(|p| map.covers(p)).cloned().collect();
            for file in wanted {
                self.bind_mapped(&file, &id, &map).await;
            }
        }
    }

    async fn on_resolved(&mut self, p: &Value) {
        let cdp_id = p["breakpointId"].as_str().unwrap_or("");
        let line = p["location"]["lineNumber"].as_i64().map(|l| l + 1);
        let mut changed = None;
        for list in self.bps.values_mut() {
            for b in list.iter_mut() {
                if b.cdp_ids.iter().any(|c| c == cdp_id) && !b.verified {
                    b.verified = true;
                    b.actual_line = b.actual_line.or(line);
                    changed = Some(
                        json!({"id": b.id, "verified": true, "line": b.actual_line.unwrap_or(b.line)}),
                    );
                }
            }
        }
        if let Some(bp) = changed {
            self.out
                .event("breakpoint", json!({"reason": "changed", "breakpoint": bp}))
                .await;
        }
    }

    async fn on_paused(&mut self, p: Value) {
        let frames = p["callFrames"].as_array().cloned().unwrap_or_default();
        // V8 lists the breakpoints hit; WebKit names one in the pause's data.
        let mut hit_cdp: Vec<String> = p["hitBreakpoints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if p["reason"] == "Breakpoint"
            && let Some(id) = p["data"]["breakpointId"].as_str()
        {
            hit_cdp.push(id.to_string());
        }
        let mut hit = Vec::new();
        let mut counted_out = false;
        for list in self.bps.values_mut() {
            for b in list.iter_mut() {
                if b.cdp_ids.iter().any(|c| hit_cdp.contains(c)) {
                    b.hits += 1;
                    if b.hit.is_none_or(|h| h.breaks(b.hits)) {
                        hit.push(b.id);
                    } else {
                        counted_out = true;
                    }
                }
            }
        }
        let cdp_reason = p["reason"].as_str().unwrap_or("");
        let expect = std::mem::replace(&mut self.expect, Expect::Nothing);
        let exception = matches!(cdp_reason, "exception" | "promiseRejection");
        // A breakpoint not due yet (hit count): go on as if nothing happened.
        if hit.is_empty() && counted_out && expect == Expect::Nothing && !exception {
            if let Some(cdp) = &self.cdp {
                drop(cdp.send("Debugger.resume", json!({})));
            }
            return;
        }
        let reason = if !hit.is_empty() {
            "breakpoint"
        } else if exception {
            "exception"
        } else if expect == Expect::Step {
            "step"
        } else if expect == Expect::Pause {
            "pause"
        } else if cdp_reason == "Break on start" {
            "entry"
        } else {
            "debugger statement"
        };
        let text = exception.then(|| {
            p["data"]["description"]
                .as_str()
                .unwrap_or("exception")
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        });
        self.paused = Some(Paused {
            frames,
            exception: exception.then(|| p["data"].clone()),
        });
        self.handles.clear();
        self.stopped(reason, &hit, text).await;
    }

    async fn resume(&mut self, method: &str, expect: Expect) -> Result<Value, String> {
        let cdp = self.cdp()?;
        if self.paused.is_none() {
            return Err("the program is not paused".into());
        }
        self.expect = expect;
        cdp.call(method, json!({})).await?;
        Ok(json!({"allThreadsContinued": true}))
    }

    async fn pause(&mut self) -> Result<Value, String> {
        let cdp = self.cdp()?;
        if self.paused.is_some() {
            return Ok(json!({}));
        }
        self.expect = Expect::Pause;
        cdp.call("Debugger.pause", json!({})).await?;
        Ok(json!({}))
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
                let _ = cdp
                    .call("Runtime.evaluate", json!({"expression": "process.exit()"}))
                    .await;
            }
            cdp.close();
        }
        if terminate {
            self.kill();
        }
    }

    fn frame(&self, frame_id: i64) -> Result<&Value, String> {
        let paused = self.paused.as_ref().ok_or("the program is not paused")?;
        usize::try_from(frame_id - 1)
            .ok()
            .and_then(|i| paused.frames.get(i))
            .ok_or_else(|| format!("no frame {frame_id}"))
    }

    /// A V8 location (0-based) as (path, 1-based line, 1-based column), through the
    /// script's source map when it has one.
    fn place(&self, location: &Value) -> (Option<String>, i64, i64) {
        let script = self
            .scripts
            .get(location["scriptId"].as_str().unwrap_or(""));
        let line = location["lineNumber"].as_i64().unwrap_or(0);
        let column = location["columnNumber"].as_i64().unwrap_or(0);
        if let Some(s) = script {
            if let Some(orig) = s.map.as_ref().and_then(|m| m.original(line, column)) {
                return (
                    Some(orig.path.to_string_lossy().into_owned()),
                    orig.line + 1,
                    orig.column + 1,
                );
            }
            let path = s
                .path
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .or_else(|| (!s.url.is_empty()).then(|| s.url.clone()));
            return (path, line + 1, column + 1);
        }
        (None, line + 1, column + 1)
    }

    fn stack_trace(&self, args: &Value) -> Result<Value, String> {
        let paused = self.paused.as_ref().ok_or("the program is not paused")?;
        let start = args["startFrame"].as_u64().unwrap_or(0) as usize;
        let levels = args["levels"].as_u64().filter(|l| *l > 0).unwrap_or(1000) as usize;
        let frames: Vec<Value> = paused
            .frames
            .iter()
            .enumerate()
            .skip(start)
            .take(levels)
            .map(|(i, f)| {
                let (path, line, column) = self.place(&f["location"]);
                let name = match f["functionName"].as_str() {
                    Some(n) if !n.is_empty() => n.to_string(),
                    _ => "(anonymous)".to_string(),
                };
                let mut frame = json!({"id": i + 1, "name": name, "line": line, "column": column});
                if let Some(p) = path {
                    frame["source"] = json!({"path": p});
                }
                frame
            })
            .collect();
        Ok(json!({"stackFrames": frames, "totalFrames": paused.frames.len()}))
    }

    fn handle(&mut self, object_id: &str) -> i64 {
        self.handles.push(Handle::Object(object_id.to_string()));
        self.handles.len() as i64
    }

    /// A module frame's top-level names (WebKit), from the script's source.
    async fn module_names(&self, frame: &Value) -> Vec<String> {
        let Some(cdp) = &self.cdp else {
            return Vec::new();
        };
        let script = frame["location"]["scriptId"].clone();
        match cdp
            .call("Debugger.getScriptSource", json!({"scriptId": script}))
            .await
        {
            Ok(r) => top_level_names(r["scriptSource"].as_str().unwrap_or("")),
            Err(_) => Vec::new(),
        }
    }

    async fn scopes(&mut self, args: &Value) -> Result<Value, String> {
        let frame = self.frame(args["frameId"].as_i64().unwrap_or(0))?.clone();
        let mut scopes = Vec::new();
        let mut first_closure = true;
        let mut own: Option<(&Value, &Value)> = None;
        for s in frame["scopeChain"].as_array().into_iter().flatten() {
            let kind = s["type"].as_str().unwrap_or("");
            let Some(object) = s["object"]["objectId"].as_str() else {
                continue;
            };
            if self.dialect == Dialect::WebKit
                && kind == "closure"
                && first_closure
                && s["empty"].as_bool() == Some(true)
                && frame["functionName"] == "module code"
            {
                first_closure = false;
                let names = self.module_names(&frame).await;
                self.handles.push(Handle::Module {
                    call_frame: frame["callFrameId"].clone(),
                    names,
                });
                scopes.push(json!({"name": "Local", "presentationHint": "locals",
                    "variablesReference": self.handles.len(), "expensive": false}));
                continue;
            }
            let name = match (self.dialect, kind) {
                // JavaScriptCore calls the function's own scopes closures (the first, and
                // any more of the same function: parameters and body apart) and a block's
                // `nestedLexical`.
                (Dialect::WebKit, "closure")
                    if first_closure
                        || (own.is_some() && own == Some((&s["name"], &s["location"]))) =>
                {
                    if first_closure {
                        own = s.get("name").map(|n| (n, &s["location"]));
                    }
                    first_closure = false;
                    "Local".to_string()
                }
                (Dialect::WebKit, "nestedLexical") => "Block".into(),
                (Dialect::WebKit, "globalLexicalEnvironment") => "Script".into(),
                (Dialect::WebKit, "functionName") => continue,
                _ => {
                    let mut n: String = kind.chars().take(1).flat_map(char::to_uppercase).collect();
                    n.push_str(kind.get(1..).unwrap_or(""));
                    n
                }
            };
            let reference = self.handle(object);
            let mut scope = json!({"name": name, "variablesReference": reference,
                "expensive": kind == "global"});
            if name == "Local" {
                scope["presentationHint"] = json!("locals");
            }
            scopes.push(scope);
        }
        Ok(json!({"scopes": scopes}))
    }

    async fn variables(&mut self, args: &Value) -> Result<Value, String> {
        let reference = args["variablesReference"].as_i64().unwrap_or(0);
        let handle = usize::try_from(reference - 1)
            .ok()
            .and_then(|i| self.handles.get(i))
            .ok_or_else(|| format!("no variables reference {reference} in this stop"))?;
        let object = match handle {
            Handle::Object(id) => id.clone(),
            Handle::Module { call_frame, names } => {
                let (call_frame, names) = (call_frame.clone(), names.clone());
                return self.module_variables(call_frame, &names).await;
            }
        };
        let cdp = self.cdp()?;
        // WebKit's scope objects answer only `getDisplayableProperties` (Web Inspector's
        // own call for them); it works for plain objects too.
        let props = match self.dialect {
            Dialect::V8 => {
                cdp.call(
                    "Runtime.getProperties",
                    json!({"objectId": object, "ownProperties": true, "generatePreview": true}),
                )
                .await?
            }
            Dialect::WebKit => {
                cdp.call(
                    "Runtime.getDisplayableProperties",
                    json!({"objectId": object, "generatePreview": true}),
                )
                .await?
            }
        };
        let mut vars = Vec::new();
        // V8 answers `result`, WebKit `properties`.
        let list = props.get("result").or(props.get("properties"));
        for p in list.and_then(Value::as_array).into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or("").to_string();
            let Some(value) = p.get("value") else {
                // An accessor (Node's `process` on the global object): reading it runs code,
                // so it is listed, not read; evaluate it to see the value.
                if p.get("get").is_some() {
                    vars.push(json!({"name": name, "value": "(getter: evaluate to read)",
                        "type": "accessor", "variablesReference": 0}));
                }
                continue;
            };
            let reference = match value["objectId"].as_str() {
                Some(id) if value["type"] == "object" && value["subtype"] != "null" => {
                    self.handle(id)
                }
                _ => 0,
            };
            vars.push(json!({"name": name, "value": value_text(value),
                "type": type_text(value), "variablesReference": reference}));
        }
        Ok(json!({"variables": vars}))
    }

    /// A module's bindings, each read on its frame (one still in its temporal dead zone is
    /// left out).
    async fn module_variables(
        &mut self,
        call_frame: Value,
        names: &[String],
    ) -> Result<Value, String> {
        let cdp = self.cdp()?;
        let pending: Vec<_> = names
            .iter()
            .map(|n| {
                cdp.send(
                    "Debugger.evaluateOnCallFrame",
                    json!({"callFrameId": call_frame, "expression": n, "generatePreview": true,
                        "doNotPauseOnExceptionsAndMuteConsole": true, "objectGroup": "kitbag"}),
                )
            })
            .collect();
        let mut vars = Vec::new();
        for (name, rx) in names.iter().zip(pending) {
            let Ok(Ok(answer)) = rx.await else { continue };
            if answer["wasThrown"].as_bool() == Some(true) {
                continue;
            }
            let value = &answer["result"];
            let reference = match value["objectId"].as_str() {
                Some(id) if value["type"] == "object" && value["subtype"] != "null" => {
                    self.handle(id)
                }
                _ => 0,
            };
            vars.push(json!({"name": name, "value": value_text(value),
                "type": type_text(value), "variablesReference": reference}));
        }
        Ok(json!({"variables": vars}))
    }

    async fn evaluate(&mut self, args: &Value) -> Result<Value, String> {
        let cdp = self.cdp()?;
        let expression = args["expression"].as_str().unwrap_or("");
        let watch = args["context"].as_str() != Some("repl");
        let mut params = json!({"expression": expression, "generatePreview": true});
        match self.dialect {
            Dialect::V8 => {
                params["throwOnSideEffect"] = json!(watch);
            }
            // JavaScriptCore has no side-effect check: a watch expression is evaluated as
            // it is, without pausing on its exceptions or printing.
            Dialect::WebKit => {
                params["doNotPauseOnExceptionsAndMuteConsole"] = json!(watch);
                params["objectGroup"] = json!("kitbag");
            }
        }
        let answer = match args["frameId"].as_i64() {
            Some(f) => {
                params["callFrameId"] = self.frame(f)?["callFrameId"].clone();
                cdp.call("Debugger.evaluateOnCallFrame", params).await?
            }
            None => {
                if self.dialect == Dialect::V8 {
                    params["replMode"] = json!(!watch);
                }
                cdp.call("Runtime.evaluate", params).await?
            }
        };
        let thrown = answer
            .get("exceptionDetails")
            .map(|ex| {
                ex["exception"]["description"]
                    .as_str()
                    .or(ex["text"].as_str())
                    .unwrap_or("the expression threw")
                    .to_string()
            })
            .or_else(|| {
                (answer["wasThrown"].as_bool() == Some(true)).then(|| {
                    answer["result"]["description"]
                        .as_str()
                        .unwrap_or("the expression threw")
                        .to_string()
                })
            });
        if let Some(text) = thrown {
            return Err(text.lines().next().unwrap_or(&text).to_string());
        }
        let result = &answer["result"];
        let reference = match result["objectId"].as_str() {
            Some(id) if result["type"] == "object" => self.handle(id),
            _ => 0,
        };
        Ok(
            json!({"result": value_text(result), "type": type_text(result),
            "variablesReference": reference}),
        )
    }

    fn exception_info(&self) -> Result<Value, String> {
        let ex = self
            .paused
            .as_ref()
            .and_then(|p| p.exception.as_ref())
            .ok_or("the program is not stopped on an exception")?;
        let description = ex["description"].as_str().unwrap_or("");
        Ok(
            json!({"exceptionId": ex["className"].as_str().unwrap_or("Error"),
            "description": description.lines().next().unwrap_or(description),
            "breakMode": "unhandled"}),
        )
    }

    fn loaded_sources(&self) -> Value {
        let mut sources: Vec<Value> = Vec::new();
        for s in self.scripts.values() {
            if let Some(p) = &s.path {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                sources.push(json!({"name": name, "path": p}));
            }
            if let Some(m) = &s.map {
                for o in m.sources() {
                    let name = o
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    sources.push(json!({"name": name, "path": o}));
                }
            }
        }
        json!({"sources": sources})
    }

    async fn set_exceptions(&mut self, args: &Value) -> Result<Value, String> {
        let filters: Vec<&str> = args["filters"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let state = if filters.contains(&"all") {
            "all"
        } else if filters.contains(&"uncaught") {
            "uncaught"
        } else {
            "none"
        };
        self.cdp()?
            .call("Debugger.setPauseOnExceptions", json!({"state": state}))
            .await?;
        Ok(json!({}))
    }

    async fn set_breakpoints(&mut self, args: &Value) -> Result<Value, String> {
        let cdp = self.cdp()?;
        let file = PathBuf::from(args["source"]["path"].as_str().unwrap_or(""));
        if let Some(old) = self.bps.remove(&file) {
            for id in old.iter().flat_map(|b| &b.cdp_ids) {
                let _ = cdp
                    .call("Debugger.removeBreakpoint", json!({"breakpointId": id}))
                    .await;
            }
        }
        let mut list = Vec::new();
        for b in args["breakpoints"].as_array().into_iter().flatten() {
            self.next_bp += 1;
            let log = b["logMessage"].as_str();
            let condition = b["condition"].as_str().filter(|c| !c.trim().is_empty());
            let condition = match log {
                Some(m) => Some(logpoint_condition(m, condition)),
                None => condition.map(String::from),
            };
            let hit = match b["hitCondition"].as_str() {
                Some(h) if log.is_none() => Some(HitCondition::parse(h).ok_or_else(|| {
                    format!("hit condition `{h}`: use >=N, >N, ==N, <N, <=N or %N")
                })?),
                _ => None,
            };
            list.push(Bp {
                id: self.next_bp,
                line: b["line"].as_i64().unwrap_or(1),
                hit,
                hits: 0,
                cdp_ids: Vec::new(),
                verified: false,
                actual_line: None,
                condition,
            });
        }
        self.bps.insert(file.clone(), list);
        // A source some loaded script maps to (TypeScript built to JavaScript) is bound
        // through the map; any other by its URL, now or when it loads.
        let mapped: Vec<(String, Arc<SourceMap>)> = self
            .scripts
            .iter()
            .filter_map(|(id, s)| {
                s.map
                    .clone()
                    .filter(|m| m.covers(&file))
                    .map(|m| (id.clone(), m))
            })
            .collect();
        if mapped.is_empty() {
            self.bind_by_url(&file).await;
        } else {
            for (id, map) in mapped {
                self.bind_mapped(&file, &id, &map).await;
            }
        }
        let answer: Vec<Value> = self
            .bps
            .get(&file)
            .into_iter()
            .flatten()
            .map(|b| {
                let mut v = json!({"id": b.id, "verified": b.verified,
                    "line": b.actual_line.unwrap_or(b.line)});
                if !b.verified {
                    v["message"] = json!("pending: bound when the script loads");
                }
                v
            })
            .collect();
        Ok(json!({"breakpoints": answer}))
    }

    async fn bind_by_url(&mut self, file: &Path) {
        let Some(cdp) = self.cdp.clone() else { return };
        let pattern = url_pattern(file);
        let self_dialect = self.dialect;
        let Some(list) = self.bps.get_mut(file) else {
            return;
        };
        for b in list.iter_mut() {
            let mut params = json!({"lineNumber": b.line - 1, "urlRegex": pattern});
            set_condition(&mut params, self_dialect, b.condition.as_deref());
            if let Ok(r) = cdp.call("Debugger.setBreakpointByUrl", params).await {
                if let Some(id) = r["breakpointId"].as_str() {
                    b.cdp_ids.push(id.to_string());
                }
                if let Some(loc) = r["locations"].as_array().and_then(|l| l.first()) {
                    b.verified = true;
                    b.actual_line = loc["lineNumber"].as_i64().map(|l| l + 1);
                }
            }
        }
    }

    /// Bind a source file's breakpoints in a script generated from it.
    async fn bind_mapped(&mut self, file: &Path, script_id: &str, map: &SourceMap) {
        let Some(cdp) = self.cdp.clone() else { return };
        let mut resolved = Vec::new();
        let self_dialect = self.dialect;
        let Some(list) = self.bps.get_mut(file) else {
            return;
        };
        for b in list.iter_mut() {
            let Some((line, column)) = map.generated(file, b.line - 1) else {
                continue;
            };
            let mut params = json!({"location": {"scriptId": script_id,
                "lineNumber": line, "columnNumber": column}});
            set_condition(&mut params, self_dialect, b.condition.as_deref());
            if let Ok(r) = cdp.call("Debugger.setBreakpoint", params).await
                && let Some(id) = r["breakpointId"].as_str()
            {
                b.cdp_ids.push(id.to_string());
                if !b.verified {
                    b.verified = true;
                    resolved.push(json!({"id": b.id, "verified": true, "line": b.line}));
                }
            }
        }
        for bp in resolved {
            self.out
                .event("breakpoint", json!({"reason": "changed", "breakpoint": bp}))
                .await;
        }
    }
}

/// A breakpoint's condition: V8 takes it as `condition`, WebKit inside `options`.
fn set_condition(params: &mut Value, dialect: Dialect, condition: Option<&str>) {
    if let Some(c) = condition {
        match dialect {
            Dialect::V8 => params["condition"] = json!(c),
            Dialect::WebKit => params["options"] = json!({"condition": c}),
        }
    }
}

/// Forward what the program prints, a line at a time, leaving out the inspector's banner.
fn forward<R: AsyncRead + Send + Unpin + 'static>(
    out: Arc<Out>,
    category: &'static str,
    mut reader: BufReader<R>,
) {
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
    });
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
