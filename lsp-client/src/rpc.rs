//! A JSON-RPC client for one language server process: requests correlated by id,
//! the server's own requests answered, and what it tells us asynchronously
//! (published diagnostics, work-done progress) kept for the actions to read.

use kitbag_shared::lock::LockExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kitbag_shared::framing::{encode, read_message};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{Notify, oneshot};

/// A write the server does not drain within this long (its pipe is full: it hangs)
/// fails rather than blocking the caller forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many lines of the server's stderr are kept for error messages.
const STDERR_TAIL_LINES: usize = 40;

#[derive(Debug, Clone, PartialEq)]
pub enum RpcError {
    /// No answer within the timeout (the request was cancelled with `$/cancelRequest`).
    Timeout,
    /// The server's output ended: it exited or crashed.
    Closed,
    /// The server answered with a JSON-RPC error.
    Server { code: i64, message: String },
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Timeout => f.write_str("no answer in time"),
            RpcError::Closed => f.write_str("the language server exited"),
            RpcError::Server { code, message } => write!(f, "{message} (code {code})"),
        }
    }
}

/// Diagnostics the server pushed for one document.
#[derive(Debug, Clone)]
pub struct Published {
    pub version: Option<i64>,
    pub items: Vec<Value>,
    /// Position in the stream of events, to compare with when a document changed.
    pub seq: u64,
}

/// What the server told us without being asked.
#[derive(Debug, Default)]
pub struct ServerEvents {
    pub diagnostics: HashMap<String, Published>,
    /// Work-done progress tokens begun and not yet ended.
    pub active_progress: HashSet<String>,
    /// Monotonic counter bumped by every notification.
    pub seq: u64,
    pub last_event: Option<Instant>,
    /// Set by `workspace/diagnostic/refresh`: pulled diagnostics are stale.
    pub refresh_requested: bool,
}

type Pending = Mutex<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>;

pub struct Rpc {
    writer: tokio::sync::Mutex<ChildStdin>,
    next_id: AtomicI64,
    pending: Pending,
    alive: AtomicBool,
    pub events: Mutex<ServerEvents>,
    /// Woken on every notification and when the server's output ends.
    pub changed: Notify,
    /// When kitbag last told the server something changed (a document opened, changed or
    /// closed): the server's work on it starts after that.
    last_told: Mutex<Option<Instant>>,
    stderr_tail: Mutex<VecDeque<String>>,
    /// Answers to `workspace/configuration`, looked up by section.
    settings: Value,
    root_uri: String,
    root_name: String,
    pub pid: u32,
}

impl Rpc {
    /// Start `command` in `cwd` and begin reading its output.
    pub fn spawn(
        command: &[String],
        cwd: &Path,
        settings: Value,
        root_uri: String,
    ) -> std::io::Result<(Arc<Rpc>, tokio::process::Child)> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let stderr = child.stderr.take();
        let rpc = Arc::new(Rpc {
            writer: tokio::sync::Mutex::new(stdin),
            next_id: AtomicI64::new(1),
            pending: Mutex::default(),
            alive: AtomicBool::new(true),
            events: Mutex::default(),
            changed: Notify::new(),
            last_told: Mutex::new(None),
            stderr_tail: Mutex::default(),
            settings,
            root_name: cwd
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "root".into()),
            root_uri,
            pid: child.id().unwrap_or(0),
        });
        let weak = Arc::downgrade(&rpc);
        tokio::spawn(async move {
            let mut r = BufReader::with_capacity(64 * 1024, stdout);
            loop {
                let msg = match read_message(&mut r).await {
                    Ok(Some(m)) => m,
                    Ok(None) | Err(_) => break,
                };
                let Some(rpc) = weak.upgrade() else { return };
                rpc.dispatch(msg).await;
            }
            if let Some(rpc) = weak.upgrade() {
                rpc.closed();
            }
        });
        if let Some(stderr) = stderr {
            let weak = Arc::downgrade(&rpc);
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Some(rpc) = weak.upgrade() else { return };
                    tracing::debug!(pid = rpc.pid, "language server: {line}");
                    {
                        let mut t = rpc.stderr_tail.locked();
                        if t.len() == STDERR_TAIL_LINES {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            });
        }
        Ok((rpc, child))
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The last lines the server wrote to stderr, for error messages.
    pub fn stderr_tail(&self) -> String {
        self.stderr_tail
            .locked()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn closed(&self) {
        self.alive.store(false, Ordering::SeqCst);
        let waiters: Vec<_> = self.pending.locked().drain().map(|(_, tx)| tx).collect();
        for tx in waiters {
            let _ = tx.send(Err(RpcError::Closed));
        }
        self.changed.notify_waiters();
    }

    async fn dispatch(&self, msg: Value) {
        let method = msg.get("method").and_then(Value::as_str);
        match (method, msg.get("id")) {
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { return };
                let tx = self.pending.locked().remove(&id);
                if let Some(tx) = tx {
                    let result = match msg.get("error") {
                        Some(e) => Err(RpcError::Server {
                            code: e["code"].as_i64().unwrap_or(0),
                            message: e["message"].as_str().unwrap_or("error").to_string(),
                        }),
                        None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = tx.send(result);
                }
            }
            (Some(method), Some(id)) => {
                let reply = self.answer(method, msg.get("params").unwrap_or(&Value::Null));
                let out = match reply {
                    Some(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    None => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                        "message": format!("{method} is not supported by kitbag-lsp")}}),
                };
                let _ = self.write(&out).await;
            }
            (Some(method), None) => self.notification(method, msg.get("params")),
            (None, None) => {}
        }
    }

    /// Answer a request the server sent us; `None` for a method kitbag-lsp does not
    /// support (answered "method not found").
    fn answer(&self, method: &str, params: &Value) -> Option<Value> {
        match method {
            "workspace/configuration" => {
                let items = params["items"].as_array().cloned().unwrap_or_default();
                Some(Value::Array(
                    items
                        .iter()
                        .map(|item| match item["section"].as_str() {
                            Some(section) => lookup_section(&self.settings, section),
                            None => self.settings.clone(),
                        })
                        .collect(),
                ))
            }
            "workspace/workspaceFolders" => {
                Some(json!([{"uri": self.root_uri, "name": self.root_name}]))
            }
            "workspace/applyEdit" => Some(json!({
                "applied": false,
                "failureReason": "kitbag-lsp applies edits only through its rename action"
            })),
            "workspace/diagnostic/refresh" => {
                {
                    let mut e = self.events.locked();
                    e.refresh_requested = true;
                }
                self.changed.notify_waiters();
                Some(Value::Null)
            }
            "window/workDoneProgress/create"
            | "client/registerCapability"
            | "client/unregisterCapability"
            | "window/showMessageRequest"
            | "window/showDocument"
            | "workspace/codeLens/refresh"
            | "workspace/semanticTokens/refresh"
            | "workspace/inlayHint/refresh"
            | "workspace/inlineValue/refresh"
            | "workspace/foldingRange/refresh" => Some(Value::Null),
            _ => None,
        }
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        let params = params.cloned().unwrap_or(Value::Null);
        let mut e = self.events.locked();
        e.seq += 1;
        e.last_event = Some(Instant::now());
        let seq = e.seq;
        match method {
            "textDocument/publishDiagnostics" => {
                if let Some(uri) = params["uri"].as_str() {
                    let items = params["diagnostics"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    e.diagnostics.insert(
                        uri.to_string(),
                        Published {
                            version: params["version"].as_i64(),
                            items,
                            seq,
                        },
                    );
                }
            }
            "$/progress" => {
                let token = match &params["token"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                match params["value"]["kind"].as_str() {
                    Some("begin") => {
                        e.active_progress.insert(token);
                    }
                    Some("end") => {
                        e.active_progress.remove(&token);
                    }
                    _ => {}
                }
            }
            "window/logMessage" | "window/showMessage" => {
                tracing::debug!(
                    pid = self.pid,
                    "language server says: {}",
                    params["message"]
                );
            }
            _ => {}
        }
        drop(e);
        self.changed.notify_waiters();
    }

    async fn write(&self, msg: &Value) -> std::io::Result<()> {
        let bytes = encode(msg);
        let write = async {
            let mut w = self.writer.lock().await;
            w.write_all(&bytes).await?;
            w.flush().await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the language server stopped reading its input",
            )),
        }
    }

    /// Send a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        if method.starts_with("textDocument/did") || method.starts_with("workspace/did") {
            *self.last_told.locked() = Some(Instant::now());
        }
        self.write(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
            .map_err(|_| RpcError::Closed)
    }

    /// When kitbag last told the server a document changed (see [`Rpc::notify`]).
    pub fn last_told(&self) -> Option<Instant> {
        *self.last_told.locked()
    }

    /// Send a request and wait for its answer; on timeout the request is cancelled.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        if !self.is_alive() {
            return Err(RpcError::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id, tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.write(&msg).await.is_err() {
            self.pending.locked().remove(&id);
            return Err(RpcError::Closed);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RpcError::Closed),
            Err(_) => {
                self.pending.locked().remove(&id);
                let _ = self.notify("$/cancelRequest", json!({"id": id})).await;
                Err(RpcError::Timeout)
            }
        }
    }

    /// Current event counter (for "anything new since?" checks).
    pub fn event_seq(&self) -> u64 {
        self.events.locked().seq
    }
}

/// `workspace/configuration` answers: the value at a dotted section, or null.
fn lookup_section(settings: &Value, section: &str) -> Value {
    let mut cur = settings;
    for part in section.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return Value::Null,
        }
    }
    cur.clone()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn configuration_sections_are_looked_up_by_dotted_path() {
        let s = json!({"python": {"analysis": {"typeCheckingMode": "strict"}}});
        assert_eq!(
            lookup_section(&s, "python.analysis"),
            json!({"typeCheckingMode": "strict"})
        );
        assert_eq!(lookup_section(&s, "rust-analyzer"), Value::Null);
    }
}
