//! The server pool: one language server per language, spawned on first use, shared by
//! every call, stopped when idle, restarted after a crash or a hang, and kept in sync
//! with the files on disk before every request.

use kitbag_shared::lock::LockExt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kitbag_shared::{ErrorCode, PathPolicy, ToolError, ToolResult};
use serde::Serialize;
use serde_json::{Value, json};
use xxhash_rust::xxh3::xxh3_64;

use crate::config::{Config, LanguageConfig, find_program};
use crate::rpc::{Rpc, RpcError};
use crate::stamp::Stamp;
use crate::text::{Encoding, Lines, path_to_uri};

/// How long `initialize` may take (rust-analyzer on a cold cache is slow).
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(60);
/// Open documents beyond this are closed, oldest first.
const MAX_OPEN_DOCS: usize = 400;

/// A document as the server last saw it.
#[derive(Debug, Clone)]
pub struct Doc {
    pub version: i64,
    pub hash: u64,
    /// The file's metadata when its text was last read: a settled, matching stamp spares
    /// the next re-read.
    pub stamp: Option<Stamp>,
    pub lines: Arc<Lines>,
    /// Event counter when we last opened or changed it: published diagnostics older than
    /// this describe a previous text.
    pub changed_at: u64,
    pub last_used: Instant,
}

/// One running language server.
pub struct Server {
    pub lang: LanguageConfig,
    pub rpc: Arc<Rpc>,
    pub pid: u32,
    pub started: Instant,
    pub capabilities: Value,
    pub server_info: Value,
    pub encoding: Encoding,
    pub docs: tokio::sync::Mutex<HashMap<PathBuf, Doc>>,
    /// The root opened once: documents under it are read beneath this descriptor.
    beneath: Option<PathPolicy>,
    last_used: Mutex<Instant>,
    child: Mutex<Option<tokio::process::Child>>,
    request_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    NotStarted,
    Running,
    Crashed,
    IdleStopped,
    Failed,
}

#[derive(Default)]
struct Slot {
    server: Option<Arc<Server>>,
    /// Restarts after crashes or hangs since the last clean start (reset by `reload`).
    restarts: u32,
    /// Every spawn, for `status`.
    spawns: u32,
    last_stop: Option<SlotState>,
    last_error: Option<String>,
}

/// A language server's line in `status`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStatus {
    pub language: String,
    pub command: Vec<String>,
    /// not_started, running, crashed, idle_stopped or failed.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uptime_ms: Option<u64>,
    pub restarts: u32,
    pub spawns: u32,
    /// Documents open in the server (root-relative), cut to fit the answer.
    pub open_files: Vec<String>,
    /// How many are open in all.
    pub open_files_count: usize,
    /// Some were left out of `open_files` to fit the answer.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub open_files_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position_encoding: Option<String>,
    pub installed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

pub struct Pool {
    pub config: Config,
    pub root: PathBuf,
    /// The root's descriptor (a policy over the whole root, used only to open documents
    /// beneath it); `None` when the root could not be opened, and then no document under it
    /// is read.
    beneath: Option<PathPolicy>,
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Lifecycle events (`lsp.server_spawned`, `_crashed`, `_stopped`) go here too.
    audit: Option<kitbag_shared::audit::AuditLog>,
}

impl Pool {
    pub fn new(config: Config, root: PathBuf) -> Arc<Self> {
        Self::with_audit(config, root, None)
    }

    pub fn with_audit(
        config: Config,
        root: PathBuf,
        audit: Option<kitbag_shared::audit::AuditLog>,
    ) -> Arc<Self> {
        let beneath = PathPolicy::new(&root, &[], true).ok();
        Arc::new(Pool {
            config,
            beneath,
            root,
            slots: Mutex::default(),
            audit,
        })
    }

    fn event(&self, event: &str, fields: Value) {
        if let Some(a) = &self.audit {
            a.event(event, fields);
        }
    }

    fn slot(&self, lang: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.locked();
        slots.entry(lang.to_string()).or_default().clone()
    }

    /// The running server for a language, spawning (or restarting) it as needed.
    pub async fn get(self: &Arc<Self>, lang: &LanguageConfig) -> ToolResult<Arc<Server>> {
        let slot_arc = self.slot(&lang.name);
        let mut slot = slot_arc.lock().await;
        if let Some(s) = &slot.server {
            if s.rpc.is_alive() {
                s.touch();
                return Ok(s.clone());
            }
            // It died since the last call.
            tracing::warn!(language = %lang.name, "language server exited; restarting");
            self.event(
                "lsp.server_crashed",
                json!({"language": lang.name, "pid": s.pid, "restart_count": slot.restarts + 1}),
            );
            slot.server = None;
            slot.last_stop = Some(SlotState::Crashed);
            slot.restarts += 1;
        }
        if slot.restarts > self.config.max_restarts {
            slot.last_stop = Some(SlotState::Failed);
            return Err(ToolError::new(
                ErrorCode::LspServerUnavailable,
                format!(
                    "the {} language server crashed {} times; it stays down until `reload`",
                    lang.name, slot.restarts
                ),
            )
            .with_detail(json!({"language": lang.name, "restarts": slot.restarts,
                "last_error": slot.last_error})));
        }
        match self.spawn(lang).await {
            Ok(server) => {
                self.event(
                    "lsp.server_spawned",
                    json!({"language": lang.name, "command": lang.command, "pid": server.pid,
                        "root": self.root}),
                );
                slot.spawns += 1;
                slot.server = Some(server.clone());
                slot.last_error = None;
                self.watch_idle(&slot_arc, &server);
                Ok(server)
            }
            Err(e) => {
                if e.code == ErrorCode::LspServerUnavailable {
                    slot.restarts += 1;
                    slot.last_error = Some(e.message.clone());
                }
                Err(e)
            }
        }
    }

    async fn spawn(&self, lang: &LanguageConfig) -> ToolResult<Arc<Server>> {
        let program = &lang.command[0];
        if find_program(program).is_none() {
            return Err(ToolError::new(
                ErrorCode::LspServerNotFound,
                format!(
                    "no {} language server: `{}` is not on PATH; install it with `{}` or configure another with --server {}=COMMAND",
                    lang.name, program, lang.install, lang.name
                ),
            )
            .with_detail(json!({"language": lang.name, "command": lang.command,
                "install": lang.install})));
        }
        let root_uri = path_to_uri(&self.root);
        let (rpc, child) = Rpc::spawn(
            &lang.command,
            &self.root,
            lang.settings.clone(),
            root_uri.clone(),
        )
        .map_err(|e| {
            ToolError::new(
                ErrorCode::LspServerNotFound,
                format!("could not start `{}`: {e}", lang.command.join(" ")),
            )
            .with_detail(json!({"language": lang.name, "command": lang.command,
                "install": lang.install}))
        })?;
        let pid = rpc.pid;
        let unavailable = |what: String, rpc: &Rpc| {
            let tail = rpc.stderr_tail();
            ToolError::new(
                ErrorCode::LspServerUnavailable,
                format!("the {} language server {what}", lang.name),
            )
            .with_detail(json!({"language": lang.name, "command": lang.command,
                "stderr_tail": tail}))
        };
        let params = initialize_params(&self.root, &root_uri, lang);
        let init = match rpc.request("initialize", params, INITIALIZE_TIMEOUT).await {
            Ok(v) => v,
            Err(e) => {
                kitbag_shared::process::kill_tree(pid);
                return Err(unavailable(format!("failed to initialize: {e}"), &rpc));
            }
        };
        if rpc.notify("initialized", json!({})).await.is_err() {
            return Err(unavailable("exited during start-up".into(), &rpc));
        }
        if !lang.settings.as_object().is_none_or(|o| o.is_empty()) {
            let _ = rpc
                .notify(
                    "workspace/didChangeConfiguration",
                    json!({"settings": lang.settings}),
                )
                .await;
        }
        let capabilities = init["capabilities"].clone();
        // LSP 3.17 says `capabilities.positionEncoding`; clangd before 15 answers its own
        // `offsetEncoding` extension at the top level of the result instead.
        let encoding = Encoding::from_capability(
            capabilities["positionEncoding"]
                .as_str()
                .or(init["offsetEncoding"].as_str()),
        );
        tracing::info!(language = %lang.name, pid, encoding = encoding.as_str(), "language server started");
        Ok(Arc::new(Server {
            lang: lang.clone(),
            rpc,
            pid,
            started: Instant::now(),
            server_info: init["serverInfo"].clone(),
            capabilities,
            encoding,
            docs: tokio::sync::Mutex::default(),
            beneath: self.beneath.clone(),
            last_used: Mutex::new(Instant::now()),
            child: Mutex::new(Some(child)),
            request_timeout: self.config.request_timeout,
        }))
    }

    /// Stop the server after `idle_timeout` without calls; it respawns on next use. A server
    /// with a call in progress is never idle, however long its answer takes.
    fn watch_idle(&self, slot: &Arc<tokio::sync::Mutex<Slot>>, server: &Arc<Server>) {
        let idle = self.config.idle_timeout;
        let audit = self.audit.clone();
        let slot: Weak<tokio::sync::Mutex<Slot>> = Arc::downgrade(slot);
        let server: Weak<Server> = Arc::downgrade(server);
        // Calls hold their own `Arc<Server>` while they run (`Pool::get` hands one out under
        // the slot lock); the slot's and this watcher's are the only others.
        let in_use = |s: &Arc<Server>| Arc::strong_count(s) > 2;
        tokio::spawn(async move {
            loop {
                let Some(s) = server.upgrade() else { return };
                if !s.rpc.is_alive() {
                    return;
                }
                let due = if in_use(&s) {
                    Instant::now() + idle
                } else {
                    s.last_used() + idle
                };
                drop(s);
                tokio::time::sleep_until(due.into()).await;
                let Some(s) = server.upgrade() else { return };
                if in_use(&s) || s.last_used() + idle > Instant::now() {
                    continue;
                }
                let Some(slot) = slot.upgrade() else { return };
                let mut slot = slot.lock().await;
                // Only stop it if it is still the slot's server and still idle.
                let current = slot.server.as_ref().is_some_and(|c| Arc::ptr_eq(c, &s));
                if current && !in_use(&s) && s.last_used() + idle <= Instant::now() {
                    tracing::info!(language = %s.lang.name, "stopping idle language server");
                    if let Some(a) = &audit {
                        a.event(
                            "lsp.server_stopped",
                            json!({"language": s.lang.name, "pid": s.pid, "reason": "idle_timeout"}),
                        );
                    }
                    slot.server = None;
                    slot.last_stop = Some(SlotState::IdleStopped);
                    drop(slot);
                    s.shutdown().await;
                }
                return;
            }
        });
    }

    /// Stop a language's server (if running) and start a fresh one; restarts reset.
    pub async fn reload(self: &Arc<Self>, lang: &LanguageConfig) -> ToolResult<Arc<Server>> {
        let slot_arc = self.slot(&lang.name);
        {
            let mut slot = slot_arc.lock().await;
            if let Some(s) = slot.server.take() {
                self.event(
                    "lsp.server_stopped",
                    json!({"language": lang.name, "pid": s.pid, "reason": "reload"}),
                );
                s.shutdown().await;
            }
            slot.restarts = 0;
            slot.last_stop = None;
        }
        self.get(lang).await
    }

    /// Kill a server that hung; the next call restarts it (counted as a restart).
    pub async fn kill_hung(&self, server: &Arc<Server>) {
        let slot_arc = self.slot(&server.lang.name);
        let mut slot = slot_arc.lock().await;
        if slot.server.as_ref().is_some_and(|c| Arc::ptr_eq(c, server)) {
            slot.server = None;
            slot.restarts += 1;
            slot.last_stop = Some(SlotState::Crashed);
            slot.last_error = Some("killed after not answering in time".into());
            self.event(
                "lsp.server_stopped",
                json!({"language": server.lang.name, "pid": server.pid, "reason": "hung",
                    "restart_count": slot.restarts}),
            );
        }
        server.kill();
    }

    pub async fn status(&self) -> Vec<ServerStatus> {
        let slots: BTreeMap<String, Arc<tokio::sync::Mutex<Slot>>> = self
            .slots
            .locked()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = Vec::new();
        for lang in &self.config.languages {
            let installed = find_program(&lang.command[0]).is_some();
            let mut st = ServerStatus {
                language: lang.name.clone(),
                command: lang.command.clone(),
                state: "not_started".into(),
                pid: None,
                uptime_ms: None,
                restarts: 0,
                spawns: 0,
                open_files: Vec::new(),
                open_files_count: 0,
                open_files_truncated: false,
                position_encoding: None,
                installed,
                last_error: None,
            };
            if let Some(slot) = slots.get(&lang.name) {
                let slot = slot.lock().await;
                st.restarts = slot.restarts;
                st.spawns = slot.spawns;
                st.last_error = slot.last_error.clone();
                let state = match &slot.server {
                    Some(s) if s.rpc.is_alive() => {
                        st.pid = Some(s.pid);
                        st.uptime_ms = Some(s.started.elapsed().as_millis() as u64);
                        st.position_encoding = Some(s.encoding.as_str().into());
                        let docs = s.docs.lock().await;
                        let mut files: Vec<String> =
                            docs.keys().map(|p| display(&self.root, p)).collect();
                        files.sort();
                        st.open_files_count = files.len();
                        st.open_files = files;
                        SlotState::Running
                    }
                    Some(_) => SlotState::Crashed,
                    None => slot.last_stop.unwrap_or(SlotState::NotStarted),
                };
                st.state = serde_json::to_value(state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
            }
            out.push(st);
        }
        out
    }

    /// Shut every server down (server exit).
    pub async fn shutdown_all(&self) {
        let slots: Vec<_> = self.slots.locked().values().cloned().collect();
        for slot in slots {
            let server = slot.lock().await.server.take();
            if let Some(s) = server {
                self.event(
                    "lsp.server_stopped",
                    json!({"language": s.lang.name, "pid": s.pid, "reason": "shutdown"}),
                );
                s.shutdown().await;
            }
        }
    }
}

fn display(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .map(|r| r.to_string_lossy().into_owned())
        .unwrap_or_else(|_| p.display().to_string())
}

impl Server {
    fn touch(&self) {
        {
            let mut t = self.last_used.locked();
            *t = Instant::now();
        }
    }

    fn last_used(&self) -> Instant {
        *self.last_used.locked()
    }

    /// `shutdown` + `exit`, then make sure the whole process tree is gone.
    pub async fn shutdown(&self) {
        if self.rpc.is_alive() {
            let _ = self
                .rpc
                .request("shutdown", Value::Null, Duration::from_secs(3))
                .await;
            let _ = self.rpc.notify("exit", Value::Null).await;
            let child = self.child.locked().take();
            if let Some(mut child) = child {
                let waited = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                if waited.is_err() {
                    kitbag_shared::process::kill_tree(self.pid);
                    let _ = child.wait().await;
                } else {
                    // Helpers it started (tsserver, typings installers) go too.
                    kitbag_shared::process::kill_tree(self.pid);
                }
            }
        }
        self.kill();
    }

    pub fn kill(&self) {
        let child = self.child.locked().take();
        if let Some(mut child) = child {
            kitbag_shared::process::kill_tree(self.pid);
            let _ = child.start_kill();
        }
    }

    pub fn has(&self, capability: &str) -> bool {
        !matches!(
            &self.capabilities[capability],
            Value::Null | Value::Bool(false)
        )
    }

    /// Send a request with the pool's timeout.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.touch();
        let r = self.rpc.request(method, params, self.request_timeout).await;
        self.touch();
        r
    }

    /// Bring the server's view up to date with the disk: every open document is
    /// re-read and changed or closed as needed, and `open` documents are opened.
    /// Returns the current text of each of `open`, in order.
    pub async fn sync(&self, open: &[PathBuf]) -> ToolResult<Vec<Arc<Lines>>> {
        self.touch();
        let mut docs = self.docs.lock().await;
        self.refresh_open(&mut docs).await?;
        let mut out = Vec::with_capacity(open.len());
        for path in open {
            let lines = match docs.get_mut(path) {
                Some(doc) => {
                    doc.last_used = Instant::now();
                    doc.lines.clone()
                }
                None => self.open_new(&mut docs, path).await?,
            };
            out.push(lines);
        }
        self.close_oldest(&mut docs, open).await;
        Ok(out)
    }

    /// The error of a notification that could not be written: the server is gone.
    fn exited(&self, _: RpcError) -> ToolError {
        ToolError::new(
            ErrorCode::LspServerUnavailable,
            format!(
                "the {} language server exited; the next call restarts it",
                self.lang.name
            ),
        )
    }

    /// Compare every open document with the disk: a changed one gets `didChange` +
    /// `didSave`, one that is gone (or no longer opens beneath the root) `didClose`.
    async fn refresh_open(&self, docs: &mut HashMap<PathBuf, Doc>) -> ToolResult<()> {
        let paths: Vec<PathBuf> = docs.keys().cloned().collect();
        for path in paths {
            let uri = path_to_uri(&path);
            // One descriptor for the metadata and the content, opened beneath the root: a
            // directory swapped for a link since the document was opened is refused.
            let file = self.open_doc(&path);
            let meta = file.as_ref().ok().and_then(|f| f.metadata().ok());
            let trusted = |d: &Doc| {
                d.stamp
                    .as_ref()
                    .zip(meta.as_ref())
                    .is_some_and(|(s, m)| s.unchanged(m))
            };
            if docs.get(&path).is_some_and(trusted) {
                continue;
            }
            // Taken before the read: a write in between shows up as a new stamp next time.
            let stamp = meta.as_ref().map(Stamp::of);
            let bytes = match file.and_then(read_all) {
                Ok(bytes) => bytes,
                Err(_) => {
                    docs.remove(&path);
                    self.rpc
                        .notify(
                            "textDocument/didClose",
                            json!({"textDocument": {"uri": uri}}),
                        )
                        .await
                        .map_err(|e| self.exited(e))?;
                    continue;
                }
            };
            let hash = xxh3_64(&bytes);
            let Some(doc) = docs.get_mut(&path) else {
                continue;
            };
            doc.stamp = stamp;
            if doc.hash == hash {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            doc.version += 1;
            doc.hash = hash;
            doc.changed_at = self.rpc.event_seq();
            self.rpc
                .notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": uri, "version": doc.version},
                        "contentChanges": [{"text": text}]}),
                )
                .await
                .map_err(|e| self.exited(e))?;
            // The text is what is on disk, so it is saved: servers that check on
            // save (rust-analyzer's cargo check) rerun.
            self.rpc
                .notify(
                    "textDocument/didSave",
                    json!({"textDocument": {"uri": uri}}),
                )
                .await
                .map_err(|e| self.exited(e))?;
            doc.lines = Arc::new(Lines::new(text));
        }
        Ok(())
    }

    /// Read a document not open yet and `didOpen` it; its text.
    async fn open_new(
        &self,
        docs: &mut HashMap<PathBuf, Doc>,
        path: &Path,
    ) -> ToolResult<Arc<Lines>> {
        let io_err = |e: std::io::Error| ToolError::io(&path.to_string_lossy(), &e);
        let file = self.open_doc(path).map_err(io_err)?;
        let stamp = file.metadata().ok().map(|m| Stamp::of(&m));
        let bytes = read_all(file).map_err(io_err)?;
        let hash = xxh3_64(&bytes);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        self.rpc
            .notify(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": path_to_uri(path),
                    "languageId": self.lang.language_id(&ext), "version": 1, "text": text}}),
            )
            .await
            .map_err(|e| self.exited(e))?;
        let lines = Arc::new(Lines::new(text));
        docs.insert(
            path.to_path_buf(),
            Doc {
                version: 1,
                hash,
                stamp,
                lines: lines.clone(),
                changed_at: self.rpc.event_seq(),
                last_used: Instant::now(),
            },
        );
        Ok(lines)
    }

    /// Keep the server's working set bounded: close the least recently used documents
    /// (never one of `keep`) beyond [`MAX_OPEN_DOCS`].
    async fn close_oldest(&self, docs: &mut HashMap<PathBuf, Doc>, keep: &[PathBuf]) {
        while docs.len() > MAX_OPEN_DOCS {
            let Some(oldest) = docs
                .iter()
                .filter(|(p, _)| !keep.contains(p))
                .min_by_key(|(_, d)| d.last_used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            docs.remove(&oldest);
            let _ = self
                .rpc
                .notify(
                    "textDocument/didClose",
                    json!({"textDocument": {"uri": path_to_uri(&oldest)}}),
                )
                .await;
        }
    }

    /// The text of a file the way the server sees it (open documents) or on disk.
    pub async fn text_of(&self, path: &Path) -> Option<Arc<Lines>> {
        if let Some(d) = self.docs.lock().await.get(path) {
            return Some(d.lines.clone());
        }
        let bytes = self.open_doc(path).and_then(read_all).ok()?;
        Some(Arc::new(Lines::new(
            String::from_utf8_lossy(&bytes).into_owned(),
        )))
    }
}

impl Server {
    /// Open a document for reading. Under the root it is opened beneath the root's
    /// descriptor, refusing a link anywhere on the way (issue #22 §1); elsewhere (files a
    /// server names outside the root, like a standard library) by its path. Nothing is read
    /// when the root itself could not be opened.
    pub fn open_doc(&self, path: &Path) -> std::io::Result<std::fs::File> {
        match &self.beneath {
            Some(b) if path.starts_with(b.root()) => b.open_real_read(path),
            Some(_) => std::fs::File::open(path),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the root directory could not be opened",
            )),
        }
    }
}

/// The whole content of an open file.
pub fn read_all(mut f: std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn initialize_params(root: &Path, root_uri: &str, lang: &LanguageConfig) -> Value {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    let mut p = json!({
        "processId": std::process::id(),
        "clientInfo": {"name": "kitbag-lsp", "version": env!("CARGO_PKG_VERSION")},
        "rootUri": root_uri,
        "rootPath": root.to_string_lossy(),
        "workspaceFolders": [{"uri": root_uri, "name": name}],
        "capabilities": {
            "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
            "offsetEncoding": ["utf-8", "utf-32", "utf-16"],
            "workspace": {
                "configuration": true,
                "workspaceFolders": true,
                "applyEdit": false,
                "workspaceEdit": {"documentChanges": true},
                "symbol": {"dynamicRegistration": false},
                "diagnostics": {"refreshSupport": true},
                "didChangeConfiguration": {"dynamicRegistration": false}
            },
            "textDocument": {
                "synchronization": {"dynamicRegistration": false, "didSave": true},
                "publishDiagnostics": {"versionSupport": true, "relatedInformation": false},
                "diagnostic": {"dynamicRegistration": false},
                "definition": {"linkSupport": true},
                "typeDefinition": {"linkSupport": true},
                "implementation": {"linkSupport": true},
                "declaration": {"linkSupport": true},
                "references": {},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                "rename": {"prepareSupport": true},
                "codeAction": {
                    "codeActionLiteralSupport": {"codeActionKind": {"valueSet": [
                        "", "quickfix", "refactor", "refactor.extract", "refactor.inline",
                        "refactor.rewrite", "source", "source.organizeImports"]}},
                    "isPreferredSupport": true,
                    "resolveSupport": {"properties": ["edit"]}
                }
            },
            "window": {"workDoneProgress": true}
        }
    });
    if let Some(opts) = &lang.initialization_options {
        p["initializationOptions"] = opts.clone();
    }
    p
}
