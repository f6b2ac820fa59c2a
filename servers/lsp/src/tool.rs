//! The `code_lsp` tool: its parameters, validation, and dispatch to the actions.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kitbag_shared::{
    Access, ErrorCode, PathPolicy, Reply, Resolved, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::LanguageConfig;
use crate::pool::{Pool, Server};
use crate::rpc::RpcError;
use crate::text::{Lines, find_word};

pub const DEF: ToolDef = ToolDef {
    name: "code_lsp",
    title: "Code intelligence",
    description: "Code intelligence from real language servers (rust-analyzer, pyright, typescript-language-server, \
        gopls, clangd), started on first use and kept in sync with the files on disk. A position is `path` + \
        `line` + `character` or `symbol`. rename edits every file atomically; rename_file moves the file and \
        lets the server update imports; request sends a raw LSP request. A parameter prefixed with actions \
        applies to those only. Results carry root-relative paths, 1-based lines and a preview.",
    read_only: false,
    destructive: false,
    idempotent: false,
    open_world: false,
    exec: false,
    meta: None,
    private_args: &[],
};

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Diagnostics,
    Definition,
    TypeDefinition,
    Implementation,
    References,
    Hover,
    Symbols,
    Rename,
    RenameFile,
    CodeActions,
    Capabilities,
    Status,
    Reload,
    Request,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Diagnostics => "diagnostics",
            Action::Definition => "definition",
            Action::TypeDefinition => "type_definition",
            Action::Implementation => "implementation",
            Action::References => "references",
            Action::Hover => "hover",
            Action::Symbols => "symbols",
            Action::Rename => "rename",
            Action::RenameFile => "rename_file",
            Action::CodeActions => "code_actions",
            Action::Capabilities => "capabilities",
            Action::Status => "status",
            Action::Reload => "reload",
            Action::Request => "request",
        }
    }

    fn needs_position(self) -> bool {
        matches!(
            self,
            Action::Definition
                | Action::TypeDefinition
                | Action::Implementation
                | Action::References
                | Action::Hover
                | Action::Rename
        )
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
    Information,
    Hint,
    All,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Document,
    Workspace,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspParams {
    pub action: Action,
    /// File (or, for diagnostics, directory), root-relative. Required except for status,
    /// reload with `language`, and workspace symbols.
    #[serde(default)]
    pub path: Option<String>,
    /// 1-based line.
    #[serde(default)]
    pub line: Option<u64>,
    /// 0-based column, in characters (Unicode scalar values).
    #[serde(default)]
    pub character: Option<u64>,
    /// Instead of `character`: a name on `line` (or the first occurrence in the file).
    #[serde(default)]
    pub symbol: Option<String>,
    /// diagnostics: keep this severity and worse (default all).
    #[serde(default)]
    pub severity: Option<Severity>,
    /// references: include the declaration itself (default false).
    #[serde(default)]
    pub include_declaration: Option<bool>,
    /// symbols: document (outline of `path`, default) or workspace (search by `query`).
    #[serde(default)]
    pub scope: Option<Scope>,
    /// symbols: name to search (required for workspace scope; filters the outline otherwise).
    #[serde(default)]
    pub query: Option<String>,
    /// references/symbols/diagnostics: most results to return (default 100, 50 for symbols).
    #[serde(default)]
    pub limit: Option<u64>,
    /// references/symbols/diagnostics: results to skip, for paging.
    #[serde(default)]
    pub offset: Option<u64>,
    /// rename: the new name (an identifier).
    #[serde(default)]
    pub new_name: Option<String>,
    /// rename_file: where the file goes (root-relative; must not exist).
    #[serde(default)]
    pub new_path: Option<String>,
    /// code_actions: send the diagnostics on that line with the request (default true).
    #[serde(default)]
    pub include_diagnostics: Option<bool>,
    /// reload/capabilities/request: the language (rust, python, typescript, go, c, ...)
    /// when no path is given.
    #[serde(default)]
    pub language: Option<String>,
    /// request: the LSP method, e.g. `textDocument/foldingRange`.
    #[serde(default)]
    pub method: Option<String>,
    /// request: the LSP params object.
    #[serde(default)]
    pub params: Option<Value>,
    /// diagnostics: longest wait for the server to finish analysing, in ms (default
    /// 20000, max 120000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LspResult {
    pub action: String,
    /// The action's answer (shape per action).
    #[serde(flatten)]
    pub data: serde_json::Map<String, Value>,
}

/// One pool per project root: the root comes from `--root`, or from the client's first
/// MCP root, so a client that names its roots gets servers rooted there.
pub struct LspState {
    pub config: crate::config::Config,
    pools: std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<Pool>>>,
    audit: Option<kitbag_shared::audit::AuditLog>,
}

impl LspState {
    pub fn new(config: crate::config::Config) -> Self {
        Self::with_audit(config, None)
    }

    /// Language-server lifecycle events are appended to `audit` (the `--audit-log` file).
    pub fn with_audit(
        config: crate::config::Config,
        audit: Option<kitbag_shared::audit::AuditLog>,
    ) -> Self {
        LspState {
            config,
            pools: Default::default(),
            audit,
        }
    }

    pub fn pool_for(&self, root: &std::path::Path) -> Arc<Pool> {
        let mut pools = match self.pools.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        pools
            .entry(root.to_path_buf())
            .or_insert_with(|| {
                Pool::with_audit(self.config.clone(), root.to_path_buf(), self.audit.clone())
            })
            .clone()
    }

    /// Shut every language server down (server exit).
    pub async fn shutdown_all(&self) {
        let pools: Vec<Arc<Pool>> = match self.pools.lock() {
            Ok(p) => p.values().cloned().collect(),
            Err(_) => return,
        };
        for pool in pools {
            pool.shutdown_all().await;
        }
    }
}

/// A file opened in its server, ready for a request.
pub struct Opened {
    pub abs: PathBuf,
    pub rel: String,
    pub server: Arc<Server>,
    pub lines: Arc<Lines>,
}

pub fn need<'a, T>(v: &'a Option<T>, field: &str, what: &str) -> ToolResult<&'a T> {
    v.as_ref()
        .ok_or_else(|| ToolError::invalid_field(field, what))
}

/// The configured language of a file, or `unsupported_language`.
pub fn language_for<'a>(
    pool: &'a Pool,
    abs: &std::path::Path,
    rel: &str,
) -> ToolResult<&'a LanguageConfig> {
    pool.config.for_path(abs).ok_or_else(|| {
        ToolError::new(
            ErrorCode::UnsupportedLanguage,
            format!(
                "path: no language server is configured for `{rel}`; configured languages: {} (by extension: {})",
                pool.config.names().join(", "),
                pool.config
                    .languages
                    .iter()
                    .flat_map(|l| l.extensions.iter().map(|e| format!(".{e}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )
        .with_detail(serde_json::json!({"field": "path", "path": rel}))
    })
}

pub fn language_named<'a>(pool: &'a Pool, name: &str) -> ToolResult<&'a LanguageConfig> {
    pool.config.by_name(name).ok_or_else(|| {
        ToolError::invalid_field(
            "language",
            format!(
                "unknown language `{name}`; configured: {}",
                pool.config.names().join(", ")
            ),
        )
    })
}

/// Map an RPC failure to a tool error; a hang kills the server so the next call
/// starts a fresh one.
pub async fn rpc_error(pool: &Pool, server: &Arc<Server>, method: &str, e: RpcError) -> ToolError {
    match e {
        RpcError::Timeout => {
            pool.kill_hung(server).await;
            ToolError::new(
                ErrorCode::Timeout,
                format!(
                    "the {} language server did not answer {method} within {}s; it was stopped and restarts on the next call",
                    server.lang.name,
                    pool.config.request_timeout.as_secs_f64()
                ),
            )
        }
        RpcError::Closed => ToolError::new(
            ErrorCode::LspServerUnavailable,
            format!(
                "the {} language server exited during {method}; the next call restarts it",
                server.lang.name
            ),
        )
        .with_detail(serde_json::json!({"stderr_tail": server.rpc.stderr_tail()})),
        RpcError::Server { code, message } => ToolError::new(
            ErrorCode::InvalidParams,
            format!(
                "the {} language server refused {method}: {message}",
                server.lang.name
            ),
        )
        .with_detail(serde_json::json!({"lsp_error_code": code})),
    }
}

/// Resolve `path`, find its language, get its server and sync it.
pub async fn open(pool: &Arc<Pool>, policy: &PathPolicy, path: &str) -> ToolResult<Opened> {
    let (r, file) = open_path(policy, path)?;
    if is_dir(&r, &file)? {
        return Err(ToolError::invalid_field(
            "path",
            format!("`{}` is a directory; this action needs a file", r.rel),
        ));
    }
    drop(file);
    let lang = language_for(pool, &r.abs, &r.rel)?;
    let server = pool.get(lang).await?;
    let mut texts = server.sync(std::slice::from_ref(&r.abs)).await?;
    let lines = texts
        .pop()
        .ok_or_else(|| ToolError::internal("sync returned no text"))?;
    Ok(Opened {
        abs: r.abs,
        rel: r.rel,
        server,
        lines,
    })
}

/// Resolve `path` and open it beneath the root without following a link (issue #22 §1):
/// what the answer is about is what was resolved, even if a directory on the way is swapped
/// for a link meanwhile. A missing path is `file_not_found` naming the resolved path.
pub fn open_path(policy: &PathPolicy, path: &str) -> ToolResult<(Resolved, std::fs::File)> {
    // Resolved first on its own, so refusals read exactly as they always did.
    let r = policy.resolve(path, "path", Access::Read)?;
    match policy.open_file(path, "path", Access::Read) {
        Ok(v) => Ok(v),
        Err(e) if e.code == ErrorCode::FileNotFound || e.code == ErrorCode::NotADirectory => {
            Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("path: `{}` does not exist", r.rel),
            )
            .with_detail(serde_json::json!({"field": "path"})))
        }
        Err(e) => Err(e),
    }
}

/// Whether an opened path is a directory (`fstat` on the descriptor, not the name).
pub fn is_dir(r: &Resolved, file: &std::fs::File) -> ToolResult<bool> {
    file.metadata()
        .map(|m| m.is_dir())
        .map_err(|e| ToolError::io(&r.rel, &e))
}

/// The (0-based line, character) a position action is about.
pub fn position(lines: &Lines, p: &LspParams, action: Action) -> ToolResult<(usize, usize)> {
    let total = lines.visible_len();
    let line0 = match p.line {
        Some(0) => {
            return Err(ToolError::invalid_field(
                "line",
                "lines are 1-based; the first line is 1",
            ));
        }
        Some(l) if l as usize > total => {
            return Err(ToolError::invalid_field(
                "line",
                format!("line {l} is past the end of the file ({total} lines)"),
            ));
        }
        Some(l) => Some(l as usize - 1),
        None => None,
    };
    if let Some(sym) = &p.symbol {
        if sym.is_empty() {
            return Err(ToolError::invalid_field("symbol", "must not be empty"));
        }
        return match line0 {
            Some(l) => {
                let text = lines.line(l).unwrap_or("");
                find_word(text, sym).map(|c| (l, c)).ok_or_else(|| {
                    ToolError::invalid_field(
                        "symbol",
                        format!(
                            "`{sym}` does not occur on line {}: {}",
                            l + 1,
                            crate::text::preview_of(text)
                        ),
                    )
                })
            }
            None => (0..lines.len())
                .find_map(|l| find_word(lines.line(l).unwrap_or(""), sym).map(|c| (l, c)))
                .ok_or_else(|| {
                    ToolError::invalid_field(
                        "symbol",
                        format!("`{sym}` does not occur in the file"),
                    )
                }),
        };
    }
    let Some(l) = line0 else {
        return Err(ToolError::invalid_field(
            "line",
            format!(
                "required for action `{}`: the 1-based line (or give `symbol` alone to use its first occurrence)",
                action.as_str()
            ),
        ));
    };
    let text = lines.line(l).unwrap_or("");
    let width = text.chars().count();
    match p.character {
        None if action == Action::CodeActions => Ok((l, 0)),
        None => Err(ToolError::invalid_field(
            "character",
            "give `character` (0-based, in characters) or `symbol` (a name on the line)",
        )),
        Some(c) if c as usize > width => Err(ToolError::invalid_field(
            "character",
            format!(
                "character {c} is past the end of line {} ({width} characters)",
                l + 1
            ),
        )),
        Some(c) => Ok((l, c as usize)),
    }
}

/// Check what can be checked without a language server, so bad input never spawns one.
pub fn validate(p: &LspParams) -> ToolResult<()> {
    let needs_path = match p.action {
        Action::Status => false,
        Action::Reload | Action::Capabilities | Action::Request => p.language.is_none(),
        Action::Symbols => p.scope != Some(Scope::Workspace),
        _ => true,
    };
    if needs_path && p.path.is_none() {
        return Err(ToolError::invalid_field(
            "path",
            format!("required for action `{}`", p.action.as_str()),
        ));
    }
    if p.action.needs_position() && p.line.is_none() && p.symbol.is_none() {
        return Err(ToolError::invalid_field(
            "line",
            format!(
                "required for action `{}`: the 1-based line (or give `symbol`)",
                p.action.as_str()
            ),
        ));
    }
    if p.action == Action::CodeActions && p.line.is_none() && p.symbol.is_none() {
        return Err(ToolError::invalid_field(
            "line",
            "required for action `code_actions`: the 1-based line",
        ));
    }
    if p.action == Action::RenameFile {
        need(
            &p.new_path,
            "new_path",
            "required for action `rename_file`: where the file goes",
        )?;
    }
    if p.action == Action::Rename {
        let name = need(&p.new_name, "new_name", "required for action `rename`")?;
        if !crate::text::is_identifier(name) {
            return Err(ToolError::invalid_field(
                "new_name",
                format!(
                    "`{name}` is not an identifier (letters, digits and `_`, not starting with a digit)"
                ),
            ));
        }
    }
    if p.action == Action::Symbols
        && p.scope == Some(Scope::Workspace)
        && p.query.as_deref().is_none_or(str::is_empty)
    {
        return Err(ToolError::invalid_field(
            "query",
            "required for workspace symbols: the name to search",
        ));
    }
    if p.action == Action::Request {
        let m = need(
            &p.method,
            "method",
            "required for action `request`, e.g. `textDocument/foldingRange`",
        )?;
        if m.is_empty()
            || m.starts_with("$/")
            || matches!(m.as_str(), "initialize" | "shutdown" | "exit")
        {
            return Err(ToolError::invalid_field(
                "method",
                format!(
                    "`{m}` cannot be sent through `request`: the pool manages the server's lifecycle"
                ),
            ));
        }
    }
    Ok(())
}

/// One page of a result list (`limit`/`offset`), and how it relates to the whole.
pub struct Page {
    offset: usize,
    limit: usize,
    pub total: usize,
}

/// Cut `all` to the page the caller asked for.
pub fn page(all: Vec<Value>, p: &LspParams, default_limit: u64) -> (Vec<Value>, Page) {
    let limit = p.limit.unwrap_or(default_limit).clamp(1, 10_000) as usize;
    let offset = p.offset.unwrap_or(0) as usize;
    let total = all.len();
    let shown = all.into_iter().skip(offset).take(limit).collect();
    (
        shown,
        Page {
            offset,
            limit,
            total,
        },
    )
}

impl Page {
    /// When more follows: `truncated`/`next_offset` in the data and a line saying how to go on.
    pub fn mark(&self, data: &mut Value, text: &mut Vec<String>) {
        let next = self.offset + self.limit;
        if next < self.total {
            data["truncated"] = Value::Bool(true);
            data["next_offset"] = Value::from(next);
            text.push(format!(
                "… {} more; call again with offset {next}",
                self.total - next
            ));
        }
    }
}

pub fn wait(p: &LspParams) -> Duration {
    Duration::from_millis(p.wait_ms.unwrap_or(20_000).min(120_000))
}

/// Check the path, its language and the position against the file on disk, so that
/// bad input never spawns (or waits for) a language server.
pub fn preflight(pool: &Pool, policy: &PathPolicy, p: &LspParams) -> ToolResult<()> {
    let Some(path) = &p.path else { return Ok(()) };
    let (r, file) = open_path(policy, path)?;
    if is_dir(&r, &file)? {
        if p.action == Action::Diagnostics {
            return Ok(());
        }
        return Err(ToolError::invalid_field(
            "path",
            format!(
                "`{}` is a directory; action `{}` needs a file",
                r.rel,
                p.action.as_str()
            ),
        ));
    }
    if p.language.is_none() {
        language_for(pool, &r.abs, &r.rel)?;
    }
    if p.action.needs_position() || p.action == Action::CodeActions {
        let bytes = crate::pool::read_all(file).map_err(|e| ToolError::io(&r.rel, &e))?;
        let lines = Lines::new(String::from_utf8_lossy(&bytes).into_owned());
        position(&lines, p, p.action)?;
    }
    Ok(())
}

pub async fn run(
    state: &LspState,
    policy: Arc<PathPolicy>,
    p: LspParams,
) -> ToolResult<Reply<LspResult>> {
    validate(&p)?;
    let pool = &state.pool_for(policy.root());
    preflight(pool, &policy, &p)?;
    let (data, text) = match p.action {
        Action::Status => crate::actions::status(pool).await?,
        Action::Reload => crate::actions::reload(pool, &policy, &p).await?,
        Action::Capabilities => crate::actions::capabilities(pool, &policy, &p).await?,
        Action::Request => crate::actions::raw_request(pool, &policy, &p).await?,
        Action::Diagnostics => crate::actions::diagnostics(pool, &policy, &p).await?,
        Action::Definition | Action::TypeDefinition | Action::Implementation => {
            crate::actions::goto(pool, &policy, &p).await?
        }
        Action::References => crate::actions::references(pool, &policy, &p).await?,
        Action::Hover => crate::actions::hover(pool, &policy, &p).await?,
        Action::Symbols => crate::actions::symbols(pool, &policy, &p).await?,
        Action::CodeActions => crate::actions::code_actions(pool, &policy, &p).await?,
        Action::Rename => crate::rename::rename(pool, &policy, &p).await?,
        Action::RenameFile => crate::rename::rename_file(pool, &policy, &p).await?,
    };
    let data = match data {
        Value::Object(m) => m,
        other => {
            let mut m = serde_json::Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    Ok(Reply::new(
        LspResult {
            action: p.action.as_str().to_string(),
            data,
        },
        text,
    ))
}
