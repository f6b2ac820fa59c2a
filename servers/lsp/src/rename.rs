//! `rename`: ask the server for the workspace edit, check every target file is writable
//! for the caller, then write them all atomically (or none).

use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{Access, ErrorCode, Parents, PathPolicy, ToolError, ToolResult};
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
    let planned = plan(server, policy, &files, "the rename").await?;
    let total: usize = planned.iter().map(|p| p.edits).sum();
    let changes: Vec<Value> = planned
        .iter()
        .map(|p| json!({"path": policy.display(&p.file), "edits": p.edits}))
        .collect();
    let writes: Vec<(PathBuf, Vec<u8>)> = planned.into_iter().map(|p| (p.file, p.new)).collect();
    let beneath = policy.clone();
    kitbag_shared::blocking(move || {
        let not_applied = |e: std::io::Error| {
            ToolError::new(
                ErrorCode::IoError,
                format!("rename not applied (no file changed): {e}"),
            )
        };
        // Each file is written through its directory opened beneath the root, never by its
        // path string again: a directory swapped for a link meanwhile is refused, not followed.
        let mut targets = Vec::with_capacity(writes.len());
        for (file, bytes) in writes {
            let dir = beneath
                .parent_real(&file, kitbag_shared::paths::Parents::MustExist)
                .map_err(not_applied)?;
            targets.push((dir, bytes));
        }
        kitbag_shared::atomic::write_all_atomic_at(&targets).map_err(not_applied)
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

/// `rename_file`: move a file and apply the edits the server asks for on the way
/// (`workspace/willRenameFiles`: imports, `mod` declarations). The edits and the new file
/// are written all-or-nothing; then the old file is removed.
pub async fn rename_file(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let new_path = need(&p.new_path, "new_path", "required")?;
    let from = policy.resolve(path, "path", Access::Write)?;
    let to = policy.resolve(new_path, "new_path", Access::Write)?;
    // Looked up through the destination's directory opened beneath the root; the move
    // itself refuses to replace whatever appears there later (`RENAME_NOREPLACE`-like
    // `linkat`), so this check only gives the early, clear answer.
    let exists = match policy.parent_real(&to.abs, Parents::MustExist) {
        Ok(dir) => dir
            .stat()
            .map_err(|e| ToolError::io(&to.rel, &e))?
            .is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(ToolError::io(&to.rel, &e)),
    };
    if exists {
        return Err(ToolError::new(
            ErrorCode::FileExists,
            format!("new_path: `{}` already exists; nothing was changed", to.rel),
        )
        .with_detail(json!({"field": "new_path"})));
    }
    let o = open(pool, policy, path).await?;
    let server = &o.server;
    let (old_uri, new_uri) = (path_to_uri(&from.abs), path_to_uri(&to.abs));
    let supports = !server.capabilities["workspace"]["fileOperations"]["willRename"].is_null();
    let mut files = std::collections::BTreeMap::new();
    if supports {
        let params = json!({"files": [{"oldUri": old_uri, "newUri": new_uri}]});
        match server.request("workspace/willRenameFiles", params).await {
            Ok(Value::Null) => {}
            Ok(edit) => {
                files = crate::edits::files_of(&edit).map_err(|why| {
                    ToolError::new(
                        ErrorCode::RenameNotPossible,
                        format!("cannot rename {}: {why}", from.rel),
                    )
                })?;
            }
            Err(e) => {
                return Err(rpc_error(pool, server, "workspace/willRenameFiles", e).await);
            }
        }
    }
    let planned = plan(server, policy, &files, &format!("moving {}", from.rel)).await?;
    // New contents: edited files in place, and the moved file (edited or not) at its
    // new path. Originals are kept to put back if removing the old file fails.
    let total: usize = planned.iter().map(|p| p.edits).sum();
    let mut writes: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut originals: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut changes = Vec::new();
    let mut moved_bytes = None;
    for p in planned {
        if p.file == from.abs {
            changes.push(json!({"path": to.rel, "edits": p.edits}));
            moved_bytes = Some(p.new);
        } else {
            changes.push(json!({"path": policy.display(&p.file), "edits": p.edits}));
            originals.push((p.file.clone(), p.old));
            writes.push((p.file, p.new));
        }
    }
    let moved = match moved_bytes {
        Some(b) => b,
        None => policy
            .open_real_read(&from.abs)
            .and_then(crate::pool::read_all)
            .map_err(|e| ToolError::io(&from.rel, &e))?,
    };
    let (src, dest) = (from.abs.clone(), to.abs.clone());
    let beneath = policy.clone();
    kitbag_shared::blocking(move || {
        let not_applied = |e: std::io::Error| {
            ToolError::new(
                ErrorCode::IoError,
                format!("rename_file not applied (no file changed): {e}"),
            )
        };
        // Every file is acted on through its directory opened beneath the root, never by its
        // path string again: a directory swapped for a link meanwhile is refused, not followed.
        let src_dir = beneath
            .parent_real(&src, Parents::MustExist)
            .map_err(not_applied)?;
        let dest_dir = beneath
            .parent_real(&dest, Parents::Create)
            .map_err(not_applied)?;
        let mut targets = Vec::with_capacity(writes.len());
        let mut undo = Vec::with_capacity(originals.len());
        for (file, bytes) in writes {
            let dir = beneath
                .parent_real(&file, Parents::MustExist)
                .map_err(not_applied)?;
            targets.push((dir, bytes));
        }
        for (file, bytes) in originals {
            let dir = beneath
                .parent_real(&file, Parents::MustExist)
                .map_err(not_applied)?;
            undo.push((dir, bytes));
        }
        kitbag_shared::atomic::create_new_at(&dest_dir, &moved).map_err(not_applied)?;
        if let Err(e) = kitbag_shared::atomic::write_all_atomic_at(&targets) {
            let _ = dest_dir.remove_file();
            return Err(not_applied(e));
        }
        if let Err(e) = src_dir.remove_file() {
            // Undo: the new file goes, the edited files get their old text back.
            let _ = dest_dir.remove_file();
            let _ = kitbag_shared::atomic::write_all_atomic_at(&undo);
            return Err(ToolError::new(
                ErrorCode::IoError,
                format!("could not remove the old file, so nothing was changed: {e}"),
            ));
        }
        Ok(())
    })
    .await?;
    let _ = server
        .rpc
        .notify(
            "workspace/didRenameFiles",
            json!({"files": [{"oldUri": old_uri, "newUri": new_uri}]}),
        )
        .await;
    // The old document is gone from disk: sync closes it and opens the new one.
    server.sync(std::slice::from_ref(&to.abs)).await?;
    let mut text = format!("moved {} → {}", from.rel, to.rel);
    if supports {
        text.push_str(&format!(
            "; {total} edits in {} files{}",
            changes.len(),
            changes
                .iter()
                .map(|c| format!(
                    "\n  {} ({} edits)",
                    c["path"].as_str().unwrap_or(""),
                    c["edits"]
                ))
                .collect::<String>()
        ));
    } else {
        text.push_str(&format!(
            "; the {} language server does not update references on file renames",
            server.lang.name
        ));
    }
    Ok((
        json!({"from": from.rel, "to": to.rel, "changes": changes, "total_edits": total,
            "files_changed": changes.len(), "references_updated": supports}),
        text,
    ))
}

/// One file of a workspace edit: its text now and after the edit.
struct Planned {
    file: PathBuf,
    old: Vec<u8>,
    new: Vec<u8>,
    edits: usize,
}

/// Check every target is writable for the caller and unchanged since the server saw it,
/// then compute each file's new text. Nothing is written here.
async fn plan(
    server: &crate::pool::Server,
    policy: &PathPolicy,
    files: &std::collections::BTreeMap<PathBuf, Vec<crate::edits::TextEdit>>,
    what: &str,
) -> ToolResult<Vec<Planned>> {
    let outside: Vec<String> = files
        .keys()
        .filter(|f| !policy.allows(f, Access::Write))
        .map(|f| policy.display(f))
        .collect();
    if !outside.is_empty() {
        return Err(ToolError::new(
            ErrorCode::RenameScopeExceedsCage,
            format!(
                "{what} would change {} file(s) outside your writable mounts: {}; nothing was changed",
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
    let mut out = Vec::with_capacity(files.len());
    for (file, edits) in files {
        let old = policy
            .open_real_read(file)
            .and_then(crate::pool::read_all)
            .map_err(|e| ToolError::io(&policy.display(file), &e))?;
        if seen.get(file).is_some_and(|h| *h != xxh3_64(&old)) {
            return Err(ToolError::new(
                ErrorCode::FileChangedSinceRead,
                format!(
                    "{} changed while the edit was computed; nothing was changed — call again",
                    policy.display(file)
                ),
            ));
        }
        let lines = Lines::new(String::from_utf8_lossy(&old).into_owned());
        let new = crate::edits::apply(&lines, edits, server.encoding).map_err(|why| {
            ToolError::new(ErrorCode::RenameNotPossible, format!("cannot apply: {why}"))
        })?;
        out.push(Planned {
            file: file.clone(),
            old,
            new: new.into_bytes(),
            edits: edits.len(),
        });
    }
    Ok(out)
}
