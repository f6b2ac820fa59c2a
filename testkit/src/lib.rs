//! A deliberately small MCP client for tests and benchmarks.
//!
//! It speaks raw JSON-RPC over a child's stdio so tests see exactly what a client sees,
//! in either protocol era: the `initialize` handshake (2025-11-25) or the 2026-07-28
//! revision (`server/discover`, then every request carrying its own `_meta`).
#![allow(clippy::unwrap_used)] // test support: a broken pipe should fail the test loudly

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod bench;
pub mod clients;
pub mod fuzz;
pub mod http;
pub mod llm_mock;
pub mod oauth;
pub mod oauth_as;
pub mod otlp;
pub mod pg;
pub mod race;
pub mod relay;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` + `notifications/initialized`, protocol 2025-11-25.
    Handshake,
    /// `server/discover`, per-request `_meta`, protocol 2026-07-28.
    Modern,
}

pub const HANDSHAKE_VERSION: &str = "2025-11-25";
pub const MODERN_VERSION: &str = "2026-07-28";

/// The outcome of one `tools/call`.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub is_error: bool,
    pub structured: Value,
    pub text: String,
    pub raw: Value,
}

impl ToolCall {
    /// The error code of a failed call (`structuredContent.error.code`).
    pub fn error_code(&self) -> Option<&str> {
        self.structured["error"]["code"].as_str()
    }

    /// Assert that the failure names `field` (`structuredContent.error.detail.field`).
    pub fn expect_field(self, field: &str) -> Self {
        assert_eq!(
            self.structured["error"]["detail"]["field"], field,
            "the error should name `{field}`: {}",
            self.text
        );
        self
    }
}

/// How a test client answers the server's `elicitation/create`: the request's params in, the
/// `ElicitResult` out (`{"action": "accept", "content": {...}}`).
pub type Elicitor = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

pub struct McpClient {
    child: Child,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    era: Era,
    next_id: u64,
    responses: Receiver<Value>,
    pending: HashMap<u64, Value>,
    notifications: Arc<Mutex<Vec<Value>>>,
    stdout_garbage: Arc<Mutex<Vec<String>>>,
    pub server_info: Value,
    /// The result of the opening exchange (`initialize` or `server/discover`): capabilities,
    /// instructions, protocol versions.
    pub opened: Value,
    pub timeout: Duration,
    capabilities: Value,
    /// Hold every `structuredContent` against its tool's `outputSchema` (on by default, as
    /// validating clients do); the schemas come from `tools/list`, listed once if needed.
    pub validate: bool,
    output_schemas: HashMap<String, Option<jsonschema::Validator>>,
    /// Answers elicitation: on the connection (handshake era) or by retrying a call that
    /// answered `input_required` (2026-07-28).
    elicitor: Option<Elicitor>,
    /// The `elicitation/create` params seen, in order (both eras).
    pub elicited: Arc<Mutex<Vec<Value>>>,
}

impl McpClient {
    /// Spawn `bin` with `args` in `cwd` and complete the era's opening exchange.
    pub fn spawn(bin: &Path, args: &[&str], cwd: &Path, era: Era) -> Self {
        Self::spawn_with_env(bin, args, cwd, era, &[])
    }

    pub fn spawn_with_env(
        bin: &Path,
        args: &[&str],
        cwd: &Path,
        era: Era,
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn_full(bin, args, cwd, era, env, None, None)
    }

    /// Spawn declaring the `elicitation` capability and answering each `elicitation/create`
    /// with `elicitor` (in 2026-07-28, by answering `input_required` and calling again).
    pub fn spawn_eliciting(
        bin: &Path,
        args: &[&str],
        cwd: &Path,
        era: Era,
        elicitor: Elicitor,
    ) -> Self {
        Self::spawn_full(bin, args, cwd, era, &[], None, Some(elicitor))
    }

    /// Spawn with the handshake era, declaring the `roots` capability and answering the
    /// server's `roots/list` requests with `roots` (absolute directory paths).
    pub fn spawn_with_roots(bin: &Path, args: &[&str], cwd: &Path, roots: &[&Path]) -> Self {
        let roots: Vec<Value> = roots
            .iter()
            .map(|r| json!({"uri": format!("file://{}", r.display()), "name": r.display().to_string()}))
            .collect();
        Self::spawn_full(bin, args, cwd, Era::Handshake, &[], Some(roots), None)
    }

    fn spawn_full(
        bin: &Path,
        args: &[&str],
        cwd: &Path,
        era: Era,
        env: &[(&str, &str)],
        roots: Option<Vec<Value>>,
        elicitor: Option<Elicitor>,
    ) -> Self {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdin = Arc::new(Mutex::new(Some(child.stdin.take().unwrap())));
        let stdout = child.stdout.take().unwrap();
        let replies = stdin.clone();
        let offered_roots = roots.clone();
        let elicited = Arc::new(Mutex::new(Vec::new()));
        let (answerer, seen) = (elicitor.clone(), elicited.clone());
        let (tx, rx): (Sender<Value>, Receiver<Value>) = channel();
        let notifications = Arc::new(Mutex::new(Vec::new()));
        let garbage = Arc::new(Mutex::new(Vec::new()));
        let (n2, g2) = (notifications.clone(), garbage.clone());
        thread::spawn(move || {
            for line in BufReader::with_capacity(1 << 20, stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v)
                        if v.get("id").is_some()
                            && (v.get("result").is_some() || v.get("error").is_some()) =>
                    {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Ok(v) if v.get("method").is_some() && v.get("id").is_some() => {
                        // A request from the server: answer roots/list and elicitation when
                        // offered, refuse the rest.
                        let reply = match (v["method"].as_str(), &offered_roots, &answerer) {
                            (Some("roots/list"), Some(roots), _) => {
                                json!({"jsonrpc": "2.0", "id": v["id"], "result": {"roots": roots}})
                            }
                            (Some("elicitation/create"), _, Some(answer)) => {
                                seen.lock().unwrap().push(v["params"].clone());
                                json!({"jsonrpc": "2.0", "id": v["id"], "result": answer(&v["params"])})
                            }
                            _ => {
                                json!({"jsonrpc": "2.0", "id": v["id"], "error": {"code": -32601, "message": "not supported by the test client"}})
                            }
                        };
                        if let Some(w) = replies.lock().unwrap().as_mut() {
                            let _ = writeln!(w, "{reply}");
                            let _ = w.flush();
                        }
                        n2.lock().unwrap().push(v);
                    }
                    Ok(v) if v.get("method").is_some() => n2.lock().unwrap().push(v),
                    _ => g2.lock().unwrap().push(line),
                }
            }
        });
        let mut client = McpClient {
            child,
            stdin,
            era,
            next_id: 1,
            responses: rx,
            pending: HashMap::new(),
            notifications,
            stdout_garbage: garbage,
            server_info: Value::Null,
            opened: Value::Null,
            timeout: Duration::from_secs(60),
            capabilities: match (roots.is_some(), elicitor.is_some()) {
                (true, _) => json!({"roots": {"listChanged": false}}),
                (false, true) => json!({"elicitation": {"form": {}}}),
                (false, false) => json!({}),
            },
            validate: true,
            output_schemas: HashMap::new(),
            elicitor,
            elicited,
        };
        client.open();
        client
    }

    fn open(&mut self) {
        match self.era {
            Era::Handshake => {
                let r = self.request(
                    "initialize",
                    json!({
                        "protocolVersion": HANDSHAKE_VERSION,
                        "capabilities": self.capabilities.clone(),
                        "clientInfo": {"name": "kitbag-testkit", "version": "0"}
                    }),
                );
                assert!(r.get("result").is_some(), "initialize failed: {r}");
                self.server_info = r["result"]["serverInfo"].clone();
                self.opened = r["result"].clone();
                self.notify("notifications/initialized", json!({}));
            }
            Era::Modern => {
                let r = self.request("server/discover", json!({}));
                assert!(r.get("result").is_some(), "server/discover failed: {r}");
                let result = &r["result"];
                self.server_info = if result.get("serverInfo").is_some() {
                    result["serverInfo"].clone()
                } else {
                    result["_meta"]["io.modelcontextprotocol/serverInfo"].clone()
                };
                self.opened = result.clone();
            }
        }
    }

    fn modern_meta(&self) -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "kitbag-testkit", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": self.capabilities.clone()
        })
    }

    fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_string(msg).unwrap();
        line.push('\n');
        let mut guard = self.stdin.lock().unwrap();
        let w = guard.as_mut().expect("stdin already closed");
        w.write_all(line.as_bytes()).unwrap();
        w.flush().unwrap();
    }

    /// Send a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, mut params: Value) -> u64 {
        if self.era == Era::Modern {
            let meta = params
                .as_object_mut()
                .unwrap()
                .entry("_meta")
                .or_insert_with(|| json!({}));
            if let (Some(m), Value::Object(base)) = (meta.as_object_mut(), self.modern_meta()) {
                for (k, v) in base {
                    m.entry(k).or_insert(v);
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Wait for the response to request `id` (the whole JSON-RPC message).
    pub fn wait_response(&mut self, id: u64) -> Value {
        if let Some(v) = self.pending.remove(&id) {
            return v;
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .responses
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response to request {id}: {e}"));
            if v["id"] == json!(id) {
                return v;
            }
            if let Some(other) = v["id"].as_u64() {
                self.pending.insert(other, v);
            }
        }
    }

    /// Send a request and wait for its response (the whole JSON-RPC message).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.wait_response(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// `tools/list` → the array of tool definitions (every page). Their output schemas are
    /// kept to validate later results.
    pub fn list_tools(&mut self) -> Vec<Value> {
        let mut tools = Vec::new();
        let mut params = json!({});
        loop {
            let r = self.request("tools/list", params);
            let page = r["result"]["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("tools/list failed: {r}"));
            tools.extend(page.iter().cloned());
            match r["result"]["nextCursor"].as_str() {
                Some(c) if !c.is_empty() => params = json!({"cursor": c}),
                _ => break,
            }
        }
        self.keep_schemas(&tools);
        tools
    }

    fn keep_schemas(&mut self, tools: &[Value]) {
        for t in tools {
            let Some(name) = t["name"].as_str() else {
                continue;
            };
            let validator = t.get("outputSchema").map(|s| {
                jsonschema::draft202012::new(s)
                    .unwrap_or_else(|e| panic!("{name}: its outputSchema does not compile: {e}"))
            });
            self.output_schemas.insert(name.to_string(), validator);
        }
    }

    /// Hold a result against its tool's outputSchema, as the Python and TypeScript SDKs do:
    /// a tool with an outputSchema must answer a success with `structuredContent`, and any
    /// `structuredContent` (success or error) must validate.
    fn check_output(&mut self, name: &str, call: &ToolCall) {
        if !self.validate || call.raw.is_null() {
            return;
        }
        if !self.output_schemas.contains_key(name) {
            self.list_tools();
            // Not listed (a hidden or unknown tool): nothing to hold it against.
            self.output_schemas.entry(name.to_string()).or_insert(None);
        }
        let Some(Some(validator)) = self.output_schemas.get(name) else {
            return;
        };
        if call.structured.is_null() {
            assert!(
                call.is_error,
                "{name}: a success without structuredContent, though the tool has an outputSchema: {}",
                call.raw
            );
            return;
        }
        let problems: Vec<String> = validator
            .iter_errors(&call.structured)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            problems.is_empty(),
            "{name}: structuredContent does not match the tool's outputSchema (a validating client would refuse it): {problems:#?}\nresult: {}",
            call.raw
        );
    }

    /// `tools/call`; panics on a JSON-RPC error (use [`Self::request`] to test those), and when
    /// the result does not match the tool's outputSchema.
    pub fn call(&mut self, name: &str, args: Value) -> ToolCall {
        let mut r = self.request("tools/call", json!({"name": name, "arguments": args}));
        // 2026-07-28: a call that needs input answers `input_required`; answer and call again
        // with the same arguments (as the SDKs do, at most 10 rounds).
        for _ in 0..10 {
            let Some(answer) = self.elicitor.clone() else {
                break;
            };
            if r["result"]["resultType"] != "input_required" {
                break;
            }
            let mut responses = serde_json::Map::new();
            for (key, request) in r["result"]["inputRequests"].as_object().unwrap() {
                assert_eq!(request["method"], "elicitation/create", "{r}");
                self.elicited
                    .lock()
                    .unwrap()
                    .push(request["params"].clone());
                responses.insert(key.clone(), answer(&request["params"]));
            }
            let mut params = json!({"name": name, "arguments": args, "inputResponses": responses});
            if let Some(state) = r["result"].get("requestState") {
                params["requestState"] = state.clone();
            }
            r = self.request("tools/call", params);
        }
        let call = Self::to_tool_call(r);
        self.check_output(name, &call);
        call
    }

    /// `tools/call` that must succeed; panics with the tool, its arguments and the answer.
    pub fn call_ok(&mut self, tool: &str, args: Value) -> ToolCall {
        let r = self.call(tool, args.clone());
        Self::assert_success(tool, &args, &r);
        r
    }

    /// [`Self::call_ok`], timed from the request's write to its answer's arrival: the client's
    /// own checks (the outputSchema validation) come after and are not counted. For benchmarks.
    pub fn timed_call_ok(&mut self, tool: &str, args: Value) -> (ToolCall, Duration) {
        let started = Instant::now();
        let r = self.request(
            "tools/call",
            json!({"name": tool, "arguments": args.clone()}),
        );
        let took = started.elapsed();
        let call = Self::to_tool_call(r);
        self.check_output(tool, &call);
        Self::assert_success(tool, &args, &call);
        (call, took)
    }

    fn assert_success(tool: &str, args: &Value, r: &ToolCall) {
        assert!(!r.is_error, "{tool} {args} failed: {}", r.text);
        assert!(
            r.structured.is_object(),
            "{tool}: a success carries a structuredContent object: {}",
            r.raw
        );
    }

    /// `tools/call` that must fail with `code` (an `isError` result, not a protocol error).
    pub fn call_err(&mut self, tool: &str, args: Value, code: &str) -> ToolCall {
        let r = self.call(tool, args.clone());
        assert!(
            r.is_error,
            "{tool} {args} should fail with {code}, got: {}",
            r.text
        );
        assert_eq!(r.error_code(), Some(code), "{tool} {args}: {}", r.text);
        r
    }

    /// `tools/call` with a progress token in `_meta`.
    pub fn call_with_progress(&mut self, name: &str, args: Value, token: &str) -> ToolCall {
        let r = self.request(
            "tools/call",
            json!({"name": name, "arguments": args, "_meta": {"progressToken": token}}),
        );
        let call = Self::to_tool_call(r);
        self.check_output(name, &call);
        call
    }

    pub fn to_tool_call(mut r: Value) -> ToolCall {
        let result = match r.get_mut("result") {
            Some(result) => result.take(),
            None => panic!("tools/call returned a protocol error: {r}"),
        };
        let text = result["content"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        ToolCall {
            is_error: result["isError"].as_bool().unwrap_or(false),
            structured: result["structuredContent"].clone(),
            text,
            raw: result,
        }
    }

    /// Notifications received so far (and clears them).
    pub fn take_notifications(&self) -> Vec<Value> {
        std::mem::take(&mut *self.notifications.lock().unwrap())
    }

    /// Lines on stdout that were not JSON-RPC messages (must stay empty).
    pub fn stdout_garbage(&self) -> Vec<String> {
        self.stdout_garbage.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Close stdin and wait for the server to exit; returns its exit status code.
    pub fn shutdown(mut self) -> Option<i32> {
        drop(self.stdin.lock().unwrap().take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A byte-level MCP client for benchmarks: handshake-era JSON-RPC written and read as raw
/// lines, no reader thread and no parsing, so a timing covers only the server and the pipe.
pub struct RawClient {
    child: Child,
    /// None once [`RawClient::shutdown`] closed it.
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    line: Vec<u8>,
    id: u64,
}

impl RawClient {
    pub fn spawn(bin: &Path, args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
        let mut c = RawClient {
            child,
            stdin: Some(stdin),
            stdout,
            line: Vec::with_capacity(1 << 20),
            id: 0,
        };
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{HANDSHAKE_VERSION}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"0"}}}}}}"#
        ));
        c.read_line();
        c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        c
    }

    /// One write per message: a separate newline would wake the server twice.
    fn send(&mut self, line: &str) {
        let mut msg = Vec::with_capacity(line.len() + 1);
        msg.extend_from_slice(line.as_bytes());
        msg.push(b'\n');
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(&msg).expect("write");
        stdin.flush().expect("flush");
    }

    fn read_line(&mut self) -> usize {
        self.line.clear();
        self.stdout.read_until(b'\n', &mut self.line).expect("read")
    }

    /// One `tools/call` with `params` (raw JSON: `{"name":…,"arguments":…}`); waits for the
    /// answer line and returns its size in bytes.
    pub fn call(&mut self, params: &str) -> usize {
        self.request("tools/call", params)
    }

    /// Any request with `params` (raw JSON); waits for the next line (the answer, for a server
    /// that sends nothing else meanwhile) and returns its size in bytes. For benchmarks: the
    /// time is the answer's arrival, with nothing parsed.
    pub fn request(&mut self, method: &str, params: &str) -> usize {
        self.id += 1;
        let msg = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{method}\",\"params\":{params}}}",
            self.id
        );
        self.send(&msg);
        self.read_line()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Close the server's stdin and wait for it to exit (killed after 10 s).
    pub fn shutdown(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// The last answer line, as received.
    pub fn line(&self) -> &[u8] {
        &self.line
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Path of a workspace binary built next to the running test (target/<profile>/<name>).
pub fn sibling_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap()
    } else {
        dir
    };
    dir.join(name)
}

/// Compare a server's live `tools/list` with its checked-in catalog `manifests/<server>/tools.json`.
///
/// With `KITBAG_UPDATE_CATALOG=1` the catalog is rewritten instead, so a deliberate change
/// is one command: `KITBAG_UPDATE_CATALOG=1 cargo test -p <crate> catalog`.
pub fn assert_catalog_matches(client: &mut McpClient, catalog: &Path) {
    let live = json!({ "tools": client.list_tools() });
    let pretty = serde_json::to_string_pretty(&live).unwrap() + "\n";
    if std::env::var_os("KITBAG_UPDATE_CATALOG").is_some() {
        std::fs::create_dir_all(catalog.parent().unwrap()).unwrap();
        std::fs::write(catalog, &pretty).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(catalog).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; generate it with KITBAG_UPDATE_CATALOG=1 cargo test",
            catalog.display()
        )
    });
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored,
        live,
        "the live tools/list drifted from {}; if the change is deliberate, regenerate with KITBAG_UPDATE_CATALOG=1",
        catalog.display()
    );
}

/// The workspace root (where the top-level Cargo.toml lives), from a crate's manifest dir.
pub fn workspace_root(manifest_dir: &str) -> std::path::PathBuf {
    let mut dir = std::path::PathBuf::from(manifest_dir);
    while !dir.join("Cargo.lock").exists() && !dir.join("manifests").exists() {
        if !dir.pop() {
            break;
        }
    }
    dir
}

/// How many tools a family's checked-in catalog (`manifests/<family>/tools.json`) lists: for
/// tests that count a listing, so a new tool changes one file, not every count.
pub fn catalog_tool_count(family: &str) -> u64 {
    let path = workspace_root(env!("CARGO_MANIFEST_DIR"))
        .join("manifests")
        .join(family)
        .join("tools.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("catalog json");
    v["tools"].as_array().map_or(0, |t| t.len() as u64)
}

/// Processes whose parent is `pid` (from /proc), for "nothing left behind" checks.
pub fn child_pids(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            // The command name may contain spaces; fields resume after the last ')'.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                if fields.get(1).and_then(|s| s.parse::<u32>().ok()) == Some(pid) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Poll `done` every 50 ms until it holds; panics naming `what` after `secs` seconds.
pub fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether bubblewrap can make namespaces here. Under `CI=true` its absence fails the calling
/// test (scripts/test installs it); elsewhere the test should return, and this says SKIP.
pub fn bwrap_usable() -> bool {
    let ok = Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-all", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bubblewrap is required under CI=true (scripts/test installs it)"
        );
        eprintln!("SKIP: bubblewrap cannot create namespaces here");
    }
    ok
}

/// Live processes whose command line contains `needle`.
pub fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
            && process_alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// Run `openssl ARGS…` in `dir` (test certificates and keys); panics with its stderr.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (scripts/test installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each named test, once per storage backend: `sqlite::name` and `postgres::name`. The test
/// file has a `Backend` with `sqlite()` and `postgres() -> Option<Backend>` (None: PostgreSQL
/// is not installed here, and the test skips), and `fn name(backend: &Backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(&super::Backend::sqlite()); })*
        }
        mod postgres {
            $(#[test] fn $name() {
                if let Some(b) = super::Backend::postgres() { super::$name(&b); }
            })*
        }
    };
}

/// A private CA (`ca.crt`, `ca.key`) and a server certificate it signed for `localhost` and
/// `127.0.0.1` (`server.crt`, `server.key`; EC P-256, serverAuth), made in `dir` with openssl.
pub fn test_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).expect("tls dir");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend_from_slice(&ec);
    ca.extend_from_slice(&[
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=kitbag test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend_from_slice(&ec);
    csr.extend_from_slice(&[
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("server.ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A client certificate `NAME.crt` / `NAME.key` for mutual TLS, signed by the CA that
/// [`test_certificates`] made in `dir`.
pub fn client_certificate(dir: &Path, name: &str) {
    let (key, csr, crt, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    std::fs::write(
        dir.join(&ext),
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .expect("client ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}
