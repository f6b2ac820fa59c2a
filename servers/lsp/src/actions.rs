//! The read actions of `code_lsp`: each sends its LSP request and turns the answer into
//! root-relative paths, 1-based lines, character columns and previews.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kitbag_shared::{Access, ErrorCode, PathPolicy, ToolError, ToolResult};
use serde_json::{Value, json};

use crate::diagnostics::{self, code_string, passes, severity_name};
use crate::pool::{Pool, Server};
use crate::text::{Lines, path_to_uri, uri_to_path};
use crate::tool::{
    Action, LspParams, Scope, Severity, language_for, language_named, need, open, page, position,
    rpc_error, wait,
};

pub type Answer = (Value, String);

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
    Ok((json!({"servers": servers}), text))
}

/// The language of a call: from `language`, else from `path`.
fn language_of<'a>(
    pool: &'a Pool,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<&'a crate::config::LanguageConfig> {
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

pub async fn reload(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let lang = language_of(pool, policy, p)?;
    let server = pool.reload(lang).await?;
    Ok((
        json!({"language": lang.name, "pid": server.pid, "state": "running"}),
        format!(
            "restarted the {} language server (pid {})",
            lang.name, server.pid
        ),
    ))
}

pub async fn capabilities(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let lang = language_of(pool, policy, p)?;
    let server = pool.get(lang).await?;
    let c = &server.capabilities;
    let has = |k: &str| server.has(k);
    let prepare_rename = c["renameProvider"]["prepareProvider"].as_bool() == Some(true);
    let supports = json!({
        "diagnostics_pull": has("diagnosticProvider"),
        "definition": has("definitionProvider"),
        "type_definition": has("typeDefinitionProvider"),
        "implementation": has("implementationProvider"),
        "references": has("referencesProvider"),
        "hover": has("hoverProvider"),
        "document_symbols": has("documentSymbolProvider"),
        "workspace_symbols": has("workspaceSymbolProvider"),
        "rename": has("renameProvider"),
        "prepare_rename": prepare_rename,
        "code_actions": has("codeActionProvider"),
    });
    let list: Vec<&str> = supports
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.as_str())
                .collect()
        })
        .unwrap_or_default();
    Ok((
        json!({"language": lang.name, "command": lang.command, "server_info": server.server_info,
            "position_encoding": server.encoding.as_str(), "supports": supports,
            "capabilities": server.capabilities}),
        format!(
            "{} ({}) supports: {}; positions in {}",
            lang.name,
            server.server_info["name"]
                .as_str()
                .unwrap_or(&lang.command[0]),
            list.join(", "),
            server.encoding.as_str()
        ),
    ))
}

pub async fn raw_request(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let method = need(&p.method, "method", "required")?;
    let server = match &p.path {
        Some(path) => open(pool, policy, path).await?.server,
        None => pool.get(language_of(pool, policy, p)?).await?,
    };
    server.sync(&[]).await?;
    let params = p.params.clone().unwrap_or(Value::Null);
    let result = server.request(method, params).await.map_err(raw_error)?;
    let text = result.to_string();
    if text.len() > MAX_RAW_BYTES {
        let (cut, _) = kitbag_shared::limits::truncate_str(&text, MAX_RAW_BYTES);
        return Ok((
            json!({"method": method, "truncated": true, "result_text": cut}),
            format!("{cut}… [truncated at {MAX_RAW_BYTES} bytes]"),
        ));
    }
    Ok((json!({"method": method, "result": result}), text))
}

fn raw_error(e: crate::rpc::RpcError) -> ToolError {
    // Raw requests do not kill the server on timeout: the method may simply be slow.
    ToolError::new(
        match e {
            crate::rpc::RpcError::Timeout => kitbag_shared::ErrorCode::Timeout,
            crate::rpc::RpcError::Closed => kitbag_shared::ErrorCode::LspServerUnavailable,
            crate::rpc::RpcError::Server { code: -32601, .. } => {
                kitbag_shared::ErrorCode::UnsupportedByAdapter
            }
            crate::rpc::RpcError::Server { .. } => kitbag_shared::ErrorCode::InvalidParams,
        },
        format!("request failed: {e}"),
    )
}

/// One diagnostic in caller coordinates.
fn diagnostic_json(
    policy: &PathPolicy,
    path: &Path,
    lines: &Lines,
    d: &Value,
    enc: crate::text::Encoding,
) -> Value {
    let sl = d["range"]["start"]["line"].as_u64().unwrap_or(0) as usize;
    let sc = d["range"]["start"]["character"].as_u64().unwrap_or(0) as usize;
    let el = d["range"]["end"]["line"].as_u64().unwrap_or(sl as u64) as usize;
    let ec = d["range"]["end"]["character"].as_u64().unwrap_or(sc as u64) as usize;
    let (_, sch) = lines.to_chars(sl, sc, enc);
    let (_, ech) = lines.to_chars(el, ec, enc);
    let mut v = json!({
        "path": policy.display(path),
        "line": sl + 1,
        "character": sch,
        "end_line": el + 1,
        "end_character": ech,
        "severity": severity_name(&d["severity"]),
        "message": d["message"].as_str().unwrap_or(""),
    });
    if let Some(code) = code_string(&d["code"]) {
        v["code"] = json!(code);
    }
    if let Some(src) = d["source"].as_str() {
        v["source"] = json!(src);
    }
    v
}

pub async fn diagnostics(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let r = policy.resolve(path, "path", Access::Read)?;
    // What the path is, asked of a descriptor opened beneath the root (issue #22 §1).
    let (r, is_dir) = match policy.open_file(path, "path", Access::Read) {
        Ok((r, f)) => {
            let dir = f
                .metadata()
                .map_err(|e| ToolError::io(&r.rel, &e))?
                .is_dir();
            (r, dir)
        }
        Err(e) if e.code == ErrorCode::FileNotFound || e.code == ErrorCode::NotADirectory => {
            return Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("path: `{}` does not exist", r.rel),
            ));
        }
        Err(e) => return Err(e),
    };
    let budget = wait(p);
    let deadline = std::time::Instant::now() + budget;
    let severity = p.severity.map(|s| match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Information => "information",
        Severity::Hint => "hint",
        Severity::All => "all",
    });
    // Files per language.
    let mut groups: Vec<(&crate::config::LanguageConfig, Vec<PathBuf>)> = Vec::new();
    let mut files_truncated = false;
    if is_dir {
        let mut files = Vec::new();
        for entry in ignore::WalkBuilder::new(&r.abs).build().flatten() {
            // The walk goes by path: each file it found is opened again beneath the root,
            // so a walk led outside by a directory swapped for a link names nothing there.
            if entry.file_type().is_some_and(|t| t.is_file())
                && pool.config.for_path(entry.path()).is_some()
                && policy.open_real_read(entry.path()).is_ok()
            {
                if files.len() == MAX_DIR_FILES {
                    files_truncated = true;
                    break;
                }
                files.push(entry.into_path());
            }
        }
        files.sort();
        for f in files {
            let Some(lang) = pool.config.for_path(&f) else {
                continue;
            };
            match groups.iter_mut().find(|(l, _)| l.name == lang.name) {
                Some((_, v)) => v.push(f),
                None => groups.push((lang, vec![f])),
            }
        }
    } else {
        groups.push((language_for(pool, &r.abs, &r.rel)?, vec![r.abs.clone()]));
    }
    let mut all: Vec<Value> = Vec::new();
    let mut settled = true;
    let mut waited_ms = 0;
    let mut files_checked = 0;
    for (lang, files) in &groups {
        let server = pool.get(lang).await?;
        let texts = server.sync(files).await?;
        files_checked += files.len();
        let pairs: Vec<(PathBuf, Arc<Lines>)> = files.iter().cloned().zip(texts).collect();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let got = diagnostics::collect(&server, &pairs, left).await;
        settled &= got.settled;
        waited_ms += got.waited_ms;
        let mut seen: Vec<PathBuf> = Vec::new();
        for (path, lines, items) in &got.by_file {
            seen.push(path.clone());
            for d in items {
                all.push(diagnostic_json(policy, path, lines, d, server.encoding));
            }
        }
        if is_dir {
            for (path, items) in diagnostics::pushed_under(&server, &r.abs) {
                if seen.contains(&path) || !policy.allows(&path, Access::Read) {
                    continue;
                }
                if let Some(lines) = server.text_of(&path).await {
                    for d in &items {
                        all.push(diagnostic_json(policy, &path, &lines, d, server.encoding));
                    }
                }
            }
        }
    }
    all.retain(|d| passes(severity, d["severity"].as_str().unwrap_or("")));
    all.sort_by(|a, b| {
        (
            a["path"].as_str(),
            a["line"].as_u64(),
            a["character"].as_u64(),
        )
            .cmp(&(
                b["path"].as_str(),
                b["line"].as_u64(),
                b["character"].as_u64(),
            ))
    });
    let (shown, pg) = page(all, p, 100);
    let total = pg.total;
    let mut text: Vec<String> = shown
        .iter()
        .map(|d| {
            format!(
                "{}:{}:{}: {}: {}{}",
                d["path"].as_str().unwrap_or(""),
                d["line"],
                d["character"],
                d["severity"].as_str().unwrap_or(""),
                d["message"].as_str().unwrap_or(""),
                d["code"]
                    .as_str()
                    .map(|c| format!(" [{c}]"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if total == 0 {
        text.push(format!(
            "no diagnostics in {} ({files_checked} files)",
            r.rel
        ));
    }
    let mut data = json!({
        "path": r.rel,
        "diagnostics": shown,
        "count": total,
        "files_checked": files_checked,
        "settled": settled,
        "waited_ms": waited_ms,
    });
    pg.mark(&mut data, &mut text);
    if files_truncated {
        data["files_truncated"] = json!(true);
        text.push(format!(
            "only the first {MAX_DIR_FILES} files were checked; narrow `path`"
        ));
    }
    if !settled {
        data["note"] = json!(
            "returned before the language server went quiet: results may be incomplete; call again or raise wait_ms"
        );
        text.push("note: the language server was still working when this returned; results may be incomplete".into());
    }
    Ok((data, text.join("\n")))
}

/// Turn Location / Location[] / LocationLink[] into caller-facing entries.
pub async fn locations(server: &Server, policy: &PathPolicy, result: &Value) -> Vec<Value> {
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
            (u.to_string(), range.clone())
        } else {
            (
                item["uri"].as_str().unwrap_or("").to_string(),
                item["range"].clone(),
            )
        };
        let Some(path) = uri_to_path(&uri) else {
            continue;
        };
        let line = range["start"]["line"].as_u64().unwrap_or(0) as usize;
        let units = range["start"]["character"].as_u64().unwrap_or(0) as usize;
        if !seen.insert((path.clone(), line, units)) {
            continue;
        }
        if !policy.allows(&path, Access::Read) {
            out.push(
                json!({"path": policy.display(&path), "line": line + 1, "outside_cage": true}),
            );
            continue;
        }
        if !texts.contains_key(&path) {
            let t = server.text_of(&path).await;
            texts.insert(path.clone(), t);
        }
        let lines = texts.get(&path).cloned().flatten();
        let (character, preview) = match &lines {
            Some(l) => (l.to_chars(line, units, server.encoding).1, l.preview(line)),
            None => (units, String::new()),
        };
        out.push(json!({"path": policy.display(&path), "line": line + 1,
            "character": character, "preview": preview}));
    }
    out.sort_by(|a, b| {
        (
            a["path"].as_str(),
            a["line"].as_u64(),
            a["character"].as_u64(),
        )
            .cmp(&(
                b["path"].as_str(),
                b["line"].as_u64(),
                b["character"].as_u64(),
            ))
    });
    out
}

fn location_text(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            if e["outside_cage"] == true {
                format!(
                    "{}:{} (outside your mounts)",
                    e["path"].as_str().unwrap_or(""),
                    e["line"]
                )
            } else {
                format!(
                    "{}:{}:{}: {}",
                    e["path"].as_str().unwrap_or(""),
                    e["line"],
                    e["character"],
                    e["preview"].as_str().unwrap_or("")
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
) -> ToolResult<(crate::tool::Opened, Value, (usize, usize))> {
    let path = need(&p.path, "path", "required")?;
    let o = open(pool, policy, path).await?;
    let (line, ch) = position(&o.lines, p, p.action)?;
    let units = o.lines.to_units(line, ch, o.server.encoding);
    let tdp = json!({"textDocument": {"uri": path_to_uri(&o.abs)},
        "position": {"line": line, "character": units}});
    Ok((o, tdp, (line, ch)))
}

pub async fn goto(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let (method, cap, key) = match p.action {
        Action::TypeDefinition => (
            "textDocument/typeDefinition",
            "typeDefinitionProvider",
            "type_definitions",
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
    let result = match o.server.request(method, tdp).await {
        Ok(v) => v,
        Err(e) => return Err(rpc_error(pool, &o.server, method, e).await),
    };
    let entries = locations(&o.server, policy, &result).await;
    let mut text = location_text(&entries);
    if text.is_empty() {
        text.push(format!(
            "no {} found at {}:{}:{}",
            key.replace('_', " "),
            o.rel,
            line + 1,
            ch
        ));
    }
    Ok((
        json!({key: entries, "count": entries.len()}),
        text.join("\n"),
    ))
}

fn unsupported_unless(server: &Server, cap: &str, action: Action) -> ToolResult<()> {
    if server.has(cap) {
        Ok(())
    } else {
        Err(ToolError::new(
            kitbag_shared::ErrorCode::UnsupportedByAdapter,
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
    let result = match o.server.request("textDocument/references", tdp).await {
        Ok(v) => v,
        Err(e) => return Err(rpc_error(pool, &o.server, "textDocument/references", e).await),
    };
    let all = locations(&o.server, policy, &result).await;
    let (shown, pg) = page(all, p, 100);
    let mut text = location_text(&shown);
    let mut data = json!({"references": shown, "count": pg.total});
    pg.mark(&mut data, &mut text);
    if pg.total == 0 {
        text.push("no references found".into());
    }
    Ok((data, text.join("\n")))
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

pub async fn hover(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let (o, tdp, (line, ch)) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, "hoverProvider", p.action)?;
    let result = match o.server.request("textDocument/hover", tdp).await {
        Ok(v) => v,
        Err(e) => return Err(rpc_error(pool, &o.server, "textDocument/hover", e).await),
    };
    if result.is_null() {
        return Ok((
            json!({"found": false, "content": null}),
            format!("nothing to show at {}:{}:{}", o.rel, line + 1, ch),
        ));
    }
    let full = hover_text(&result["contents"]);
    let (content, truncated) = if full.chars().count() > MAX_HOVER_CHARS {
        let cut: String = full.chars().take(MAX_HOVER_CHARS).collect();
        (format!("{cut}… [truncated]"), true)
    } else {
        (full, false)
    };
    let mut data = json!({"found": true, "content": content});
    if truncated {
        data["truncated"] = json!(true);
    }
    if let Some(r) = result.get("range").filter(|r| r.is_object()) {
        let sl = r["start"]["line"].as_u64().unwrap_or(0) as usize;
        let el = r["end"]["line"].as_u64().unwrap_or(0) as usize;
        let (_, sc) = o.lines.to_chars(
            sl,
            r["start"]["character"].as_u64().unwrap_or(0) as usize,
            o.server.encoding,
        );
        let (_, ec) = o.lines.to_chars(
            el,
            r["end"]["character"].as_u64().unwrap_or(0) as usize,
            o.server.encoding,
        );
        data["range"] = json!({"start": {"line": sl + 1, "character": sc}, "end": {"line": el + 1, "character": ec}});
    }
    let text = data["content"].as_str().unwrap_or("").to_string();
    Ok((data, text))
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

pub async fn symbols(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let workspace = p.scope == Some(Scope::Workspace);
    let (server, result, doc) = if workspace {
        let server = match &p.path {
            Some(path) => open(pool, policy, path).await?.server,
            None => pool.get(language_of(pool, policy, p)?).await?,
        };
        server.sync(&[]).await?;
        unsupported_unless(&server, "workspaceSymbolProvider", p.action)?;
        let q = p.query.clone().unwrap_or_default();
        let result = match server
            .request("workspace/symbol", json!({"query": q}))
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(rpc_error(pool, &server, "workspace/symbol", e).await),
        };
        (server, result, None)
    } else {
        let path = need(&p.path, "path", "required")?;
        let o = open(pool, policy, path).await?;
        unsupported_unless(&o.server, "documentSymbolProvider", p.action)?;
        let result = match o
            .server
            .request(
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": path_to_uri(&o.abs)}}),
            )
            .await
        {
            Ok(v) => v,
            Err(e) => {
                return Err(rpc_error(pool, &o.server, "textDocument/documentSymbol", e).await);
            }
        };
        (
            o.server.clone(),
            result,
            Some((o.abs.clone(), o.lines.clone())),
        )
    };
    let mut flat = Vec::new();
    flatten_symbols(
        result.as_array().map(Vec::as_slice).unwrap_or(&[]),
        None,
        &mut flat,
    );
    let query = p.query.as_deref().map(str::to_lowercase);
    let mut texts: HashMap<PathBuf, Option<Arc<Lines>>> = HashMap::new();
    let mut all = Vec::new();
    for (s, container) in flat {
        let name = s["name"].as_str().unwrap_or("").to_string();
        if !workspace
            && let Some(q) = &query
            && !name.to_lowercase().contains(q)
        {
            continue;
        }
        let (path, range) = if s["location"].is_object() {
            let Some(path) = s["location"]["uri"].as_str().and_then(uri_to_path) else {
                continue;
            };
            (path, s["location"]["range"].clone())
        } else {
            let Some((path, _)) = &doc else { continue };
            let range = if s["selectionRange"].is_object() {
                s["selectionRange"].clone()
            } else {
                s["range"].clone()
            };
            (path.clone(), range)
        };
        let line = range["start"]["line"].as_u64().unwrap_or(0) as usize;
        let units = range["start"]["character"].as_u64().unwrap_or(0) as usize;
        let mut entry = json!({"name": name, "kind": symbol_kind(&s["kind"]), "path": policy.display(&path), "line": line + 1});
        if let Some(c) = container.filter(|c| !c.is_empty()) {
            entry["container"] = json!(c);
        }
        if !policy.allows(&path, Access::Read) {
            entry["outside_cage"] = json!(true);
        } else {
            if !texts.contains_key(&path) {
                let t = match &doc {
                    Some((dp, l)) if *dp == path => Some(l.clone()),
                    _ => server.text_of(&path).await,
                };
                texts.insert(path.clone(), t);
            }
            let ch = match texts.get(&path).cloned().flatten() {
                Some(l) => l.to_chars(line, units, server.encoding).1,
                None => units,
            };
            entry["character"] = json!(ch);
        }
        all.push(entry);
    }
    let (shown, pg) = page(all, p, 50);
    let mut text: Vec<String> = shown
        .iter()
        .map(|s| {
            format!(
                "{} {}{} — {}:{}",
                s["kind"].as_str().unwrap_or(""),
                s["container"]
                    .as_str()
                    .map(|c| format!("{c}."))
                    .unwrap_or_default(),
                s["name"].as_str().unwrap_or(""),
                s["path"].as_str().unwrap_or(""),
                s["line"]
            )
        })
        .collect();
    let mut data = json!({"symbols": shown, "count": pg.total});
    pg.mark(&mut data, &mut text);
    if pg.total == 0 {
        text.push("no symbols found".into());
    }
    Ok((data, text.join("\n")))
}

/// Edits of a WorkspaceEdit as caller-facing `{path, line, character, end_line,
/// end_character, old, new}` entries.
pub async fn edits_json(server: &Server, policy: &PathPolicy, edit: &Value) -> Vec<Value> {
    let Ok(files) = crate::edits::files_of(edit) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (path, edits) in files {
        let lines = server.text_of(&path).await;
        for e in edits {
            let (old, sc, ec) = match &lines {
                Some(l) => {
                    let a = l.offset(e.start.0, e.start.1, server.encoding);
                    let b = l.offset(e.end.0, e.end.1, server.encoding);
                    let old = l.text.get(a.min(b)..a.max(b)).unwrap_or("").to_string();
                    (
                        old,
                        l.to_chars(e.start.0, e.start.1, server.encoding).1,
                        l.to_chars(e.end.0, e.end.1, server.encoding).1,
                    )
                }
                None => (String::new(), e.start.1, e.end.1),
            };
            out.push(
                json!({"path": policy.display(&path), "line": e.start.0 + 1, "character": sc,
                "end_line": e.end.0 + 1, "end_character": ec, "old": old, "new": e.new_text}),
            );
        }
    }
    out
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
    let enc = o.server.encoding;
    let whole_line = p.character.is_none() && p.symbol.is_none();
    let start = o.lines.to_units(line, if whole_line { 0 } else { ch }, enc);
    let end = if whole_line {
        o.lines.to_units(
            line,
            o.lines.line(line).map(|l| l.chars().count()).unwrap_or(0),
            enc,
        )
    } else {
        start
    };
    let mut context_diags = Vec::new();
    if p.include_diagnostics.unwrap_or(true) {
        let got = diagnostics::collect(
            &o.server,
            &[(o.abs.clone(), o.lines.clone())],
            std::time::Duration::from_secs(10),
        )
        .await;
        for (_, _, items) in got.by_file {
            for d in items {
                let sl = d["range"]["start"]["line"].as_u64().unwrap_or(0) as usize;
                let el = d["range"]["end"]["line"].as_u64().unwrap_or(0) as usize;
                if sl <= line && line <= el {
                    context_diags.push(d);
                }
            }
        }
    }
    let params = json!({
        "textDocument": {"uri": path_to_uri(&o.abs)},
        "range": {"start": {"line": line, "character": start}, "end": {"line": line, "character": end}},
        "context": {"diagnostics": context_diags, "triggerKind": 1},
    });
    let result = match o.server.request("textDocument/codeAction", params).await {
        Ok(v) => v,
        Err(e) => return Err(rpc_error(pool, &o.server, "textDocument/codeAction", e).await),
    };
    let resolvable =
        o.server.capabilities["codeActionProvider"]["resolveProvider"].as_bool() == Some(true);
    let mut actions = Vec::new();
    for (i, a) in result
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        // A bare Command has a string `command`; a CodeAction has a title and maybe an edit.
        if a["command"].is_string() {
            actions.push(json!({"title": a["title"], "command": a["command"], "edits": []}));
            continue;
        }
        let mut a = a;
        if a.get("edit").is_none()
            && resolvable
            && i < 20
            && let Ok(resolved) = o.server.request("codeAction/resolve", a.clone()).await
        {
            a = resolved;
        }
        let edits = match a.get("edit") {
            Some(e) => edits_json(&o.server, policy, e).await,
            None => Vec::new(),
        };
        let mut entry = json!({"title": a["title"], "kind": a["kind"], "preferred": a["isPreferred"].as_bool().unwrap_or(false), "edits": edits});
        if let Some(c) = a["command"]["command"].as_str() {
            entry["command"] = json!(c);
        }
        actions.push(entry);
    }
    let text = if actions.is_empty() {
        format!("no code actions at {}:{}", o.rel, line + 1)
    } else {
        actions
            .iter()
            .map(|a| {
                format!(
                    "{}{} ({} edits)",
                    a["title"].as_str().unwrap_or(""),
                    if a["preferred"] == true {
                        " [preferred]"
                    } else {
                        ""
                    },
                    a["edits"].as_array().map(Vec::len).unwrap_or(0)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok((json!({"actions": actions, "count": actions.len()}), text))
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
