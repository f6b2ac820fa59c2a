//! `file_move` and `file_delete`.
//!
//! Both act on the directory entry itself: a symbolic link is moved or removed, never the
//! file it points to (the parent directory is resolved through the policy, the final name is not).
//! They act through the open parent directories (`renameat2`, `unlinkat`), never by path.

use std::path::PathBuf;
use std::sync::Arc;

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::paths::{EntryKind, ParentDir, Resolved};
use kitbag_shared::{
    Access, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult, blocking,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::FilesState;

pub const MOVE_DEF: ToolDef = ToolDef::write(
    "file_move",
    "Move or rename",
    "Move or rename a file or directory, creating the destination's parents; an existing \
     file is replaced only with `overwrite`.",
)
.destructive();

pub const DELETE_DEF: ToolDef = ToolDef::write(
    "file_delete",
    "Delete",
    "Delete a file, a symlink (not its target), or with `recursive: true` a directory tree; \
     not the root.",
)
.destructive()
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveParams {
    pub source: String,
    /// Full new path, not a directory to move into.
    pub destination: String,
    #[serde(default)]
    pub overwrite: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct MoveResult {
    pub source: String,
    pub destination: String,
    /// An existing destination file was replaced.
    pub overwritten: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    pub path: String,
    #[serde(default)]
    pub recursive: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct DeleteResult {
    pub path: String,
    /// What was deleted: file, symlink or directory.
    pub kind: String,
}

pub async fn move_entry(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: MoveParams,
) -> ToolResult<Reply<MoveResult>> {
    let (source, destination) = (p.source.clone(), p.destination.clone());
    let pol = policy.clone();
    let (src, src_entry, planned) = blocking(move || {
        let (src, src_entry) =
            pol.entry_parent(&source, "source", Access::Write, Parents::MustExist)?;
        // Checked before the destination's parents are made, so a refused move creates nothing.
        let planned = pol.resolve_entry(&destination, "destination", Access::Write)?;
        Ok((src, src_entry, planned))
    })
    .await?;
    if planned.abs.starts_with(&src.abs) && planned.abs != src.abs {
        return Err(ToolError::invalid_field(
            "destination",
            "cannot move a directory into itself",
        ));
    }
    let _guard = state
        .locks
        .lock_many(&[src.abs.clone(), planned.abs.clone()])
        .await?;
    // Stat, making parents and rename wait on the disk: off the async threads.
    blocking(move || move_locked(&state, &policy, src, src_entry, p)).await
}

fn move_locked(
    state: &FilesState,
    policy: &PathPolicy,
    src: Resolved,
    src_entry: ParentDir,
    p: MoveParams,
) -> ToolResult<Reply<MoveResult>> {
    let src_meta = src_entry
        .stat()
        .and_then(|m| m.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| ToolError::io(&src.rel, &e))?;
    let (dst, dst_entry) = policy.entry_parent(
        &p.destination,
        "destination",
        Access::Write,
        Parents::Create,
    )?;
    let mut overwritten = false;
    if let Some(dmeta) = dst_entry.stat().map_err(|e| ToolError::io(&dst.rel, &e))? {
        if src.abs == dst.abs {
            return Err(ToolError::new(
                ErrorCode::NoChange,
                "source and destination are the same path",
            ));
        }
        if !p.overwrite.unwrap_or(false) {
            return Err(exists(&dst.rel));
        }
        if dmeta.is_dir() || src_meta.is_dir() {
            return Err(ToolError::invalid_field(
                "overwrite",
                "only a file can replace a file; a directory is never overwritten",
            ));
        }
        overwritten = true;
    }
    // The files that move, by where they are and where they go (a directory's one by one).
    let mut journal = Recorder::begin(policy, "file_move");
    let moving: Vec<(PathBuf, PathBuf)> = if src_meta.is_dir() {
        journal
            .before_tree(&src.abs)
            .into_iter()
            .filter_map(|f| {
                let to = dst.abs.join(f.strip_prefix(&src.abs).ok()?);
                Some((f, to))
            })
            .collect()
    } else {
        journal.before(&src.abs, Content::At(&src_entry));
        vec![(src.abs.clone(), dst.abs.clone())]
    };
    for (_, to) in &moving {
        if to == &dst.abs {
            journal.before(to, Content::At(&dst_entry));
        } else {
            journal.before(to, Content::Absent);
        }
    }
    // Without an approved overwrite the kernel refuses to replace anything (RENAME_NOREPLACE),
    // so an entry appearing after the check above is never clobbered.
    src_entry
        .rename_to(&dst_entry, overwritten)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => exists(&dst.rel),
            _ => ToolError::io(&src.rel, &e),
        })?;
    for (from, to) in &moving {
        journal.after(from, Content::Absent);
        journal.after_at(to);
    }
    journal.finish();
    state.rename(&src.abs, &dst.abs);
    let text = format!(
        "moved {} → {}{}",
        src.rel,
        dst.rel,
        if overwritten { " (replaced)" } else { "" }
    );
    Ok(Reply::new(
        MoveResult {
            source: src.rel,
            destination: dst.rel,
            overwritten,
        },
        text,
    ))
}

fn exists(rel: &str) -> ToolError {
    ToolError::new(
        ErrorCode::FileExists,
        format!("{rel}: already exists; set overwrite: true to replace it"),
    )
    .with_detail(json!({ "field": "destination" }))
}

pub async fn delete(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: DeleteParams,
) -> ToolResult<Reply<DeleteResult>> {
    let path = p.path.clone();
    let pol = policy.clone();
    let (r, entry) =
        blocking(move || pol.entry_parent(&path, "path", Access::Write, Parents::MustExist))
            .await?;
    let _guard = state.locks.lock(&r.abs).await?;
    // A recursive delete can take long: off the async threads.
    blocking(move || delete_locked(&state, &policy, r, entry, p)).await
}

fn delete_locked(
    state: &FilesState,
    policy: &PathPolicy,
    r: Resolved,
    entry: ParentDir,
    p: DeleteParams,
) -> ToolResult<Reply<DeleteResult>> {
    let meta = entry
        .stat()
        .and_then(|m| m.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| ToolError::io(&r.rel, &e))?;
    let mut journal = Recorder::begin(policy, "file_delete");
    let gone = match meta.kind {
        EntryKind::Dir if p.recursive.unwrap_or(false) => journal.before_tree(&r.abs),
        EntryKind::File => {
            journal.before(&r.abs, Content::At(&entry));
            vec![r.abs.clone()]
        }
        // Links and special files: kitbag never wrote them, a restore never makes them.
        _ => Vec::new(),
    };
    let kind = match meta.kind {
        EntryKind::Symlink => {
            entry.remove_file().map_err(|e| ToolError::io(&r.rel, &e))?;
            "symlink"
        }
        EntryKind::Dir => {
            if !p.recursive.unwrap_or(false) {
                return Err(ToolError::new(
                    ErrorCode::InvalidParams,
                    format!(
                        "{}: is a directory; set recursive: true to delete it and everything in it",
                        r.rel
                    ),
                )
                .with_detail(json!({ "field": "recursive" })));
            }
            // Walks by descriptors: nothing under the directory is looked up by path again.
            entry
                .remove_dir_all()
                .map_err(|e| ToolError::io(&r.rel, &e))?;
            "directory"
        }
        EntryKind::File | EntryKind::Other => {
            entry.remove_file().map_err(|e| ToolError::io(&r.rel, &e))?;
            "file"
        }
    };
    for f in &gone {
        journal.after(f, Content::Absent);
    }
    journal.finish();
    state.forget(&r.abs);
    let text = format!("deleted {kind} {}", r.rel);
    Ok(Reply::new(
        DeleteResult {
            path: r.rel,
            kind: kind.into(),
        },
        text,
    ))
}
