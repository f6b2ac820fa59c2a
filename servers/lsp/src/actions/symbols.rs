//! symbols: a document's outline (flattened, `Outer.Inner` containers) or a workspace
//! search by name.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{Access, PathPolicy, ToolResult};
use serde_json::{Value, json};

use super::{Answer, ask, lsp_position, server_of, unsupported_unless};
use crate::result::{LspResult, Symbol, page};
use crate::tool::{LspParams, Scope, need, open};
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::text::{Lines, path_to_uri, uri_to_path};

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
    kitbag_lsp_client::ready::project_loaded(
        &server,
        "workspace symbols",
        kitbag_lsp_client::ready::LOAD_WAIT,
    )
    .await?;
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
    let (shown, mut pg) = page(all, p, 50);
    let mut result = LspResult::new(p.action);
    let shown = pg.fit(&result, shown);
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
    result.symbols = Some(shown);
    pg.mark(&mut result, &mut text);
    if pg.total == 0 {
        text.push("no symbols found".into());
    }
    Ok((result, text.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
