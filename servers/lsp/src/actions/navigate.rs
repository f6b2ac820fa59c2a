//! definition, type_definition, implementation and references: locations as
//! root-relative paths, 1-based lines, characters and the line's text.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{Access, PathPolicy, ToolResult};
use serde_json::{Value, json};

use super::{Answer, ask, at_position, lsp_position, unsupported_unless};
use crate::result::{Location, LspResult, page};
use crate::tool::{Action, LspParams};
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::text::{Lines, uri_to_path};

/// The default page of definitions, type definitions and implementations: every one (the
/// result budget still cuts it).
const ALL: u64 = 10_000;

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
    if p.action == Action::Implementation {
        // Implementations may be anywhere in the project.
        kitbag_lsp_client::ready::project_loaded(
            &o.server,
            "implementations",
            kitbag_lsp_client::ready::LOAD_WAIT,
        )
        .await?;
    }
    let answer = ask(pool, &o.server, method, tdp).await?;
    let all = locations(&o.server, policy, &answer).await;
    // All of them, unless the caller pages (`limit`/`offset`) or the budget cuts the list.
    let (entries, mut pg) = page(all, p, ALL);
    let mut result = LspResult::new(p.action);
    let entries = pg.fit(&result, entries);
    let mut text = location_text(&entries);
    if pg.total == 0 {
        text.push(format!("no {what} found at {}:{}:{}", o.rel, line + 1, ch));
    }
    pg.mark(&mut result, &mut text);
    match p.action {
        Action::TypeDefinition => result.type_definitions = Some(entries),
        Action::Implementation => result.implementations = Some(entries),
        _ => result.definitions = Some(entries),
    }
    Ok((result, text.join("\n")))
}

pub async fn references(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let (o, mut tdp, _) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, "referencesProvider", p.action)?;
    kitbag_lsp_client::ready::project_loaded(
        &o.server,
        "references",
        kitbag_lsp_client::ready::LOAD_WAIT,
    )
    .await?;
    tdp["context"] = json!({"includeDeclaration": p.include_declaration.unwrap_or(false)});
    let answer = ask(pool, &o.server, "textDocument/references", tdp).await?;
    let all = locations(&o.server, policy, &answer).await;
    let (shown, mut pg) = page(all, p, 100);
    let mut result = LspResult::new(p.action);
    let shown = pg.fit(&result, shown);
    let mut text = location_text(&shown);
    result.references = Some(shown);
    pg.mark(&mut result, &mut text);
    if pg.total == 0 {
        text.push("no references found".into());
    }
    Ok((result, text.join("\n")))
}
