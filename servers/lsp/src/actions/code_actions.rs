//! code_actions: what the server offers at a position or on a line, each with the edits
//! it would make — informational, nothing is applied.

use std::sync::Arc;

use kitbag_shared::limits::{RESULT_BUDGET_BYTES, fit_str, json_len};
use kitbag_shared::{PathPolicy, ToolResult};
use serde_json::{Value, json};

use super::{Answer, ask, unsupported_unless};
use crate::result::{CodeAction, Edit, LspResult};
use crate::tool::{Action, LspParams, Opened, need, open, position};
use kitbag_lsp_client::diagnostics;
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::text::path_to_uri;

/// Edits of a WorkspaceEdit as caller-facing `{path, line, character, end_line,
/// end_character, old, new}` entries.
pub async fn edit_entries(server: &Server, policy: &PathPolicy, edit: &Value) -> Vec<Edit> {
    let Ok(files) = kitbag_lsp_client::edits::files_of(edit) else {
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
            edits_total: None,
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
        edits_total: None,
    }
}

const CUT: &str = "… [cut]";

/// Cut `a` to weigh at most `room` bytes when it alone passes it (an edit may replace a
/// whole file): its title to 1 KB, the edits that fit, then the next one with its texts cut
/// to the room left; `edits_total` says how many it has.
pub fn fit_action(a: &mut CodeAction, room: usize) {
    if json_len(&*a) <= room {
        return;
    }
    a.edits_total = Some(a.edits.len());
    a.title = fit_str(&a.title, 1024, CUT).0;
    let edits = std::mem::take(&mut a.edits);
    let mut used = json_len(&*a);
    for mut e in edits {
        let weight = json_len(&e) + 1;
        if used + weight <= room {
            used += weight;
            a.edits.push(e);
            continue;
        }
        // The room left for its two texts: the old one up to half, the new one the rest.
        let left = room.saturating_sub(used + weight - json_len(&e.old) - json_len(&e.new));
        if left > 128 {
            let old_room = json_len(&e.old).min(left / 2);
            e.old = fit_str(&e.old, old_room, CUT).0;
            e.new = fit_str(&e.new, left - old_room, CUT).0;
            a.edits.push(e);
        }
        break;
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
    // All of them, unless the caller pages (`limit`/`offset`) or the budget cuts the list.
    let (actions, mut pg) = crate::result::page(actions, p, 10_000);
    let mut result = LspResult::new(p.action);
    let mut actions = pg.fit(&result, actions);
    // The first alone may pass the budget: it is cut itself.
    if let Some(first) = actions.first_mut() {
        fit_action(
            first,
            RESULT_BUDGET_BYTES.saturating_sub(json_len(&result) + 200),
        );
    }
    let mut text = if actions.is_empty() {
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
    result.actions = Some(actions);
    let mut more = Vec::new();
    pg.mark(&mut result, &mut more);
    for line in more {
        text.push('\n');
        text.push_str(&line);
    }
    Ok((result, text))
}
