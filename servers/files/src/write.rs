//! `file_write` (overwrite after a read) and `file_create` (new files only).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::{FilesState, hash};

pub const WRITE_DEF: ToolDef = ToolDef::write(
    "file_write",
    "Write file",
    "Write a whole file: create it (with parent directories) or overwrite it entirely.\n\
     An existing file must have been read with file_read in this session first, and must not have \
     changed on disk since that read (content hash) — otherwise file_not_read / file_changed_since_read; \
     read it again and retry. Prefer edit_text for changes to part of a file. The write is atomic and \
     keeps the file's permissions. Content is capped (default 10 MB).\n\
     Example: {\"path\": \"src/config.toml\", \"content\": \"[server]\\nport = 8080\\n\"}",
)
.destructive();

pub const CREATE_DEF: ToolDef = ToolDef::write(
    "file_create",
    "Create file",
    "Create a new file (and its parent directories) with the given content. Fails with file_exists if \
     anything already exists at the path — use file_write to overwrite. Atomic: the file appears \
     complete or not at all.\nExample: {\"path\": \"src/util/mod.rs\", \"content\": \"pub mod strings;\\n\"}",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// Root-relative path of the file.
    pub path: String,
    /// The complete new content of the file (UTF-8 text).
    pub content: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteResult {
    /// Root-relative path.
    pub path: String,
    pub bytes_written: u64,
    /// True when the file did not exist before.
    pub created: bool,
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

pub async fn write(
    state: &FilesState,
    policy: &PathPolicy,
    p: WriteParams,
) -> ToolResult<Reply<WriteResult>> {
    check_content(state, &p.content)?;
    let r = policy.resolve(&p.path, "path", Access::Write)?;
    let _guard = state.locks.lock(&r.abs).await?;
    let created = match std::fs::metadata(&r.abs) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{}: is a directory", r.rel),
            ));
        }
        Ok(_) => {
            let Some(recorded) = state.recorded(&r.abs) else {
                return Err(ToolError::new(
                    ErrorCode::FileNotRead,
                    format!(
                        "{}: read the file with file_read before overwriting it",
                        r.rel
                    ),
                )
                .with_detail(json!({ "path": r.rel })));
            };
            let current = std::fs::read(&r.abs).map_err(|e| ToolError::io(&r.rel, &e))?;
            if hash(&current) != recorded {
                return Err(ToolError::new(
                    ErrorCode::FileChangedSinceRead,
                    format!(
                        "{}: the file changed on disk since it was last read; read it again before overwriting",
                        r.rel
                    ),
                )
                .with_detail(json!({ "path": r.rel })));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(ToolError::io(&r.rel, &e)),
    };
    kitbag_shared::atomic::write_atomic(&r.abs, p.content.as_bytes(), true)
        .map_err(|e| ToolError::io(&r.rel, &e))?;
    state.record(&r.abs, p.content.as_bytes());
    let verb = if created { "created" } else { "overwrote" };
    let text = format!("{verb} {} ({} bytes)", r.rel, p.content.len());
    Ok(Reply::new(
        WriteResult {
            path: r.rel,
            bytes_written: p.content.len() as u64,
            created,
        },
        text,
    ))
}

pub async fn create(
    state: &FilesState,
    policy: &PathPolicy,
    p: WriteParams,
) -> ToolResult<Reply<WriteResult>> {
    check_content(state, &p.content)?;
    let r = policy.resolve(&p.path, "path", Access::Write)?;
    let _guard = state.locks.lock(&r.abs).await?;
    let exists = || {
        ToolError::new(
            ErrorCode::FileExists,
            format!("{}: already exists; use file_write to overwrite it", r.rel),
        )
        .with_detail(json!({ "path": r.rel }))
    };
    if std::fs::symlink_metadata(&r.abs).is_ok() {
        return Err(exists());
    }
    create_new_atomic(&r.abs, p.content.as_bytes()).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => exists(),
        _ => ToolError::io(&r.rel, &e),
    })?;
    state.record(&r.abs, p.content.as_bytes());
    let text = format!("created {} ({} bytes)", r.rel, p.content.len());
    Ok(Reply::new(
        WriteResult {
            path: r.rel,
            bytes_written: p.content.len() as u64,
            created: true,
        },
        text,
    ))
}

/// Write a complete temp file, then hard-link it into place: `link` fails if the name
/// exists, so a file created meanwhile by someone else is never clobbered.
fn create_new_atomic(target: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = target.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".kitbag-new-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    let umask = kitbag_shared::atomic::process_umask();
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o666 & !umask))?;
    tmp.as_file().sync_all()?;
    std::fs::hard_link(tmp.path(), target)?;
    drop(tmp); // removes the temp name; the content lives on under `target`
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
