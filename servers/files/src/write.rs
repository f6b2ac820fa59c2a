//! `file_write` (overwrite after a read) and `file_create` (new files only).

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::atomic::{create_new_at, is_exists, write_atomic_at};
use std::sync::Arc;

use kitbag_shared::paths::{ParentDir, Resolved};
use kitbag_shared::{
    Access, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult, blocking,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::FilesState;
use kitbag_lsp_client::check::EditDiagnostics;
use kitbag_lsp_client::feedback;

pub const WRITE_DEF: ToolDef = ToolDef::write(
    "file_write",
    "Write file",
    "Write a whole file, creating it (and parents) or overwriting one read with file_read and \
     unchanged since. Prefer edit_text for partial changes.",
)
.destructive();

pub const CREATE_DEF: ToolDef = ToolDef::write(
    "file_create",
    "Create file",
    "Create a new file and its parent directories; fails with file_exists if the path exists.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    pub path: String,
    /// Complete file content (UTF-8).
    pub content: String,
    /// Report new/fixed diagnostics.
    #[serde(default)]
    pub check: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteResult {
    /// Root-relative path.
    pub path: String,
    pub bytes_written: u64,
    /// True when the file did not exist before.
    pub created: bool,
    /// What the write did to the language server's diagnostics (servers run with --lsp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<EditDiagnostics>,
}

fn check_content(state: &FilesState, content: &str) -> ToolResult<()> {
    if content.len() > state.max_content_bytes {
        return Err(ToolError::invalid_field(
            "content",
            format!(
                "is {} bytes; at most {} bytes are accepted (--max-content-bytes)",
                content.len(),
                state.max_content_bytes
            ),
        ));
    }
    Ok(())
}

/// Resolve `path`'s parent for writing (making missing directories) on the blocking pool.
async fn writable_parent(
    policy: &Arc<PathPolicy>,
    path: &str,
) -> ToolResult<(Resolved, ParentDir)> {
    let (policy, path) = (policy.clone(), path.to_string());
    blocking(move || policy.parent(&path, "path", Access::Write, Parents::Create)).await
}

pub async fn write(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: WriteParams,
) -> ToolResult<Reply<WriteResult>> {
    check_content(&state, &p.content)?;
    // Missing parents are made now: a file under them cannot exist, so it is being created.
    let (r, target) = writable_parent(&policy, &p.path).await?;
    checked_write(state, policy, r, target, p, write_locked).await
}

/// How a write is done once its path is locked: `write_locked` or `create_locked`.
type Locked =
    fn(&FilesState, &PathPolicy, Resolved, ParentDir, String) -> ToolResult<Reply<WriteResult>>;

/// The write under the path's lock, between the edit check's two sides (`--lsp`): the state
/// before is taken first, the one after once the lock is released.
async fn checked_write(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    r: Resolved,
    target: ParentDir,
    p: WriteParams,
    locked: Locked,
) -> ToolResult<Reply<WriteResult>> {
    let pending = feedback::before(
        state.feedback.as_ref(),
        &policy,
        std::slice::from_ref(&r.abs),
        p.check,
    )
    .await;
    let mut reply = {
        let _guard = state.locks.lock(&r.abs).await?;
        // Reading, hashing, fsync and rename wait on the disk: off the async threads.
        let (state, policy) = (state.clone(), policy.clone());
        blocking(move || locked(&state, &policy, r, target, p.content)).await?
    };
    let d: Option<EditDiagnostics> = feedback::after(pending, &policy, &[]).await;
    feedback::append(&mut reply.text, d.as_ref());
    reply.data.diagnostics = d;
    Ok(reply)
}

fn write_locked(
    state: &FilesState,
    policy: &PathPolicy,
    r: Resolved,
    target: ParentDir,
    content: String,
) -> ToolResult<Reply<WriteResult>> {
    let created = match target.stat() {
        Ok(Some(meta)) if meta.is_dir() => {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{}: is a directory", r.rel),
            ));
        }
        Ok(Some(_)) => {
            state.check_read_and_unchanged(&r.abs, &r.rel, || target.read(), "overwriting")?;
            false
        }
        Ok(None) => true,
        Err(e) => return Err(ToolError::io(&r.rel, &e)),
    };
    let mut journal = Recorder::begin(policy, "file_write");
    journal.before(&r.abs, Content::At(&target));
    write_atomic_at(&target, content.as_bytes()).map_err(|e| ToolError::io(&r.rel, &e))?;
    journal.after(&r.abs, Content::Bytes(content.as_bytes()));
    journal.finish();
    state.record(&r.abs, content.as_bytes());
    let verb = if created { "created" } else { "overwrote" };
    let text = format!("{verb} {} ({} bytes)", r.rel, content.len());
    Ok(Reply::new(
        WriteResult {
            path: r.rel,
            bytes_written: content.len() as u64,
            created,
            diagnostics: None,
        },
        text,
    ))
}

pub async fn create(
    state: Arc<FilesState>,
    policy: Arc<PathPolicy>,
    p: WriteParams,
) -> ToolResult<Reply<WriteResult>> {
    check_content(&state, &p.content)?;
    let (r, target) = writable_parent(&policy, &p.path).await?;
    checked_write(state, policy, r, target, p, create_locked).await
}

fn create_locked(
    state: &FilesState,
    policy: &PathPolicy,
    r: Resolved,
    target: ParentDir,
    content: String,
) -> ToolResult<Reply<WriteResult>> {
    let exists = || {
        ToolError::new(
            ErrorCode::FileExists,
            format!("{}: already exists; use file_write to overwrite it", r.rel),
        )
        .with_detail(json!({ "path": r.rel }))
    };
    if target
        .stat()
        .map_err(|e| ToolError::io(&r.rel, &e))?
        .is_some()
    {
        return Err(exists());
    }
    let mut journal = Recorder::begin(policy, "file_create");
    journal.before(&r.abs, Content::Absent);
    // Linked into place: a file created meanwhile by someone else is never clobbered.
    create_new_at(&target, content.as_bytes()).map_err(|e| {
        if is_exists(&e) {
            exists()
        } else {
            ToolError::io(&r.rel, &e)
        }
    })?;
    journal.after(&r.abs, Content::Bytes(content.as_bytes()));
    journal.finish();
    state.record(&r.abs, content.as_bytes());
    let text = format!("created {} ({} bytes)", r.rel, content.len());
    Ok(Reply::new(
        WriteResult {
            path: r.rel,
            bytes_written: content.len() as u64,
            created: true,
            diagnostics: None,
        },
        text,
    ))
}
