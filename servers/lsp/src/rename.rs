//! `rename`: ask the server for the workspace edit, check every target file is writable
//! for the caller, then write them all atomically (or none).

use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{Access, ErrorCode, PathPolicy, ToolError, ToolResult};
use serde_json::{Value, json};
use xxhash_rust::xxh3::xxh3_64;

use crate::actions::Answer;
use crate::pool::Pool;
use crate::text::{Lines, path_to_uri};
use crate::tool::{LspParams, need, open, position, rpc_error};

pub async fn rename(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let new_name = need(&p.new_name, "new_name", "required")?;
    let o = open(pool, policy, path).await?;
    let server = &o.server;
    if !server.has("renameProvider") {
        return Err(ToolError::new(
            ErrorCode::UnsupportedByAdapter,
            format!("the {} language server cannot rename", server.lang.name),
        )
        .with_detail(json!({"capability": "renameProvider"})));
    }
    let (line, ch) = position(&o.lines, p, p.action)?;
    let units = o.lines.to_units(line, ch, server.encoding);
    let tdp = json!({"textDocument": {"uri": path_to_uri(&o.abs)},
        "position": {"line": line, "character": units}});
    let not_possible = |why: String| {
        ToolError::new(
            ErrorCode::RenameNotPossible,
            format!("cannot rename at {}:{}:{}: {why}", o.rel, line + 1, ch),
        )
    };
    if server.capabilities["renameProvider"]["prepareProvider"].as_bool() == Some(true) {
        match server
            .request("textDocument/prepareRename", tdp.clone())
            .await
        {
            Ok(Value::Null) => {
                return Err(not_possible("there is no renameable symbol here".into()));
            }
            Ok(_) => {}
            Err(crate::rpc::RpcError::Server { message, .. }) => return Err(not_possible(message)),
            Err(e) => return Err(rpc_error(pool, server, "textDocument/prepareRename", e).await),
        }
    }
    let mut params = tdp;
    params["newName"] = json!(new_name);
    let edit = match server.request("textDocument/rename", params).await {
        Ok(Value::Null) => return Err(not_possible("the server found nothing to rename".into())),
        Ok(v) => v,
        Err(crate::rpc::RpcError::Server { message, .. }) => return Err(not_possible(message)),
        Err(e) => return Err(rpc_error(pool, server, "textDocument/rename", e).await),
    };
    let files = crate::edits::files_of(&edit).map_err(not_possible)?;
    if files.is_empty() {
        return Err(not_possible("the server returned no edits".into()));
    }
    // Every target must be writable for the caller before anything is written.
    let outside: Vec<String> = files
        .keys()
        .filter(|f| !policy.allows(f, Access::Write))
        .map(|f| policy.display(f))
        .collect();
    if !outside.is_empty() {
        return Err(ToolError::new(
            ErrorCode::RenameScopeExceedsCage,
            format!(
                "the rename would change {} file(s) outside your writable mounts: {}; nothing was changed",
                outside.len(),
                outside.join(", ")
            ),
        )
        .with_detail(json!({"files": outside})));
    }
    // The edits are positions in the text the server saw; refuse if a file moved on.
    let seen: std::collections::HashMap<PathBuf, u64> = server
        .docs
        .lock()
        .await
        .iter()
        .map(|(p, d)| (p.clone(), d.hash))
        .collect();
    let mut writes: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut changes = Vec::new();
    let mut total = 0;
    for (file, edits) in &files {
        let bytes = std::fs::read(file).map_err(|e| ToolError::io(&policy.display(file), &e))?;
        if let Some(h) = seen.get(file)
            && *h != xxh3_64(&bytes)
        {
            return Err(ToolError::new(
                ErrorCode::FileChangedSinceRead,
                format!(
                    "{} changed while the rename was computed; nothing was changed — call again",
                    policy.display(file)
                ),
            ));
        }
        let lines = Lines::new(String::from_utf8_lossy(&bytes).into_owned());
        let new = crate::edits::apply(&lines, edits, server.encoding).map_err(not_possible)?;
        total += edits.len();
        changes.push(json!({"path": policy.display(file), "edits": edits.len()}));
        writes.push((file.clone(), new.into_bytes()));
    }
    let written = writes.clone();
    kitbag_shared::blocking(move || {
        kitbag_shared::atomic::write_all_atomic(&written, false).map_err(|e| {
            ToolError::new(
                ErrorCode::IoError,
                format!("rename not applied (no file changed): {e}"),
            )
        })
    })
    .await?;
    // Tell the server about the new text right away.
    server.sync(&[]).await?;
    let text = format!(
        "renamed to `{new_name}`: {total} edits in {} files\n{}",
        changes.len(),
        changes
            .iter()
            .map(|c| format!(
                "  {} ({} edits)",
                c["path"].as_str().unwrap_or(""),
                c["edits"]
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok((
        json!({"changes": changes, "total_edits": total, "files_changed": files.len()}),
        text,
    ))
}
