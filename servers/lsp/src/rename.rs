//! `rename`: ask the server for the workspace edit, check every target file is writable
//! for the caller, then write them all atomically (or none). `rename_file`: the same for
//! the edits a file move asks for, with the move itself in the same all-or-nothing step.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::{Access, ErrorCode, Parents, PathPolicy, Resolved, ToolError, ToolResult};
use serde_json::{Value, json};
use xxhash_rust::xxh3::xxh3_64;

use crate::actions::Answer;
use crate::result::{FileChange, LspResult};
use crate::tool::{LspParams, need, open, position, rpc_error};
use kitbag_lsp_client::check::{Before, Checker, EditDiagnostics};
use kitbag_lsp_client::edits::TextEdit;
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::rpc::RpcError;
use kitbag_lsp_client::text::{Lines, path_to_uri};
use std::time::Duration;

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
    kitbag_lsp_client::ready::project_loaded(
        server,
        "a rename",
        kitbag_lsp_client::ready::LOAD_WAIT,
    )
    .await?;
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
            Err(RpcError::Server { message, .. }) => return Err(not_possible(message)),
            Err(e) => return Err(rpc_error(pool, server, "textDocument/prepareRename", e).await),
        }
    }
    let mut params = tdp;
    params["newName"] = json!(new_name);
    let edit = match server.request("textDocument/rename", params).await {
        Ok(Value::Null) => return Err(not_possible("the server found nothing to rename".into())),
        Ok(v) => v,
        Err(RpcError::Server { message, .. }) => return Err(not_possible(message)),
        Err(e) => return Err(rpc_error(pool, server, "textDocument/rename", e).await),
    };
    let files =
        kitbag_lsp_client::edits::files_of(&edit).map_err(|e| not_possible(e.to_string()))?;
    if files.is_empty() {
        return Err(not_possible("the server returned no edits".into()));
    }
    let planned = plan(server, policy, &files, "the rename").await?;
    let total: usize = planned.iter().map(|p| p.edits).sum();
    let changes: Vec<FileChange> = planned
        .iter()
        .map(|p| FileChange {
            path: policy.display(&p.file),
            edits: p.edits,
        })
        .collect();
    let edited: Vec<PathBuf> = planned.iter().map(|p| p.file.clone()).collect();
    let before = check_before(pool, p, &edited).await;
    let writes: Vec<(PathBuf, Vec<u8>)> = planned.into_iter().map(|p| (p.file, p.new)).collect();
    write_all(policy, writes).await?;
    // Tell the server about the new text right away.
    server.sync(&[]).await?;
    let checked = check_after(pool, before, &[], policy).await;
    let mut text = format!(
        "renamed to `{new_name}`: {total} edits in {} files\n{}",
        changes.len(),
        changes
            .iter()
            .map(|c| format!("  {} ({} edits)", c.path, c.edits))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut result = LspResult {
        total_edits: Some(total),
        files_changed: Some(files.len()),
        ..LspResult::new(p.action)
    };
    with_check(&mut result, &mut text, checked);
    list_changes(&mut result, changes);
    Ok((result, text))
}

/// The state before a write of `files`, unless the call said `check: false`.
async fn check_before(
    pool: &Arc<Pool>,
    p: &LspParams,
    files: &[PathBuf],
) -> Option<(Before, Duration)> {
    let wait = p.check_wait()?;
    Some((Checker::new(pool.clone()).before(files, wait).await, wait))
}

/// What the write introduced and fixed; `moved`: (path before, path after) of a moved file.
async fn check_after(
    pool: &Arc<Pool>,
    before: Option<(Before, Duration)>,
    moved: &[(PathBuf, PathBuf)],
    policy: &PathPolicy,
) -> Option<EditDiagnostics> {
    let (before, wait) = before?;
    Some(
        Checker::new(pool.clone())
            .after(before, moved, policy, wait)
            .await,
    )
}

/// The check's outcome into the answer and its text. Its room is kept first: the list of
/// changed files is cut to what fits after it.
fn with_check(result: &mut LspResult, text: &mut String, checked: Option<EditDiagnostics>) {
    if let Some(d) = &checked {
        text.push('\n');
        text.push_str(&d.text());
    }
    result.edit_diagnostics = checked;
}

/// Write every file of a rename all-or-nothing, each through its directory opened beneath
/// the root — never by its path string again: a directory swapped for a link meanwhile is
/// refused, not followed.
async fn write_all(policy: &PathPolicy, writes: Vec<(PathBuf, Vec<u8>)>) -> ToolResult<()> {
    let beneath = policy.clone();
    kitbag_shared::blocking(move || {
        let not_applied = |e: std::io::Error| {
            ToolError::new(
                ErrorCode::IoError,
                format!("rename not applied (no file changed): {e}"),
            )
        };
        let mut targets = Vec::with_capacity(writes.len());
        let mut files = Vec::with_capacity(writes.len());
        for (file, bytes) in writes {
            let dir = beneath
                .parent_real(&file, Parents::MustExist)
                .map_err(not_applied)?;
            targets.push((dir, bytes));
            files.push(file);
        }
        let mut journal = Recorder::begin(&beneath, "lsp_rename");
        for (file, (dir, _)) in files.iter().zip(&targets) {
            journal.before(file, Content::At(dir));
        }
        kitbag_shared::atomic::write_all_atomic_at(&targets).map_err(not_applied)?;
        for (file, (_, bytes)) in files.iter().zip(&targets) {
            journal.after(file, Content::Bytes(bytes));
        }
        journal.finish();
        Ok(())
    })
    .await
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
    refuse_existing(policy, &to)?;
    let o = open(pool, policy, path).await?;
    let server = &o.server;
    kitbag_lsp_client::ready::project_loaded(
        server,
        "a file rename",
        kitbag_lsp_client::ready::LOAD_WAIT,
    )
    .await?;
    let (old_uri, new_uri) = (path_to_uri(&from.abs), path_to_uri(&to.abs));
    let supports = !server.capabilities["workspace"]["fileOperations"]["willRename"].is_null();
    let files = if supports {
        will_rename_edits(pool, server, &from, &old_uri, &new_uri).await?
    } else {
        BTreeMap::new()
    };
    let planned = plan(server, policy, &files, &format!("moving {}", from.rel)).await?;
    let total: usize = planned.iter().map(|p| p.edits).sum();
    let mut edited: Vec<PathBuf> = planned.iter().map(|p| p.file.clone()).collect();
    edited.push(from.abs.clone());
    let mv = Move::new(policy, &from, &to, planned)?;
    let changes = mv.changes.clone();
    let before = check_before(pool, p, &edited).await;
    apply_move(policy, mv).await?;
    let _ = server
        .rpc
        .notify(
            "workspace/didRenameFiles",
            json!({"files": [{"oldUri": old_uri, "newUri": new_uri}]}),
        )
        .await;
    // The old document is gone from disk: sync closes it and opens the new one.
    server.sync(std::slice::from_ref(&to.abs)).await?;
    let checked = check_after(pool, before, &[(from.abs.clone(), to.abs.clone())], policy).await;
    let mut text = format!("moved {} → {}", from.rel, to.rel);
    if supports {
        text.push_str(&format!(
            "; {total} edits in {} files{}",
            changes.len(),
            changes
                .iter()
                .map(|c| format!("\n  {} ({} edits)", c.path, c.edits))
                .collect::<String>()
        ));
    } else {
        text.push_str(&format!(
            "; the {} language server does not update references on file renames",
            server.lang.name
        ));
    }
    let mut result = LspResult {
        from: Some(from.rel),
        to: Some(to.rel),
        files_changed: Some(changes.len()),
        total_edits: Some(total),
        references_updated: Some(supports),
        ..LspResult::new(p.action)
    };
    with_check(&mut result, &mut text, checked);
    list_changes(&mut result, changes);
    Ok((result, text))
}

/// The files written, held to the result budget: past it the list stops (`truncated`;
/// `files_changed` and `total_edits` count them all, and the text names every one).
fn list_changes(result: &mut LspResult, changes: Vec<FileChange>) {
    let (changes, cut) = crate::result::within_budget(result, changes);
    result.truncated = cut.then_some(true);
    result.changes = Some(changes);
}

/// `file_exists` when the destination is taken. Looked up through the destination's
/// directory opened beneath the root; the move itself refuses to replace whatever appears
/// there later (`RENAME_NOREPLACE`-like `linkat`), so this check only gives the early,
/// clear answer.
fn refuse_existing(policy: &PathPolicy, to: &Resolved) -> ToolResult<()> {
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
    Ok(())
}

/// The edits the server asks for when a file moves (`workspace/willRenameFiles`).
async fn will_rename_edits(
    pool: &Pool,
    server: &Arc<Server>,
    from: &Resolved,
    old_uri: &str,
    new_uri: &str,
) -> ToolResult<BTreeMap<PathBuf, Vec<TextEdit>>> {
    let params = json!({"files": [{"oldUri": old_uri, "newUri": new_uri}]});
    match server.request("workspace/willRenameFiles", params).await {
        Ok(Value::Null) => Ok(BTreeMap::new()),
        Ok(edit) => kitbag_lsp_client::edits::files_of(&edit).map_err(|why| {
            ToolError::new(
                ErrorCode::RenameNotPossible,
                format!("cannot rename {}: {why}", from.rel),
            )
        }),
        Err(e) => Err(rpc_error(pool, server, "workspace/willRenameFiles", e).await),
    }
}

/// What a file move writes: the moved file's bytes (edited or not) for its new path, the
/// other edited files in place, and their originals to put back if removing the old file
/// fails.
struct Move {
    src: PathBuf,
    dest: PathBuf,
    moved: Vec<u8>,
    writes: Vec<(PathBuf, Vec<u8>)>,
    originals: Vec<(PathBuf, Vec<u8>)>,
    changes: Vec<FileChange>,
}

impl Move {
    fn new(
        policy: &PathPolicy,
        from: &Resolved,
        to: &Resolved,
        planned: Vec<Planned>,
    ) -> ToolResult<Move> {
        let mut mv = Move {
            src: from.abs.clone(),
            dest: to.abs.clone(),
            moved: Vec::new(),
            writes: Vec::new(),
            originals: Vec::new(),
            changes: Vec::new(),
        };
        let mut moved_bytes = None;
        for p in planned {
            if p.file == from.abs {
                mv.changes.push(FileChange {
                    path: to.rel.clone(),
                    edits: p.edits,
                });
                moved_bytes = Some(p.new);
            } else {
                mv.changes.push(FileChange {
                    path: policy.display(&p.file),
                    edits: p.edits,
                });
                mv.originals.push((p.file.clone(), p.old));
                mv.writes.push((p.file, p.new));
            }
        }
        mv.moved = match moved_bytes {
            Some(b) => b,
            None => policy
                .open_real_read(&from.abs)
                .and_then(kitbag_lsp_client::pool::read_all)
                .map_err(|e| ToolError::io(&from.rel, &e))?,
        };
        Ok(mv)
    }
}

/// Create the new file (never clobbering), write the edited files all-or-nothing, then
/// remove the old file — undoing the first two if that fails. Every file is acted on
/// through its directory opened beneath the root, never by its path string again: a
/// directory swapped for a link meanwhile is refused, not followed.
async fn apply_move(policy: &PathPolicy, mv: Move) -> ToolResult<()> {
    let beneath = policy.clone();
    kitbag_shared::blocking(move || {
        let not_applied = |e: std::io::Error| {
            ToolError::new(
                ErrorCode::IoError,
                format!("rename_file not applied (no file changed): {e}"),
            )
        };
        let src_dir = beneath
            .parent_real(&mv.src, Parents::MustExist)
            .map_err(not_applied)?;
        let dest_dir = beneath
            .parent_real(&mv.dest, Parents::Create)
            .map_err(not_applied)?;
        let mut targets = Vec::with_capacity(mv.writes.len());
        let mut undo = Vec::with_capacity(mv.originals.len());
        let mut files = Vec::with_capacity(mv.writes.len());
        for (file, bytes) in mv.writes {
            let dir = beneath
                .parent_real(&file, Parents::MustExist)
                .map_err(not_applied)?;
            targets.push((dir, bytes));
            files.push(file);
        }
        for (file, bytes) in mv.originals {
            let dir = beneath
                .parent_real(&file, Parents::MustExist)
                .map_err(not_applied)?;
            undo.push((dir, bytes));
        }
        let mut journal = Recorder::begin(&beneath, "lsp_rename_file");
        journal.before(&mv.src, Content::At(&src_dir));
        journal.before(&mv.dest, Content::Absent);
        for (file, (dir, _)) in files.iter().zip(&targets) {
            journal.before(file, Content::At(dir));
        }
        kitbag_shared::atomic::create_new_at(&dest_dir, &mv.moved).map_err(not_applied)?;
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
        journal.after(&mv.src, Content::Absent);
        journal.after(&mv.dest, Content::Bytes(&mv.moved));
        for (file, (_, bytes)) in files.iter().zip(&targets) {
            journal.after(file, Content::Bytes(bytes));
        }
        journal.finish();
        Ok(())
    })
    .await
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
    server: &Server,
    policy: &PathPolicy,
    files: &BTreeMap<PathBuf, Vec<TextEdit>>,
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
            .and_then(kitbag_lsp_client::pool::read_all)
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
        let new =
            kitbag_lsp_client::edits::apply(&lines, edits, server.encoding).map_err(|why| {
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
