//! The `debug` tool: one session per connection over a real debug adapter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::config::{self, Config, Transport};
use crate::dap::{Client, error_message};

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
pub const MAX_VALUE_CHARS: usize = 1000;
pub const DEFAULT_WAIT_MS: u64 = 10_000;
/// The deepest `variables` `depth`.
pub const MAX_DEPTH: u64 = 4;
/// Nested values returned per value, and in all, by a `depth` > 1 call.
pub const MAX_CHILDREN_PER_VALUE: usize = 50;
pub const MAX_NESTED_VALUES: usize = 500;

pub const DEF: ToolDef = ToolDef {
    name: "debug",
    title: "Debug a program",
    description: "Debug a program with a real debug adapter; one session per connection. Usual flow: \
        set_breakpoint, launch (or attach), then stack_trace, variables, evaluate, continue or step_*, \
        and disconnect. Each parameter names the actions that use it. launch, continue and the steps \
        return when the program stops (reason, line, source preview) or exits (exit_code), else after \
        wait_ms with status \"running\". output returns the program's output from the `offset` cursor.",
    read_only: false,
    destructive: true,
    idempotent: false,
    open_world: true,
    meta: None,
    private_args: &[],
};

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Launch,
    SetFunctionBreakpoint,
    SetExceptionBreakpoints,
    Modules,
    LoadedSources,
    Disassemble,
    ReadMemory,
    CustomRequest,
    Attach,
    Pause,
    Threads,
    Scopes,
    SetBreakpoint,
    RemoveBreakpoint,
    ListBreakpoints,
    Continue,
    StepOver,
    StepInto,
    StepOut,
    StackTrace,
    Variables,
    Evaluate,
    Output,
    Status,
    Disconnect,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum EvalContext {
    Watch,
    Repl,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebugParams {
    pub action: Action,
    /// launch/attach: `python` (debugpy, the default), `lldb` (lldb-dap: C, C++, Rust) or `go` (dlv dap).
    #[serde(default)]
    pub runtime: Option<String>,
    /// launch: root-relative program to run.
    #[serde(default)]
    pub program: Option<String>,
    /// attach: host of a `debugpy --listen` process or a `dlv --headless` server (default 127.0.0.1).
    #[serde(default)]
    pub host: Option<String>,
    /// attach: its port.
    #[serde(default)]
    pub port: Option<u16>,
    /// disconnect: kill the debuggee (default true after launch, false after attach).
    #[serde(default)]
    pub terminate_debuggee: Option<bool>,
    /// set_function_breakpoint: function name.
    #[serde(default)]
    pub name: Option<String>,
    /// set_exception_breakpoints: filter ids (python: raised, uncaught, userUnhandled; lldb: cpp_throw, ...).
    #[serde(default)]
    pub filters: Option<Vec<String>>,
    /// disassemble/read_memory: a memoryReference from a frame, variable or evaluate result.
    #[serde(default)]
    pub memory_reference: Option<String>,
    /// disassemble: instructions; read_memory: bytes (default 32, max 4096).
    #[serde(default)]
    pub count: Option<u64>,
    /// custom_request: the DAP command.
    #[serde(default)]
    pub command: Option<String>,
    /// custom_request: its arguments.
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, Value>>,
    /// launch: program arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// set/remove_breakpoint: root-relative source file.
    #[serde(default)]
    pub path: Option<String>,
    /// set/remove_breakpoint: 1-based line.
    #[serde(default)]
    pub line: Option<i64>,
    /// set_breakpoint: stop only when this expression is true.
    #[serde(default)]
    pub condition: Option<String>,
    /// set_breakpoint: log this message ({expr} interpolated) instead of stopping.
    #[serde(default)]
    pub log_message: Option<String>,
    /// set_breakpoint: stop only on this hit: 3 (the 3rd), or the adapter's syntax such as ">5", "%2".
    #[serde(default)]
    pub hit_count: Option<HitCount>,
    /// variables/evaluate/stack_trace: frame id (default: the stopped thread's top frame).
    #[serde(default)]
    pub frame_id: Option<i64>,
    /// variables: a variables_reference to expand (dict, list, object).
    #[serde(default)]
    pub expand: Option<i64>,
    /// variables: nesting levels in one call (default 1, max 4); nested values come back as
    /// `children` (≤ 50 per value, 500 in all).
    #[serde(default)]
    pub depth: Option<u64>,
    /// variables: keep only names containing this text.
    #[serde(default)]
    pub filter: Option<String>,
    /// variables: scope name, e.g. `locals`, `globals`, `registers` (default the first).
    #[serde(default)]
    pub scope: Option<String>,
    /// evaluate: `watch` (default: an expression) or `repl` (statements too; may change state).
    #[serde(default)]
    pub context: Option<EvalContext>,
    /// evaluate: the expression.
    #[serde(default)]
    pub expression: Option<String>,
    /// variables: skip this many. output: the cursor returned by the last call.
    #[serde(default)]
    pub offset: Option<u64>,
    /// variables: most to return (default 100).
    #[serde(default)]
    pub limit: Option<u64>,
    /// launch/continue/steps: longest wait for a stop, in ms (default 10000, max 60000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// A hit count: a number, or a string in the adapter's hitCondition syntax.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "a hit count: a number such as 3, or a string such as \"3\", \">5\" or \"%2\""
)]
pub enum HitCount {
    Number(i64),
    Text(String),
}

impl HitCount {
    /// The hitCondition string, or an error naming `hit_count`.
    fn condition(&self) -> ToolResult<String> {
        match self {
            HitCount::Number(n) if *n >= 1 => Ok(n.to_string()),
            HitCount::Number(_) => Err(ToolError::invalid_field(
                "hit_count",
                "a hit count of at least 1",
            )),
            HitCount::Text(t) if t.trim().is_empty() => Err(ToolError::invalid_field(
                "hit_count",
                "a hit count such as 3, \">5\" or \"%2\" (it is empty)",
            )),
            HitCount::Text(t) if t.chars().count() > 100 => Err(ToolError::invalid_field(
                "hit_count",
                "at most 100 characters",
            )),
            HitCount::Text(t) => Ok(t.trim().to_string()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct DebugResult {
    pub action: String,
    /// "stopped", "running", "exited", "no_session" or "ok".
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
struct Bp {
    line: i64,
    condition: Option<String>,
    log_message: Option<String>,
    hit_count: Option<String>,
}

pub struct Session {
    client: Arc<Client>,
    attached: bool,
    /// Where Delve builds a Go program (removed with the session), so no build product is
    /// ever left in the user's tree, even when the adapter is killed.
    _build_dir: Option<tempfile::TempDir>,
}

#[derive(Default)]
pub struct DapState {
    session: Mutex<Option<Session>>,
    breakpoints: Mutex<BTreeMap<PathBuf, Vec<Bp>>>,
    config: Config,
}

impl DapState {
    /// A state whose adapters come from a `--config` file.
    pub fn new(config: Config) -> DapState {
        DapState {
            config,
            ..DapState::default()
        }
    }
}

fn need<'a, T>(v: &'a Option<T>, field: &str, what: &str) -> ToolResult<&'a T> {
    v.as_ref()
        .ok_or_else(|| ToolError::invalid_field(field, what))
}

fn ended() -> ToolError {
    ToolError::new(
        ErrorCode::DapSessionEnded,
        "no debug session is active; start one with action \"launch\"",
    )
}

fn adapter_err(msg: String) -> ToolError {
    ToolError::new(ErrorCode::DapSessionEnded, msg)
}

/// How much of the adapter's start-up output a failed launch or attach quotes.
const START_OUTPUT_CHARS: usize = 4000;

/// A failed start's message with what the adapter printed meanwhile (its tail): the reason
/// is often only there (Delve: "Build error: Check the debug console for details").
fn with_start_output(client: &Client, message: String) -> String {
    let printed: String = client
        .events
        .lock()
        .map(|e| e.output.iter().map(|(_, text)| text.as_str()).collect())
        .unwrap_or_default();
    let printed = printed.trim();
    if printed.is_empty() {
        return message;
    }
    let skip = printed.chars().count().saturating_sub(START_OUTPUT_CHARS);
    let tail: String = printed.chars().skip(skip).collect();
    let cut = if skip > 0 { "…" } else { "" };
    format!("{message}\nadapter output:\n{cut}{tail}")
}

fn cap(s: &str) -> String {
    if s.chars().count() > MAX_VALUE_CHARS {
        let t: String = s.chars().take(MAX_VALUE_CHARS).collect();
        format!("{t}… [truncated]")
    } else {
        s.to_string()
    }
}

fn bp_args(path: &Path, bps: &[Bp]) -> Value {
    let list: Vec<Value> = bps
        .iter()
        .map(|b| {
            let mut v = json!({"line": b.line});
            if let Some(c) = &b.condition {
                v["condition"] = json!(c);
            }
            if let Some(m) = &b.log_message {
                v["logMessage"] = json!(m);
            }
            if let Some(h) = &b.hit_count {
                v["hitCondition"] = json!(h);
            }
            v
        })
        .collect();
    json!({"source": {"path": path.to_string_lossy()}, "breakpoints": list})
}

fn res(action: Action, status: &str) -> DebugResult {
    DebugResult {
        action: format!("{action:?}"),
        status: status.into(),
        stop: None,
        exit_code: None,
        data: None,
    }
}

pub async fn run(
    state: &DapState,
    policy: Arc<PathPolicy>,
    p: DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    match p.action {
        Action::Launch | Action::Attach => launch(state, &policy, &p).await,
        Action::SetBreakpoint | Action::RemoveBreakpoint => breakpoint(state, &policy, &p).await,
        Action::ListBreakpoints => {
            let bps = state.breakpoints.lock().await;
            let list: Vec<Value> = bps
                .iter()
                .flat_map(|(f, v)| {
                    let rel = policy.display(f);
                    v.iter().map(move |b| json!({"path": rel, "line": b.line, "condition": b.condition, "hit_count": b.hit_count, "log_message": b.log_message}))
                })
                .collect();
            let text = list
                .iter()
                .map(|b| format!("{}:{}", b["path"].as_str().unwrap_or(""), b["line"]))
                .collect::<Vec<_>>()
                .join("\n");
            let mut r = res(p.action, "ok");
            r.data = Some(json!({"breakpoints": list}));
            Ok(Reply::new(
                r,
                if text.is_empty() {
                    "no breakpoints".into()
                } else {
                    text
                },
            ))
        }
        Action::Status => {
            let guard = state.session.lock().await;
            let Some(s) = guard.as_ref() else {
                return Ok(Reply::new(
                    res(p.action, "no_session"),
                    "no debug session".to_string(),
                ));
            };
            let client = s.client.clone();
            drop(guard);
            settle(&client, &policy, p.action, Some(0)).await
        }
        Action::Continue | Action::StepOver | Action::StepInto | Action::StepOut => {
            let client = current(state).await?;
            let tid = thread_id(&client);
            let cmd = match p.action {
                Action::Continue => "continue",
                Action::StepOver => "next",
                Action::StepInto => "stepIn",
                _ => "stepOut",
            };
            let before = client.events.lock().map(|e| e.stop_count).unwrap_or(0);
            client
                .request(cmd, json!({"threadId": tid}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            if let Ok(mut e) = client.events.lock()
                && e.stop_count == before
            {
                e.stopped = None;
            }
            settle(&client, &policy, p.action, p.wait_ms).await
        }
        Action::SetFunctionBreakpoint
        | Action::SetExceptionBreakpoints
        | Action::Modules
        | Action::LoadedSources
        | Action::Disassemble
        | Action::ReadMemory
        | Action::CustomRequest => gated(state, &p).await,
        Action::Pause => {
            let client = current(state).await?;
            let threads = client
                .request("threads", json!({}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            let tid = threads["threads"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(|t| t["id"].as_i64())
                .unwrap_or(1);
            client
                .request("pause", json!({"threadId": tid}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            settle(&client, &policy, p.action, p.wait_ms).await
        }
        Action::Threads => {
            let client = current(state).await?;
            let body = client
                .request("threads", json!({}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            let list: Vec<Value> = body["threads"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|t| json!({"id": t["id"], "name": t["name"]}))
                .collect();
            let text = list
                .iter()
                .map(|t| format!("{} {}", t["id"], t["name"].as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("\n");
            let mut r = res(p.action, "ok");
            r.data = Some(json!({"threads": list}));
            Ok(Reply::new(r, text))
        }
        Action::Scopes => {
            let client = current(state).await?;
            let frame = match p.frame_id {
                Some(f) => f,
                None => top_frame(&client).await?,
            };
            let body = client
                .request("scopes", json!({"frameId": frame}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            let list: Vec<Value> = body["scopes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|s| json!({"name": s["name"], "variables_reference": s["variablesReference"]}))
                .collect();
            let text = list
                .iter()
                .map(|s| {
                    format!(
                        "{} (expand {})",
                        s["name"].as_str().unwrap_or(""),
                        s["variables_reference"]
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            let mut r = res(p.action, "stopped");
            r.data = Some(json!({"frame_id": frame, "scopes": list}));
            Ok(Reply::new(r, text))
        }
        Action::StackTrace => {
            let client = current(state).await?;
            let frames = stack(&client, 20).await?;
            let text = frames
                .iter()
                .map(|f| {
                    format!(
                        "#{} {} {}:{}",
                        f["id"],
                        f["name"].as_str().unwrap_or(""),
                        rel_src(&policy, &f["source"]["path"]),
                        f["line"]
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            let mut r = res(p.action, "stopped");
            r.data = Some(
                json!({"frames": frames.iter().map(|f| json!({"id": f["id"], "name": f["name"], "path": rel_src(&policy, &f["source"]["path"]), "line": f["line"]})).collect::<Vec<_>>()}),
            );
            Ok(Reply::new(r, text))
        }
        Action::Variables => variables(state, &p).await,
        Action::Evaluate => {
            let client = current(state).await?;
            let expr = need(&p.expression, "expression", "the expression to evaluate")?;
            let frame = match p.frame_id {
                Some(f) => f,
                None => top_frame(&client).await?,
            };
            let mut r = res(p.action, "stopped");
            match client
                .request(
                    "evaluate",
                    json!({"expression": expr, "frameId": frame,
                        "context": if p.context == Some(EvalContext::Repl) { "repl" } else { "watch" }}),
                    REQUEST_TIMEOUT,
                )
                .await
            {
                Ok(body) => {
                    let v = cap(body["result"].as_str().unwrap_or(""));
                    let text = format!("{expr} = {v}");
                    r.data = Some(
                        json!({"result": v, "type": body["type"], "variables_reference": body["variablesReference"]}),
                    );
                    Ok(Reply::new(r, text))
                }
                Err(msg) => {
                    let text = format!("error: {msg}");
                    r.data = Some(json!({"error": cap(&msg)}));
                    Ok(Reply::new(r, text))
                }
            }
        }
        Action::Output => {
            let client = state
                .session
                .lock()
                .await
                .as_ref()
                .map(|s| s.client.clone())
                .ok_or_else(ended)?;
            let since = p.offset.unwrap_or(0) as usize;
            let (items, cursor) = {
                let e = client.events.lock().map_err(|_| ended())?;
                let items: Vec<(String, String)> =
                    e.output.iter().skip(since).take(500).cloned().collect();
                (items.clone(), since + items.len())
            };
            let text: String = items.iter().map(|(_, t)| t.as_str()).collect();
            let mut r = res(p.action, "ok");
            r.data = Some(
                json!({"output": items.iter().map(|(c, t)| json!({"category": c, "text": cap(t)})).collect::<Vec<_>>(), "cursor": cursor}),
            );
            Ok(Reply::new(r, format!("{}\n[cursor {cursor}]", cap(&text))))
        }
        Action::Disconnect => {
            let s = state.session.lock().await.take();
            let Some(s) = s else { return Err(ended()) };
            let _ = s
                .client
                .request(
                    "disconnect",
                    json!({"terminateDebuggee": p.terminate_debuggee.unwrap_or(!s.attached)}),
                    Duration::from_secs(3),
                )
                .await;
            s.client.kill();
            Ok(Reply::new(
                res(p.action, "ok"),
                if p.terminate_debuggee.unwrap_or(!s.attached) {
                    "disconnected; debuggee terminated".to_string()
                } else {
                    "detached; debuggee left running".to_string()
                },
            ))
        }
    }
}

fn rel_src(policy: &PathPolicy, v: &Value) -> String {
    v.as_str()
        .map(|s| policy.display(Path::new(s)))
        .unwrap_or_default()
}

async fn current(state: &DapState) -> ToolResult<Arc<Client>> {
    let guard = state.session.lock().await;
    let s = guard.as_ref().ok_or_else(ended)?;
    let ev = s.client.events.lock().map_err(|_| ended())?;
    if ev.terminated && ev.stopped.is_none() {
        return Err(ended());
    }
    Ok(s.client.clone())
}

fn thread_id(client: &Client) -> i64 {
    client
        .events
        .lock()
        .ok()
        .and_then(|e| e.stopped.as_ref().and_then(|s| s["threadId"].as_i64()))
        .unwrap_or(1)
}

async fn stack(client: &Client, levels: i64) -> ToolResult<Vec<Value>> {
    let body = client
        .request(
            "stackTrace",
            json!({"threadId": thread_id(client), "startFrame": 0, "levels": levels}),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(adapter_err)?;
    Ok(body["stackFrames"].as_array().cloned().unwrap_or_default())
}

async fn top_frame(client: &Client) -> ToolResult<i64> {
    stack(client, 1)
        .await?
        .first()
        .and_then(|f| f["id"].as_i64())
        .ok_or_else(|| {
            ToolError::new(
                ErrorCode::DapSessionEnded,
                "the program is not stopped; no frame to inspect",
            )
        })
}

/// Whether a variable is worth showing (not a dunder or debugpy's grouping nodes).
fn shown(v: &Value) -> bool {
    let name = v["name"].as_str().unwrap_or("");
    !(name.starts_with("__") || name == "special variables" || name == "function variables")
}

fn var_json(v: &Value) -> Value {
    json!({"name": v["name"], "value": cap(v["value"].as_str().unwrap_or("")), "type": v["type"], "variables_reference": v["variablesReference"]})
}

/// A `variables` answer with nested values, fetched level by level (each level's requests
/// sent together), bounded by depth, per-value and total counts.
struct Tree {
    /// Every value: its JSON, its children (indexes) once expanded, children left out.
    nodes: Vec<(Value, Option<Vec<usize>>, usize)>,
    roots: Vec<usize>,
    truncated: bool,
}

impl Tree {
    fn new(top: Vec<Value>) -> Tree {
        let roots = (0..top.len()).collect();
        Tree {
            nodes: top.into_iter().map(|v| (v, None, 0)).collect(),
            roots,
            truncated: false,
        }
    }

    async fn expand(&mut self, client: &Client, depth: u64) -> ToolResult<()> {
        let mut budget = MAX_NESTED_VALUES;
        let mut frontier = self.roots.clone();
        for _ in 1..depth {
            let mut asked = Vec::new();
            for &i in &frontier {
                let reference = self.nodes[i].0["variables_reference"].as_i64().unwrap_or(0);
                if reference > 0 {
                    let rx = client
                        .start("variables", json!({"variablesReference": reference}))
                        .await
                        .map_err(|e| adapter_err(format!("adapter write failed: {e}")))?;
                    asked.push((i, rx));
                }
            }
            let mut next = Vec::new();
            for (i, rx) in asked {
                let resp = match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
                    Ok(Ok(resp)) => resp,
                    Ok(Err(_)) => return Err(adapter_err("debug adapter ended".into())),
                    Err(_) => {
                        return Err(adapter_err("adapter did not answer `variables`".into()));
                    }
                };
                let kids: Vec<&Value> = resp["body"]["variables"]
                    .as_array()
                    .map(|a| a.iter().filter(|v| shown(v)).collect())
                    .unwrap_or_default();
                let take = kids.len().min(MAX_CHILDREN_PER_VALUE).min(budget);
                if take < kids.len().min(MAX_CHILDREN_PER_VALUE) {
                    self.truncated = true;
                }
                budget -= take;
                let mut ids = Vec::with_capacity(take);
                for k in kids.iter().take(take) {
                    ids.push(self.nodes.len());
                    self.nodes.push((var_json(k), None, 0));
                }
                next.extend(&ids);
                self.nodes[i].1 = Some(ids);
                self.nodes[i].2 = kids.len() - take;
            }
            if next.is_empty() || budget == 0 {
                break;
            }
            frontier = next;
        }
        Ok(())
    }

    fn render(&self) -> Vec<Value> {
        self.roots.iter().map(|&i| self.render_one(i)).collect()
    }

    fn render_one(&self, i: usize) -> Value {
        let (v, kids, omitted) = &self.nodes[i];
        let mut v = v.clone();
        if let Some(kids) = kids {
            v["children"] = Value::Array(kids.iter().map(|&k| self.render_one(k)).collect());
            if *omitted > 0 {
                v["children_omitted"] = json!(omitted);
            }
        }
        v
    }

    fn text(&self, ids: &[usize], indent: usize, out: &mut String) {
        for &i in ids {
            let (v, kids, omitted) = &self.nodes[i];
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "{:indent$}{}: {} = {}",
                "",
                v["name"].as_str().unwrap_or(""),
                v["type"].as_str().unwrap_or(""),
                v["value"].as_str().unwrap_or(""),
                indent = indent * 2
            ));
            if let Some(kids) = kids {
                self.text(kids, indent + 1, out);
                if *omitted > 0 {
                    out.push_str(&format!(
                        "\n{:w$}… {omitted} more",
                        "",
                        w = (indent + 1) * 2
                    ));
                }
            }
        }
    }
}

async fn variables(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let depth = p.depth.unwrap_or(1);
    if !(1..=MAX_DEPTH).contains(&depth) {
        return Err(ToolError::invalid_field(
            "depth",
            format!("a number of levels from 1 to {MAX_DEPTH}"),
        ));
    }
    let client = current(state).await?;
    let reference = match p.expand {
        Some(r) => r,
        None => {
            let frame = match p.frame_id {
                Some(f) => f,
                None => top_frame(&client).await?,
            };
            let scopes = client
                .request("scopes", json!({"frameId": frame}), REQUEST_TIMEOUT)
                .await
                .map_err(adapter_err)?;
            let list = scopes["scopes"].as_array().cloned().unwrap_or_default();
            let chosen = match &p.scope {
                None => list.first(),
                Some(want) => {
                    let want = want.to_lowercase();
                    list.iter()
                        .find(|s| s["name"].as_str().is_some_and(|n| n.to_lowercase() == want))
                        .or_else(|| {
                            list.iter().find(|s| {
                                s["name"]
                                    .as_str()
                                    .is_some_and(|n| n.to_lowercase().starts_with(&want))
                            })
                        })
                }
            };
            match chosen.and_then(|s| s["variablesReference"].as_i64()) {
                Some(r) => r,
                None if p.scope.is_some() => {
                    let names: Vec<&str> = list.iter().filter_map(|s| s["name"].as_str()).collect();
                    return Err(ToolError::invalid_field(
                        "scope",
                        format!(
                            "no scope `{}` in this frame; its scopes: {}",
                            p.scope.as_deref().unwrap_or(""),
                            names.join(", ")
                        ),
                    ));
                }
                None => {
                    return Err(ToolError::new(
                        ErrorCode::DapSessionEnded,
                        "the frame has no scopes",
                    ));
                }
            }
        }
    };
    let body = client
        .request(
            "variables",
            json!({"variablesReference": reference}),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(adapter_err)?;
    let all: Vec<Value> = body["variables"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| {
            let name = v["name"].as_str().unwrap_or("");
            p.filter.as_deref().is_none_or(|f| name.contains(f)) && shown(v)
        })
        .collect();
    let offset = p.offset.unwrap_or(0) as usize;
    let limit = p.limit.unwrap_or(100).clamp(1, 1000) as usize;
    let top: Vec<Value> = all.iter().skip(offset).take(limit).map(var_json).collect();
    let next = (offset + top.len() < all.len()).then_some(offset + top.len());
    let mut tree = Tree::new(top);
    if depth > 1 {
        tree.expand(&client, depth).await?;
    }
    let page = tree.render();
    let mut text = String::new();
    tree.text(&tree.roots, 0, &mut text);
    if tree.truncated {
        text.push_str(&format!(
            "\n[nested values stopped at {MAX_NESTED_VALUES}; expand a variables_reference for more]"
        ));
    }
    if let Some(n) = next {
        text.push_str(&format!("\n[more: offset {n}]"));
    }
    let mut r = res(p.action, "stopped");
    let mut data = json!({"variables": page, "total": all.len(), "next_offset": next});
    if depth > 1 {
        data["depth"] = json!(depth);
        data["nested_truncated"] = json!(tree.truncated);
    }
    r.data = Some(data);
    Ok(Reply::new(r, text))
}

/// A source file's text, read through a descriptor opened beneath the root without following
/// a link: a directory swapped for a link after the path was resolved (or after the adapter
/// named it) is refused, never followed outside.
fn read_source(policy: &PathPolicy, abs: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    policy.open_real_read(abs)?.read_to_string(&mut text)?;
    Ok(text)
}

async fn breakpoint(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let path = need(&p.path, "path", "a root-relative source file")?;
    let line = *need(&p.line, "line", "a 1-based line number")?;
    let resolved = policy.resolve(path, "path", Access::Read)?;
    let hit_count = match (&p.hit_count, p.action) {
        (Some(h), Action::SetBreakpoint) => Some(h.condition()?),
        _ => None,
    };
    // Read through a descriptor opened beneath the root (issue #22 §1), not the path again.
    let text = read_source(policy, &resolved.abs)
        .map_err(|e| ToolError::invalid_field("path", format!("cannot read {path}: {e}")))?;
    let lines = text.lines().count() as i64;
    if line < 1 || line > lines {
        return Err(ToolError::invalid_field(
            "line",
            format!("a line between 1 and {lines} (the file's length)"),
        ));
    }
    let client = state
        .session
        .lock()
        .await
        .as_ref()
        .map(|s| s.client.clone());
    if let (Some(c), Some(_)) = (&client, &hit_count) {
        let supported = c
            .events
            .lock()
            .map(|e| e.caps["supportsHitConditionalBreakpoints"].as_bool() == Some(true))
            .unwrap_or(false);
        if !supported {
            return Err(ToolError::new(
                ErrorCode::UnsupportedByAdapter,
                "hit_count: the debug adapter does not advertise supportsHitConditionalBreakpoints",
            )
            .with_detail(
                json!({"capability": "supportsHitConditionalBreakpoints", "field": "hit_count"}),
            ));
        }
    }
    let list = {
        let mut bps = state.breakpoints.lock().await;
        let entry = bps.entry(resolved.abs.clone()).or_default();
        entry.retain(|b| b.line != line);
        if p.action == Action::SetBreakpoint {
            entry.push(Bp {
                line,
                condition: p.condition.clone(),
                log_message: p.log_message.clone(),
                hit_count,
            });
        }
        entry.clone()
    };
    let mut r = res(p.action, "ok");
    let mut verified = Value::Null;
    if let Some(c) = client {
        let body = c
            .request(
                "setBreakpoints",
                bp_args(&resolved.abs, &list),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(adapter_err)?;
        verified = body["breakpoints"].clone();
    }
    r.data = Some(
        json!({"path": resolved.rel, "line": line, "breakpoints_in_file": list.len(), "adapter": verified}),
    );
    let verb = if p.action == Action::SetBreakpoint {
        "set"
    } else {
        "removed"
    };
    Ok(Reply::new(
        r,
        format!("breakpoint {verb} at {}:{line}", resolved.rel),
    ))
}

async fn launch(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let mut guard = state.session.lock().await;
    if guard.is_some() {
        return Err(ToolError::new(
            ErrorCode::SessionActive,
            "a debug session is already active; call action \"disconnect\" first",
        ));
    }
    let runtime = p.runtime.as_deref().unwrap_or("python");
    if p.action == Action::Attach {
        return attach(state, policy, p, guard).await;
    }
    let program = need(&p.program, "program", "a root-relative program path")?;
    let prog = policy.resolve(program, "program", Access::Read)?;
    // Checked on a descriptor opened beneath the root. The adapter is then given the path
    // string and opens it itself: that second open is outside this server's reach.
    let is_file = policy
        .open_real_read(&prog.abs)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file());
    if !is_file {
        return Err(ToolError::invalid_field(
            "program",
            format!("{program} is not a file"),
        ));
    }
    let cwd = prog
        .abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let prog_s = prog.abs.to_string_lossy().to_string();
    let args = p.args.clone().unwrap_or_default();
    let configured = state.config.adapters.get(runtime);
    let mut build_dir = None;
    let mut launch_args = match runtime {
        "python" => {
            json!({"program": prog_s, "args": args, "cwd": cwd.to_string_lossy(), "console": "internalConsole", "justMyCode": true, "stopOnEntry": false})
        }
        "lldb" => {
            json!({"program": prog_s, "args": args, "cwd": cwd.to_string_lossy(), "stopOnEntry": false})
        }
        "go" => {
            let dir = tempfile::Builder::new()
                .prefix("kitbag-dap-go-")
                .tempdir()
                .map_err(|e| ToolError::io(&std::env::temp_dir().to_string_lossy(), &e))?;
            let output = dir.path().join("debug_bin");
            build_dir = Some(dir);
            json!({"mode": "debug", "program": prog_s, "args": args, "cwd": cwd.to_string_lossy(), "output": output})
        }
        _ if configured.is_some() => {
            json!({"program": prog_s, "args": args, "cwd": cwd.to_string_lossy()})
        }
        _ => {
            let mut names: Vec<&str> = vec!["python", "lldb", "go"];
            names.extend(
                state
                    .config
                    .adapters
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !["python", "lldb", "go"].contains(k)),
            );
            return Err(ToolError::invalid_field(
                "runtime",
                format!("one of: {}", names.join(", ")),
            ));
        }
    };
    let AdapterCommand {
        program: cmd,
        args: cmd_args,
        adapter_id,
        transport,
    } = match configured {
        Some(a) => configured_adapter(runtime, a, &mut launch_args)?,
        None => builtin_adapter(runtime)?,
    };
    let t0 = Instant::now();
    let started = match transport {
        Transport::Stdio => Client::spawn(&cmd, &cmd_args, &cwd),
        Transport::ClientAddr => {
            Client::spawn_dialing_in(&cmd, &cmd_args, &cwd, REQUEST_TIMEOUT).await
        }
    };
    let client = started.map_err(|e| {
        ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!("cannot start {cmd}: {e}"),
        )
        .with_detail(json!({"runtime": runtime, "command": cmd}))
    })?;
    let fail = |c: &Arc<Client>, m: String| {
        c.kill();
        adapter_err(with_start_output(c, m))
    };
    if let Err(m) = client
        .request("initialize", json!({"clientID": "kitbag", "adapterID": adapter_id, "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path", "supportsVariableType": true, "supportsRunInTerminalRequest": false}), REQUEST_TIMEOUT)
        .await
    {
        client.kill();
        // The built-in python adapter is not probed up front (a python3 start-up per launch);
        // when it dies at once, find out whether debugpy is missing.
        if runtime == "python" && configured.is_none() && !debugpy_importable(&cmd) {
            return Err(debugpy_missing(Some(&cmd)));
        }
        return Err(adapter_err(format!("{cmd}: {m}")));
    }
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, "initialize answered");
    start_session(state, &client, "launch", launch_args, true)
        .await
        .map_err(|m| fail(&client, m))?;
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, "launch answered");
    *guard = Some(Session {
        client: client.clone(),
        attached: false,
        _build_dir: build_dir,
    });
    drop(guard);
    settle(&client, policy, p.action, p.wait_ms).await
}

/// The start-up launch and attach share: send `command` right away (debugpy sends
/// `initialized` before answering it, others after), wait for `initialized` or a refusal, send
/// the breakpoints (and after a launch the exception filter) and `configurationDone`, then
/// take the answer — never deadlocking on either order.
async fn start_session(
    state: &DapState,
    client: &Client,
    command: &str,
    args: Value,
    launched: bool,
) -> Result<(), String> {
    let t0 = Instant::now();
    let mut answer = StartAnswer::new(
        client
            .start(command, args)
            .await
            .map_err(|e| e.to_string())?,
    );
    await_initialized(client, &mut answer).await?;
    let bps = breakpoint_list(state).await;
    configure(client, &bps, launched).await?;
    client
        .request("configurationDone", json!({}), REQUEST_TIMEOUT)
        .await?;
    tracing::debug!(ms = t0.elapsed().as_millis() as u64, command, "configured");
    match answer.wait(REQUEST_TIMEOUT).await {
        Some(resp) if resp["success"].as_bool() == Some(true) => Ok(()),
        Some(resp) => Err(error_message(&resp, &format!("{command} failed"))),
        None => Err(format!("adapter did not answer `{command}`")),
    }
}

/// Send every file's breakpoints (and, after launch, the `uncaught` exception filter) at
/// once, then await all the answers: one round trip instead of one per request.
async fn configure(
    client: &Client,
    bps: &[(PathBuf, Vec<Bp>)],
    exceptions: bool,
) -> Result<(), String> {
    let mut pending = Vec::new();
    for (file, list) in bps {
        let rx = client
            .start("setBreakpoints", bp_args(file, list))
            .await
            .map_err(|e| format!("adapter write failed: {e}"))?;
        pending.push((true, rx));
    }
    if exceptions {
        let rx = client
            .start("setExceptionBreakpoints", json!({"filters": ["uncaught"]}))
            .await
            .map_err(|e| format!("adapter write failed: {e}"))?;
        // An adapter without an `uncaught` filter may refuse it; that is not fatal.
        pending.push((false, rx));
    }
    for (required, rx) in pending {
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(resp)) if !required || resp["success"].as_bool() == Some(true) => {}
            Ok(Ok(resp)) => {
                return Err(error_message(&resp, "setBreakpoints failed"));
            }
            Ok(Err(_)) => return Err("debug adapter ended".into()),
            Err(_) => return Err("adapter did not answer `setBreakpoints`".into()),
        }
    }
    Ok(())
}

/// debugpy is missing for `python` (the interpreter checked, found on the server's PATH —
/// inside a virtualenv that is the venv's, which may lack what the system python has).
fn debugpy_missing(python: Option<&str>) -> ToolError {
    let (message, install) = match python {
        Some(p) => (
            format!(
                "debugpy is not installed for {p} (the python3 on this server's PATH); install it with: {p} -m pip install debugpy"
            ),
            format!("{p} -m pip install debugpy"),
        ),
        None => (
            "no python3 on this server's PATH; install Python 3, then: python3 -m pip install debugpy".to_string(),
            "python3 -m pip install debugpy".to_string(),
        ),
    };
    ToolError::new(ErrorCode::DapAdapterNotFound, message).with_detail(json!({
        "runtime": "python", "interpreter": python, "install": install
    }))
}

/// Whether `python` can import debugpy (asked only after the adapter failed to start).
fn debugpy_importable(python: &str) -> bool {
    std::process::Command::new(python)
        .args([
            "-c",
            "import sys, importlib.util; sys.exit(importlib.util.find_spec(\"debugpy\") is None)",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// How to start a runtime's adapter and reach it.
struct AdapterCommand {
    program: String,
    args: Vec<String>,
    adapter_id: String,
    transport: Transport,
}

/// The built-in adapter for a runtime. Existence is a PATH or file lookup, never a process
/// start.
fn builtin_adapter(runtime: &str) -> ToolResult<AdapterCommand> {
    match runtime {
        "python" => {
            let Some(python) = config::locate("python3") else {
                return Err(debugpy_missing(None));
            };
            Ok(AdapterCommand {
                program: python.to_string_lossy().into_owned(),
                args: vec!["-m".into(), "debugpy.adapter".into()],
                adapter_id: "debugpy".into(),
                transport: Transport::Stdio,
            })
        }
        "lldb" => {
            let found = [
                "/usr/bin/lldb-dap-19",
                "/usr/bin/lldb-dap",
                "/usr/local/bin/lldb-dap",
            ]
            .into_iter()
            .find(|c| Path::new(c).is_file());
            let Some(bin) = found else {
                return Err(ToolError::new(
                    ErrorCode::DapAdapterNotFound,
                    "lldb-dap is not installed; install it with: apt-get install -y lldb-19",
                )
                .with_detail(json!({"runtime": "lldb", "install": "apt-get install -y lldb-19"})));
            };
            Ok(AdapterCommand {
                program: bin.into(),
                args: vec![],
                adapter_id: "lldb-dap".into(),
                transport: Transport::Stdio,
            })
        }
        _ => {
            let Some(bin) = config::locate("dlv") else {
                return Err(ToolError::new(
                    ErrorCode::DapAdapterNotFound,
                    "dlv is not installed; install it with: go install github.com/go-delve/delve/cmd/dlv@latest",
                )
                .with_detail(json!({"runtime": "go", "install": "go install github.com/go-delve/delve/cmd/dlv@latest"})));
            };
            // `dlv dap` has no stdio mode: it dials in to the address we give it.
            Ok(AdapterCommand {
                program: bin.to_string_lossy().into_owned(),
                args: vec!["dap".into()],
                adapter_id: "go".into(),
                transport: Transport::ClientAddr,
            })
        }
    }
}

/// A `--config` adapter: its command must exist (a path, or a name on PATH).
fn configured_adapter(
    runtime: &str,
    a: &config::AdapterConfig,
    launch_args: &mut Value,
) -> ToolResult<AdapterCommand> {
    let Some((first, rest)) = a.command.split_first() else {
        return Err(ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!("the adapter command for runtime `{runtime}` in --config is empty"),
        )
        .with_detail(json!({"runtime": runtime, "command": ""})));
    };
    let Some(exe) = config::locate(first) else {
        return Err(ToolError::new(
            ErrorCode::DapAdapterNotFound,
            format!(
                "the adapter command `{first}` configured for runtime `{runtime}` (--config dap.adapters.{runtime}.command) does not exist"
            ),
        )
        .with_detail(json!({"runtime": runtime, "command": first})));
    };
    if let Value::Object(m) = launch_args {
        m.extend(a.launch_json());
    }
    let adapter_id = a.adapter_id.clone().unwrap_or_else(|| match runtime {
        "python" => "debugpy".into(),
        "lldb" => "lldb-dap".into(),
        other => other.to_string(),
    });
    Ok(AdapterCommand {
        program: exe.to_string_lossy().into_owned(),
        args: rest.to_vec(),
        adapter_id,
        transport: a
            .transport
            .unwrap_or_else(|| Transport::default_for(runtime)),
    })
}

async fn attach(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
    mut guard: tokio::sync::MutexGuard<'_, Option<Session>>,
) -> ToolResult<Reply<DebugResult>> {
    // What listens on the port, and how to attach through it.
    let (adapter_id, how_to_start) = match p.runtime.as_deref().unwrap_or("python") {
        "python" => ("debugpy", "python -m debugpy --listen HOST:PORT program.py"),
        "go" => (
            "go",
            "dlv debug|exec|attach --headless --listen=HOST:PORT --accept-multiclient",
        ),
        _ => {
            return Err(ToolError::invalid_field(
                "runtime",
                "attach supports: python (a debugpy --listen process), go (a dlv --headless server)",
            ));
        }
    };
    let port = *need(
        &p.port,
        "port",
        &format!("the port of a `{how_to_start}` process"),
    )?;
    let host = p.host.clone().unwrap_or_else(|| "127.0.0.1".into());
    let client = tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(&host, port))
        .await
        .map_err(|_| ToolError::invalid_field("port", format!("no answer from {host}:{port}")))?
        .map_err(|e| {
            ToolError::invalid_field(
                "port",
                format!(
                    "cannot connect to {host}:{port}: {e}; start the program with {how_to_start}"
                ),
            )
        })?;
    let fail = |c: &Arc<Client>, m: String| {
        c.kill();
        adapter_err(with_start_output(c, m))
    };
    if let Err(m) = client.request("initialize", json!({"clientID": "kitbag", "adapterID": adapter_id, "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path", "supportsVariableType": true}), REQUEST_TIMEOUT).await {
        return Err(fail(&client, m));
    }
    let attach_args = match adapter_id {
        // Delve's headless server already holds the program: attach to it as it is.
        "go" => json!({"mode": "remote"}),
        _ => json!({"connect": {"host": host, "port": port}, "justMyCode": true}),
    };
    start_session(state, &client, "attach", attach_args, false)
        .await
        .map_err(|m| fail(&client, m))?;
    *guard = Some(Session {
        client: client.clone(),
        attached: true,
        _build_dir: None,
    });
    drop(guard);
    settle(&client, policy, p.action, Some(p.wait_ms.unwrap_or(500))).await
}

const MAX_JSON_CHARS: usize = 20_000;

/// Actions that exist only when the adapter advertises them.
async fn gated(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let client = state
        .session
        .lock()
        .await
        .as_ref()
        .map(|s| s.client.clone())
        .ok_or_else(ended)?;
    let caps = client
        .events
        .lock()
        .map(|e| e.caps.clone())
        .unwrap_or(Value::Null);
    let (cap_name, command, args) = match p.action {
        Action::SetFunctionBreakpoint => {
            let name = need(&p.name, "name", "a function name")?;
            (
                "supportsFunctionBreakpoints",
                "setFunctionBreakpoints".to_string(),
                json!({"breakpoints": [{"name": name}]}),
            )
        }
        Action::SetExceptionBreakpoints => {
            let filters = need(&p.filters, "filters", "a list of exception filter ids")?;
            (
                "",
                "setExceptionBreakpoints".to_string(),
                json!({"filters": filters}),
            )
        }
        Action::Modules => ("supportsModulesRequest", "modules".to_string(), json!({})),
        Action::LoadedSources => (
            "supportsLoadedSourcesRequest",
            "loadedSources".to_string(),
            json!({}),
        ),
        Action::Disassemble => {
            let m = need(&p.memory_reference, "memory_reference", "a memoryReference")?;
            (
                "supportsDisassembleRequest",
                "disassemble".to_string(),
                json!({"memoryReference": m, "instructionCount": p.count.unwrap_or(16).clamp(1, 500), "resolveSymbols": true}),
            )
        }
        Action::ReadMemory => {
            let m = need(&p.memory_reference, "memory_reference", "a memoryReference")?;
            (
                "supportsReadMemoryRequest",
                "readMemory".to_string(),
                json!({"memoryReference": m, "count": p.count.unwrap_or(32).clamp(1, 4096)}),
            )
        }
        _ => {
            let cmd = need(&p.command, "command", "a DAP command name")?;
            (
                "",
                cmd.clone(),
                Value::Object(p.arguments.clone().unwrap_or_default()),
            )
        }
    };
    if !cap_name.is_empty() && caps[cap_name].as_bool() != Some(true) {
        return Err(ToolError::new(
            ErrorCode::UnsupportedByAdapter,
            format!("the debug adapter does not advertise {cap_name}"),
        )
        .with_detail(json!({"capability": cap_name})));
    }
    let body = client
        .request(&command, args, REQUEST_TIMEOUT)
        .await
        .map_err(adapter_err)?;
    let text = body.to_string();
    let truncated = text.chars().count() > MAX_JSON_CHARS;
    let shown: String = text.chars().take(MAX_JSON_CHARS).collect();
    let mut r = res(p.action, "ok");
    r.data = Some(if truncated {
        json!({"truncated": true, "text": shown})
    } else {
        body
    });
    Ok(Reply::new(
        r,
        if truncated {
            format!("{shown}… [truncated at {MAX_JSON_CHARS} chars]")
        } else {
            shown
        },
    ))
}

/// Wait (bounded) for a stop or exit and describe where the program is.
async fn settle(
    client: &Arc<Client>,
    policy: &PathPolicy,
    action: Action,
    wait_ms: Option<u64>,
) -> ToolResult<Reply<DebugResult>> {
    let wait = Duration::from_millis(wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(60_000));
    let deadline = Instant::now() + wait;
    loop {
        let notified = client.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (stopped, exited, terminated) = {
            let e = client.events.lock().map_err(|_| ended())?;
            (e.stopped.clone(), e.exited, e.terminated)
        };
        if let Some(stop) = stopped {
            let frames = stack(client, 1).await.unwrap_or_default();
            let f = frames.first().cloned().unwrap_or(Value::Null);
            let path = rel_src(policy, &f["source"]["path"]);
            let line = f["line"].as_i64().unwrap_or(0);
            let preview = f["source"]["path"]
                .as_str()
                .filter(|p| policy.allows(Path::new(p), Access::Read))
                .and_then(|p| read_source(policy, Path::new(p)).ok())
                .and_then(|t| {
                    t.lines()
                        .nth((line.max(1) - 1) as usize)
                        .map(|l| l.trim().to_string())
                })
                .unwrap_or_default();
            let reason = stop["reason"].as_str().unwrap_or("").to_string();
            let mut desc = stop["text"]
                .as_str()
                .or(stop["description"].as_str())
                .unwrap_or("")
                .to_string();
            if reason == "exception"
                && let Ok(info) = client
                    .request(
                        "exceptionInfo",
                        json!({"threadId": stop["threadId"]}),
                        REQUEST_TIMEOUT,
                    )
                    .await
            {
                desc = format!(
                    "{}: {}",
                    info["exceptionId"].as_str().unwrap_or(""),
                    info["description"].as_str().unwrap_or("")
                );
            }
            let mut r = res(action, "stopped");
            let text = format!(
                "stopped ({reason}) thread {} at {path}:{line} in {}\n{line}: {preview}{}",
                stop["threadId"],
                f["name"].as_str().unwrap_or(""),
                if desc.is_empty() {
                    String::new()
                } else {
                    format!("\n{}", cap(&desc))
                }
            );
            r.stop = Some(
                json!({"reason": reason, "thread_id": stop["threadId"], "path": path, "line": line, "function": f["name"], "frame_id": f["id"], "preview": cap(&preview), "description": cap(&desc)}),
            );
            return Ok(Reply::new(r, text));
        }
        if exited.is_some() || terminated {
            let mut r = res(action, "exited");
            r.exit_code = exited;
            let text = match exited {
                Some(c) => format!("program exited with code {c}"),
                None => "program terminated".to_string(),
            };
            return Ok(Reply::new(r, text));
        }
        if Instant::now() >= deadline {
            return Ok(Reply::new(
                res(action, "running"),
                "program is still running; call status later".to_string(),
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(100).min(wait), notified).await;
    }
}

/// Wait for the adapter's `initialized` event (or the end of its stream), at most the
/// request timeout: adapters send it before or after answering launch/attach.
async fn await_initialized(client: &Client, answer: &mut StartAnswer) -> Result<(), String> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        let notified = client.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if client
            .events
            .lock()
            .map(|e| e.initialized || e.terminated)
            .unwrap_or(true)
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err("adapter never sent `initialized`".into());
        }
        tokio::select! {
            _ = tokio::time::timeout(Duration::from_millis(200), notified) => {}
            early = answer.early() => {
                // A refusal before `initialized` (a Go build error, a missing program) is the
                // whole story: say it now instead of waiting for an event that never comes.
                if let Some(resp) = early
                    && resp["success"].as_bool() != Some(true)
                {
                    return Err(error_message(resp, "the adapter refused to start"));
                }
            }
        }
    }
}

/// The answer to `launch` / `attach`, which adapters send before or after `initialized`.
struct StartAnswer {
    rx: Option<tokio::sync::oneshot::Receiver<Value>>,
    got: Option<Value>,
}

impl StartAnswer {
    fn new(rx: tokio::sync::oneshot::Receiver<Value>) -> Self {
        StartAnswer {
            rx: Some(rx),
            got: None,
        }
    }

    /// Wait for the answer while it has not come; pending forever once it has (or once the
    /// adapter's stream ended without one).
    async fn early(&mut self) -> Option<&Value> {
        let Some(rx) = self.rx.as_mut() else {
            return std::future::pending().await;
        };
        let r = rx.await;
        self.rx = None;
        self.got = r.ok();
        self.got.as_ref()
    }

    /// The answer, waiting up to `timeout` if it has not come yet.
    async fn wait(mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.got.take() {
            return Some(v);
        }
        let rx = self.rx.take()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

/// The breakpoints set so far, to send once the adapter is ready for them.
async fn breakpoint_list(state: &DapState) -> Vec<(PathBuf, Vec<Bp>)> {
    state
        .breakpoints
        .lock()
        .await
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
