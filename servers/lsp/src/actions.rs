//! The read actions of `code_lsp`: each sends its LSP request and turns the answer into
//! root-relative paths, 1-based lines, character columns and previews.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use kitbag_shared::{Access, ErrorCode, PathPolicy, Resolved, ToolError, ToolResult};
use serde_json::{Value, json};

use crate::config::LanguageConfig;
use crate::diagnostics::{self, code_string, passes, severity_name};
use crate::pool::{Pool, Server};
use crate::result::{
    CodeAction, Diagnostic, Edit, Location, LspResult, Position, Range, ServerInfo, Supports,
    Symbol, page,
};
use crate::text::{Encoding, Lines, path_to_uri, uri_to_path};
use crate::tool::{
    Action, LspParams, Opened, Scope, language_for, language_named, need, open, position, rpc_error,
};

/// An action's answer: the structured result and the text for a model to read.
pub type Answer = (LspResult, String);

/// Hover text beyond this is cut with a marker.
pub const MAX_HOVER_CHARS: usize = 4000;
/// A raw `request` answer beyond this is cut.
pub const MAX_RAW_BYTES: usize = 256 * 1024;
/// Files a directory `diagnostics` call opens at most.
pub const MAX_DIR_FILES: usize = 200;

pub async fn status(pool: &Arc<Pool>) -> ToolResult<Answer> {
    let servers = pool.status().await;
    let text = servers
        .iter()
        .map(|s| {
            format!(
                "{}: {}{}{} (restarts {}, {} open files){}",
                s.language,
                s.state,
                s.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
                s.uptime_ms
                    .map(|u| format!(" up {:.1}s", u as f64 / 1000.0))
                    .unwrap_or_default(),
                s.restarts,
                s.open_files.len(),
                if s.installed { "" } else { " [not installed]" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let result = LspResult {
        servers: Some(servers),
        ..LspResult::new(Action::Status)
    };
    Ok((result, text))
}

/// The language of a call: from `language`, else from `path`.
fn language_of<'a>(
    pool: &'a Pool,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<&'a LanguageConfig> {
    match (&p.language, &p.path) {
        (Some(name), _) => language_named(pool, name),
        (None, Some(path)) => {
            let r = policy.resolve(path, "path", Access::Read)?;
            language_for(pool, &r.abs, &r.rel)
        }
        (None, None) => Err(ToolError::invalid_field(
            "language",
            "give `language` or `path`",
        )),
    }
}

/// The server a by-language call goes to: `path`'s (opened and synced), else `language`'s.
async fn server_of(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Arc<Server>> {
    Ok(match &p.path {
        Some(path) => open(pool, policy, path).await?.server,
        None => pool.get(language_of(pool, policy, p)?).await?,
    })
}

pub async fn reload(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let lang = language_of(pool, policy, p)?;
    let server = pool.reload(lang).await?;
    let result = LspResult {
        language: Some(lang.name.clone()),
        pid: Some(server.pid),
        state: Some("running".into()),
        ..LspResult::new(p.action)
    };
    let text = format!(
        "restarted the {} language server (pid {})",
        lang.name, server.pid
    );
    Ok((result, text))
}

/// What a server supports, read from its capabilities.
fn supports(server: &Server) -> Supports {
    let has = |k: &str| server.has(k);
    Supports {
        diagnostics_pull: has("diagnosticProvider"),
        definition: has("definitionProvider"),
        type_definition: has("typeDefinitionProvider"),
        implementation: has("implementationProvider"),
        references: has("referencesProvider"),
        hover: has("hoverProvider"),
        document_symbols: has("documentSymbolProvider"),
        workspace_symbols: has("workspaceSymbolProvider"),
        rename: has("renameProvider"),
        prepare_rename: server.capabilities["renameProvider"]["prepareProvider"].as_bool()
            == Some(true),
        code_actions: has("codeActionProvider"),
    }
}

pub async fn capabilities(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let lang = language_of(pool, policy, p)?;
    let server = pool.get(lang).await?;
    let supports = supports(&server);
    let server_info: Option<ServerInfo> = serde_json::from_value(server.server_info.clone()).ok();
    let text = format!(
        "{} ({}) supports: {}; positions in {}",
        lang.name,
        server_info
            .as_ref()
            .map_or(lang.command[0].as_str(), |i| i.name.as_str()),
        supports.names().join(", "),
        server.encoding.as_str()
    );
    let result = LspResult {
        language: Some(lang.name.clone()),
        command: Some(lang.command.clone()),
        server_info: Some(server_info),
        position_encoding: Some(server.encoding.as_str().to_string()),
        supports: Some(supports),
        capabilities: Some(server.capabilities.as_object().cloned().unwrap_or_default()),
        ..LspResult::new(p.action)
    };
    Ok((result, text))
}

pub async fn raw_request(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let method = need(&p.method, "method", "required")?;
    let server = server_of(pool, policy, p).await?;
    server.sync(&[]).await?;
    let params = p.params.clone().unwrap_or(Value::Null);
    let answer = server.request(method, params).await.map_err(raw_error)?;
    let text = answer.to_string();
    let mut result = LspResult {
        method: Some(method.clone()),
        ..LspResult::new(p.action)
    };
    if text.len() > MAX_RAW_BYTES {
        let (cut, _) = kitbag_shared::limits::truncate_str(&text, MAX_RAW_BYTES);
        let text = format!("{cut}… [truncated at {MAX_RAW_BYTES} bytes]");
        result.truncated = Some(true);
        result.result_text = Some(cut.to_string());
        return Ok((result, text));
    }
    result.result = Some(answer);
    Ok((result, text))
}

fn raw_error(e: crate::rpc::RpcError) -> ToolError {
    use crate::rpc::RpcError;
    // Raw requests do not kill the server on timeout: the method may simply be slow.
    ToolError::new(
        match e {
            RpcError::Timeout => ErrorCode::Timeout,
            RpcError::Closed => ErrorCode::LspServerUnavailable,
            RpcError::Server { code: -32601, .. } => ErrorCode::UnsupportedByAdapter,
            RpcError::Server { .. } => ErrorCode::InvalidParams,
        },
        format!("request failed: {e}"),
    )
}

/// The (line, code unit) at `v` (an LSP `Position`), 0 where missing.
fn lsp_position(v: &Value) -> (usize, usize) {
    (
        v["line"].as_u64().unwrap_or(0) as usize,
        v["character"].as_u64().unwrap_or(0) as usize,
    )
}

/// One diagnostic in caller coordinates.
fn diagnostic_entry(
    policy: &PathPolicy,
    path: &Path,
    lines: &Lines,
    d: &Value,
    enc: Encoding,
) -> Diagnostic {
    let (sl, sc) = lsp_position(&d["range"]["start"]);
    let el = d["range"]["end"]["line"].as_u64().unwrap_or(sl as u64) as usize;
    let ec = d["range"]["end"]["character"].as_u64().unwrap_or(sc as u64) as usize;
    Diagnostic {
        path: policy.display(path),
        line: sl + 1,
        character: lines.to_chars(sl, sc, enc).1,
        end_line: el + 1,
        end_character: lines.to_chars(el, ec, enc).1,
        severity: severity_name(&d["severity"]).to_string(),
        message: d["message"].as_str().unwrap_or("").to_string(),
        code: code_string(&d["code"]),
        source: d["source"].as_str().map(str::to_string),
    }
}

/// What `diagnostics` was asked about: the resolved path and whether it is a directory,
/// asked of a descriptor opened beneath the root (issue #22 §1).
fn diagnostics_target(policy: &PathPolicy, path: &str) -> ToolResult<(Resolved, bool)> {
    let r = policy.resolve(path, "path", Access::Read)?;
    match policy.open_file(path, "path", Access::Read) {
        Ok((r, f)) => {
            let dir = f
                .metadata()
                .map_err(|e| ToolError::io(&r.rel, &e))?
                .is_dir();
            Ok((r, dir))
        }
        Err(e) if e.code == ErrorCode::FileNotFound || e.code == ErrorCode::NotADirectory => {
            Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("path: `{}` does not exist", r.rel),
            ))
        }
        Err(e) => Err(e),
    }
}

/// Files to check, grouped by language.
type Groups<'a> = Vec<(&'a LanguageConfig, Vec<PathBuf>)>;

/// The files of a directory a server is configured for (at most [`MAX_DIR_FILES`]; the
/// flag says whether more were left out), grouped by language.
fn directory_files<'a>(pool: &'a Pool, policy: &PathPolicy, dir: &Path) -> (Groups<'a>, bool) {
    let mut files = Vec::new();
    let mut truncated = false;
    for entry in ignore::WalkBuilder::new(dir).build().flatten() {
        // The walk goes by path: each file it found is opened again beneath the root,
        // so a walk led outside by a directory swapped for a link names nothing there.
        if entry.file_type().is_some_and(|t| t.is_file())
            && pool.config.for_path(entry.path()).is_some()
            && policy.open_real_read(entry.path()).is_ok()
        {
            if files.len() == MAX_DIR_FILES {
                truncated = true;
                break;
            }
            files.push(entry.into_path());
        }
    }
    files.sort();
    let mut groups: Groups<'a> = Vec::new();
    for f in files {
        let Some(lang) = pool.config.for_path(&f) else {
            continue;
        };
        match groups.iter_mut().find(|(l, _)| l.name == lang.name) {
            Some((_, v)) => v.push(f),
            None => groups.push((lang, vec![f])),
        }
    }
    (groups, truncated)
}

/// The diagnostics of every group, from each group's server, within one deadline.
struct Gathered {
    all: Vec<Diagnostic>,
    settled: bool,
    waited_ms: u64,
    files_checked: usize,
}

async fn gather(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    groups: &Groups<'_>,
    dir: Option<&Path>,
    deadline: Instant,
) -> ToolResult<Gathered> {
    let mut g = Gathered {
        all: Vec::new(),
        settled: true,
        waited_ms: 0,
        files_checked: 0,
    };
    for (lang, files) in groups {
        let server = pool.get(lang).await?;
        let texts = server.sync(files).await?;
        g.files_checked += files.len();
        let pairs: Vec<(PathBuf, Arc<Lines>)> = files.iter().cloned().zip(texts).collect();
        let left = deadline.saturating_duration_since(Instant::now());
        let got = diagnostics::collect(&server, &pairs, left).await;
        g.settled &= got.settled;
        g.waited_ms += got.waited_ms;
        let mut seen: Vec<PathBuf> = Vec::new();
        for (path, lines, items) in &got.by_file {
            seen.push(path.clone());
            for d in items {
                g.all
                    .push(diagnostic_entry(policy, path, lines, d, server.encoding));
            }
        }
        // Under a directory, also what the server pushed for files nobody opened.
        let Some(dir) = dir else { continue };
        for (path, items) in diagnostics::pushed_under(&server, dir) {
            if seen.contains(&path) || !policy.allows(&path, Access::Read) {
                continue;
            }
            if let Some(lines) = server.text_of(&path).await {
                for d in &items {
                    g.all
                        .push(diagnostic_entry(policy, &path, &lines, d, server.encoding));
                }
            }
        }
    }
    Ok(g)
}

pub async fn diagnostics(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let (r, is_dir) = diagnostics_target(policy, path)?;
    let deadline = Instant::now() + p.wait();
    let (groups, files_truncated) = if is_dir {
        directory_files(pool, policy, &r.abs)
    } else {
        let lang = language_for(pool, &r.abs, &r.rel)?;
        (vec![(lang, vec![r.abs.clone()])], false)
    };
    let dir = is_dir.then_some(r.abs.as_path());
    let mut g = gather(pool, policy, &groups, dir, deadline).await?;
    let severity = p.severity.map(|s| s.as_str());
    g.all.retain(|d| passes(severity, &d.severity));
    g.all
        .sort_by(|a, b| (&a.path, a.line, a.character).cmp(&(&b.path, b.line, b.character)));
    let (shown, pg) = page(g.all, p, 100);
    let mut text: Vec<String> = shown
        .iter()
        .map(|d| {
            format!(
                "{}:{}:{}: {}: {}{}",
                d.path,
                d.line,
                d.character,
                d.severity,
                d.message,
                d.code
                    .as_ref()
                    .map(|c| format!(" [{c}]"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if pg.total == 0 {
        text.push(format!(
            "no diagnostics in {} ({} files)",
            r.rel, g.files_checked
        ));
    }
    let mut result = LspResult {
        path: Some(r.rel),
        diagnostics: Some(shown),
        files_checked: Some(g.files_checked),
        settled: Some(g.settled),
        waited_ms: Some(g.waited_ms),
        ..LspResult::new(p.action)
    };
    pg.mark(&mut result, &mut text);
    if files_truncated {
        result.files_truncated = Some(true);
        text.push(format!(
            "only the first {MAX_DIR_FILES} files were checked; narrow `path`"
        ));
    }
    if !g.settled {
        result.note = Some(
            "returned before the language server went quiet: results may be incomplete; call again or raise wait_ms".into(),
        );
        text.push("note: the language server was still working when this returned; results may be incomplete".into());
    }
    Ok((result, text.join("\n")))
}

/// Turn Location / Location[] / LocationLink[] into caller-facing entries.
pub async fn locations(server: &Server, policy: &PathPolicy, result: &Value) -> Vec<Location> {
    let items: Vec<Value> = match result {
        Value::Null => Vec::new(),
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    let mut texts: HashMap<PathBuf, Option<Arc<Lines>>> = HashMap::new();
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for item in items {
        let (uri, range) = if let Some(u) = item["targetUri"].as_str() {
            let range = if item["targetSelectionRange"].is_object() {
                &item["targetSelectionRange"]
            } else {
                &item["targetRange"]
            };
            (u, range)
        } else {
            (item["uri"].as_str().unwrap_or(""), &item["range"])
        };
        let Some(path) = uri_to_path(uri) else {
            continue;
        };
        let (line, units) = lsp_position(&range["start"]);
        if !seen.insert((path.clone(), line, units)) {
            continue;
        }
        if !policy.allows(&path, Access::Read) {
            out.push(Location {
                path: policy.display(&path),
                line: line + 1,
                character: None,
                preview: None,
                outside_cage: Some(true),
            });
            continue;
        }
        if !texts.contains_key(&path) {
            let t = server.text_of(&path).await;
            texts.insert(path.clone(), t);
        }
        let (character, preview) = match texts.get(&path).cloned().flatten() {
            Some(l) => (l.to_chars(line, units, server.encoding).1, l.preview(line)),
            None => (units, String::new()),
        };
        out.push(Location {
            path: policy.display(&path),
            line: line + 1,
            character: Some(character),
            preview: Some(preview),
            outside_cage: None,
        });
    }
    out.sort_by(|a, b| (&a.path, a.line, a.character).cmp(&(&b.path, b.line, b.character)));
    out
}

fn location_text(entries: &[Location]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            if e.outside_cage == Some(true) {
                format!("{}:{} (outside your mounts)", e.path, e.line)
            } else {
                format!(
                    "{}:{}:{}: {}",
                    e.path,
                    e.line,
                    e.character.unwrap_or(0),
                    e.preview.as_deref().unwrap_or("")
                )
            }
        })
        .collect()
}

/// A request at the position the caller named.
async fn at_position(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<(Opened, Value, (usize, usize))> {
    let path = need(&p.path, "path", "required")?;
    let o = open(pool, policy, path).await?;
    let (line, ch) = position(&o.lines, p, p.action)?;
    let units = o.lines.to_units(line, ch, o.server.encoding);
    let tdp = json!({"textDocument": {"uri": path_to_uri(&o.abs)},
        "position": {"line": line, "character": units}});
    Ok((o, tdp, (line, ch)))
}

/// Send `method` to the server; an RPC failure becomes the tool error for it.
async fn ask(pool: &Pool, server: &Arc<Server>, method: &str, params: Value) -> ToolResult<Value> {
    match server.request(method, params).await {
        Ok(v) => Ok(v),
        Err(e) => Err(rpc_error(pool, server, method, e).await),
    }
}

pub async fn goto(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let (method, cap, what) = match p.action {
        Action::TypeDefinition => (
            "textDocument/typeDefinition",
            "typeDefinitionProvider",
            "type definitions",
        ),
        Action::Implementation => (
            "textDocument/implementation",
            "implementationProvider",
            "implementations",
        ),
        _ => (
            "textDocument/definition",
            "definitionProvider",
            "definitions",
        ),
    };
    let (o, tdp, (line, ch)) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, cap, p.action)?;
    let answer = ask(pool, &o.server, method, tdp).await?;
    let entries = locations(&o.server, policy, &answer).await;
    let mut text = location_text(&entries);
    if text.is_empty() {
        text.push(format!("no {what} found at {}:{}:{}", o.rel, line + 1, ch));
    }
    let mut result = LspResult {
        count: Some(entries.len()),
        ..LspResult::new(p.action)
    };
    match p.action {
        Action::TypeDefinition => result.type_definitions = Some(entries),
        Action::Implementation => result.implementations = Some(entries),
        _ => result.definitions = Some(entries),
    }
    Ok((result, text.join("\n")))
}

fn unsupported_unless(server: &Server, cap: &str, action: Action) -> ToolResult<()> {
    if server.has(cap) {
        Ok(())
    } else {
        Err(ToolError::new(
            ErrorCode::UnsupportedByAdapter,
            format!(
                "the {} language server does not support `{}` ({cap})",
                server.lang.name,
                action.as_str()
            ),
        )
        .with_detail(json!({"capability": cap, "language": server.lang.name})))
    }
}

pub async fn references(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let (o, mut tdp, _) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, "referencesProvider", p.action)?;
    tdp["context"] = json!({"includeDeclaration": p.include_declaration.unwrap_or(false)});
    let answer = ask(pool, &o.server, "textDocument/references", tdp).await?;
    let all = locations(&o.server, policy, &answer).await;
    let (shown, pg) = page(all, p, 100);
    let mut text = location_text(&shown);
    let mut result = LspResult {
        references: Some(shown),
        ..LspResult::new(p.action)
    };
    pg.mark(&mut result, &mut text);
    if pg.total == 0 {
        text.push("no references found".into());
    }
    Ok((result, text.join("\n")))
}

fn hover_text(contents: &Value) -> String {
    match contents {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(hover_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        Value::Object(o) => match (o.get("kind"), o.get("language"), o.get("value")) {
            (Some(_), _, Some(Value::String(v))) => v.clone(),
            (None, Some(Value::String(lang)), Some(Value::String(v))) => {
                format!("```{lang}\n{v}\n```")
            }
            (_, _, Some(Value::String(v))) => v.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// An LSP range in caller coordinates (1-based lines, characters).
fn caller_range(lines: &Lines, r: &Value, enc: Encoding) -> Range {
    let point = |v: &Value| {
        let (line, units) = lsp_position(v);
        Position {
            line: line + 1,
            character: lines.to_chars(line, units, enc).1,
        }
    };
    Range {
        start: point(&r["start"]),
        end: point(&r["end"]),
    }
}

pub async fn hover(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let (o, tdp, (line, ch)) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, "hoverProvider", p.action)?;
    let answer = ask(pool, &o.server, "textDocument/hover", tdp).await?;
    if answer.is_null() {
        let result = LspResult {
            found: Some(false),
            content: Some(None),
            ..LspResult::new(p.action)
        };
        return Ok((
            result,
            format!("nothing to show at {}:{}:{}", o.rel, line + 1, ch),
        ));
    }
    let full = hover_text(&answer["contents"]);
    let (content, truncated) = if full.chars().count() > MAX_HOVER_CHARS {
        let cut: String = full.chars().take(MAX_HOVER_CHARS).collect();
        (format!("{cut}… [truncated]"), true)
    } else {
        (full, false)
    };
    let range = answer
        .get("range")
        .filter(|r| r.is_object())
        .map(|r| caller_range(&o.lines, r, o.server.encoding));
    let result = LspResult {
        found: Some(true),
        content: Some(Some(content.clone())),
        truncated: truncated.then_some(true),
        range,
        ..LspResult::new(p.action)
    };
    Ok((result, content))
}

pub fn symbol_kind(k: &Value) -> &'static str {
    const KINDS: [&str; 26] = [
        "file",
        "module",
        "namespace",
        "package",
        "class",
        "method",
        "property",
        "field",
        "constructor",
        "enum",
        "interface",
        "function",
        "variable",
        "constant",
        "string",
        "number",
        "boolean",
        "array",
        "object",
        "key",
        "null",
        "enum_member",
        "struct",
        "event",
        "operator",
        "type_parameter",
    ];
    k.as_u64()
        .and_then(|i| KINDS.get((i as usize).wrapping_sub(1)))
        .copied()
        .unwrap_or("unknown")
}

/// Flatten hierarchical DocumentSymbols (or pass SymbolInformation through).
fn flatten_symbols(
    items: &[Value],
    container: Option<&str>,
    out: &mut Vec<(Value, Option<String>)>,
) {
    for s in items {
        out.push((
            s.clone(),
            container
                .map(str::to_string)
                .or_else(|| s["containerName"].as_str().map(str::to_string)),
        ));
        if let Some(children) = s["children"].as_array() {
            let name = s["name"].as_str().unwrap_or("");
            let inner = match container {
                Some(c) => format!("{c}.{name}"),
                None => name.to_string(),
            };
            flatten_symbols(children, Some(&inner), out);
        }
    }
}

/// The server's symbols answer: its raw list, and for a document outline the document
/// (its symbols carry ranges, not locations).
struct SymbolAnswer {
    server: Arc<Server>,
    answer: Value,
    doc: Option<(PathBuf, Arc<Lines>)>,
}

async fn workspace_symbols(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<SymbolAnswer> {
    let server = server_of(pool, policy, p).await?;
    server.sync(&[]).await?;
    unsupported_unless(&server, "workspaceSymbolProvider", p.action)?;
    let q = p.query.clone().unwrap_or_default();
    let answer = ask(pool, &server, "workspace/symbol", json!({"query": q})).await?;
    Ok(SymbolAnswer {
        server,
        answer,
        doc: None,
    })
}

async fn document_symbols(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<SymbolAnswer> {
    let path = need(&p.path, "path", "required")?;
    let o = open(pool, policy, path).await?;
    unsupported_unless(&o.server, "documentSymbolProvider", p.action)?;
    let params = json!({"textDocument": {"uri": path_to_uri(&o.abs)}});
    let answer = ask(pool, &o.server, "textDocument/documentSymbol", params).await?;
    Ok(SymbolAnswer {
        server: o.server,
        answer,
        doc: Some((o.abs, o.lines)),
    })
}

/// The symbols of an answer as caller-facing entries; a document outline is filtered by
/// `query` (a workspace search already was, by the server).
async fn symbol_entries(policy: &PathPolicy, a: &SymbolAnswer, query: Option<&str>) -> Vec<Symbol> {
    let mut flat = Vec::new();
    flatten_symbols(
        a.answer.as_array().map(Vec::as_slice).unwrap_or(&[]),
        None,
        &mut flat,
    );
    let query = query.filter(|_| a.doc.is_some()).map(str::to_lowercase);
    let mut texts: HashMap<PathBuf, Option<Arc<Lines>>> = HashMap::new();
    let mut all = Vec::new();
    for (s, container) in flat {
        let name = s["name"].as_str().unwrap_or("").to_string();
        if let Some(q) = &query
            && !name.to_lowercase().contains(q)
        {
            continue;
        }
        let (path, range) = if s["location"].is_object() {
            let Some(path) = s["location"]["uri"].as_str().and_then(uri_to_path) else {
                continue;
            };
            (path, &s["location"]["range"])
        } else {
            let Some((path, _)) = &a.doc else { continue };
            let range = if s["selectionRange"].is_object() {
                &s["selectionRange"]
            } else {
                &s["range"]
            };
            (path.clone(), range)
        };
        let (line, units) = lsp_position(&range["start"]);
        let mut entry = Symbol {
            name,
            kind: symbol_kind(&s["kind"]).to_string(),
            path: policy.display(&path),
            line: line + 1,
            container: container.filter(|c| !c.is_empty()),
            character: None,
            outside_cage: None,
        };
        if !policy.allows(&path, Access::Read) {
            entry.outside_cage = Some(true);
        } else {
            if !texts.contains_key(&path) {
                let t = match &a.doc {
                    Some((dp, l)) if *dp == path => Some(l.clone()),
                    _ => a.server.text_of(&path).await,
                };
                texts.insert(path.clone(), t);
            }
            entry.character = Some(match texts.get(&path).cloned().flatten() {
                Some(l) => l.to_chars(line, units, a.server.encoding).1,
                None => units,
            });
        }
        all.push(entry);
    }
    all
}

pub async fn symbols(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let answer = if p.scope == Some(Scope::Workspace) {
        workspace_symbols(pool, policy, p).await?
    } else {
        document_symbols(pool, policy, p).await?
    };
    let all = symbol_entries(policy, &answer, p.query.as_deref()).await;
    let (shown, pg) = page(all, p, 50);
    let mut text: Vec<String> = shown
        .iter()
        .map(|s| {
            format!(
                "{} {}{} — {}:{}",
                s.kind,
                s.container
                    .as_ref()
                    .map(|c| format!("{c}."))
                    .unwrap_or_default(),
                s.name,
                s.path,
                s.line
            )
        })
        .collect();
    let mut result = LspResult {
        symbols: Some(shown),
        ..LspResult::new(p.action)
    };
    pg.mark(&mut result, &mut text);
    if pg.total == 0 {
        text.push("no symbols found".into());
    }
    Ok((result, text.join("\n")))
}

/// Edits of a WorkspaceEdit as caller-facing `{path, line, character, end_line,
/// end_character, old, new}` entries.
pub async fn edit_entries(server: &Server, policy: &PathPolicy, edit: &Value) -> Vec<Edit> {
    let Ok(files) = crate::edits::files_of(edit) else {
        return Vec::new();
    };
    let enc = server.encoding;
    let mut out = Vec::new();
    for (path, edits) in files {
        let lines = server.text_of(&path).await;
        for e in edits {
            let (old, sc, ec) = match &lines {
                Some(l) => {
                    let a = l.offset(e.start.0, e.start.1, enc);
                    let b = l.offset(e.end.0, e.end.1, enc);
                    let old = l.text.get(a.min(b)..a.max(b)).unwrap_or("").to_string();
                    (
                        old,
                        l.to_chars(e.start.0, e.start.1, enc).1,
                        l.to_chars(e.end.0, e.end.1, enc).1,
                    )
                }
                None => (String::new(), e.start.1, e.end.1),
            };
            out.push(Edit {
                path: policy.display(&path),
                line: e.start.0 + 1,
                character: sc,
                end_line: e.end.0 + 1,
                end_character: ec,
                old,
                new: e.new_text,
            });
        }
    }
    out
}

/// The span code actions are asked for, in server units: the position, or the whole line
/// when neither `character` nor `symbol` was given.
fn action_span(o: &Opened, p: &LspParams, line: usize, ch: usize) -> (usize, usize) {
    let enc = o.server.encoding;
    if p.character.is_none() && p.symbol.is_none() {
        let width = o.lines.line(line).map(|l| l.chars().count()).unwrap_or(0);
        (
            o.lines.to_units(line, 0, enc),
            o.lines.to_units(line, width, enc),
        )
    } else {
        let at = o.lines.to_units(line, ch, enc);
        (at, at)
    }
}

/// The server's diagnostics touching `line`, to send with a code action request.
async fn line_diagnostics(o: &Opened, line: usize) -> Vec<Value> {
    let got = diagnostics::collect(
        &o.server,
        &[(o.abs.clone(), o.lines.clone())],
        std::time::Duration::from_secs(10),
    )
    .await;
    got.by_file
        .into_iter()
        .flat_map(|(_, _, items)| items)
        .filter(|d| {
            let sl = d["range"]["start"]["line"].as_u64().unwrap_or(0) as usize;
            let el = d["range"]["end"]["line"].as_u64().unwrap_or(0) as usize;
            sl <= line && line <= el
        })
        .collect()
}

/// One entry of a codeAction answer: a bare Command (a string `command`), or a CodeAction
/// with its edits — resolved first when the server left them out and can resolve.
async fn code_action_entry(o: &Opened, policy: &PathPolicy, a: Value, resolve: bool) -> CodeAction {
    let title = |a: &Value| a["title"].as_str().unwrap_or("").to_string();
    if let Some(command) = a["command"].as_str() {
        return CodeAction {
            title: title(&a),
            kind: None,
            preferred: None,
            edits: Vec::new(),
            command: Some(command.to_string()),
        };
    }
    let mut a = a;
    if a.get("edit").is_none()
        && resolve
        && let Ok(resolved) = o.server.request("codeAction/resolve", a.clone()).await
    {
        a = resolved;
    }
    let edits = match a.get("edit") {
        Some(e) => edit_entries(&o.server, policy, e).await,
        None => Vec::new(),
    };
    CodeAction {
        title: title(&a),
        kind: Some(a["kind"].as_str().map(str::to_string)),
        preferred: Some(a["isPreferred"].as_bool().unwrap_or(false)),
        edits,
        command: a["command"]["command"].as_str().map(str::to_string),
    }
}

pub async fn code_actions(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let o = open(pool, policy, path).await?;
    unsupported_unless(&o.server, "codeActionProvider", p.action)?;
    let (line, ch) = position(&o.lines, p, Action::CodeActions)?;
    let (start, end) = action_span(&o, p, line, ch);
    let context_diags = if p.include_diagnostics.unwrap_or(true) {
        line_diagnostics(&o, line).await
    } else {
        Vec::new()
    };
    let params = json!({
        "textDocument": {"uri": path_to_uri(&o.abs)},
        "range": {"start": {"line": line, "character": start}, "end": {"line": line, "character": end}},
        "context": {"diagnostics": context_diags, "triggerKind": 1},
    });
    let answer = ask(pool, &o.server, "textDocument/codeAction", params).await?;
    let resolvable =
        o.server.capabilities["codeActionProvider"]["resolveProvider"].as_bool() == Some(true);
    let mut actions = Vec::new();
    for (i, a) in answer
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        actions.push(code_action_entry(&o, policy, a, resolvable && i < 20).await);
    }
    let text = if actions.is_empty() {
        format!("no code actions at {}:{}", o.rel, line + 1)
    } else {
        actions
            .iter()
            .map(|a| {
                format!(
                    "{}{} ({} edits)",
                    a.title,
                    if a.preferred == Some(true) {
                        " [preferred]"
                    } else {
                        ""
                    },
                    a.edits.len()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let result = LspResult {
        count: Some(actions.len()),
        actions: Some(actions),
        ..LspResult::new(p.action)
    };
    Ok((result, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hover_contents_in_every_shape() {
        assert_eq!(hover_text(&json!("plain")), "plain");
        assert_eq!(
            hover_text(&json!({"kind": "markdown", "value": "**x**"})),
            "**x**"
        );
        assert_eq!(
            hover_text(&json!([{"language": "python", "value": "def f()"}, "doc"])),
            "```python\ndef f()\n```\n\ndoc"
        );
        assert_eq!(hover_text(&Value::Null), "");
    }

    #[test]
    fn symbol_kinds_and_flattening() {
        assert_eq!(symbol_kind(&json!(12)), "function");
        assert_eq!(symbol_kind(&json!(5)), "class");
        assert_eq!(symbol_kind(&json!(0)), "unknown");
        assert_eq!(symbol_kind(&json!(99)), "unknown");
        let tree = json!([{"name": "A", "kind": 5, "children": [{"name": "m", "kind": 6, "children": [{"name": "x", "kind": 13}]}]}]);
        let mut out = Vec::new();
        flatten_symbols(
            tree.as_array().map(Vec::as_slice).unwrap_or(&[]),
            None,
            &mut out,
        );
        let names: Vec<(String, Option<String>)> = out
            .iter()
            .map(|(s, c)| (s["name"].as_str().unwrap_or("").to_string(), c.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("A".to_string(), None),
                ("m".to_string(), Some("A".to_string())),
                ("x".to_string(), Some("A.m".to_string()))
            ]
        );
    }
}
