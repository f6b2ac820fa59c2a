//! The read actions of `code_lsp`: each sends its LSP request and turns the answer into
//! root-relative paths, 1-based lines, character columns and previews — one module per
//! kind of answer ([`server`]: status, reload, capabilities and raw requests; [`diagnose`];
//! [`navigate`]: definitions and references; [`hover`]; [`symbols`]; [`code_actions`]).
//! What they share is here.

mod code_actions;
mod diagnose;
mod hover;
mod navigate;
mod server;
mod symbols;

use std::sync::Arc;

use kitbag_shared::{Access, ErrorCode, PathPolicy, ToolError, ToolResult};
use serde_json::{Value, json};

use crate::result::LspResult;
use crate::tool::{
    Action, LspParams, Opened, language_for, language_named, need, open, position, rpc_error,
};
use kitbag_lsp_client::config::LanguageConfig;
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::text::path_to_uri;

pub use code_actions::{code_actions, edit_entries};
pub use diagnose::{MAX_DIR_FILES, diagnostics};
pub use hover::{MAX_HOVER_CHARS, hover};
pub use navigate::{goto, locations, references};
pub use server::{capabilities, raw_request, reload, status, text_page};
pub use symbols::{symbol_kind, symbols};

/// An action's answer: the structured result and the text for a model to read.
pub type Answer = (LspResult, String);

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

/// The (line, code unit) at `v` (an LSP `Position`), 0 where missing.
fn lsp_position(v: &Value) -> (usize, usize) {
    (
        v["line"].as_u64().unwrap_or(0) as usize,
        v["character"].as_u64().unwrap_or(0) as usize,
    )
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
