//! The actions about the servers themselves: status, reload, capabilities, and raw
//! requests.

use std::sync::Arc;

use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len, within_budget};
use kitbag_shared::{ErrorCode, PathPolicy, ToolError, ToolResult};
use serde_json::Value;

use super::{Answer, language_of, server_of};
use crate::result::{LspResult, ServerInfo, Supports};
use crate::tool::{Action, LspParams, need};
use kitbag_lsp_client::pool::{Pool, Server, ServerStatus};

pub async fn status(pool: &Arc<Pool>) -> ToolResult<Answer> {
    let mut servers = pool.status().await;
    fit_open_files(&mut servers);
    let text = servers
        .iter()
        .map(|s| {
            format!(
                "{}: {}{}{} (restarts {}, {} open files{}){}",
                s.language,
                s.state,
                s.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
                s.uptime_ms
                    .map(|u| format!(" up {:.1}s", u as f64 / 1000.0))
                    .unwrap_or_default(),
                s.restarts,
                s.open_files_count,
                if s.open_files_truncated {
                    format!(", {} listed", s.open_files.len())
                } else {
                    String::new()
                },
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

/// Hold the servers' `open_files` (up to 400 paths each) to the result budget: each server
/// in turn gets an even share of the room left, the first file always.
fn fit_open_files(servers: &mut [ServerStatus]) {
    let lists: Vec<Vec<String>> = servers
        .iter_mut()
        .map(|s| {
            s.open_files_truncated = true;
            std::mem::take(&mut s.open_files)
        })
        .collect();
    // `{"action":"status","servers":[…]}` around them.
    let mut room = RESULT_BUDGET_BYTES.saturating_sub(json_len(&*servers) + 64);
    let mut waiting = lists.iter().filter(|l| !l.is_empty()).count();
    for (s, files) in servers.iter_mut().zip(lists) {
        s.open_files_truncated = false;
        if files.is_empty() {
            continue;
        }
        let share = room / waiting.max(1);
        waiting -= 1;
        // The files that fit in `share` beside a budget's worth less `share`.
        let (kept, cut) = within_budget(RESULT_BUDGET_BYTES.saturating_sub(share), files);
        room = room.saturating_sub(json_len(&kept));
        s.open_files = kept;
        s.open_files_truncated = cut;
    }
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
    let start = p.offset.unwrap_or(0) as usize;
    if start == 0 && json_len(&result) + text.len() + 16 < RESULT_BUDGET_BYTES {
        result.result = Some(answer);
        return Ok((result, text));
    }
    // Longer than the result budget (or paged): the answer's JSON text, a page at a time.
    let room = RESULT_BUDGET_BYTES - json_len(&result) - 80;
    let (page, next) = text_page(&text, start, room);
    let page = page.to_string();
    let mut shown = page.clone();
    if let Some(next) = next {
        result.truncated = Some(true);
        result.next_offset = Some(next);
        shown.push_str(&format!(
            "… [{} of {} bytes; more: offset {next}]",
            next,
            text.len()
        ));
    }
    result.result_text = Some(page);
    Ok((result, shown))
}

/// The part of `text` from byte `start` (moved back to a character boundary) whose JSON
/// string form fits in `room` bytes, and the offset after it when text follows.
pub fn text_page(text: &str, start: usize, room: usize) -> (&str, Option<usize>) {
    let mut start = start.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut used = 2; // the quotes
    let mut end = start;
    for c in text[start..].chars() {
        used += kitbag_shared::limits::escaped_len(c);
        if used > room {
            return (&text[start..end], Some(end));
        }
        end += c.len_utf8();
    }
    (&text[start..], None)
}

fn raw_error(e: kitbag_lsp_client::rpc::RpcError) -> ToolError {
    use kitbag_lsp_client::rpc::RpcError;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A 300 KB answer of quotes, newlines and control characters (before: cut at 256 KB,
    /// ≈ 600 KB serialized): every page fits the room, and the pages put together are the
    /// whole text, nothing lost or repeated.
    #[test]
    fn raw_text_pages_fit_and_join_up() {
        let text: String = "\"é\n\u{1}x".repeat(60_000);
        let (mut at, mut joined, mut pages) = (0, String::new(), 0);
        loop {
            let (page, next) = text_page(&text, at, 39_000);
            assert!(json_len(page) <= 39_000, "{}", json_len(page));
            joined.push_str(page);
            pages += 1;
            match next {
                Some(n) => at = n,
                None => break,
            }
        }
        assert_eq!(joined, text);
        assert!(pages > 5);
    }
}
